"""The mismatch metrics, one record each: the single source of their names, meanings, the names other libraries log,
which ones a training run logs per step and which are headlines.

``nbkit.mismatch.mismatch`` computes them (its ``METRICS`` and ``ALIASES`` are read from here), the trainer logs
``logged()`` (as ``mismatch/<name>``, ``nbkit.records.schema.mismatch_key``), ``nbkit.records.schema.KEYS`` documents
those row keys from here, the offline ladder and anatomy show ``headline()`` and ``nbkit.mismatch.mismatch.HEADLINE``
bootstraps ``ci()``. Adding a metric: a ``Metric`` here and its computation in one of ``nbkit.mismatch.mismatch``'s
parts (``mismatch_metrics`` refuses a registered key it did not compute).

``VERSION`` is written on every stored study's card (``nbkit.results.store``): raise it when a metric's definition
changes, so a card says which definitions its rows were computed under (a card without it predates the field).
This module imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass

VERSION = 1
"""The metrics' definitions as of this registry (cards: ``metrics_version``)."""

TOKEN_ABS_LOGP_DIFF = "token_abs_logp_diff/mean"
"""The headline mismatch (``nbkit.records.schema.METRIC_TOKEN_ABS_LOGP_DIFF``)."""
TOKEN_ABS_LOGP_DIFF_MAX = "token_abs_logp_diff/max"
"""Its max over tokens (``nbkit.records.schema.METRIC_TOKEN_ABS_LOGP_DIFF_MAX``)."""


@dataclass(frozen=True)
class Metric:
    """One mismatch metric (r = π/μ per token, R = ∏ r per sequence)."""

    key: str
    """Its name as ``nbkit.mismatch.mismatch.mismatch_metrics`` returns it."""
    meaning: str
    """Its definition."""
    aliases: tuple[str, ...] = ()
    """Names Oat, verl and TRL log for the same quantity."""
    logged: tuple[str, ...] = ()
    """Names (``key`` and/or aliases) a training run logs per step, each as ``mismatch/<name>``."""
    headline: bool = False
    """Shown in the offline ladder's and the anatomy's tables and figures."""
    ci: bool = False
    """Gets a bootstrap confidence interval over sequences (``nbkit.mismatch.mismatch.HEADLINE``)."""

    def __post_init__(self):
        bad = [n for n in self.logged if n != self.key and n not in self.aliases]
        if bad:
            raise ValueError(f"metric {self.key!r} logs {bad}, neither its key nor one of its aliases {self.aliases}")


MISMATCH: dict[str, Metric] = {}
"""Key → metric, in the order ``mismatch_metrics`` returns them (filled by ``register``)."""


def register(metric: Metric) -> Metric:
    """Add ``metric`` to ``MISMATCH``; a key or alias already taken is refused."""
    taken = set(MISMATCH) | set(aliases())
    clash = [n for n in (metric.key, *metric.aliases) if n in taken]
    if clash:
        raise ValueError(f"metric name(s) {clash} are registered already")
    MISMATCH[metric.key] = metric
    return metric


def meanings() -> dict[str, str]:
    """Key → definition (``nbkit.mismatch.mismatch.METRICS``)."""
    return {m.key: m.meaning for m in MISMATCH.values()}


def aliases() -> dict[str, str]:
    """Alias → key (``nbkit.mismatch.mismatch.ALIASES``)."""
    return {a: m.key for m in MISMATCH.values() for a in m.aliases}


def logged() -> tuple[str, ...]:
    """The names a training run logs per step (``mismatch/<name>``)."""
    return tuple(n for m in MISMATCH.values() for n in m.logged)


def logged_meanings() -> dict[str, str]:
    """Logged name → the definition of its metric (``nbkit.records.schema.KEYS`` documents the row keys with them)."""
    return {n: m.meaning for m in MISMATCH.values() for n in m.logged}


def headline() -> tuple[str, ...]:
    """The headline keys (the ladder's and the anatomy's)."""
    return tuple(m.key for m in MISMATCH.values() if m.headline)


def ci() -> tuple[str, ...]:
    """The keys that get bootstrap confidence intervals."""
    return tuple(m.key for m in MISMATCH.values() if m.ci)


