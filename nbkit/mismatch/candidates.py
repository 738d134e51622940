"""Candidate predictors of RL harm: statistics of π − μ on one set of sampled rollouts (issue 50, item 2).

Each candidate is a number per rollout format, read from the ragged per-token log π and log μ of the same sampled
tokens (``nbkit.mismatch.mismatch``'s convention: tokens sampled from μ, r = π/μ per token, R = ∏ r per sequence),
plus, for two of them, what the log-probabilities alone do not hold: the argmax flips of each position (the full
distributions of both sides) and the GRPO advantage of each sequence (its reward, group-normalised). Every candidate
is oriented so that a larger value means more mismatch (the scoring rule fits the accuracy gap as non-increasing in
it, ``nbkit.stats.predictive``); ``CANDIDATES`` says how each is oriented. Those ``mismatch_metrics`` already computes
are read from it, not recomputed.
"""

from __future__ import annotations

import numpy as np

from nbkit.mismatch import mismatch
from nbkit.records import schema

LOW_SHARE = 0.1
"""The low-probability sampled tokens: this share of all sampled tokens, those μ gave the lowest probability (a
fixed share, not a fixed probability: a confident model may sample no token below any fixed cut)."""
ADV_EPS = 1e-4
"""TRL's GRPO advantage: (reward − group mean) / (group std + this), std with one degree of freedom removed."""

CANDIDATES = {
    "token_abs": "per-token mean |log π − log μ|",
    "bias": "signed per-token mean E_μ[log μ − log π] (k1; oriented: positive = π below μ on the sampled tokens)",
    "rms": "RMS of log π − log μ over tokens",
    "p99": "99th percentile of |log π − log μ| over tokens",
    "clip_out": "fraction of sampled tokens whose ratio π/μ leaves the PPO clip [1 − ε, 1 + ε]",
    "seq_kl": "sequence KL[μ‖π]: −mean over sequences of Σ_t log π/μ",
    "seq_abs": "sequence |Σ_t log π/μ|, mean over sequences",
    "ess_deficit": "1/ESS − 1 of the sequence IS weights R (ESS normalised: 1 when π = μ)",
    "argmax_flips": "fraction of response positions where argmax π ≠ argmax μ (full distributions, teacher-forced)",
    "low_prob_abs": f"mean |log π − log μ| over the {LOW_SHARE:.0%} of sampled tokens with the lowest μ",
    "adv_cov": "|cov(log R, A)| over sequences, A = the GRPO advantage (group-normalised reward)",
}
"""Candidate name → what it is (larger = more mismatch), in the order tables show them."""


def grpo_advantages(rewards, group: int) -> np.ndarray:
    """GRPO's advantages of ``rewards`` in consecutive groups of ``group`` (one prompt's samples): (r − group mean) /
    (group std + ``ADV_EPS``), the std with ddof 1, as TRL computes them with ``scale_rewards="group"``."""
    r = np.asarray(rewards, dtype=np.float64)
    if group < 2 or r.size % group:
        raise ValueError(f"{r.size} rewards do not split into groups of {group} (group must be >= 2)")
    g = r.reshape(-1, group)
    return ((g - g.mean(1, keepdims=True)) / (g.std(1, ddof=1, keepdims=True) + ADV_EPS)).reshape(-1)


def values(logp_pi, logp_mu, flips, advantages, epsilon: float, low_share: float = LOW_SHARE) -> dict[str, float]:
    """Every candidate of ``CANDIDATES`` for one format's rollouts: ragged ``logp_pi``/``logp_mu`` (one array per
    sequence), ``flips`` (one boolean array per sequence: argmax π ≠ argmax μ at each response position),
    ``advantages`` (one per sequence), ``epsilon`` the PPO clip's ε. ValueError for mismatched shapes or when no
    sampled token is below ``low_prob``."""
    m = mismatch.mismatch_metrics(logp_pi, logp_mu, aliases=False)
    lr = mismatch.token_log_ratio(logp_pi, logp_mu)
    seq, _ = mismatch.seq_log_ratio(logp_pi, logp_mu)
    mu = np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1) for x in logp_mu])
    f = [np.asarray(x, dtype=bool).reshape(-1) for x in flips]
    if [a.size for a in f] != [np.asarray(x).size for x in logp_mu]:
        raise ValueError("flips must hold one boolean per response token of every sequence")
    adv = np.asarray(advantages, dtype=np.float64).reshape(-1)
    if adv.size != seq.size:
        raise ValueError(f"{adv.size} advantages for {seq.size} sequences")
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
    if not 0 < low_share <= 1:
        raise ValueError(f"low_share must be in (0, 1], got {low_share!r}")
    low = np.argsort(mu, kind="stable")[: max(1, round(low_share * mu.size))]
    r = np.exp(lr)
    return {
        "token_abs": m[schema.METRIC_TOKEN_ABS_LOGP_DIFF],
        "bias": m["kl_k1"],
        "rms": float(np.sqrt(np.mean(lr * lr))),
        "p99": m["token_abs_logp_diff/p99"],
        "clip_out": float(np.mean((r < 1 - epsilon) | (r > 1 + epsilon))),
        "seq_kl": m["seq_kl"],
        "seq_abs": m["seq_log_ratio/abs_mean"],
        "ess_deficit": 1.0 / m["ess_seq"] - 1.0,
        "argmax_flips": float(np.concatenate(f).mean()),
        "low_prob_abs": float(np.abs(lr[low]).mean()),
        "adv_cov": float(abs(np.cov(seq, adv)[0, 1])) if seq.size > 1 else float("nan"),
    }
