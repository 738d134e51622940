"""The anatomy's shared passes equal the separate passes they replace, bit for bit: one teacher-forced forward gives
π under the model's own head, under another head on the same hidden states (an FP32 head, a head in the format)
and the per-layer states; one KV-cache decode gives μ under both heads."""
import copy

import numpy as np
import pytest
import torch

from nbkit import forced, lm_head, mismatch, models
from nbkit.engines import HFEngine, SamplingConfig
from nbkit.offline import anatomy
from nbkit.tasks import arith


@pytest.fixture(scope="module")
def setup():
    base, tok = models.load("tiny-arith", "fp32")
    half = copy.deepcopy(base).to(torch.bfloat16)
    engine = HFEngine(half, "bf16", tokenizer=tok, progress=False)
    rollouts = engine.generate([p["problem"] for p in arith.make_problems(3, seed=2)], SamplingConfig(max_tokens=24, n=2))
    return base, half, tok, rollouts


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_one_forward_gives_pi_pi_with_an_fp32_head_and_the_layer_states(setup):
    base, half, _, rollouts = setup
    w32 = lm_head.head_of(base).weight
    scored = anatomy.forward_heads(half, rollouts, {"fp32_head": anatomy.fp32_head_fn(w32)}, batch_size=4, states=True)
    same(scored.logp[anatomy.MODEL_HEAD], mismatch.teacher_forced_logprobs(half, rollouts, batch_size=4))
    lm_head.install(half, w32)
    try:
        same(scored.logp["fp32_head"], mismatch.teacher_forced_logprobs(half, rollouts, batch_size=4))
    finally:
        lm_head.remove(half)
    exact = anatomy.forward_heads(base, rollouts, batch_size=4, states=True)
    assert [s.shape[1] for s in exact.states] == [len(r.token_ids) for r in rollouts]
    shared = anatomy.state_divergence(exact.states, scored.states)
    separate = anatomy.layer_divergence(base, half, rollouts, batch_size=4)
    assert len(shared) == len(separate) == base.config.num_hidden_layers + 1 and shared[0] > 0
    np.testing.assert_allclose(shared, separate, rtol=1e-3)  # other batch compositions: kernel noise only


def test_the_head_in_the_format_from_the_fp32_pass_is_the_lm_head_factors_pass(setup):
    base, _, _, rollouts = setup
    head = lm_head.head_of(base)
    scored = anatomy.forward_heads(base, rollouts, {"lm_head": anatomy.half_head_fn(head, torch.bfloat16)})
    with anatomy.half_head(base, torch.bfloat16):
        separate = mismatch.teacher_forced_logprobs(base, rollouts)
    same(scored.logp["lm_head"], separate)
    assert not np.array_equal(np.concatenate(separate), np.concatenate(scored.logp[anatomy.MODEL_HEAD]))


def test_one_decode_gives_mu_under_both_heads(setup):
    base, half, tok, rollouts = setup
    w32 = lm_head.head_of(base).weight
    both = forced.decode_heads(half, tok, rollouts, {"fp32_head": anatomy.fp32_head_fn(w32)}, batch_size=64)
    same(both[forced.MODEL_HEAD], forced.decode_logprobs(half, tok, rollouts, batch_size=64))
    same(both[forced.MODEL_HEAD], [np.asarray(r.logprobs) for r in rollouts])  # still the engine's μ bit for bit
    lm_head.install(half, w32)
    try:
        same(both["fp32_head"], forced.decode_logprobs(half, tok, rollouts, batch_size=64))
    finally:
        lm_head.remove(half)


@pytest.mark.parametrize("native_half", [False, True])
def test_the_switch_to_a_slow_reference_kernel_is_measured_on_the_alone_responses_only(native_half, monkeypatch):
    from nbkit import gemm

    monkeypatch.setattr(gemm, "cpu_has_native_half", lambda: native_half)  # False: an AVX2 CPU, torch's half GEMM slow
    res = anatomy.run("tiny-arith", engine="hf", dtype="bf16", n_prompts=2, samples_per_prompt=2, max_tokens=24,
                      n_boot=0, alone_sequences=2)
    assert res.gemm_policy == ("native" if native_half else "fp32-accumulate")
    before, after = res.pairs[("implementation", "gemm_kernel")]
    assert len(before) == len(after) == (4 if native_half else 2)
    assert len(res.pairs[("implementation", "attention_kernel")][0]) == 4  # every other factor: every response
