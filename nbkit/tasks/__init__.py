"""Problems, prompt templates and rewards: what the policy is asked and how its answers are scored.

A ``Task`` bundles three choices that the RL notebooks and the dataset builder share:

- a **source** of problems (dicts with ``problem`` and ``answer``): the ``tiny-arith`` model's synthetic
  additions (``arith``), the paper's sanity set (``sanity_math_1460``), an evaluation suite (``eval/math``,
  ``eval/aime``, ...), or any local HF dataset (a ``save_to_disk`` folder, ``.parquet``, ``.jsonl``/``.json``);
- a **template** that turns a problem into the prompt string the engine sees (``TEMPLATES``);
- a **grader** that turns (response, reference answer) into a 0/1 reward (``GRADERS``).

    task = make_task(TaskConfig(source="eval/math", template="qwen_math"))
    prompts = [task.prompt(p) for p in task.problems]
    reward = task.reward(response, task.problems[0]["answer"])   # 1.0 or 0.0, never raises

The package sits above the rollout engines in pyproject's layers (``[tool.importlinter]``): ``dataset`` (the
perfectible-set builder) and ``heldout`` (the RL judge's held-out sets) sample through ``nbkit.engines`` and are not
imported here. The generated problems and their answer rules, ``arith`` and ``long_arith`` (standard library only),
live below, in ``nbkit.models.toymodels``, beside the toy models trained on them; this package re-exports both as task
sources. ``templates`` and ``graders`` build on ``arith``; ``sources`` on both; ``task`` on all three.
"""

from nbkit.models.toymodels import arith, long_arith
from nbkit.tasks.graders import (
    GRADERS,
    Grader,
    after_think,
    math_verify_correct,
    normalize_answer,
    parse_reference,
    parse_response,
)
from nbkit.tasks.sources import GENERATED_SOURCES, NAMED_SOURCES, TaskConfig, check_rows, default_grader, load_problems
from nbkit.tasks.task import Task, make_task
from nbkit.tasks.templates import BOXED_INSTRUCTION, TEMPLATES, Template

__all__ = [
    "BOXED_INSTRUCTION",
    "GENERATED_SOURCES",
    "GRADERS",
    "NAMED_SOURCES",
    "TEMPLATES",
    "Grader",
    "Task",
    "TaskConfig",
    "Template",
    "after_think",
    "arith",
    "check_rows",
    "default_grader",
    "load_problems",
    "long_arith",
    "make_task",
    "math_verify_correct",
    "normalize_answer",
    "parse_reference",
    "parse_response",
]
