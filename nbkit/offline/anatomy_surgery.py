"""The surgery of ``nbkit.offline.anatomy``: the switches that move an FP32 model, one rounding at a time, toward
its forward in a half format, and the shared teacher-forced pass that scores a set of responses under several LM
heads at once. Measurement and figures live elsewhere (``nbkit.offline.anatomy``, ``nbkit.plots.anatomy``).

``emulate(model, dtype, switches)`` applies any subset of ``SWITCHES`` to an FP32 model (whose weights
``rounded_weights`` has already rounded, for the path's first step); every value stays FP32, only rounded.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from nbkit.mismatch import sampling_filter
from nbkit.precision import gemm as gemm_policies
from nbkit.precision import lm_head

SWITCHES = ("linear", "attention", "norms_activations", "residual", "lm_head")
"""The roundings ``emulate`` can add to a model (the path's ``weights`` step is ``rounded_weights``)."""


def right_padded(rollouts) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt + response token ids of ``rollouts``, right-padded with 0 (``torch``'s ``pad_sequence``), and their
    attention mask (1 on every token)."""
    seqs = [torch.tensor([*r.prompt_ids, *r.token_ids], dtype=torch.long) for r in rollouts]
    return pad_sequence(seqs, batch_first=True), pad_sequence([torch.ones_like(s) for s in seqs], batch_first=True)


def _round(x, dtype: torch.dtype):
    return x.to(dtype).to(x.dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def rounded_weights(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A copy of the FP32 ``model`` whose parameters hold values rounded to ``dtype`` (stored in FP32)."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for p in out.parameters():
            p.copy_(_round(p, dtype))
    return out


def half_head_fn(head: torch.nn.Linear, dtype: torch.dtype):
    """The LM head in ``dtype`` as a function of the head's input: rounded operands, exact products and FP32
    accumulation, logits rounded once (the GPU GEMM contract, ``nbkit.precision.gemm``)."""

    def forward(x):
        bias = None if head.bias is None else _round(head.bias, dtype)
        return _round(F.linear(_round(x, dtype), _round(head.weight, dtype), bias), dtype)

    return forward


def fp32_head_fn(weight: torch.Tensor, bias: torch.Tensor | None = None):
    """``nbkit.precision.lm_head.install``'s FP32 head (``weight``, ``bias`` upcast, autocast off) as a function of its
    input."""

    def forward(x):
        with torch.autocast(device_type=x.device.type, enabled=False):
            return F.linear(x.float(), weight.float(), None if bias is None else bias.float())

    return forward


@contextlib.contextmanager
def half_head(model: torch.nn.Module, dtype: torch.dtype):
    """While active, only the LM head computes in ``dtype``: operands rounded, exact products and FP32
    accumulation, logits rounded once (the GPU GEMM contract, ``nbkit.precision.gemm``)."""
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
def layer_divergence(
    reference: torch.nn.Module, test: torch.nn.Module, rollouts, batch_size: int = 8, gemm: str = "auto"
) -> list[float]:
    """‖h_test − h_ref‖ / ‖h_ref‖ per hidden-state layer (0 = embeddings), pooled over response positions."""
    num = den = None
    for start in range(0, len(rollouts), batch_size):
        chunk = rollouts[start : start + batch_size]
        ids, attn = right_padded(chunk)
        resp = attn.bool()
        for row, r in enumerate(chunk):
            resp[row, : len(r.prompt_ids)] = False
        hs = []
        for net in (reference, test):
            with gemm_policies.policy(gemm, net.device):
                out = net(input_ids=ids.to(net.device), attention_mask=attn.to(net.device), output_hidden_states=True)
            hs.append([h.float()[resp.to(h.device)] for h in out.hidden_states])
        n = [float(((t - r) ** 2).sum()) for r, t in zip(*hs)]
        d = [float((r**2).sum()) for r in hs[0]]
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


@torch.no_grad()  # not inference_mode: the GEMM policy's dispatch mode must see the tensors (nbkit.precision.gemm)
def forward_heads(
    net: torch.nn.Module,
    rollouts,
    heads: dict | None = None,
    batch_size: int = 8,
    gemm: str = "auto",
    states: bool = False,
) -> Scored:
    """``mismatch.teacher_forced_logprobs(net, rollouts)`` (the same batches and positions: equal results, the tests
    check it) and, from the same forwards, log p under other LM ``heads`` (name → fn(the head's input) → logits)
    and with ``states`` every layer's hidden states at the response positions: one pass instead of one per head
    plus two for ``layer_divergence``."""
    import inspect

    heads = heads or {}
    seen = {}
    handle = lm_head.head_of(net).register_forward_pre_hook(lambda module, args: seen.update(x=args[0]))
    device = next(net.parameters()).device
    trims = "logits_to_keep" in inspect.signature(net.forward).parameters
    order = sorted(range(len(rollouts)), key=lambda i: len(rollouts[i].prompt_ids) + len(rollouts[i].token_ids))
    out = Scored(
        {name: [np.zeros(0)] * len(rollouts) for name in (MODEL_HEAD, *heads)},
        [torch.zeros(0)] * len(rollouts) if states else None,
    )
    was_training = net.training
    net.eval()
    try:
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            ids, mask = right_padded([rollouts[i] for i in batch])
            width = ids.shape[1]
            first = min(len(rollouts[i].prompt_ids) for i in batch) - 1 if trims else 0
            keep = {"logits_to_keep": width - first} if trims else {}
            with gemm_policies.policy(gemm, device):  # logits[:, k] is position first + k
                res = net(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=states, **keep)
                logits = {MODEL_HEAD: res.logits, **{name: fn(seen["x"]) for name, fn in heads.items()}}
            for row, i in enumerate(batch):
                p, t = len(rollouts[i].prompt_ids), len(rollouts[i].token_ids)
                tok = ids[row, p : p + t].to(device)
                for name, lg in logits.items():
                    lp = sampling_filter.token_logprobs(lg[row, p - 1 - first : p + t - 1 - first], tok)
                    out.logp[name][i] = lp.double().cpu().numpy()
                if states:
                    out.states[i] = torch.stack([h[row, p : p + t].float().cpu() for h in res.hidden_states])
    finally:
        handle.remove()
        net.train(was_training)
    return out


def state_divergence(reference: list[torch.Tensor], test: list[torch.Tensor]) -> list[float]:
    """``layer_divergence`` from two passes' kept states (``forward_heads(states=True)``): ‖h_test − h_ref‖ /
    ‖h_ref‖ per layer, pooled over every response position."""
    num = sum(((t - r) ** 2).sum(dim=(1, 2)).double() for r, t in zip(reference, test))
    den = sum((r**2).sum(dim=(1, 2)).double() for r in reference)
    return [float(np.sqrt(a / b)) if b > 0 else float("nan") for a, b in zip(num.tolist(), den.tolist())]


def _round_output(dtype):
    def hook(module, inputs, out):
        return tuple(_round(t, dtype) for t in out) if isinstance(out, tuple) else _round(out, dtype)

    return hook


def _round_inputs(dtype):
    return lambda module, args: tuple(_round(a, dtype) for a in args)


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks (whose output is the residual stream): the first ``ModuleList`` of the model."""
    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList):
            return list(m)
    raise ValueError(f"{type(model).__name__} has no ModuleList of decoder layers")


def half_attention_fn(dtype: torch.dtype):
    """SDPA attention run in ``dtype``: q, k (after rotary), v and a float mask cast to it, the kernel in it, its
    output returned in the caller's dtype (FP32, rounded)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def forward(module, query, key, value, attention_mask, **kwargs):
        mask = attention_mask
        if mask is not None and mask.is_floating_point():
            mask = mask.to(dtype)
        out, weights = sdpa(module, query.to(dtype), key.to(dtype), value.to(dtype), mask, **kwargs)
        return out.to(query.dtype), weights

    return forward


@contextlib.contextmanager
def emulate(model: torch.nn.Module, dtype: torch.dtype, switches):
    """While active, the FP32 ``model`` rounds to ``dtype`` what ``switches`` (a subset of ``SWITCHES``) name:

    - ``linear``: every linear layer but the LM head rounds its input and its output (the GEMM contract: rounded
      operands, exact products, FP32 accumulation, one rounding); the SiLU·up product is the down projection's input;
    - ``attention``: attention runs in ``dtype`` (``half_attention_fn``: q and k after rotary, v, the kernel);
    - ``norms_activations``: the output of every other leaf module (embeddings, RMSNorms, the activation, the rotary
      cos/sin);
    - ``residual``: every decoder layer's output (the residual stream after each block's MLP add);
    - ``lm_head``: the LM head's input and logits.

    Not reachable by hooks, hence left to the anatomy's "unattributed" remainder: roundings inside kernels (RMSNorm's
    own arithmetic, the rotary products), the residual add after attention inside each block."""
    unknown = set(switches) - set(SWITCHES)
    if unknown:
        raise ValueError(f"unknown switch(es) {sorted(unknown)}; choose from {SWITCHES}")
    head = lm_head.head_of(model)
    handles = []
    before = model.config._attn_implementation
    try:
        for m in model.modules():
            leaf = not list(m.children())
            if m is head:
                if "lm_head" in switches:
                    handles += [
                        m.register_forward_pre_hook(_round_inputs(dtype)),
                        m.register_forward_hook(_round_output(dtype)),
                    ]
            elif isinstance(m, torch.nn.Linear):
                if "linear" in switches:
                    handles += [
                        m.register_forward_pre_hook(_round_inputs(dtype)),
                        m.register_forward_hook(_round_output(dtype)),
                    ]
            elif leaf and "norms_activations" in switches:
                handles.append(m.register_forward_hook(_round_output(dtype)))
        if "residual" in switches:
            handles += [m.register_forward_hook(_round_output(dtype)) for m in _decoder_layers(model)]
        if "attention" in switches:
            from transformers import AttentionInterface

            name = f"nbkit_half_{str(dtype).removeprefix('torch.')}"
            AttentionInterface.register(name, half_attention_fn(dtype))
            model.set_attn_implementation(name)
        yield model
    finally:
        for h in handles:
            h.remove()
        if model.config._attn_implementation != before:
            model.set_attn_implementation(before)
