"""Teacher-forced *decoding*: log p of given responses computed the way an engine computes μ, token by token.

``nbkit.mismatch.mismatch.teacher_forced_logprobs`` scores a response with one full-sequence forward (what a trainer
does).
An engine instead decodes: the prompt is prefilled into a KV cache, then every token is one incremental forward
with the cache, in a left-padded batch of whatever requests run together. ``decode_logprobs`` runs exactly that
path (transformers ``generate``, as the workbook's HF engine does) while forcing the given tokens: a logits
processor reads the log-softmax of the forced token, then leaves only that token possible, so greedy decoding
follows the response. Same model, same batch (order and size) and same GEMM policy reproduce the HF engine's μ
bit for bit; batch size 1 gives each sequence alone (the batch-invariance question).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch

from nbkit.precision import gemm as gemm_policies
from nbkit.precision import lm_head


class ForcedTokens:
    """A logits processor that records log p of the forced token at each step and forces it."""

    def __init__(self, targets: torch.Tensor, pad_id: int):
        self.targets, self.pad_id, self.step = targets, pad_id, 0
        self.picked: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        k = self.step
        self.step += 1
        target = (
            self.targets[:, k].to(scores.device)
            if k < self.targets.size(1)
            else torch.full((scores.size(0),), self.pad_id, device=scores.device)
        )
        self.picked.append(scores.float().log_softmax(-1).gather(-1, target[:, None])[:, 0])
        self.target = target
        forced = torch.full_like(scores, float("-inf"))
        forced[torch.arange(scores.size(0), device=scores.device), target] = 0.0
        return forced


class OtherHeads:
    """A logits processor (after ``ForcedTokens``) recording log p of the forced token under other LM heads, applied
    to the hidden state the model's own head received in this step; it changes nothing."""

    def __init__(self, forced: ForcedTokens, heads: dict, head: torch.nn.Module):
        self.forced, self.heads = forced, heads
        self.picked: dict[str, list[torch.Tensor]] = {name: [] for name in heads}
        self.hidden = None
        self.handle = head.register_forward_pre_hook(self._keep)

    def _keep(self, module, args) -> None:
        self.hidden = args[0][:, -1]  # the position whose logits this step's scores are

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for name, fn in self.heads.items():
            logp = fn(self.hidden).float().log_softmax(-1)
            self.picked[name].append(logp.gather(-1, self.forced.target[:, None].to(logp.device))[:, 0])
        return scores


MODEL_HEAD = "model"
"""``decode_heads``' key of the model's own LM head."""


@torch.no_grad()  # not inference_mode: the GEMM policy's dispatch mode must see the tensors (nbkit.precision.gemm)
def decode_logprobs(model, tokenizer, rollouts: Sequence, batch_size: int = 64, gemm: str = "auto") -> list[np.ndarray]:
    """log p of every response token of ``rollouts`` by KV-cache decoding in ``model``'s own dtype, batches of
    ``batch_size`` in the given order (left-padded prompts, as ``nbkit.engines.HFEngine``); float64 arrays."""
    return decode_heads(model, tokenizer, rollouts, {}, batch_size, gemm)[MODEL_HEAD]


@torch.no_grad()
def decode_heads(
    model, tokenizer, rollouts: Sequence, heads: dict, batch_size: int = 64, gemm: str = "auto"
) -> dict[str, list[np.ndarray]]:
    """``decode_logprobs`` (key ``MODEL_HEAD``) and, from the same decoding, log p of the same tokens under other LM
    heads: ``heads`` maps a name to fn(hidden state) → logits, applied to what the model's head received at each
    step. The KV cache and the forced tokens do not depend on the head, so one decode serves every head."""
    from transformers import GenerationConfig

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    gemm_policies.validate(gemm)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: dict[str, list[np.ndarray]] = {name: [] for name in (MODEL_HEAD, *heads)}
    for start in range(0, len(rollouts), batch_size):
        chunk = rollouts[start : start + batch_size]
        width = max(len(r.prompt_ids) for r in chunk)
        steps = max(len(r.token_ids) for r in chunk)
        if steps == 0:
            for name in out:
                out[name] += [np.zeros(0) for _ in chunk]
            continue
        ids = torch.tensor([[pad] * (width - len(r.prompt_ids)) + list(r.prompt_ids) for r in chunk])
        mask = torch.tensor([[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids) for r in chunk])
        targets = torch.tensor([list(r.token_ids) + [pad] * (steps - len(r.token_ids)) for r in chunk])
        forced = ForcedTokens(targets, pad)
        # no min_new_tokens: its processor would mask the end token before this one reads the scores; a row may
        # end early (its stop token or a pad equal to it) only after its own last response token
        cfg = GenerationConfig(do_sample=False, max_new_tokens=steps, pad_token_id=pad, return_dict_in_generate=True)
        others = OtherHeads(forced, heads, lm_head.head_of(model)) if heads else None
        policy = gemm_policies.policy(gemm, model.device) if gemm != "native" else contextlib.nullcontext()
        try:
            with policy:
                model.generate(
                    input_ids=ids.to(model.device),
                    attention_mask=mask.to(model.device),
                    generation_config=cfg,
                    logits_processor=[forced] + ([others] if others else []),
                )
        finally:
            if others is not None:
                others.handle.remove()
        picks = {MODEL_HEAD: forced.picked, **(others.picked if others else {})}
        for name, steps_picked in picks.items():
            picked = torch.stack(steps_picked, dim=1).double().cpu().numpy()
            out[name] += [picked[row, : len(r.token_ids)].copy() for row, r in enumerate(chunk)]
    return out
