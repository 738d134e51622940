"""The dial between e8m2 and e8m1 (``nbkit.precision.dial``): each point runs e8m1 on the share of GEMMs (block rule) or
of
channels (channel rule) it names, audited by counts; its ends are e8m2 and e8m1 bit for bit; and how its mismatch on
a fixed batch follows the share: above e8m2 at every point, in the order of the share up to two swaps for the
channel rule, and not monotone (a measured finding, held by strict xfails: the mismatch saturates)."""

from __future__ import annotations

import copy

import pytest
import torch

from nbkit.models import models
from nbkit.models.toymodels import arith, tiny_arith
from nbkit.precision import dial, formats


@pytest.fixture(scope="module")
def fixed_batch():
    model, tok = models.load("tiny-arith")
    model = model.float().eval()
    # the model's own kind of answer (the scratchpad it was trained to write), teacher-forced, right-padded
    ids, mask, labels = tiny_arith._batch(tok, arith.make_problems(64, seed=11))
    low = copy.deepcopy(model).to(torch.bfloat16)
    return model, low, ids, mask, labels != -100


def run(name, low, ids, mask):
    """Log-probs of the fixed batch in format ``name`` and the GEMM counts of that forward."""
    with torch.no_grad(), formats.policy(name, model=low) as mode:
        out = torch.log_softmax(low(ids, attention_mask=mask).logits.float(), -1)
    return out, dict(mode.counts)


def mismatch(ref, out, ids, response) -> float:
    """Mean per-token |log p_fp32 − log p_format| over the response tokens."""
    picked = ids[:, 1:].unsqueeze(-1)
    diff = (ref[:, :-1].gather(-1, picked) - out[:, :-1].gather(-1, picked)).abs().squeeze(-1)
    return float(diff[response[:, 1:]].mean())


def test_points_are_parsed_and_bad_ones_refused():
    p = formats.get("dial-e8m1-3of8")
    assert isinstance(p, dial.DialPoint) and (p.n, p.blocks, p.fraction) == (3, 8, 0.375)
    assert p.base == "bf16" and p.quantized and formats.validate("dial-e8m1-0of8") == "dial-e8m1-0of8"
    assert dial.names(4) == tuple(f"dial-e8m1-{n}of8" for n in range(9))
    with pytest.raises(ValueError, match="0 <= n <= U"):
        formats.get("dial-e8m1-9of8")
    with pytest.raises(ValueError, match="unknown rollout format 'dial-e8m3-1of8'.*dial point"):
        formats.get("dial-e8m3-1of8")


def test_a_point_cut_for_another_model_is_refused(fixed_batch):
    _, low, ids, mask, _ = fixed_batch
    with pytest.raises(ValueError, match="into 6 blocks but Qwen2ForCausalLM has 8"):
        run("dial-e8m1-2of6", low, ids, mask)
    with pytest.raises(ValueError, match="needs the model"), formats.policy("dial-e8m1-2of8"):
        pass


def test_each_point_runs_e8m1_on_exactly_the_gemms_of_its_blocks(fixed_batch):
    _, low, ids, mask, _ = fixed_batch
    blocks = dial.gemm_blocks(low)
    linears = [sum(isinstance(m, torch.nn.Linear) for m in b.modules()) for b in blocks]  # 4 attention, 3 MLP
    for n in range(len(blocks) + 1):
        name = f"dial-e8m1-{n}of{len(blocks)}"
        _, counts = run(name, low, ids, mask)
        e1, e2 = counts.get(f"{name}/e8m1", 0), counts.get(f"{name}/e8m2", 0)
        assert counts[name] == e1 + e2 > 0  # the audit's count: every GEMM of the forward
        if n < len(blocks):
            assert e1 == sum(linears[:n])  # the linear layers of the first n blocks, no other GEMM
            assert counts.get(f"sdpa/{name}/e8m1", 0) == sum(
                1 for b in blocks[:n] if b in [layer.self_attn for layer in low.model.layers]
            )
        else:
            assert e2 == 0 and e1 == counts[name]  # the whole forward in e8m1
        assert formats.audit(name, counts)["audit/rollout_format_gemms"] == counts[name]


