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

What the critic can read (``RLConfig.critic_input``, issue 50): by default the last hidden state only. With
``hidden+min_logp`` its value also adds a learned number per bin of the lowest log π among the completion's tokens
before the state (``running_min_logp``; bins ``MIN_LOGP_EDGES``): the same benchmark finds E[R | that bin] explains
≈ 27 % of the correctness return on held-out rollouts, a feature the hidden state does not expose to a linear head.
Whether a critic given it reaches EV > 0.2 at the end of real PPO runs is the pre-registered
``nbkit.studies.ppo_critic`` (its verdict is on the PPO page of RESULTS.md).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from nbkit.records import schema
from nbkit.rl.gae import explained_variance

INPUTS = ("hidden", "hidden+min_logp")
"""What the value of a state reads (``RLConfig.critic_input``): the last hidden state only, or that plus the running
minimum of the policy's log-probabilities of the completion's tokens so far."""

MIN_LOGP_EDGES = (-5.0, -3.0, -2.0, -1.0, -0.5, -0.2, -0.05)
"""Bin edges of the running minimum of log π (``torch.bucketize``: bin i holds edges[i-1] < x ≤ edges[i], 8 bins):
those of ``benchmarks/ppo_critic_ceiling.py``'s E[R | lowest log π so far]. A state before any completion token has
minimum 0, the last bin."""


def running_min_logp(logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) → (B, T): at completion position t, the lowest of ``logps[:, :t]`` over the mask (0 at t = 0, and
    where no earlier token is on the mask), detached, FP32: what is known of the sequence's surprise before token t,
    i.e. at the state whose value the critic gives for position t."""
    x = logps.detach().float().masked_fill(~mask.bool(), 0.0)
    low = x.cummin(dim=1).values.clamp(max=0.0)
    return torch.cat([torch.zeros_like(low[:, :1]), low[:, :-1]], dim=1)


def bin_means_ev(min_logp: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """Explained variance (``nbkit.rl.gae.explained_variance``, over the mask's tokens) of ``returns`` by their own
    mean within each ``MIN_LOGP_EDGES`` bin of ``min_logp``: what the best table of the bins reaches on this very
    batch (fitted in sample, so a ceiling for the critic's table, which must predict the batch before seeing it)."""
    bins = torch.bucketize(min_logp.float().cpu(), torch.tensor(MIN_LOGP_EDGES))
    m, r = mask.bool().cpu(), returns.float().cpu()
    n = len(MIN_LOGP_EDGES) + 1
    sums = torch.zeros(n).index_add_(0, bins[m], r[m])
    means = sums / torch.bincount(bins[m], minlength=n).clamp(min=1)
    return float(explained_variance(means[bins] * m, r, m))


class Critic(nn.Module):
    """A causal LM's backbone (copied from the policy) plus a scalar value head per token; with ``inputs``
    ``hidden+min_logp`` also a table of values per bin of the running minimum of log π (``feature_values``)."""

    def __init__(self, policy: nn.Module, inputs: str = "hidden", checkpointing: dict | None = None):
        """``checkpointing``: the Trainer's ``gradient_checkpointing_kwargs`` (``{}`` for its defaults) to checkpoint
        the backbone's layers as the Trainer checkpoints π's, or None for none. The Trainer turns π's on only when
        ``train()`` starts, after this copy is made, so the copy never inherits it."""
        super().__init__()
        if inputs not in INPUTS:
            raise ValueError(f"critic input {inputs!r} is not one of {', '.join(INPUTS)}")
        self.inputs = inputs
        self.backbone = copy.deepcopy(policy.get_decoder() if hasattr(policy, "get_decoder") else policy.model)
        if checkpointing is not None:
            kwargs = dict(checkpointing)  # split as transformers' Trainer splits them
            every, offload = kwargs.pop("every_n_layers", 1), kwargs.pop("offload", False)
            self.backbone.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs=kwargs or None, every_n_layers=every, offload=offload
            )
        hidden = policy.config.hidden_size
        self.value_head = nn.Linear(hidden, 1, dtype=next(policy.parameters()).dtype)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        if inputs == "hidden+min_logp":  # FP32 and zero: the first values are still 0
            self.min_logp_values = nn.Parameter(torch.zeros(len(MIN_LOGP_EDGES) + 1))
            self.register_buffer("min_logp_edges", torch.tensor(MIN_LOGP_EDGES), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Values (batch, tokens) in FP32 from the hidden state: the value of the state after each token."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.value_head(hidden).squeeze(-1).float()

    def feature_values(self, min_logp: torch.Tensor) -> torch.Tensor:
        """The table's value (FP32) for each state's running minimum of log π (``running_min_logp``), to add to
        ``forward``'s values of the same states. Only with ``hidden+min_logp``."""
        return self.min_logp_values[torch.bucketize(min_logp.float(), self.min_logp_edges)]

    def feature_parameters(self) -> list[nn.Parameter]:
        """The table's parameters (their own learning rate, ``RLConfig.critic_feature_lr``); [] with ``hidden``."""
        return [self.min_logp_values] if self.inputs == "hidden+min_logp" else []


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
