"""Mixture of experts: routing capture, flips, router replay, the precision audit and RL on a tiny Qwen3-MoE.

A tiny random Qwen3-MoE (hidden 32, 2 layers, 4 experts, top-2) keeps these in seconds; the shipped
``tiny-moe-arith`` is only loaded, never trained here.
"""

import json

import pytest
import torch

from nbkit.engines import HFEngine, SamplingConfig
from nbkit.models import models, routing
from nbkit.models.toymodels import arith, tiny_arith, tiny_moe
from nbkit.rl import RLConfig, train
from nbkit.rl.amp import PrecisionAudit

CFG = tiny_moe.TinyMoeConfig(
    hidden_size=32,
    num_layers=2,
    num_heads=2,
    intermediate_size=64,
    num_experts=4,
    top_k=2,
    moe_intermediate_size=32,
    seed=1,
)


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-moe-random")
    tiny_moe.build_model(CFG).save_pretrained(path)
    tiny_arith.build_tokenizer().save_pretrained(path)
    return str(path)


def _batch(tokenizer, n=8, seed=3):
    ids, mask, _ = tiny_arith._batch(tokenizer, arith.make_problems(n, seed=seed))
    return ids, mask


def _routing(model, ids, mask):
    with torch.no_grad(), routing.capture(model) as rec:
        model(input_ids=ids, attention_mask=mask)
    return rec.choices()


def test_same_dtype_same_kernels_same_weights_never_flip(moe_dir):
    model, tok = models.load(moe_dir)
    twin, _ = models.load(moe_dir)
    ids, mask = _batch(tok)
    a, b = _routing(model, ids, mask), _routing(twin, ids, mask)
    assert a.shape == (ids.shape[0], ids.shape[1], 2, 2)
    assert routing.flip_rates(a, b, mask) == [0.0, 0.0]


def test_a_perturbed_router_weight_flips_tokens(moe_dir):
    model, tok = models.load(moe_dir)
    other, _ = models.load(moe_dir)
    with torch.no_grad():  # swap experts 0 and 3 of layer 1's router: tokens routed to either must flip
        w = other.model.layers[1].mlp.gate.weight
        w[[0, 3]] = w[[3, 0]] + 0.5
    ids, mask = _batch(tok)
    rates = routing.flip_rates(_routing(model, ids, mask), _routing(other, ids, mask), mask)
    assert rates[0] == 0.0  # layer 0 untouched, and layer 1 cannot change layer 0's input
    assert rates[1] > 0.05


def test_router_replay_makes_the_trainer_route_like_the_engine(moe_dir):
    model, tok = models.load(moe_dir)
    engine, _ = models.load(moe_dir)
    with torch.no_grad():
        engine.model.layers[0].mlp.gate.weight.mul_(-1.0)  # an engine that routes very differently
    ids, mask = _batch(tok)
    theirs, ours = _routing(engine, ids, mask), _routing(model, ids, mask)
    assert max(routing.flip_rates(ours, theirs, mask)) > 0.2
    with torch.no_grad(), routing.replay(model, theirs), routing.capture(model) as rec:
        model(input_ids=ids, attention_mask=mask)
    assert routing.flip_rates(rec.choices(), theirs, mask) == [0.0, 0.0]
    # in chunks, row by row, as a trainer forwards a batch
    with torch.no_grad(), routing.replay(model, theirs), routing.capture(model) as rec:
        for lo in range(0, ids.shape[0], 3):
            model(input_ids=ids[lo : lo + 3], attention_mask=mask[lo : lo + 3])
    assert routing.flip_rates(rec.choices(along="batch"), theirs, mask) == [0.0, 0.0]


def test_router_replay_keeps_gradients_to_the_router(moe_dir):
    model, tok = models.load(moe_dir)
    ids, mask = _batch(tok)
    chosen = _routing(model, ids, mask)
    with routing.replay(model, chosen):
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    assert model.model.layers[0].mlp.gate.weight.grad.abs().sum() > 0


def test_router_replay_leaves_a_dense_model_untouched():
    dense = tiny_arith.build_model(
        tiny_arith.TinyArithConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    ).eval()
    ids, mask = _batch(tiny_arith.build_tokenizer())
    before = dense(input_ids=ids, attention_mask=mask).logits
    with routing.replay(dense, torch.zeros(ids.shape[0], ids.shape[1], 2, 2, dtype=torch.long)):
        after = dense(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(before, after)
    assert not routing.is_moe(dense)
    with pytest.raises(ValueError, match="no mixture-of-experts"):
        with routing.capture(dense):
            pass


def test_replay_refuses_choices_that_do_not_fit(moe_dir):
    model, tok = models.load(moe_dir)
    ids, mask = _batch(tok)
    with pytest.raises(ValueError, match=r"\(batch, seq, 2 layers, k\)"):
        with routing.replay(model, torch.zeros(2, 3, 5, 2, dtype=torch.long)):
            pass
    with pytest.raises(ValueError, match="replay choices cover"):
        with torch.no_grad(), routing.replay(model, torch.zeros(2, 3, 2, 2, dtype=torch.long)):
            model(input_ids=ids, attention_mask=mask)


def test_hf_engine_reports_routing_equal_to_a_teacher_forced_forward_in_fp32(moe_dir):
    model, tok = models.load(moe_dir)
    engine = HFEngine(model, "fp32", tokenizer=tok, progress=False)
    rollouts = engine.generate(["12+34=", "5+6="], SamplingConfig(max_tokens=6, n=2, seed=0))
    for r in rollouts:
        seq = torch.tensor([r.prompt_ids + r.token_ids])
        full = _routing(model, seq, torch.ones_like(seq))[0]
        assert r.routing.shape == full.shape
        assert (r.routing[-1] == -1).all()  # the last token was never fed back
        assert torch.equal(r.routing[:-1], full[:-1])


def test_precision_audit_covers_experts_and_router(moe_dir):
    model, tok = models.load(moe_dir)
    assert routing.autocast_experts(model)  # grouped_mm experts would ignore autocast
    audit = PrecisionAudit(model)
    ids, mask = _batch(tok)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=ids, attention_mask=mask)
    counts = audit.take()
    assert counts["moe_router:bf16"] == 2 and counts["moe_experts:bf16"] > 0
    assert audit.check("bf16", counts)["audit/matmul_dtypes"] == dict(counts)
    audit.remove()


