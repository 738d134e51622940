"""The metrics row: every key a run writes to ``metrics.jsonl``, named once, and the windowed statistics studies use.

A row is one optimiser step. Its keys come from three places: the workbook (this module's constants, each with its
meaning in ``KEYS``), TRL and transformers (``TRL_KEYS`` and the families in ``FAMILIES``, logged as TRL names
them), and the mismatch metrics (``mismatch/<name>`` for each name the registry ``nbkit.records.metrics`` marks as
logged,
documented in ``KEYS`` from there; the headline metric's own names, as ``nbkit.mismatch.mismatch`` returns them, are
``METRIC_*``).
Studies, plots and notebooks use the constants, never string literals, so a renamed key breaks loudly in one place.
"""

from __future__ import annotations

import math

from nbkit.records import metrics


def mismatch_key(name: str) -> str:
    """The row key of a mismatch metric of ``nbkit.mismatch.mismatch`` (``kl_k3`` → ``mismatch/kl_k3``)."""
    return f"mismatch/{name}"


def moe_flip_rate_key(layer: int) -> str:
    """The row key of one MoE layer's routing flip rate (``3`` → ``moe/flip_rate/layer3``; all layers:
    ``MOE_FLIP_RATE``)."""
    return f"{MOE_FLIP_RATE}/layer{layer}"


