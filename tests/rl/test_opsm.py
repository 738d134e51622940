"""DeepSeek-V3.2's off-policy sequence mask as ``correction='opsm'`` (``nbkit.rl.opsm``): it drops exactly the
sequences with a negative advantage whose per-token KL(μ‖π) exceeds δ (TRL's mask function, held to DeepSeek's
formula here), on π put on the sampling filter's support, and a run with it trains."""

from __future__ import annotations

import math

import pytest
import torch
from trl import GRPOTrainer

from nbkit.records import schema
from nbkit.rl import RLConfig, algorithms, opsm, train


def sequence_kl(logp_pi, logp_mu, mask):
    """DeepSeek-V3.2's (1/|o_i|) Σ_t log(μ/π) per sequence, over its completion tokens (B,)."""
    m = mask.to(logp_pi.dtype)
    return ((logp_mu - logp_pi) * m).sum(-1) / m.sum(-1).clamp(min=1)


def deepseeks_rule(logp_pi, logp_mu, advantages, mask, delta) -> list[bool]:
    """Per sequence, in plain Python: dropped iff its advantage is negative and its mean log μ − log π over its
    completion tokens exceeds δ."""
    out = []
    for pi, mu, adv, m in zip(logp_pi.tolist(), logp_mu.tolist(), advantages.tolist(), mask.tolist()):
        gaps = [b - a for a, b, keep in zip(pi, mu, m) if keep]
        out.append(adv < 0 and sum(gaps) / max(len(gaps), 1) > delta)
    return out


def hand_built_batch():
    """Four completions of three tokens (the last of row 3 is padding): log μ − log π per token chosen per row."""
    logp_pi = torch.full((4, 3), -1.0)
    gap = torch.tensor(
        [
            [0.3, 0.3, 0.3],  # far (KL 0.3 per token), advantage < 0: dropped
            [0.3, 0.3, 0.3],  # far, advantage > 0: kept
            [0.001, 0.0, 0.002],  # near (KL 0.001), advantage < 0: kept
            [0.0, 0.0, 50.0],
        ]
    )  # near on its real tokens (the 50 sits on padding), advantage < 0: kept
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]])
    return {
        "sampling_per_token_logps": logp_pi + gap,
        "completion_mask": mask,
        "advantages": torch.tensor([-1.0, 2.0, -0.5, -3.0]),
    }, logp_pi


def test_it_drops_exactly_the_far_negative_advantage_sequences():
    batch, logp_pi = hand_built_batch()
    out, dropped = opsm.apply(batch, logp_pi, delta=0.01)
    assert out["advantages"].tolist() == [0.0, 2.0, -0.5, -3.0] and dropped == 1
    assert torch.equal(out["completion_mask"], batch["completion_mask"])  # the mismatch metrics see every token
    assert sequence_kl(logp_pi, batch["sampling_per_token_logps"], batch["completion_mask"]).tolist() == pytest.approx(
        [0.3, 0.3, 0.001, 0.0], abs=1e-6
    )


def test_trls_mask_drops_the_same_sequences_as_deepseeks_formula_on_a_fixed_batch():
    """256 sequences of up to 24 tokens, padding of every length, per-token gaps whose sequence means straddle δ,
    advantages of both signs and zero: TRL's mask (what ``opsm.keep_mask`` is) and DeepSeek's formula agree."""
    gen = torch.Generator().manual_seed(53)
    b, t, delta = 256, 24, 0.01
    logp_pi = -torch.rand(b, t, generator=gen) * 3
    logp_mu = logp_pi + torch.randn(b, t, generator=gen) * torch.rand(b, 1, generator=gen) * 0.08 + 0.01
    lengths = torch.randint(1, t + 1, (b,), generator=gen)
    mask = (torch.arange(t) < lengths.unsqueeze(1)).long()
    advantages = torch.randn(b, generator=gen).round(decimals=1)
    rule = deepseeks_rule(logp_pi, logp_mu, advantages, mask, delta)
    assert 20 < sum(rule) < b / 2 and (advantages == 0).any()  # the batch does test both sides of δ and of 0
    dropped = (opsm.keep_mask(logp_pi, logp_mu, advantages, mask, delta) == 0).tolist()
    assert dropped == rule
    trls = GRPOTrainer.get_off_policy_mask(advantages.unsqueeze(1), logp_pi, logp_mu, mask.float(), delta)
    assert (trls.squeeze(1) == 0).tolist() == rule


