"""The memory estimate (``nbkit.rl.memory``) of every RL run a profile's notebooks start, as the notebooks build them.

    rows = budget("gpu")          # one Row per run kind: notebook, run, micro-batch, estimate, fits or not
    print(table(rows))            # docs/gpu.md's table

The gpu profile runs each notebook in one kernel on one GPU (vLLM colocated); each run chooses its micro-batch and
vLLM sleep when it starts (``nbkit.rl.sizing``), and the estimate is that choice for an 80 GiB GPU, every sequence
padded to the longest prompt ``sizing.PROMPT_BUDGET`` + ``max_completion_length``. ``nbkit plan`` re-sizes its
own multi-GPU commands with the same model.

Why ours: the runs are the workbook's notebooks' own, which no library knows; the estimate is ``nbkit.rl.memory``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nbkit.rl import memory, sizing
from nbkit.rl.config import config_from
from nbkit.studies import ablation, ppo
from nbkit.workbook.profiles import PROFILES


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
    sleeps: bool = True
    """vLLM sleeps during the update (its share not held beside the activations), as the run chooses it."""

    @property
    def fits(self) -> bool:
        return self.peak_gib <= memory.HEADROOM * self.gpu_gib


def notebook_params(profile: str, stem: str) -> dict:
    """Notebook ``stem``'s parameters as the profile runs it: the notebook's own defaults with the profile's values
    over them (what papermill hands the notebook)."""
    from nbkit.workbook.parameters import defaults

    return {**defaults(stem), **PROFILES[profile].get(stem, {})}


def ppo_options(profile: str) -> dict | None:
    """The options notebook 03 passes its PPO slice (``ppo.PPOStudy().live(**options)``), as the notebook builds
    them from its parameters; None when the profile runs no PPO (``ppo_steps`` 0)."""
    p03 = notebook_params(profile, "03_rl_training")
    if not p03.get("ppo_steps"):
        return None
    base = config_from(p03.get("config_overrides", {}))  # the GRPO runs' recipe, which the slice shares
    return {
        "dtypes": p03["ppo_dtypes"],
        "seeds": p03["ppo_seeds"],
        "steps": p03["ppo_steps"],
        "output_dir": p03["ppo_output_dir"],
        "overrides": {
            **{k: getattr(base, k) for k in ppo.SHARED_WITH_GRPO},
            "rollout_engine": p03["ppo_rollout_engine"],
            "critic_lr": p03["ppo_critic_lr"],
            **p03.get("ppo_overrides", {}),
        },
    }


def hunt_options(profile: str) -> dict | None:
    """The options notebook 04 passes its live hunt grid (``hunt.Hunt().live(**options)``), as the notebook builds
    them from its parameters; None when the profile runs no live slice (``live_lengths`` empty)."""
    p04 = notebook_params(profile, "04_where_bf16_breaks")
    if not p04.get("live_lengths"):
        return None
    return {
        "lengths": p04["live_lengths"],
        "lrs": p04["live_lrs"],
        "algorithms": p04["live_algorithms"],
        "seeds": p04["live_seeds"],
        "steps": p04["live_steps"],
        "prompts_per_step": p04["live_prompts_per_step"],
        "samples_per_prompt": p04["live_samples_per_prompt"],
        "engine": p04["rollout_engine"],
        "output_dir": p04["output_dir"],
    }


def ppo_runs(profile: str) -> dict:
    """``label → RLConfig`` of notebook 03's PPO slice (``PPOStudy.grid`` of ``ppo_options``; empty without one)."""
    options = ppo_options(profile)
    return ppo.PPOStudy().grid(**options) if options else {}


def hunt_runs(profile: str) -> dict:
    """``label → RLConfig`` of notebook 04's live hunt grid (``Hunt.grid`` of ``hunt_options``; empty without one)."""
    from nbkit.studies import hunt

    options = hunt_options(profile)
    return hunt.Hunt().grid(**options) if options else {}


