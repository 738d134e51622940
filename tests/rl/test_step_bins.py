"""Per-step token bins of the mismatch (``nbkit.rl.bins``, keys of ``nbkit.mismatch.tokenbins``): binned by π's entropy
and by
π's probability of the sampled token, padding left out, logged on every step of a run and consistent with the
headline mismatch and the response length."""

from __future__ import annotations

import math

import pytest
import torch

from nbkit.mismatch import tokenbins
from nbkit.records import schema
from nbkit.rl import RLConfig, train
from nbkit.rl.bins import StepBins


def test_a_hand_built_batch_lands_in_the_bins_it_belongs_to():
    # two completions of widths 3 and 2 (one padding slot), π's probabilities and entropies chosen per token
    p = torch.tensor([[0.3, 0.95, 0.9995], [0.7, 0.995, 0.5]])
    ent = torch.tensor([[2.0, 0.05, 1e-4], [0.7, 5e-3, 9.0]])
    mu = p.log() - torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 7.0]])  # |Δ| per token; the padding slot's is 7
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    bins = StepBins()
    bins.add(p.log(), ent, mu, mask)
    row = bins.take()
    assert row[tokenbins.SEQUENCES] == 2 and row[tokenbins.RESPONSE_LENGTH] == 2.5
    prob_tokens = [row[tokenbins.tokens_key("prob", i)] for i in range(tokenbins.n_bins("prob"))]
    assert prob_tokens == [1, 1, 1, 1, 1]  # 0.3 | 0.7 | 0.95 | 0.995 | 0.9995
    ent_tokens = [row[tokenbins.tokens_key("entropy", i)] for i in range(tokenbins.n_bins("entropy"))]
    assert ent_tokens == [1, 1, 1, 0, 1, 1]  # 1e-4 | 5e-3 | 0.05 | – | 0.7 | 2.0 (the padding's 9.0 left out)
    assert row[tokenbins.mismatch_key("prob", 4)] == pytest.approx(0.3)
    assert row[tokenbins.mismatch_key("entropy", 5)] == pytest.approx(0.1)
    assert tokenbins.mismatch_key("entropy", 3) not in row  # an empty bin has no mean
    assert bins.take() == {}  # take resets


def test_loss_forwards_of_one_step_add_up():
    bins = StepBins()
    one = (torch.tensor([[-0.1, -2.0]]), torch.tensor([[0.0, 3.0]]), torch.tensor([[-0.2, -2.5]]), torch.ones(1, 2))
    bins.add(*one)
    bins.add(*one)
    row = bins.take()
    assert row[tokenbins.SEQUENCES] == 2 and row[tokenbins.tokens_key("prob", 0)] == 2
    assert row[tokenbins.mismatch_key("prob", 0)] == pytest.approx(0.5)


def test_every_step_of_a_run_logs_bins_that_add_up_to_its_mismatch_and_length(tmp_path, tiny_random_model, arith_jsonl):
    cfg = RLConfig(
        model=tiny_random_model,
        dataset=arith_jsonl,
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=12,
        algorithm="dr_grpo",
        rollout_dtype="bf16",
        output_dir=str(tmp_path / "run"),
    )
    rows = train(cfg, progress=False).rows
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row[tokenbins.SEQUENCES] == 4
        for binning in tokenbins.EDGES:
            k = tokenbins.n_bins(binning)
            tokens = [row[tokenbins.tokens_key(binning, i)] for i in range(k)]
            assert sum(tokens) == pytest.approx(row[tokenbins.SEQUENCES] * row[tokenbins.RESPONSE_LENGTH])
            weighted = sum(t * row.get(tokenbins.mismatch_key(binning, i), 0.0) for i, t in enumerate(tokens))
            # π of the loss forward is the π of the headline mismatch (one update per batch, no IS correction)
            assert weighted / sum(tokens) == pytest.approx(row[schema.TOKEN_ABS_LOGP_DIFF], rel=1e-6)
        assert all(schema.known(k) for k in tokenbins.all_keys())
        assert math.isfinite(row[tokenbins.RESPONSE_LENGTH])
