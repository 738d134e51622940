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
        max_steps=1,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
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


def test_the_trainers_kept_mass_forward_never_holds_the_rows_full_logits(monkeypatch):
    """Issue 54, item 6: ``_log_kept_mass`` used to build FP32 logits of ``batch_size`` rows at once (≈ 120 GB for
    16 sequences of 8,193 positions and a 151,936-entry vocabulary); its peak now stays below one FP32 copy of
    them: a third or less of what one forward of those rows with full logits holds; its result is the full
    computation's."""
    import contextlib
    from types import SimpleNamespace

    from transformers import Qwen2Config, Qwen2ForCausalLM

    from nbkit.mismatch import sampling_filter

    torch.manual_seed(0)
    vocab, rows, width = 4096, 4, 96
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
        )
    ).eval()
    monkeypatch.setattr(sampling_filter, "HEAD_CHUNK", 32)  # positions per chunk, scaled to this tiny batch
    trainer = PrecisionGRPOTrainer.__new__(PrecisionGRPOTrainer)
    trainer.accelerator = SimpleNamespace(unwrap_model=lambda m: m, autocast=contextlib.nullcontext)
    trainer.run, trainer._routing = SimpleNamespace(router_replay=False), None
    trainer.temperature, trainer.pi_filter = TEMPERATURE, {"top_k": 0, "top_p": TOP_P}
    trainer._filter_seconds = trainer._mismatch_seconds = 0.0
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (2 * rows, 8 + width), generator=g)
    attn = torch.ones_like(ids)
    from tests.mismatch.test_sampling_filter import peak_activation_bytes as peak_of

    result = {}
    peak = peak_of(lambda: result.setdefault("chunked", trainer._log_kept_mass(model, ids, attn, width, rows)))

    def full_logits():  # what the kept-mass forward did per ``batch_size`` rows before
        with torch.no_grad():
            logits = model(input_ids=ids[:rows], attention_mask=attn[:rows], logits_to_keep=width + 1).logits
            sampling_filter.log_kept_mass(
                logits[:, :-1].reshape(-1, vocab), ids[:rows, -width:].reshape(-1), TEMPERATURE, 0, TOP_P
            )

    before = peak_of(full_logits)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=width + 1).logits[:, :-1]
    full = sampling_filter.log_kept_mass(
        logits.reshape(-1, vocab), ids[:, -width:].reshape(-1), TEMPERATURE, 0, TOP_P
    ).view(2 * rows, width)
    torch.testing.assert_close(result["chunked"], full, rtol=0, atol=1e-5)
    assert peak < before / 3, (peak, before)
