"""What a long run watches as it goes: a collapse alarm, non-finite detection (its metric rows:
``nbkit.records.runlog``)."""

from __future__ import annotations

import math

import torch


class NonFiniteError(RuntimeError):
    """A NaN or inf where training cannot go on; the message names the step and the tensor."""


class CollapseAlarm:
    """Fires when the π–μ mismatch grows by a factor over the run, or the reward drops from its best window."""

    def __init__(
        self,
        window: int,
        mismatch_factor: float,
        reward_drop: float,
        mismatch_key: str = "mismatch/token_abs_logp_diff/mean",
        reward_key: str = "reward",
    ):
        self.window, self.factor, self.drop = window, mismatch_factor, reward_drop
        self.mismatch_key, self.reward_key = mismatch_key, reward_key
        self.mismatch: list[float] = []
        self.reward: list[float] = []
        self.best_reward = -math.inf

    def update(self, row: dict) -> str | None:
        """Feed one step's row; returns the alarm message when it fires."""
        if self.mismatch_key in row:
            self.mismatch.append(float(row[self.mismatch_key]))
        if self.reward_key in row:
            self.reward.append(float(row[self.reward_key]))
        w = self.window
        msgs = []
        if len(self.mismatch) >= 2 * w:
            first, last = _mean(self.mismatch[:w]), _mean(self.mismatch[-w:])
            if first > 0 and last > self.factor * first:
                msgs.append(f"mismatch grew {last / first:.1f}x (first {w} steps {first:.3g} -> last {w} {last:.3g})")
        if len(self.reward) >= w:
            latest = _mean(self.reward[-w:])
            self.best_reward = max(self.best_reward, latest)
            if self.best_reward - latest > self.drop:
                msgs.append(
                    f"reward fell {self.best_reward - latest:.2f} below its best {w}-step mean "
                    f"({self.best_reward:.2f} -> {latest:.2f})"
                )
        return "; ".join(msgs) or None


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def first_non_finite(model: torch.nn.Module) -> str | None:
    """Name of the first parameter holding a NaN or inf on this process (None when all are finite).

    Under DeepSpeed ZeRO-3 a parameter outside its forward is an empty placeholder and this process's shard lives
    in ``ds_tensor``: that shard is checked (every process checks its own; the trainer gathers the verdicts)."""
    for name, p in model.named_parameters():
        shard = getattr(p, "ds_tensor", None)
        data = shard if shard is not None and p.numel() == 0 else p
        if not torch.isfinite(data).all():
            return name
    return None
