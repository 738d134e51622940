"""π under FSDP2, on CPU: a real ``fully_shard`` (gloo, one process) of a tiny model carrying TRL's fused LM head,
with the policy accelerate builds and with the one the trainer installs (``nbkit.rl.fsdp``)."""

import ast
import copy
import inspect
import textwrap

import pytest
import torch
import torch.distributed as dist

from nbkit.models import models
from nbkit.rl import fsdp


@pytest.fixture
def one_process_group():
    """A one-process gloo group from an in-memory store (no launch variables set, nothing left behind)."""
    if dist.is_initialized():
        pytest.skip("a process group is already running in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _accelerate_plugin(precision: str):
    """accelerate's FSDP2 plugin with the policy ``AcceleratorState`` gives it for a ``precision`` launch."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    plugin.set_mixed_precision(precision)
    return plugin


def test_accelerates_policy_casts_outputs_and_reductions_to_half_and_the_trainers_keeps_fp32():
    plugin = _accelerate_plugin("bf16")
    mp = plugin.mixed_precision_policy
    assert (mp.param_dtype, mp.reduce_dtype, mp.output_dtype) == (torch.bfloat16,) * 3  # what a GPU launch gets
    assert fsdp.set_plugin_policy(plugin, "bf16")
    mp = plugin.mixed_precision_policy
    assert (mp.param_dtype, mp.reduce_dtype, mp.output_dtype) == (torch.bfloat16, torch.float32, None)
    fp16 = _accelerate_plugin("fp16")
    assert fsdp.set_plugin_policy(fp16, "fp16") and fp16.mixed_precision_policy.param_dtype == torch.float16
    assert not fsdp.set_plugin_policy(None, "bf16")  # no FSDP: nothing to change
    with pytest.raises(ValueError, match="not 'fp32'"):
        fsdp.policy("fp32")


def _fused_model():
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(models.resolve("tiny-arith"), dtype=torch.float32)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))  # as GRPOTrainer.__init__ does
    return model


def _pi(model, ids):
    """TRL's scoring forward (``GRPOTrainer._get_per_token_logps_and_entropies``): fused head, completion labels."""
    labels = ids.clone()
    labels[:, :4] = -100
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
    return out.log_probs[:, 3:], out.entropy[:, 3:]


@pytest.mark.parametrize("installed", [False, True], ids=["accelerates-policy", "trainers-policy"])
def test_pi_through_trls_fused_head_under_fsdp2_is_fp32_only_with_the_trainers_policy(one_process_group, installed):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    ids = torch.randint(3, 20, (3, 14))
    model = _fused_model()
    reference = copy.deepcopy(model)
    for p in reference.parameters():  # FSDP2's param_dtype: the same half weights (buffers stay), unwrapped
        p.data = p.data.to(torch.bfloat16)
    with torch.no_grad():
        exact, _ = _pi(reference, ids)
    assert exact.dtype == torch.float32  # TRL's chunked kernel returns FP32 log-probs from half matmuls
    plugin = _accelerate_plugin("bf16")
    if installed:
        fsdp.set_plugin_policy(plugin, "bf16")
    fully_shard(model, mp_policy=plugin.mixed_precision_policy)  # accelerate's fsdp2_prepare_model passes this
    logps, entropy = _pi(model, ids)
    if installed:
        assert logps.dtype == entropy.dtype == torch.float32
        torch.testing.assert_close(logps.detach(), exact, rtol=0, atol=1e-5)
        logps.sum().backward()  # and it trains: gradients reach the sharded weights
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    else:  # accelerate's own policy: π rounded to BF16 after the kernel, the error the issue describes
        assert logps.dtype == torch.bfloat16
        assert (logps.detach().float() - exact).abs().max() > 1e-3


def test_the_trainer_installs_the_policy_before_prepare():
    """``create_accelerator_and_postprocess`` is where the Accelerator exists and no model is wrapped yet."""
    from nbkit.rl.trainer import PrecisionGRPOTrainer

    tree = ast.parse(textwrap.dedent(inspect.getsource(PrecisionGRPOTrainer.create_accelerator_and_postprocess)))
    called = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert "fp32_reduce_and_outputs" in called
