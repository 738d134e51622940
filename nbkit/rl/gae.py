"""PPO's per-token quantities: GAE advantages from a critic's values and an outcome reward, the clipped value loss, and
the diagnostics PPO users read (approx KL, clip fraction, explained variance). The policy loss is TRL's
(``nbkit.rl.algorithms``: the ``ppo`` loss), so none is written here.

Pure tensor functions (no model, no trainer) so they can be checked against hand-computed cases; the PPO trainer
wiring (issue 11) builds on them. Shapes are ``(batch, tokens)`` with a 0/1 ``mask`` of completion tokens.
"""

from __future__ import annotations

import torch


def gae(
    values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation with the outcome reward on each sequence's last completion token.

    ``values`` (B, T): the critic's value per token; ``rewards`` (B,): the outcome reward; ``mask`` (B, T): 1 on
    completion tokens (left-aligned, no holes). Returns ``(advantages, returns)``, both (B, T), zero off the mask;
    ``returns = advantages + values`` are the critic's targets. The value after the last token is 0 (episode end).
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must be in [0, 1], got {lam!r}")
    values, mask = values.float(), mask.float()
    lengths = mask.sum(1).long()
    token_rewards = torch.zeros_like(values)
    has = lengths > 0
    rows = torch.arange(values.shape[0])[has]
    token_rewards[rows, lengths[has] - 1] = rewards.float()[has]
    values = values * mask
    adv = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        last = t + 1 == values.shape[1]
        next_value = 0.0 if last else values[:, t + 1]  # 0 past a sequence's end: values are masked
        next_adv = 0.0 if last else adv[:, t + 1]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        adv[:, t] = (delta + gamma * lam * next_adv) * mask[:, t]
    return adv, (adv + values) * mask


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip: float = 0.2
) -> torch.Tensor:
    """PPO's clipped value loss: ``0.5 * max((v - R)^2, (clip(v, v_old ± clip) - R)^2)`` averaged over tokens."""
    if not clip > 0:
        raise ValueError(f"value_clip must be > 0, got {clip!r}")
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    per_token = 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return masked_mean(per_token, mask)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the tokens of ``mask`` (0 on an empty mask, never NaN)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1)


def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(π_old ‖ π) by the low-variance estimator ``(r - 1) - log r``, r = π/π_old (the paper's exploding KL)."""
    log_ratio = logp - old_logp
    return masked_mean(log_ratio.exp() - 1 - log_ratio, mask)


def clip_fraction(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, eps: float = 0.2) -> torch.Tensor:
    """Share of tokens whose ratio π/π_old lies outside ``[1 - eps, 1 + eps]``."""
    ratio = (logp - old_logp).exp()
    return masked_mean(((ratio - 1).abs() > eps).float(), mask)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``1 - Var(R - v) / Var(R)`` over the mask: 1 = the critic predicts the returns, <= 0 = no better than a mean."""
    m = mask.bool()
    r, v = returns[m].float(), values[m].float()
    var = r.var(unbiased=False)
    return torch.tensor(float("nan")) if var == 0 else 1 - (r - v).var(unbiased=False) / var