# --- the step and its outcome --------------------------------------------------------------------------------
STEP = "step"
REWARD = "reward"
ACCURACY = "accuracy"
ALARM = "alarm"
# --- the π–μ mismatch, per step ------------------------------------------------------------------------------
METRIC_TOKEN_ABS_LOGP_DIFF = metrics.TOKEN_ABS_LOGP_DIFF
"""The headline mismatch as ``nbkit.mismatch.mismatch`` names it (a key of its ``METRICS``, where its meaning is; offline
analyses, the doctor and the ladder read it under this name); a row holds it as ``TOKEN_ABS_LOGP_DIFF``."""
METRIC_TOKEN_ABS_LOGP_DIFF_MAX = metrics.TOKEN_ABS_LOGP_DIFF_MAX
"""Its max over tokens as ``nbkit.mismatch.mismatch`` names it; a row holds it as ``TOKEN_ABS_LOGP_DIFF_MAX``."""
TOKEN_ABS_LOGP_DIFF = mismatch_key(METRIC_TOKEN_ABS_LOGP_DIFF)
TOKEN_ABS_LOGP_DIFF_MAX = mismatch_key(METRIC_TOKEN_ABS_LOGP_DIFF_MAX)
KL_K1 = mismatch_key("kl_k1")
KL_K3 = mismatch_key("kl_k3")
SEQ_KL = mismatch_key("seq_kl")
PHANTOM_FRACTION = "clip/phantom_fraction"
IS_TRUNCATED_FRACTION = "is/truncated_fraction"
IS_MASKED_FRACTION = "is/masked_fraction"
IS_TRUNCATED_TOKEN_FRACTION = "is/truncated_token_fraction"
IS_MASKED_TOKEN_FRACTION = "is/masked_token_fraction"
OPSM_MASKED_FRACTION = "opsm/masked_fraction"
ESS_TOKEN = mismatch_key("ess_token")
ESS_SEQ = mismatch_key("ess_seq")
LOG_PPL_DIFF = mismatch_key("log_ppl_diff")
PPL_RATIO = mismatch_key("ppl_ratio")
GRAD_NORM = "grad_norm"
ENTROPY = "entropy"
# --- the held-out judge (nbkit.rl.judge): the policy's accuracy on held-out problems, sampled in FP32 ---------
JUDGE_ACCURACY = "judge/accuracy"
JUDGE_RESPONSES = "judge/responses"
JUDGE_MATMUL_DTYPES = "judge/matmul_dtypes"
TIME_JUDGE = "time/judge"
# --- precision: loss scaling and the audit -------------------------------------------------------------------
LOSS_SCALE = "loss_scale"
SKIPPED_STEP = "skipped_step"
SKIPPED_STEPS_TOTAL = "skipped_steps_total"
AUDIT_REQUESTED = "audit/requested"
AUDIT_MATMUL_DTYPES = "audit/matmul_dtypes"
AUDIT_SCALER_ENABLED = "audit/scaler_enabled"
AUDIT_ROLLOUT_DTYPE = "audit/rollout_dtype"
AUDIT_ROLLOUT_GEMM = "audit/rollout_gemm"
AUDIT_GEMM = "audit/gemm"
AUDIT_GEMM_ROUTED = "audit/gemm_routed"
AUDIT_CRITIC_MATMUL_DTYPES = "audit/critic_matmul_dtypes"
AUDIT_ROLLOUT_FORMAT = "audit/rollout_format"
AUDIT_ROLLOUT_FORMAT_GEMMS = "audit/rollout_format_gemms"
AUDIT_TRL_FP32_HEAD = "audit/trl_cast_lm_head_to_fp32"
AUDIT_ENGINE_HEAD_DTYPE = "audit/engine_lm_head_dtype"
# --- time per step, split ------------------------------------------------------------------------------------
TIME_STEP = "time/step"
TIME_ROLLOUT = "time/rollout"
TIME_SYNC = "time/sync"
TIME_SCORE = "time/score"
TIME_MISMATCH = "time/mismatch"
TIME_UPDATE = "time/update"
# --- PPO: the critic and the policy's KL ---------------------------------------------------------------------
PPO_APPROX_KL = "ppo/approx_kl"
PPO_CLIP_FRACTION = "ppo/clip_fraction"
VALUE_LOSS = "value/loss"
VALUE_EXPLAINED_VARIANCE = "value/explained_variance"
VALUE_MEAN = "value/mean"
VALUE_GRAD_NORM = "value/grad_norm"
VALUE_LOSS_SCALE = "value/loss_scale"
VALUE_SCALER_ENABLED = "value/scaler_enabled"
VALUE_MIN_LOGP_CEILING = "value/min_logp_ceiling_ev"
# --- mixture of experts and several processes ----------------------------------------------------------------
MOE_FLIP_RATE = "moe/flip_rate"
RANKS_AUDIT_MATMUL_DTYPES = "ranks/audit_matmul_dtypes"
RANKS_REWARD_SUM = "ranks/reward_sum"
RANKS_REWARD_COUNT = "ranks/reward_count"
PARAMS_TOTAL = "params/total"
PARAMS_TRAINABLE = "params/trainable"
PARAMS_CRITIC_TRAINABLE = "params/critic_trainable"
# --- answers cut at the length limit -------------------------------------------------------------------------
LENGTH_CAPPED = "rollout/length_capped"
LENGTH_CAPPED_FRACTION = "rollout/length_capped_fraction"
PI_KEPT_MASS = "sampling/pi_kept_mass/mean"

