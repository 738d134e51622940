"""The paper's algorithms as named presets on TRL's ``GRPOTrainer`` options.

Every algorithm is TRL's GRPO machinery with different switches; nothing is re-implemented. μ (the rollout
engine's probabilities) reaches the loss only through TRL's importance-sampling (IS) correction, which the
workbook enables for every engine (TRL gates it on ``use_vllm``; see ``nbkit.rl.rollout``).

A preset is a loss (``LOSSES``), the corrections that put μ into it (``CORRECTIONS``) and the trainer class that
runs it (``TRAINERS``), declared once with ``register`` into ``ALGORITHMS``. PPO (``ppo``, ``ppo_token_tis``) is a
token-mean clipped surrogate on GAE advantages with a critic, ``ppo_epochs`` × ``ppo_minibatches`` updates per rollout
batch.

With one optimiser update per batch (the paper's setting) the PPO ratio π/π_old is exactly 1, so ``dr_grpo``'s
surrogate is plain policy gradient with a group-mean baseline; ``pg_seq_is`` is that policy gradient weighted
by the (truncated) sequence ratio π/μ, as in the paper.

The presets with the ``mu_old`` correction are what asynchronous RL frameworks do: the rollout engine's μ stands in
for π_old in the clipped ratio, so the π–μ mismatch enters the clip directly and a token nobody has updated yet can
be clipped ("phantom clipping", logged per step as ``clip/phantom_fraction`` by ``PrecisionGRPOTrainer``).

IcePop (the Ring-1T report's fix for the training–inference mismatch) keeps a token's weight π/μ when it lies in
[α, β] = [0.5, 5] and masks the token (weight 0) otherwise: TRL's ``token_mask`` mode with ``clip_min`` = α and
``clip_max`` = β (``RLConfig.icepop_low`` / ``icepop_high``).

``CORRECTIONS`` names the ways μ can enter the loss apart from the loss itself, so a study can cross them with
any preset: ``RLConfig.correction`` replaces the preset's own (``resolve``), e.g. ``dr_grpo`` + ``icepop``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the presets import without torch
    import torch

import math
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Loss:
    """One policy loss: the ``GRPOConfig`` fields that choose it."""

    name: str
    """The workbook's name (``Algorithm.loss``)."""
    summary: str
    """One line for tables."""
    trl: dict = field(default_factory=dict)
    """``GRPOConfig`` fields the loss sets."""


@dataclass(frozen=True)
class Trainer:
    """One trainer class, named by its import path so this module imports no torch."""

    name: str
    """The workbook's name (``Algorithm.trainer``)."""
    path: str
    """``module:Class`` of the trainer (``trainer_class`` imports it)."""
    critic: bool = False
    """The trainer trains a critic and uses GAE per-token advantages."""


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


