"""The LoRA ranks a model can hold, read from its config without loading weights (refused before any model load).

A LoRA update B·A of a layer mapping ``in`` → ``out`` features has rank at most min(in, out): a larger rank adds
parameters that cannot add rank. The workbook's adapters follow peft's ``target_modules="all-linear"`` (every
``nn.Linear`` / ``Conv1D`` but the output head; peft also adapts a MoE's expert and router weights, which are
narrower than the attention projections) with one rank for all. The limit is the widest adapted layer's
min(in, out) — usually the hidden size: above it no layer can use the rank, it is waste everywhere (a rank between
the narrowest and the widest layer is accepted; peft caps nothing and the narrow layers, e.g. SmolLM2-135M's key
projection 576 → 192 or a router with 8 experts, simply hold less).

The layers come from the model's own class built on the ``meta`` device from its ``config.json`` (no weights, no
memory), so any architecture transformers knows is read as peft will see it. Built-in names use their shipped
config, or their known shape when not prepared yet (nothing is built or converted for this check).
"""

from __future__ import annotations

from pathlib import Path

import torch

from nbkit.models import models
from nbkit.models.toymodels import tiny_arith, tiny_long, tiny_moe
from nbkit.runtime.paths import CACHE, DATA

KNOWN_SHAPES: dict[str, dict] = {
    "smollm2-135m": dict(
        model_type="llama",
        hidden_size=576,
        intermediate_size=1536,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        num_hidden_layers=30,
        vocab_size=49152,
        tie_word_embeddings=True,
    ),
}
"""Shape fields of built-in models whose checkpoint is prepared on first use (SmolLM2-135M-Instruct's published
config; the converted checkpoint's ``config.json`` is read instead once it exists)."""


def target_layers(model: torch.nn.Module) -> dict[str, tuple[int, int]]:
    """``{name: (in, out)}`` of the layers peft's ``all-linear`` adapts: linear and Conv1D layers, not the head."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    layers = {}
    for name, module in model.named_modules():
        if module is head:
            continue
        if isinstance(module, torch.nn.Linear):
            layers[name] = (module.in_features, module.out_features)
        elif type(module).__name__ == "Conv1D" and hasattr(module, "nf"):  # GPT-2 style: weight (in, out)
            layers[name] = (module.weight.shape[0], module.nf)
    return layers


def model_config(ref: str):
    """The transformers config of model ``ref`` read without weights, or None when it cannot be read here (the
    model load then reports why: a missing folder, a folder that is not a model's; a hub id not in the HF cache
    is not checked before its download)."""
    from transformers import AutoConfig

    shipped = {"smollm2-135m": CACHE / "models" / "smollm2-135m"}.get(ref, DATA / "models" / ref)
    if ref in models.BUILTIN_MODELS:
        if (shipped / "config.json").is_file():
            return AutoConfig.from_pretrained(shipped)
        if ref in KNOWN_SHAPES:
            shape = dict(KNOWN_SHAPES[ref])
            return AutoConfig.for_model(shape.pop("model_type"), **shape)
        return _builtin_skeleton_config(ref)
    folder = Path(ref).expanduser()
    try:  # a local checkpoint; a hub id only from the HF cache (no network before the run's own download)
        return (
            AutoConfig.from_pretrained(str(folder))
            if folder.is_dir()
            else AutoConfig.from_pretrained(ref, local_files_only=True)
        )
    except (OSError, ValueError, KeyError):
        return None


def _builtin_skeleton_config(ref: str):
    """The config a built-in tiny model is built with (its builder on the meta device: nothing is trained)."""
    build = {
        "tiny-arith": lambda: tiny_arith.build_model(tiny_arith.TinyArithConfig()),
        "tiny-long": lambda: tiny_long.build_model(tiny_long.TinyLongConfig()),
        "tiny-moe-arith": lambda: tiny_moe.build_model(tiny_moe.TinyMoeConfig()),
    }[ref]
    with torch.device("meta"):
        return build().config


def max_rank(config) -> tuple[int, str, tuple[int, int]]:
    """(the largest rank any adapted layer can hold, the widest such layer, its (in, out)) for ``config``."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = target_layers(model)
    if not layers:
        raise ValueError(f"model type {config.model_type!r} has no linear layer for LoRA to adapt")
    name, shape = max(layers.items(), key=lambda item: min(item[1]))  # the first of the widest
    return min(shape), name, shape


def check_rank(rank: int, ref: str) -> None:
    """ValueError naming ``rank`` and the limit when model ``ref`` cannot hold it (read without weights)."""
    config = model_config(ref)
    if config is None:
        return
    limit, name, (n_in, n_out) = max_rank(config)
    if rank > limit:
        raise ValueError(
            f"lora_rank={rank} is more than model {ref!r} can hold: its widest adapted layer, {name}, "
            f"maps {n_in} -> {n_out} features, so no adapter of this model has rank above {limit}; "
            f"choose lora_rank in [1, {limit}]"
        )
