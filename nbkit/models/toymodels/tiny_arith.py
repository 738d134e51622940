"""The ``tiny-arith`` model: a 1 M-parameter Qwen2 trained by the workbook itself to add with a scratchpad.

Why it exists: no model can be downloaded here, and the paper's sanity test needs a model that solves a task
*sometimes*. Supervised fine-tuning (SFT, fp32, seeded) on ``arith`` problems (this package), stopped early, leaves a
model right on part of the columns part of the time, so pass rates over 40 samples spread out.

``build()`` regenerates the shipped checkpoint in ``data/models/tiny-arith`` deterministically::

    python -m nbkit.models.toymodels.tiny_arith     # ~2 minutes on 2 CPU cores
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from nbkit.models.toymodels import arith
from nbkit.runtime.paths import DATA

CHECKPOINT = DATA / "models" / "tiny-arith"


@dataclass
class TinyArithConfig:
    """Architecture and SFT recipe of the tiny model (the defaults made the shipped checkpoint)."""

    hidden_size: int = 128
    """Width of the residual stream."""
    num_layers: int = 4
    """Transformer blocks."""
    num_heads: int = 4
    """Attention heads (no grouped-query sharing at this size)."""
    intermediate_size: int = 512
    """MLP width."""
    digits: int = 3
    """Digits per operand of the training problems."""
    steps: int = 250
    """SFT steps; stopping early is deliberate (a perfect model makes no perfectible problems)."""
    batch_size: int = 64
    """Problems per SFT step."""
    lr: float = 2e-3
    """AdamW learning rate (linear warm-up over 20 steps, then constant)."""
    seed: int = 0
    """Seeds the weights and the training problems; held-out pools use other seeds."""


def build_tokenizer():
    """The character-level tokenizer as a ``PreTrainedTokenizerFast`` (loadable by transformers, TRL and vLLM)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=arith.vocabulary(), unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>", padding_side="left"
    )


def build_model(cfg: TinyArithConfig, max_positions: int = 128):
    """A freshly initialised Qwen2 of the configured size with ``max_positions`` positions (seeded); ``cfg`` is any
    config with tiny-arith's size fields (``nbkit.models.toymodels.tiny_long`` passes its own, with room for long
    chains)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(cfg.seed)
    vocab = arith.vocabulary()
    config = Qwen2Config(
        vocab_size=arith.VOCAB_SIZE,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        eos_token_id=vocab["<eos>"],
        pad_token_id=vocab["<pad>"],
        bos_token_id=None,
    )
    return Qwen2ForCausalLM(config)


def _batch(tokenizer, problems: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask and labels with the prompt masked out (loss on the response only)."""
    rows, labels = [], []
    for p in problems:
        prompt = tokenizer.encode(p["problem"], add_special_tokens=False)
        response = tokenizer.encode(p["solution"], add_special_tokens=False) + [tokenizer.eos_token_id]
        rows.append(prompt + response)
        labels.append([-100] * len(prompt) + response)
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    lab = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return ids, mask, lab


def sft_step(model, opt, sched, ids, mask, labels) -> float:
    """One SFT step (cross-entropy on the answer tokens, gradients clipped to norm 1); returns the loss."""
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss.item()


def train(cfg: TinyArithConfig = TinyArithConfig(), progress: bool = True, builder=None, name: str = "tiny-arith"):
    """SFT in fp32 from scratch; returns (model, tokenizer, log) with the loss of every step.

    ``builder(cfg)`` makes the fresh model (default ``build_model``: the dense Qwen2);
    ``nbkit.models.toymodels.tiny_moe``
    passes its Qwen3-MoE builder so both models share this one recipe.
    """
    torch.manual_seed(cfg.seed)
    tokenizer, model = build_tokenizer(), (builder or build_model)(cfg)
    problems = arith.make_problems(cfg.steps * cfg.batch_size, arith.ArithConfig(cfg.digits), seed=cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    model.train()
    log = []
    for step in tqdm(range(cfg.steps), desc=f"SFT {name}", disable=not progress):
        ids, mask, lab = _batch(tokenizer, problems[step * cfg.batch_size : (step + 1) * cfg.batch_size])
        log.append({"step": step, "loss": sft_step(model, opt, sched, ids, mask, lab)})
    model.eval()
    return model, tokenizer, log


def build(
    out: Path = CHECKPOINT, cfg: TinyArithConfig = TinyArithConfig(), builder=None, name: str = "tiny-arith"
) -> Path:
    """Train and save the checkpoint (safetensors, fp32) with its recipe and training log (``builder``: see ``train``)."""
    start = time.time()
    model, tokenizer, log = train(cfg, builder=builder, name=name)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {
        "recipe": asdict(cfg),
        "train_seconds": round(time.time() - start, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": log[-1]["loss"],
    }
    (out / "nbkit_build.json").write_text(json.dumps(meta, indent=2))
    (out / "sft_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    return out


if __name__ == "__main__":
    print(build())