LOSSES: dict[str, Loss] = {
    x.name: x
    for x in (
        Loss(
            "grpo",
            "clipped surrogate, std-normalised group advantages",
            {"loss_type": "grpo", "scale_rewards": "group"},
        ),
        Loss(
            "dr_grpo", "no std division, constant length normaliser", {"loss_type": "dr_grpo", "scale_rewards": "none"}
        ),
        Loss(
            "gspo",
            "sequence-level geometric-mean ratio, tight clip",
            {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
        ),
        Loss("ppo", "token-mean clipped surrogate on GAE advantages", {"loss_type": "bnpo", "scale_rewards": "none"}),
    )
}
"""Name → loss (``Algorithm.loss``)."""

TRAINERS: dict[str, Trainer] = {
    t.name: t
    for t in (
        Trainer("grpo", "nbkit.rl.trainer:PrecisionGRPOTrainer"),
        Trainer("ppo", "nbkit.rl.ppo_trainer:PPOTrainer", critic=True),
    )
}
"""Name → trainer class (``Algorithm.trainer``)."""

CORRECTIONS: dict[str, Correction] = {
    c.name: c
    for c in (
        Correction("none", "μ does not enter the loss (it only drew the samples)"),
        Correction("token_tis", "Token-TIS: × min(π/μ, C) per token", "token_truncate"),
        Correction("seq_tis", "sequence TIS: × min(∏π/μ, C) per sequence", "sequence_truncate"),
        Correction("seq_mis", "sequence MIS: sequences with ∏π/μ > C masked out", "sequence_mask"),
        Correction("icepop", "IcePop: × π/μ per token, tokens with π/μ outside [low, high] masked", "token_mask"),
        Correction("mu_old", "μ as π_old: the mismatch enters the PPO clip (async/decoupled PPO)", mu_as_old=True),
        Correction(
            "opsm",
            "DeepSeek-V3.2's off-policy sequence mask: negative-advantage sequences with per-token KL(μ‖π) > δ dropped",
            off_policy_mask=True,
        ),
    )
}
"""Name → correction (``RLConfig.correction``; None there keeps the preset's own)."""


@dataclass(frozen=True)
class Algorithm:
    """One named preset: a loss, the corrections that put μ into it, and the trainer class that runs it. Every
    behaviour is read from these three fields, never from the name."""

    name: str
    """The workbook's name (paper naming, snake case)."""
    summary: str
    """One line for tables and notebooks."""
    loss: str = "grpo"
    """A key of ``LOSSES``."""
    corrections: tuple[str, ...] = ("none",)
    """Keys of ``CORRECTIONS`` applied together (at most one with an IS mode)."""
    trainer: str = "grpo"
    """A key of ``TRAINERS``."""

    def __post_init__(self):
        for value, table, what in ((self.loss, LOSSES, "loss"), (self.trainer, TRAINERS, "trainer")):
            if value not in table:
                raise ValueError(f"preset {self.name!r}: unknown {what} {value!r}; choose one of {tuple(table)}")
        bad = [c for c in self.corrections if c not in CORRECTIONS]
        if bad or not self.corrections:
            raise ValueError(
                f"preset {self.name!r}: unknown correction(s) {bad or '()'}; choose from {tuple(CORRECTIONS)}"
            )
        if sum(CORRECTIONS[c].is_mode is not None for c in self.corrections) > 1:
            raise ValueError(f"preset {self.name!r}: corrections {self.corrections} set more than one IS mode")

    @property
    def trl(self) -> dict:
        """``GRPOConfig`` fields of its loss."""
        return dict(LOSSES[self.loss].trl)

    @property
    def is_mode(self) -> str | None:
        """TRL's ``vllm_importance_sampling_mode`` when μ corrects the loss, None when it does not."""
        return next((CORRECTIONS[c].is_mode for c in self.corrections if CORRECTIONS[c].is_mode), None)

    @property
    def mu_as_old(self) -> bool:
        """Use the rollout engine's log-probs μ as π_old in the clipped ratio (instead of TRL's recomputed π_old)."""
        return any(CORRECTIONS[c].mu_as_old for c in self.corrections)

    @property
    def off_policy_mask(self) -> bool:
        """DeepSeek-V3.2's off-policy sequence mask (``nbkit.rl.opsm``, threshold ``RLConfig.opsm_delta``)."""
        return any(CORRECTIONS[c].off_policy_mask for c in self.corrections)

    @property
    def critic(self) -> bool:
        """Train a critic and use GAE per-token advantages (``nbkit.rl.ppo_trainer.PPOTrainer``)."""
        return TRAINERS[self.trainer].critic


ALGORITHMS: dict[str, Algorithm] = {}
"""Name → preset (filled by ``register``)."""


def register(algo: Algorithm) -> Algorithm:
    """Add ``algo`` to ``ALGORITHMS`` (the one place a preset is declared: ``RLConfig``'s
    choices and the tests read it there). A second preset of one name is refused."""
    if algo.name in ALGORITHMS:
        raise ValueError(f"preset {algo.name!r} is registered already")
    ALGORITHMS[algo.name] = algo
    return algo


for _algo in (
    Algorithm("grpo", "GRPO: clipped surrogate, std-normalised group advantages", "grpo"),
    Algorithm("dr_grpo", "Dr.GRPO: no std division, constant length normaliser", "dr_grpo"),
    Algorithm("grpo_token_tis", "Dr.GRPO × min(π/μ, C) per token (truncated IS)", "dr_grpo", ("token_tis",)),
    Algorithm("grpo_seq_mis", "Dr.GRPO, sequences with ∏π/μ > C masked out", "dr_grpo", ("seq_mis",)),
    Algorithm("gspo", "GSPO: sequence-level geometric-mean ratio, tight clip", "gspo"),
    Algorithm("pg_seq_is", "policy gradient × min(∏π/μ, C) per sequence", "dr_grpo", ("seq_tis",)),
    Algorithm("grpo_mu_old", "GRPO clipped against μ as π_old (async/decoupled PPO)", "grpo", ("mu_old",)),
    Algorithm(
        "grpo_mu_old_token_tis",
        "GRPO clipped against μ as π_old, × min(π_old/μ, C) per token",
        "grpo",
        ("mu_old", "token_tis"),
    ),
    Algorithm(
        "ppo",
        "PPO: critic from the policy, GAE per token, clipped policy and value loss, several epochs",
        "ppo",
        trainer="ppo",
    ),
    Algorithm("ppo_token_tis", "PPO × min(π_old/μ, C) per token (Token-TIS)", "ppo", ("token_tis",), "ppo"),
    Algorithm(
        "grpo_icepop",
        "Dr.GRPO × π/μ per token, tokens with π/μ outside [low, high] masked (IcePop)",
        "dr_grpo",
        ("icepop",),
    ),
):
    register(_algo)


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
        raise ValueError(
            f"unknown correction {correction!r}; choose one of {tuple(CORRECTIONS)} or None (the preset's own)"
        )
    return replace(algo, corrections=(correction,))


def trainer_class(algo: Algorithm) -> type:
    """The trainer class that runs ``algo`` (imported here: the trainers import torch and TRL)."""
    import importlib

    module, cls = TRAINERS[algo.trainer].path.split(":")
    return getattr(importlib.import_module(module), cls)


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


def is_weights(
    log_ratio: torch.Tensor, mask: torch.Tensor, mode: str, clip_min: float | None, clip_max: float
) -> torch.Tensor:
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
