"""The user's own tracker (``RLConfig.report_to``): refused before anything loads when it could not record the run.

``metrics.jsonl`` is written either way; a tracker is transformers' integration of that name, fed by TRL's logging
(and the workbook's own rows: ``nbkit.rl.trainer.StepLogger`` hands each row to the trainer's ``log``).

``trackio`` records locally, no Space and no hub (transformers' ``trackio_space_id`` stays None): into
``$TRACKIO_DIR``, else ``$HF_HOME/trackio`` (the project's cache, ``nbkit.runtime.paths``), project ``huggingface``
(``TrainingArguments.project``), one run per training run with its ``output_dir`` in the run's config; every key
logged as ``train/<key>`` with ``train/global_step`` the optimiser step. ``trackio show`` opens the dashboard;
``tests/rl/test_trackio.py`` reads a run back with trackio's own API.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

PACKAGES = {"trackio": ("trackio",), "tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",)}
"""The packages each tracker can use, any one of them (transformers' integrations import it when the trainer starts)."""


def check_report_to(report_to: str, environ: Mapping[str, str] = os.environ) -> None:
    """Refuse a tracker that would not record the run, in one line naming the cause.

    ``wandb`` with ``WANDB_MODE=disabled`` (what ``nbkit.runtime.paths.cache_env`` sets unless the user set it first)
    would run
    and record nothing; a tracker whose package is not installed would fail only once the trainer starts.
    """
    if report_to == "none":
        return
    if report_to == "wandb" and environ.get("WANDB_MODE", "").lower() == "disabled":
        raise ValueError(
            "report_to='wandb' but WANDB_MODE=disabled (the workbook's default environment): wandb would "
            "record nothing; set WANDB_MODE=online or offline before starting, or pick another tracker"
        )
    packages = PACKAGES.get(report_to, ())
    if packages and not any(importlib.util.find_spec(p) for p in packages):
        raise ValueError(
            f"report_to={report_to!r} needs the {packages[0]!r} package, which is not installed: "
            f"pip install {packages[0]}, or report_to='none'"
        )
