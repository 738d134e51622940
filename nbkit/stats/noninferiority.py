"""The dose–response's decision rule as a test, and what it can and cannot tell: verdicts, power against the margin,
error rates by simulation, and the family-wise (Holm) reading of several cells at once.

The rule reads the 95 % t-interval of a cell's paired gaps (format − reference, one per seed) against a margin m:
*breaks* when the whole interval lies below −m, *no detectable harm* when it lies above −m, *inconclusive*
otherwise. That is a two-sided t-test of "the true gap is exactly −m" at 5 %, its direction giving the claim: a
"no detectable harm" is a non-inferiority claim (one-sided 2.5 % error at a true gap of −m, less below), a "breaks"
the opposite claim. So with no true gap the chance of a false "breaks" is ≈ 0, not 2.5 %; the false claims to fear
are "no detectable harm" when the true gap sits at or just below −m. ``rates`` simulates the rule at a true gap
(normal seed noise of a given SD); ``familywise`` the chance that *any* of several cells' claims is false,
unadjusted or after Holm's step-down adjustment (valid under any dependence between the cells). A cell with fewer
than ``Rule.min_seeds`` paired seeds gets its direction only, no verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean, stdev

import numpy as np
from scipy.special import ndtr

from nbkit.stats.stats import normal_quantile, t_quantile, t_two_sided

BREAKS, NO_HARM, INCONCLUSIVE = "breaks", "no detectable harm", "inconclusive"
"""The rule's three verdicts."""


@dataclass(frozen=True)
class Rule:
    """The dose–response rule."""

    margin: float = 0.05
    """The gap (accuracy) the rule calls a break: claims are made against −margin."""
    level: float = 0.95
    """Two-sided level of the interval the rule reads (each claim's one-sided error at the margin: (1 − level)/2)."""
    min_seeds: int = 5
    """Fewer paired seeds than this: the cell reports its direction only (a 2-df SD is no basis for a claim)."""


RULE = Rule()
"""The rule the dose–response study applies."""


def verdict(lo: float, hi: float, margin: float = RULE.margin) -> str:
    """The rule's reading of a gap's interval [lo, hi]."""
    if lo != lo or hi != hi:
        return "one seed: no interval"
    if hi < -margin:
        return BREAKS
    if lo > -margin:
        return NO_HARM
    return INCONCLUSIVE


def direction(mean: float) -> str:
    """What a cell too small for a verdict still says: the sign of its mean gap."""
    return "direction only: " + (
        "worse than the reference" if mean < 0 else "not worse than the reference" if mean > 0 else "no difference"
    )


def p_value(gaps: list[float], margin: float = RULE.margin) -> float:
    """Two-sided p of the t-test of "the true gap is −margin" (p < 1 − level ⇔ the interval excludes −margin)."""
    if len(gaps) < 2:
        return float("nan")
    sd = stdev(gaps)
    d = fmean(gaps) + margin
    t = d / (sd / math.sqrt(len(gaps))) if sd > 0 else math.copysign(math.inf, d)
    return t_two_sided(t, len(gaps) - 1)


