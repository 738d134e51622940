"""The anatomy of π − μ: the mismatch of one model × engine × dtype split along one path into parts that add up.

    res = anatomy.run("tiny-arith", engine="vllm", dtype="fp16")
    res.table()                 # one row per step: signed mean Δ log p per token with a bootstrap CI
    plots.anatomy.waterfall(res, "format")   # the steps stacked, the unattributed remainder, the total
    res.layers                  # hidden-state relative error layer by layer (trainer forward vs FP32)

One set of responses (sampled by the real engine in ``dtype``, or given) is scored at every state of ONE path from
the exact FP32 forward, through the trainer's forward in the format (π), to the engine's μ. Each state adds one
switch to the state before it (the switches are disjoint), and each factor is the mean *signed* per-token difference
of log p between consecutive states, pooled over the tokens of the same sequences. Differences telescope, so the
factors and the remainder sum to the total exactly (the tests check it to 1e-6 on every run):

- **format** (FP32 → π): ``FORMAT_PATH``: weights rounded, then every linear layer's operands and output rounded,
  attention in the format, the other modules' outputs (embeddings, norms, activation, rotary) rounded, the residual
  stream rounded, the LM head in the format; **unattributed**: the real forward in the format against that last
  emulated state (roundings inside kernels the hooks cannot reach). Total: log π − log p_FP32.
- **implementation** (π → μ, both in the format): ``IMPL_PATH``: the sequence alone instead of in the trainer's
  batch, KV-cache decoding instead of a full forward, decoding in the engine's batch (batch invariance), the real
  engine (e.g. vLLM) instead of HF decoding of the same batch (zero by construction for the HF engine). The path
  ends at μ itself, so its remainder is float rounding only. Total: log μ − log π.

CIs: percentile bootstrap over sequences with the same resamples for every factor of a group, so each resample
adds up too. The signed per-token mean of log μ − log π over tokens sampled from μ estimates KL(μ‖π) (≥ 0); a step
can be negative (it moves log p back). Beside the additive table, the non-additive headline metrics (mean |Δ log p|,
k1, sequence KL, ``METRICS``) of each group's total, of π and μ against FP32, and of the four LM-head cases (an FP32
head on neither side / the trainer only / the engine only / both, between the trainer's forward and the HF decoding
of the engine's batch) are kept for comparison with notebook 02's grid.

On an FP32 model every format step is exactly 0 and every implementation step is kernel noise (the tests check both).
Per-layer divergence: ‖h − h_FP32‖ / ‖h_FP32‖ of every layer's hidden states over the response positions.

The anatomy is cut in three: the model edits (``nbkit.offline.anatomy_surgery``), this module's measurement (the two
paths, their config and result, the run that scores every state and telescopes it), and the result told in prose
(``nbkit.offline.anatomy_report``); its figures are ``nbkit.plots.anatomy``. Over ~400 lines because the measurement
is one piece: the paths, the config fields that steer ``run`` and the result it fills are read together.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np

from nbkit.engines import SamplingConfig
from nbkit.mismatch import forced, mismatch
from nbkit.models import models
from nbkit.offline import analysis
from nbkit.offline.anatomy_surgery import (
    MODEL_HEAD,
    emulate,
    forward_heads,
    fp32_head_fn,
    rounded_weights,
    state_divergence,
)
from nbkit.precision import gemm as gemm_policies
from nbkit.precision import lm_head
from nbkit.records import metrics as metric_registry
from nbkit.runtime.fieldcheck import check_fields
from nbkit.stats import stats

FORMAT_PATH = {
    "weights": "every parameter rounded to the format, arithmetic in FP32",
    "linear": "+ every linear layer's operands and output rounded (LM head excluded; the SiLU·up product included)",
    "attention": "+ attention in the format (q, k after rotary, v, the SDPA kernel)",
    "norms_activations": "+ every other module's output rounded (embeddings, RMSNorms, activation, rotary cos/sin)",
    "residual": "+ the residual stream rounded after every block",
    "lm_head": "+ the LM head in the format (input and logits rounded)",
}
"""The format path from the exact FP32 forward, in order: each step adds its switch to every one before it."""
IMPL_PATH = {
    "trainer_batch": "the sequence scored alone instead of in the trainer's batch",
    "kv_cache": "KV-cache decoding instead of one full-sequence forward (alone)",
    "engine_batch": "decoding in the engine's batch instead of alone (batch invariance)",
    "engine": "the real engine instead of HF decoding of the same batch",
}
"""The implementation path from the trainer's π to the engine's μ, both in the format, in order."""
PATHS = {"format": FORMAT_PATH, "implementation": IMPL_PATH}
UNATTRIBUTED = "unattributed"
"""The remainder of a group: its end state against the path's last state."""
REMAINDERS = {
    "format": "the real forward in the format against the last emulated state (roundings inside kernels, "
    "the residual add after attention)",
    "implementation": "μ against the path's last state, μ itself: float rounding only",
}
TOTALS = {
    "format": "log π − log p_FP32: the trainer's forward in the format against FP32",
    "implementation": "log μ − log π: the engine's μ against the trainer's π, both in the format",
}
HEAD_CASES = ("none", "trainer", "engine", "both")
"""Where the LM head runs in FP32 (``nbkit.precision.lm_head.FP32_LM_HEAD``)."""
METRICS = metric_registry.headline()
"""The non-additive headline metrics kept beside the path (``nbkit.mismatch.mismatch.HEADLINE``)."""
DELTA = "Δ log p/token"
"""The additive quantity: mean signed per-token difference of log p, pooled over the shared sequences' tokens."""


