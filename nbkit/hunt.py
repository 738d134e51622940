"""Where BF16 RL training breaks and FP16 does not: the hunt grid of notebook 04, on ``tiny-long``.

The grid crosses response length (tiny-long's regimes, ~100/300/800 tokens), learning rate, algorithm (``grpo``,
``pg_seq_is`` and ``grpo_mu_old``, where the engine's μ is π_old in the clipped ratio), precision and seed. Every
BF16 cell has its FP16 twin: same seed, same everything else, trainer and rollout engine in the same dtype.

    python -m nbkit.hunt                   # the stored grid: trains into runs/hunt, stores data/results/hunt_tiny_long
    python -m nbkit.hunt --shard 0/2       # half the cells (two processes on a 2-core machine); then --store-only

A finished cell (its metrics.jsonl has every step) is skipped, so a grid cut off half-way resumes where it stopped.
``phase_map`` turns the runs into one row per (length, lr, algorithm) with the BF16 − FP16 gap over seeds, and
``verdict`` says in plain words where BF16 fell behind, or that it did not anywhere in the explored range.
"""
from __future__ import annotations

import argparse
import itertools
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from nbkit import long_arith, results, schema

LENGTHS: tuple[str, ...] = tuple(long_arith.REGIMES)
"""tiny-long's length regimes (``nbkit.long_arith.REGIMES``: ~100, ~300 and ~800 response tokens)."""
LRS: tuple[float, ...] = (1e-4, 1e-3)
"""Learning rates: tiny-long's RL default and 10× it (the stored grid; 3e-4 between them fits a longer budget)."""
ALGORITHMS: tuple[str, ...] = ("grpo", "pg_seq_is", "grpo_mu_old")
"""TRL's GRPO (π_old recomputed by the trainer), the paper's PG-Seq-IS, and the engine's μ as π_old."""
DTYPES: tuple[str, ...] = ("fp16", "bf16")
"""Precisions compared (trainer and engine in the same dtype); FP32 may be added as a reference."""
STUDY = "hunt_tiny_long"
"""The stored grid's folder under ``data/results``."""
GAP_MARGIN = 0.05
"""A BF16 − FP16 accuracy gap counts only beyond this and when every seed agrees on its sign."""

_LABEL = re.compile(r"^(?P<length>[a-z]+)-lr(?P<lr>[0-9.e-]+)-(?P<algorithm>[a-z0-9_]+)-(?P<dtype>fp16|bf16|fp32)"
                    r"-s(?P<seed>\d+)$")