def holm(pvalues: list[float], alpha: float = 1 - RULE.level) -> list[bool]:
    """Holm's step-down procedure (scipy has none; statsmodels' ``multipletests(method="holm")`` would be a new
    dependency for these six lines): which hypotheses are rejected with family-wise error ≤ ``alpha`` (any dependence):
    sort the p-values, reject the j-th smallest while p ≤ alpha / (k − j), stop at the first that is not."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    out = [False] * len(pvalues)
    for j, i in enumerate(order):
        if not pvalues[i] <= alpha / (len(pvalues) - j):
            break
        out[i] = True
    return out


def holm_verdicts(cells: list[list[float]], rule: Rule = RULE) -> list[str]:
    """Each cell's verdict with the family's error held at 1 − level by Holm: a cell keeps its claim only when its
    p-value survives the step-down over every cell in ``cells`` (the claims the page makes); else inconclusive."""
    ps = [p_value(g, rule.margin) for g in cells]
    keep = holm(ps, 1 - rule.level)
    out = []
    for gaps, k in zip(cells, keep):
        m = fmean(gaps)
        out.append((BREAKS if m < -rule.margin else NO_HARM) if k else INCONCLUSIVE)
    return out


# ---------------------------------------------------------------------------------------------------------
# Error rates and power by simulation


def _simulated_verdicts(gaps: np.ndarray, rule: Rule, known_sd: float | None) -> np.ndarray:
    """Verdict codes (−1 breaks, +1 no harm, 0 inconclusive) of simulated cells ``gaps`` [sims, n]; ``known_sd``:
    a z-interval with that SD instead of the t-interval (the closed-form case)."""
    n = gaps.shape[1]
    m = gaps.mean(1)
    if known_sd is None:
        half = t_quantile(0.5 + rule.level / 2, n - 1) * gaps.std(1, ddof=1) / math.sqrt(n)
    else:
        half = normal_quantile(0.5 + rule.level / 2) * known_sd / math.sqrt(n)
    return np.where(m + half < -rule.margin, -1, np.where(m - half > -rule.margin, 1, 0))


def rates(
    true_gap: float,
    sd: float,
    n: int,
    rule: Rule = RULE,
    sims: int = 20_000,
    seed: int = 0,
    known_sd: bool = False,
    looks: tuple[int, ...] = (),
) -> dict[str, float]:
    """P(breaks), P(no detectable harm), P(inconclusive) of the rule on one cell of ``n`` seeds whose paired gaps are
    normal with mean ``true_gap`` and SD ``sd`` (``sims`` simulated studies). ``known_sd``: the interval uses the
    true SD (z, not t). ``looks``: earlier looks (seed counts < n) at which a verdict stops the study; the seeds are
    added only when a look is inconclusive (what a second look does to the error rates)."""
    if sd <= 0 or n < 2 or any(not 2 <= k < n for k in looks):
        raise ValueError(f"need sd > 0, n >= 2 and looks within 2..n-1; got sd={sd!r}, n={n!r}, looks={looks!r}")
    g = np.random.default_rng(seed).normal(true_gap, sd, size=(sims, n))
    out = np.zeros(sims, dtype=int)
    open_ = np.ones(sims, dtype=bool)
    for k in (*sorted(looks), n):
        v = _simulated_verdicts(g[:, :k], rule, sd if known_sd else None)
        out = np.where(open_, v, out)
        open_ &= v == 0
    return {
        BREAKS: float((out == -1).mean()),
        NO_HARM: float((out == 1).mean()),
        INCONCLUSIVE: float((out == 0).mean()),
    }


def closed_form_rates(true_gap: float, sd: float, n: int, rule: Rule = RULE) -> dict[str, float]:
    """``rates`` with a known SD, in closed form: the interval is mean ± z·σ/√n with a normal mean, so
    P(breaks) = Φ((−m − g)/se − z) and P(no harm) = Φ((g + m)/se − z)."""
    se, z = sd / math.sqrt(n), normal_quantile(0.5 + rule.level / 2)
    b, h = float(ndtr((-rule.margin - true_gap) / se - z)), float(ndtr((true_gap + rule.margin) / se - z))
    return {BREAKS: b, NO_HARM: h, INCONCLUSIVE: 1 - b - h}


def false_claim(true_gap: float, claim: str, margin: float = RULE.margin) -> bool:
    """Whether a claim is false at ``true_gap`` (at exactly −margin both claims are)."""
    return (claim == NO_HARM and true_gap <= -margin) or (claim == BREAKS and true_gap >= -margin)


def familywise(
    cells: list[tuple[float, int]],
    true_gap: float,
    rule: Rule = RULE,
    adjust: str = "none",
    sims: int = 20_000,
    seed: int = 0,
    known_sd: bool = False,
    claims: tuple[str, ...] = (NO_HARM, BREAKS),
) -> float:
    """P(at least one false claim) over ``cells`` (each (SD, seeds), simulated independently) when every cell's
    true gap is ``true_gap``; ``adjust``: ``none`` (each cell's own interval, as the rule reads) or ``holm``;
    ``claims``: the kinds of claim counted (e.g. only the "no detectable harm" claims)."""
    if adjust not in ("none", "holm"):
        raise ValueError(f"unknown adjustment {adjust!r}; choose 'none' or 'holm'")
    if not cells:
        return 0.0
    bad_no_harm = NO_HARM in claims and false_claim(true_gap, NO_HARM, rule.margin)
    bad_break = BREAKS in claims and false_claim(true_gap, BREAKS, rule.margin)
    rng = np.random.default_rng(seed)
    bad = np.zeros(sims, dtype=bool)
    if adjust == "none":
        for sd, n in cells:
            v = _simulated_verdicts(rng.normal(true_gap, sd, size=(sims, n)), rule, sd if known_sd else None)
            bad |= ((v == 1) & bad_no_harm) | ((v == -1) & bad_break)
        return float(bad.mean())
    ps, signs = [], []
    for sd, n in cells:
        g = rng.normal(true_gap, sd, size=(sims, n))
        se = (np.full(sims, sd) if known_sd else g.std(1, ddof=1)) / math.sqrt(n)
        t = (g.mean(1) + rule.margin) / se
        ps.append(2 * ndtr(-np.abs(t)) if known_sd else t_two_sided(t, n - 1))
        signs.append(np.sign(t))
    p, s = np.stack(ps, 1), np.stack(signs, 1)
    k = p.shape[1]
    order = np.argsort(p, 1)
    sorted_p = np.take_along_axis(p, order, 1)
    passed = np.cumprod(sorted_p <= (1 - rule.level) / (k - np.arange(k)), 1).astype(bool)  # step-down: stop at first
    rejected = np.zeros_like(passed)
    np.put_along_axis(rejected, order, passed, 1)
    claim_no_harm, claim_break = rejected & (s > 0), rejected & (s < 0)
    bad = (claim_no_harm & bad_no_harm) | (claim_break & bad_break)
    return float(bad.any(1).mean())


def break_detectable(sd: float, n: int, rule: Rule = RULE, power: float = 0.8) -> float:
    """The true gap at which the rule says "breaks" with ``power``: −(margin + (t_{1−α/2} + t_power)·sd/√n), both t
    quantiles at n − 1 df (the normal quantile for the power half overstates it: 0.77 instead of 0.8 at 5 seeds;
    with t, 0.79). Power against the margin, not against 0."""
    if n < 2:
        return -math.inf
    df = n - 1
    return -(rule.margin + (t_quantile(0.5 + rule.level / 2, df) + t_quantile(power, df)) * sd / math.sqrt(n))


# ---------------------------------------------------------------------------------------------------------
# Does a correction rescue a format? A paired contrast and a non-inferiority claim, one family (Holm)

HELPS, HARMS, NO_EFFECT, RESCUES = "helps", "harms", "no detectable effect", "rescues"
"""The rescue rule's readings of a correction: its contrast (corrected − uncorrected, same seeds) lies above 0
(*helps*), below 0 (*harms*), or neither; *rescues* = helps and the corrected runs are no detectably worse than FP32
(their gap's interval lies above −margin)."""


def p_against(gaps: list[float], null: float) -> float:
    """Two-sided p of the one-sample t-test of "the true mean of ``gaps`` is ``null``" (p < 1 − level ⇔ the
    t-interval excludes ``null``)."""
    return p_value(gaps, -null)


def rescue_family(cells: dict[str, tuple[list[float], list[float]]], rule: Rule = RULE) -> dict[str, dict]:
    """The rescue rule over every cell at once. ``cells``: ``name → (contrast, vs_reference)``, the per-seed
    corrected − uncorrected and corrected − FP32 differences on the same seeds.

    Per cell, *rescues* needs both intervals to clear: the contrast's above 0 and the corrected gap's above
    −margin (an intersection–union test: its p-value is the larger of the two t-tests', "contrast = 0" and
    "corrected − FP32 = −margin", and 1 when either mean points the other way). Primary family: the k cells'
    rescue claims, Holm over their p-values (the chance of any false *rescues* ≤ 1 − level). Secondary family: the
    k contrasts' *helps*/*harms*, Holm over the contrasts' p-values (the same bound for those claims). Returned per
    cell: ``verdict`` (each interval read alone, unadjusted), ``verdict (Holm)`` (both families adjusted), the
    p-values. A cell with fewer than ``min_seeds`` seeds gets its direction only and takes no place in a family."""
    alpha = 1 - rule.level
    judged = {k: v for k, v in cells.items() if len(v[0]) >= rule.min_seeds}
    names = list(judged)
    pc = [p_against(judged[k][0], 0.0) for k in names]
    pn = [p_against(judged[k][1], -rule.margin) for k in names]
    favourable = [fmean(judged[k][0]) > 0 and fmean(judged[k][1]) > -rule.margin for k in names]
    pr = [max(a, b) if ok else 1.0 for a, b, ok in zip(pc, pn, favourable)]
    rescued, moved = (holm(pr, alpha), holm(pc, alpha)) if names else ([], [])
    out = {}
    for name, (contrast, _vs_ref) in cells.items():
        if name not in judged:
            out[name] = {
                "verdict": _small(contrast, rule),
                "verdict (Holm)": "—",
                "p contrast": float("nan"),
                "p vs FP32 at −margin": float("nan"),
                "p rescue": float("nan"),
            }
            continue
        j = names.index(name)
        up = fmean(contrast) > 0
        out[name] = {
            "verdict": _rescue_reading(pr[j] < alpha, pc[j] < alpha, up),
            "verdict (Holm)": _rescue_reading(rescued[j], moved[j], up),
            "p contrast": pc[j],
            "p vs FP32 at −margin": pn[j],
            "p rescue": pr[j],
        }
    return out


def _small(contrast: list[float], rule: Rule) -> str:
    if len(contrast) < 2:
        return "one seed: no interval"
    m = fmean(contrast)
    return f"direction only ({len(contrast)} seeds, fewer than {rule.min_seeds}): " + (
        "corrected above uncorrected" if m > 0 else "corrected below uncorrected" if m < 0 else "no difference"
    )


def _rescue_reading(rescued: bool, contrast_rejected: bool, up: bool) -> str:
    if rescued:
        return RESCUES
    if not contrast_rejected:
        return NO_EFFECT
    return f"{HELPS}, not shown within the margin of FP32" if up else HARMS


def rescue_power(
    gap_unc: float,
    gap_corr: float,
    sds: tuple[float, float, float],
    n: int,
    k: int,
    rule: Rule = RULE,
    sims: int = 20_000,
    seed: int = 0,
) -> dict[str, float]:
    """The chance the rescue rule says *rescues* for one cell, simulated: per seed the FP32, uncorrected and corrected
    outcomes are independent normals with SDs ``sds`` (in that order) and means 0, ``gap_unc``, ``gap_corr``.
    ``unadjusted``: both intervals clear (contrast above 0, corrected − FP32 above −margin); ``holm``: the cell's
    rescue p-value (the larger of the two) passes Holm's first threshold α/k in a family of ``k`` cells: a lower
    bound, since Holm's thresholds only loosen as other cells are rescued. At ``gap_corr`` = −margin it is the
    chance of a false rescue."""
    if n < 2 or k < 1 or min(sds) <= 0:
        raise ValueError(f"need n >= 2, k >= 1 and SDs > 0; got n={n!r}, k={k!r}, sds={sds!r}")
    rng = np.random.default_rng(seed)
    ref, unc, corr = (rng.normal(mu, sd, size=(sims, n)) for mu, sd in zip((0.0, gap_unc, gap_corr), sds))

    def p_and_mean(d: np.ndarray, null: float) -> tuple[np.ndarray, np.ndarray]:
        m = d.mean(1)
        t = (m - null) / (d.std(1, ddof=1) / math.sqrt(n))
        return t_two_sided(t, n - 1), m

    pc, mc = p_and_mean(corr - unc, 0.0)
    pn, mn = p_and_mean(corr - ref, -rule.margin)
    alpha = 1 - rule.level
    p = np.where((mc > 0) & (mn > -rule.margin), np.maximum(pc, pn), 1.0)
    return {"unadjusted": float((p < alpha).mean()), "holm": float((p <= alpha / k).mean())}
