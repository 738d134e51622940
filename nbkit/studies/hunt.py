"""Where BF16 RL training breaks and FP16 does not: the hunt grid of notebook 04, on ``tiny-long``.

The grid crosses response length (tiny-long's regimes, ~100/300/800 tokens), learning rate, algorithm (``grpo``,
``pg_seq_is`` and ``grpo_mu_old``, where the engine's μ is π_old in the clipped ratio), precision and seed. Every
BF16 cell has its FP16 twin: same seed, same everything else, trainer and rollout engine in the same dtype.

    nbkit study hunt_tiny_long run --shard 0/2   # half the cells (two processes on a 2-core machine), then 1/2
    nbkit study hunt_tiny_long store             # finished runs only -> data/results/hunt_tiny_long
    nbkit study hunt_tiny_long show              # its table and findings

A finished cell (its metrics.jsonl has every step) is skipped, so a grid cut off half-way resumes where it stopped.
``phase_map`` turns the runs into one row per (length, lr, algorithm) with the BF16 − FP16 gap over seeds, and
``verdict`` says in plain words where BF16 fell behind, or that it did not anywhere in the explored range. A run's
coordinates come from its config (``Hunt.coords``), never from its folder name. Its sentences are templates over
the rows' named fields (``COLUMNS``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from nbkit.models.toymodels import long_arith
from nbkit.records import schema
from nbkit.records.runlog import renamed, steps_to
from nbkit.stats.stats import seeds_needed
from nbkit.studies import prose
from nbkit.studies.base import GridStudy

LENGTHS: tuple[str, ...] = ("short", "medium", "long")
"""tiny-long's length regimes the hunt ran (``nbkit.models.toymodels.long_arith.REGIMES``: ~100, ~300 and ~800 response tokens)."""
LRS: tuple[float, ...] = (1e-4, 1e-3)
"""Learning rates: tiny-long's RL default and 10× it (the stored grid; 3e-4 between them fits a longer budget)."""
HUNT_ALGORITHMS: tuple[str, ...] = ("grpo", "pg_seq_is", "grpo_mu_old")
"""TRL's GRPO (π_old recomputed by the trainer), the paper's PG-Seq-IS, and the engine's μ as π_old."""
HUNT_DTYPES: tuple[str, ...] = ("fp16", "bf16")
"""Precisions compared (trainer and engine in the same dtype); FP32 may be added as a reference."""
STUDY = "hunt_tiny_long"
"""The stored grid's folder under ``data/results``."""
GAP_MARGIN = 0.05
"""A BF16 − FP16 accuracy gap counts only beyond this and when every seed agrees on its sign."""


@dataclass(frozen=True)
class HuntConfig:
    """The grid and the budget of each cell's run (all cells share it)."""

    lengths: tuple[str, ...] = field(
        default=LENGTHS, metadata={"help": ("Length regimes of tiny-long (``short``, ``medium``, ``long``).")}
    )
    lrs: tuple[float, ...] = field(default=LRS, metadata={"help": "Learning rates."})
    algorithms: tuple[str, ...] = field(default=HUNT_ALGORITHMS, metadata={"help": "RL presets (``nbkit.rl`` names)."})
    dtypes: tuple[str, ...] = field(
        default=HUNT_DTYPES,
        metadata={
            "help": ("Precisions; must hold both fp16 and bf16 (every BF16 result is reported next to its FP16 twin).")
        },
    )
    seeds: tuple[int, ...] = field(default=(0, 1, 2), metadata={"help": "Seeds of every cell."})
    steps: int = field(default=16, metadata={"help": "Optimiser steps per run."})
    prompts_per_step: int = field(default=4, metadata={"help": "Distinct prompts per step."})
    samples_per_prompt: int = field(default=4, metadata={"help": "Group size."})
    engine: str = field(default="hf", metadata={"help": "Rollout engine (``hf`` or ``vllm``)."})
    output_dir: str = field(
        default="runs/hunt",
        metadata={"help": ("Parent folder of the cells' run folders (kept, so a cut-off grid resumes).")},
    )

    def __post_init__(self) -> None:
        from nbkit.rl.algorithms import ALGORITHMS as PRESETS  # (torch: nbkit.rl imports its config)

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