def test_trls_loss_time_mask_would_drop_top_p_sequences_that_have_no_precision_gap():
    """Why not TRL's ``off_policy_mask_threshold``: under top-p the engine's μ is renormalised over the kept tokens,
    and TRL's loss compares it to the full-vocabulary π. With π and μ the same policy (μ = π / kept mass on the kept
    tokens), TRL's comparison drops every negative-advantage sequence; π on the filter's support (the workbook's)
    drops none."""
    logp_pi = torch.full((3, 4), -1.0)
    log_kept_mass = torch.full((3, 4), math.log(0.9))  # top-p keeps 90% of π's mass at each position
    logp_mu = logp_pi - log_kept_mass  # the same policy, renormalised over the kept tokens
    mask, advantages = torch.ones(3, 4), torch.tensor([-1.0, -0.5, 1.0])
    on_full_vocabulary = opsm.keep_mask(logp_pi, logp_mu, advantages, mask, delta=0.01)
    on_filter_support = opsm.keep_mask(logp_pi - log_kept_mass, logp_mu, advantages, mask, delta=0.01)
    assert on_full_vocabulary.tolist() == [0.0, 0.0, 1.0] and on_filter_support.tolist() == [1.0, 1.0, 1.0]


def test_delta_is_a_per_token_threshold():
    batch, logp_pi = hand_built_batch()
    assert opsm.apply(batch, logp_pi, delta=0.5)[1] == 0  # 0.3 per token is under 0.5, however long the answer
    assert opsm.apply(batch, logp_pi, delta=5e-4)[0]["advantages"].tolist() == [0.0, 2.0, 0.0, -3.0]


def test_per_token_advantages_are_masked_on_the_negative_tokens_of_far_sequences():
    batch, logp_pi = hand_built_batch()
    batch["advantages"] = torch.tensor([[1.0, -1.0, 0.5]] * 4)  # PPO's GAE: one advantage per token
    out, dropped = opsm.apply(batch, logp_pi, delta=0.01)
    assert out["advantages"][0].tolist() == [1.0, 0.0, 0.5] and out["advantages"][1].tolist() == [1.0, 0.0, 0.5]
    assert out["advantages"][2].tolist() == [1.0, -1.0, 0.5] and dropped == 2


def test_it_is_a_correction_choice_with_a_documented_positive_delta():
    algo = algorithms.resolve("dr_grpo", "opsm")
    assert algo.off_policy_mask and algo.is_mode is None and not algo.mu_as_old
    assert not algorithms.resolve("dr_grpo", "seq_mis").off_policy_mask
    assert RLConfig(correction="opsm").opsm_delta == opsm.DEFAULT_DELTA
    with pytest.raises(ValueError, match="opsm_delta"):
        RLConfig(correction="opsm", opsm_delta=0.0)
    with pytest.raises(ValueError, match="delta must be > 0"):
        opsm.keep_mask(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1), 0.0)


def test_a_run_with_it_trains_and_drops_what_the_rule_says(tmp_path, arith_jsonl, monkeypatch):
    seen = []
    real = opsm.apply

    def spy(batch, logp_pi, delta):
        out, dropped = real(batch, logp_pi, delta)
        seen.append((batch, logp_pi, delta, out, dropped))
        return out, dropped

    monkeypatch.setattr(opsm, "apply", spy)
    # the shipped model (rewards vary, so advantages do), a BF16 rollout against FP32 training, and a δ small enough
    # that some sampled sequences are far
    cfg = RLConfig(
        model="tiny-arith",
        dataset=arith_jsonl,
        max_steps=2,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
        algorithm="dr_grpo",
        correction="opsm",
        opsm_delta=1e-5,
        train_dtype="fp32",
        rollout_dtype="bf16",
        output_dir=str(tmp_path / "run"),
    )
    rows = train(cfg, progress=False).rows
    assert [r["step"] for r in rows] == [1, 2] and len(seen) == 2
    for row, (batch, logp_pi, delta, out, _dropped) in zip(rows, seen):
        assert delta == 1e-5 and math.isfinite(row["loss"])
        kl = sequence_kl(logp_pi.float(), batch["sampling_per_token_logps"].float(), batch["completion_mask"])
        rule = (kl > delta) & (batch["advantages"] < 0)
        assert torch.equal(out["advantages"] == 0, rule | (batch["advantages"] == 0))
        assert row[schema.OPSM_MASKED_FRACTION] == pytest.approx(int(rule.sum()) / len(rule))
    assert sum(d for *_, d in seen) > 0  # the mask did act in this run
