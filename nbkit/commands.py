"""The ``nbkit`` subcommands that live outside ``nbkit.runner``: name → (module with ``main(argv)``, help)."""
from __future__ import annotations

import importlib

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("nbkit.cli_train", "one RL run from flags and/or a YAML file (every RLConfig field is a flag)"),
    "doctor": ("nbkit.doctor", "measure a model's π–μ mismatch per dtype and say whether to train it in FP16"),
    "plan": ("nbkit.plan", "print the exact vLLM-server and trainer commands for a GPU node"),
    "study": ("nbkit.studies.cli", "run, store or show a study (a grid of runs stored under data/results)"),
}


def dispatch(name: str, argv: list[str]) -> int:
    """Run subcommand ``name`` with the rest of the command line."""
    return importlib.import_module(COMMANDS[name][0]).main(argv)