def configs(hc: HuntConfig) -> dict:
    """``label → RLConfig`` of every run, shortest responses first (all validated before any run starts)."""
    from nbkit.studies import tiny_long_regimes

    out = {}
    for length in hc.lengths:
        for lr in hc.lrs:
            for algorithm in hc.algorithms:
                for seed in hc.seeds:
                    for dtype in hc.dtypes:
                        name = label(length, lr, algorithm, dtype, seed)
                        out[name] = tiny_long_regimes.rl_config(
                            length,
                            dtype,
                            seed,
                            hc.steps,
                            hc.engine,
                            output_dir=str(Path(hc.output_dir) / name),
                            algorithm=algorithm,
                            learning_rate=lr,
                            prompts_per_step=hc.prompts_per_step,
                            num_generations=hc.samples_per_prompt,
                            checkpoint_every=0,
                        )
    return out


def _window_means(values: list[float], window: int) -> list[float]:
    return [sum(values[i - window : i]) / window for i in range(window, len(values) + 1)]


COLLAPSE_DROP = 0.3
"""A run *collapsed* when its final window-mean accuracy ended this far below its step-1 accuracy (the rollout of
the untouched model): the training's collapse alarm compares 10-step windows, so it cannot fire in a 16-step run."""


def run_summary(rows: list[dict], target: float = 0.95, window: int = 5) -> dict:
    """One run in numbers: first, best and final ``window``-step mean accuracy, steps to ``target``, alarms, the
    mean mismatch, its growth (last window over first), and the mean phantom-clip fraction."""
    acc = [r[schema.ACCURACY] for r in rows if schema.ACCURACY in r]
    means = _window_means(acc, min(window, len(acc))) if acc else []
    mism = [r[schema.TOKEN_ABS_LOGP_DIFF] for r in rows if isinstance(r.get(schema.TOKEN_ABS_LOGP_DIFF), (int, float))]
    w = max(1, min(window, len(mism) // 2))
    phantom = [r[schema.PHANTOM_FRACTION] for r in rows if isinstance(r.get(schema.PHANTOM_FRACTION), (int, float))]
    final = means[-1] if means else None
    return {
        "first": means[0] if means else None,
        "best": max(means) if means else None,
        "final": final,
        "collapsed": bool(acc and final is not None and final < acc[0] - COLLAPSE_DROP),
        "steps_to_target": steps_to(rows, target, window),
        "alarms": sum(1 for r in rows if r.get("alarm")),
        "mismatch": sum(mism) / len(mism) if mism else None,
        "mismatch_growth": (sum(mism[-w:]) / sum(mism[:w])) if len(mism) >= 2 and sum(mism[:w]) > 0 else None,
        "phantom": sum(phantom) / len(phantom) if phantom else None,
    }


COLUMNS = {
    "length": "length",
    "lr": "lr",
    "algorithm": "algorithm",
    "seeds": "seeds",
    "fp16_final": "fp16 final",
    "bf16_final": "bf16 final",
    "gap": "gap (bf16 − fp16)",
    "gap_range": "gap [min, max]",
    "sign": "gap sign",
    "fp16_best": "fp16 best",
    "bf16_best": "bf16 best",
    "fp16_steps": "fp16 steps to {target:.0%}",
    "bf16_steps": "bf16 steps to {target:.0%}",
    "fp16_alarms": "fp16 alarms",
    "bf16_alarms": "bf16 alarms",
    "fp16_collapsed": "fp16 collapsed",
    "bf16_collapsed": "bf16 collapsed",
    "fp16_mismatch": "fp16 mismatch",
    "bf16_mismatch": "bf16 mismatch",
    "mismatch_ratio": "mismatch bf16/fp16",
    "bf16_growth": "bf16 mismatch growth",
    "fp16_growth": "fp16 mismatch growth",
    "bf16_phantom": "bf16 phantom",
    "fp16_phantom": "fp16 phantom",
}
"""A phase-map row's named fields → the headers it is shown under (``nbkit.studies.prose``; ``{target}`` is filled
with the target accuracy), in column order."""
TABLE = (
    "length",
    "lr",
    "algorithm",
    "seeds",
    "fp16_final",
    "bf16_final",
    "gap",
    "gap_range",
    "sign",
    "mismatch_ratio",
    "bf16_growth",
    "bf16_phantom",
)
"""The named fields of the study page's table."""


def cells(
    runs: dict[str, list[dict]],
    meta: dict[str, dict],
    target: float = 0.95,
    window: int = 5,
    margin: float = GAP_MARGIN,
) -> list[dict]:
    """One row of named fields (``COLUMNS``' keys) per (length, lr, algorithm): FP16 and BF16 over seeds, and the
    BF16 − FP16 gap of the final accuracy per seed (paired by seed). ``meta`` holds each run's coordinates
    (``Hunt.coords``). ``sign`` is ``BF16 behind`` / ``BF16 ahead`` only when the mean gap is beyond ``margin`` and
    every seed's gap has that sign; otherwise ``within seed spread``."""
    by_cell: dict[tuple, dict[str, dict[int, dict]]] = {}
    for name, rows in runs.items():
        p = meta[name]
        key = (p["length"], p["lr"], p["algorithm"])
        by_cell.setdefault(key, {}).setdefault(p["dtype"], {})[p["seed"]] = run_summary(rows, target, window)
    order = {x: i for i, x in enumerate(LENGTHS)}
    out = []
    for (length, lr, algorithm), by_dtype in sorted(
        by_cell.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][1], kv[0][2])
    ):
        fp16, bf16 = by_dtype.get("fp16", {}), by_dtype.get("bf16", {})
        seeds = sorted(set(fp16) & set(bf16))
        gaps = [
            bf16[s]["final"] - fp16[s]["final"]
            for s in seeds
            if bf16[s]["final"] is not None and fp16[s]["final"] is not None
        ]
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
        out.append(
            {
                "length": length,
                "lr": lr,
                "algorithm": algorithm,
                "seeds": len(seeds),
                "fp16_final": _r(mean(fp16, "final")),
                "bf16_final": _r(mean(bf16, "final")),
                "gap": _r(mean_gap),
                "gap_range": f"[{_r(min(gaps))}, {_r(max(gaps))}]" if gaps else "—",
                "sign": sign,
                "fp16_best": _r(mean(fp16, "best")),
                "bf16_best": _r(mean(bf16, "best")),
                "fp16_steps": each(fp16, "steps_to_target"),
                "bf16_steps": each(bf16, "steps_to_target"),
                "fp16_alarms": sum(v["alarms"] for v in fp16.values()),
                "bf16_alarms": sum(v["alarms"] for v in bf16.values()),
                "fp16_collapsed": sum(v["collapsed"] for v in fp16.values()),
                "bf16_collapsed": sum(v["collapsed"] for v in bf16.values()),
                "fp16_mismatch": _r(m16, 3),
                "bf16_mismatch": _r(m_bf, 3),
                "mismatch_ratio": _r(m_bf / m16, 3) if m16 and m_bf else None,
                "bf16_growth": _r(mean(bf16, "mismatch_growth"), 3),
                "fp16_growth": _r(mean(fp16, "mismatch_growth"), 3),
                "bf16_phantom": _r(mean(bf16, "phantom"), 3),
                "fp16_phantom": _r(mean(fp16, "phantom"), 3),
            }
        )
    return out


