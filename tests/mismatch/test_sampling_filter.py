"""IS under sampling filters: an engine's processed log-probs (top-p/top-k) are renormalised over the kept tokens;
π scored under the same filter makes the IS ratio's mean ≈ 1 when π = μ, where the unfiltered π gives the kept mass."""

import numpy as np
import pytest
import torch

from nbkit.engines import HFEngine, SamplingConfig
from nbkit.mismatch import mismatch, sampling_filter
from nbkit.models import models
from nbkit.models.toymodels import arith


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


@pytest.mark.parametrize("top_k,top_p", [(0, 0.7), (5, 1.0), (7, 0.8)])
def test_the_kept_mass_in_chunks_equals_the_full_computation(top_k, top_p):
    """Issue 54, item 6: the kept mass of ``n`` positions, their logits built ``chunk`` at a time, is the kept mass
    of the full ``[n, vocab]`` logits."""
    g = torch.Generator().manual_seed(0)
    hidden, head = torch.randn(53, 16, generator=g), torch.nn.Linear(16, 40)
    torch.nn.init.normal_(head.weight, generator=g, std=0.7)
    tokens = torch.randint(0, 40, (53,), generator=g)
    full = sampling_filter.log_kept_mass(head(hidden), tokens, 1.3, top_k, top_p)
    with torch.no_grad():
        chunked = sampling_filter.log_kept_mass_chunked(hidden, head, tokens, 1.3, top_k, top_p, chunk=8)
    assert full.min() < -0.01  # the filter drops real mass: the check compares something
    torch.testing.assert_close(chunked, full.detach(), rtol=0, atol=1e-6)


def _tiny_qwen2(vocab=512):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return Qwen2ForCausalLM(cfg).eval()


def peak_activation_bytes(fn) -> int:
    """Peak bytes of tensors alive at once while ``fn`` runs, parameters and buffers left out (torch's own
    ``MemTracker``, one root call around ``fn``)."""
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    PARAM, BUFFER = _MemRefType.PARAM, _MemRefType.BUFFER

    class Root(torch.nn.Module):
        def forward(self):
            fn()

    tracker = MemTracker()
    with tracker:
        Root()()
    return sum(v["Total"] - v[PARAM] - v[BUFFER] for v in tracker.get_tracker_snapshot("peak").values())


def test_the_models_head_gives_the_kept_mass_in_chunks_without_its_full_logits():
    """``KeptMassHead`` inside a whole-model forward: the same kept mass as the model's full logits, and a peak
    a third or less of the same forward with full logits (what the trainer's kept-mass forward did per batch of rows)."""
    model, vocab = _tiny_qwen2(4096), 4096
    g = torch.Generator().manual_seed(2)
    rows, width, prompt = 4, 96, 8
    ids = torch.randint(0, vocab, (rows, prompt + width), generator=g)
    attn = torch.ones_like(ids)
    tokens = ids[:, -width:]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=width + 1).logits[:, :-1]
        full = sampling_filter.log_kept_mass(logits.reshape(-1, vocab), tokens.reshape(-1), 1.5, 0, 0.6).view(rows, -1)
        head = sampling_filter.KeptMassHead(model.get_output_embeddings(), tokens, 1.5, top_p=0.6, chunk=16)
        with head:
            out = model(input_ids=ids, attention_mask=attn, logits_to_keep=width + 1)
        assert out.logits.shape[1] == 0  # the model built no logits of its own
        torch.testing.assert_close(head.value, full, rtol=0, atol=1e-5)

        def chunked():
            with sampling_filter.KeptMassHead(model.get_output_embeddings(), tokens, 1.5, top_p=0.6, chunk=16):
                model(input_ids=ids, attention_mask=attn, logits_to_keep=width + 1)

        def full_logits():
            logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=width + 1).logits[:, :-1]
            sampling_filter.log_kept_mass(logits.reshape(-1, vocab), tokens.reshape(-1), 1.5, 0, 0.6)

        peak, before = peak_activation_bytes(chunked), peak_activation_bytes(full_logits)
    assert peak < before / 3, (peak, before)
    assert not model.get_output_embeddings()._forward_pre_hooks  # nothing left on the model
