"""Top-k expert choices of mixture-of-experts models: capture them, compare them, replay them.

A *routing flip* is a token whose set of top-k experts in some layer differs between two forwards (engine vs
trainer, BF16 vs FP32): the token then runs through different expert weights, so its probabilities differ by far
more than rounding. *Router replay* makes the trainer's forward use the rollout's choices.

Works on any transformers MoE whose sparse block has a ``gate`` (returning ``(logits, scores, indices)``, as
Qwen3-MoE's ``Qwen3MoeTopKRouter`` does: softmax in fp32 over ``F.linear(h, weight)``, ``topk``, optional
renormalisation) and ``experts``; forward hooks only, nothing is monkey-patched.

Choices are tensors ``(batch, seq, layers, k)`` of expert ids, sorted along ``k`` (a flip is a different *set*);
``-1`` marks positions a capture did not see (e.g. the last generated token, never fed back to the model).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch


def moe_blocks(model) -> list:
    """The sparse MoE blocks (modules with a ``gate`` and ``experts``) in layer order; empty for a dense model."""
    return [m for m in model.modules() if hasattr(m, "gate") and hasattr(m, "experts")]


def is_moe(model) -> bool:
    """True when ``model`` routes tokens to experts (has at least one sparse MoE block)."""
    return bool(moe_blocks(model))


def top_k(model) -> int:
    """Experts per token of ``model`` (``ValueError`` for a dense model)."""
    blocks = moe_blocks(model)
    if not blocks:
        raise ValueError(f"{type(model).__name__} has no mixture-of-experts layer (no routing to capture)")
    return int(blocks[0].gate.top_k)


@dataclass
class Recorder:
    """Top-k choices seen by each MoE layer, one entry per forward call (prefill, then each decoding step)."""

    layers: int
    calls: list[list[torch.Tensor]] = field(default_factory=list)
    _shape: list = field(default_factory=list)

    def choices(self, along: str = "seq") -> torch.Tensor:
        """``(batch, seq, layers, k)`` long tensor: the calls concatenated along the sequence (``seq``: KV-cache
        decoding, one call per new token) or along the batch (``batch``: a batch forwarded in chunks)."""
        if not self.calls or not self.calls[0]:
            raise RuntimeError("no MoE forward ran inside the capture")
        if along not in ("seq", "batch"):
            raise ValueError(f"along must be 'seq' or 'batch', got {along!r}")
        per_layer = [torch.cat(calls, dim=1 if along == "seq" else 0) for calls in self.calls]
        return torch.stack(per_layer, dim=2)


@contextlib.contextmanager
def capture(model):
    """Record every MoE layer's top-k choice during the forwards inside the ``with`` block."""
    blocks = moe_blocks(model)
    if not blocks:
        raise ValueError(f"{type(model).__name__} has no mixture-of-experts layer (no routing to capture)")
    rec = Recorder(layers=len(blocks), calls=[[] for _ in blocks])
    handles = []
    for i, block in enumerate(blocks):

        def pre(module, args, i=i):
            rec._shape = list(args[0].shape[:-1])

        def post(module, args, out, i=i):
            idx = out[2].detach()
            rec.calls[i].append(idx.reshape(*rec._shape, idx.shape[-1]).sort(dim=-1).values.to("cpu"))

        handles += [block.register_forward_pre_hook(pre), block.gate.register_forward_hook(post)]
    try:
        yield rec
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def replay(model, choices: torch.Tensor | None):
    """Inside the block, MoE layers use ``choices`` (``(batch, seq, layers, k)``) instead of their own top-k.

    Forwards inside the block consume ``choices`` row by row (a batch forwarded in chunks, in order, is fine);
    a forward whose sequence length or rows do not fit raises ``ValueError``.

    The replayed experts' weights are the model's own softmax probabilities at those experts (renormalised
    when the router does), so gradients still reach the router. Positions marked ``-1`` keep the model's own
    choice. ``choices=None`` or a dense model: nothing changes.
    """
    blocks = moe_blocks(model)
    if choices is None or not blocks:
        yield
        return
    if choices.dim() != 4 or choices.shape[2] != len(blocks):
        raise ValueError(f"replay choices must be (batch, seq, {len(blocks)} layers, k); got {tuple(choices.shape)}")
    state = {"row": 0, "rows": 0}
    handles = []
    for i, block in enumerate(blocks):

        def pre(module, args, i=i):
            b, s = tuple(args[0].shape[:-1])
            if i == 0:  # the first MoE layer of a forward moves on to the next rows
                state["row"] += state["rows"]
                state["rows"] = b
            lo = state["row"]
            if s != choices.shape[1] or lo + b > choices.shape[0]:
                raise ValueError(
                    f"replay choices cover {tuple(choices.shape[:2])} (batch, seq) but a forward "
                    f"asks for rows {lo}..{lo + b} of length {s}"
                )

        def post(module, args, out, i=i):
            logits, scores, own = out
            lo, b = state["row"], state["rows"]
            want = choices[lo : lo + b, :, i].reshape(-1, choices.shape[-1]).to(own.device)
            keep_own = (want < 0).any(dim=-1, keepdim=True)
            idx = torch.where(keep_own, own, want)
            probs = torch.softmax(logits, dim=-1, dtype=torch.float)
            picked = probs.gather(-1, idx)
            if getattr(module, "norm_topk_prob", False):
                picked = picked / picked.sum(dim=-1, keepdim=True)
            return logits, picked.to(scores.dtype), idx.to(own.dtype)

        handles += [block.register_forward_pre_hook(pre), block.gate.register_forward_hook(post)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def flips(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(batch, seq, layers)`` bool: the top-k *sets* differ (positions where either side is ``-1`` are False)."""
    if a.shape != b.shape:
        raise ValueError(f"routing shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    seen = (a >= 0).all(-1) & (b >= 0).all(-1)
    return (a.sort(-1).values != b.sort(-1).values).any(-1) & seen


def flip_rates(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """Per layer, the share of ``mask``-ed tokens (``(batch, seq)`` bool) whose top-k set differs."""
    f = flips(a, b)
    m = mask.bool() & (a >= 0).all(-1).all(-1) & (b >= 0).all(-1).all(-1)
    n = max(int(m.sum()), 1)
    return [float((f[..., layer] & m).sum()) / n for layer in range(f.shape[-1])]


def autocast_experts(model) -> bool:
    """Make a MoE model's experts run under autocast: transformers' default ``grouped_mm`` experts cast their
    input to the *weights'* dtype (grouped_mm is not autocast-enabled), so under BF16/FP16 autocast over FP32
    master weights the experts would silently compute in FP32. The ``eager`` implementation calls ``F.linear``
    per expert, which autocast casts. Returns True when it changed the implementation (dense models: False)."""
    if not is_moe(model) or not hasattr(model, "set_experts_implementation"):
        return False
    if getattr(model.config, "_experts_implementation", "eager") == "eager":
        return False
    model.set_experts_implementation("eager")
    return True


def pad_to(choices: torch.Tensor, length: int) -> torch.Tensor:
    """``choices`` (``(seq, layers, k)``) extended with ``-1`` rows (positions never routed) to ``length``."""
    if choices.shape[0] >= length:
        return choices[:length]
    fill = torch.full((length - choices.shape[0], *choices.shape[1:]), -1, dtype=choices.dtype)
    return torch.cat([choices, fill])


def batch_layout(
    per_seq: list[torch.Tensor], prompt_lens: list[int], prompt_width: int, completion_width: int
) -> torch.Tensor:
    """Per-sequence routings (prompt + response positions, as ``Rollout.routing``) laid out like a trainer batch:
    prompts left-padded to ``prompt_width``, responses right-padded to ``completion_width``; padding is -1."""
    first = per_seq[0]
    out = torch.full((len(per_seq), prompt_width + completion_width, *first.shape[1:]), -1, dtype=torch.long)
    for row, (r, p) in enumerate(zip(per_seq, prompt_lens)):
        resp = min(r.shape[0] - p, completion_width)
        out[row, prompt_width - p : prompt_width + resp] = r[: p + resp]
    return out
