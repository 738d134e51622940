"""The sanity test on ``tiny-moe-arith``, FP16 vs BF16, with and without router replay, next to the dense tiny-arith.

Every run uses notebook 03's recipe (grpo, 16 prompts × 8 samples, lr 2e-4, ≤ 40 tokens, rollouts in the training
dtype) with the HF rollout engine (the engine whose routing the trainer can replay) on each model's own
perfectible set. Variants, one folder each under ``out``:

- ``dense``: tiny-arith on ``data/tiny_arith_sanity``;
- ``moe``: tiny-moe-arith on ``data/tiny_moe_arith_sanity`` (``moe/flip_rate`` logged every step);
- ``moe_replay``: the same with ``router_replay=True``.

Run labels are ``<variant>.grpo-<dtype>-s<seed>``. Pieces are resumable (one variant per call), then stored::

    python -m nbkit.moe_study run moe --steps 40            # also: dense, moe_replay
    python -m nbkit.moe_study store --steps 40 --wall-seconds 1234
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from nbkit import schema
from nbkit.paths import ROOT

VARIANTS = {
    "dense": {"model": "tiny-arith", "dataset": "data/tiny_arith_sanity", "router_replay": False},
    "moe": {"model": "tiny-moe-arith", "dataset": "data/tiny_moe_arith_sanity", "router_replay": False},
    "moe_replay": {"model": "tiny-moe-arith", "dataset": "data/tiny_moe_arith_sanity", "router_replay": True},
}
"""What differs between the study's variants."""

STUDY = "moe_tiny_arith"
"""Name under ``data/results``."""


def base_config(variant: str, steps: int, out: Path):
    """Notebook 03's recipe for ``variant`` (HF rollouts), into ``out/<variant>``."""
    from nbkit.rl import RLConfig

    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {tuple(VARIANTS)}")
    return RLConfig(**VARIANTS[variant], template="raw", grader="arith", algorithm="grpo", rollout_engine="hf",
                    steps=steps, prompts_per_step=16, samples_per_prompt=8, lr=2e-4, max_tokens=40,
                    checkpoint_every=0, output_dir=str(out / variant), overwrite=True)


def run(variant: str, steps: int, seeds: list[int], out: Path, dtypes=("fp16", "bf16")) -> float:
    """Train one variant in both precisions over ``seeds``; returns its wall seconds."""
    import torch

    from nbkit.rl import study

    torch.set_num_threads(1)
    start = time.time()
    study.run_grid(base_config(variant, steps, out), ["grpo"], list(dtypes), progress=False, seeds=seeds)
    return time.time() - start


def collect(out: Path) -> dict[str, list[dict]]:
    """``<variant>.<run label> → rows`` of every finished variant folder under ``out``."""
    from nbkit.rl.study import load_runs

    runs = {}
    for variant in VARIANTS:
        if (out / variant).is_dir():
            runs.update({f"{variant}.{label}": rows for label, rows in load_runs(out / variant).items()})
    return runs


def summary(runs: dict[str, list[dict]]) -> list[dict]:
    """Per variant × dtype over seeds (``nbkit.rl.study.seed_summary``) plus the mean ``moe/flip_rate``."""
    from nbkit.rl import study

    table = study.seed_summary(study.summary_table(runs, target=0.95))
    for row in table:
        flips = [r[schema.MOE_FLIP_RATE] for label, rows in runs.items() for r in rows if schema.MOE_FLIP_RATE in r
                 and study.parse_label(label)[:2] == (row["algorithm"], row["dtype"])]
        row["moe/flip_rate (mean over steps and seeds)"] = round(sum(flips) / len(flips), 5) if flips else None
    return table


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("run", "store"))
    p.add_argument("variant", nargs="?", choices=tuple(VARIANTS))
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="runs/moe_tiny_arith")
    p.add_argument("--wall-seconds", type=float, default=0.0, help="store: the study's total wall time")
    a = p.parse_args(argv)
    out = ROOT / a.out
    if a.action == "run":
        if a.variant is None:
            p.error(f"run needs a variant: one of {tuple(VARIANTS)}")
        print(f"{a.variant}: {run(a.variant, a.steps, a.seeds, out):.0f} s")
        return
    from nbkit import results

    runs = collect(out)
    configs = {v: base_config(v, a.steps, out).to_dict() | {"seeds": a.seeds} for v in VARIANTS}
    cmd = " && ".join(f"python -m nbkit.moe_study run {v} --steps {a.steps}" for v in VARIANTS)
    print(results.store(STUDY, runs, command=cmd + f" && python -m nbkit.moe_study store --steps {a.steps}",
                        wall_seconds=a.wall_seconds, configs=configs,
                        notes="HF rollout engine in the training dtype; dense = tiny-arith, moe = tiny-moe-arith"))


if __name__ == "__main__":
    from nbkit import paths as _paths

    _paths.setup_environment()
    main()
