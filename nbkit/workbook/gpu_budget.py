"""The memory estimate (``nbkit.rl.memory``) of every RL run a profile's notebooks start, as the notebooks build them.

    rows = budget("gpu")          # one Row per run kind: notebook, run, micro-batch, estimate, fits or not
    print(table(rows))            # the README's table

The gpu profile runs each notebook in one kernel on one GPU (vLLM colocated), so a run's micro-batch is its share of
the step divided by its ``gradient_accumulation_steps`` (and, for PPO, ``ppo_minibatches``); the estimate is that
micro-batch's peak, padded to the longest prompt ``PROMPT_BUDGET`` + ``max_tokens``. ``nbkit plan`` re-sizes its
own multi-GPU commands with the same model.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from nbkit.rl import memory

PROMPT_BUDGET = 2048
"""Prompt tokens budgeted per sequence (``nbkit.cli.plan.PROMPT_BUDGET``)."""


@dataclass(frozen=True)
class Row:
    """One run kind of a notebook and its estimate on one GPU."""

    notebook: str
    run: str
    micro_batch: int
    """Sequences per loss forward/backward, as the run is configured."""
    peak_gib: float
    """Estimated peak of that micro-batch (``memory.fit_micro_batch``'s terms)."""
    states_gib: float
    activations_gib: float
    vllm_gib: float
    gpu_gib: float

    @property
    def fits(self) -> bool:
        return self.peak_gib <= memory.HEADROOM * self.gpu_gib


def notebook_runs(profile: str = "gpu") -> list[tuple[str, str, object]]:
    """(notebook, run, RLConfig) of each kind of RL run the profile's notebooks 03 and 05 start (one per dtype
    set: the memory does not depend on the seed or the algorithm's loss)."""
    from nbkit.rl.config import config_from
    from nbkit.studies import ablation, ppo
    from nbkit.workbook.profiles import PROFILES

    out = []
    p03 = PROFILES[profile].get("03_rl_training", {})
    base = config_from(p03.get("config_overrides", {}))
    for dtype in p03.get("train_dtypes", ["fp16", "bf16"]):
        out.append(("03_rl_training", f"GRPO family, {dtype}", replace(base, train_dtype=dtype)))
    if p03.get("ppo_steps"):
        shared = {k: getattr(base, k) for k in ppo.SHARED_WITH_GRPO}
        overrides = {**shared, "rollout_engine": p03.get("ppo_rollout_engine", "hf"),
                     "critic_lr": p03.get("ppo_critic_lr", 2e-4), **p03.get("ppo_overrides", {})}
        for dtype in ("fp16", "bf16"):
            out.append(("03_rl_training", f"PPO (critic), {dtype}", ppo.base_config(**overrides, train_dtype=dtype)))
    p05 = PROFILES[profile].get("05_precision_ablation", {})
    if p05.get("live_pairs"):
        cfg = config_from({"train_dtype": "bf16", "prompts_per_step": p05.get("live_prompts_per_step", 16),
                           "samples_per_prompt": p05.get("live_samples_per_prompt", 8),
                           **p05.get("config_overrides", {})})
        _ = ablation  # the grid's own base_config also moves vLLM to HF where vLLM is missing: sizes are the same
        for train, rollout in p05["live_pairs"]:
            out.append(("05_precision_ablation", f"train {train} / rollout {rollout}",
                        replace(cfg, train_dtype=train, rollout_dtype=rollout)))
    return out


def estimate(cfg, gpu_gib: float = 80) -> tuple[int, float, float, float, float]:
    """(micro-batch, peak, states, activations, vLLM) in GiB of ``cfg`` on one GPU with vLLM colocated."""
    from nbkit.rl import algorithms
    from nbkit.rl.run import micro_batch

    ppo = algorithms.get(cfg.algorithm).critic
    m = micro_batch(cfg, 1)
    shape = memory.model_shape(cfg.model)
    states = memory.state_bytes(shape, "single_gpu", 1, critic=ppo)
    act = memory.activation_bytes(shape, m, cfg.max_tokens + PROMPT_BUDGET, cfg.gradient_checkpointing,
                                  value_bytes=4 if cfg.train_dtype == "fp32" else 2)
    vllm = cfg.vllm_gpu_memory_utilization * gpu_gib * memory.GIB
    peak = states + (max(act, vllm) if cfg.vllm_sleep_mode else act + vllm)
    return m, peak / memory.GIB, states / memory.GIB, act / memory.GIB, vllm / memory.GIB


def budget(profile: str = "gpu", gpu_gib: float = 80) -> list[Row]:
    """The estimate of every run kind of ``notebook_runs``."""
    rows = []
    for notebook, run, cfg in notebook_runs(profile):
        m, peak, states, act, vllm = estimate(cfg, gpu_gib)
        rows.append(Row(notebook, run, m, peak, states, act, vllm, gpu_gib))
    return rows


def table(rows: list[Row]) -> str:
    """Markdown table of ``rows``."""
    lines = ["| notebook | run | sequences per micro-batch | states | activations | vLLM (colocated) | peak of "
             f"{rows[0].gpu_gib:g} GiB |" if rows else "", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.notebook} | {r.run} | {r.micro_batch} | {r.states_gib:.1f} | {r.activations_gib:.1f} | "
                     f"{r.vllm_gib:.1f} | {r.peak_gib:.1f}{'' if r.fits else ' (does not fit)'} |")
    return "\n".join(lines)

