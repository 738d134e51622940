"""The HF engine: rollouts with transformers ``generate`` (KV cache on), μ read from the generation logits."""

from __future__ import annotations

import contextlib
import copy
import os
from collections import Counter
from collections.abc import Sequence

import torch

from nbkit.engines.base import LOGPROBS_MODES, Rollout, SamplingConfig, encode_prompt, release_memory
from nbkit.models import models, routing
from nbkit.precision import formats, lm_head
from nbkit.precision import gemm as gemm_policies


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
    Half-precision GEMMs follow ``gemm`` (``nbkit.precision.gemm``: ``auto`` | ``native`` | ``fp32-accumulate``).
    ``format`` (``nbkit.precision.formats``, e.g. ``fp8-e4m3``, ``nvfp4``, ``e8m3``) runs a rollout format: its base
    dtype
    (``dtype`` may be omitted, or must equal it) with its GEMMs quantized; ``format_gemms`` counts them.
    ``fp32_lm_head`` runs the LM head in FP32 with the FP32 weights it was given (``nbkit.precision.lm_head``; the
    engine side of
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
        share_prefix: bool = False,
    ):
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
        evidence (``take_format_gemms``, ``nbkit.precision.formats.audit``)."""
        self.batch_size, self.progress = batch_size, progress
        self.share_prefix = share_prefix
        """Prefill the tokens every prompt of a batch starts with once (``shared_start``), not once per row: the
        same samples up to the order of sums; plain formats of dense models only (a format or MoE routing that
        reads the whole batch keeps the row-by-row prefill). The two prefills run GEMMs of other shapes: under
        ``fp32-accumulate`` (and FP32) they agree to the last bits, but native half kernels may pick another kernel
        per shape and round differently, as GPU kernels do (measured 2026-11-28 on a Xeon with AMX-BF16, BF16
        tiny-arith: log-probs up to 0.06 apart, and one sample in eight seeds' batches drawn otherwise at a near
        tie)."""
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
        moe = routing.is_moe(self.model)
        start = shared_start(prompt_ids) if self.share_prefix and not moe and self.format.name == self.dtype else []
        k = len(start)  # padding goes after the shared start, so its cache serves every row at the same positions
        ids = torch.tensor([start + [pad] * (width - len(p)) + p[k:] for p in prompt_ids], device=self.model.device)
        mask = torch.tensor(
            [[1] * k + [0] * (width - len(p)) + [1] * (len(p) - k) for p in prompt_ids], device=self.model.device
        )
        capture = routing.capture(self.model) if moe else contextlib.nullcontext()
        mu = SampledLogprobs(sampling.logprobs_mode)
        # the engine's own format and GEMM policy, whatever the caller runs
        with gemm_policies.suspended(), formats.policy(self.format, self.gemm, self.model) as mode, capture as rec:
            cache = None
            if k:
                cache = self.model(input_ids=ids[:1, :k], use_cache=True).past_key_values
                cache.batch_repeat_interleave(len(jobs))
            res = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                past_key_values=cache,
                generation_config=gen_cfg,
                logits_processor=mu.processors(sampling),
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


def shared_start(prompt_ids: Sequence[list[int]]) -> list[int]:
    """The longest run of tokens every prompt starts with, leaving each prompt at least one token of its own (the
    first generation step needs one); [] for a single prompt's batch too small to gain (< 2 rows)."""
    if len(prompt_ids) < 2:
        return []
    return list(os.path.commonprefix([list(p) for p in prompt_ids]))[: min(map(len, prompt_ids)) - 1]


def _stop_ids(model, tokenizer) -> set[int]:
    """Token ids that end a response: the tokenizer's eos plus the model's generation eos ids."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    if not ids:
        raise ValueError("the tokenizer and model define no end-of-sequence token")
    return ids