def notebook_runs(profile: str = "gpu") -> list[tuple[str, str, object]]:
    """(notebook, run, RLConfig) of each kind of RL run the profile's notebooks 03, 04 and 05 start: one per dtype
    set and, for 04, response length (the memory does not depend on the seed, the learning rate or a loss without a
    critic). 03's PPO and 04's grid are the notebooks' own runs (``ppo_runs``, ``hunt_runs``), which ``nbkit plan``
    prints too."""
    from nbkit.rl import algorithms
    from nbkit.studies import hunt

    out = []
    p03 = PROFILES[profile].get("03_rl_training", {})
    base = config_from(p03.get("config_overrides", {}))
    for dtype in p03.get("train_dtypes", ["fp16", "bf16"]):
        out.append(("03_rl_training", f"GRPO family, {dtype}", replace(base, train_dtype=dtype)))
    seen = set()
    for cfg in ppo_runs(profile).values():
        if cfg.train_dtype not in seen:  # one per dtype: the seeds' memory is the same
            seen.add(cfg.train_dtype)
            out.append(("03_rl_training", f"PPO (critic), {cfg.train_dtype}", cfg))
    seen, grid = set(), hunt.Hunt()
    for cfg in hunt_runs(profile).values():
        c = grid.coords(
            {
                "dataset": cfg.dataset,
                "learning_rate": cfg.learning_rate,
                "algorithm": cfg.algorithm,
                "train_dtype": cfg.train_dtype,
                "seed": cfg.seed,
            }
        )
        critic = algorithms.get(cfg.algorithm).critic
        key = (c["length"], c["dtype"], critic)
        if key not in seen:
            seen.add(key)
            out.append(
                ("04_where_bf16_breaks", f"hunt {c['length']}, {c['dtype']}{' (critic)' if critic else ''}", cfg)
            )
    p05 = PROFILES[profile].get("05_precision_ablation", {})
    if p05.get("live_pairs"):
        cfg = config_from(
            {
                "train_dtype": "bf16",
                "prompts_per_step": p05.get("live_prompts_per_step", 16),
                "num_generations": p05.get("live_samples_per_prompt", 8),
                **p05.get("config_overrides", {}),
            }
        )
        _ = ablation  # the grid's own base_config also moves vLLM to HF where vLLM is missing: sizes are the same
        for train, rollout in p05["live_pairs"]:
            out.append(
                (
                    "05_precision_ablation",
                    f"train {train} / rollout {rollout}",
                    replace(cfg, train_dtype=train, rollout_dtype=rollout),
                )
            )
    return out


def estimate(cfg, gpu_gib: float = 80) -> tuple[int, float, float, float, float, bool]:
    """(micro-batch, peak, states, activations, vLLM, vLLM asleep) in GiB of ``cfg`` on one GPU with vLLM colocated, as the run
    sizes itself when it starts there (``nbkit.rl.sizing.size``; the configured accumulation is a floor)."""
    sized, fit = sizing.size(cfg, 1, cfg.max_completion_length + sizing.PROMPT_BUDGET, gpu_gib, "single_gpu")
    return (
        fit.micro_batch,
        fit.peak_gib,
        fit.states_gib,
        fit.activations_gib,
        fit.vllm_gib,
        sized.vllm_enable_sleep_mode,
    )


def budget(profile: str = "gpu", gpu_gib: float = 80) -> list[Row]:
    """The estimate of every run kind of ``notebook_runs``."""
    rows = []
    for notebook, run, cfg in notebook_runs(profile):
        m, peak, states, act, vllm, sleeps = estimate(cfg, gpu_gib)
        rows.append(Row(notebook, run, m, peak, states, act, vllm, gpu_gib, sleeps))
    return rows


def table(rows: list[Row]) -> str:
    """Markdown table of ``rows``."""
    lines = [
        "| notebook | run | sequences per micro-batch | states | activations | vLLM (colocated) | peak of "
        f"{rows[0].gpu_gib:g} GiB |"
        if rows
        else "",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        vllm = f"{r.vllm_gib:.1f}{', asleep in the update' if r.sleeps else ''}"
        lines.append(
            f"| {r.notebook} | {r.run} | {r.micro_batch} | {r.states_gib:.1f} | {r.activations_gib:.1f} | "
            f"{vllm} | {r.peak_gib:.1f}{'' if r.fits else ' (does not fit)'} |"
        )
    return "\n".join(lines)
