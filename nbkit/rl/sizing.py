"""A GPU run's micro-batch and vLLM sleep, chosen from the memory estimate (``nbkit.rl.memory``) when it starts.

    gib = device_gib(cfg)                                  # cfg.gpu_memory_gib, else the CUDA device's, else None
    cfg, fit = size(cfg, world_size=4, seq_tokens=10_240, gpu_gib=80, kind="multi_gpu")

``nbkit.rl.run.train`` calls ``for_device`` for every run once the prompts are read (notebooks 03, 04, 05, the PPO
runs, ``nbkit train``): where a GPU's memory is known (``RLConfig.gpu_memory_gib``, else
``torch.cuda.get_device_properties``) the run gets

- ``gradient_accumulation_steps``: at least what the estimate needs for the largest micro-batch that fits, for the
  run's model, its longest prompt + ``max_completion_length`` (the padded length TRL trains on), its algorithm (PPO's critic
  and its AdamW state counted, its minibatches), its launch kind (from ``accelerate launch``'s environment) and the
  GPU's memory. A configured value that asks for more accumulation (a smaller micro-batch) is kept: it is the
  user's cap, e.g. after an out-of-memory error the estimate did not foresee;
- ``vllm_enable_sleep_mode`` (colocated vLLM only): on when the run does not fit with the engine awake or when sleeping
  lets a larger micro-batch fit; a configured ``True`` is kept.

Even one sequence per micro-batch that does not fit is refused before the model loads, with the estimate's terms.
Where no GPU memory is known (the CPU path) nothing changes. ``nbkit plan`` prints commands sized by ``size`` too.

Why ours: accelerate's ``find_executable_batch_size`` halves a batch after each out-of-memory error, i.e. once the
model and a colocated vLLM engine have loaded, and cannot choose vLLM sleep; TRL takes the micro-batch as given.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import nbkit.rl.algorithms as algorithms
import nbkit.rl.memory as memory
from nbkit.models import models
from nbkit.rl.inputs import check_prompts, load_task, micro_batch, per_device_batch

PROMPT_BUDGET = 2048
"""Prompt tokens a plan allows for (``nbkit plan``, ``nbkit gpu-budget``): the server's ``--max-model-len`` is this +
``max_tokens``, and the estimate pads every sequence to it (a run whose longest prompt is longer stops at start-up,
naming the length)."""


def device_gib(cfg) -> float | None:
    """GPU memory one training process is sized for: ``cfg.gpu_memory_gib`` when set (stated), else the total memory
    of this process's CUDA device, else None (no GPU: the run is not sized)."""
    if cfg.gpu_memory_gib is not None:
        return float(cfg.gpu_memory_gib)
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / memory.GIB


def launch_kind(world_size: int, env: Mapping[str, str] = os.environ) -> str:
    """The memory model's launch kind of this process, from ``accelerate launch``'s environment: ``zero2``/``zero3``
    (the DeepSpeed file's stage), ``fsdp2``, ``multi_gpu`` (DDP) or ``single_gpu``."""
    if str(env.get("ACCELERATE_USE_DEEPSPEED", "")).lower() == "true":
        path = env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
        stage = json.loads(Path(path).read_text()).get("zero_optimization", {}).get("stage") if path else None
        if stage not in (2, 3):
            raise ValueError(
                f"DeepSpeed launch with ZeRO stage {stage!r} ({path}): the memory estimate knows stages "
                f"2 and 3 (configs/deepspeed/zero2-*.json, zero3-*.json)"
            )
        return f"zero{stage}"
    if str(env.get("ACCELERATE_USE_FSDP", "")).lower() == "true":
        return "fsdp2"
    return "multi_gpu" if world_size > 1 else "single_gpu"


def colocated(cfg) -> bool:
    """True when the run's vLLM engine lives in the training process (its memory share is on the trainer's GPU)."""
    return cfg.rollout_engine == "vllm" and cfg.vllm_mode == "colocate"


def size(cfg, world_size: int, seq_tokens: int, gpu_gib: float, kind: str):
    """``(cfg with gradient_accumulation_steps and vllm_sleep_mode chosen, the memory.Fit of its micro-batch)`` for
    ``world_size`` training processes of ``gpu_gib`` GiB each under launch ``kind``, every sequence padded to
    ``seq_tokens``; ValueError with the estimate's terms when one sequence per micro-batch does not fit."""
    ppo = algorithms.get(cfg.algorithm).critic
    configured = micro_batch(cfg, world_size)  # also refuses a configured accumulation that does not divide

    def fit(sleeps: bool) -> memory.Fit:
        return memory.fit_micro_batch(
            memory.model_shape(cfg.model),
            per_device_batch(cfg, world_size),
            seq_tokens,
            kind,
            world_size,
            gpu_gib,
            vllm_share=cfg.vllm_gpu_memory_utilization if colocated(cfg) else 0.0,
            vllm_sleeps=sleeps,
            checkpointing=cfg.gradient_checkpointing,
            critic=ppo,
            minibatches=cfg.ppo_minibatches if ppo else 1,
            value_bytes=4 if cfg.train_dtype == "fp32" else 2,
            largest=configured,
        )

    sleep = cfg.vllm_enable_sleep_mode
    if colocated(cfg) and not sleep:
        try:
            awake = fit(False)
        except ValueError:
            awake = None
        asleep = fit(True)  # refuses with the terms when even a sleeping engine leaves no room for one sequence
        sleep = awake is None or asleep.micro_batch > awake.micro_batch
        chosen = asleep if sleep else awake
    else:
        chosen = fit(sleep)
    return replace(
        cfg, gradient_accumulation_steps=chosen.gradient_accumulation_steps, vllm_enable_sleep_mode=sleep
    ), chosen


def for_device(cfg, world_size: int, env: Mapping[str, str] = os.environ, rank: int = 0):
    """``size`` for this process's GPU (``device_gib``) and launch (``launch_kind``), every sequence padded to the
    run's longest prompt + ``max_completion_length`` (``longest_sequence``); ``(cfg, None)`` unchanged, nothing read, where no
    GPU memory is known. Rank 0 prints the estimate."""
    gib = device_gib(cfg)
    if gib is None:
        return cfg, None
    seq_tokens = longest_sequence(cfg)
    kind = launch_kind(world_size, env)
    sized, fit = size(cfg, world_size, seq_tokens, gib, kind)
    if rank == 0:
        print(
            f"[nbkit] sized for {world_size} x {gib:.1f} GiB ({kind}"
            f"{', vLLM asleep in the update' if sized.vllm_enable_sleep_mode and colocated(sized) else ''}): "
            f"{fit.text(seq_tokens)}",
            flush=True,
        )
    return sized, fit


def longest_sequence(cfg) -> int:
    """The run's longest prompt in tokens + ``max_completion_length``, as ``nbkit.rl.run.check_prompts`` finds it (dataset and
    tokenizer only: no weights are read)."""
    from transformers import AutoTokenizer

    task, problems = load_task(cfg)
    path = models.resolve(cfg.model)
    return check_prompts(cfg, AutoTokenizer.from_pretrained(path), [task.prompt(p) for p in problems], path)
