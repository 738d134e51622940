"""DeepSeek-V3.2's off-policy sequence mask (OPSM): drop the negative-advantage sequences the sampler was far from.

DeepSeek-V3.2's GRPO multiplies each token's clipped surrogate by M_{i,t} = 0 when both

    Â_{i,t} < 0   and   (1/|o_i|) Σ_t log(μ(o_{i,t}) / π_θ(o_{i,t})) > δ,

and 1 otherwise: μ the inference engine's probability of the sampled token, π_θ the trainer's. The left of the
second condition is the sequence's per-token estimate of KL(μ‖π) (the k1 estimator averaged over its tokens), so δ
is in nats per token and the mask does not grow stricter with length. Positive-advantage sequences are never
dropped; DeepSeek's reason for dropping the others: a model learns from its own mistakes, but negative samples far
off its own policy can mislead and destabilise it. (ms-swift exposes it as
``off_policy_sequence_mask_delta``, with μ the rollout log-probs, as here.)

The surrogate is proportional to the advantage, so M = 0 is the same as an advantage of 0 on those tokens: that is
how ``apply`` masks, leaving the completion mask (and with it every mismatch metric and the loss's normaliser, as in
DeepSeek's formula) as it was. A KL penalty to a reference (β > 0) stays, as in DeepSeek's objective.
"""

from __future__ import annotations

import torch

DEFAULT_DELTA = 0.01
"""δ (nats per token). The workbook's default, reasoned from the dial's range, not taken from DeepSeek (whose value
is not published): a per-token |Δ log p| of 0.1 (near the harm threshold the dose–response points at) with Δ roughly
symmetric, sd σ ≈ 0.125, has a per-token KL(μ‖π) of about σ²/2 ≈ 0.008 and, over 30 tokens, a per-sequence mean that
scatters by σ/√30 ≈ 0.02: δ = 0.01 then drops a good share of the negative-advantage sequences there and none at BF16
(|Δ| ≈ 5e-4 per token on tiny-arith, KL ≈ 2e-7)."""


def sequence_kl(logp_pi: torch.Tensor, logp_mu: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence mean over its completion tokens of log μ − log π (B,): the k1 estimate of KL(μ‖π) per token."""
    m = mask.to(logp_pi.dtype)
    return ((logp_mu - logp_pi) * m).sum(-1) / m.sum(-1).clamp(min=1)


def keep_mask(
    logp_pi: torch.Tensor, logp_mu: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, delta: float
) -> torch.Tensor:
    """M: 1 where a token's surrogate is kept, 0 where OPSM drops it; the shape of ``advantages`` ((B,) per sequence
    as GRPO's, or (B, T) per token as PPO's GAE)."""
    if not delta > 0:
        raise ValueError(f"the OPSM threshold delta must be > 0 (nats per token), got {delta!r}")
    far = sequence_kl(logp_pi.float(), logp_mu.float(), mask) > delta
    far = far if advantages.dim() == 1 else far.unsqueeze(-1)
    return (~(far & (advantages < 0))).to(advantages.dtype)


def apply(batch: dict, logp_pi: torch.Tensor, delta: float) -> tuple[dict, int]:
    """``batch`` with OPSM applied (the dropped tokens' advantage set to 0) and the number of sequences it dropped
    (a sequence with any dropped token counts)."""
    adv = batch["advantages"]
    keep = keep_mask(logp_pi, batch["sampling_per_token_logps"], adv, batch["completion_mask"], delta)
    dropped = (keep == 0) if keep.dim() == 1 else ((keep == 0) & batch["completion_mask"].bool()).any(-1)
    return {**batch, "advantages": adv * keep}, int(dropped.sum())
