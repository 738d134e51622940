"""A dtype's dose in a harm threshold's unit at the user's response length: measured where the sampled responses
reach that length, extrapolated by the doctor's length model where they do not, and always saying which.

The candidate units of the harm-threshold study (issue 37) and how each behaves with the response length L:

- ``token_abs_logp_diff/mean`` (per token |Δ log p|), and any other per-token unit: does not scale with L. It is
  read as measured over all sampled tokens; the responses' mean length is said with it.
- ``seq_log_ratio/abs_mean`` (E|log R|, log R = Σ_t log π/μ), ``seq_kl`` (−E[log R]) and ``ess_seq_deficit``
  (1/ESS − 1 of the sequence IS weights R, ESS normalised as in ``nbkit.mismatch.mismatch.effective_sample_size``): grow
  with L. **Measured** at L: on the first L tokens of every sampled response at least L tokens long (the prefix's log
  R), when at least ``MIN_REACH`` responses are (fewer is no measurement). **Extrapolated** otherwise, by the doctor's
  length model (``nbkit.offline.doctor``): per-token log r with mean δ and variance v, independent across tokens, so log
  R at L is normal with mean δL and variance vL. Then E|log R| is the folded-normal mean, −E[log R] = −δL, and 1/ESS − 1
  tends (many sequences) to E[R²]/E[R]² − 1 = exp(vL) − 1, the sequence χ² of log-normal weights.

The measured ESS deficit is a sample value over the responses that reach L (at most their count − 1); the
extrapolated one is the many-sequence limit: past the measured lengths the two are not the same estimator, which
is one more reason the reading says how it was obtained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_REACH = 8
"""Fewest sampled responses that must reach the target length for a sequence unit to count as measured there."""
SEQ_UNITS = ("seq_log_ratio/abs_mean", "seq_kl", "ess_seq_deficit")
"""Sequence units: the doctor measures them on prefixes at the target length or extrapolates them."""


@dataclass(frozen=True)
class Reading:
    """One dtype's dose in one unit at one response length, and how it was obtained."""

    unit: str
    """The unit (a key of the doctor's per-dtype diagnosis)."""
    value: float
    """The dose."""
    how: str
    """Provenance in words: "measured at N tokens" or "extrapolated from N to L tokens by the length model"."""
    measured: bool
    """True when read from the sampled responses at the target length (per-token units: always)."""
    length: float
    """The response length the dose is for (per-token units: the sampled responses' mean length)."""


def reach(lengths, min_reach: int = MIN_REACH) -> int:
    """The longest length at least ``min(min_reach, number of responses)`` sampled responses reach."""
    lengths = np.sort(np.asarray(lengths, dtype=np.int64))[::-1]
    if lengths.size == 0:
        return 0
    return int(lengths[min(min_reach, lengths.size) - 1])


def seq_value(unit: str, log_r: np.ndarray) -> float:
    """A sequence unit's sample value over sequence log-ratios ``log_r``."""
    if unit == "seq_log_ratio/abs_mean":
        return float(np.mean(np.abs(log_r)))
    if unit == "seq_kl":
        return float(-np.mean(log_r))
    if unit == "ess_seq_deficit":
        from nbkit.mismatch import mismatch  # (deferred: torch; the stored thresholds are read without it)

        return 1.0 / mismatch.effective_sample_size(log_r) - 1.0
    raise ValueError(f"unknown sequence unit {unit!r}; choose from {SEQ_UNITS}")


def modelled(unit: str, delta: float, var: float, length: float) -> float:
    """A sequence unit at ``length`` tokens under the length model (log R ~ normal(δL, vL))."""
    mean, sd = delta * length, math.sqrt(max(var, 0.0) * length)
    if unit == "seq_log_ratio/abs_mean":  # folded normal
        if sd == 0:
            return abs(mean)
        z = mean / sd
        return sd * math.sqrt(2 / math.pi) * math.exp(-z * z / 2) + mean * math.erf(z / math.sqrt(2))
    if unit == "seq_kl":
        return -mean
    if unit == "ess_seq_deficit":
        try:
            return math.expm1(sd * sd)
        except OverflowError:
            return math.inf
    raise ValueError(f"unknown sequence unit {unit!r}; choose from {SEQ_UNITS}")


def at_length(unit: str, diag: dict, length: int, pair=None, min_reach: int = MIN_REACH) -> Reading | None:
    """The dose in ``unit`` at ``length`` tokens from one dtype's diagnosis (``nbkit.offline.doctor``) and the
    per-sequence (log π, log μ) ``pair`` behind it (None: only the length model can be read); None when ``unit`` is
    neither in the diagnosis nor a sequence unit the model covers."""
    mean_length = diag.get("mean_length")
    if unit not in SEQ_UNITS:
        if unit not in diag:
            return None
        at = f" on responses of mean {mean_length:.3g} tokens" if mean_length is not None else ""
        return Reading(
            unit,
            float(diag[unit]),
            f"measured{at} (per token: does not scale with length)",
            True,
            float(mean_length) if mean_length is not None else math.nan,
        )
    if pair is not None:
        ratios = [np.asarray(p, np.float64) - np.asarray(m, np.float64) for p, m in zip(*pair)]
        reached = reach([r.size for r in ratios], min_reach)
        if length <= reached:
            prefixes = np.array([r[:length].sum() for r in ratios if r.size >= length])
            return Reading(
                unit,
                seq_value(unit, prefixes),
                f"measured at {length} tokens (the first {length} tokens of the {prefixes.size} responses at least that long)",
                True,
                float(length),
            )
        source = f"from {reached}"
    else:
        source = f"from responses of mean {mean_length:.3g} tokens" if mean_length is not None else "from the model"
    if "token_log_ratio/mean" not in diag or "token_log_ratio/var" not in diag:
        return None
    value = modelled(unit, diag["token_log_ratio/mean"], diag["token_log_ratio/var"], length)
    return Reading(unit, value, f"extrapolated {source} to {length} tokens by the length model", False, float(length))
