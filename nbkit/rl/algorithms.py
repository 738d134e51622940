"""The paper's algorithms as named presets on TRL's ``GRPOTrainer`` options.

Every algorithm is TRL's GRPO machinery with different switches; nothing is re-implemented. μ (the rollout
engine's probabilities) reaches the loss only through TRL's importance-sampling (IS) correction, which the
workbook enables for every engine (TRL gates it on ``use_vllm``; see ``nbkit.rl.rollout``).

| preset | paper name | TRL options | μ in the loss |
|---|---|---|---|
| ``grpo`` | GRPO | ``loss_type="grpo"``, ``scale_rewards="group"`` | no (only through the samples) |
| ``dr_grpo`` | Dr.GRPO | ``loss_type="dr_grpo"``, ``scale_rewards="none"`` | no |
| ``grpo_token_tis`` | GRPO-Token-TIS | Dr.GRPO + ``vllm_importance_sampling_mode="token_truncate"``, cap C | × min(π/μ, C) per token |
| ``grpo_seq_mis`` | GRPO-Seq-MIS | Dr.GRPO + ``"sequence_mask"``, threshold C | sequences with ∏π/μ > C dropped |
| ``gspo`` | GSPO | ``importance_sampling_level="sequence"``, ε = 3e-4 / 4e-4 | no |
| ``pg_seq_is`` | PG-Seq-IS | Dr.GRPO loss + ``"sequence_truncate"``, cap C | × min(∏π/μ, C) per sequence |
| ``grpo_mu_old`` | decoupled / async PPO | GRPO with π_old := μ (the engine's log-probs) | clip of π/μ per token |
| ``grpo_mu_old_token_tis`` | same + Token-TIS | ``grpo_mu_old`` + ``"token_truncate"``, cap C | clip of π/μ, × min(π_old/μ, C) |
| ``ppo`` | PPO (critic) | token-mean clipped surrogate on GAE advantages, ``ppo_epochs`` × ``ppo_minibatches`` | no |
| ``ppo_token_tis`` | PPO + Token-TIS | ``ppo`` + ``"token_truncate"``, cap C | × min(π_old/μ, C) per token |
| ``grpo_icepop`` | IcePop | Dr.GRPO + ``"token_mask"``, band [low, high] | × π/μ per token, 0 outside [0.5, 5] |

With one optimiser update per batch (the paper's setting) the PPO ratio π/π_old is exactly 1, so ``dr_grpo``'s
surrogate is plain policy gradient with a group-mean baseline; ``pg_seq_is`` is that policy gradient weighted
by the (truncated) sequence ratio π/μ, as in the paper.

The ``*_mu_old`` presets are what asynchronous RL frameworks do: the rollout engine's μ stands in for π_old in the
clipped ratio, so the π–μ mismatch enters the clip directly and a token nobody has updated yet can be clipped
("phantom clipping", logged per step as ``clip/phantom_fraction`` by ``PrecisionGRPOTrainer``).

IcePop (the Ring-1T report's fix for the training–inference mismatch) keeps a token's weight π/μ when it lies in
[α, β] = [0.5, 5] and masks the token (weight 0) otherwise: TRL's ``token_mask`` mode with ``clip_min`` = α and
``clip_max`` = β (``RLConfig.icepop_low`` / ``icepop_high``).

``CORRECTIONS`` names the ways μ can enter the loss apart from the loss itself, so a study can cross them with
any preset: ``RLConfig.correction`` replaces the preset's own (``resolve``), e.g. ``dr_grpo`` + ``icepop``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Algorithm:
    """One named preset."""

    name: str
    """The workbook's name (paper naming, snake case)."""
    summary: str
    """One line for tables and notebooks."""
    trl: dict = field(default_factory=dict)
    """``GRPOConfig`` fields the preset sets."""
    is_mode: str | None = None
    """TRL's ``vllm_importance_sampling_mode`` when μ corrects the loss, None when it does not."""
    mu_as_old: bool = False
    """Use the rollout engine's log-probs μ as π_old in the clipped ratio (instead of TRL's recomputed π_old)."""
    critic: bool = False
    """Train a critic and use GAE per-token advantages (``nbkit.rl.ppo_trainer.PPOTrainer``)."""
    off_policy_mask: bool = False
    """DeepSeek-V3.2's off-policy sequence mask (``nbkit.rl.opsm``, threshold ``RLConfig.opsm_delta``)."""


