"""The π–μ mismatch: training-side log-probs by teacher forcing, and the metrics the field logs.

μ is the rollout engine's log-probability of each token it sampled (``Rollout.logprobs``); π is the training
engine's log-probability of the same token, computed here by one teacher-forced forward of prompt + response.
Every metric takes ragged per-token arrays (one 1-D array per sequence) of log π and log μ. Tokens are sampled
from μ, so expectations are sample means under μ, and with r = π/μ per token:

- KL[μ‖π] = E_μ[log μ − log π], estimated by k1 = mean(log μ − log π), k2 = ½·mean((log μ − log π)²)
  and k3 = mean(r − 1 − log r) (Schulman's estimators; Oat logs k1/k2 as ``kl_sample_train_v1/_v2``).
- χ²(π‖μ) = E_μ[(π/μ)²] − 1, token level with r, sequence level with R = ∏ r (verl's ``chi2_token/_seq``).
- The sequence log-ratio log R = Σ (log π − log μ) and its least-squares slope against response length
  (the paper's Fig. 5: it drifts linearly with length in BF16, hardly at all in FP16).

Token-level statistics pool all tokens of all sequences (as verl, Oat and TRL do); sequence-level ones average
over sequences. Key names and their meaning: ``METRICS``; the names other libraries log: ``ALIASES``.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from nbkit.mismatch import sampling_filter
from nbkit.models.models import DTYPES
from nbkit.precision import gemm as gemm_policies
from nbkit.records import metrics, schema
from nbkit.stats import stats
from nbkit.stats.stats import RatioReading, read_ratio  # noqa: F401 - re-exported: the ratio rule lives with the statistics

TRAIN_DTYPES = DTYPES
"""Training dtypes by short name: ``nbkit.models.models.DTYPES`` (the one table)."""

METRICS = metrics.meanings()
"""Every key ``mismatch_metrics`` returns, with its definition (r = π/μ per token, R = ∏ r per sequence): read from
the registry ``nbkit.records.metrics``."""

ALIASES = metrics.aliases()
"""Names Oat, verl and TRL log for the same quantities: alias → key of ``METRICS`` (``nbkit.records.metrics``)."""


# ---------------------------------------------------------------------------------------------------------
# π: the training side, by teacher forcing


def _model_for(model: torch.nn.Module, dtype: str | None) -> torch.nn.Module:
    """The model to run: itself, or a deep copy cast to ``dtype`` (the caller's model is never modified)."""
    if dtype is None:
        return model
    if dtype not in TRAIN_DTYPES:
        raise ValueError(f"unknown training dtype {dtype!r}; choose one of {tuple(TRAIN_DTYPES)} or None")
    if next(model.parameters()).dtype == TRAIN_DTYPES[dtype]:
        return model
    return copy.deepcopy(model).to(TRAIN_DTYPES[dtype])


@torch.no_grad()  # not inference_mode: its tensors bypass the GEMM policy's dispatch mode (nbkit.precision.gemm)
def teacher_forced_logprobs(
    model,
    rollouts: Sequence,
    dtype: str | None = None,
    batch_size: int = 8,
    device=None,
    temperature: float = 1.0,
    progress: bool | None = None,
    gemm: str = "auto",
    top_k: int = 0,
    top_p: float = 1.0,
) -> list[np.ndarray]:
    """log π of every generated token of every rollout, by one teacher-forced forward of prompt + response.

    ``dtype=None`` runs ``model`` as given (its own weights' dtype, any autocast the caller set).
    ``"fp32" | "bf16" | "fp16"`` runs weights *and* compute in that dtype, as an engine loading the checkpoint
    in it would: the model itself if its parameters already are in it, else a cast deep copy (pure low
    precision, not autocast). Logits are upcast to float32, divided by ``temperature`` and log-softmaxed in
    float32, so the precision effect is the model's own compute. Half-precision GEMMs follow ``gemm``
    (``nbkit.precision.gemm``). Rows are batched by length with right padding and an attention mask, on the model's
    device
    (or a copy on ``device``); the vocabulary projection runs only from the first response position of a batch
    on (``logits_to_keep``), not over the prompts. Returns float64 arrays, one per rollout (empty for an empty
    response); a progress bar shows when there are more than 8 batches. ``top_k``/``top_p`` score the tokens under
    the same sampling filter an engine's processed log-probs came from (``nbkit.mismatch.sampling_filter``); 0 / 1.0 =
    off.
    """
    sampling_filter.validate(top_k, top_p)
    if not rollouts:
        raise ValueError("no rollouts given")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    for i, r in enumerate(rollouts):
        if len(r.prompt_ids) == 0:
            raise ValueError(f"rollout {i} has an empty prompt: its first token has no context to predict from")
    gemm_policies.validate(gemm)
    net = _model_for(model, dtype)
    here = next(net.parameters()).device
    device = torch.device(device) if device is not None else here
    if device != here:  # move a copy, never the caller's model
        net = (copy.deepcopy(net) if net is model else net).to(device)
    was_training = net.training
    net.eval()
    trims = "logits_to_keep" in inspect.signature(net.forward).parameters
    order = sorted(range(len(rollouts)), key=lambda i: len(rollouts[i].prompt_ids) + len(rollouts[i].token_ids))
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    if progress is None:
        progress = len(batches) > 8
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc=f"teacher-forced π ({dtype or 'as given'})", unit="batch")
    out: list[np.ndarray] = [np.zeros(0)] * len(rollouts)
    try:
        for batch in batches:
            seqs = [list(rollouts[i].prompt_ids) + list(rollouts[i].token_ids) for i in batch]
            width = max(len(s) for s in seqs)
            ids = torch.zeros(len(seqs), width, dtype=torch.long)
            mask = torch.zeros(len(seqs), width, dtype=torch.long)
            for row, s in enumerate(seqs):
                ids[row, : len(s)] = torch.tensor(s)
                mask[row, : len(s)] = 1
            # the logits at position j predict token j + 1: responses start at p, predicted from p - 1
            first = min(len(rollouts[i].prompt_ids) for i in batch) - 1 if trims else 0
            keep = {"logits_to_keep": width - first} if trims else {}
            with gemm_policies.policy(gemm, device):  # logits[:, k] is position first + k
                logits = net(input_ids=ids.to(device), attention_mask=mask.to(device), **keep).logits
            for row, i in enumerate(batch):
                p, t = len(rollouts[i].prompt_ids), len(rollouts[i].token_ids)
                tok = ids[row, p : p + t].to(device)
                lp = sampling_filter.token_logprobs(
                    logits[row, p - 1 - first : p + t - 1 - first], tok, temperature, top_k, top_p
                )
                out[i] = lp.double().cpu().numpy()
    finally:
        net.train(was_training)
    return out


