"""The FP16 loss scaler a run really uses, whichever library owns it.

torch's ``GradScaler`` (accelerate's, under DDP / FSDP / one GPU, or the workbook's on CPU: ``amp.enable_cpu_fp16``)
or DeepSpeed's own dynamic loss scaler (its ``fp16`` block; accelerate then leaves ``accelerator.scaler`` empty).
``loss_scaler`` returns either behind the two calls the precision audit and the step log make:
``is_enabled()`` and ``get_scale()``.
"""

from __future__ import annotations


class DeepSpeedLossScale:
    """DeepSpeed's loss scaler seen through torch's ``GradScaler`` interface (read only)."""

    def __init__(self, engine):
        self.engine = engine

    def is_enabled(self) -> bool:
        """True when the engine trains in FP16 with dynamic loss scaling (``"loss_scale": 0``)."""
        return bool(self.engine.fp16_enabled() and self.engine.dynamic_loss_scale())

    def get_scale(self) -> float:
        """The current loss scale (the FP16 optimiser's ``loss_scale``, ZeRO or not)."""
        return float(self.engine.optimizer.loss_scale)


def loss_scaler(accelerator):
    """torch's GradScaler, DeepSpeed's loss scaler (as ``DeepSpeedLossScale``), or None without FP16 scaling."""
    if accelerator.scaler is not None:
        return accelerator.scaler
    wrapped = getattr(accelerator, "deepspeed_engine_wrapped", None)
    if wrapped is not None and wrapped.engine.fp16_enabled():
        return DeepSpeedLossScale(wrapped.engine)
    return None


def uses_deepspeed(accelerator) -> bool:
    """True when DeepSpeed owns the optimiser step (and its own FP16 loss scaling)."""
    return str(getattr(accelerator, "distributed_type", "")).endswith("DEEPSPEED")


def step_was_skipped(accelerator, scale_before: float | None, scale_now: float | None) -> bool:
    """Whether the optimiser step that just ended was skipped for inf/NaN gradients.

    DeepSpeed says so itself (``engine.was_step_applied()``): with ``hysteresis`` > 1 its first overflow skips the
    step without lowering the scale, so a scale comparison would miss it. torch's GradScaler lowers its scale
    exactly when it skipped (accelerate's ``optimizer_step_was_skipped`` misses it: AdamW's own step still runs)."""
    wrapped = getattr(accelerator, "deepspeed_engine_wrapped", None)
    if wrapped is not None and wrapped.engine.fp16_enabled():
        return not wrapped.engine.was_step_applied()
    return scale_before is not None and scale_now is not None and scale_now < scale_before
