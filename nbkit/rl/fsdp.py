"""FSDP2's mixed-precision policy for the paper's experiment: half matmuls, π and gradient reduction in FP32.

accelerate (1.15) builds FSDP2's ``MixedPrecisionPolicy`` from ``mixed_precision`` alone:
``param_dtype = reduce_dtype = output_dtype = <half>``. Two of those break the comparison:

- ``output_dtype``: FSDP2 casts every floating tensor of the root module's output to it. TRL 1.16 computes π with its
  fused LM head (``model(..., fused_lm_head=True)`` returns ``log_probs`` and ``entropy``, FP32 from its chunked
  kernel), so π itself would be rounded to BF16/FP16 after the kernel (a BF16 log p ≈ −3 is off by up to 0.016):
  a mismatch the trainer made, not the rollout. ``output_dtype=None`` leaves the outputs as computed.
- ``reduce_dtype``: gradients would be reduce-scattered in the half format, so an "FSDP2 BF16" run would sum its
  gradients in BF16 where DDP (autocast over FP32 parameters) sums FP32 gradients: a confound of the FP16 vs
  BF16 comparison. ``reduce_dtype=float32`` reduces as DDP does.

``param_dtype`` stays the half format: the matmuls run in the precision under study.

    fp32_reduce_and_outputs(accelerator)      # after the Accelerator is built, before prepare(); True if changed
    policy("bf16")                            # the MixedPrecisionPolicy the trainer installs
"""

from __future__ import annotations

import torch

HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


def policy(precision: str):
    """FSDP2's ``MixedPrecisionPolicy`` for a ``precision`` (fp16 | bf16) run: half parameters for compute, gradients
    reduced in FP32, outputs never cast (π stays as TRL's kernel computed it)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision not in HALF:
        raise ValueError(f"FSDP2 mixed precision is for {tuple(HALF)}, not {precision!r}")
    return MixedPrecisionPolicy(
        param_dtype=HALF[precision], reduce_dtype=torch.float32, output_dtype=None, cast_forward_inputs=True
    )


def fp32_reduce_and_outputs(accelerator) -> bool:
    """Replace accelerate's FSDP2 policy on ``accelerator`` with ``policy``; must run before ``prepare`` (the policy
    is read when the model is wrapped). Returns False (nothing to do) without FSDP2 or without half precision."""
    plugin = getattr(accelerator.state, "fsdp_plugin", None) if _uses_fsdp(accelerator) else None
    return set_plugin_policy(plugin, accelerator.state.mixed_precision)


def set_plugin_policy(plugin, precision: str) -> bool:
    """``policy(precision)`` into an accelerate ``FullyShardedDataParallelPlugin`` of FSDP version 2 (what
    ``fp32_reduce_and_outputs`` does once it has the accelerator's plugin); False when there is nothing to change."""
    if plugin is None or getattr(plugin, "fsdp_version", 1) != 2 or precision not in HALF:
        return False
    plugin.mixed_precision_policy = policy(precision)
    return True


def _uses_fsdp(accelerator) -> bool:
    from accelerate.utils import DistributedType

    return accelerator.state.distributed_type == DistributedType.FSDP