_TOKEN = "mean over tokens of |log π − log μ|"
for _m in (
    Metric("n_sequences", "number of sequences"),
    Metric("n_tokens", "number of generated tokens (all sequences)"),
    Metric(
        TOKEN_ABS_LOGP_DIFF,
        _TOKEN,
        ("sampling/sampling_logp_difference/mean",),
        (TOKEN_ABS_LOGP_DIFF,),
        headline=True,
        ci=True,
    ),
    Metric(
        TOKEN_ABS_LOGP_DIFF_MAX,
        "max over tokens of |log π − log μ|",
        ("sampling/sampling_logp_difference/max",),
        (TOKEN_ABS_LOGP_DIFF_MAX,),
    ),
    Metric("token_abs_logp_diff/p50", "median over tokens of |log π − log μ|"),
    Metric("token_abs_logp_diff/p90", "90th percentile over tokens of |log π − log μ|"),
    Metric("token_abs_logp_diff/p99", "99th percentile over tokens of |log π − log μ|"),
    Metric(
        "rollout_probs_diff_max",
        "verl (logged as training/…): max over tokens of |π − μ| (probability space)",
        logged=("rollout_probs_diff_max",),
    ),
    Metric("rollout_probs_diff_mean", "verl: mean over tokens of |π − μ|", logged=("rollout_probs_diff_mean",)),
    Metric("rollout_probs_diff_std", "verl: standard deviation over tokens of |π − μ|"),
    Metric(
        "rollout_actor_probs_pearson_corr",
        "verl: Pearson correlation of token probabilities π and μ "
        "(1.0 if identical; NaN if one side is constant and they differ)",
        logged=("rollout_actor_probs_pearson_corr",),
    ),
    Metric(
        "sampler_learner_prob_diff_max",
        "Oat: max over tokens of μ − π (signed, probability space)",
        logged=("sampler_learner_prob_diff_max",),
    ),
    Metric(
        "sampler_learner_prob_diff_min",
        "Oat: min over tokens of μ − π (signed, probability space)",
        logged=("sampler_learner_prob_diff_min",),
    ),
    Metric("sampling/importance_sampling_ratio/min", "TRL: min over tokens of r = π/μ (before any truncation)"),
    Metric("sampling/importance_sampling_ratio/mean", "TRL: mean over tokens of r = π/μ (before any truncation)"),
    Metric("sampling/importance_sampling_ratio/max", "TRL: max over tokens of r = π/μ (before any truncation)"),
    Metric(
        "kl_k1",
        "token KL[μ‖π], k1 = mean(log μ − log π); unbiased, can be negative",
        ("kl_sample_train_v1", "rollout_corr/kl"),
        ("kl_k1", "kl_sample_train_v1"),
        headline=True,
        ci=True,
    ),
    Metric(
        "kl_k2",
        "token KL[μ‖π], k2 = ½·mean((log μ − log π)²); ≥ 0, biased, Oat's kl_sample_train_v2",
        ("kl_sample_train_v2",),
        ("kl_sample_train_v2",),
    ),
    Metric(
        "kl_k3",
        "token KL[μ‖π], k3 = mean(r − 1 − log r); unbiased and ≥ 0",
        ("rollout_corr/k3_kl",),
        ("kl_k3",),
        ci=True,
    ),
    Metric(
        "chi2_token",
        "χ²(π‖μ) per token, mean(r²) − 1 (the variance of token IS weights)",
        ("rollout_corr/chi2_token",),
        ("chi2_token",),
    ),
    Metric(
        "chi2_seq",
        "χ²(π‖μ) per sequence, mean_seq(R²) − 1 with R = ∏ r (no clamping: can be inf)",
        ("rollout_corr/chi2_seq",),
        ("chi2_seq",),
    ),
    Metric(
        "log_ppl_abs_diff",
        "verl: mean over sequences of |mean_t log μ − mean_t log π| (log-perplexity gap)",
        ("rollout_corr/log_ppl_abs_diff",),
        ("log_ppl_abs_diff",),
    ),
    Metric(
        "log_ppl_diff",
        "verl: mean over sequences of mean_t log μ − mean_t log π = log(PPL_π / PPL_μ) (signed; "
        "> 0: the trainer finds the sampled text less likely than the engine did)",
        ("rollout_corr/log_ppl_diff",),
        ("log_ppl_diff",),
    ),
    Metric(
        "ppl_ratio",
        "verl: mean over sequences of PPL_π / PPL_μ = exp(mean_t log μ − mean_t log π) (1 when π = μ)",
        ("rollout_corr/ppl_ratio",),
        ("ppl_ratio",),
    ),
    Metric(
        "ess_token",
        "normalised effective sample size of the token IS weights r = π/μ, (Σr)² / (N Σr²) in (0, 1] "
        "(verl's rollout_is_eff_sample_size at token level, here of the raw weights, before any truncation or "
        "mask)",
        logged=("ess_token",),
    ),
    Metric(
        "ess_seq",
        "the same of the sequence IS weights R = ∏ r, over sequences (collapses long before the token ESS)",
        logged=("ess_seq",),
    ),
    Metric("seq_log_ratio/mean", "mean over sequences of log R = Σ_t (log π − log μ)", logged=("seq_log_ratio/mean",)),
    Metric("seq_log_ratio/abs_mean", "mean over sequences of |log R|", logged=("seq_log_ratio/abs_mean",)),
    Metric(
        "seq_kl",
        "sequence KL[μ‖π], mean over sequences of Σ_t (log μ − log π) (the paper's Fig. 5 KL)",
        logged=("seq_kl",),
        headline=True,
        ci=True,
    ),
    Metric("seq_log_ratio_slope/per_token", "least-squares slope of log R against response length, per token"),
    Metric(
        "seq_log_ratio_slope/per_1k_tokens",
        "the same slope per 1000 tokens (compare with the paper's Fig. 5 "
        "slopes, −1.01 BF16 vs −0.07 FP16, only after checking that figure's length units)",
    ),
    Metric("seq_log_ratio_slope/intercept", "intercept of that fit (log R at length 0)"),
):
    register(_m)
