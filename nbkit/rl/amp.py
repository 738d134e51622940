"""Make the requested training precision real, and prove it.

FP16 training = FP16 autocast over FP32 master weights with dynamic loss scaling (``torch.amp.GradScaler``,
unscaled before gradient clipping, steps skipped on overflow): what accelerate does on GPUs. On CPU accelerate
1.15 silently drops ``fp16`` (no autocast, no scaler) so TRL would train in FP32 without a word;
``enable_cpu_fp16`` turns the same machinery on there. BF16 = BF16 autocast (accelerate supports it on CPU).

``PrecisionAudit`` watches every ``nn.Linear`` of the training model and records the dtype its matmul really
produced, and which GEMM kernel policy ran (``nbkit.precision.gemm``), so a run can fail when either differs from the
request.
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from nbkit.models import routing
from nbkit.models.models import dtype_name
from nbkit.precision import gemm
from nbkit.records import schema
from nbkit.rl.scaling import uses_deepspeed
from nbkit.runtime.errors import PrecisionError  # (re-exported: rl.amp.PrecisionError is the same class)


def enable_cpu_fp16(accelerator, growth_interval: int = 400, init_scale: float = 2.0**16) -> bool:
    """Give ``accelerator`` the FP16 autocast + GradScaler it refuses to set up on CPU.

    Must run before ``accelerator.prepare`` (the optimiser wrapper takes the scaler then). Returns True when it
    changed something; on devices where accelerate already does FP16 it leaves everything as it is.
    """
    if accelerator.state.mixed_precision != "fp16" or accelerator.scaler is not None or uses_deepspeed(accelerator):
        return False  # not FP16, or accelerate already scales, or DeepSpeed scales with its own fp16 block
    accelerator.native_amp = True
    accelerator.scaler = torch.amp.GradScaler(
        accelerator.device.type, init_scale=init_scale, growth_interval=growth_interval
    )
    return True


def scaler_kwargs(init_scale: float, growth_interval: int):
    """accelerate's ``GradScalerKwargs`` for the run's FP16 loss scaling: with it accelerate builds its own scaler
    (torch's ``GradScaler`` for one GPU / DDP / FSDP2, ``ShardedGradScaler`` for FSDP1) with the paper's settings
    instead of torch's defaults (growth interval 2,000)."""
    from accelerate.utils import GradScalerKwargs

    return GradScalerKwargs(init_scale=float(init_scale), growth_interval=int(growth_interval))


def deepspeed_loss_scaling(ds_config: dict, init_scale: float, growth_interval: int) -> dict:
    """Write the run's loss scaling into a DeepSpeed config's ``fp16`` block (in place; returned): dynamic scaling
    (``loss_scale: 0``), ``initial_scale_power = log2(init_scale)`` and ``loss_scale_window = growth_interval``.
    DeepSpeed's scale starts at a power of two: any other ``init_scale`` is refused. A config without FP16 is
    left as it is."""
    block = ds_config.get("fp16") or {}
    if not block.get("enabled"):
        return ds_config
    power = math.log2(init_scale)
    if power != int(power):
        raise ValueError(
            f"DeepSpeed starts its loss scale at a power of two; loss_scale_init={init_scale!r} is "
            f"none (choose e.g. {2.0 ** round(power)!r})"
        )
    block.update(loss_scale=0, initial_scale_power=int(power), loss_scale_window=int(growth_interval))
    return ds_config


class PrecisionAudit:
    """Counts the output dtype of every ``nn.Linear`` forward of a model (i.e. the dtype its matmul ran in)."""

    def __init__(self, model: torch.nn.Module):
        self.counts: Counter[str] = Counter()
        self._handles = [m.register_forward_hook(self._hook) for m in model.modules() if isinstance(m, torch.nn.Linear)]
        if not self._handles:
            raise ValueError("the model has no nn.Linear layer to audit")
        self._handles += self._moe_hooks(model)

    def _moe_hooks(self, model) -> list:
        """Mixture-of-experts layers hold their matrices as parameters, not ``nn.Linear``: count the router's
        logits dtype and the dtype of every matmul inside the experts (``moe_router`` / ``moe_experts`` keys)."""
        handles, seen = [], []
        for block in routing.moe_blocks(model):
            handles.append(
                block.gate.register_forward_hook(
                    lambda m, i, out: self.counts.update({"moe_router:" + _short(out[0].dtype): 1})
                )
            )
            mode = _MatmulDtypes(seen)
            handles.append(block.experts.register_forward_pre_hook(lambda m, i, mode=mode: (mode.__enter__(), None)[1]))

            def done(m, i, out, mode=mode):
                mode.__exit__(None, None, None)
                self.counts.update("moe_experts:" + d for d in seen)
                seen.clear()

            handles.append(block.experts.register_forward_hook(done))
        return handles

    def _hook(self, module, inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            self.counts[_short(output.dtype)] += 1

    def take(self) -> Counter:
        """The counts since the last call (then reset)."""
        out, self.counts = self.counts, Counter()
        return out

    def check(
        self,
        requested: str,
        counts: Counter,
        scaler=None,
        gemm_policy: str = "native",
        gemm_counts: Counter | None = None,
    ) -> dict:
        """Audit record of one step; raises ``PrecisionError`` when the matmuls, the GEMM policy or the scaler
        differ from the request (FP16 needs every linear in fp16 and a live scaler; a half-precision run under
        the ``fp32-accumulate`` policy needs its GEMMs to have gone through it, in the requested format)."""
        ran = dict(counts)
        routed = dict(gemm_counts or {})
        record = {
            schema.AUDIT_MATMUL_DTYPES: ran,
            schema.AUDIT_REQUESTED: requested,
            schema.AUDIT_SCALER_ENABLED: bool(scaler is not None and scaler.is_enabled()),
            schema.AUDIT_GEMM: gemm_policy,
            schema.AUDIT_GEMM_ROUTED: routed,
        }
        if gemm_policy in gemm.ROUTED and requested in ("fp16", "bf16"):
            if not routed.get(requested):
                raise PrecisionError(
                    f"requested the {gemm_policy} GEMM policy for {requested} training but no "
                    f"{requested} GEMM ran through it this step (routed: {routed})"
                )
            if set(routed) - {requested, f"sdpa/{requested}"}:  # GEMMs and attentions, all in the request
                raise PrecisionError(f"requested {requested} training but GEMMs ran in {routed}")
        if not ran:
            raise PrecisionError("no linear layer ran in the training model during this step")
        wrong = {k: v for k, v in ran.items() if k.split(":")[-1] != requested}
        if wrong:
            raise PrecisionError(f"requested {requested} training but linear layers ran in {wrong} (all counts {ran})")
        if requested == "fp16" and not record[schema.AUDIT_SCALER_ENABLED]:
            raise PrecisionError("requested fp16 training but no live GradScaler is attached")
        return record

    def remove(self) -> None:
        """Detach the hooks."""
        for h in self._handles:
            h.remove()


class _MatmulDtypes(torch.overrides.TorchFunctionMode):
    """Records the output dtype of every matmul-like call (``F.linear``, ``matmul``, grouped mm) while active."""

    NAMES = ("linear", "matmul", "mm", "bmm", "grouped_mm", "_grouped_mm")

    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in self.NAMES and isinstance(out, torch.Tensor):
            self.seen.append(_short(out.dtype))
        return out


def _short(dtype: torch.dtype) -> str:
    """``bf16`` for the compared precisions, torch's own name for anything else (e.g. ``float64``)."""
    try:
        return dtype_name(dtype)
    except ValueError:
        return str(dtype).removeprefix("torch.")