# ---------------------------------------------------------------------------------------------------------
# Metrics on ragged per-token arrays


LOGP_TOLERANCE = 1e-5
"""Largest log-probability accepted above 0 (float rounding of a log-softmax); more is not a log-probability."""


def _ragged(logp_pi, logp_mu) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Validated float64 copies: same number of sequences, same length per sequence, finite, ≤ 0, ≥ 1 token.

    A padded 2-D array is refused: its padding would count as tokens with p = 1."""
    for name, x in (("log π", logp_pi), ("log μ", logp_mu)):
        if getattr(x, "ndim", 1) != 1 or any(getattr(row, "ndim", 1) > 1 for row in x):
            raise ValueError(
                f"{name} must be one 1-D array per sequence, got a {getattr(x, 'ndim', 2)}-D array: "
                f"a padded tensor would count its padding as tokens with p = 1 (select each row's "
                f"tokens with its mask)"
            )
    pi = [np.asarray(x, dtype=np.float64).reshape(-1) for x in logp_pi]
    mu = [np.asarray(x, dtype=np.float64).reshape(-1) for x in logp_mu]
    for name, seqs in (("log π", pi), ("log μ", mu)):
        for i, a in enumerate(seqs):
            if a.size and np.nanmax(a) > LOGP_TOLERANCE:
                raise ValueError(
                    f"sequence {i}: {name} holds {float(np.nanmax(a))!r} > 0, not a log-probability "
                    f"(probabilities or logits passed by mistake?)"
                )
    if not pi:
        raise ValueError("empty input: no sequences")
    if len(pi) != len(mu):
        raise ValueError(f"log π has {len(pi)} sequences but log μ has {len(mu)}")
    for i, (a, b) in enumerate(zip(pi, mu)):
        if a.shape != b.shape:
            raise ValueError(f"sequence {i}: log π has {a.size} tokens but log μ has {b.size}")
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            raise ValueError(f"sequence {i}: non-finite log-probabilities")
    if sum(a.size for a in pi) == 0:
        raise ValueError("empty input: no tokens in any sequence")
    return pi, mu


def token_log_ratio(logp_pi, logp_mu) -> np.ndarray:
    """log r = log π − log μ of every token, pooled over sequences."""
    pi, mu = _ragged(logp_pi, logp_mu)
    return np.concatenate(pi) - np.concatenate(mu)


def seq_log_ratio(logp_pi, logp_mu) -> tuple[np.ndarray, np.ndarray]:
    """(log R, length) per sequence, with log R = Σ_t (log π − log μ)."""
    pi, mu = _ragged(logp_pi, logp_mu)
    return np.array([(a - b).sum() for a, b in zip(pi, mu)]), np.array([a.size for a in pi], dtype=np.float64)


def fit_slope(lengths, log_ratios) -> tuple[float, float]:
    """Least-squares line log R ≈ intercept + slope · length; (NaN, NaN) unless ≥ 2 distinct lengths."""
    x, y = np.asarray(lengths, dtype=np.float64), np.asarray(log_ratios, dtype=np.float64)
    if x.size != y.size:
        raise ValueError(f"{x.size} lengths but {y.size} log-ratios")
    if np.unique(x).size < 2:
        return float("nan"), float("nan")
    xc = x - x.mean()
    slope = float((xc * (y - y.mean())).sum() / (xc * xc).sum())
    return slope, float(y.mean() - slope * x.mean())


def token_abs_logp_diff(logp_pi, logp_mu) -> dict[str, float]:
    """|log π − log μ| over all tokens: mean, max and the 50/90/99th percentiles."""
    d = np.abs(token_log_ratio(logp_pi, logp_mu))
    out = {schema.METRIC_TOKEN_ABS_LOGP_DIFF: float(d.mean()), schema.METRIC_TOKEN_ABS_LOGP_DIFF_MAX: float(d.max())}
    for q in (50, 90, 99):
        out[f"token_abs_logp_diff/p{q}"] = float(np.percentile(d, q))
    return out


def prob_diffs(logp_pi, logp_mu) -> dict[str, float]:
    """Probability-space differences: verl's |π − μ| stats and Pearson correlation, Oat's signed μ − π."""
    pi, mu = _ragged(logp_pi, logp_mu)
    p, m = np.exp(np.concatenate(pi)), np.exp(np.concatenate(mu))
    d = np.abs(p - m)
    return {
        "rollout_probs_diff_max": float(d.max()),
        "rollout_probs_diff_mean": float(d.mean()),
        "rollout_probs_diff_std": float(d.std()),
        "rollout_actor_probs_pearson_corr": pearson(p, m),
        "sampler_learner_prob_diff_max": float((m - p).max()),
        "sampler_learner_prob_diff_min": float((m - p).min()),
    }


def pearson(x, y) -> float:
    """Pearson correlation; 1.0 for identical inputs, NaN when one side is constant and they differ."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if np.array_equal(x, y):
        return 1.0
    xc, yc = x - x.mean(), y - y.mean()
    denom = np.sqrt((xc * xc).sum() * (yc * yc).sum())
    return float((xc * yc).sum() / denom) if denom > 0 else float("nan")


