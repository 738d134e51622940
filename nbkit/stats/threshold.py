"""Where harm starts: the dose at which a format's paired accuracy gap crosses a harm line, with a bootstrap CI.

The pre-registered analysis of the harm-threshold study (issue 37, item 2), stated here before any run:

- **Outcome.** Per seed and dose, the paired gap g = (held-out judge accuracy of the run in the dosed format) −
  (that of the FP32 run on the same seed): the same data, initial weights and sampling seed on both sides.
- **Curve.** An isotonic (non-increasing) fit of the mean gap against log dose, weighted by the number of seeds
  at each dose. Why isotonic and not a 2-parameter logistic: a logistic of the gap needs the floor it falls to
  (a third parameter: with e8m1 the gap can be −0.1 or −0.9 depending on how fast the model breaks), and with 6
  doses × 5 seeds a mis-specified shape would bias the crossing without showing it; the only assumption isotonic
  makes is the one the study is built on, that more rounding does not help. Between doses the fit is read by
  linear interpolation in log dose.
- **Threshold.** The smallest dose where the fitted gap reaches ``harm`` (−0.05): the log-linear interpolation
  between the last dose above the line and the first at or below it.
- **CI.** A percentile bootstrap over seeds: a replicate draws seeds with replacement and keeps each drawn seed's
  whole row of gaps (its FP32 reference is shared across doses, so the doses of one seed are not independent).
  Before resampling, each dose's gaps are spread about their mean by sqrt(n / (n − 1)) · t_{n−1} / z: the
  percentile bootstrap of a mean from n seeds is a z-interval with the plug-in variance, about 30 % too narrow
  with 5 seeds; the factor makes it the t-interval, and the threshold is a smooth function of the dose means
  (simulated coverage of a 95 % interval, 5 seeds, a logistic gap curve: 82 % without the factor, 94 % with it).
- **Shape between doses.** The interpolated crossing assumes the curve is straight in log dose between the two
  doses around it; where it bends sharply there the interval can miss. ``bracket`` is the interval that assumes
  nothing but monotonicity: from the lower bracketing dose of the replicates' α-quantile to the upper bracketing
  dose of their (1 − α)-quantile. Report it beside ``ci``; doses spaced more finely narrow it.
- **No crossing inside the measured range** is an outcome, not an extrapolation: ``outcome`` is ``below_range``
  (already harmed at the smallest dose: the threshold is below it), ``above_range`` (never harmed: the threshold is
  above the largest dose) or ``crossing``; a CI bound that falls outside the range is reported as ``None`` with
  ``ci_low_censored`` / ``ci_high_censored`` set, never as a number the data did not reach.

    est = threshold.estimate(gaps, doses)          # gaps: (seeds, doses), NaN where a run is missing
    est.outcome, est.dose, est.ci                   # 'crossing', 0.12, (0.07, 0.21)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import isotonic_regression

from nbkit.stats import stats

HARM = -0.05
"""The harm line: a format harms when its paired gap to FP32 reaches −0.05 (5 accuracy points)."""
OUTCOMES = ("crossing", "below_range", "above_range")
"""``crossing``: the fitted gap crosses ``harm`` inside the measured doses; ``below_range``: it is already at or
below it at the smallest dose; ``above_range``: it never reaches it up to the largest dose."""


@dataclass(frozen=True)
class Threshold:
    """A harm threshold and its bootstrap CI."""

    outcome: str
    """One of ``OUTCOMES``."""
    dose: float | None
    """The dose where the fitted gap crosses ``harm`` (``crossing`` only; None otherwise: no extrapolation)."""
    ci: tuple[float | None, float | None]
    """Percentile bootstrap interval (``level``) of the dose; a bound is None when that share of the replicates
    had no crossing on that side of the measured range (see the ``*_censored`` flags)."""
    bracket: tuple[float | None, float | None]
    """The shape-free interval: measured doses bracketing the crossing at the ``level`` quantiles of the
    replicates (None on a censored side, as ``ci``)."""
    ci_low_censored: bool
    """The lower bound lies below the smallest measured dose (too many replicates were already harmed there)."""
    ci_high_censored: bool
    """The upper bound lies above the largest measured dose (too many replicates never crossed)."""
    fitted: tuple[float, ...]
    """The isotonic fit of the mean gap at each dose (the curve the threshold is read from)."""
    doses: tuple[float, ...]
    """The measured doses, ascending."""
    harm: float
    """The harm line the gap was compared with."""
    level: float
    """The CI's coverage level."""
    n_boot: int
    """Bootstrap replicates drawn."""
    replicate_outcomes: dict
    """How many replicates ended in each outcome (a large ``below_range`` or ``above_range`` share is a warning)."""
    bootstrap: str = "seeds: gaps (doses fixed)"
    """What a replicate resampled: each drawn seed's gaps (the doses fixed at their means) or its gaps and doses."""

    def to_json(self) -> dict:
        """One task's entry of the harm-threshold store (``harm_threshold.THRESHOLDS``), with the fit behind it."""
        return {
            "outcome": self.outcome,
            "dose": self.dose,
            "ci": list(self.ci),
            "bracket": list(self.bracket),
            "harm": self.harm,
            "level": self.level,
            "doses": list(self.doses),
            "fitted": list(self.fitted),
            "n_boot": self.n_boot,
            "replicate_outcomes": dict(self.replicate_outcomes),
            "bootstrap": self.bootstrap,
        }

    def describe(self) -> str:
        """One line: the threshold and its CI, or why there is none inside the measured range."""
        lo, hi = self.doses[0], self.doses[-1]
        if self.outcome == "below_range":
            return f"harmed already at the smallest dose {lo:.3g}: the threshold lies below the measured range"
        if self.outcome == "above_range":
            return f"no harm up to the largest dose {hi:.3g}: the threshold lies above the measured range"
        low = f"< {lo:.3g}" if self.ci_low_censored else f"{self.ci[0]:.3g}"
        high = f"> {hi:.3g}" if self.ci_high_censored else f"{self.ci[1]:.3g}"
        return f"threshold {self.dose:.3g} ({self.level:.0%} CI {low} – {high})"


