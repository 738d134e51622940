"""π of a GRPO batch with each prompt run once: the ``num_generations`` completions of a prompt share its forward.

TRL scores a batch row by row: every completion's forward runs its prompt again, and on a CPU (no Triton) its fused
LM head projects every position through the vocabulary, prompts included. When prompts are long beside their
answers (SmolLM2's ``number_after``: ~117 prompt tokens, ~5 answer tokens, 8 samples per prompt) nearly all of an
update's matrix products are prompt positions computed ``num_generations`` times over.

``logps`` computes the same π and entropies with the backbone run twice: once over the batch's distinct prompts
(with a KV cache, and with gradients: LoRA or full fine-tuning changes the prompt's keys and values too), then over
the completions of every row against its prompt's cache rows (``DynamicCache.batch_select_indices``: an index, so
gradients from all of a prompt's completions add up in its one forward). Positions, masks and the LM head are
TRL's: the same ``fused_lm_head`` call, fed only the positions that predict a completion token. Exact arithmetic
gives TRL's numbers; in floating point only the order of sums inside the matrix products changes
(``tests/rl/test_shared_prefix.py`` holds log-probs, entropies and gradients to TRL's within a stated tolerance).

Not with gradient checkpointing (a checkpointed layer drops its cache: ``RLConfig`` refuses the pair) nor on the
MoE routing path (its router capture expects one forward per row); those keep TRL's own scoring.
"""

from __future__ import annotations

import contextlib

import torch
from peft import PeftModel
from transformers.modeling_outputs import BaseModelOutputWithPast


def backbone(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer stack under the LM head (``base_model_prefix``), through a DDP-style wrapper (``.module``) and
    a PEFT wrapper."""
    model = getattr(model, "module", model)
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    return getattr(base, base.base_model_prefix)


@contextlib.contextmanager
def prompts_once(model: torch.nn.Module, prompt_width: int):
    """Within the block, the backbone of ``model`` runs each distinct prompt (the first ``prompt_width`` columns of
    ``input_ids`` with their mask) once, then every row's remaining tokens against its prompt's KV cache, and returns
    hidden states for the last prompt position and every later one (``prompt_width - 1`` onwards)."""
    stack = backbone(model)
    original = stack.forward

    def forward(input_ids=None, attention_mask=None, **_):
        rows = torch.cat([input_ids[:, :prompt_width], attention_mask[:, :prompt_width].to(input_ids.dtype)], 1)
        distinct, row_of = torch.unique(rows, dim=0, return_inverse=True)
        first = original(
            input_ids=distinct[:, :prompt_width], attention_mask=distinct[:, prompt_width:], use_cache=True
        )
        cache = first.past_key_values
        cache.batch_select_indices(row_of)
        rest = original(
            input_ids=input_ids[:, prompt_width:], attention_mask=attention_mask, past_key_values=cache, use_cache=True
        )
        hidden = torch.cat([first.last_hidden_state[row_of, -1:], rest.last_hidden_state], 1)
        return BaseModelOutputWithPast(last_hidden_state=hidden)

    stack.forward = forward
    try:
        yield
    finally:
        del stack.forward  # the class's own forward again


def logps(
    model, input_ids, attention_mask, logits_to_keep: int, batch_size=None, compute_entropy=False, *, autocast, **extra
):
    """``(log-probs, entropies or None, None)`` of the last ``logits_to_keep`` tokens of each row, as TRL's
    ``GRPOTrainer._get_per_token_logps_and_entropies`` returns them, in chunks of ``batch_size`` rows (TRL's memory
    bound; a prompt's rows share its forward within a chunk); ``autocast``: the trainer's autocast context. ``extra``:
    TRL's other arguments (images, MoE aux loss), which must be unset: ValueError naming one that is set."""
    used = sorted(k for k, v in extra.items() if v is not None and v is not False)
    if used:
        raise ValueError(
            f"shared_prefix scores text-only batches of a dense model; TRL passed {used[0]}=... "
            "(set shared_prefix=False for this model)"
        )
    width = input_ids.size(1) - logits_to_keep
    batch_size = batch_size or input_ids.size(0)
    logp, entropy = [], []
    for start in range(0, input_ids.size(0), batch_size):
        ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
        labels = ids[:, width - 1 :].masked_fill(mask[:, width - 1 :] == 0, -100)
        with prompts_once(model, width), autocast():
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        logp.append(out.log_probs)
        if compute_entropy:
            entropy.append(out.entropy)
    return torch.cat(logp), (torch.cat(entropy) if compute_entropy else None), None