@dataclass(frozen=True)
class HuntConfig:
    """The grid and the budget of each cell's run (all cells share it)."""

    lengths: tuple[str, ...] = LENGTHS
    """Length regimes of tiny-long (``short``, ``medium``, ``long``)."""
    lrs: tuple[float, ...] = LRS
    """Learning rates."""
    algorithms: tuple[str, ...] = ALGORITHMS
    """RL presets (``nbkit.rl`` names)."""
    dtypes: tuple[str, ...] = DTYPES
    """Precisions; must hold both fp16 and bf16 (every BF16 result is reported next to its FP16 twin)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds of every cell."""
    steps: int = 16
    """Optimiser steps per run."""
    prompts_per_step: int = 4
    """Distinct prompts per step."""
    samples_per_prompt: int = 4
    """Group size."""
    engine: str = "hf"
    """Rollout engine (``hf`` or ``vllm``)."""
    output_dir: str = "runs/hunt"
    """Parent folder of the cells' run folders (kept, so a cut-off grid resumes)."""

    def __post_init__(self) -> None:
        from nbkit.rl.algorithms import ALGORITHMS as PRESETS

        for name in ("lengths", "lrs", "algorithms", "dtypes", "seeds"):
            value = getattr(self, name)
            if not value or len(set(value)) != len(value):
                raise ValueError(f"{name} must be a non-empty tuple of distinct values, got {value!r}")
        bad = [x for x in self.lengths if x not in long_arith.REGIMES]
        if bad:
            raise ValueError(f"unknown length regime(s) {bad}; choose from {sorted(long_arith.REGIMES)}")
        bad = [x for x in self.algorithms if x not in PRESETS]
        if bad:
            raise ValueError(f"unknown algorithm(s) {bad}; choose from {sorted(PRESETS)}")
        bad = [x for x in self.dtypes if x not in ("fp16", "bf16", "fp32")]
        if bad or not {"fp16", "bf16"} <= set(self.dtypes):
            raise ValueError(f"dtypes must include fp16 and bf16 (and may add fp32), got {self.dtypes!r}")
        if any(not isinstance(x, (int, float)) or not x > 0 for x in self.lrs):
            raise ValueError(f"learning rates must be positive numbers, got {self.lrs!r}")
        for name in ("steps", "prompts_per_step", "samples_per_prompt"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")


def label(length: str, lr: float, algorithm: str, dtype: str, seed: int) -> str:
    """A cell run's name, e.g. ``long-lr0.001-grpo_mu_old-bf16-s2``."""
    return f"{length}-lr{lr:g}-{algorithm}-{dtype}-s{seed}"


def parse(name: str) -> dict:
    """The inverse of ``label``: ``{length, lr, algorithm, dtype, seed}``."""
    m = _LABEL.match(name)
    if not m:
        raise ValueError(f"{name!r} is not a hunt run label (length-lrX-algorithm-dtype-sN)")
    d = m.groupdict()
    return {**d, "lr": float(d["lr"]), "seed": int(d["seed"])}


def configs(hc: HuntConfig) -> dict:
    """``label → RLConfig`` of every run, shortest responses first (all validated before any run starts)."""
    from nbkit import tiny_long_study

    out = {}
    for length in hc.lengths:
        for lr in hc.lrs:
            for algorithm in hc.algorithms:
                for seed in hc.seeds:
                    for dtype in hc.dtypes:
                        name = label(length, lr, algorithm, dtype, seed)
                        out[name] = tiny_long_study.rl_config(
                            length, dtype, seed, hc.steps, hc.engine, output_dir=str(Path(hc.output_dir) / name),
                            algorithm=algorithm, lr=lr, prompts_per_step=hc.prompts_per_step,
                            samples_per_prompt=hc.samples_per_prompt, checkpoint_every=0)
    return out


def finished(cfg) -> bool:
    """Whether ``cfg``'s run folder already logged all its steps."""
    from nbkit.rl.runfolder import last_logged_step

    return (Path(cfg.output_dir) / "metrics.jsonl").is_file() and last_logged_step(Path(cfg.output_dir)) >= cfg.steps


def shard_of(j: int, n_dtypes: int, n: int) -> int:
    """The shard of the grid's ``j``-th run. Precision is the innermost loop of ``configs``, so plain every-n-th
    dealing would give each of two shards one precision (FP16's shard then ends ~30 % later); shifting by one per
    group of twins deals FP16 and BF16 runs alike to every shard, and a cell's twins run side by side."""
    return (j + j // n_dtypes) % n


def run(hc: HuntConfig, shard: tuple[int, int] = (0, 1), progress: bool = True) -> dict[str, list[dict]]:
    """Train every unfinished run of shard ``i/n``; returns ``label → rows`` of the shard's runs, finished ones read
    back from their folders. Runs are dealt so that each shard gets every precision in turn (``shard_of``)."""
    from tqdm.auto import tqdm

    from nbkit.rl import train
    from nbkit.rl.study import load_runs

    i, n = shard
    if not (isinstance(n, int) and n >= 1 and isinstance(i, int) and 0 <= i < n):
        raise ValueError(f"shard must be (i, n) with 0 <= i < n, got {shard!r}")
    todo = {k: c for j, (k, c) in enumerate(configs(hc).items()) if shard_of(j, len(hc.dtypes), n) == i}
    for name, cfg in tqdm(todo.items(), desc=f"hunt shard {i}/{n}", disable=not progress):
        if not finished(cfg):
            train(replace(cfg, overwrite=True), progress=False)  # an unfinished cell restarts from step 0
    done = load_runs(hc.output_dir)
    return {k: done[k] for k in todo if k in done}


def store(hc: HuntConfig, wall_seconds: float, command: str) -> Path:
    """Store every finished run of the grid found under ``hc.output_dir`` as ``data/results/hunt_tiny_long``; the
    card's notes list the grid's runs that are missing or were cut off (a partial run is never stored)."""
    from nbkit.rl.study import load_runs

    cfgs = configs(hc)
    runs = {k: v for k, v in load_runs(hc.output_dir).items() if k in cfgs and finished(cfgs[k])}
    if not runs:
        raise ValueError(f"no finished run of the grid under {hc.output_dir}: nothing to store")
    missing = sorted(set(cfgs) - set(runs))
    return results.store(STUDY, runs, command=command, wall_seconds=wall_seconds,
                         configs={"hunt": asdict(hc), "runs": {k: cfgs[k].to_dict() for k in runs}},
                         notes=f"{len(missing)} of the grid's {len(cfgs)} runs not stored (not run or not finished): "
                               f"{missing}" if missing else "")


def _window_means(values: list[float], window: int) -> list[float]:
    return [sum(values[i - window:i]) / window for i in range(window, len(values) + 1)]


COLLAPSE_DROP = 0.3
"""A run *collapsed* when its final window-mean accuracy ended this far below its step-1 accuracy (the rollout of
the untouched model): the training's collapse alarm compares 10-step windows, so it cannot fire in a 16-step run."""


def run_summary(rows: list[dict], target: float = 0.95, window: int = 5) -> dict:
    """One run in numbers: first, best and final ``window``-step mean accuracy, steps to ``target``, alarms, the
    mean mismatch, its growth (last window over first), and the mean phantom-clip fraction."""
    from nbkit.rl.study import steps_to

    acc = [r[schema.ACCURACY] for r in rows if schema.ACCURACY in r]
    means = _window_means(acc, min(window, len(acc))) if acc else []
    mism = [r[schema.TOKEN_ABS_LOGP_DIFF] for r in rows
            if isinstance(r.get(schema.TOKEN_ABS_LOGP_DIFF), (int, float))]
    w = max(1, min(window, len(mism) // 2))
    phantom = [r[schema.PHANTOM_FRACTION] for r in rows if isinstance(r.get(schema.PHANTOM_FRACTION), (int, float))]
    final = means[-1] if means else None
    return {"first": means[0] if means else None, "best": max(means) if means else None, "final": final,
            "collapsed": bool(acc and final is not None and final < acc[0] - COLLAPSE_DROP), "steps_to_target": steps_to(rows, target, window),
            "alarms": sum(1 for r in rows if r.get("alarm")),
            "mismatch": sum(mism) / len(mism) if mism else None,
            "mismatch_growth": (sum(mism[-w:]) / sum(mism[:w])) if len(mism) >= 2 and sum(mism[:w]) > 0 else None,
            "phantom": sum(phantom) / len(phantom) if phantom else None}


def phase_map(runs: dict[str, list[dict]], target: float = 0.95, window: int = 5,
              margin: float = GAP_MARGIN) -> list[dict]:
    """One row per (length, lr, algorithm): FP16 and BF16 over seeds, and the BF16 − FP16 gap of the final
    accuracy per seed (paired by seed). ``gap sign`` is ``BF16 behind`` / ``BF16 ahead`` only when the mean gap is
    beyond ``margin`` and every seed's gap has that sign; otherwise ``within seed spread``."""
    cells: dict[tuple, dict[str, dict[int, dict]]] = {}
    for name, rows in runs.items():
        p = parse(name)
        key = (p["length"], p["lr"], p["algorithm"])
        cells.setdefault(key, {}).setdefault(p["dtype"], {})[p["seed"]] = run_summary(rows, target, window)
    order = {x: i for i, x in enumerate(LENGTHS)}
    out = []
    for (length, lr, algorithm), by_dtype in sorted(cells.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][1],
                                                                                  kv[0][2])):
        fp16, bf16 = by_dtype.get("fp16", {}), by_dtype.get("bf16", {})
        seeds = sorted(set(fp16) & set(bf16))
        gaps = [bf16[s]["final"] - fp16[s]["final"] for s in seeds
                if bf16[s]["final"] is not None and fp16[s]["final"] is not None]
        mean_gap = sum(gaps) / len(gaps) if gaps else None
        sign = "within seed spread" if gaps else "no FP16/BF16 twin"
        if gaps and mean_gap < -margin and all(g < 0 for g in gaps):
            sign = "BF16 behind"
        elif gaps and mean_gap > margin and all(g > 0 for g in gaps):
            sign = "BF16 ahead"

        def mean(d, k):
            xs = [v[k] for v in d.values() if isinstance(v.get(k), (int, float))]
            return sum(xs) / len(xs) if xs else None

        def each(d, k):
            return ", ".join("—" if d[s][k] is None else str(d[s][k]) for s in sorted(d))

        m16, m_bf = mean(fp16, "mismatch"), mean(bf16, "mismatch")
        out.append({"length": length, "lr": lr, "algorithm": algorithm, "seeds": len(seeds),
                    "fp16 final": _r(mean(fp16, "final")), "bf16 final": _r(mean(bf16, "final")),
                    "gap (bf16 − fp16)": _r(mean_gap), "gap [min, max]": f"[{_r(min(gaps))}, {_r(max(gaps))}]"
                    if gaps else "—", "gap sign": sign,
                    "fp16 best": _r(mean(fp16, "best")), "bf16 best": _r(mean(bf16, "best")),
                    f"fp16 steps to {target:.0%}": each(fp16, "steps_to_target"),
                    f"bf16 steps to {target:.0%}": each(bf16, "steps_to_target"),
                    "fp16 alarms": sum(v["alarms"] for v in fp16.values()),
                    "bf16 alarms": sum(v["alarms"] for v in bf16.values()),
                    "fp16 collapsed": sum(v["collapsed"] for v in fp16.values()),
                    "bf16 collapsed": sum(v["collapsed"] for v in bf16.values()),
                    "fp16 mismatch": _r(m16, 3), "bf16 mismatch": _r(m_bf, 3),
                    "mismatch bf16/fp16": _r(m_bf / m16, 3) if m16 and m_bf else None,
                    "bf16 mismatch growth": _r(mean(bf16, "mismatch_growth"), 3),
                    "fp16 mismatch growth": _r(mean(fp16, "mismatch_growth"), 3),
                    "bf16 phantom": _r(mean(bf16, "phantom"), 3), "fp16 phantom": _r(mean(fp16, "phantom"), 3)})
    return out


def _r(x, digits: int = 3):
    if x is None:
        return None
    return float(f"{x:.{digits}g}") if abs(x) < 1e-2 and x != 0 else round(x, digits)


def most_telling(rows: list[dict]) -> dict:
    """The cell where BF16 fell furthest behind FP16 (most negative mean gap)."""
    rows = [r for r in rows if r["gap (bf16 − fp16)"] is not None]
    if not rows:
        raise ValueError("no cell has both an FP16 and a BF16 run with the same seed")
    return min(rows, key=lambda r: r["gap (bf16 − fp16)"])


def cell_runs(runs: dict[str, list[dict]], cell: dict) -> dict[str, list[dict]]:
    """The runs of one phase-map cell (both precisions, every seed)."""
    return {k: v for k, v in runs.items()
            if (p := parse(k))["length"] == cell["length"] and p["lr"] == cell["lr"]
            and p["algorithm"] == cell["algorithm"]}


def verdict(rows: list[dict], margin: float = GAP_MARGIN) -> str:
    """The hunt's answer in plain words, computed from ``phase_map`` rows."""
    incomplete = [r for r in rows if not r["seeds"]]
    rows = [r for r in rows if r["seeds"]]
    if not rows:
        raise ValueError("no phase-map cell has an FP16 and a BF16 run with the same seed: nothing to compare")
    behind = [r for r in rows if r["gap sign"] == "BF16 behind"]
    ahead = [r for r in rows if r["gap sign"] == "BF16 ahead"]
    worst = most_telling(rows)
    alarms16, alarms_bf = sum(r["fp16 alarms"] for r in rows), sum(r["bf16 alarms"] for r in rows)
    ratios = [r["mismatch bf16/fp16"] for r in rows if r["mismatch bf16/fp16"]]
    where = lambda r: f"{r['length']} responses, lr {r['lr']:g}, {r['algorithm']}"  # noqa: E731
    seeds = sorted({r["seeds"] for r in rows})
    axes = [sorted({r[k] for r in rows + incomplete}, key=str) for k in ("length", "lr", "algorithm")]
    have = {(r["length"], r["lr"], r["algorithm"]) for r in rows + incomplete}
    absent = [c for c in itertools.product(*axes) if c not in have]
    head = (f"Over {len(rows)} cells ({len(axes[0])} lengths × {len(axes[1])} learning rates × {len(axes[2])} "
            f"algorithms, {'/'.join(map(str, seeds))} seeds each"
            + (f"; not run: {'; '.join(f'{a} responses, lr {b:g}, {c}' for a, b, c in absent)}" if absent else "")
            + "), ")
    if behind:
        body = (f"BF16 ended behind FP16 beyond the seed spread (every seed, mean gap < −{margin:g}) in "
                f"{len(behind)}: " + "; ".join(f"{where(r)} ({r['gap (bf16 − fp16)']:+.3f})" for r in behind) + ".")
    else:
        body = (f"BF16 never ended behind FP16 beyond the seed spread (every seed, mean gap < −{margin:g}). The "
                f"largest mean gap against BF16 was {worst['gap (bf16 − fp16)']:+.3f} (per seed "
                f"{worst['gap [min, max]']}) at {where(worst)}.")
    if ahead:
        body += f" BF16 ended ahead beyond the seed spread in {len(ahead)}: " + "; ".join(map(where, ahead)) + "."
    n16, n_bf = (sum(r[f"{d} collapsed"] for r in rows) for d in ("fp16", "bf16"))
    gone = [where(r) for r in rows if r["fp16 collapsed"] + r["bf16 collapsed"]]
    body += (f" Runs whose final accuracy ended ≥ {COLLAPSE_DROP:g} below their first step's: FP16 {n16}, BF16 "
             f"{n_bf}" + (f" (in {'; '.join(gone)})" if gone else "") + ".")
    body += (f" Collapse alarms: FP16 {alarms16}, BF16 {alarms_bf}. BF16's mean |Δ log p| was "
             f"{min(ratios):.1f}–{max(ratios):.1f}× FP16's across cells." if ratios else "")
    if incomplete:
        body += f" Left out, no FP16/BF16 twin: {'; '.join(map(where, incomplete))}."
    return head + body


def seed_gaps(runs: dict[str, list[dict]], window: int = 5) -> dict[tuple, list[float]]:
    """``(length, lr, algorithm) → [BF16 − FP16 final accuracy per seed]`` (paired by seed, ``window``-step means)."""
    finals: dict[tuple, dict[str, dict[int, float]]] = {}
    for name, rows in runs.items():
        p = parse(name)
        final = run_summary(rows, window=window)["final"]
        if final is not None:
            finals.setdefault((p["length"], p["lr"], p["algorithm"]), {}).setdefault(p["dtype"], {})[p["seed"]] = final
    return {cell: [d["bf16"][s] - d["fp16"][s] for s in sorted(set(d.get("bf16", {})) & set(d.get("fp16", {})))]
            for cell, d in finals.items()}


def false_flag_rate(sd: float, n_seeds: int, margin: float = GAP_MARGIN, n_sim: int = 200_000,
                    seed: int = 0) -> float:
    """Chance that a cell with *no* true gap is flagged *BF16 behind* by ``phase_map``'s rule (every one of
    ``n_seeds`` paired gaps negative and their mean below −``margin``), when each seed's gap is N(0, ``sd``²)."""
    import numpy as np

    if sd <= 0 or n_seeds < 1:
        raise ValueError(f"sd must be > 0 and n_seeds ≥ 1, got sd={sd!r}, n_seeds={n_seeds!r}")
    g = np.random.default_rng(seed).normal(0.0, sd, size=(n_sim, n_seeds))
    return float(np.mean((g < 0).all(axis=1) & (g.mean(axis=1) < -margin)))


def chance_caveat(runs: dict[str, list[dict]], margin: float = GAP_MARGIN, window: int = 5) -> str:
    """How often chance alone would flag a cell, from the grid's own seed noise: the pooled within-cell SD of the
    paired gaps, the per-cell false-flag rate under that noise, and the chance of ≥ 1 flag among the grid's cells."""
    gaps = {c: g for c, g in seed_gaps(runs, window).items() if len(g) >= 2}
    if not gaps:
        return "Too few seeds per cell to estimate how often chance alone would flag one."
    import statistics

    sd = statistics.fmean(statistics.variance(g) for g in gaps.values()) ** 0.5
    n_seeds = min(len(g) for g in gaps.values())
    p = false_flag_rate(sd, n_seeds, margin)
    k = len(gaps)
    return (f"Noise: the paired gap of one seed has a pooled within-cell SD of {sd:.3f} (over {k} cells); with that "
            f"noise and no true gap, the rule flags a cell with probability {p:.1%}, so among {k} cells the chance of "
            f"at least one flag is {1 - (1 - p) ** k:.0%}. A single flagged cell is what chance predicts, not "
            f"evidence; a true gap of {margin:g} at this noise needs about "
            f"{_seeds_for(sd, margin)} seeds per cell to be seen with 80 % power (two-sided 5 % paired t-test).")


def _seeds_for(sd: float, gap: float, power: float = 0.8, alpha: float = 0.05) -> int:
    """Seeds for a paired test to detect ``gap`` with ``power`` when a seed's paired difference has SD ``sd``."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return max(2, int(-(-((z * sd / gap) ** 2) // 1)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shard", default="0/1", help="i/n: train every n-th run from the i-th (default 0/1)")
    parser.add_argument("--steps", type=int, default=HuntConfig.steps)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(HuntConfig.seeds))
    parser.add_argument("--lengths", nargs="+", default=list(LENGTHS))
    parser.add_argument("--lrs", type=float, nargs="+", default=list(LRS))
    parser.add_argument("--output-dir", default=HuntConfig.output_dir)
    parser.add_argument("--store-only", action="store_true", help="store what is under --output-dir, train nothing")
    parser.add_argument("--no-store", action="store_true", help="train only (a shard of a grid stored later)")
    parser.add_argument("--wall-seconds", type=float, default=None, help="wall time to record with --store-only")
    args = parser.parse_args(argv)
    hc = HuntConfig(lengths=tuple(args.lengths), lrs=tuple(args.lrs), seeds=tuple(args.seeds), steps=args.steps,
                    output_dir=args.output_dir)
    i, n = (int(x) for x in args.shard.split("/"))
    start = time.perf_counter()
    if not args.store_only:
        run(hc, (i, n))
    if not args.no_store:
        wall = args.wall_seconds if args.wall_seconds is not None else time.perf_counter() - start
        path = store(hc, wall, command=f"python -m nbkit.hunt --steps {hc.steps} --seeds "
                                       f"{' '.join(map(str, hc.seeds))} --lengths {' '.join(hc.lengths)} "
                                       f"--lrs {' '.join(f'{x:g}' for x in hc.lrs)}")
        rows = phase_map(results.load(STUDY))
        print(path, "\n" + verdict(rows), flush=True)


if __name__ == "__main__":
    from nbkit import paths as _paths

    _paths.setup_environment()
    main()