@dataclass
class AnatomyConfig:
    """One anatomy: which model, engine and format, how many responses."""

    model: str = field(
        default="tiny-arith",
        metadata={"help": "Model ref for ``nbkit.models.models`` (built-in name, local directory or hub id)."},
    )
    engine: str = field(
        default="auto",
        metadata={"help": "Engine whose μ is dissected: ``hf``, ``vllm`` or ``auto`` (vLLM where installed)."},
    )
    dtype: str = field(
        default="bf16",
        metadata={"help": "Format of trainer and engine (``fp32`` gives the noise floor: every step ≈ 0)."},
    )
    n_prompts: int = field(
        default=8,
        metadata={
            "help": (
                "Prompts (``nbkit.offline.analysis.load_prompts``: tiny-arith problems, else the shortest MATH-500 "
                "problems)."
            )
        },
    )
    samples_per_prompt: int = field(default=2, metadata={"help": "Responses per prompt."})
    max_tokens: int = field(default=48, metadata={"help": "Longest response."})
    prompt_source: str = field(
        default="auto", metadata={"help": "As ``nbkit.offline.analysis.GridConfig.prompt_source``."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of prompts and sampling, and of the bootstrap."})
    batch_size: int = field(default=8, metadata={"help": "Sequences per trainer forward (π)."})
    engine_batch_size: int = field(
        default=64,
        metadata={
            "help": "Sequences per engine batch (the HF engine's default chunk; the HF decoding of the ``engine`` step)."
        },
    )
    sequences: int = field(
        default=0,
        metadata={
            "help": (
                "The shared set: the first this-many responses (in the engine's order) are scored at every state of the "
                "path (0 = all). The alone passes (one KV-cache decode per sequence) are the slow ones."
            )
        },
    )
    gemm: str = field(
        default="auto",
        metadata={
            "help": "The run's half-precision GEMM policy (trainer and engines: ``nbkit.precision.vllm_gemm`` for vLLM-CPU)."
        },
    )
    n_boot: int = field(default=200, metadata={"help": "Bootstrap resamples of every CI (0 = none)."})
    layers: bool = field(
        default=True, metadata={"help": "Measure the per-layer divergence of the trainer's forward against FP32."}
    )
    engine_kwargs: dict = field(
        default_factory=dict, metadata={"help": "Extra engine arguments (e.g. ``kv_cache_gib`` for vLLM-CPU)."}
    )

    def __post_init__(self) -> None:
        check_fields(self)
        models.torch_dtype(self.dtype)
        gemm_policies.validate(self.gemm)
        if self.engine not in ("auto", "hf", "vllm"):
            raise ValueError(f"unknown engine {self.engine!r}; choose one of ('auto', 'hf', 'vllm')")
        for name in ("n_prompts", "samples_per_prompt", "max_tokens", "batch_size", "engine_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        # sequences, n_boot >= 0: check_fields (every int of a config is >= 0)

    engine_kind = analysis.GridConfig.engine_kind  # the engine actually used (``auto`` resolved)


def telescope(
    start: list, steps: dict[str, list], end: list, n_boot: int = 0, seed: int = 0, level: float = 0.95
) -> dict[str, dict]:
    """Split ``end − start`` along the path ``start → steps (in order) → end`` (each a list of per-sequence log p
    arrays over the same sequences and tokens): every step's mean signed per-token Δ against the state before it,
    ``UNATTRIBUTED`` = end against the last step, and ``total`` = end − start measured directly. Each entry is
    ``{DELTA: value, "CI": (low, high) | None, "abs": mean |Δ| per token (not additive)}``; the CIs resample sequences with the same draws for every entry."""
    states = [start, *steps.values(), end]
    lengths = np.array([len(np.asarray(s)) for s in start])
    for name, state in zip(("start", *steps, "end"), states):
        if [len(np.asarray(s)) for s in state] != lengths.tolist():
            raise ValueError(f"state {name!r} does not score the same sequences and tokens as the path's start")
    if lengths.sum() == 0:
        raise ValueError("the shared sequences have no token")
    names = [*steps, UNATTRIBUTED, "total"]
    pairs = [*zip(states[:-1], states[1:]), (start, end)]  # each step against the one before, then end − start
    diffs = [[np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64) for a, b in zip(*p)] for p in pairs]
    per_seq = np.array([[float(np.sum(d)) for d in row] for row in diffs])  # rows: entries, columns: sequences
    out = {n: {DELTA: float(v), "CI": None} for n, v in zip(names, per_seq.sum(axis=1) / lengths.sum())}
    for n, row in zip(names, diffs):  # the size of each step, for reading only (not additive)
        out[n]["abs"] = float(sum(np.abs(d).sum() for d in row) / lengths.sum())
    if n_boot:

        def replicate(idx):  # the same resamples for every entry; a resample of empty responses only has no token
            tokens = lengths[idx].sum(axis=1)
            return np.where(tokens > 0, per_seq[:, idx].sum(axis=2) / np.where(tokens > 0, tokens, 1), np.nan)

        lows, highs = stats.percentile_interval(stats.bootstrap(replicate, (len(lengths),), n_boot, seed), level)
        for n, lo, hi in zip(names, lows, highs):
            out[n]["CI"] = (float(lo), float(hi))
    return out


@dataclass
class AnatomyResult:
    """Every state's log p on the shared sequences, each group's additive split and the headline metrics."""

    config: AnatomyConfig
    engine: str
    """Engine measured (``hf`` | ``vllm``)."""
    states: dict[str, list] = field(default_factory=dict)
    """State name → per-sequence log p arrays, in path order (``fp32``, the format steps, ``trainer`` = π, the
    implementation steps; the last, ``engine``, is μ)."""
    split: dict[str, dict[str, dict]] = field(default_factory=dict)
    """Group → ``telescope`` output (step / ``unattributed`` / ``total`` → Δ with CI)."""
    metrics: dict[tuple[str, str], dict] = field(default_factory=dict)
    """(group, ``total``) → ``METRICS`` with ``<metric> CI`` = (low, high): non-additive, for comparison."""
    heads: dict[str, dict] = field(default_factory=dict)
    """LM-head case → metrics of trainer forward vs HF decoding of the engine's batch."""
    layers: list[float] = field(default_factory=list)
    """Relative hidden-state error of the trainer's forward in the format against FP32, per layer (0 = embeddings)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time per pass."""
    gemm_policy: str = ""
    """The GEMM policy the trainer's π ran under (``auto`` resolved)."""
    from_fp32: dict[str, dict] = field(default_factory=dict)
    """``trainer`` / ``engine`` → metrics of π / μ against the exact FP32 forward: which side rounds more."""

    def factors(self, group: str) -> list[str]:
        """The path's steps in ``group`` (``format`` | ``implementation``), in order."""
        return list(PATHS[group])

    def delta(self, group: str, name: str) -> float:
        """Signed mean Δ log p per token of a step, ``unattributed`` or ``total``."""
        return self.split[group][name][DELTA]

    def total(self, group: str, metric: str = DELTA) -> float:
        """The group's total: the signed Δ (``DELTA``) or a headline metric of ``METRICS``."""
        return self.delta(group, "total") if metric == DELTA else self.metrics[(group, "total")][metric]

    def unattributed(self, group: str) -> float:
        return self.delta(group, UNATTRIBUTED)

    def table(self):
        """One row per step, then the unattributed remainder and the total, per group: Δ, its CI and its share of
        the total (steps + unattributed = total)."""
        import pandas as pd

        rows = []
        for group, path in PATHS.items():
            if group not in self.split:
                continue
            total = self.delta(group, "total")
            for name in (*path, UNATTRIBUTED, "total"):
                entry = self.split[group][name]
                ci = entry["CI"]
                switch = path.get(name) or (REMAINDERS[group] if name == UNATTRIBUTED else TOTALS[group])
                rows.append(
                    {
                        "group": group,
                        "factor": name,
                        "switch": switch,
                        DELTA: entry[DELTA],
                        "CI low": ci[0] if ci else np.nan,
                        "CI high": ci[1] if ci else np.nan,
                        "share of total": entry[DELTA] / total if total else np.nan,
                        "mean |Δ| (not additive)": entry.get("abs", np.nan),
                    }
                )
        return pd.DataFrame(rows)

    def head_table(self):
        """The four LM-head cases: metrics of π (trainer forward) against the HF decoding of the engine's batch."""
        import pandas as pd

        return pd.DataFrame(
            [
                {"fp32_lm_head": c, **{k: m[k] for k in METRICS}, **{f"{k} CI": m.get(f"{k} CI") for k in METRICS}}
                for c, m in self.heads.items()
            ]
        )

    def largest(self, group: str = "implementation") -> str:
        """The step with the largest |Δ| in ``group``."""
        return max(self.factors(group), key=lambda f: abs(self.delta(group, f)))

    def to_json(self) -> dict:
        from dataclasses import asdict

        return {
            "config": asdict(self.config),
            "engine": self.engine,
            "gemm_policy": self.gemm_policy,
            "split": self.split,
            "metrics": {f"{g}/{f}": m for (g, f), m in self.metrics.items()},
            "heads": self.heads,
            "layers": self.layers,
            "seconds": self.seconds,
            "from_fp32": self.from_fp32,
        }


# ---------------------------------------------------------------------------------------------------------
# The measurement


def row_metrics(before, after, n_boot: int = 0, seed: int = 0) -> dict:
    """``METRICS`` of one pair (before plays π, after plays μ: k1 = mean(log after − log before)), with CIs."""
    out = {k: float(mismatch.HEADLINE[k](before, after)) for k in METRICS}
    if n_boot:
        for k in METRICS:
            ci = mismatch.bootstrap_ci(k, before, after, n_boot=n_boot, seed=seed)
            out[f"{k} CI"] = (ci["low"], ci["high"])
    return out


def sample(cfg: AnatomyConfig, kind: str, half, tokenizer) -> list:
    """The real engine's responses in ``cfg.dtype`` (μ in ``Rollout.logprobs``)."""
    prompts = analysis.load_prompts(analysis.source_of(cfg), cfg.n_prompts, tokenizer, cfg.seed)
    sampling = SamplingConfig(max_tokens=cfg.max_tokens, n=cfg.samples_per_prompt, seed=cfg.seed)
    batch = {"batch_size": cfg.engine_batch_size}  # the HF engine's chunk
    engine = analysis.start_engine(kind, cfg, cfg.dtype, half, tokenizer, prompts, sampling, False, **batch)
    try:
        return engine.generate(prompts, sampling)
    finally:
        engine.close()


def run(
    model: str = "tiny-arith",
    engine: str = "auto",
    dtype: str = "bf16",
    rollouts: list | None = None,
    loaded: tuple | None = None,
    **settings,
) -> AnatomyResult:
    """The anatomy of ``model`` × ``engine`` × ``dtype`` (``settings``: any other ``AnatomyConfig`` field).

    ``rollouts``: responses the engine already sampled in ``dtype`` (e.g. the doctor's), reused as they are; their
    ``meta['engine']`` must name ``engine``. None samples them here. ``loaded``: (the model in FP32, its tokenizer)
    already loaded by the caller (left as it was), None loads them."""
    cfg = AnatomyConfig(model=model, engine=engine, dtype=dtype, **settings)
    kind = cfg.engine_kind()
    if rollouts is not None:
        if not rollouts:
            raise ValueError("rollouts is empty: pass the engine's responses or None to sample them")
        seen = {r.meta.get("engine", kind) for r in rollouts}
        if seen != {kind}:
            raise ValueError(f"rollouts come from engine(s) {sorted(seen)}, not {kind!r}")
    base, tok = loaded if loaded is not None else models.load(cfg.model, "fp32")
    td = models.torch_dtype(cfg.dtype)
    half = base if cfg.dtype == "fp32" else copy.deepcopy(base).to(td)
    res = AnatomyResult(cfg, kind, gemm_policy=gemm_policies.resolve(cfg.gemm))
    clock = time.time()

    def timed(name, fn):
        start = time.time()
        out = fn()
        res.seconds[name] = time.time() - start
        return out

    if rollouts is None:
        rollouts = timed("sample", lambda: sample(cfg, kind, half, tok))
    rollouts = [r for r in rollouts if len(r.token_ids)]  # an empty answer has no token to compare
    if cfg.sequences:
        rollouts = rollouts[: cfg.sequences]
    if not rollouts:
        raise ValueError("no response with at least one token to dissect")
    mu = [np.asarray(r.logprobs, dtype=np.float64) for r in rollouts]

    def forward(net, batch_size=cfg.batch_size):
        return mismatch.teacher_forced_logprobs(net, rollouts, batch_size=batch_size, gemm=cfg.gemm, progress=False)

    # format path: FP32 → weights rounded → + each switch of ``emulate`` in turn → (unattributed) → π. One FP32 pass
    # also gives the per-layer reference; one pass in the format gives π, π with an FP32 head and its per-layer states.
    head_weight = lm_head.head_of(base).weight
    exact = timed("fp32", lambda: forward_heads(base, rollouts, {}, cfg.batch_size, cfg.gemm, states=cfg.layers))
    fp32_head = fp32_head_fn(head_weight, lm_head.head_of(half).bias)
    trainer = timed(
        "trainer",
        lambda: forward_heads(half, rollouts, {"fp32_head": fp32_head}, cfg.batch_size, cfg.gemm, states=cfg.layers),
    )
    ref, pi, pi_head = exact.logp[MODEL_HEAD], trainer.logp[MODEL_HEAD], trainer.logp["fp32_head"]
    res.states["fp32"] = ref
    rounded = rounded_weights(base, td)
    switches = []
    for step in FORMAT_PATH:
        if step != "weights":
            switches.append(step)
        with emulate(rounded, td, switches):
            res.states[step] = timed(step, lambda: forward(rounded))
    res.states["trainer"] = pi

    # implementation path: π → alone → KV-cache decode alone → decode in the engine's batch → μ
    res.states["trainer_batch"] = timed("trainer_alone", lambda: forward(half, batch_size=1))
    res.states["kv_cache"] = timed(
        "decode_alone", lambda: forced.decode_logprobs(half, tok, rollouts, batch_size=1, gemm=cfg.gemm)
    )
    both = timed(
        "decode_batch",
        lambda: forced.decode_heads(half, tok, rollouts, {"fp32_head": fp32_head}, cfg.engine_batch_size, cfg.gemm),
    )
    decoded, decoded_head = both[forced.MODEL_HEAD], both["fp32_head"]
    res.states["engine_batch"] = decoded
    res.states["engine"] = mu

    res.split["format"] = telescope(ref, {s: res.states[s] for s in FORMAT_PATH}, pi, cfg.n_boot, cfg.seed)
    res.split["implementation"] = telescope(pi, {s: res.states[s] for s in IMPL_PATH}, mu, cfg.n_boot, cfg.seed)
    res.metrics[("format", "total")] = row_metrics(ref, pi, cfg.n_boot, cfg.seed)
    res.metrics[("implementation", "total")] = row_metrics(pi, mu, cfg.n_boot, cfg.seed)
    res.from_fp32 = {"trainer": res.metrics[("format", "total")], "engine": row_metrics(ref, mu, cfg.n_boot, cfg.seed)}
    # LM head in FP32 on neither side / the trainer / the engine / both (engine side: HF decoding of its batch; the
    # FP32-head log-probs came from the trainer pass and the batch decode above, on the same hidden states)
    cases = {
        "none": (pi, decoded),
        "trainer": (pi_head, decoded),
        "engine": (pi, decoded_head),
        "both": (pi_head, decoded_head),
    }
    res.heads = {c: row_metrics(*pair, cfg.n_boot, cfg.seed) for c, pair in cases.items()}
    if cfg.layers:  # the per-layer states of the FP32 and the trainer pass
        res.layers = state_divergence(exact.states, trainer.states)
    res.seconds["total"] = time.time() - clock
    return res