def test_the_ends_are_e8m2_and_e8m1_bit_for_bit(fixed_batch):
    _, low, ids, mask, _ = fixed_batch
    assert torch.equal(run("dial-e8m1-0of8", low, ids, mask)[0], run("e8m2", low, ids, mask)[0])
    assert torch.equal(run("dial-e8m1-8of8", low, ids, mask)[0], run("e8m1", low, ids, mask)[0])


def doses(fixed_batch, names) -> list[float]:
    model, low, ids, mask, response = fixed_batch
    with torch.no_grad():
        ref = torch.log_softmax(model(ids, attention_mask=mask).logits.float(), -1)
    return [mismatch(ref, run(name, low, ids, mask)[0], ids, response) for name in names]


def ranks(xs):
    return [sorted(xs).index(x) for x in xs]


def spearman(xs) -> float:
    """Rank correlation of ``xs`` with their position (no ties)."""
    n, r = len(xs), ranks(xs)
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(r, range(n))) / (n * (n * n - 1))


def test_the_channel_rule_rounds_exactly_its_share_of_every_tensors_channels():
    x = torch.randn(3, 5, 16)
    for k in range(9):
        p = formats.get(f"dial-e8m1-c{k}of8")
        y, c = p.element.round(x), 2 * k
        assert torch.equal(y[..., :c], formats.e8m(1).round(x[..., :c]))
        assert torch.equal(y[..., c:], formats.e8m(2).round(x[..., c:]))
    assert dial.ChannelMix(1, 8).channels(12) == 2  # a share of a channel counts as a whole one
    with pytest.raises(ValueError, match="0 <= k <= K"):
        formats.get("dial-e8m1-c9of8")


def test_every_gemm_runs_a_channel_point_and_its_ends_are_e8m2_and_e8m1(fixed_batch):
    _, low, ids, mask, _ = fixed_batch
    _, counts = run("dial-e8m1-c3of8", low, ids, mask)
    _, e2_counts = run("e8m2", low, ids, mask)
    assert counts["dial-e8m1-c3of8"] == e2_counts["e8m2"] > 0  # every GEMM the full dial rounds
    assert formats.audit("dial-e8m1-c3of8", counts)["audit/rollout_format_gemms"] == counts["dial-e8m1-c3of8"]
    assert torch.equal(run("dial-e8m1-c0of8", low, ids, mask)[0], run("e8m2", low, ids, mask)[0])
    assert torch.equal(run("dial-e8m1-c8of8", low, ids, mask)[0], run("e8m1", low, ids, mask)[0])


def test_any_e8m1_share_adds_mismatch_to_e8m2_on_a_fixed_batch(fixed_batch):
    for names in (dial.names(4), dial.channel_names(8)):
        d = doses(fixed_batch, names)
        assert min(d[1:]) > d[0] and max(d) > 4 * d[0], d  # the dial spans a real range above e8m2, not noise


def test_the_channel_rules_mismatch_follows_its_share_up_to_local_swaps(fixed_batch):
    d = doses(fixed_batch, dial.channel_names(8))
    assert spearman(d) >= 0.95, d  # measured: 0.967, two adjacent swaps (c1/c2 and c7/c8)


@pytest.mark.xfail(
    strict=True,
    reason="measured on tiny-arith (64 teacher-forced answers): the block rule jumps at "
    "the first block (0.033 -> 0.106) and saturates from 3 of 8 blocks (0.19, e8m1 itself 0.177)",
)
def test_the_block_rules_mismatch_is_monotone_in_its_share(fixed_batch):
    d = doses(fixed_batch, dial.names(4))
    assert d == sorted(d), d


@pytest.mark.xfail(
    strict=True,
    reason="measured on tiny-arith (64 teacher-forced answers): c1 0.064 > c2 0.058 and c7 0.220 > c8 (= e8m1) 0.177",
)
def test_the_channel_rules_mismatch_is_monotone_in_its_share(fixed_batch):
    d = doses(fixed_batch, dial.channel_names(8))
    assert d == sorted(d), d
