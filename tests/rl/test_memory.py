"""The memory estimate (``nbkit.rl.memory``) against a measurement: a small Qwen2 model trained as the workbook
trains (FP32 weights, FP16/BF16 autocast, gradient checkpointing as TRL enables it, a left-padded batch), its
activation bytes measured on CPU with torch's own ``MemTracker`` (the peak over the forward and backward of the
bytes that are neither weights, gradients nor optimiser state)."""

from __future__ import annotations

import pytest
import torch

from nbkit.rl import memory

H, INTER, V, ROWS, TOKENS = 128, 384, 256, 4, 256
SHAPES = {  # hidden, MLP, vocabulary, layers, sequences, tokens: the terms in other proportions each
    "base": (H, INTER, V, 8, ROWS, TOKENS),
    "wide vocabulary and MLP": (96, 1024, 1024, 3, 2, 512),
    "narrow hidden": (64, 512, 512, 6, 2, 384),
    "wide hidden": (192, 256, 128, 4, 3, 200),
}


def measured_activation_bytes(layers: int, dtype: torch.dtype, checkpointing: bool, shape: tuple | None = None) -> int:
    """Peak activation bytes of one loss forward + backward (full logits, FP32 log-softmax of the taken tokens) of a
    random Qwen2 (``shape``: hidden, MLP, vocabulary, layers, sequences, tokens; default ``layers`` of the base)."""
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, inter, vocab, layers, rows, tokens = shape or (H, INTER, V, layers, ROWS, TOKENS)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        use_cache=False,
    )
    model = Qwen2ForCausalLM(config).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(0, vocab, (rows, tokens), generator=torch.Generator().manual_seed(1))
    attn = torch.ones_like(ids)
    attn[0, :17] = 0  # left padding, as TRL's batches have: SDPA gets a 4-D mask
    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        with torch.autocast("cpu", dtype=dtype):
            logits = model(input_ids=ids, attention_mask=attn).logits
        torch.log_softmax(logits.float(), -1).gather(-1, ids[..., None]).mean().backward()  # per-token log p
    kinds = _MemRefType
    state = (kinds.PARAM, kinds.BUFFER, kinds.GRAD, kinds.OPT)
    return max(
        sum(v for k, v in snap[torch.device("cpu")].items() if k != "Total" and k not in state)
        for stats in tracker.memory_tracking.values()
        for snaps in stats.snapshots.values()
        for snap in snaps
    )


def estimate(layers: int, checkpointing: bool, shape: tuple | None = None) -> float:
    hidden, inter, vocab, layers, rows, tokens = shape or (H, INTER, V, layers, ROWS, TOKENS)
    model = memory.ModelShape(0, layers, hidden, inter, vocab, kv_dim=hidden // 2, context=1024)
    return memory.activation_bytes(model, rows, tokens, checkpointing, fused_head=False, value_bytes=2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("checkpointing", [True, False])
def test_the_activation_estimate_is_within_15_percent_of_a_cpu_measurement(dtype, checkpointing):
    measured = measured_activation_bytes(8, dtype, checkpointing)
    assert estimate(8, checkpointing) == pytest.approx(measured, rel=0.15)


@pytest.mark.parametrize("name", [n for n in SHAPES if n != "base"])
def test_the_checkpointed_estimate_holds_for_other_proportions_of_hidden_mlp_and_vocabulary(name):
    """Issue 54, deliver 2: the 15 % is not one shape's coincidence. Checkpointed (TRL's default), the recomputed
    layer's FP32 tensors and the residual stream's FP32 gradient grow with the hidden size and the logits with the
    vocabulary; an estimate missing the first and overcounting the second (14 bytes per logit) was off by -15 % to
    +29 % on these shapes while within 1 % on the base one."""
    shape = SHAPES[name]
    measured = measured_activation_bytes(0, torch.bfloat16, True, shape)
    assert estimate(0, True, shape) == pytest.approx(measured, rel=0.15)


def test_a_checkpointed_layer_keeps_its_fp32_residual_input_4_bytes_per_unit():
    """Issue 54, item 3: under autocast over FP32 weights the residual stream is FP32, so each checkpointed layer
    costs 4 bytes per hidden unit and token, not 2."""
    per_layer = (
        measured_activation_bytes(8, torch.bfloat16, True) - measured_activation_bytes(4, torch.bfloat16, True)
    ) / 4
    assert per_layer == pytest.approx(4 * H * ROWS * TOKENS, rel=0.05)
    assert (estimate(8, True) - estimate(4, True)) / 4 == pytest.approx(per_layer, rel=0.05)


def test_ddp_counts_its_gradient_buckets_unless_they_are_the_gradients():
    shape = memory.model_shape("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    copy = memory.state_bytes(shape, "multi_gpu", 4, bucket_view=False)
    view = memory.state_bytes(shape, "multi_gpu", 4, bucket_view=True)
    assert copy - view == 4 * shape.params  # ≈ 6.6 GiB for the 1.78 B model
    assert view == memory.state_bytes(shape, "single_gpu", 1)


def test_the_padded_batchs_boolean_mask_is_counted():
    shape = memory.model_shape("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    one, two = (memory.activation_bytes(shape, 16, n) for n in (10_240, 10_241))
    assert two - one > 16 * (10_241**2 - 10_240**2)  # grows with tokens², one byte per (row, query, key)


def test_the_trainer_asks_ddp_for_gradients_as_bucket_views():
    """What ``BUCKET_VIEW`` budgets is what the trainer's accelerator gets (accelerate's default is off)."""
    from types import SimpleNamespace

    from accelerate.utils import DistributedDataParallelKwargs
    from transformers import Trainer

    from nbkit.rl.trainer import PrecisionGRPOTrainer

    trainer = PrecisionGRPOTrainer.__new__(PrecisionGRPOTrainer)
    trainer.run = SimpleNamespace(loss_scale_init=2.0**16, loss_scale_growth_interval=400)
    original = Trainer._build_accelerator_args
    try:
        Trainer._build_accelerator_args = lambda self, **kw: {"kwargs_handlers": [DistributedDataParallelKwargs()]}
        args = trainer._build_accelerator_args()
    finally:
        Trainer._build_accelerator_args = original
    (ddp,) = [h for h in args["kwargs_handlers"] if isinstance(h, DistributedDataParallelKwargs)]
    assert ddp.gradient_as_bucket_view is memory.BUCKET_VIEW is True