def isotonic_decreasing(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-increasing fit of ``y`` (..., n) with weights ``w`` (..., n), batched over the
    leading axes (``scipy.optimize.isotonic_regression`` row by row). A point of weight 0 (a dose no drawn seed has)
    takes the fit of the next weighted point (the last one's when none follows): the value the max-min formula
    fit_i = min_{k ≤ i} max_{j ≥ i} mean_w(y[k..j]) gives it."""
    y, w = np.broadcast_arrays(np.asarray(y, float), np.asarray(w, float))
    n = y.shape[-1]
    flat_y, flat_w = y.reshape(-1, n), w.reshape(-1, n)
    fit = np.full(flat_y.shape, np.nan)
    on_all = flat_w > 0
    with np.errstate(invalid="ignore"):
        done = on_all.all(1) & np.all(np.diff(flat_y, axis=1) <= 0, axis=1)  # already non-increasing: its own fit
    fit[done] = flat_y[done]
    for r in np.flatnonzero(~done):
        yr, wr, on = flat_y[r], flat_w[r], on_all[r]
        if not on.any():
            continue
        fit[r, on] = isotonic_regression(yr[on], weights=wr[on], increasing=False).x
        if not on.all():
            at = np.flatnonzero(on)
            nxt = np.minimum(np.searchsorted(at, np.arange(n)), at.size - 1)  # next weighted point, else the last
            fit[r] = fit[r, at[nxt]]
    return fit.reshape(y.shape)


def crossing(fitted: np.ndarray, log_doses: np.ndarray, harm: float) -> tuple[np.ndarray, np.ndarray]:
    """Crossing log dose of non-increasing fits (..., n) at ascending ``log_doses`` (n,) or (..., n): (log dose or
    NaN, outcome index into ``OUTCOMES``)."""
    log_doses = np.broadcast_to(np.asarray(log_doses, float), fitted.shape)
    below = fitted <= harm
    first = np.argmax(below, axis=-1)  # first dose at or below the line (0 if none: told apart below)
    any_below = below.any(-1)
    outcome = np.where(~any_below, 2, np.where(first == 0, 1, 0))
    i = np.clip(first, 1, fitted.shape[-1] - 1)[..., None]

    def at(a, k):
        return np.take_along_axis(a, k, -1)[..., 0]

    y0, y1, x0, x1 = at(fitted, i - 1), at(fitted, i), at(log_doses, i - 1), at(log_doses, i)
    with np.errstate(invalid="ignore", divide="ignore"):
        x = x0 + (y0 - harm) / (y0 - y1) * (x1 - x0)  # y0 > harm >= y1, so y0 > y1
    return np.where(outcome == 0, x, np.nan), outcome


@dataclass(frozen=True)
class _Prepared:
    """A threshold's point estimate and how one bootstrap replicate of it is drawn (``estimate``, ``transfer``)."""

    point: np.ndarray
    """The points' doses, ascending."""
    logd: np.ndarray
    fitted: np.ndarray
    x: float
    """The crossing's log dose (NaN without a crossing)."""
    out: int
    """Index into ``OUTCOMES``."""
    seeds: int
    per_seed: bool
    replicate: object
    """idx (B, seeds) → (B,) crossing keys (``_key``: log dose, −inf below the range, +inf above)."""


def _prepare(gaps, doses, harm, level, n_boot, small_sample_correction, points=None) -> _Prepared:
    """Checks (ValueError before any work) and the pieces ``estimate`` and ``transfer`` resample."""
    gaps, doses = np.asarray(gaps, float), np.asarray(doses, float)
    per_seed = doses.ndim == 2
    if gaps.ndim != 2 or doses.ndim not in (1, 2) or doses.shape[-1] != gaps.shape[1]:
        raise ValueError(
            f"gaps must be (seeds, doses) with one column per dose, doses (doses,) or (seeds, doses); got gaps "
            f"{gaps.shape}, doses {doses.shape}"
        )
    if per_seed and doses.shape != gaps.shape:
        raise ValueError(f"per-seed doses must match gaps' shape {gaps.shape}, got {doses.shape}")
    if per_seed and np.any(np.isfinite(gaps) & ~np.isfinite(doses)):
        raise ValueError("every seed with a gap needs its dose (per-seed doses are NaN where gaps are not)")
    if per_seed:
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a dose with no seed: NaN, refused below
            point = np.nanmean(np.where(np.isfinite(gaps), doses, np.nan), axis=0)
    else:
        point = doses
    if per_seed and points is not None:  # the caller's own means (the same numbers, summed in its order)
        if not np.allclose(np.asarray(points, float), point, rtol=1e-9, atol=0):
            raise ValueError(f"points {list(points)} are not the seeds' mean doses {point.tolist()}")
        point = np.asarray(points, float)
    if point.size < 2 or not np.all(np.isfinite(point)) or np.any(point <= 0) or np.unique(point).size != point.size:
        raise ValueError(f"doses must be >= 2 distinct finite positive numbers, got {point.tolist()}")
    if per_seed and np.any(doses[np.isfinite(doses)] <= 0):
        raise ValueError(f"every seed's dose must be > 0, got {doses.tolist()}")
    n_seeds = np.sum(np.isfinite(gaps), axis=0)
    if n_seeds.min() < 2:
        raise ValueError(f"every dose needs >= 2 seeds with a gap; seeds per dose: {n_seeds.tolist()}")
    if not 0 < level < 1 or n_boot < 100:
        raise ValueError(f"level must be in (0, 1) and n_boot >= 100, got level={level!r}, n_boot={n_boot!r}")
    order = np.argsort(point)
    gaps, point, logd = gaps[:, order], point[order], np.log(point[order])
    doses = doses[:, order] if per_seed else None

    def fit(g):  # g: (..., seeds, doses) → isotonic fit of the seed-mean gap per dose, weighted by seeds present
        ok = np.isfinite(g)
        w = ok.sum(-2)
        mean = np.where(ok, g, 0).sum(-2) / np.maximum(w, 1)
        return isotonic_decreasing(np.where(w > 0, mean, 0.0), w.astype(float))

    fitted = fit(gaps)
    x, out = crossing(fitted, logd, harm)
    spread = gaps
    if small_sample_correction:
        z = stats.normal_quantile(1 - (1 - level) / 2)
        factor = np.array(
            [np.sqrt(k / (k - 1)) * stats.t_quantile(1 - (1 - level) / 2, int(k) - 1) / z for k in n_seeds]
        )
        centre = np.nanmean(gaps, axis=0)
        spread = centre + (gaps - centre) * factor

    def replicate(idx):  # idx (B, seeds): whole rows (each drawn seed's gaps, and doses) per replicate
        # a replicate depends only on which seeds it drew, how often: each distinct draw is fitted once (5 seeds
        # have 126), the order of the draw only moves the sums' last bits
        drawn, back = np.unique(np.sort(idx, axis=-1), axis=0, return_inverse=True)
        return distinct(drawn)[back.reshape(-1)]

    def distinct(idx):
        g = spread[idx]
        if not per_seed:
            return _key(*crossing(fit(g), logd, harm))
        d = doses[idx]
        dm = np.nanmean(np.where(np.isfinite(g), d, np.nan), axis=-2)  # (B, doses); NaN where no drawn seed has it
        dm = np.where(np.isfinite(dm), dm, point)  # a dose no drawn seed has keeps its point dose (weight 0 anyway)
        o = np.argsort(dm, axis=-1)
        g = np.take_along_axis(g, o[:, None, :], -1)
        return _key(*crossing(fit(g), np.log(np.take_along_axis(dm, o, -1)), harm))

    return _Prepared(point, logd, fitted, float(x), int(out), gaps.shape[0], per_seed, replicate)


def estimate(
    gaps,
    doses,
    harm: float = HARM,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    small_sample_correction: bool = True,
    points=None,
) -> Threshold:
    """The harm threshold of paired gaps ``gaps`` (seeds × doses: format − FP32 on the same seed, NaN for a run
    that is missing) at ``doses``, with a ``level`` percentile bootstrap CI over seeds (``nbkit.stats.stats.bootstrap``,
    ``n_boot`` replicates, RNG ``seed``). ``doses``: one fixed dose per point (> 0, distinct; any order), or each
    seed's own (seeds × doses, NaN where missing): a point's dose is then the mean over its seeds, and a replicate
    resamples each drawn seed's doses with its gaps (the points re-sorted by the replicate's doses).
    ``small_sample_correction``: inflate the resampled gaps about their dose means by sqrt(n/(n−1))·t/z before
    resampling (module docstring); doses are resampled as measured (an inflated dose could fall below 0).
    ``points``: with per-seed doses, the points' doses as the caller computed them (checked to equal the seeds'
    means), so the fit is keyed by the caller's numbers. ValueError for bad input, before any work."""
    pr = _prepare(gaps, doses, harm, level, n_boot, small_sample_correction, points)
    point, logd, x, out = pr.point, pr.logd, pr.x, pr.out
    key = stats.bootstrap(pr.replicate, (pr.seeds,), n_boot, seed)
    bout = np.where(key == -np.inf, 1, np.where(key == np.inf, 2, 0))
    bx = np.where(bout == 0, key, np.nan)
    alpha = (1 - level) / 2
    # a replicate harmed below the range sorts as −inf, one never harmed as +inf: percentiles of a censored sample
    lo_q, hi_q = np.quantile(key, [alpha, 1 - alpha], method="inverted_cdf")
    # shape-free bracket of each replicate: (lower, upper) measured dose around its crossing; a replicate harmed
    # below the range has (−1: "below", smallest dose), one never harmed (largest dose, inf: "above")
    i = np.clip(np.searchsorted(logd, np.where(bout == 0, bx, logd[0]), side="left"), 1, point.size - 1)
    lower_of = np.where(bout == 0, point[i - 1], np.where(bout == 1, -1.0, point[-1]))
    upper_of = np.where(bout == 0, point[i], np.where(bout == 1, point[0], np.inf))
    b_lo = np.quantile(lower_of, alpha, method="inverted_cdf")
    b_hi = np.quantile(upper_of, 1 - alpha, method="inverted_cdf")
    return Threshold(
        outcome=OUTCOMES[int(out)],
        dose=float(np.exp(x)) if out == 0 else None,
        ci=(float(np.exp(lo_q)) if np.isfinite(lo_q) else None, float(np.exp(hi_q)) if np.isfinite(hi_q) else None),
        bracket=(float(b_lo) if 0 < b_lo < np.inf else None, float(b_hi) if 0 < b_hi < np.inf else None),
        ci_low_censored=bool(lo_q == -np.inf),
        ci_high_censored=bool(hi_q == np.inf),
        fitted=tuple(float(v) for v in pr.fitted),
        doses=tuple(float(d) for d in point),
        harm=harm,
        level=level,
        n_boot=n_boot,
        replicate_outcomes={name: int(np.sum(bout == i)) for i, name in enumerate(OUTCOMES)},
        bootstrap="seeds: gaps and doses resampled together" if pr.per_seed else "seeds: gaps (doses fixed)",
    )


def _key(x: np.ndarray, outcome: np.ndarray) -> np.ndarray:
    """A replicate's crossing as one number that sorts: its log dose, −inf when harmed below the range, +inf when
    never harmed."""
    return np.where(outcome == 1, -np.inf, np.where(outcome == 2, np.inf, x))


def paired_gaps(scores, reference) -> np.ndarray:
    """Paired gaps (seeds × doses) from ``scores`` (seeds × doses: the dosed runs' held-out accuracy) and
    ``reference`` (seeds: the FP32 run of each seed); NaN stays NaN."""
    scores, reference = np.asarray(scores, float), np.asarray(reference, float)
    if scores.ndim != 2 or reference.shape != (scores.shape[0],):
        raise ValueError(
            f"scores must be (seeds, doses) and reference (seeds,), got {scores.shape} and {reference.shape}"
        )
    return scores - reference[:, None]


TRANSFERS, DIFFERS, CANNOT_TELL = "transfers", "differs", "cannot tell"
"""The transfer rule's readings of a threshold ratio's CI against an equivalence band."""


@dataclass(frozen=True)
class Transfer:
    """The ratio of two tasks' thresholds (second / first) with its joint bootstrap CI, read against a band."""

    ratio: float | None
    """second / first of the point thresholds (None unless both cross inside their doses)."""
    ci: tuple[float, float]
    """Percentile CI of the ratio (``level``); 0 or inf at an end the censored replicates reach."""
    band: tuple[float, float]
    """The equivalence band: thresholds within it are the same for the rule's purpose."""
    verdict: str
    """``TRANSFERS`` (CI inside the band), ``DIFFERS`` (CI wholly outside it) or ``CANNOT_TELL``."""
    level: float
    n_boot: int
    censored: int
    """Replicates in which at least one task had no crossing inside its doses."""

    def to_json(self) -> dict:
        return {
            "ratio": self.ratio,
            "ci": list(self.ci),
            "band": list(self.band),
            "verdict": self.verdict,
            "level": self.level,
            "n_boot": self.n_boot,
            "censored_replicates": self.censored,
        }

    def describe(self) -> str:
        point = "no ratio (a task has no crossing)" if self.ratio is None else f"ratio {self.ratio:.3g}"
        return (
            f"{self.verdict}: {point}, {self.level:.0%} CI {self.ci[0]:.3g}–{self.ci[1]:.3g} against the band "
            f"[{self.band[0]:g}, {self.band[1]:g}]"
        )


def read_band(ci: tuple[float, float], band: tuple[float, float]) -> str:
    """The transfer rule: ``TRANSFERS`` when ``ci`` lies inside ``band``, ``DIFFERS`` when wholly outside it,
    ``CANNOT_TELL`` otherwise."""
    if band[0] <= ci[0] and ci[1] <= band[1]:
        return TRANSFERS
    if ci[1] < band[0] or ci[0] > band[1]:
        return DIFFERS
    return CANNOT_TELL


def transfer(
    first: tuple,
    second: tuple,
    band: tuple[float, float] = (0.5, 2.0),
    harm: float = HARM,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    small_sample_correction: bool = True,
) -> Transfer:
    """The ratio second / first of two tasks' thresholds (each ``(gaps, doses)`` as ``estimate`` takes them) by a
    joint bootstrap: each replicate resamples each task's seeds on its own (``nbkit.stats.stats.bootstrap`` with two
    samples: the first task's draw, then the second's), each drawn seed bringing its gaps (and doses when given per
    seed), and takes the ratio of the two replicate thresholds. A replicate with no crossing on one task sits at
    the censored end (0 or inf); with none on both it counts at the end farther from the band (−inf for the lower
    quantile, +inf for the upper). Read by ``read_band``."""
    if not 0 < band[0] < 1 < band[1]:
        raise ValueError(f"band must be (low, high) with 0 < low < 1 < high, got {band!r}")
    a = _prepare(*first, harm, level, n_boot, small_sample_correction)
    b = _prepare(*second, harm, level, n_boot, small_sample_correction)
    with np.errstate(invalid="ignore"):
        lr = stats.bootstrap(lambda ia, ib: b.replicate(ib) - a.replicate(ia), (a.seeds, b.seeds), n_boot, seed)
    alpha = (1 - level) / 2
    lo = np.quantile(np.where(np.isnan(lr), -np.inf, lr), alpha, method="inverted_cdf")
    hi = np.quantile(np.where(np.isnan(lr), np.inf, lr), 1 - alpha, method="inverted_cdf")
    ci = (float(np.exp(lo)), float(np.exp(hi)))
    both = a.out == 0 and b.out == 0
    return Transfer(
        ratio=float(np.exp(b.x - a.x)) if both else None,
        ci=ci,
        band=(float(band[0]), float(band[1])),
        verdict=read_band(ci, band),
        level=level,
        n_boot=n_boot,
        censored=int(np.sum(~np.isfinite(lr))),
    )
