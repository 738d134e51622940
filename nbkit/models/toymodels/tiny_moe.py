"""The ``tiny-moe-arith`` model: tiny-arith's recipe on a Qwen3-MoE architecture (8 experts, top-2).

Why it exists: routing flips (the rollout engine and the trainer picking different top-k experts for the same
token) only exist in mixture-of-experts models, and none can be downloaded here. This model has tiny-arith's
width, depth, heads, vocabulary, SFT problems, steps, batch, learning rate and seed
(``nbkit.models.toymodels.tiny_arith.train`` runs both); each MLP is replaced by 8 experts of width 256 of which a token
uses
2, so the *active* MLP width (2 × 256) equals the dense model's 512: the same active size, ~3× the total parameters.

No load-balancing loss is added (tiny-arith's recipe has none); ``nbkit_build.json`` records the expert load.

    python -m nbkit.models.toymodels.tiny_moe     # ~5 minutes on 2 CPU cores
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from nbkit.models import routing
from nbkit.models.toymodels import arith, tiny_arith
from nbkit.runtime.paths import DATA

CHECKPOINT = DATA / "models" / "tiny-moe-arith"


@dataclass
class TinyMoeConfig(tiny_arith.TinyArithConfig):
    """tiny-arith's architecture and SFT recipe plus the mixture-of-experts shape."""

    num_experts: int = 8
    """Experts per MoE layer (every layer is sparse)."""
    top_k: int = 2
    """Experts each token is routed to (Qwen3-MoE's ``num_experts_per_tok``)."""
    moe_intermediate_size: int = 256
    """Width of one expert's MLP; top_k × this = tiny-arith's dense ``intermediate_size`` (same active size)."""


def build_model(cfg: TinyMoeConfig):
    """A freshly initialised Qwen3-MoE of the configured size (seeded)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(cfg.seed)
    vocab = arith.vocabulary()
    config = Qwen3MoeConfig(
        vocab_size=arith.VOCAB_SIZE,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        head_dim=cfg.hidden_size // cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        moe_intermediate_size=cfg.moe_intermediate_size,
        num_experts=cfg.num_experts,
        num_experts_per_tok=cfg.top_k,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        eos_token_id=vocab["<eos>"],
        pad_token_id=vocab["<pad>"],
        bos_token_id=None,
    )
    return Qwen3MoeForCausalLM(config)


def expert_load(model, tokenizer, n: int = 256, seed: int = 12345) -> list[list[float]]:
    """Share of routed slots each expert receives per layer on ``n`` held-out problems (teacher-forced, fp32)."""
    problems = arith.make_problems(n, arith.ArithConfig(), seed=seed)
    ids, mask, _ = tiny_arith._batch(tokenizer, problems)
    with torch.no_grad(), routing.capture(model) as rec:
        model(input_ids=ids, attention_mask=mask)
    choice = rec.choices()  # (batch, seq, layers, k)
    flat = choice[mask.bool()]  # (tokens, layers, k)
    experts = model.config.num_experts
    return [
        [round(float((flat[:, layer] == e).sum()) / flat[:, layer].numel(), 4) for e in range(experts)]
        for layer in range(flat.shape[1])
    ]


def build(out: Path = CHECKPOINT, cfg: TinyMoeConfig = TinyMoeConfig()) -> Path:
    """Train with tiny-arith's recipe and save (safetensors, fp32) with the build record and the expert load."""
    tiny_arith.build(out, cfg, builder=build_model, name="tiny-moe-arith")
    from transformers import (  # (not nbkit.models.models, which builds this module's model)
        AutoModelForCausalLM,
        AutoTokenizer,
    )

    model, tokenizer = AutoModelForCausalLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    meta = json.loads((out / "nbkit_build.json").read_text())
    meta.update(
        architecture="Qwen3MoeForCausalLM",
        active_parameters=active_parameters(model),
        expert_load=expert_load(model, tokenizer),
    )
    (out / "nbkit_build.json").write_text(json.dumps(meta, indent=2))
    return out


def active_parameters(model) -> int:
    """Parameters one token uses: everything but the experts, plus top_k of each layer's experts."""
    cfg = model.config
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    return total - experts + experts * cfg.num_experts_per_tok // cfg.num_experts


if __name__ == "__main__":
    print(build())
