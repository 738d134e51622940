"""IS under sampling filters: an engine's processed log-probs (top-p/top-k) are renormalised over the kept tokens;
π scored under the same filter makes the IS ratio's mean ≈ 1 when π = μ, where the unfiltered π gives the kept mass."""

import numpy as np
import pytest
import torch

from nbkit import mismatch, models, sampling_filter
from nbkit.engines import HFEngine, SamplingConfig
from nbkit.tasks import arith


def test_filtered_logprobs_renormalise_over_the_kept_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top2 = sampling_filter.token_logprobs(logits, torch.tensor([1]), top_k=2)
    assert float(top2.exp()) == pytest.approx(0.3 / 0.8)
    nucleus = sampling_filter.token_logprobs(logits, torch.tensor([0]), top_p=0.7)  # keeps {0.5, 0.3}
    assert float(nucleus.exp()) == pytest.approx(0.5 / 0.8)
    kept_anyway = sampling_filter.token_logprobs(logits, torch.tensor([3]), top_p=0.7)  # sampled: stays finite
    assert float(kept_anyway.exp()) == pytest.approx(0.05 / 0.85)
    assert float(sampling_filter.kept_mass(logits, torch.tensor([0]), top_p=0.7)) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="top_p must be in"):
        sampling_filter.token_logprobs(logits, torch.tensor([0]), top_p=1.5)


def test_is_ratio_mean_is_one_under_top_p_when_pi_equals_mu():
    model, tok = models.load("tiny-arith", "fp32")
    engine = HFEngine(model, "fp32", tokenizer=tok, progress=False)
    top_p, temperature = 0.6, 1.5  # a wide distribution, so the nucleus drops real mass
    sampling = SamplingConfig(
        max_tokens=40, n=4, top_p=top_p, temperature=temperature, seed=3, logprobs_mode="processed_logprobs"
    )
    rollouts = engine.generate([p["problem"] for p in arith.make_problems(8, seed=2)], sampling)
    mu = [np.asarray(r.logprobs) for r in rollouts]
    filtered = mismatch.teacher_forced_logprobs(model, rollouts, temperature=temperature, top_p=top_p)
    raw = mismatch.teacher_forced_logprobs(model, rollouts, temperature=temperature)
    ratio = mismatch.is_ratio_stats(filtered, mu)["sampling/importance_sampling_ratio/mean"]
    assert ratio == pytest.approx(1.0, abs=1e-5)  # π = μ: the same filter on both sides
    biased = mismatch.is_ratio_stats(raw, mu)["sampling/importance_sampling_ratio/mean"]
    kept = np.mean(np.exp(np.concatenate(raw) - np.concatenate(filtered)))
    assert biased < 0.99 and biased == pytest.approx(kept, rel=1e-6)  # the unfiltered π: ratio = kept mass