def phase_map(
    runs: dict[str, list[dict]],
    meta: dict[str, dict],
    target: float = 0.95,
    window: int = 5,
    margin: float = GAP_MARGIN,
) -> list[dict]:
    """``cells`` under their display headers (``COLUMNS``, the target filled in): the map notebook 04 shows."""
    return prose.display(
        cells(runs, meta, target, window, margin), {k: v.format(target=target) for k, v in COLUMNS.items()}
    )


def _r(x, digits: int = 3):
    if x is None:
        return None
    return float(f"{x:.{digits}g}") if abs(x) < 1e-2 and x != 0 else round(x, digits)


def most_telling(rows: list[dict], gap: str = COLUMNS["gap"]) -> dict:
    """The row where BF16 fell furthest behind FP16 (most negative mean gap; ``gap`` is the field holding it, by
    default a ``phase_map`` row's header)."""
    rows = [r for r in rows if r[gap] is not None]
    if not rows:
        raise ValueError("no cell has both an FP16 and a BF16 run with the same seed")
    return min(rows, key=lambda r: r[gap])


def cell_runs(runs: dict[str, list[dict]], meta: dict[str, dict], cell: dict) -> dict[str, list[dict]]:
    """The runs of one phase-map cell (both precisions, every seed)."""
    return {
        k: v
        for k, v in runs.items()
        if (p := meta[k])["length"] == cell["length"] and p["lr"] == cell["lr"] and p["algorithm"] == cell["algorithm"]
    }


