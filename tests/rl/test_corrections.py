"""The μ corrections, selectable apart from the loss: none, Token-TIS, sequence TIS, sequence MIS, IcePop, μ as π_old.

``nbkit.rl.algorithms.is_weights`` states the weight each of TRL's IS modes puts on a token; the hand-made cases
fix what IcePop must do, and one real step per correction shows that the weights TRL applied in the loss are
exactly those (a BF16 engine against an FP32 trainer, with bands narrow enough that tokens fall outside them).
"""

from __future__ import annotations

import math

import pytest
import torch
from trl import GRPOTrainer

from nbkit.rl import RLConfig, algorithms, train
from nbkit.rl.algorithms import CORRECTIONS, grpo_options, is_weights, resolve
from nbkit.rl.run import grpo_config


def test_icepop_masks_exactly_the_tokens_outside_its_band():
    ratios = torch.tensor([[0.3, 0.49, 0.51, 1.0, 4.9, 5.1, 50.0], [1.0, 0.2, 2.0, 6.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]])  # the second response has 4 tokens
    w = is_weights(ratios.log(), mask, "token_mask", 0.5, 5.0)
    outside = ((ratios < 0.5) | (ratios > 5.0)) & mask.bool()
    assert torch.equal(w[mask.bool()] == 0, outside[mask.bool()])  # masked: exactly the out-of-band tokens
    kept = mask.bool() & ~outside
    assert torch.allclose(w[kept], ratios[kept], rtol=1e-6)  # kept tokens carry their ratio π/μ (IcePop's M(k) = k)
    assert w[0].tolist()[:3] == [0.0, 0.0, pytest.approx(0.51, rel=1e-6)]


def test_icepop_bounds_are_configurable():
    ratios = torch.tensor([[0.8, 0.95, 1.0, 1.05, 1.3]])
    w = is_weights(ratios.log(), torch.ones_like(ratios), "token_mask", 0.9, 1.1)
    assert (w == 0).tolist() == [[True, False, False, False, True]]


def test_truncation_and_sequence_masks_on_hand_made_ratios():
    log_ratio = torch.log(torch.tensor([[2.0, 2.0, 1.0], [0.5, 1.0, 1.0]]))
    mask = torch.ones_like(log_ratio)
    assert is_weights(log_ratio, mask, "token_truncate", None, 1.5).tolist() == [[1.5, 1.5, 1.0], [0.5, 1.0, 1.0]]
    seq = is_weights(log_ratio, mask, "sequence_truncate", None, 3.0)  # ∏ = 4 -> 3, ∏ = 0.5 stays
    assert seq.shape == (2, 1) and seq[:, 0].tolist() == pytest.approx([3.0, 0.5])
    assert is_weights(log_ratio, mask, "sequence_mask", None, 3.0)[:, 0].tolist() == pytest.approx([0.0, 0.5])
    with pytest.raises(ValueError, match="unknown IS mode 'tokens'; choose one of"):
        is_weights(log_ratio, mask, "tokens", None, 1.0)


EXPECTED = {  # correction -> (TRL's IS mode or None, μ as π_old)
    "none": (None, False),
    "token_tis": ("token_truncate", False),
    "seq_tis": ("sequence_truncate", False),
    "seq_mis": ("sequence_mask", False),
    "icepop": ("token_mask", False),
    "mu_old": (None, True),
    "opsm": (None, False),  # DeepSeek-V3.2's off-policy sequence mask: no IS weight (tests/rl/test_opsm.py)
}


def test_the_study_needs_every_correction():
    assert set(CORRECTIONS) == set(EXPECTED)


@pytest.mark.parametrize("loss", ["dr_grpo", "grpo", "grpo_token_tis", "grpo_mu_old", "ppo"])
@pytest.mark.parametrize("correction", sorted(EXPECTED))
def test_every_correction_is_selectable_with_any_loss(loss, correction, tmp_path):
    cfg = RLConfig(
        algorithm=loss, correction=correction, is_cap=2.5, icepop_low=0.4, icepop_high=6.0, output_dir=str(tmp_path)
    )
    mode, mu_old = EXPECTED[correction]
    assert (cfg.algo.is_mode, cfg.algo.mu_as_old) == (mode, mu_old)
    assert cfg.algo.trl == algorithms.get(loss).trl and cfg.algo.critic == algorithms.get(loss).critic  # the loss stays
    args = grpo_config(cfg)
    assert args.vllm_importance_sampling_correction == (mode is not None)
    assert args.loss_type == algorithms.get(loss).trl["loss_type"]
    if mode is not None:
        assert args.vllm_importance_sampling_mode == mode
        bounds = (0.4, 6.0) if correction == "icepop" else (None, 2.5)
        assert (args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max) == bounds


