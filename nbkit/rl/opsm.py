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

The mask itself is TRL's (``GRPOTrainer.get_off_policy_mask``: the same rule, ``tests/rl/test_opsm.py`` holds it to
DeepSeek's formula on a fixed batch); where and on what it is applied is the workbook's, not TRL's
``off_policy_mask_threshold``, for two reasons. TRL's loss compares μ = the engine's log-probs to the
full-vocabulary π; under top-p/top-k the workbook's μ is renormalised over the kept tokens (``processed_logprobs``),
so TRL's per-token KL would carry −log(kept mass) and drop sequences for the sampling filter, not for a precision
gap: here π is put on the filter's support first (``PrecisionGRPOTrainer._on_filter_support``). And the share of
sequences dropped is a metric of the workbook's (``schema.OPSM_MASKED_FRACTION``), which TRL does not log. The mask
is taken once per rollout batch with π of the weights that sampled it: for the GRPO presets (one optimiser step per
rollout batch) that is DeepSeek's current π_θ; for PPO presets (several steps per batch) DeepSeek's and TRL's π_θ
would also count the drift of the later steps, the workbook's counts the rollout's mismatch only.
"""

from __future__ import annotations

import torch
from trl import GRPOTrainer

DEFAULT_DELTA = 0.01
"""δ (nats per token). The workbook's default, reasoned from the dial's range, not taken from DeepSeek (whose value
is not published): a per-token |Δ log p| of 0.1 (near the harm threshold the dose–response points at) with Δ roughly
symmetric, sd σ ≈ 0.125, has a per-token KL(μ‖π) of about σ²/2 ≈ 0.008 and, over 30 tokens, a per-sequence mean that
scatters by σ/√30 ≈ 0.02: δ = 0.01 then drops a good share of the negative-advantage sequences there and none at BF16
(|Δ| ≈ 5e-4 per token on tiny-arith, KL ≈ 2e-7)."""


def keep_mask(
    logp_pi: torch.Tensor, logp_mu: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, delta: float
) -> torch.Tensor:
    """M: 1 where a token's surrogate is kept, 0 where OPSM drops it; the shape of ``advantages`` ((B,) per sequence
    as GRPO's, or (B, T) per token as PPO's GAE). The rule is TRL's own statement of it
    (``GRPOTrainer.get_off_policy_mask``, in FP32; a token μ could not score, NaN, adds no KL)."""
    if not delta > 0:
        raise ValueError(f"the OPSM threshold delta must be > 0 (nats per token), got {delta!r}")
    per_sequence = advantages.dim() == 1
    keep = GRPOTrainer.get_off_policy_mask(
        advantages=advantages.unsqueeze(-1) if per_sequence else advantages,
        per_token_logps=logp_pi.float(),
        sampling_per_token_logps=logp_mu.float(),
        mask=mask.float(),
        off_policy_threshold=delta,
    )
    return (keep.squeeze(-1) if per_sequence else keep).to(advantages.dtype)


def apply(batch: dict, logp_pi: torch.Tensor, delta: float) -> tuple[dict, int]:
    """``batch`` with OPSM applied (the dropped tokens' advantage set to 0) and the number of sequences it dropped
    (a sequence with any dropped token counts)."""
    adv = batch["advantages"]
    keep = keep_mask(logp_pi, batch["sampling_per_token_logps"], adv, batch["completion_mask"], delta)
    dropped = (keep == 0) if keep.dim() == 1 else ((keep == 0) & batch["completion_mask"].bool()).any(-1)
    return {**batch, "advantages": adv * keep}, int(dropped.sum())
