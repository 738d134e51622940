"""Which candidate statistic predicts the accuracy gap best: a monotone fit scored by cross-validation, with a rule
that names a winner only when the data say so (issue 50, item 2).

A *point* is one (task, rollout format) with an FP32-paired accuracy gap per seed; each candidate gives it one
value (its *dose*, larger = more mismatch). For a candidate:

- **fit**: the isotonic, non-increasing regression of the points' mean gaps on the candidate's values
  (``scipy.optimize.isotonic_regression``; points with equal values pooled, weighted by their count), predicted at a
  new value by linear interpolation between the fitted points, held constant beyond the fitted range;
- **cross-validation error**: the mean over points of |predicted − observed mean gap| with each point predicted by
  a fit that did not see it: *leave-one-format-out* (``lofo``: every point of one format, on every task, held out
  together) and *leave-one-task-out* (``loto``: every point of one task predicted from the other tasks' points).

**Bootstrap.** Each replicate draws, per task, as many seeds as the task has, with replacement, from the seeds of
that task (every point of a task draws the same seeds, keeping the pairing through its shared FP32 runs); a point's
replicate mean gap is its mean over the drawn seeds it has (a point with none of them draws from its own seeds).
Every candidate is scored on the same replicates, so differences between candidates are paired. Candidate values
are held fixed (each is one measurement; its sampling error is not carried).

**Winner** (``verdict``). A candidate W wins when it has the lowest point error under both schemes and, for every
other candidate c and both schemes, the percentile interval of err_c − err_W lies wholly above 0 at the
family-wise level ``ALPHA`` (Bonferroni over the 2·(K − 1) comparisons: each interval at 1 − ALPHA/(2·(K − 1))).
Otherwise there is *no clear winner*, and the verdict says which comparisons failed.

**Against a constant** (``against_constant``; a reading added after the results, not part of the rule above: the
predictors study records it as an amendment). The *constant* predicts every held-out point by the mean observed gap
of the points its fold was fit on (under ``lofo`` the mean over the other formats' points, under ``loto`` the other
task's mean gap): the isotonic fit pooled flat, i.e. what a candidate carrying no information would score. It is
scored on the same folds and the same bootstrap replicates as the candidates, so each candidate's difference
err_c − err_constant is paired; its percentile interval is at 1 − ALPHA/K per scheme (Bonferroni over the K
candidates within a scheme), and a candidate *beats the constant* under a scheme only where that interval lies
wholly below 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import isotonic_regression

SCHEMES = ("lofo", "loto")
"""Cross-validation schemes: leave one format out, leave one task out."""
ALPHA = 0.05
"""Family-wise error of the winner's comparisons (Bonferroni)."""
LEVEL = 0.95
"""Level of each candidate's own error interval shown in the table."""