def test_without_a_correction_the_preset_keeps_its_own():
    for name, algo in algorithms.ALGORITHMS.items():
        assert resolve(name) == algo and RLConfig(algorithm=name).algo == algo
    assert algorithms.ALGORITHMS["grpo_icepop"].is_mode == "token_mask"
    assert grpo_options(algorithms.get("grpo_icepop"), 2.0)["vllm_importance_sampling_clip_min"] == 0.5


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"correction": "tis"}, r"unknown correction 'tis'; choose one of \('none', 'token_tis'"),
        ({"icepop_low": 5.0, "icepop_high": 0.5}, "icepop_low must be below icepop_high"),
        ({"icepop_low": 0.0}, "icepop_low must be > 0"),
    ],
)
def test_bad_corrections_are_refused_naming_the_choices(kw, message):
    with pytest.raises(ValueError, match=message):
        RLConfig(**kw)


# -- one real step per correction: the weights TRL applied are the stated ones -------------------------------

BAND = (0.998, 1.002)  # narrow: BF16 rollouts put tokens outside it, so IcePop's mask acts
CAP = 1.002


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    """correction -> (metrics row of step 1, the inputs TRL's loss saw) on one batch: same seed, same weights."""
    out = tmp_path_factory.mktemp("corrections")
    seen = {}
    original = GRPOTrainer._compute_loss

    def recording(self, model, inputs):
        seen.setdefault("inputs", {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
        return original(self, model, inputs)

    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(GRPOTrainer, "_compute_loss", recording)
        for correction in EXPECTED:
            seen.clear()
            cfg = RLConfig(
                dataset="data/tiny_arith_sanity",
                algorithm="dr_grpo",
                correction=correction,
                train_dtype="fp32",
                rollout_dtype="bf16",
                max_steps=1,
                prompts_per_step=4,
                num_generations=4,
                max_completion_length=40,
                is_cap=CAP,
                icepop_low=BAND[0],
                icepop_high=BAND[1],
                seed=3,
                output_dir=str(out / correction),
            )
            runs[correction] = (train(cfg, progress=False).rows[0], seen["inputs"])
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("correction", ["token_tis", "seq_tis", "seq_mis", "icepop"])
def test_the_weights_trl_applied_are_the_stated_ones(correction, applied):
    row, inputs = applied[correction]
    mode = EXPECTED[correction][0]
    mask = inputs["completion_mask"]
    lo, hi = BAND if correction == "icepop" else (None, CAP)
    stated = is_weights(inputs["old_per_token_logps"] - inputs["sampling_per_token_logps"], mask, mode, lo, hi)
    assert torch.allclose(inputs["importance_sampling_ratio"], stated, rtol=1e-6, atol=0)
    acted = row["is/masked_token_fraction"] if mode.endswith("mask") else row["is/truncated_token_fraction"]
    assert 0 < acted < 1  # the band/cap is narrow enough that the correction acts, not so narrow that it takes all
    assert row["loss"] != applied["none"][0]["loss"]  # μ entered the loss


@pytest.mark.slow
def test_icepop_masked_exactly_the_out_of_band_tokens_of_a_real_batch(applied):
    row, inputs = applied["icepop"]
    mask = inputs["completion_mask"].bool()
    ratio = torch.exp(inputs["old_per_token_logps"] - inputs["sampling_per_token_logps"])[mask]
    outside = (ratio < BAND[0]) | (ratio > BAND[1])
    assert outside.any() and not outside.all()
    assert torch.equal(inputs["importance_sampling_ratio"][mask] == 0, outside)
    assert row["is/masked_token_fraction"] == pytest.approx(float(outside.float().mean()), abs=1e-12)


@pytest.mark.slow
def test_no_correction_keeps_mu_out_of_the_loss_and_mu_old_puts_it_in_the_clip(applied):
    row, inputs = applied["none"]
    assert "importance_sampling_ratio" not in inputs and inputs.get("old_per_token_logps") is None
    row, inputs = applied["mu_old"]
    assert torch.equal(inputs["old_per_token_logps"], inputs["sampling_per_token_logps"])  # π_old := μ
    assert "importance_sampling_ratio" not in inputs
    for correction in EXPECTED:  # the same batch in every run (rollouts before any update)
        assert applied[correction][0]["reward"] == applied["none"][0]["reward"]
        assert math.isfinite(applied[correction][0]["loss"])
