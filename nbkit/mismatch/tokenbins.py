"""Token bins of the per-step mismatch log: by π's entropy at the token and by π's probability of the sampled token.

Why the mismatch grows during RL (the paper's authors' open question, Precision-RL issue #10): longer responses, a
peakier policy, or a larger error per token? A run answers it when every step logs, per bin of tokens, how many
completion tokens fell in the bin and their mean |log π − log μ| (``nbkit.rl.bins`` computes them from what the
loss forward already has; ``nbkit.mismatch.shiftshare`` splits the change between early and late steps). The edges are
fixed
here, once, so runs and tasks share them:

- ``entropy``: π's entropy of the next-token distribution, in nats: [0, 1e-3), [1e-3, 1e-2), [1e-2, 0.1),
  [0.1, 0.5), [0.5, 1), [1, ∞). A trained tiny-arith policy puts most tokens in the first two bins.
- ``prob``: π's probability of the token that was sampled: [0, 0.5), [0.5, 0.9), [0.9, 0.99), [0.99, 0.999),
  [0.999, 1].

Row keys (the ``bins/`` family of ``nbkit.records.schema``): ``bins/<binning>/<i>/tokens`` (completion tokens of the
step in
bin i, all processes), ``bins/<binning>/<i>/abs_logp_diff`` (their mean |log π − log μ|; absent for an empty bin),
``bins/sequences`` (the step's completions) and ``bins/response_length`` (their mean length in tokens).
"""

from __future__ import annotations

import math

EDGES: dict[str, tuple[float, ...]] = {
    "entropy": (0.0, 1e-3, 1e-2, 0.1, 0.5, 1.0, math.inf),
    "prob": (0.0, 0.5, 0.9, 0.99, 0.999, math.inf),  # the last bin holds p = 1 exactly
}
"""Bin edges per binning: bin i is [edges[i], edges[i + 1])."""
PREFIX = "bins/"
SEQUENCES = "bins/sequences"
RESPONSE_LENGTH = "bins/response_length"


def n_bins(binning: str) -> int:
    """Number of bins of ``binning`` (ValueError naming the choices for an unknown one)."""
    if binning not in EDGES:
        raise ValueError(f"unknown binning {binning!r}; choose one of {tuple(EDGES)}")
    return len(EDGES[binning]) - 1


def tokens_key(binning: str, i: int) -> str:
    """Row key of the token count of bin ``i`` of ``binning``."""
    return f"{PREFIX}{binning}/{i}/tokens"


def mismatch_key(binning: str, i: int) -> str:
    """Row key of the mean per-token |log π − log μ| of bin ``i`` of ``binning``."""
    return f"{PREFIX}{binning}/{i}/abs_logp_diff"


def all_keys() -> tuple[str, ...]:
    """Every row key the per-step bins write."""
    return (SEQUENCES, RESPONSE_LENGTH) + tuple(
        k for b in EDGES for i in range(n_bins(b)) for k in (tokens_key(b, i), mismatch_key(b, i))
    )