def fit(x, y) -> tuple[np.ndarray, np.ndarray]:
    """The non-increasing isotonic fit of ``y`` on ``x``: (sorted distinct x, fitted y there); equal x pooled."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size == 0 or x.size != y.size or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"fit needs matching finite x and y, got {x.size} x and {y.size} y")
    ux, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    means = np.bincount(inv, weights=y) / counts
    return ux, isotonic_regression(means, weights=counts.astype(np.float64), increasing=False).x


def predict(curve: tuple[np.ndarray, np.ndarray], x_new) -> np.ndarray:
    """The fitted curve at ``x_new``: linear between fitted points, constant beyond them."""
    return np.interp(np.asarray(x_new, dtype=np.float64), curve[0], curve[1])


def folds(tasks, formats, scheme: str) -> list[np.ndarray]:
    """Held-out index sets of ``scheme`` over points named by ``tasks[i]``, ``formats[i]``."""
    key = {"lofo": formats, "loto": tasks}.get(scheme)
    if key is None:
        raise ValueError(f"unknown scheme {scheme!r}; choose from {SCHEMES}")
    key = np.asarray(key)
    return [np.flatnonzero(key == k) for k in dict.fromkeys(key.tolist())]


def cv_error(x, y, held: list[np.ndarray]) -> float:
    """Mean |predicted − observed| over every held-out point of ``held`` (each fold fit on the rest); NaN when a
    fold leaves nothing to fit on."""
    return float(cv_errors(x, np.asarray(y, dtype=np.float64)[None, :], held)[0])


def constant_errors(ys, held: list[np.ndarray]) -> np.ndarray:
    """The constant's cross-validation error of each row of ``ys`` (replicates × points): each held-out point
    predicted by the unweighted mean of the other points' gaps (those its fold was fit on); NaN when a fold leaves
    nothing to fit on."""
    ys = np.atleast_2d(np.asarray(ys, dtype=np.float64))
    parts = []
    for idx in held:
        keep = np.ones(ys.shape[1], bool)
        keep[idx] = False
        if not keep.any():
            return np.full(ys.shape[0], np.nan)
        parts.append(np.abs(ys[:, keep].mean(axis=1, keepdims=True) - ys[:, idx]))
    return np.concatenate(parts, axis=1).mean(axis=1)


def cv_errors(x, ys, held: list[np.ndarray]) -> np.ndarray:
    """``cv_error`` of each row of ``ys`` (replicates × points) on the same ``x``: the folds' pooling of equal x and
    interpolation weights are computed once, the isotonic fit once per row and fold."""
    x, ys = np.asarray(x, dtype=np.float64), np.atleast_2d(np.asarray(ys, dtype=np.float64))
    parts = []
    for idx in held:
        keep = np.ones(x.size, bool)
        keep[idx] = False
        if not keep.any():
            return np.full(ys.shape[0], np.nan)
        ux, inv, counts = np.unique(x[keep], return_inverse=True, return_counts=True)
        pool = np.zeros((inv.size, ux.size))
        pool[np.arange(inv.size), inv] = 1.0 / counts[inv]
        means, w = ys[:, keep] @ pool, counts.astype(np.float64)
        fitted = np.array([isotonic_regression(m, weights=w, increasing=False).x for m in means])
        # np.interp's weights at the held-out x (linear between fitted points, constant beyond), for every row
        xn = np.clip(x[idx], ux[0], ux[-1])
        hi = np.clip(np.searchsorted(ux, xn, side="right"), 1, max(ux.size - 1, 1))
        lo = hi - 1 if ux.size > 1 else np.zeros_like(hi)
        hi = hi if ux.size > 1 else np.zeros_like(hi)
        span = ux[hi] - ux[lo]
        t = np.divide(xn - ux[lo], span, out=np.zeros_like(xn), where=span > 0)
        pred = fitted[:, lo] * (1 - t) + fitted[:, hi] * t
        parts.append(np.abs(pred - ys[:, idx]))
    return np.concatenate(parts, axis=1).mean(axis=1)


@dataclass
class Points:
    """The points a scoring reads: names, per-seed gaps and each candidate's values."""

    tasks: list[str]
    """Task of each point."""
    formats: list[str]
    """Rollout format of each point (a format on two tasks is two points, held out together by ``lofo``)."""
    gaps: list[dict[int, float]]
    """Per point: seed → FP32-paired gap."""
    values: dict[str, np.ndarray]
    """Candidate → its value at each point (larger = more mismatch)."""

    def __post_init__(self) -> None:
        n = len(self.tasks)
        if not (len(self.formats) == len(self.gaps) == n) or n < 3:
            raise ValueError(
                f"need >= 3 points with a task, format and gaps each; got {n} tasks, "
                f"{len(self.formats)} formats, {len(self.gaps)} gap sets"
            )
        empty = [f"{t}/{f}" for t, f, g in zip(self.tasks, self.formats, self.gaps) if not g]
        if empty:
            raise ValueError(f"points without any paired gap: {empty}")
        for c, v in self.values.items():
            v = np.asarray(v, dtype=np.float64)
            if v.shape != (n,) or not np.isfinite(v).all():
                raise ValueError(f"candidate {c!r} needs one finite value per point ({n}), got {v.tolist()}")
            self.values[c] = v

    def mean_gaps(self) -> np.ndarray:
        return np.array([np.mean(list(g.values())) for g in self.gaps])


def replicate_gaps(points: Points, n_boot: int, seed: int) -> np.ndarray:
    """``n_boot`` × points bootstrap mean gaps (module docstring: seeds drawn per task, shared by its points)."""
    rng = np.random.default_rng(seed)
    tasks = list(dict.fromkeys(points.tasks))
    seeds = {t: sorted({s for tk, g in zip(points.tasks, points.gaps) if tk == t for s in g}) for t in tasks}
    out = np.empty((n_boot, len(points.tasks)))
    for b in range(n_boot):
        drawn = {t: rng.choice(seeds[t], size=len(seeds[t])) for t in tasks}
        for i, (t, g) in enumerate(zip(points.tasks, points.gaps)):
            have = [g[s] for s in drawn[t] if s in g]
            if not have:
                own = sorted(g)
                have = [g[s] for s in rng.choice(own, size=len(own))]
            out[b, i] = np.mean(have)
    return out


