"""The anatomy's shared passes equal the separate passes they replace, bit for bit: one teacher-forced forward gives
π under the model's own head, under another head on the same hidden states (an FP32 head, a head in the format)
and the per-layer states; one KV-cache decode gives μ under both heads. Each of the path's switches moves log p
and leaves the model as it was when its context ends."""

import copy

import numpy as np
import pytest
import torch

from nbkit.engines import HFEngine, SamplingConfig
from nbkit.mismatch import forced, mismatch
from nbkit.models import models
from nbkit.models.toymodels import arith
from nbkit.offline import anatomy_surgery
from nbkit.precision import lm_head


@pytest.fixture(scope="module")
def setup():
    base, tok = models.load("tiny-arith", "fp32")
    half = copy.deepcopy(base).to(torch.bfloat16)
    engine = HFEngine(half, "bf16", tokenizer=tok, progress=False)
    rollouts = engine.generate(
        [p["problem"] for p in arith.make_problems(3, seed=2)], SamplingConfig(max_tokens=24, n=2)
    )
    return base, half, tok, rollouts


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_one_forward_gives_pi_pi_with_an_fp32_head_and_the_layer_states(setup):
    base, half, _, rollouts = setup
    w32 = lm_head.head_of(base).weight
    scored = anatomy_surgery.forward_heads(
        half, rollouts, {"fp32_head": anatomy_surgery.fp32_head_fn(w32)}, batch_size=4, states=True
    )
    same(scored.logp[anatomy_surgery.MODEL_HEAD], mismatch.teacher_forced_logprobs(half, rollouts, batch_size=4))
    lm_head.install(half, w32)
    try:
        same(scored.logp["fp32_head"], mismatch.teacher_forced_logprobs(half, rollouts, batch_size=4))
    finally:
        lm_head.remove(half)
    exact = anatomy_surgery.forward_heads(base, rollouts, batch_size=4, states=True)
    assert [s.shape[1] for s in exact.states] == [len(r.token_ids) for r in rollouts]
    shared = anatomy_surgery.state_divergence(exact.states, scored.states)
    separate = anatomy_surgery.layer_divergence(base, half, rollouts, batch_size=4)
    assert len(shared) == len(separate) == base.config.num_hidden_layers + 1 and shared[0] > 0
    np.testing.assert_allclose(shared, separate, rtol=1e-3)  # other batch compositions: kernel noise only


def test_the_head_in_the_format_from_the_fp32_pass_is_the_lm_head_factors_pass(setup):
    base, _, _, rollouts = setup
    head = lm_head.head_of(base)
    scored = anatomy_surgery.forward_heads(
        base, rollouts, {"lm_head": anatomy_surgery.half_head_fn(head, torch.bfloat16)}
    )
    with anatomy_surgery.half_head(base, torch.bfloat16):
        separate = mismatch.teacher_forced_logprobs(base, rollouts)
    same(scored.logp["lm_head"], separate)
    assert not np.array_equal(np.concatenate(separate), np.concatenate(scored.logp[anatomy_surgery.MODEL_HEAD]))


def test_one_decode_gives_mu_under_both_heads(setup):
    base, half, tok, rollouts = setup
    w32 = lm_head.head_of(base).weight
    both = forced.decode_heads(half, tok, rollouts, {"fp32_head": anatomy_surgery.fp32_head_fn(w32)}, batch_size=64)
    same(both[forced.MODEL_HEAD], forced.decode_logprobs(half, tok, rollouts, batch_size=64))
    same(both[forced.MODEL_HEAD], [np.asarray(r.logprobs) for r in rollouts])  # still the engine's μ bit for bit
    lm_head.install(half, w32)
    try:
        same(both["fp32_head"], forced.decode_logprobs(half, tok, rollouts, batch_size=64))
    finally:
        lm_head.remove(half)


def test_each_switch_moves_log_p_and_is_undone_when_its_context_ends(setup):
    base, _, _, rollouts = setup
    rounded = anatomy_surgery.rounded_weights(base, torch.bfloat16)
    plain = np.concatenate(mismatch.teacher_forced_logprobs(rounded, rollouts))
    for switch in anatomy_surgery.SWITCHES:  # each one alone changes log p
        with anatomy_surgery.emulate(rounded, torch.bfloat16, [switch]):
            alone = np.concatenate(mismatch.teacher_forced_logprobs(rounded, rollouts))
        assert not np.array_equal(alone, plain), switch
        np.testing.assert_array_equal(np.concatenate(mismatch.teacher_forced_logprobs(rounded, rollouts)), plain)
    assert rounded.config._attn_implementation == base.config._attn_implementation
    with pytest.raises(ValueError, match=r"unknown switch\(es\) \['gelu'\]"):
        with anatomy_surgery.emulate(rounded, torch.bfloat16, ["gelu"]):
            pass