# -- the page's sentences: templates over a row's named fields (``COLUMNS``), or values named beside them --------
WHERE = "{length} responses, lr {lr:g}, {algorithm}"
HEAD = (
    "Over {cells} cells ({lengths} lengths × {lrs} learning rates × {algorithms} algorithms, {seeds} seeds each"
    "{not_run}), "
)
NOT_RUN = "; not run: {cells}"
BEHIND = "BF16 ended behind FP16 beyond the seed spread (every seed, mean gap < −{margin:g}) in {n}: {cells}."
BEHIND_CELL = WHERE + " ({gap:+.3f})"
NEVER_BEHIND = (
    "BF16 never ended behind FP16 beyond the seed spread (every seed, mean gap < −{margin:g}). The largest mean gap "
    "against BF16 was {gap:+.3f} (per seed {gap_range}) at " + WHERE + "."
)
AHEAD = " BF16 ended ahead beyond the seed spread in {n}: {cells}."
COLLAPSED = " Runs whose final accuracy ended ≥ {drop:g} below their first step's: FP16 {fp16}, BF16 {bf16}{where}."
COLLAPSED_WHERE = " (in {cells})"
ALARMS = (
    " Collapse alarms: FP16 {fp16}, BF16 {bf16}. BF16's mean |Δ log p| was {low:.1f}–{high:.1f}× FP16's across cells."
)
LEFT_OUT = " Left out, no FP16/BF16 twin: {cells}."
NOISE = (
    "Noise: the paired gap of one seed has a pooled within-cell SD of {sd:.3f} (over {k} cells); with that noise and "
    "no true gap, the rule flags a cell with probability {p:.1%}, so among {k} cells the chance of at least one flag "
    "is {any_flag:.0%}. A single flagged cell is what chance predicts, not evidence; a true gap of {margin:g} at this "
    "noise needs about {seeds} seeds per cell to be seen with 80 % power (two-sided 5 % paired t-test)."
)
TOO_FEW = "Too few seeds per cell to estimate how often chance alone would flag one."


def verdict(rows: list[dict], margin: float = GAP_MARGIN) -> str:
    """The hunt's answer in plain words, computed from ``phase_map`` rows."""
    rows = prose.named(rows, COLUMNS)
    incomplete = [r for r in rows if not r["seeds"]]
    rows = [r for r in rows if r["seeds"]]
    if not rows:
        raise ValueError("no phase-map cell has an FP16 and a BF16 run with the same seed: nothing to compare")
    behind = [r for r in rows if r["sign"] == "BF16 behind"]
    ahead = [r for r in rows if r["sign"] == "BF16 ahead"]
    ratios = [r["mismatch_ratio"] for r in rows if r["mismatch_ratio"]]
    axes = [sorted({r[k] for r in rows + incomplete}, key=str) for k in ("length", "lr", "algorithm")]
    have = {(r["length"], r["lr"], r["algorithm"]) for r in rows + incomplete}
    absent = [dict(zip(("length", "lr", "algorithm"), c)) for c in itertools.product(*axes) if c not in have]

    def where(cells: list[dict], template: str = WHERE) -> str:
        return "; ".join(template.format_map(r) for r in cells)

    text = HEAD.format(
        cells=len(rows),
        lengths=len(axes[0]),
        lrs=len(axes[1]),
        algorithms=len(axes[2]),
        seeds="/".join(map(str, sorted({r["seeds"] for r in rows}))),
        not_run=NOT_RUN.format(cells=where(absent)) if absent else "",
    )
    if behind:
        text += BEHIND.format(margin=margin, n=len(behind), cells=where(behind, BEHIND_CELL))
    else:
        text += NEVER_BEHIND.format_map({**most_telling(rows, "gap"), "margin": margin})
    if ahead:
        text += AHEAD.format(n=len(ahead), cells=where(ahead))
    gone = [r for r in rows if r["fp16_collapsed"] + r["bf16_collapsed"]]
    text += COLLAPSED.format(
        drop=COLLAPSE_DROP,
        fp16=sum(r["fp16_collapsed"] for r in rows),
        bf16=sum(r["bf16_collapsed"] for r in rows),
        where=COLLAPSED_WHERE.format(cells=where(gone)) if gone else "",
    )
    if ratios:
        text += ALARMS.format(
            fp16=sum(r["fp16_alarms"] for r in rows),
            bf16=sum(r["bf16_alarms"] for r in rows),
            low=min(ratios),
            high=max(ratios),
        )
    if incomplete:
        text += LEFT_OUT.format(cells=where(incomplete))
    return text


def seed_gaps(runs: dict[str, list[dict]], meta: dict[str, dict], window: int = 5) -> dict[tuple, list[float]]:
    """``(length, lr, algorithm) → [BF16 − FP16 final accuracy per seed]`` (paired by seed, ``window``-step means)."""
    finals: dict[tuple, dict[str, dict[int, float]]] = {}
    for name, rows in runs.items():
        p = meta[name]
        final = run_summary(rows, window=window)["final"]
        if final is not None:
            finals.setdefault((p["length"], p["lr"], p["algorithm"]), {}).setdefault(p["dtype"], {})[p["seed"]] = final
    return {
        cell: [d["bf16"][s] - d["fp16"][s] for s in sorted(set(d.get("bf16", {})) & set(d.get("fp16", {})))]
        for cell, d in finals.items()
    }