@dataclass
class Scores:
    """Every candidate's cross-validation errors: point estimates, bootstrap replicates and the verdict."""

    errors: dict[str, dict[str, float]]
    """scheme → candidate → error on the observed mean gaps."""
    replicates: dict[str, dict[str, np.ndarray]]
    """scheme → candidate → the error on each bootstrap replicate."""
    n_boot: int
    seed: int
    alpha: float = ALPHA
    verdict: dict = field(default_factory=dict)
    """``verdict``'s reading."""
    constant: dict[str, float] = field(default_factory=dict)
    """scheme → the constant's error on the observed mean gaps (module docstring: against a constant)."""
    constant_replicates: dict[str, np.ndarray] = field(default_factory=dict)
    """scheme → the constant's error on the same bootstrap replicates as the candidates'."""

    def constant_ci(self, scheme: str, level: float = LEVEL) -> tuple[float, float]:
        lo, hi = np.nanquantile(self.constant_replicates[scheme], [(1 - level) / 2, (1 + level) / 2])
        return float(lo), float(hi)

    def ci(self, scheme: str, cand: str, level: float = LEVEL) -> tuple[float, float]:
        r = self.replicates[scheme][cand]
        lo, hi = np.nanquantile(r, [(1 - level) / 2, (1 + level) / 2])
        return float(lo), float(hi)

    def diff_ci(self, scheme: str, other: str, winner: str, level: float) -> tuple[float, float]:
        d = self.replicates[scheme][other] - self.replicates[scheme][winner]
        lo, hi = np.nanquantile(d, [(1 - level) / 2, (1 + level) / 2])
        return float(lo), float(hi)

    def table(self) -> list[dict]:
        rows = []
        for c in self.errors[SCHEMES[0]]:
            row = {"candidate": c}
            for s in SCHEMES:
                row[f"{s} error"] = self.errors[s][c]
                row[f"{s} 95 % CI"] = list(self.ci(s, c))
            rows.append(row)
        return rows


