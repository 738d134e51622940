"""PPO with a critic, FP16 vs BF16 on the sanity test (the paper's PPO generalisation), stored for notebook 03.

``python -m nbkit.ppo_study`` trains the ``ppo`` preset on tiny-arith in both precisions for a few seeds (HF rollout
engine in the training dtype, so μ comes from BF16 or FP16 weights) and stores the runs as
``data/results/ppo_tiny_arith/`` (``nbkit.results``); ``--seeds`` / ``--dtypes`` run a part, ``--no-store`` keeps only
the run folders so a study can be trained in pieces and stored once from its folder (``--store-only``).
"""
from __future__ import annotations

import argparse
import sys
import time

from nbkit import schema

STUDY = "ppo_tiny_arith"
"""The stored study's folder name under ``data/results``."""

OUTPUT_DIR = "reports/runs/ppo_tiny_arith"
"""Where the study's run folders go."""


def base_config(**overrides):
    """The study's PPO run on the tiny-arith sanity set (16 prompts × 8 samples, 2 epochs × 2 minibatches)."""
    from nbkit.rl import RLConfig

    kw = dict(model="tiny-arith", dataset="data/tiny_arith_sanity", template="raw", grader="arith", algorithm="ppo",
              train_dtype="bf16", rollout_engine="hf", steps=100, prompts_per_step=16, samples_per_prompt=8,
              lr=2e-4, critic_lr=2e-4, max_tokens=40, seed=0, output_dir=OUTPUT_DIR, checkpoint_every=0,
              overwrite=True)
    kw.update(overrides)
    return RLConfig(**kw)


PANELS = (
    (schema.PPO_APPROX_KL, "approx KL(π_old ‖ π) per minibatch", True),
    (schema.VALUE_LOSS, "critic's clipped value loss", True),
    (schema.VALUE_EXPLAINED_VARIANCE, "critic's explained variance", False),
    ("accuracy", "training accuracy", False),
)
"""Panels of ``curves`` (``nbkit.plots.training.training_curves`` layout): the paper's exploding KL and value loss."""


def live(seeds: list[int], dtypes: list[str], steps: int, output_dir: str, **overrides) -> dict[str, list[dict]]:
    """Train the PPO study's runs (``base_config`` with ``overrides``) live and return ``label → rows``."""
    from nbkit.rl import study

    base = base_config(steps=steps, output_dir=output_dir, **overrides)
    study.run_grid(base, ["ppo"], [], seeds=seeds, pairs=[(d, d) for d in dtypes])
    return study.load_runs(output_dir)


def curves(runs: dict[str, list[dict]], smooth: int = 1):
    """KL, value loss, explained variance and accuracy against step, runs overlaid."""
    from nbkit.plots import training

    fig = training.training_curves(runs, panels=PANELS, smooth=smooth)
    fig.update_layout(title="PPO with a critic: FP16 vs BF16")
    return fig


def table(runs: dict[str, list[dict]], tail: int = 5) -> list[dict]:
    """One row per run: the PPO diagnostics averaged over the run (max KL too) and over its last ``tail`` rollouts."""
    from nbkit.rl import study

    out = []
    for label, rows in sorted(runs.items()):
        _, dtype, seed = study.parse_label(label)

        def col(key):
            return [r[key] for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]]

        def mean(xs):
            return float(f"{sum(xs) / len(xs):.3g}") if xs else None

        kl, acc, ev = col(schema.PPO_APPROX_KL), col("accuracy"), col(schema.VALUE_EXPLAINED_VARIANCE)
        out.append({
            "run": label, "dtype": dtype, "seed": seed, "steps": len(rows),
            "approx KL (mean)": mean(kl), "approx KL (max)": float(f"{max(kl):.3g}") if kl else None,
            "value loss (first 5 → last 5)": f"{mean(col('value/loss')[:5])} → {mean(col('value/loss')[-5:])}",
            "explained variance (last 5 rollouts)": mean(ev[-tail:]),
            "accuracy (first → last 5 rollouts)": f"{mean(acc[:tail])} → {mean(acc[-tail:])}",
            "clip fraction (mean)": mean(col(schema.PPO_CLIP_FRACTION)),
            "mean |Δ log p|": mean(col(schema.TOKEN_ABS_LOGP_DIFF)),
            "s/step": mean(col(schema.TIME_STEP)),
        })
    return out


def main(argv: list[str] | None = None) -> None:
    """Train (part of) the study and store it."""
    from nbkit import results
    from nbkit.rl import study

    p = argparse.ArgumentParser(prog="python -m nbkit.ppo_study", description=__doc__)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--dtypes", nargs="+", default=["fp16", "bf16"])
    p.add_argument("--output-dir", default=OUTPUT_DIR)
    p.add_argument("--study", default=STUDY)
    p.add_argument("--no-store", action="store_true", help="train only; store later with --store-only")
    p.add_argument("--store-only", action="store_true", help="store the run folders already in --output-dir")
    p.add_argument("--wall-seconds", type=float, default=None,
                   help="wall time to record on the card (with --store-only: the pieces' training time)")
    a = p.parse_args(argv)
    t0 = time.time()
    if not a.store_only:
        base = base_config(steps=a.steps, output_dir=a.output_dir)
        for seed in a.seeds:  # one folder per (dtype, seed), so pieces add up in the same output folder
            study.run_grid(base, ["ppo"], [], seeds=[seed], pairs=[(d, d) for d in a.dtypes])
    if not a.no_store:
        results.store(a.study, a.output_dir, command="python -m nbkit.ppo_study " + " ".join(sys.argv[1:] if argv is None else argv),
                      wall_seconds=a.wall_seconds if a.wall_seconds is not None else time.time() - t0,
                      configs={"dtypes": a.dtypes, "seeds": a.seeds, "steps": a.steps,
                               "run": base_config(steps=a.steps).to_dict()})


if __name__ == "__main__":
    from nbkit import paths as _paths

    _paths.setup_environment()
    main()
