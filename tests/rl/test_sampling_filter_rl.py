"""IS under sampling filters in RL training: with top-p the engine's μ is renormalised over the kept tokens, so the
trainer puts π on the same support before the IS ratio and the mismatch metrics. With π = μ (an FP32 trainer and an
FP32 HF engine on the same weights) the IS ratio's mean is then 1, where the unfiltered π gives the kept mass."""

import pytest
import torch

from nbkit.rl import RLConfig, train
from nbkit.rl.trainer import PrecisionGRPOTrainer

TOP_P, TEMPERATURE = 0.5, 2.0  # a wide distribution, so the nucleus drops real mass (tiny-arith is peaked)


def first_row(out, algorithm):
    cfg = RLConfig(
        algorithm=algorithm,
        train_dtype="fp32",
        rollout_engine="hf",
        steps=1,
        prompts_per_step=4,
        samples_per_prompt=4,
        max_tokens=40,
        top_p=TOP_P,
        temperature=TEMPERATURE,
        seed=3,
        output_dir=str(out),
    )
    return train(cfg, progress=False).rows[0]


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    """(the trainer as it is, the trainer with π left unfiltered) on the same rollouts of one Token-TIS step."""
    out = tmp_path_factory.mktemp("top_p_rl")
    fixed = first_row(out / "fixed", "grpo_token_tis")
    with pytest.MonkeyPatch.context() as mp:  # the kept mass taken as 1: π's full softmax against processed μ
        mp.setattr(
            PrecisionGRPOTrainer,
            "_log_kept_mass",
            lambda self, model, ids, attn, keep, **kw: torch.zeros(ids.size(0), keep),
        )
        unfiltered = first_row(out / "unfiltered", "grpo_token_tis")
    return fixed, unfiltered


@pytest.mark.slow
def test_is_ratio_mean_is_one_under_top_p_when_pi_equals_mu(steps):
    fixed, _ = steps
    assert fixed["sampling/pi_kept_mass/mean"] < 0.95  # the filter dropped real mass on the sampled tokens
    assert fixed["sampling/importance_sampling_ratio/mean"] == pytest.approx(1.0, abs=1e-4)
    assert fixed["sampling/sampling_logp_difference/mean"] < 1e-4
    assert fixed["mismatch/token_abs_logp_diff/mean"] < 1e-4


@pytest.mark.slow
def test_without_the_filter_on_pi_the_is_ratio_mean_is_the_kept_mass(steps):
    fixed, unfiltered = steps
    assert unfiltered["reward"] == fixed["reward"]  # the same rollouts: only π's side of the comparison changed
    assert unfiltered["sampling/importance_sampling_ratio/mean"] == pytest.approx(
        fixed["sampling/pi_kept_mass/mean"], rel=1e-4
    )
    assert unfiltered["sampling/importance_sampling_ratio/mean"] < 0.95


@pytest.mark.slow
def test_without_an_is_correction_the_mismatch_metrics_compare_pi_on_the_filters_support(tmp_path):
    row = first_row(tmp_path / "dr_grpo", "dr_grpo")  # no IS weight: π comes from the loss forward
    assert "sampling/importance_sampling_ratio/mean" not in row
    assert row["sampling/pi_kept_mass/mean"] < 0.95
    assert row["mismatch/token_abs_logp_diff/mean"] < 1e-4 and abs(row["mismatch/kl_k1"]) < 1e-4
