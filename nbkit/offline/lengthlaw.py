"""The paper's length law (Fig. 5): the sequence log-ratio log(π/μ) against response length.

Tokens are sampled from μ, so per token E_μ[log π − log μ] = −KL(μ‖π): Σ log(π/μ) over a response of L tokens
falls by L·KL on average, and the fitted slope per 1,000 tokens should be −1,000 × the per-token k1 KL. Each
function takes per-sequence arrays of per-token log π − log μ; every CI is a percentile bootstrap over sequences
(the tokens of one response are not independent draws). This module fits and reads the law (no torch: stored
studies read it); measuring it with an engine is ``nbkit.offline.lengthlaw_measure``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nbkit.stats import stats
from nbkit.stats.stats import RatioReading, read_ratio

PAPER_SLOPES = {"bf16": -1.01, "fp16": -0.07}
"""The paper's fitted slopes of log(π/μ) per 1,000 tokens (R1-Distill-Qwen-1.5B, 8k tokens)."""


@dataclass
class LengthLaw:
    """What the length law says about one set of responses (slope per 1,000 tokens, per-token k1, sequence KL)."""

    n: int
    """Number of sequences."""
    mean_length: float
    """Mean response length in tokens."""
    max_length: int
    """Longest response in tokens."""
    slope: float
    """Least-squares slope of Σ log(π/μ) against length, in nats per 1,000 tokens."""
    slope_ci: tuple[float, float]
    """Bootstrap CI of ``slope``."""
    k1: float
    """Per-token KL(μ‖π) estimate: −(Σ over all tokens of log π − log μ) / (number of tokens)."""
    k1_ci: tuple[float, float]
    """Bootstrap CI of ``k1``."""
    seq_kl: float
    """Sequence KL(μ‖π) estimate: the mean over sequences of −Σ log(π/μ)."""
    seq_kl_ci: tuple[float, float]
    """Bootstrap CI of ``seq_kl``."""
    slope_matches_k1: bool
    """Whether the slope's CI and −1,000·k1's CI overlap (the law E[Σ log(π/μ)] = −L·KL holds within noise)."""