def false_flag_rate(sd: float, n_seeds: int, margin: float = GAP_MARGIN, n_sim: int = 200_000, seed: int = 0) -> float:
    """Chance that a cell with *no* true gap is flagged *BF16 behind* by ``phase_map``'s rule (every one of
    ``n_seeds`` paired gaps negative and their mean below −``margin``), when each seed's gap is N(0, ``sd``²)."""
    import numpy as np

    if sd <= 0 or n_seeds < 1:
        raise ValueError(f"sd must be > 0 and n_seeds ≥ 1, got sd={sd!r}, n_seeds={n_seeds!r}")
    g = np.random.default_rng(seed).normal(0.0, sd, size=(n_sim, n_seeds))
    return float(np.mean((g < 0).all(axis=1) & (g.mean(axis=1) < -margin)))


def chance_caveat(
    runs: dict[str, list[dict]], meta: dict[str, dict], margin: float = GAP_MARGIN, window: int = 5
) -> str:
    """How often chance alone would flag a cell, from the grid's own seed noise: the pooled within-cell SD of the
    paired gaps, the per-cell false-flag rate under that noise, and the chance of ≥ 1 flag among the grid's cells."""
    gaps = {c: g for c, g in seed_gaps(runs, meta, window).items() if len(g) >= 2}
    if not gaps:
        return TOO_FEW
    import statistics

    sd = statistics.fmean(statistics.variance(g) for g in gaps.values()) ** 0.5
    n_seeds = min(len(g) for g in gaps.values())
    p = false_flag_rate(sd, n_seeds, margin)
    k = len(gaps)
    return NOISE.format(sd=sd, k=k, p=p, any_flag=1 - (1 - p) ** k, margin=margin, seeds=seeds_needed(sd, margin))


class Hunt(GridStudy):
    """The hunt grid as a stored study (``nbkit study hunt_tiny_long run|store|show``); options are
    ``HuntConfig`` fields."""

    name = STUDY
    title = "Where BF16 breaks: the hunt on tiny-long"
    question = (
        "Is there a response length × learning rate × algorithm cell where BF16 RL ends behind FP16? Rule, "
        "stated before the results: a cell counts as *BF16 behind* when every seed's paired gap is negative "
        f"and the mean gap is below −{GAP_MARGIN:g}."
    )
    statistic = (
        "final = last 5-step mean of training accuracy, mean over seeds; gap = BF16 − FP16 paired by seed, "
        "mean and [min, max]; mismatch ratio = mean |Δ log p| over steps; growth = last window over first."
    )
    notebook = "04_where_bf16_breaks"
    output_dir = HuntConfig.output_dir
    twins = len(HUNT_DTYPES)
    toy = {
        "lengths": ["short"],
        "lrs": [1e-4],
        "algorithms": ["grpo"],
        "seeds": [0],
        "steps": 1,
        "prompts_per_step": 2,
        "samples_per_prompt": 2,
    }

    def grid(self, **options) -> dict:
        opts = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
        return configs(HuntConfig(**opts))

    def defaults(self) -> dict:
        from dataclasses import asdict

        return asdict(HuntConfig())

    def grid_options(self, card: dict) -> dict:
        configs = card.get("configs", {})
        return dict(configs.get("grid") or configs.get("hunt") or {})  # "hunt": cards stored before nbkit study

    def coords(self, config: dict) -> dict:
        from nbkit.studies import tiny_long_regimes

        regime = {f"data/{tiny_long_regimes.set_name(r)}": r for r in long_arith.REGIMES}.get(config["dataset"])
        if regime is None:
            raise ValueError(f"{config['dataset']!r} is not one of tiny-long's perfectible sets: not a hunt run")
        return {
            "length": regime,
            "lr": float(renamed(config)["learning_rate"]),  # a stored config under the old names too
            "algorithm": config["algorithm"],
            "dtype": config["train_dtype"],
            "seed": int(config["seed"]),
        }

    def table(self, runs, meta):
        return prose.display([{k: r[k] for k in TABLE} for r in cells(runs, meta)], COLUMNS)

    def findings(self, runs, meta, rows):
        return [verdict(phase_map(runs, meta)), chance_caveat(runs, meta)]

    def figure(self, runs, meta):
        from nbkit.plots import hunt as hunt_plots

        return hunt_plots.phase_map(phase_map(runs, meta))
