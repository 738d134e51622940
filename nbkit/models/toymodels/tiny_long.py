"""The ``tiny-long`` model: tiny-arith's architecture and tokenizer, trained by the workbook on long answers.

Why it exists: tiny-arith answers in ~30 tokens, but the training–inference mismatch grows with response length;
the hunt for where BF16 RL breaks needs a model that writes 100–1,000-token answers and still solves them only
*sometimes*. ``long_arith`` (this package) is the task (a chain of additions with a step knob); this module is the SFT
recipe: a 4-layer Qwen2 (tiny-arith's width, depth, heads and character vocabulary) with room for 1,152
positions, trained in fp32 from scratch on chains of every length 1..``long_arith.MAX_STEPS``, stopped early.

``build()`` regenerates the shipped checkpoint in ``data/models/tiny-long``; SFT resumes from the last saved
state (``.cache/tiny_long_sft``) so it can run in pieces of a bounded wall time::

    python -m nbkit.models.toymodels.tiny_long 800     # 800 s of SFT; repeat until it prints the checkpoint path
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from nbkit.models.toymodels import long_arith, tiny_arith
from nbkit.runtime.paths import CACHE, DATA

CHECKPOINT = DATA / "models" / "tiny-long"
STATE = CACHE / "tiny_long_sft"
"""Resumable SFT state (weights, optimiser, log) between pieces of a build."""


@dataclass
class TinyLongConfig(tiny_arith.TinyArithConfig):
    """tiny-arith's architecture with more positions, and the SFT recipe on the long task."""

    steps: int = 2300
    """SFT steps (optimizer updates)."""
    batch_size: int = 0
    """Unused (kept from tiny-arith's recipe): a step holds ``batch_tokens`` tokens, as many chains as fit."""
    lr: float = 1e-3
    """AdamW learning rate (linear warm-up over 20 steps, then constant)."""
    max_positions: int = 1152
    """Positions of the model (prompt ~10 + the longest chain ~965 tokens fit)."""
    width: int = 2
    """Register width of the training chains (``long_arith.LongArithConfig.width``)."""
    min_chain: int = 1
    """Shortest training chain (additions)."""
    max_chain: int = long_arith.MAX_STEPS
    """Longest training chain."""
    short_chain: int = 10
    """Half the steps draw their chain length uniformly in [min_chain, short_chain] (cheap steps that teach the sums),
    the other half in [min_chain, max_chain] (the positions of long answers)."""
    curriculum_until: int = 1500
    """Steps before this one give half their batches short chains; later steps draw every chain length from
    [min_chain, max_chain] (the count-down's tens digit only moves in long chains)."""
    batch_tokens: int = 4096
    """Tokens per SFT step: a step of chains of length n holds ``batch_tokens // tokens(n)`` chains (at least 2)."""


def build_model(cfg: TinyLongConfig):
    """A freshly initialised Qwen2 of tiny-arith's size with ``max_positions`` positions (seeded)."""
    return tiny_arith.build_model(cfg, max_positions=cfg.max_positions)


def training_batch(cfg: TinyLongConfig, step: int) -> list[dict]:
    """The chains of SFT step ``step``: one chain length per step (no padding), seeded by the recipe seed and the
    step so a resumed build draws the same batches."""
    rng = random.Random(cfg.seed * 1_000_003 + step)
    top = cfg.short_chain if step < cfg.curriculum_until and rng.random() < 0.5 else cfg.max_chain
    task = long_arith.LongArithConfig(steps=rng.randint(cfg.min_chain, top), width=cfg.width)
    rows = []
    for _ in range(max(2, cfg.batch_tokens // (task.response_tokens + 10))):
        x, d = rng.randrange(10**cfg.width), rng.randrange(10**cfg.width)
        rows.append(
            {
                "problem": long_arith.prompt_for(x, d, task),
                "solution": long_arith.solution_for(x, d, task),
                "steps": task.steps,
            }
        )
    return rows


def _without(recipe: dict, keys: tuple) -> dict:
    """A recipe minus the fields a resumed build may change (``steps``; ``curriculum_until`` while not reached)."""
    return {k: v for k, v in recipe.items() if k not in keys}


def train(
    cfg: TinyLongConfig = TinyLongConfig(),
    max_seconds: float = float("inf"),
    state: Path = STATE,
    progress: bool = True,
    threads: int = 1,
) -> tuple[object, object, list[dict], bool]:
    """SFT in fp32, resuming from ``state``; returns (model, tokenizer, log, finished).

    Stops after ``max_seconds`` of this call (saving the state) or at ``cfg.steps`` (finished=True).
    """
    from tqdm.auto import tqdm

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(max(torch.get_num_threads(), threads))
    tokenizer, model = tiny_arith.build_tokenizer(), build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    log: list[dict] = []
    ckpt = state / "state.pt"
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        extendable = ("steps",) if len(saved["log"]) <= cfg.curriculum_until else ("steps", "curriculum_until")
        if _without(saved["recipe"], extendable) != _without(asdict(cfg), extendable):
            raise ValueError(f"{ckpt} holds SFT state of another recipe {saved['recipe']}; delete it to restart")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        sched.load_state_dict(saved["sched"])
        log = saved["log"]
    start = time.time()
    model.train()
    for step in tqdm(
        range(len(log), cfg.steps), desc="SFT tiny-long", disable=not progress, initial=len(log), total=cfg.steps
    ):
        t0 = time.time()
        batch = training_batch(cfg, step)
        ids, mask, lab = tiny_arith._batch(tokenizer, batch)
        loss = tiny_arith.sft_step(model, opt, sched, ids, mask, lab)
        log.append({"step": step, "loss": loss, "chain": batch[0]["steps"], "seconds": round(time.time() - t0, 3)})
        if time.time() - start > max_seconds:
            break
    state.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "recipe": asdict(cfg),
            "model": model.state_dict(),
            "opt": opt.state_dict(),
            "sched": sched.state_dict(),
            "log": log,
        },
        ckpt,
    )
    model.eval()
    return model, tokenizer, log, len(log) >= cfg.steps


def build(
    out: Path = CHECKPOINT,
    cfg: TinyLongConfig = TinyLongConfig(),
    max_seconds: float = float("inf"),
    state: Path = STATE,
    threads: int = 1,
) -> Path | None:
    """Train (or resume) and, once finished, save the checkpoint with its recipe and log; None while unfinished."""
    model, tokenizer, log, finished = train(cfg, max_seconds=max_seconds, state=state, threads=threads)
    if not finished:
        return None
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    tail = log[-20:]
    meta = {
        "recipe": asdict(cfg),
        "task": f"nbkit.models.toymodels.long_arith (chain of additions, steps {cfg.min_chain}..{cfg.max_chain})",
        "train_seconds": round(sum(r["seconds"] for r in log), 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": log[-1]["loss"],
        "final_loss_mean20": sum(r["loss"] for r in tail) / len(tail),
    }
    (out / "nbkit_build.json").write_text(json.dumps(meta, indent=2))
    (out / "sft_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    return out


if __name__ == "__main__":  # the optional argument: seconds of SFT for this piece
    import sys

    done = build(max_seconds=float(sys.argv[1]) if len(sys.argv) > 1 else float("inf"))
    print(done or f"unfinished: state kept in {STATE}; run again to continue")
