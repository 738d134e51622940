"""An FP32 LM head: the vocabulary projection computed in float32 whatever the rest of the model runs in.

Production RL stacks put the LM head (the last GEMM, hidden → vocabulary logits) in FP32 on one side or both
(TRL's ``cast_lm_head_to_fp32``, prime-rl, NeMo-RL): the logits of a half model carry the head's rounding, and a
one-sided fix can *widen* the π–μ gap (the other side keeps its rounded head). ``FP32_LM_HEAD`` names the four
cases (``RLConfig.fp32_lm_head``): the head in FP32 on neither side, the trainer only, the engine only, or both.

``install(model, weight=None)`` re-routes the head's forward (the module, its parameters and their names stay as
they are, so weight sync and state dicts are unchanged): hidden states upcast to float32, the head's weight in
float32, autocast off, float32 logits. The trainer (autocast over FP32 master weights) needs no stored copy: its
head weight already is FP32 and gradients flow. An engine holding half weights passes the FP32 ``weight`` it
should use (the checkpoint's, or the trainer's at each sync); ``set_weight`` refreshes it. ``dtype_of`` reads the
dtype the head really produced in its last forward: the audit's evidence.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from nbkit.precision.torch_dtypes import dtype_name

FP32_LM_HEAD = ("none", "trainer", "engine", "both")
"""Where the LM head runs in FP32: nowhere, on the trainer (π) only, on the rollout engine (μ) only, on both."""


def validate(where: str) -> str:
    """``where`` if it is one of ``FP32_LM_HEAD``, else a ValueError naming the choices."""
    if where not in FP32_LM_HEAD:
        raise ValueError(f"unknown fp32_lm_head {where!r}; choose one of {FP32_LM_HEAD}")
    return where


def sides(where: str) -> tuple[bool, bool]:
    """(trainer has an FP32 head, engine has an FP32 head) for one of ``FP32_LM_HEAD``."""
    validate(where)
    return where in ("trainer", "both"), where in ("engine", "both")


def head_of(model: torch.nn.Module) -> torch.nn.Module:
    """The model's output projection (``get_output_embeddings``), refused when it is not a plain linear layer."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear):
        raise ValueError(
            f"{type(model).__name__} has no nn.Linear output embedding (got {type(head).__name__}): "
            f"an FP32 LM head cannot be installed"
        )
    return head


def _fp32_forward(self, x: torch.Tensor) -> torch.Tensor:
    weight = self._nbkit_fp32_weight if self._nbkit_fp32_weight is not None else self.weight
    bias = None if self.bias is None else self.bias.float()
    with torch.autocast(device_type=x.device.type, enabled=False):
        out = F.linear(x.float(), weight.float(), bias)
    self._nbkit_last_dtype = out.dtype
    return out


def _plain_hook(module, inputs, output) -> None:
    if isinstance(output, torch.Tensor):
        module._nbkit_last_dtype = output.dtype


def install(model: torch.nn.Module, weight: torch.Tensor | None = None) -> torch.nn.Module:
    """Make ``model``'s LM head run in FP32 (in place; returns the model). ``weight``: the FP32 weight to use
    (a detached copy is kept; an engine with half weights needs it), None = the head's own weight upcast."""
    head = head_of(model)
    if weight is not None and tuple(weight.shape) != tuple(head.weight.shape):
        raise ValueError(f"FP32 head weight of shape {tuple(weight.shape)} for a head of {tuple(head.weight.shape)}")
    head._nbkit_fp32_weight = None if weight is None else weight.detach().to(head.weight.device, torch.float32).clone()
    head.forward = types.MethodType(_fp32_forward, head)
    return model


def set_weight(model: torch.nn.Module, weight: torch.Tensor) -> None:
    """Refresh the stored FP32 weight of an installed head (an engine's, after a weight sync)."""
    head = head_of(model)
    if getattr(head, "_nbkit_fp32_weight", None) is None:
        raise ValueError("this model's LM head has no stored FP32 weight (install(model, weight) first)")
    head._nbkit_fp32_weight.copy_(weight.detach().to(torch.float32))


def installed(model: torch.nn.Module) -> bool:
    """True when ``install`` re-routed this model's head."""
    return "forward" in vars(head_of(model))


def remove(model: torch.nn.Module) -> None:
    """Undo ``install`` (the head runs in the model's own precision again)."""
    head = head_of(model)
    vars(head).pop("forward", None)
    head._nbkit_fp32_weight = None


def watch(model: torch.nn.Module):
    """Record the dtype of the head's output on every forward (for ``dtype_of``); returns the hook handle."""
    return head_of(model).register_forward_hook(_plain_hook)


def dtype_of(model: torch.nn.Module) -> str | None:
    """Short dtype name (``fp32`` | ``bf16`` | ``fp16``) of the logits the head produced in its last forward
    (``install``ed heads and ``watch``ed ones record it), or None before any forward."""
    last = getattr(head_of(model), "_nbkit_last_dtype", None)
    return None if last is None else dtype_name(last)
