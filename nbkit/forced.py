"""Teacher-forced *decoding*: log p of given responses computed the way an engine computes μ, token by token.

``nbkit.mismatch.teacher_forced_logprobs`` scores a response with one full-sequence forward (what a trainer does).
An engine instead decodes: the prompt is prefilled into a KV cache, then every token is one incremental forward
with the cache, in a left-padded batch of whatever requests run together. ``decode_logprobs`` runs exactly that
path (transformers ``generate``, as the workbook's HF engine does) while forcing the given tokens: a logits
processor reads the log-softmax of the forced token, then leaves only that token possible, so greedy decoding
follows the response. Same model, same batch (order and size) and same GEMM policy reproduce the HF engine's μ
bit for bit; batch size 1 gives each sequence alone (the batch-invariance question).
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import numpy as np
import torch


class ForcedTokens:
    """A logits processor that records log p of the forced token at each step and forces it."""

    def __init__(self, targets: torch.Tensor, pad_id: int):
        self.targets, self.pad_id, self.step = targets, pad_id, 0
        self.picked: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        k = self.step
        self.step += 1
        target = self.targets[:, k].to(scores.device) if k < self.targets.size(1) else \
            torch.full((scores.size(0),), self.pad_id, device=scores.device)
        self.picked.append(scores.float().log_softmax(-1).gather(-1, target[:, None])[:, 0])
        forced = torch.full_like(scores, float("-inf"))
        forced[torch.arange(scores.size(0), device=scores.device), target] = 0.0
        return forced


@torch.no_grad()  # not inference_mode: the GEMM policy's dispatch mode must see the tensors (nbkit.gemm)
def decode_logprobs(model, tokenizer, rollouts: Sequence, batch_size: int = 64, gemm: str = "auto") -> list[np.ndarray]:
    """log p of every response token of ``rollouts`` by KV-cache decoding in ``model``'s own dtype, batches of
    ``batch_size`` in the given order (left-padded prompts, as ``nbkit.engines.HFEngine``); float64 arrays."""
    from transformers import GenerationConfig

    from nbkit import gemm as gemm_policies

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    gemm_policies.validate(gemm)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[np.ndarray] = []
    for start in range(0, len(rollouts), batch_size):
        chunk = rollouts[start:start + batch_size]
        width = max(len(r.prompt_ids) for r in chunk)
        steps = max(len(r.token_ids) for r in chunk)
        if steps == 0:
            out += [np.zeros(0) for _ in chunk]
            continue
        ids = torch.tensor([[pad] * (width - len(r.prompt_ids)) + list(r.prompt_ids) for r in chunk])
        mask = torch.tensor([[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids) for r in chunk])
        targets = torch.tensor([list(r.token_ids) + [pad] * (steps - len(r.token_ids)) for r in chunk])
        forced = ForcedTokens(targets, pad)
        # no min_new_tokens: its processor would mask the end token before this one reads the scores; a row may
        # end early (its stop token or a pad equal to it) only after its own last response token
        cfg = GenerationConfig(do_sample=False, max_new_tokens=steps, pad_token_id=pad, return_dict_in_generate=True)
        policy = gemm_policies.policy(gemm, model.device) if gemm != "native" else contextlib.nullcontext()
        with policy:
            model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                           generation_config=cfg, logits_processor=[forced])
        picked = torch.stack(forced.picked, dim=1).double().cpu().numpy()
        out += [picked[row, :len(r.token_ids)].copy() for row, r in enumerate(chunk)]
    return out
