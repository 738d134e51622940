"""What a run reads and how its batch is cut, before any model loads: the task and its usable problems, the
prompts' fit in the model's context, and the completions per process and per micro-batch.

Torch-free apart from the tokenizer config a prompt check reads, so ``nbkit.rl.run`` (which trains),
``nbkit.rl.sizing`` and ``nbkit.rl.memory`` (which size a GPU run before it starts) all read the same rules here
instead of importing each other.
"""

from __future__ import annotations

import nbkit.rl.algorithms as algorithms
from nbkit import tasks
from nbkit.engines import encode_prompt
from nbkit.rl.config import RLConfig

FIT_ROWS = 32
"""How many first problems ``check_grader_fits`` reads to judge whether the grader fits the dataset."""


def load_task(cfg: RLConfig) -> tuple[tasks.Task, list[dict]]:
    """The task and its usable problems (those with a checkable answer); errors name what is wrong."""
    from nbkit.tasks.sources import rows_progress

    task = tasks.make_task(tasks.TaskConfig(source=cfg.dataset, template=cfg.template, grader=cfg.grader))
    checked = rows_progress(task.problems, f"grading {cfg.grader} references")
    usable = [p for p in checked if task.answer_ok(p["answer"])]
    if not usable:
        raise ValueError(
            f"dataset {cfg.dataset!r} has no problem with a checkable answer "
            f"({len(task.problems)} problems, all answers unreadable)"
        )
    check_grader_fits(task, cfg)
    if len(usable) < cfg.prompts_per_step:
        raise ValueError(
            f"dataset {cfg.dataset!r} has {len(usable)} usable problems, fewer than one step's "
            f"prompts_per_step={cfg.prompts_per_step}"
        )
    return task, usable


def check_grader_fits(task: tasks.Task, cfg: RLConfig) -> None:
    """Score the first rows' references with the chosen grader: a grader that cannot read an eighth or more of
    the reference answers, or that fails a reference ``solution`` (where the data has one), does not fit the
    data (e.g. MATH problems with the ``arith`` grader would train on reward 0)."""
    first = task.problems[:FIT_ROWS]
    unreadable = [p["answer"] for p in first if not task.answer_ok(p["answer"])]
    if len(unreadable) * 8 >= len(first):
        raise ValueError(
            f"grader {cfg.grader!r} cannot read {len(unreadable)} of the first {len(first)} reference "
            f"answers of dataset {cfg.dataset!r} (e.g. {unreadable[:3]}): it does not fit this data; "
            f"choose one of {sorted(tasks.GRADERS)}"
        )
    solved = [p for p in first if task.answer_ok(p["answer"]) and isinstance(p.get("solution"), str)]
    failed = [p["solution"] for p in solved if task.reward(p["solution"], p["answer"]) < 1]
    if solved and len(failed) * 2 > len(solved):
        raise ValueError(
            f"grader {cfg.grader!r} scores {len(failed)} of {len(solved)} reference solutions of "
            f"dataset {cfg.dataset!r} as wrong (e.g. {failed[0][:80]!r}): it does not fit this data; "
            f"choose one of {sorted(tasks.GRADERS)}"
        )


def check_prompts(cfg: RLConfig, tokenizer, prompts: list[str], model_path: str) -> int:
    """Every prompt tokenizes to something, loses no visible character, and leaves room for ``max_completion_length``
    within the model's context (transformers would otherwise fail mid-run, or train on cut prompts). Returns the
    context the run needs, longest prompt + ``max_completion_length``: the rollout engine's ``max_model_len`` (vLLM ends a
    request at its ``max_model_len`` with an ordinary "length" finish, so a shorter one would cut answers
    silently)."""
    from transformers import AutoConfig

    context = getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings", None)
    widest = max(map(len, tokenizer.get_vocab()), default=0) if context else 0  # characters a token holds at most
    longest = (0, "")
    for prompt in prompts:
        if widest and len(prompt) > context * widest:  # more tokens than the context for sure: never tokenized
            raise ValueError(
                f"prompt {prompt[:60]!r}... has {len(prompt)} characters; model {cfg.model!r}'s tokens hold at most "
                f"{widest} characters each, so it needs more than the model's whole context of {context} positions: "
                f"shorten it or drop it from dataset {cfg.dataset!r}"
            )
        ids = encode_prompt(tokenizer, prompt)
        if not ids:
            raise ValueError(
                f"the tokenizer of model {cfg.model!r} turns prompt {prompt[:80]!r} into no tokens "
                f"(characters outside its vocabulary?)"
            )
        if "".join(tokenizer.decode(ids).split()) != "".join(prompt.split()):
            raise ValueError(
                f"the tokenizer of model {cfg.model!r} cannot represent prompt {prompt[:80]!r} (it "
                f"reads back as {tokenizer.decode(ids)[:80]!r}): characters outside its vocabulary"
            )
        longest = max(longest, (len(ids), prompt))
    return needed_context(cfg, longest[0], context, longest[1])


def needed_context(cfg: RLConfig, longest_prompt: int, context: int | None, example: str = "") -> int:
    """``longest_prompt + max_completion_length``; ValueError naming both when the model's ``context`` cannot hold it."""
    needed = longest_prompt + cfg.max_completion_length
    if context and needed > context:
        raise ValueError(
            f"prompt {example[:60]!r} has {longest_prompt} tokens; with max_completion_length={cfg.max_completion_length} "
            f"that exceeds model {cfg.model!r}'s context of {context} positions (vLLM would cut the "
            f"answers at {context} tokens); "
            + (
                f"lower max_completion_length to at most {context - longest_prompt}"
                if longest_prompt < context
                else f"the prompt alone fills the context: shorten it or drop it from dataset {cfg.dataset!r}"
            )
        )
    return needed


def per_device_batch(cfg: RLConfig, world_size: int) -> int:
    """Completions per process and step: the run's batch (prompts × samples) split evenly over the processes,
    so a 2-process run trains the same global batch as a 1-process run."""
    total = cfg.prompts_per_step * cfg.num_generations
    if total % world_size:
        raise ValueError(
            f"prompts_per_step × num_generations = {total} completions cannot be split evenly over "
            f"{world_size} processes; choose prompts_per_step so that the product is a multiple of "
            f"{world_size}"
        )
    return total // world_size


def micro_batch(cfg: RLConfig, world_size: int) -> int:
    """Completions per loss forward on one process: its share of the step's batch (``per_device_batch``) split
    into ``gradient_accumulation_steps`` micro-batches (and, for PPO presets, into ``ppo_minibatches`` first)."""
    share = per_device_batch(cfg, world_size)
    parts = cfg.gradient_accumulation_steps * (cfg.ppo_minibatches if algorithms.get(cfg.algorithm).critic else 1)
    if share % parts:
        raise ValueError(
            f"each of {world_size} processes holds {share} completions per step, which "
            f"gradient_accumulation_steps={cfg.gradient_accumulation_steps}"
            + (f" × ppo_minibatches={cfg.ppo_minibatches}" if parts != cfg.gradient_accumulation_steps else "")
            + f" cannot split evenly; choose a divisor of {share}"
        )
    return share // parts
