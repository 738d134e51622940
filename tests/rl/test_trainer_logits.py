"""π only where it is used: the trainer's log-probs (TRL's fused LM head, which projects only the completion positions
whose label is kept) against the full-logits path (every position's 49k- or 18-entry logits, log-softmax, gather),
on a fixed batch: the same log-probs, the same mismatch metrics, the same clipped policy-gradient loss.

Tolerance: both paths run the same layers on the same inputs; only the LM head GEMM (fewer rows) and the log-softmax
(fused and tiled vs one pass) differ, in fp32: log-probs to 1e-5 absolute, the metrics (differences and means of
log-probs) and the loss to 1e-5 absolute or relative."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import torch
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from nbkit.mismatch import mismatch
from nbkit.models import models

TEMPERATURE = 0.9


def _batch(vocab: int, rows: int = 6, prompt: int = 7, completion: int = 9):
    """Left-padded prompts + right-padded completions of different lengths, as TRL lays them out."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, prompt + completion), generator=g)
    mask = torch.ones_like(ids)
    for i in range(rows):
        mask[i, : i % 3] = 0  # left padding of the prompt
        mask[i, prompt + completion - (i % 4) :] = 0  # a completion that ended early
    return ids, mask, completion


def _trainer_logps(model, ids, mask, keep):
    """TRL's own ``_get_per_token_logps_and_entropies`` (what ``PrecisionGRPOTrainer`` calls), on a stand-in self."""
    host = SimpleNamespace(accelerator=SimpleNamespace(autocast=contextlib.nullcontext))
    with torch.no_grad():
        method = GRPOTrainer._get_per_token_logps_and_entropies
        logps, _, _ = getattr(method, "__wrapped__", method)(host, model, ids, mask, keep)  # under TRL's profiler
    return logps


def _full_logps(model, ids, mask, keep):
    """The full-logits path: logits at every position, log-softmax over the vocabulary, the next token gathered."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1] / TEMPERATURE
    logps = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return logps[:, -keep:]


def _clipped_loss(pi, mu, advantages, mask, eps=0.2):
    """GRPO's clipped surrogate with μ as π_old, token-mean over the kept tokens."""
    ratio = torch.exp(pi - mu)
    per_token = -torch.minimum(ratio * advantages[:, None], ratio.clamp(1 - eps, 1 + eps) * advantages[:, None])
    return (per_token * mask).sum() / mask.sum()


def test_fused_completion_only_logps_equal_the_full_logits_path():
    model, _ = models.load("tiny-arith", "fp32")
    model.eval()
    add_fused_lm_head(model, temperature=TEMPERATURE)
    ids, mask, keep = _batch(model.config.vocab_size)
    fused = _trainer_logps(model, ids, mask, keep)
    full = _full_logps(model, ids, mask, keep)
    kept = mask[:, -keep:].bool()
    assert fused.shape == full.shape == kept.shape
    assert torch.allclose(fused[kept], full[kept], rtol=0, atol=1e-5)

    g = torch.Generator().manual_seed(1)
    mu = full + 0.05 * torch.randn(full.shape, generator=g)  # an engine's μ, a little off π
    rows = range(len(ids))
    metrics = {
        name: mismatch.mismatch_metrics(
            [logps[i][kept[i]].double().numpy() for i in rows], [mu[i][kept[i]].double().numpy() for i in rows]
        )
        for name, logps in (("fused", fused), ("full", full))
    }
    assert metrics["fused"].keys() == metrics["full"].keys() and len(metrics["full"]) > 10
    for key, value in metrics["full"].items():  # a slope per 1,000 tokens scales the paths' FP32 rounding by 1,000
        atol = 1e-2 if key.endswith("per_1k_tokens") else 1e-5  # (another CPU's kernels: 1.3e-3 apart, 1.8e-5 rel.)
        assert np.isclose(metrics["fused"][key], value, rtol=1e-5, atol=atol, equal_nan=True), key

    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])
    loss = {
        name: _clipped_loss(logps, mu, advantages, kept.float()) for name, logps in (("fused", fused), ("full", full))
    }
    assert torch.isclose(loss["fused"], loss["full"], rtol=1e-5)