def kl_estimators(logp_pi, logp_mu) -> dict[str, float]:
    """Token-level KL[μ‖π] by k1, k2, k3 and χ²(π‖μ) per token, all sample means under μ."""
    lr = token_log_ratio(logp_pi, logp_mu)
    return {
        "kl_k1": float(-lr.mean()),
        "kl_k2": float(0.5 * (lr * lr).mean()),
        "kl_k3": float((np.expm1(lr) - lr).mean()),
        "chi2_token": float(np.expm1(2 * lr).mean()),
    }


def seq_metrics(logp_pi, logp_mu) -> dict[str, float]:
    """Sequence level: log R stats, KL, χ² with R = ∏ π/μ, verl's log-PPL gap and the length slope."""
    pi, mu = _ragged(logp_pi, logp_mu)
    s, n = seq_log_ratio(pi, mu)
    slope, intercept = fit_slope(n, s)
    with np.errstate(over="ignore"):  # R² = exp(2 log R) overflows to inf past log R ≈ 355: reported as is
        chi2_seq = float(np.expm1(2 * s).mean())
    gaps = [abs((a - b).mean()) for a, b in zip(pi, mu) if a.size]
    return {
        "seq_log_ratio/mean": float(s.mean()),
        "seq_log_ratio/abs_mean": float(np.abs(s).mean()),
        "seq_kl": float(-s.mean()),
        "chi2_seq": chi2_seq,
        "log_ppl_abs_diff": float(np.mean(gaps)),
        "seq_log_ratio_slope/per_token": slope,
        "seq_log_ratio_slope/per_1k_tokens": 1000 * slope,
        "seq_log_ratio_slope/intercept": intercept,
    }


