"""The paper's length law (Fig. 5): the sequence log-ratio log(π/μ) against response length.

Tokens are sampled from μ, so per token E_μ[log π − log μ] = −KL(μ‖π): Σ log(π/μ) over a response of L tokens
falls by L·KL on average, and the fitted slope per 1,000 tokens should be −1,000 × the per-token k1 KL. Each
function takes per-sequence arrays of per-token log π − log μ; every CI is a percentile bootstrap over sequences
(the tokens of one response are not independent draws).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    if len(seqs) < 3:
        raise ValueError(f"the length law needs at least 3 sequences, got {len(seqs)}")
    if not all(np.isfinite(s).all() for s in seqs):
        raise ValueError("token log-ratios hold NaN/inf")
    lengths = np.array([len(s) for s in seqs], dtype=np.float64)
    if lengths.min() == lengths.max():
        raise ValueError(f"every sequence has {int(lengths[0])} tokens: a slope against length needs varied lengths")
    sums = np.array([s.sum() for s in seqs])
    idx = np.random.default_rng(seed).integers(0, len(seqs), size=(n_boot, len(seqs)))
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]

    def ci(x):
        lo, hi = np.percentile(x, q)
        return float(lo), float(hi)

    slope = float(_slope(lengths, sums)) * 1000
    slope_b = _slope(lengths[idx], sums[idx]) * 1000
    k1 = float(-sums.sum() / lengths.sum())
    k1_b = -sums[idx].sum(axis=1) / lengths[idx].sum(axis=1)
    seq_kl_b = -sums[idx].mean(axis=1)
    slope_ci, k1_ci = ci(slope_b), ci(k1_b)
    overlap = slope_ci[0] <= -1000 * k1_ci[0] and -1000 * k1_ci[1] <= slope_ci[1]
    return LengthLaw(n=len(seqs), mean_length=float(lengths.mean()), max_length=int(lengths.max()), slope=slope,
                     slope_ci=slope_ci, k1=k1, k1_ci=k1_ci, seq_kl=float(-sums.mean()), seq_kl_ci=ci(seq_kl_b),
                     slope_matches_k1=bool(overlap))


def table(laws: dict[str, LengthLaw]) -> list[dict]:
    """One row per label (e.g. ``bf16`` or ``bf16 · autocast π``) with the paper's slope alongside where it has one."""
    rows = []
    for label, law in laws.items():
        dtype = label.split()[0]
        rows.append({"run": label, "sequences": law.n, "mean length": round(law.mean_length, 1),
                     "max length": law.max_length, "slope per 1k tokens": f"{law.slope:.3g}",
                     "slope CI": f"[{law.slope_ci[0]:.3g}, {law.slope_ci[1]:.3g}]",
                     "paper slope": PAPER_SLOPES.get(dtype), "k1 per token": f"{law.k1:.3g}",
                     "k1 CI": f"[{law.k1_ci[0]:.3g}, {law.k1_ci[1]:.3g}]", "−1000·k1": f"{-1000 * law.k1:.3g}",
                     "slope ≈ −k1 (CIs overlap)": law.slope_matches_k1, "sequence KL": f"{law.seq_kl:.3g}",
                     "sequence KL CI": f"[{law.seq_kl_ci[0]:.3g}, {law.seq_kl_ci[1]:.3g}]"})
    return rows


def seq_kl_ratio(laws: dict[str, LengthLaw], num: str = "bf16", den: str = "fp16") -> float | None:
    """Sequence KL of ``num`` over that of ``den`` (the paper: 7.64 / 0.32 ≈ 24); None if either is missing or
    the denominator is not positive."""
    if num not in laws or den not in laws or laws[den].seq_kl <= 0:
        return None
    return laws[num].seq_kl / laws[den].seq_kl