def test_precision_audit_catches_grouped_mm_experts_left_in_fp32(moe_dir):
    from nbkit.rl.amp import PrecisionError

    model, tok = models.load(moe_dir)
    if model.config._experts_implementation == "eager":
        pytest.skip("this transformers/torch picks eager experts by default")
    audit = PrecisionAudit(model)
    ids, mask = _batch(tok)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=ids, attention_mask=mask)
    with pytest.raises(PrecisionError, match="moe_experts:fp32"):
        audit.check("bf16", audit.take())
    audit.remove()


def test_tiny_moe_arith_loads_like_the_other_models():
    model, tok = models.load("tiny-moe-arith")
    assert type(model).__name__ == "Qwen3MoeForCausalLM" and routing.top_k(model) == 2
    assert len(routing.moe_blocks(model)) == 4 and model.config.num_experts == 8
    build = json.loads((tiny_moe.CHECKPOINT / "nbkit_build.json").read_text())
    assert build["recipe"]["steps"] == tiny_arith.TinyArithConfig().steps  # tiny-arith's recipe
    assert abs(build["active_parameters"] - 1_059_456) / 1_059_456 < 0.01  # the dense model's size


def test_router_replay_needs_the_hf_engine():
    with pytest.raises(ValueError, match="router_replay=True needs rollout_engine='hf'"):
        RLConfig(router_replay=True, rollout_engine="vllm")


@pytest.mark.parametrize("replay", [False, True])
def test_rl_on_a_moe_logs_flip_rate_and_replay_zeroes_nothing_else(tmp_path, moe_dir, replay):
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in arith.make_problems(16, seed=7)))
    cfg = RLConfig(
        model=moe_dir,
        dataset=str(data),
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=12,
        output_dir=str(tmp_path / "run"),
        rollout_engine="hf",
        train_dtype="bf16",
        router_replay=replay,
    )
    result = train(cfg, progress=False)
    rows = [json.loads(line) for line in (result.out / "metrics.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["moe/flip_rate"] <= 1.0 for r in rows)
    assert all("moe/flip_rate/layer1" in r for r in rows)
    assert all(r["audit/matmul_dtypes"].get("moe_experts:bf16", 0) > 0 for r in rows)


@pytest.mark.cpu_kernels("the HF engine's and π's half GEMMs under gemm auto: the setting names the recipe that ran")
def test_offline_flip_analysis_splits_the_mismatch_by_flip(moe_dir):
    from nbkit.offline import moe_analysis

    res = moe_analysis.run(moe_analysis.MoeConfig(model=moe_dir, n_prompts=6, samples_per_prompt=2, max_tokens=10))
    assert res.flips["fp32"]["engine_vs_trainer"] == [0.0, 0.0]  # same weights, same dtype: no flip here
    assert res.flips["fp32"]["trainer_vs_fp32"] == [0.0, 0.0]
    for _d, s in res.split.items():
        assert 0.0 <= s["flipped_share_of_tokens"] <= s["upstream_flipped_share_of_tokens"] <= 1.0
        assert s["flipped_tokens"] <= s["tokens"]
    assert "MoE flip rate engine vs trainer (bf16)" in res.headline()
    from nbkit.precision import gemm  # the setting names the engine's recipe, and says when it was the trainer's own

    assert res.gemm == gemm.resolve("auto") and f"GEMM {res.gemm}" in res.headline()["MoE setting"]
    assert ("recipe's floor" in res.setting()) == (res.gemm == "fp32-accumulate")
    with pytest.raises(ValueError, match="no mixture-of-experts"):
        moe_analysis.run(moe_analysis.MoeConfig(model="tiny-arith", n_prompts=1, samples_per_prompt=1))


def test_the_flip_analysis_says_when_its_engine_ran_the_trainers_own_recipe():
    from nbkit.offline import moe_analysis

    cfg = moe_analysis.MoeConfig()
    shared = moe_analysis.MoeResult(cfg, gemm="fp32-accumulate").setting()
    assert shared.startswith("hf engine (GEMM fp32-accumulate)") and "recipe's floor" in shared
    assert "floor" not in moe_analysis.MoeResult(cfg, gemm="native").setting()
