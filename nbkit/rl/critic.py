"""PPO's critic: a value head on a copy of the policy, initialised from it (as in the paper), with its own
loss scaler under FP16.

The copy shares no tensors with the policy, so the critic's updates never move the policy. Its value head maps the
last hidden state of each token to a scalar; it starts at zero so the first values are 0 and the first advantages
are the outcome reward (γ = λ = 1).

What it learns on tiny-arith (``benchmarks/ppo_critic_ceiling.py`` measures each number; issue 36): on the sanity
set's correctness reward the critic's explained variance stays ≈ 0 (|EV| < 0.01) for 100 steps at every critic
learning rate tried (2e-4 to 1e-3), in the trainer and alone on fixed rollouts. Not a wiring fault: the same critic,
trainer and schedule reach EV > 0.95 within 6 rollout batches when the return is fixed by a prompt token
(``tests/rl/test_ppo_critic_learns.py``). The correctness return is barely predictable from what the critic can read:
the sanity set keeps only problems the model solves 20–80 % of the time, which leaves the prompt ≈ 8 % of the
return's variance to explain (the set's own pass rates, less their sampling noise); a linear probe of the policy's
hidden states explains < 1 %; what is left (≈ 30 % for a critic that knew whether the prefix still matches the
reference solution) needs the critic to learn to check each addition step, which 100 noisy updates do not teach.
With λ = 1 its values only shift the advantage by a per-token baseline, so PPO on this task behaves as REINFORCE
with a learned mean baseline, where GRPO's group mean at least takes out the prompt's share.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from nbkit.records import schema


class Critic(nn.Module):
    """A causal LM's backbone (copied from the policy) plus a scalar value head per token."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.backbone = copy.deepcopy(policy.get_decoder() if hasattr(policy, "get_decoder") else policy.model)
        hidden = policy.config.hidden_size
        self.value_head = nn.Linear(hidden, 1, dtype=next(policy.parameters()).dtype)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Values (batch, tokens) in FP32: the value of the state after each token."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.value_head(hidden).squeeze(-1).float()


def make_scaler(
    device: str | torch.device, train_dtype: str, init_scale: float = 2.0**16, growth_interval: int = 400
) -> torch.amp.GradScaler:
    """The critic's own GradScaler: enabled under FP16 only (BF16 and FP32 need no loss scaling)."""
    dev = torch.device(device).type
    return torch.amp.GradScaler(
        dev, init_scale=init_scale, growth_interval=growth_interval, enabled=train_dtype == "fp16"
    )


def critic_step(
    critic: Critic,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    loss: torch.Tensor,
    max_grad_norm: float,
) -> dict:
    """Backward + unscale + clip + step for the critic; returns its grad norm and loss scale for the step log."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(critic.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return {
        schema.VALUE_GRAD_NORM: float(norm),
        schema.VALUE_LOSS_SCALE: float(scaler.get_scale()) if scaler.is_enabled() else 1.0,
    }
