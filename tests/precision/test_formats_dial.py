"""The e8m<k> dial described as it is and split (``nbkit.precision.formats``): ``e8m<k>`` rounds every GEMM's operands
and
output and both attention products; ``e8m<k>-linear`` rounds only the linear layers' operands, as FP8/FP4 do."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nbkit.models import models
from nbkit.models.toymodels import arith
from nbkit.precision import formats


def test_the_linear_only_variant_rounds_operands_but_not_the_result():
    g = torch.Generator().manual_seed(0)
    a, w = torch.randn(8, 64, generator=g), torch.randn(16, 64, generator=g)
    lin = formats.quantized_linear(a, w, "e8m2-linear", out_dtype=torch.float32)
    exact_of_rounded = formats.e8m(2).round(a) @ formats.e8m(2).round(w).T
    assert torch.allclose(lin, exact_of_rounded, rtol=1e-6, atol=1e-6)
    full = formats.quantized_linear(a, w, "e8m2", out_dtype=torch.float32)
    assert torch.equal(full, formats.e8m(2).round(exact_of_rounded)) and not torch.equal(full, lin)
    fmt = formats.get("e8m2-linear")
    assert (fmt.base, fmt.scheme, fmt.all_gemms, fmt.quantized) == ("bf16", "e8m-linear", False, True)
    assert formats.get("e8m9-linear").base == "fp32"


def _mismatch(name: str, model, ids: torch.Tensor, mask: torch.Tensor) -> tuple[float, dict]:
    """Mean per-token |log p_fp32 − log p_format| of each next real token of a fixed batch (padding excluded)."""
    import copy

    with torch.no_grad():
        ref = torch.log_softmax(model(ids, attention_mask=mask).logits.float(), -1)
        low = copy.deepcopy(model).to(torch.bfloat16 if formats.get(name).base == "bf16" else torch.float32)
        with formats.policy(name, model=low) as mode:  # the base dtype's GEMMs under gemm "auto"
            out = torch.log_softmax(low(ids, attention_mask=mask).logits.float(), -1)
    picked = ids[:, 1:].unsqueeze(-1)
    diff = (ref[:, :-1].gather(-1, picked) - out[:, :-1].gather(-1, picked)).abs().squeeze(-1)
    real = mask[:, 1:].bool()
    return float(diff[real].mean()), dict(mode.counts) if mode is not None else {}  # None: a plain format, native


@pytest.fixture(scope="module")
def fixed_batch():
    model, tok = models.load("tiny-arith")
    model = model.float().eval()
    texts = [p["problem"] + " " + str(p.get("answer", "")) for p in arith.make_problems(16, seed=11)]
    enc = tok(texts, return_tensors="pt", padding=True)
    return model, enc["input_ids"], enc["attention_mask"]


@pytest.mark.cpu_kernels("BF16 GEMMs under gemm auto: native on an AVX512-FP16 Xeon, fp32-accumulate elsewhere")
def test_linear_operands_alone_cost_less_mismatch_than_the_full_dial_on_a_fixed_batch(fixed_batch, cpu_kind):
    """Depends on the CPU's half kernels: the BF16 reference and the dial's base-dtype GEMMs run under ``gemm
    "auto"`` (torch's native BF16 GEMM on an AVX512-FP16 Xeon, where ``formats.policy("bf16")`` yields no mode;
    fp32-accumulate elsewhere), so it runs once per CPU kind (``cpu_kind``)."""
    model, ids, mask = fixed_batch
    linear, linear_counts = _mismatch("e8m2-linear", model, ids, mask)
    full, full_counts = _mismatch("e8m2", model, ids, mask)
    bf16, bf16_counts = _mismatch("bf16", model, ids, mask)
    assert (bf16_counts == {}) == (cpu_kind == "xeon-avx512fp16")  # native BF16 GEMMs route nothing
    assert 0 < linear < full  # rounding outputs and attention adds mismatch on top of the operands
    assert bf16 < linear  # 2 mantissa bits on the operands are coarser than BF16's 7 everywhere
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules()) - 1  # the LM head stays in the base dtype
    assert linear_counts["e8m2-linear"] == n_linear and "sdpa/e8m2" not in linear_counts  # attention: base dtype
    assert full_counts["e8m2"] > n_linear and full_counts["sdpa/e8m2"] > 0
    assert np.isfinite([linear, full]).all()


# -- the rounded K/V prefix: decoding reuses the last step's rounding, bit for bit ------------------------------


def _channel_round():
    from nbkit.precision import dial

    return dial.point("dial-e8m1-c8of16").element.round


@pytest.mark.parametrize("rnd", [formats.e8m(2).round, _channel_round()], ids=["e8m2", "channel-dial"])
def test_a_cache_that_grows_by_one_position_reuses_the_rounding_and_gives_the_same_bits(rnd):
    g = torch.Generator().manual_seed(3)
    cache = torch.randn(2, 4, 5, 16, generator=g)
    prefix = formats.RoundedPrefix()
    assert torch.equal(prefix("k", rnd, cache), rnd(cache)) and prefix.reused == 0
    for _ in range(3):  # three decoding steps, each appending one position
        cache = torch.cat([cache, torch.randn(2, 4, 1, 16, generator=g)], dim=-2)
        assert torch.equal(prefix("k", rnd, cache), rnd(cache))
    assert prefix.reused == 3
    assert torch.equal(prefix("k", rnd, cache), rnd(cache)) and prefix.reused == 4  # the same operand again


def test_an_operand_that_does_not_extend_an_earlier_one_is_rounded_whole():
    rnd = formats.e8m(2).round
    g = torch.Generator().manual_seed(4)
    prefix = formats.RoundedPrefix()
    first = torch.randn(1, 2, 6, 8, generator=g)
    prefix("k", rnd, first)
    changed = torch.cat([first, torch.randn(1, 2, 1, 8, generator=g)], dim=-2)
    changed[0, 1, 4, 3] += 1e-3  # one earlier position differs: no reuse
    other_layer = torch.randn(1, 2, 7, 8, generator=g)
    nan = first.clone()
    nan[0, 0, 2, 0] = float("nan")
    for x in (changed, other_layer):
        assert torch.equal(prefix("k", rnd, x), rnd(x))
    assert torch.equal(prefix("k", rnd, nan).isnan(), rnd(nan).isnan())
    assert prefix.reused == 0
    # another rounding's entries are never read, even for the very same operand
    assert torch.equal(prefix("v", formats.e8m(1).round, first), formats.e8m(1).round(first)) and prefix.reused == 0


def test_a_dial_rollout_reuses_its_rounded_cache_and_samples_exactly_what_rounding_it_whole_samples(monkeypatch):
    from nbkit.engines.base import SamplingConfig
    from nbkit.engines.hf import HFEngine

    prompts = [p["problem"] for p in arith.make_problems(3, seed=5)]
    sampling = SamplingConfig(max_tokens=12, n=2, seed=7)
    made: list = []
    init = formats.RoundedPrefix.__init__

    def recording_init(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(formats.RoundedPrefix, "__init__", recording_init)
    for name in ("e8m2", "dial-e8m1-c8of16"):
        engine = HFEngine("tiny-arith", format=name, progress=False)
        cached = engine.generate(prompts, sampling)
        assert sum(p.reused for p in made) >= 10 * len(made)  # each decoding step after the first reused
        with monkeypatch.context() as m:
            m.setattr(formats.RoundedPrefix, "__call__", lambda self, name, rnd, x: rnd(x))
            whole = engine.generate(prompts, sampling)
        assert [r.token_ids for r in cached] == [r.token_ids for r in whole]
        assert [r.logprobs for r in cached] == [r.logprobs for r in whole]
        made.clear()