def score(points: Points, n_boot: int = 2000, seed: int = 0, alpha: float = ALPHA) -> Scores:
    """Every candidate's LOFO and LOTO errors with paired bootstrap replicates, and the ``verdict``."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot!r}")
    if len(points.values) < 2:
        raise ValueError(f"scoring needs >= 2 candidates, got {list(points.values)}")
    y, reps = points.mean_gaps(), replicate_gaps(points, n_boot, seed)
    errors, replicates, constant, constant_replicates = {}, {}, {}, {}
    for s in SCHEMES:
        held = folds(points.tasks, points.formats, s)
        if len(held) < 2:
            raise ValueError(f"scheme {s} needs >= 2 folds, the points give {len(held)}")
        errors[s] = {c: cv_error(x, y, held) for c, x in points.values.items()}
        replicates[s] = {c: cv_errors(x, reps, held) for c, x in points.values.items()}
        constant[s] = float(constant_errors(y, held)[0])
        constant_replicates[s] = constant_errors(reps, held)
    out = Scores(errors, replicates, n_boot, seed, alpha, {}, constant, constant_replicates)
    out.verdict = verdict(out)
    return out


def against_constant(scores: Scores) -> dict:
    """Each candidate against the constant (module docstring): ``{"level": each interval's level, "how",
    "constant": scheme → {"error", "ci"}, "rows": [{"candidate", "scheme", "diff", "ci", "beats"}],
    "beats": scheme → the candidates that beat it}``."""
    cands = list(scores.errors[SCHEMES[0]])
    level = 1 - scores.alpha / len(cands)
    rows, beats = [], {}
    for s in SCHEMES:
        beats[s] = []
        for c in cands:
            d = scores.replicates[s][c] - scores.constant_replicates[s]
            lo, hi = (float(q) for q in np.nanquantile(d, [(1 - level) / 2, (1 + level) / 2]))
            rows.append(
                {
                    "candidate": c,
                    "scheme": s,
                    "diff": scores.errors[s][c] - scores.constant[s],
                    "ci": [lo, hi],
                    "beats": bool(hi < 0),
                }
            )
            if hi < 0:
                beats[s].append(c)
    return {
        "level": level,
        "how": (
            f"err(candidate) − err(constant) on the same folds and {scores.n_boot} bootstrap replicates (seed "
            f"{scores.seed}); {100 * level:.2f} % percentile interval each, Bonferroni over the {len(cands)} "
            f"candidates within a scheme (family-wise {scores.alpha:g} per scheme); beats = interval wholly below 0"
        ),
        "constant": {s: {"error": scores.constant[s], "ci": list(scores.constant_ci(s))} for s in SCHEMES},
        "rows": rows,
        "beats": beats,
    }


def against_constant_table(read: dict) -> list[dict]:
    """``against_constant``'s rows as one row per candidate: per scheme its error − the constant's, that difference's
    interval and whether it beats the constant."""
    table: dict[str, dict] = {}
    for r in read["rows"]:
        s = r["scheme"]
        row = table.setdefault(r["candidate"], {"candidate": r["candidate"]})
        row.update({f"{s}: err − constant": r["diff"], f"{s} CI": r["ci"], f"{s}: beats it": r["beats"]})
    return list(table.values())


def verdict(scores: Scores) -> dict:
    """The winner, or "no clear winner" with why (module docstring): ``{"winner": name or None, "reason",
    "leaders": scheme → lowest-error candidate, "level": each comparison's interval level, "comparisons": [...]}``."""
    cands = list(scores.errors[SCHEMES[0]])
    m = len(SCHEMES) * (len(cands) - 1)
    level = 1 - scores.alpha / m
    leaders = {s: min(cands, key=lambda c: scores.errors[s][c]) for s in SCHEMES}
    out = {"winner": None, "leaders": leaders, "level": level, "comparisons": []}
    if len(set(leaders.values())) > 1:
        out["reason"] = "the lowest error differs between schemes: " + ", ".join(f"{s} {c}" for s, c in leaders.items())
        return out
    w = leaders[SCHEMES[0]]
    failed = []
    for s in SCHEMES:
        for c in cands:
            if c == w:
                continue
            lo, hi = scores.diff_ci(s, c, w, level)
            out["comparisons"].append(
                {
                    "scheme": s,
                    "other": c,
                    "diff": scores.errors[s][c] - scores.errors[s][w],
                    "ci": [lo, hi],
                    "clear": bool(lo > 0),
                }
            )
            if not lo > 0:
                failed.append(f"{s}: {c} (err − {w}'s {lo:.3g} to {hi:.3g})")
    if failed:
        out["reason"] = (
            f"{w} has the lowest error under both schemes, but its lead's {100 * level:.2f} % interval "
            f"includes 0 against " + "; ".join(failed)
        )
        return out
    out["winner"] = w
    out["reason"] = (
        f"{w} has the lowest error under both schemes and every paired difference's {100 * level:.2f} % "
        f"interval lies above 0 ({m} comparisons, family-wise {scores.alpha:g}, Bonferroni)"
    )
    return out


def prediction_curve(points: Points, name: str, scheme: str = "lofo") -> dict:
    """Candidate ``name``'s fit on every point (``curve``: sorted values, fitted gaps), the range it was fit on, and
    its prediction interval: ± the 95 % quantile of its absolute prediction errors with a format held out
    (``scheme="lofo"``) or a whole task held out (``"loto"``: the interval for a new task or model)."""
    x, y = points.values[name], points.mean_gaps()
    held_out = {"lofo": "leave-one-format-out", "loto": "leave-one-task-out"}
    if scheme not in held_out:
        raise ValueError(f"scheme {scheme!r}: choose one of {sorted(held_out)}")
    resid = []
    for idx in folds(points.tasks, points.formats, scheme):
        keep = np.ones(x.size, bool)
        keep[idx] = False
        resid.extend(np.abs(predict(fit(x[keep], y[keep]), x[idx]) - y[idx]).tolist())
    curve = fit(x, y)
    return {
        "curve": {"x": curve[0].tolist(), "gap": curve[1].tolist()},
        "interval": {
            "half_width": float(np.quantile(resid, 0.95)),
            "how": f"± the 95 % quantile of the candidate's {held_out[scheme]} absolute prediction errors",
        },
        "range": [float(x.min()), float(x.max())],
    }