def effective_sample_size(log_weights) -> float:
    """Normalised effective sample size of importance weights w = exp(log_weights): (Σw)² / (N · Σw²).

    Kish's ESS divided by N (verl's ``rollout_is_eff_sample_size``): 1 when every weight is equal, 1/N when one
    weight dominates. Taken from the log-weights with the largest one factored out (the ratio does not change when
    every weight is scaled), so sequence weights ∏ π/μ far outside float range are fine."""
    lw = np.asarray(log_weights, dtype=np.float64).reshape(-1)
    if lw.size == 0:
        raise ValueError("no weights: the effective sample size of nothing is undefined")
    if not np.isfinite(lw).all():
        raise ValueError(f"log-weights must be finite, got {lw[~np.isfinite(lw)][:3].tolist()}")
    w = np.exp(lw - lw.max())  # in (0, 1], the largest exactly 1
    return float(w.sum() ** 2 / (lw.size * (w * w).sum()))


def ess_metrics(logp_pi, logp_mu) -> dict[str, float]:
    """ESS of the raw IS weights: per token (r = π/μ, all tokens pooled) and per sequence (R = ∏ r)."""
    pi, mu = _ragged(logp_pi, logp_mu)
    return {
        "ess_token": effective_sample_size(token_log_ratio(pi, mu)),
        "ess_seq": effective_sample_size(seq_log_ratio(pi, mu)[0]),
    }


def perplexity_ratio(logp_pi, logp_mu) -> dict[str, float]:
    """verl's perplexity diagnostics over sequences with at least one token: the signed log-perplexity gap
    d = mean_t log μ − mean_t log π = log(PPL_π / PPL_μ) averaged (``log_ppl_diff``), and mean exp(d)
    (``ppl_ratio``: the per-sequence ratio first, then the mean, as verl does)."""
    pi, mu = _ragged(logp_pi, logp_mu)
    d = np.array([b.mean() - a.mean() for a, b in zip(pi, mu) if a.size])
    return {"log_ppl_diff": float(d.mean()), "ppl_ratio": float(np.exp(d).mean())}


def is_ratio_stats(logp_pi, logp_mu) -> dict[str, float]:
    """TRL's token importance-sampling ratio r = π/μ: min, mean, max (before truncation)."""
    r = np.exp(token_log_ratio(logp_pi, logp_mu))
    return {
        f"sampling/importance_sampling_ratio/{k}": float(f(r))
        for k, f in (("min", np.min), ("mean", np.mean), ("max", np.max))
    }


def relative_prob_error(logp_ref, logp_test) -> dict[str, float]:
    """Relative error of probabilities against a reference (FP32): |p − p_ref| / p_ref, mean and max."""
    lr = token_log_ratio(logp_test, logp_ref)
    e = np.abs(np.expm1(lr))  # |p/p_ref − 1|, exact for tiny differences
    return {"rel_prob_err/mean": float(e.mean()), "rel_prob_err/max": float(e.max())}


