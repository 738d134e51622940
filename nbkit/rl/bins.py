"""Per-step token bins of the π–μ mismatch (``nbkit.mismatch.tokenbins``), from what the loss forward already computed.

The loss forward of ``PrecisionGRPOTrainer`` gives π's log-probability of every completion token and π's entropy
there (TRL computes it for its ``entropy`` metric); the batch carries μ. ``StepBins.add`` bins each real completion
token by that entropy and by π's probability of the token and adds its |log π − log μ| to its bins; ``take`` sums
the step's bins over all processes and returns the row keys, ready for ``metrics.jsonl``. The cost is a few
bucketize/bincount calls on (B, T) tensors per loss forward and one small all-reduce per step.

π here is the loss forward's: with one optimiser update per rollout batch (the GRPO presets) it is the policy that
μ sampled from, so the bins hold the rollout mismatch; with PPO's later epochs (π updated since the rollout) they
hold π's distance from μ after those updates, as ``clip/*`` does. Under top-p/top-k, π is put on the filter's
support first (the trainer's ``_on_filter_support``), as for the headline mismatch.
"""

from __future__ import annotations

import time

import torch

from nbkit.mismatch import tokenbins


class StepBins:
    """Accumulates one step's bins over its loss forwards."""

    def __init__(self):
        self._inner = {b: torch.tensor(e[1:-1], dtype=torch.float64) for b, e in tokenbins.EDGES.items()}
        self._sums: torch.Tensor | None = None
        self.seconds = 0.0
        """Seconds spent in ``add`` and ``take`` since the start (the bins' own cost)."""

    def _width(self) -> int:
        return 2 + 2 * sum(tokenbins.n_bins(b) for b in tokenbins.EDGES)

    @torch.no_grad()
    def add(self, logp_pi: torch.Tensor, entropies: torch.Tensor, logp_mu: torch.Tensor, mask: torch.Tensor) -> None:
        """Bin the real tokens (``mask``) of one loss forward: π's log-probs, π's entropies, μ's log-probs, all (B, T)."""
        start = time.perf_counter()
        real = mask.bool()
        diff = (logp_pi.double() - logp_mu.double()).abs()[real]
        by = {"entropy": entropies.double()[real], "prob": logp_pi.double().exp()[real]}
        parts = [torch.tensor([float(real.size(0)), float(real.sum())], dtype=torch.float64, device=diff.device)]
        for name, x in by.items():
            k = tokenbins.n_bins(name)
            idx = torch.bucketize(x, self._inner[name].to(x.device), right=True)
            parts += [torch.bincount(idx, minlength=k).double(), torch.bincount(idx, weights=diff, minlength=k)]
        row = torch.cat(parts)
        self._sums = row if self._sums is None else self._sums + row
        self.seconds += time.perf_counter() - start

    def take(self, accelerator=None) -> dict:
        """The step's row keys (summed over processes through ``accelerator.reduce``), then reset; {} when no loss
        forward was binned this step."""
        start = time.perf_counter()
        sums, self._sums = self._sums, None
        if accelerator is not None:  # every rank calls take (end of step), so the reduce never waits alone
            local = sums if sums is not None else torch.zeros(self._width(), dtype=torch.float64)
            total = accelerator.reduce(local.to(accelerator.device), "sum").cpu()
            sums = total if total[0] > 0 else None
        if sums is None:
            return {}
        values = sums.cpu().tolist()
        row = {tokenbins.SEQUENCES: int(values[0]), tokenbins.RESPONSE_LENGTH: values[1] / values[0]}
        at = 2
        for name in tokenbins.EDGES:
            k = tokenbins.n_bins(name)
            counts, total = values[at : at + k], values[at + k : at + 2 * k]
            at += 2 * k
            for i in range(k):
                row[tokenbins.tokens_key(name, i)] = int(counts[i])
                if counts[i]:
                    row[tokenbins.mismatch_key(name, i)] = total[i] / counts[i]
        self.seconds += time.perf_counter() - start
        return row
