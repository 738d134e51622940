"""The stored PPO study's recipe, shared by its two pages: ``nbkit.studies.ppo`` (FP16 vs BF16) and
``nbkit.studies.ppo_critic`` (the critic given the running minimum of log π), which the PPO page reads; kept apart
so that neither study module imports the other both ways."""

from __future__ import annotations

STUDY = "ppo_tiny_arith"
"""The stored study's folder name under ``data/results``."""

OUTPUT_DIR = "reports/runs/ppo_tiny_arith"
"""Where the study's run folders go."""

TAIL = 20
"""Optimiser steps at the end of a run over which the critic's value error is read (the issue's "last 20 steps")."""


def base_config(**overrides):
    """The study's PPO run on the tiny-arith sanity set (``SANITY_RUN``'s task and lr, HF rollouts, 2 epochs × 2
    minibatches), with ``overrides``."""
    from nbkit.rl.config import config_from

    return config_from(
        {
            "algorithm": "ppo",
            "train_dtype": "bf16",
            "rollout_engine": "hf",
            "critic_lr": 2e-4,
            "output_dir": OUTPUT_DIR,
            "checkpoint_every": 0,
            "overwrite": True,
            **overrides,
        }
    )
