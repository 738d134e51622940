"""Why the sequence-level mismatch grows: a shift-share split of its change into length, token mix and per-bin error.

The sequence-level mismatch of a window of steps is M = Σ_b S_b / N: the summed per-token |log π − log μ| over the
window's completion tokens, per completion (S_b: the sum over the tokens of bin b, N: completions). With T_b tokens
in bin b it factors exactly as

    M = L · Σ_b s_b · m_b,     L = Σ_b T_b / N (mean response length),  s_b = T_b / Σ T (token mix),  m_b = S_b / T_b

so a change from an early window to a late one has three causes: (a) longer (or shorter) responses, L; (b) tokens
moving between bins, s (a peakier policy puts more tokens in the low-entropy / high-probability bins); (c) the error
per token within a bin, m. Each part is the factor's Shapley value (the Oaxaca-style split averaged over the order in
which the three factors switch from early to late: no arbitrary reference window), so the parts sum to M_late −
M_early exactly. A bin empty in one window has no mismatch there; it takes the other window's (its whole
contribution then counts as mix, none as per-bin change).

Uncertainty: a percentile bootstrap over steps within each window (one run), or over runs (seeds: each drawn run
brings its early and late windows together). ``decompose(early, late)`` gives the split; ``bootstrap`` adds CIs.

    early = shiftshare.window(rows, "entropy", steps=range(1, 11))
    late = shiftshare.window(rows, "entropy", steps=range(41, 51))
    split = shiftshare.bootstrap(early, late)          # split.parts['length'], split.ci['length'], split.shares
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nbkit.mismatch import tokenbins
from nbkit.stats import stats

PARTS = ("length", "mix", "per_bin")
"""The three parts: (a) response length, (b) token mix across bins, (c) per-bin mismatch."""
_SHAPLEY = {0: 1 / 3, 1: 1 / 6, 2: 1 / 3}  # weight of a marginal contribution given the number of factors already late


@dataclass(frozen=True)
class Window:
    """Per-step bin statistics of a window of steps (one run)."""

    tokens: np.ndarray
    """(steps, bins): completion tokens per bin."""
    mismatch: np.ndarray
    """(steps, bins): mean per-token |log π − log μ| of the bin (any value where the bin is empty)."""
    sequences: np.ndarray
    """(steps,): completions per step."""

    def __post_init__(self):
        t, m, n = (np.asarray(a, float) for a in (self.tokens, self.mismatch, self.sequences))
        if t.ndim != 2 or m.shape != t.shape or n.shape != (t.shape[0],) or t.shape[0] == 0:
            raise ValueError(
                f"a window needs tokens and mismatch of one shape (steps >= 1, bins) and sequences "
                f"(steps,); got {t.shape}, {m.shape}, {n.shape}"
            )
        if (t < 0).any() or (n <= 0).any():
            raise ValueError("token counts must be >= 0 and every step must have >= 1 sequence")
        object.__setattr__(self, "tokens", t)
        object.__setattr__(self, "mismatch", np.where(t > 0, m, 0.0))
        object.__setattr__(self, "sequences", n)

    def sums(self, idx=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(T_b, S_b, N) summed over the steps ``idx`` (..., k) (all steps when None), batched over idx's leading
        axes."""
        if idx is None:
            idx = np.arange(self.tokens.shape[0])
        t = self.tokens[idx].sum(-2)
        return t, (self.tokens * self.mismatch)[idx].sum(-2), self.sequences[idx].sum(-1)


@dataclass(frozen=True)
class Split:
    """A shift-share split of the change in sequence-level mismatch."""

    early: float
    """M of the early window (summed |Δ log p| per completion)."""
    late: float
    """M of the late window."""
    parts: dict
    """``PARTS`` → its share of late − early, in the unit of M; they sum to ``late − early``."""
    factors: dict = field(default_factory=dict)
    """The factors per window: ``length`` (L), ``mix`` (s, per bin), ``per_bin`` (m, per bin), ``per_token`` (Σ s·m)."""
    ci: dict = field(default_factory=dict)
    """``PARTS`` and ``total`` → (low, high) percentile bootstrap interval (``bootstrap`` only)."""
    level: float | None = None
    """The CIs' level."""
    unit: str | None = None
    """What the bootstrap resampled: ``steps`` or ``runs``."""

    @property
    def total(self) -> float:
        return self.late - self.early

    @property
    def shares(self) -> dict:
        """Each part as a fraction of the total change (they sum to 1; NaN when nothing changed)."""
        return {k: v / self.total if self.total else float("nan") for k, v in self.parts.items()}


def _factors(t: np.ndarray, s: np.ndarray, n: np.ndarray, fill: np.ndarray | None = None):
    """(L, mix, per-bin mismatch) from summed tokens, sums of |Δ| and sequences; an empty bin's per-bin mismatch is
    ``fill``'s (the other window's) where given."""
    total = t.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(t > 0, s / np.where(t > 0, t, 1), np.nan)
    if fill is not None:
        m = np.where(np.isnan(m), fill, m)
    return total / n, t / total[..., None], m


def _shapley(x0: tuple, x1: tuple) -> dict:
    """Shapley parts of f(L, s, m) = L · Σ s·m between the factor triples ``x0`` and ``x1`` (batched)."""

    def f(late: frozenset) -> np.ndarray:
        L, s, m = (x1[i] if i in late else x0[i] for i in range(3))
        return L * np.nansum(s * m, -1)

    out = {}
    for i, name in enumerate(PARTS):
        others = [j for j in range(3) if j != i]
        subsets = [frozenset(), frozenset(others[:1]), frozenset(others[1:]), frozenset(others)]
        out[name] = sum(_SHAPLEY[len(S)] * (f(S | {i}) - f(S)) for S in subsets)
    return out