_DR = {"loss_type": "dr_grpo", "scale_rewards": "none"}

ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("grpo", "GRPO: clipped surrogate, std-normalised group advantages", {"loss_type": "grpo", "scale_rewards": "group"}),
    Algorithm("dr_grpo", "Dr.GRPO: no std division, constant length normaliser", dict(_DR)),
    Algorithm("grpo_token_tis", "Dr.GRPO × min(π/μ, C) per token (truncated IS)", dict(_DR), "token_truncate"),
    Algorithm("grpo_seq_mis", "Dr.GRPO, sequences with ∏π/μ > C masked out", dict(_DR), "sequence_mask"),
    Algorithm("gspo", "GSPO: sequence-level geometric-mean ratio, tight clip",
              {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}),
    Algorithm("pg_seq_is", "policy gradient × min(∏π/μ, C) per sequence", dict(_DR), "sequence_truncate"),
    Algorithm("grpo_mu_old", "GRPO clipped against μ as π_old (async/decoupled PPO)",
              {"loss_type": "grpo", "scale_rewards": "group"}, mu_as_old=True),
    Algorithm("grpo_mu_old_token_tis", "GRPO clipped against μ as π_old, × min(π_old/μ, C) per token",
              {"loss_type": "grpo", "scale_rewards": "group"}, "token_truncate", mu_as_old=True),
    Algorithm("ppo", "PPO: critic from the policy, GAE per token, clipped policy and value loss, several epochs",
              {"loss_type": "bnpo", "scale_rewards": "none"}, critic=True),
    Algorithm("ppo_token_tis", "PPO × min(π_old/μ, C) per token (Token-TIS)",
              {"loss_type": "bnpo", "scale_rewards": "none"}, "token_truncate", critic=True),
    Algorithm("grpo_icepop", "Dr.GRPO × π/μ per token, tokens with π/μ outside [low, high] masked (IcePop)",
              dict(_DR), "token_mask"),
)}
"""Name → preset."""


@dataclass(frozen=True)
class Correction:
    """One way μ (the rollout engine's log-probs) enters the loss, independent of the loss itself."""

    name: str
    """The workbook's name (``RLConfig.correction``)."""
    summary: str
    """One line for tables and notebooks."""
    is_mode: str | None = None
    """TRL's ``vllm_importance_sampling_mode`` (None: no IS weight)."""
    mu_as_old: bool = False
    """μ stands in for π_old in the clipped ratio."""
    off_policy_mask: bool = False
    """Drop negative-advantage sequences whose KL(μ‖π) per token exceeds δ (``nbkit.rl.opsm``)."""


CORRECTIONS: dict[str, Correction] = {c.name: c for c in (
    Correction("none", "μ does not enter the loss (it only drew the samples)"),
    Correction("token_tis", "Token-TIS: × min(π/μ, C) per token", "token_truncate"),
    Correction("seq_tis", "sequence TIS: × min(∏π/μ, C) per sequence", "sequence_truncate"),
    Correction("seq_mis", "sequence MIS: sequences with ∏π/μ > C masked out", "sequence_mask"),
    Correction("icepop", "IcePop: × π/μ per token, tokens with π/μ outside [low, high] masked", "token_mask"),
    Correction("mu_old", "μ as π_old: the mismatch enters the PPO clip (async/decoupled PPO)", mu_as_old=True),
    Correction("opsm", "DeepSeek-V3.2's off-policy sequence mask: negative-advantage sequences with per-token "
               "KL(μ‖π) > δ dropped", off_policy_mask=True),
)}
"""Name → correction (``RLConfig.correction``; None there keeps the preset's own)."""


def get(name: str) -> Algorithm:
    """The preset called ``name`` (ValueError listing the choices otherwise)."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {tuple(ALGORITHMS)}")
    return ALGORITHMS[name]


def resolve(name: str, correction: str | None = None) -> Algorithm:
    """The preset ``name`` with its μ correction replaced by ``correction`` (a key of ``CORRECTIONS``; None keeps
    the preset's own). ValueError listing the choices for an unknown name."""
    algo = get(name)
    if correction is None:
        return algo
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; choose one of {tuple(CORRECTIONS)} or None (the "
                         f"preset's own)")
    c = CORRECTIONS[correction]
    return replace(algo, is_mode=c.is_mode, mu_as_old=c.mu_as_old, off_policy_mask=c.off_policy_mask)


def grpo_options(algo: Algorithm, is_cap: float, band: tuple[float, float] = (0.5, 5.0)) -> dict:
    """The ``GRPOConfig`` keyword arguments of ``algo`` with IS cap/threshold ``is_cap``; the token mask
    (IcePop) keeps the weights inside ``band`` = (low, high) instead."""
    opts = dict(algo.trl)
    opts["vllm_importance_sampling_correction"] = algo.is_mode is not None
    if algo.is_mode is not None:
        opts["vllm_importance_sampling_mode"] = algo.is_mode
        opts["vllm_importance_sampling_clip_max"] = is_cap
        if algo.is_mode == "token_mask":
            opts["vllm_importance_sampling_clip_min"], opts["vllm_importance_sampling_clip_max"] = band
    return opts


def is_weights(log_ratio: "torch.Tensor", mask: "torch.Tensor", mode: str, clip_min: float | None,
               clip_max: float) -> "torch.Tensor":
    """The IS weight TRL's ``vllm_importance_sampling_mode`` puts on each token (the workbook's statement of it,
    which the tests hold TRL's applied weights to): ``log_ratio`` = log π − log μ per token (B, T), ``mask`` the
    completion tokens. Token modes give (B, T), sequence modes (B, 1) from Σ_t log_ratio; ``*_truncate`` clamps
    to [clip_min, clip_max], ``*_mask`` keeps the ratio inside [clip_min, clip_max] and sets 0 outside (IcePop
    for ``token_mask``)."""
    import torch

    if mode not in IS_MODES:
        raise ValueError(f"unknown IS mode {mode!r}; choose one of {IS_MODES}")
    diff = log_ratio * mask
    ratio = torch.exp(diff.sum(-1, keepdim=True) if mode.startswith("sequence") else diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    return ratio.masked_fill((ratio < low) | (ratio > clip_max), 0.0)


IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
"""TRL's ``vllm_importance_sampling_mode`` values."""
