"""The FP16 loss scaler is found whoever owns it: torch's GradScaler, or DeepSpeed's (fp16 block) under ZeRO."""

from types import SimpleNamespace

import torch
from accelerate.utils import DistributedType

from nbkit.rl import amp
from nbkit.rl.scaling import DeepSpeedLossScale, loss_scaler


class FakeDeepSpeedEngine:
    """The three calls the workbook makes of a ``deepspeed.DeepSpeedEngine``."""

    def __init__(self, fp16=True, dynamic=True, scale=2.0**16):
        self.fp16, self.dynamic, self.optimizer = fp16, dynamic, SimpleNamespace(loss_scale=scale)

    def fp16_enabled(self):
        return self.fp16

    def dynamic_loss_scale(self):
        return self.dynamic


def accelerator(scaler=None, engine=None, distributed_type=DistributedType.NO, mixed_precision="fp16"):
    return SimpleNamespace(
        scaler=scaler,
        distributed_type=distributed_type,
        native_amp=False,
        deepspeed_engine_wrapped=SimpleNamespace(engine=engine) if engine else None,
        state=SimpleNamespace(mixed_precision=mixed_precision),
        device=torch.device("cpu"),
    )


def test_torch_gradscaler_is_used_as_is():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    assert loss_scaler(accelerator(scaler=scaler)) is scaler


def test_deepspeeds_dynamic_fp16_scaler_is_seen_and_read():
    engine = FakeDeepSpeedEngine(scale=512.0)
    found = loss_scaler(accelerator(engine=engine, distributed_type=DistributedType.DEEPSPEED))
    assert isinstance(found, DeepSpeedLossScale) and found.is_enabled() and found.get_scale() == 512.0
    engine.optimizer.loss_scale = 256.0  # an overflow halved it
    assert found.get_scale() == 256.0


def test_a_static_deepspeed_scale_does_not_pass_as_dynamic_and_bf16_has_none():
    assert not loss_scaler(accelerator(engine=FakeDeepSpeedEngine(dynamic=False))).is_enabled()
    assert loss_scaler(accelerator(engine=FakeDeepSpeedEngine(fp16=False), mixed_precision="bf16")) is None


def test_the_cpu_fp16_policy_adds_no_gradscaler_on_top_of_deepspeed():
    ds = accelerator(engine=FakeDeepSpeedEngine(), distributed_type=DistributedType.DEEPSPEED)
    assert amp.enable_cpu_fp16(ds) is False and ds.scaler is None
    cpu = accelerator()
    assert amp.enable_cpu_fp16(cpu) is True and isinstance(cpu.scaler, torch.amp.GradScaler)