def mismatch_metrics(logp_pi, logp_mu, aliases: bool = True) -> dict[str, float]:
    """Every metric of ``METRICS`` as plain floats; with ``aliases`` also Oat/verl/TRL names (``ALIASES``)."""
    pi, mu = _ragged(logp_pi, logp_mu)
    out = {"n_sequences": float(len(pi)), "n_tokens": float(sum(a.size for a in pi))}
    for part in (
        token_abs_logp_diff,
        prob_diffs,
        is_ratio_stats,
        kl_estimators,
        seq_metrics,
        perplexity_ratio,
        ess_metrics,
    ):
        out.update(part(pi, mu))
    missing = [k for k in metrics.MISMATCH if k not in out]
    if missing:
        raise KeyError(f"registered metric(s) {missing} are computed by no part of mismatch_metrics")
    out = {k: out[k] for k in metrics.MISMATCH}  # the registry's order
    if aliases:
        out.update({alias: out[key] for alias, key in metrics.aliases().items()})
    return out


# ---------------------------------------------------------------------------------------------------------
# Uncertainty: bootstrap over sequences

_ESTIMATORS: dict[str, Callable] = {
    schema.METRIC_TOKEN_ABS_LOGP_DIFF: lambda pi, mu: token_abs_logp_diff(pi, mu)[schema.METRIC_TOKEN_ABS_LOGP_DIFF],
    "kl_k1": lambda pi, mu: kl_estimators(pi, mu)["kl_k1"],
    "kl_k3": lambda pi, mu: kl_estimators(pi, mu)["kl_k3"],
    "seq_kl": lambda pi, mu: -seq_log_ratio(pi, mu)[0].mean(),
}
"""The fast single-metric estimators the bootstrap resamples (one part of ``mismatch_metrics`` each)."""

HEADLINE: dict[str, Callable] = {k: _ESTIMATORS[k] for k in metrics.ci()}
"""The headline numbers that get confidence intervals (``nbkit.records.metrics``: ``ci=True``): key → metric_fn(logp_pi,
logp_mu) -> float. A metric marked ``ci`` without an estimator here fails at import."""


def bootstrap_ci(
    metric_fn: Callable | str, logp_pi, logp_mu, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> dict[str, float]:
    """Percentile bootstrap CI of ``metric_fn(logp_pi, logp_mu)``, resampling whole sequences with replacement.

    Sequences, not tokens, are the independent units (tokens of one response are correlated).
    ``metric_fn`` may be a key of ``HEADLINE``. Returns ``estimate`` (on the data as given), ``low``, ``high``.
    """
    fn = HEADLINE[metric_fn] if isinstance(metric_fn, str) else metric_fn
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot!r}")
    pi, mu = _ragged(logp_pi, logp_mu)

    def replicate(idx):  # a resample of only empty responses has no tokens: NaN, left out of the interval
        return [
            float(fn([pi[i] for i in r], [mu[i] for i in r])) if sum(pi[i].size for i in r) else np.nan for r in idx
        ]

    low, high = stats.percentile_interval(stats.bootstrap(replicate, (len(pi),), n_boot, seed), level)
    return {"estimate": float(fn(pi, mu)), "low": float(low), "high": float(high), "level": level}


def headline_cis(logp_pi, logp_mu, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, dict]:
    """``bootstrap_ci`` of every ``HEADLINE`` metric, keyed like ``METRICS``."""
    return {k: bootstrap_ci(k, logp_pi, logp_mu, n_boot=n_boot, seed=seed, level=level) for k in HEADLINE}


def crossing_length(delta: float, var: float, threshold: float) -> float:
    """Smallest L with δ²L² + vL = threshold² (RMS of log R reaches ``threshold``); inf without any mismatch. The
    length model of a per-token log-ratio with mean δ and variance v: where a sequence's IS ratio reaches a clamp."""
    a, b, c = delta * delta, var, threshold * threshold
    if a <= 0 and b <= 0:
        return math.inf
    if a <= 0:
        return c / b
    return (-b + math.sqrt(b * b + 4 * a * c)) / (2 * a)