KEYS: dict[str, str] = {
    STEP: "optimiser step (1-based)",
    REWARD: "mean reward of the step's rollouts (TRL's own key)",
    ACCURACY: "the reward when it is 0/1 correctness (the sanity test's training accuracy)",
    ALARM: "collapse alarm message (present only on steps where it fired)",
    **{mismatch_key(name): f"{meaning} (the step's rollouts)" for name, meaning in metrics.logged_meanings().items()},
    PHANTOM_FRACTION: "share of tokens whose PPO clip is active at the first minibatch after a rollout (rounding)",
    IS_TRUNCATED_FRACTION: "share of tokens/sequences whose IS weight was truncated at the cap",
    IS_MASKED_FRACTION: "share of tokens/sequences whose IS weight masked them out",
    IS_TRUNCATED_TOKEN_FRACTION: "share of completion tokens whose IS weight (own or their sequence's) was truncated",
    IS_MASKED_TOKEN_FRACTION: "share of completion tokens whose IS weight (own or their sequence's) masked them out",
    OPSM_MASKED_FRACTION: "correction='opsm': share of the step's sequences the off-policy sequence mask dropped",
    GRAD_NORM: "TRL: the policy's gradient norm before clipping",
    ENTROPY: "TRL: mean token entropy of π on the batch",
    JUDGE_ACCURACY: "the policy's accuracy on the held-out judge set, sampled by an FP32 HF engine holding a copy of "
    "the weights after this step (step 0: before any update); a row of step 0 holds only the judge",
    JUDGE_RESPONSES: "responses the judge graded (held-out problems × judge_samples)",
    JUDGE_MATMUL_DTYPES: "dtypes the judge engine's matmuls produced (fp32 only, or the run stops)",
    TIME_JUDGE: "seconds the held-out judge took (outside time/step)",
    LOSS_SCALE: "the FP16 loss scale after the step (1.0 without scaling)",
    SKIPPED_STEP: "the update was skipped (inf/NaN gradients under FP16 loss scaling)",
    SKIPPED_STEPS_TOTAL: "skipped updates so far in the run",
    AUDIT_REQUESTED: "the training dtype asked for",
    AUDIT_MATMUL_DTYPES: "dtypes the linear layers' matmuls produced",
    AUDIT_SCALER_ENABLED: "a live GradScaler (or DeepSpeed's scaler) ran this step",
    AUDIT_ROLLOUT_DTYPE: "the dtype the rollout engine really holds",
    AUDIT_ROLLOUT_GEMM: "the rollout engine and the GEMM policy its half layers ran (e.g. 'vllm fp32-accumulate')",
    AUDIT_GEMM: "the GEMM policy that ran",
    AUDIT_GEMM_ROUTED: "half GEMMs (per format) and attentions (sdpa/<format>) routed by the fp32-accumulate policy",
    AUDIT_CRITIC_MATMUL_DTYPES: "PPO: dtypes the critic's matmuls produced",
    AUDIT_ROLLOUT_FORMAT: "the rollout format that ran (nbkit.precision.formats; only when rollout_format is set)",
    AUDIT_ROLLOUT_FORMAT_GEMMS: "GEMMs the rollout engine ran in that format this step (vLLM: its FP8 weight dtypes)",
    AUDIT_TRL_FP32_HEAD: "π's LM head in FP32: TRL's cast_lm_head_to_fp32 as the trainer ran it (RLConfig.fp32_lm_head)",
    AUDIT_ENGINE_HEAD_DTYPE: "dtype of the logits the HF engine's LM head produced last (fp32 with an engine-side FP32 "
    "head; n/a for vLLM)",
    TIME_STEP: "seconds of the whole step",
    TIME_ROLLOUT: "seconds generating (μ)",
    TIME_SYNC: "seconds syncing weights to the engine",
    TIME_SCORE: "seconds computing rewards",
    TIME_MISMATCH: "seconds computing mismatch metrics",
    TIME_UPDATE: "seconds of π forward/backward and the update",
    PPO_APPROX_KL: "approx KL(π_old ‖ π) of the minibatch before its update",
    PPO_CLIP_FRACTION: "share of tokens whose PPO ratio was clipped",
    VALUE_LOSS: "critic's clipped value loss",
    VALUE_EXPLAINED_VARIANCE: "critic's explained variance of the returns",
    VALUE_MEAN: "critic's mean value",
    VALUE_GRAD_NORM: "critic's gradient norm",
    VALUE_LOSS_SCALE: "critic's loss scale",
    VALUE_SCALER_ENABLED: "the critic's GradScaler is live",
    VALUE_MIN_LOGP_CEILING: "PPO, critic_input hidden+min_logp: explained variance of the rollout batch's returns by "
    "their own mean per bin of the running minimum of log π (the most any value of the bin alone explains there)",
    MOE_FLIP_RATE: "share of tokens whose top-k experts differ between trainer and rollout (some layer)",
    RANKS_AUDIT_MATMUL_DTYPES: "each process's audit",
    RANKS_REWARD_SUM: "each process's reward sum",
    RANKS_REWARD_COUNT: "each process's reward count",
    PARAMS_TOTAL: "parameters of the policy",
    PARAMS_TRAINABLE: "trainable parameters (LoRA: adapters only)",
    PARAMS_CRITIC_TRAINABLE: "PPO: trainable parameters of the critic",
    LENGTH_CAPPED: "the step's answers (all processes) that ended at the length limit, not by a stop token",
    LENGTH_CAPPED_FRACTION: "their share of the step's answers (a grader needing a closing tag scores them 0)",
    PI_KEPT_MASS: "top-p/top-k runs: mean mass π's filter keeps at the sampled tokens (what an unfiltered π/μ averages)",
}
"""The workbook's own keys and what each means."""