def _split(e: tuple, late: tuple) -> tuple[np.ndarray, np.ndarray, dict, tuple, tuple]:
    """(M_early, M_late, parts, early factors, late factors) from the two windows' sums."""
    x0 = _factors(*e, fill=_factors(*late)[2])
    x1 = _factors(*late, fill=x0[2])
    both_empty = np.isnan(x0[2]) & np.isnan(x1[2])
    x0 = (x0[0], x0[1], np.where(both_empty, 0.0, x0[2]))
    x1 = (x1[0], x1[1], np.where(both_empty, 0.0, x1[2]))
    m0 = x0[0] * (x0[1] * x0[2]).sum(-1)
    m1 = x1[0] * (x1[1] * x1[2]).sum(-1)
    return m0, m1, _shapley(x0, x1), x0, x1


def decompose(early: Window, late: Window) -> Split:
    """The shift-share split of the change in sequence-level mismatch from ``early`` to ``late``."""
    if early.tokens.shape[1] != late.tokens.shape[1]:
        raise ValueError(f"the windows have different bins: {early.tokens.shape[1]} vs {late.tokens.shape[1]}")
    m0, m1, parts, x0, x1 = _split(early.sums(), late.sums())
    factors = {
        "early": {
            "length": float(x0[0]),
            "mix": x0[1].tolist(),
            "per_bin": x0[2].tolist(),
            "per_token": float((x0[1] * x0[2]).sum()),
        },
        "late": {
            "length": float(x1[0]),
            "mix": x1[1].tolist(),
            "per_bin": x1[2].tolist(),
            "per_token": float((x1[1] * x1[2]).sum()),
        },
    }
    return Split(float(m0), float(m1), {k: float(v) for k, v in parts.items()}, factors)


def bootstrap(
    early: Window | list[Window], late: Window | list[Window], n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> Split:
    """``decompose`` with percentile bootstrap CIs: over steps within each window for one run's windows, over runs
    for lists of windows (run r's early and late drawn together; each drawn run's windows pooled)."""
    if not 0 < level < 1 or n_boot < 100:
        raise ValueError(f"level must be in (0, 1) and n_boot >= 100, got level={level!r}, n_boot={n_boot!r}")
    if isinstance(early, Window) and isinstance(late, Window):
        point = decompose(early, late)
        windows = (early, late)
        sizes, paired, unit = (early.tokens.shape[0], late.tokens.shape[0]), False, "steps"

        def sums(ie, il):  # each window's steps resampled on their own
            return [w.sums(i) for w, i in zip(windows, (ie, il))]
    else:
        early, late = list(early), list(late)
        if len(early) != len(late) or len(early) < 2:
            raise ValueError(
                f"a bootstrap over runs needs >= 2 runs with an early and a late window each, got "
                f"{len(early)} and {len(late)}"
            )
        point = decompose(_pool(early), _pool(late))
        per_run = [np.stack([np.stack(w.sums()[:2]) for w in ws]) for ws in (early, late)]  # (runs, 2, bins)
        seqs = [np.array([w.sums()[2] for w in ws]) for ws in (early, late)]
        sizes, paired, unit = (len(early), len(early)), True, "runs"

        def sums(runs, _same):  # a drawn run brings its early and late windows together (paired draws)
            return [(p[runs, 0].sum(1), p[runs, 1].sum(1), q[runs].sum(1)) for p, q in zip(per_run, seqs)]

    def replicate(a, b):  # the three parts and the total of each resample
        m0, m1, parts, _, _ = _split(*sums(a, b))
        return np.stack([*(parts[k] for k in PARTS), m1 - m0])

    lows, highs = stats.percentile_interval(stats.bootstrap(replicate, sizes, n_boot, seed, paired=paired), level)
    ci = {k: (float(lo), float(hi)) for k, lo, hi in zip((*PARTS, "total"), lows, highs)}
    return Split(point.early, point.late, point.parts, point.factors, ci, level, unit)


def _pool(windows: list[Window]) -> Window:
    """Several runs' windows as one (their steps stacked)."""
    return Window(
        np.concatenate([w.tokens for w in windows]),
        np.concatenate([w.mismatch for w in windows]),
        np.concatenate([w.sequences for w in windows]),
    )


def window(rows: list[dict], binning: str, steps) -> Window:
    """The ``binning`` bins of the metrics rows whose step is in ``steps`` (``nbkit.mismatch.tokenbins`` keys);
    ValueError
    when a chosen step lacks them (a run logged without bins)."""
    k = tokenbins.n_bins(binning)
    wanted = set(steps)
    chosen = [r for r in rows if r.get("step") in wanted]
    missing = [r.get("step") for r in chosen if tokenbins.SEQUENCES not in r]
    if not chosen or missing:
        raise ValueError(f"steps {sorted(wanted)[:3]}...: {'no rows' if not chosen else f'no bins at {missing}'}")
    tokens = np.array([[r.get(tokenbins.tokens_key(binning, i), 0) for i in range(k)] for r in chosen], float)
    mism = np.array([[r.get(tokenbins.mismatch_key(binning, i), 0.0) for i in range(k)] for r in chosen], float)
    return Window(tokens, mism, np.array([r[tokenbins.SEQUENCES] for r in chosen], float))
