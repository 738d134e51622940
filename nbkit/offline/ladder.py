"""The rollout-precision ladder: the mismatch each rollout format causes against an FP32 trainer's π.

For one model and a list of ``nbkit.precision.formats`` names, the HF engine samples the same prompts in each format (μ,
its GEMM count audited), one FP32 teacher-forced forward computes π of those tokens, and ``nbkit.mismatch.mismatch``
turns each pair into metrics with bootstrap CIs over sequences. With the trainer exact, each rung's mismatch is the
format's own rounding (one side exact): the dose of the dose–response study.

    res = run_ladder(LadderConfig(model="tiny-arith", formats=("fp32", "bf16", "fp8-e4m3", "nvfp4")))
    res.table()                                  # one row per format, headline metrics with 95 % CIs
    nbkit.plots.ladder.ladder_figure(res)        # the ladder on a log axis
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

import nbkit.precision.dial  # noqa: F401 - registers the dial's points with nbkit.precision.formats (FAMILIES)
from nbkit.engines import SamplingConfig, make_engine
from nbkit.mismatch.mismatch import headline_cis, mismatch_metrics, teacher_forced_logprobs
from nbkit.models import models
from nbkit.offline import analysis
from nbkit.offline.anatomy_surgery import right_padded
from nbkit.precision import formats, gemm
from nbkit.records import metrics as metric_registry
from nbkit.records import schema

HEADLINE_KEYS = metric_registry.headline()
"""The ladder's metrics: per-token mean |log π − log μ|, token KL[μ‖π] (k1), sequence KL (paper's Fig. 5)."""


@dataclass
class LadderConfig:
    """One model's ladder of rollout formats against an FP32 trainer."""

    model: str = field(
        default="tiny-arith",
        metadata={
            "help": "Model ref for ``nbkit.models.models.load`` (``tiny-arith``, ``smollm2-135m``, a directory)."
        },
    )
    formats: tuple[str, ...] = field(
        default=formats.LADDER,
        metadata={"help": "Rollout formats (``nbkit.precision.formats.FORMATS``), in the order the figure shows them."},
    )
    prompt_source: str = field(
        default="auto",
        metadata={
            "help": (
                "As ``nbkit.offline.analysis.GridConfig.prompt_source`` (``auto``: ``arith`` for tiny-arith, else "
                "``eval/math``)."
            )
        },
    )
    n_prompts: int = field(default=32, metadata={"help": "Number of prompts."})
    samples_per_prompt: int = field(default=4, metadata={"help": "Responses sampled per prompt and format."})
    max_tokens: int = field(default=48, metadata={"help": "Longest response (tokens)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (π at the same temperature)."})
    seed: int = field(
        default=0,
        metadata={"help": "Seed of the prompts, the samplers (the same in every format) and the bootstrap."},
    )
    batch_size: int = field(default=16, metadata={"help": "Sequences per teacher-forced π forward."})
    n_boot: int = field(
        default=200, metadata={"help": "Bootstrap resamples (sequences) for each headline CI; 0 = none."}
    )
    gemm: str = field(
        default="auto",
        metadata={
            "help": "``nbkit.precision.gemm`` policy of the GEMMs a format leaves in its base dtype (and of plain fp16/bf16)."
        },
    )
    device: str | None = field(default=None, metadata={"help": "Device of the engine and of π; None = CPU."})
    prompts: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": (
                "The prompts themselves, as a run's template gives them (e.g. a study's training problems); empty = "
                "``prompt_source`` picks ``n_prompts``. Given, they replace ``prompt_source`` and ``n_prompts``."
            )
        },
    )
    argmax_flips: bool = field(
        default=False,
        metadata={
            "help": (
                "Also record, per response position, whether the argmax of the format's distribution differs from "
                "the FP32 π's (both teacher-forced on the sampled responses; ``LadderResult.flips``)."
            )
        },
    )

    def __post_init__(self) -> None:
        if not self.formats:
            raise ValueError("formats is empty; choose from " + repr(tuple(formats.FORMATS)))
        for name in self.formats:
            formats.validate(name)
        gemm.validate(self.gemm)
        for name in ("n_prompts", "samples_per_prompt", "max_tokens", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.n_boot < 0:
            raise ValueError(f"n_boot must be >= 0, got {self.n_boot!r}")


@dataclass
class LadderResult:
    """Rollouts, π, metrics and CIs of every format of one ladder."""

    config: LadderConfig
    """The configuration that produced it."""
    prompts: list[str]
    """The prompts as the engine saw them."""
    rollouts: dict[str, list] = field(default_factory=dict)
    """Format → rollouts (μ in ``Rollout.logprobs``)."""
    logp_pi: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """Format → FP32 π per token of that format's rollouts."""
    metrics: dict[str, dict] = field(default_factory=dict)
    """Format → ``mismatch_metrics`` of (π, μ)."""
    cis: dict[str, dict] = field(default_factory=dict)
    """Format → bootstrap CIs of the ``nbkit.mismatch.mismatch.HEADLINE`` metrics."""
    audits: dict[str, dict] = field(default_factory=dict)
    """Format → ``nbkit.precision.formats.audit`` record (quantized GEMMs counted in the engine)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time per stage: ``generate/<format>``, ``pi/<format>``."""
    flips: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """With ``argmax_flips``: format → per rollout, a boolean per response token (argmax μ ≠ argmax π there)."""

    def pairs(self) -> dict[str, tuple]:
        """Format → (log π, log μ) for ``nbkit.plots.mismatch``."""
        return {
            f: (self.logp_pi[f], [np.asarray(r.logprobs, dtype=np.float64) for r in self.rollouts[f]])
            for f in self.rollouts
        }

    def table(self):
        """One row per format: base dtype, tokens, the headline metrics with their 95 % CIs, GEMMs, seconds."""
        import pandas as pd

        rows = []
        for f, m in self.metrics.items():
            row = {"format": f, "base": formats.get(f).base, "n_tokens": int(m["n_tokens"])}
            for k in HEADLINE_KEYS:
                row[k] = m[k]
                ci = self.cis.get(f, {}).get(k)
                if ci is not None:
                    row[f"{k} low"], row[f"{k} high"] = ci["low"], ci["high"]
            row["quantized GEMMs"] = self.audits[f][schema.AUDIT_ROLLOUT_FORMAT_GEMMS]
            row["generate s"] = self.seconds.get(f"generate/{f}", np.nan)
            rows.append(row)
        return pd.DataFrame(rows)


@torch.no_grad()  # not inference_mode: a rollout format's dispatch mode must see the tensors
def teacher_forced_argmax(model, rollouts, batch_size: int = 16) -> list[np.ndarray]:
    """The argmax token of ``model``'s distribution at every response position of ``rollouts`` (teacher-forced on
    prompt + response, run as given: the caller sets any format or GEMM policy), one int array per rollout."""
    out = []
    for s in range(0, len(rollouts), batch_size):
        batch = rollouts[s : s + batch_size]
        ids, mask = right_padded(batch)
        device = next(model.parameters()).device
        top = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.argmax(-1).cpu()
        for row, r in enumerate(batch):  # logits at position j predict token j + 1
            p, t = len(r.prompt_ids), len(r.token_ids)
            out.append(top[row, p - 1 : p + t - 1].numpy())
    return out


def run_ladder(cfg: LadderConfig, progress: bool = False) -> LadderResult:
    """Sample with the HF engine in each format, audit it, score the tokens with FP32 π, compute the metrics."""
    model, tok = models.load(cfg.model, "fp32", device=cfg.device)
    prompts = list(cfg.prompts) or analysis.load_prompts(analysis.source_of(cfg), cfg.n_prompts, tok, cfg.seed)
    sampling = SamplingConfig(
        temperature=cfg.temperature, max_tokens=cfg.max_tokens, n=cfg.samples_per_prompt, seed=cfg.seed
    )
    res = LadderResult(cfg, prompts)
    for name in cfg.formats:
        start = time.perf_counter()
        engine = make_engine(
            "hf", model, tokenizer=tok, format=name, gemm=cfg.gemm, progress=progress, device=cfg.device
        )
        rollouts = engine.generate(prompts, sampling)
        res.seconds[f"generate/{name}"] = time.perf_counter() - start
        res.audits[name] = formats.audit(name, engine.take_format_gemms())  # the format ran, or this fails
        if cfg.argmax_flips:
            with gemm.suspended(), formats.policy(engine.format, engine.gemm, engine.model):
                mu_top = teacher_forced_argmax(engine.model, rollouts, cfg.batch_size)
            pi_top = teacher_forced_argmax(model, rollouts, cfg.batch_size)
            res.flips[name] = [a != b for a, b in zip(mu_top, pi_top, strict=True)]
        engine.close()
        start = time.perf_counter()
        pi = teacher_forced_logprobs(
            model, rollouts, dtype="fp32", batch_size=cfg.batch_size, temperature=cfg.temperature, progress=progress
        )
        res.seconds[f"pi/{name}"] = time.perf_counter() - start
        mu = [np.asarray(r.logprobs, dtype=np.float64) for r in rollouts]
        res.rollouts[name], res.logp_pi[name] = rollouts, pi
        res.metrics[name] = mismatch_metrics(pi, mu)
        if cfg.n_boot:
            res.cis[name] = headline_cis(pi, mu, n_boot=cfg.n_boot, seed=cfg.seed)
    return res