def _slope(lengths: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """OLS slopes of ``sums`` on ``lengths`` along the last axis (rows are bootstrap resamples)."""
    lc = lengths - lengths.mean(axis=-1, keepdims=True)
    sc = sums - sums.mean(axis=-1, keepdims=True)
    return (lc * sc).sum(axis=-1) / np.maximum((lc * lc).sum(axis=-1), 1e-300)


def fit(token_logratios: list, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> LengthLaw:
    """The length law of responses given as per-token log π − log μ arrays (one per response)."""
    seqs = [np.asarray(s, dtype=np.float64).ravel() for s in token_logratios]
    if not all(np.isfinite(s).all() for s in seqs):
        raise ValueError("token log-ratios hold NaN/inf")
    return fit_sums([len(s) for s in seqs], [s.sum() for s in seqs], n_boot, level, seed)


def fit_sums(lengths, sums, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> LengthLaw:
    """``fit`` from per-sequence (length, Σ log π − log μ): all the law needs, so stored studies keep only these."""
    lengths, sums = np.asarray(lengths, dtype=np.float64), np.asarray(sums, dtype=np.float64)
    if len(lengths) < 3 or len(lengths) != len(sums):
        raise ValueError(
            f"the length law needs at least 3 sequences (as many lengths as sums), got "
            f"{len(lengths)} lengths and {len(sums)} sums"
        )
    if not np.isfinite(sums).all():
        raise ValueError("token log-ratios hold NaN/inf")
    if lengths.min() == lengths.max():
        raise ValueError(f"every sequence has {int(lengths[0])} tokens: a slope against length needs varied lengths")
    slope = float(_slope(lengths, sums)) * 1000
    k1 = float(-sums.sum() / lengths.sum())

    def replicate(idx):  # slope, k1 and sequence KL of each resample, from the same resamples
        return np.stack(
            [_slope(lengths[idx], sums[idx]) * 1000, -sums[idx].sum(1) / lengths[idx].sum(1), -sums[idx].mean(1)]
        )

    lows, highs = stats.percentile_interval(stats.bootstrap(replicate, (len(lengths),), n_boot, seed), level)
    slope_ci, k1_ci, seq_kl_ci = ((float(a), float(b)) for a, b in zip(lows, highs))
    overlap = slope_ci[0] <= -1000 * k1_ci[0] and -1000 * k1_ci[1] <= slope_ci[1]
    return LengthLaw(
        n=len(lengths),
        mean_length=float(lengths.mean()),
        max_length=int(lengths.max()),
        slope=slope,
        slope_ci=slope_ci,
        k1=k1,
        k1_ci=k1_ci,
        seq_kl=float(-sums.mean()),
        seq_kl_ci=seq_kl_ci,
        slope_matches_k1=bool(overlap),
    )


def table(laws: dict[str, LengthLaw]) -> list[dict]:
    """One row per label (e.g. ``bf16`` or ``bf16 · autocast π``) with the paper's slope alongside where it has one."""
    rows = []
    for label, law in laws.items():
        dtype = label.split()[0].split("-")[0]
        rows.append(
            {
                "run": label,
                "sequences": law.n,
                "mean length": round(law.mean_length, 1),
                "max length": law.max_length,
                "slope per 1k tokens": f"{law.slope:.3g}",
                "slope CI": f"[{law.slope_ci[0]:.3g}, {law.slope_ci[1]:.3g}]",
                "paper slope": PAPER_SLOPES.get(dtype),
                "k1 per token": f"{law.k1:.3g}",
                "k1 CI": f"[{law.k1_ci[0]:.3g}, {law.k1_ci[1]:.3g}]",
                "−1000·k1": f"{-1000 * law.k1:.3g}",
                "slope ≈ −k1 (CIs overlap)": law.slope_matches_k1,
                "sequence KL": f"{law.seq_kl:.3g}",
                "sequence KL CI": f"[{law.seq_kl_ci[0]:.3g}, {law.seq_kl_ci[1]:.3g}]",
            }
        )
    return rows


def seq_kl_ratio(laws: dict[str, LengthLaw], num: str = "bf16", den: str = "fp16") -> RatioReading | None:
    """Sequence KL of ``num`` over that of ``den`` (the paper: 7.64 / 0.32 ≈ 24), read from both CIs by
    ``nbkit.stats.stats.read_ratio``: a ratio only where ``den``'s sequence KL lies above 0 beyond its CI, else a lower
    bound or none. No CI of the ratio itself (each law is bootstrapped on its own). None if either run is missing."""
    if num not in laws or den not in laws:
        return None
    a, b = laws[num], laws[den]
    return read_ratio(a.seq_kl, a.seq_kl_ci, b.seq_kl, b.seq_kl_ci, names=(num.upper(), den.upper()))


INSTRUCTION = " Please reason step by step, and put your final answer within \\boxed{}."
"""Appended to every MATH problem so that the model writes long answers (the paper's R1 instruction)."""

STUDY = "lengthlaw_smollm2"
"""The stored long run's folder under ``data/results`` (one row per sequence and π recipe)."""


def laws(runs: dict[str, list[dict]], n_boot: int = 2000, seed: int = 0) -> dict[str, LengthLaw]:
    """``label → LengthLaw`` from ``lengthlaw_measure.measure``'s rows (or a stored study's): labels read
    ``bf16 · cast π``."""
    return {
        label.replace("-", " · ", 1) + " π": fit_sums(
            [r["length"] for r in rows], [r["sum_log_ratio"] for r in rows], n_boot, seed=seed
        )
        for label, rows in runs.items()
    }


if __name__ == "__main__":  # the spelling stored cards and RESULTS.md name: the command ``nbkit lengthlaw``
    import runpy
    import sys

    sys.argv[1:1] = ["lengthlaw"]
    runpy.run_module("nbkit.cli.main", run_name="__main__")