TRL_KEYS: tuple[str, ...] = (
    "loss",
    "grad_norm",
    "learning_rate",
    "epoch",
    "num_tokens",
    "entropy",
    "reward_std",
    "frac_reward_zero_std",
    "aux_loss",
    "step_time",
)
"""Keys TRL / transformers log themselves (see their docs)."""

FAMILIES: tuple[str, ...] = (
    "mismatch/",
    "clip_ratio/",
    "completions/",
    "rewards/",
    "sampling/",
    "moe/flip_rate/layer",
    "judge/",
    "anatomy/",
    "bins/",
)
"""Key prefixes of families whose members are generated (mismatch metrics, TRL's per-reward and length stats,
MoE flip rates per layer, the per-step token bins of ``nbkit.mismatch.tokenbins``)."""


TIMING_KEYS: tuple[str, ...] = ("step_time",)
"""TRL's own wall-clock keys; with the ``time/`` family, the columns that measure the machine, not the run."""


def timing(key: str) -> bool:
    """True for a column measuring wall time (``time/*``, TRL's ``step_time``): the columns that may differ between
    two runs of one config on one CPU, e.g. one run alone and one beside another (``nbkit.runtime.pool``)."""
    return key.startswith("time/") or key in TIMING_KEYS


def without_timing(rows: list[dict]) -> list[dict]:
    """A run's metric rows without the columns that measure wall time (``timing``): what two runs of one config on
    one CPU must log alike."""
    return [{k: v for k, v in r.items() if not timing(k)} for r in rows]


def known(key: str) -> bool:
    """True for a key this schema accounts for (the workbook's, TRL's, or a member of a family)."""
    return key in KEYS or key in TRL_KEYS or key.startswith(FAMILIES)


# --- windowed statistics -------------------------------------------------------------------------------------
def series(rows: list[dict], key: str) -> list[float]:
    """The finite numeric values of ``key`` over ``rows``, in step order (steps without it are left out)."""
    return [
        float(r[key])
        for r in rows
        if isinstance(r.get(key), (int, float)) and not isinstance(r[key], bool) and math.isfinite(r[key])
    ]


def optimiser_steps(rows: list[dict]) -> int:
    """Optimiser steps a run logged: its rows after step 0 (a judged run has a step-0 row of its own)."""
    return sum(1 for r in rows if r.get(STEP, 1) > 0)


def mean(values: list[float]) -> float | None:
    """Mean, or None for no values."""
    return sum(values) / len(values) if values else None


def first_window(rows: list[dict], key: str, window: int = 5) -> float | None:
    """Mean of ``key`` over its first ``window`` values."""
    return mean(series(rows, key)[:window])


def last_window(rows: list[dict], key: str, window: int = 5) -> float | None:
    """Mean of ``key`` over its last ``window`` values (a run's *final* value)."""
    return mean(series(rows, key)[-window:])
