"""The toy task of the public report on μ as π_old: reward = −response length, on SmolLM2-135M with vLLM rollouts.

The report (Qwen3-0.6B, FP32 trainer, BF16 vLLM engine, the engine's log-probs as π_old) found that a task which
should converge in a handful of steps (say less) did not. Here the same task runs on SmolLM2-135M-Instruct (LoRA)
for the (train, rollout) pairs FP16/FP16, BF16/BF16 and FP32/FP32 (the report's FP32/BF16 on request), with ``grpo_mu_old``
(μ is π_old in the clipped ratio) and 3 seeds; each run logs the reward (−tokens / max_tokens), the mean
response length, the mismatch and the phantom-clip fraction.

    python -m nbkit.brevity_study [--steps 10 --seeds 0 1 2]   # trains into runs/brevity, stores data/results/brevity_smollm2
    python -m nbkit.brevity_study --seeds 1 --no-store           # one process per seed, then --store-only

A finished run (all its steps logged) is not trained again, so a cut-off study resumes.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from nbkit import results, schema

PAIRS: list[tuple[str, str]] = [("fp16", "fp16"), ("bf16", "bf16"), ("fp32", "fp32")]
"""(train dtype, rollout dtype): both precisions and the FP32 reference (``--pairs fp32/bf16`` adds the report's)."""
STUDY = "brevity_smollm2"
"""The stored study's folder under ``data/results``."""
SHORT = 0.1
"""A run has converged once its 3-step mean response is at most this share of ``max_tokens``."""


def config(train_dtype: str, rollout_dtype: str, seed: int, out: Path, steps: int = 10, engine: str = "vllm",
           **overrides):
    """One run: SmolLM2-135M-Instruct, LoRA, MATH prompts (ChatML), brevity reward, grpo_mu_old, 4 × 4 per step."""
    from nbkit.rl import RLConfig

    kw = dict(model="smollm2-135m", dataset="eval/math", template="qwen_math", grader="math_verify",
              reward="brevity", algorithm="grpo_mu_old", train_dtype=train_dtype, rollout_dtype=rollout_dtype,
              rollout_engine=engine, lora=True, lr=5e-4, steps=steps, prompts_per_step=4, samples_per_prompt=4,
              max_tokens=128, seed=seed, checkpoint_every=0,
              output_dir=str(out / label(train_dtype, rollout_dtype, seed)))
    kw.update(overrides)
    return RLConfig(**kw)


def label(train_dtype: str, rollout_dtype: str, seed: int) -> str:
    """``brevity-<train>-<rollout>r-s<seed>`` (``brevity-fp16-s0`` when both sides agree)."""
    from nbkit.rl.study import pair_tag

    return f"brevity-{pair_tag(train_dtype, rollout_dtype)}-s{seed}"


def commands(cfgs: dict, steps: int, engine: str) -> str:
    """The command lines that train exactly ``cfgs`` (one per pair, with the seeds that pair has), joined by ``;``,
    so a stored study with fewer FP32 seeds says so in its card."""
    seeds: dict[str, list[int]] = {}
    for c in cfgs.values():
        seeds.setdefault(f"{c.train_dtype}/{c.rollout}", []).append(c.seed)
    by_seeds: dict[tuple, list[str]] = {}
    for pair, ss in seeds.items():
        by_seeds.setdefault(tuple(sorted(ss)), []).append(pair)
    return "; ".join(f"python -m nbkit.brevity_study --steps {steps} --seeds {' '.join(map(str, ss))} "
                     f"--pairs {' '.join(pairs)} --engine {engine}" for ss, pairs in by_seeds.items())


def table(runs: dict[str, list[dict]], max_tokens: int = 128) -> list[dict]:
    """Per (train, rollout) pair over seeds: mean response length at the first and the last 3 steps, the step at
    which the 3-step mean length first fell to ``SHORT`` × ``max_tokens`` (per seed), the mismatch and the
    phantom-clip fraction."""
    from nbkit.rl.study import parse_pair

    groups: dict[tuple[str, str], list[list[dict]]] = {}
    for name, rows in runs.items():
        _, train_dtype, rollout_dtype, _ = parse_pair(name)
        groups.setdefault((train_dtype, rollout_dtype), []).append(rows)
    order = {p: i for i, p in enumerate(PAIRS)}
    out = []
    for pair, seeds in sorted(groups.items(), key=lambda kv: order.get(kv[0], 99)):
        def mean(key, rows_of=lambda rows: rows):
            xs = [r[key] for rows in seeds for r in rows_of(rows) if isinstance(r.get(key), (int, float))]
            return float(f"{sum(xs) / len(xs):.3g}") if xs else None

        def converged(rows):
            lengths = [r["completions/mean_length"] for r in rows]
            for i in range(3, len(lengths) + 1):
                if sum(lengths[i - 3:i]) / 3 <= SHORT * max_tokens:
                    return rows[i - 1][schema.STEP]
            return None

        steps = [converged(rows) for rows in seeds]
        out.append({"train": pair[0], "rollout": pair[1], "seeds": len(seeds),
                    "length, first step": mean("completions/mean_length", lambda rows: rows[:1]),
                    "length, last 3 steps": mean("completions/mean_length", lambda rows: rows[-3:]),
                    f"converged (≤ {SHORT:.0%} of max) at step": ", ".join("—" if s is None else str(s) for s in steps),
                    "mean |Δ log p|": mean(schema.TOKEN_ABS_LOGP_DIFF),
                    "phantom-clip fraction": mean(schema.PHANTOM_FRACTION),
                    "s/step": mean(schema.TIME_STEP)})
    return out


def main(argv: list[str] | None = None) -> Path | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--pairs", nargs="+", default=[f"{t}/{r}" for t, r in PAIRS], help="train/rollout dtypes")
    parser.add_argument("--engine", default="vllm", choices=("vllm", "hf"))
    parser.add_argument("--output-dir", default="runs/brevity")
    parser.add_argument("--no-store", action="store_true")
    parser.add_argument("--store-only", action="store_true")
    parser.add_argument("--wall-seconds", type=float, default=None, help="wall time to record with --store-only")
    args = parser.parse_args(argv)
    from dataclasses import replace

    from tqdm.auto import tqdm

    from nbkit.hunt import finished
    from nbkit.rl import train
    from nbkit.rl.study import load_runs

    pairs = [tuple(p.split("/")) for p in args.pairs]
    start = time.perf_counter()
    cfgs = {Path(c.output_dir).name: c for c in (config(t, r, s, Path(args.output_dir), args.steps, args.engine)
                                                  for s in args.seeds for t, r in pairs)}
    if not args.store_only:
        for cfg in tqdm(cfgs.values(), desc="brevity runs"):
            if not finished(cfg):
                train(replace(cfg, overwrite=True), progress=False)
    if args.no_store:
        return None
    runs = {k: v for k, v in load_runs(args.output_dir).items() if k in cfgs}
    if not runs:
        raise SystemExit(f"no run of {sorted(cfgs)} under {args.output_dir}: nothing to store")
    wall = args.wall_seconds if args.wall_seconds is not None else time.perf_counter() - start
    path = results.store(STUDY, runs, wall_seconds=wall, configs={k: cfgs[k].to_dict() for k in runs},
                         command=commands({k: cfgs[k] for k in runs}, args.steps, args.engine))
    for row in table(runs):
        print(row, flush=True)
    return path


if __name__ == "__main__":
    from nbkit import paths as _paths

    _paths.setup_environment()
    print(main())
