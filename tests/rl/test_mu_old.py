"""μ as π_old (``grpo_mu_old*`` presets) and the phantom-clip metric ``clip/phantom_fraction``.

One step of the shipped ``tiny-arith`` with an FP32 HF engine and an FP32 trainer: π = μ up to summation order,
so nothing may be clipped; a known shift put on μ must then show up as clipping, and only where μ is π_old.
"""

import pytest
from trl import GRPOTrainer

from nbkit.rl import ALGORITHMS, RLConfig, train

SHIFT = 1.0  # nats taken off μ on every token: π/μ = e ≈ 2.7, far above 1 + ε


def one_step(tmp_path, algorithm, **kw):
    cfg = RLConfig(
        dataset="data/tiny_arith_sanity",
        algorithm=algorithm,
        train_dtype="fp32",
        rollout_dtype="fp32",
        rollout_engine="hf",
        max_steps=1,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
        seed=3,
        output_dir=str(tmp_path / algorithm),
        **kw,
    )
    return train(cfg, progress=False).rows[0]


@pytest.fixture
def shifted_mu(monkeypatch):
    """The engine's log-probs μ lowered by ``SHIFT`` nats after TRL has read them (π_old recomputed as usual)."""
    original = GRPOTrainer._generate_and_score_completions

    def shifted(self, inputs):
        out = original(self, inputs)
        out["sampling_per_token_logps"] = out["sampling_per_token_logps"] - SHIFT
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", shifted)


def test_the_mu_as_old_presets_exist_and_clip():
    assert ALGORITHMS["grpo_mu_old"].mu_as_old and ALGORITHMS["grpo_mu_old"].is_mode is None
    assert (
        ALGORITHMS["grpo_mu_old_token_tis"].mu_as_old
        and ALGORITHMS["grpo_mu_old_token_tis"].is_mode == "token_truncate"
    )
    assert all(a.mu_as_old == ("mu_old" in a.corrections) for a in ALGORITHMS.values())  # the field, not the name


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["grpo", "grpo_mu_old", "grpo_mu_old_token_tis"])
def test_no_phantom_clipping_when_mu_equals_pi(algorithm, tmp_path):
    row = one_step(tmp_path, algorithm)
    assert row["mismatch/token_abs_logp_diff/max"] <= 1e-4
    assert row["clip/phantom_fraction"] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["grpo_mu_old", "grpo_mu_old_token_tis"])
def test_a_perturbed_mu_is_clipped_only_where_mu_is_pi_old(algorithm, tmp_path, shifted_mu):
    # With TRL's recomputed π_old (= π exactly here, FP32 both sides) the ratio would be 1 and nothing clipped;
    # with μ as π_old the ratio is e^SHIFT, so every token with a positive advantage is clipped.
    row = one_step(tmp_path, algorithm)
    assert row["reward_std"] > 0  # some advantages are positive
    assert row["clip/phantom_fraction"] > 0.05
    assert row["clip_ratio/high_mean"] > 0  # TRL's own clip counter agrees that the clip was active


@pytest.mark.slow
def test_a_perturbed_mu_is_not_clipped_by_plain_grpo(tmp_path, shifted_mu):
    row = one_step(tmp_path, "grpo_token_tis")  # π_old recomputed by TRL: μ only weights, never clips
    assert row["clip/phantom_fraction"] == 0.0
