"""Where the workbook reads and writes, and the environment that keeps every cache inside the project.

Nothing is written to HOME: Jupyter, IPython, matplotlib, HF, torch-inductor and vLLM caches live under
``.cache/`` of the project (the Makefile sets the same variables for every command it runs).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The project root (the folder holding ``pyproject.toml``)."""

DATA = ROOT / "data"
"""Shipped data: models in ``data/models``, datasets in ``data/<name>``."""

CACHE = Path(os.environ.get("NBKIT_CACHE", ROOT / ".cache"))
"""Derived, re-creatable artefacts (converted models, pass-rate caches, engine caches)."""

REPORTS = ROOT / "reports"
"""Executed notebooks and their HTML (git-ignored)."""

REPORT_DIR_ENV = "NBKIT_REPORT_DIR"
"""Environment variable naming the report folder of the notebook being run (set by the runner)."""
NOTEBOOK_ENV = "NBKIT_NOTEBOOK"
"""Environment variable naming the stem of the notebook being run (set by the runner)."""


def report_target() -> tuple[Path, str] | None:
    """``(report folder, notebook stem)`` when the runner executes this kernel, else None (interactive use): where a
    notebook's findings (``nbkit.workbook.report``) and its library chatter (``nbkit.runtime.logs``) go."""
    folder, stem = os.environ.get(REPORT_DIR_ENV), os.environ.get(NOTEBOOK_ENV)
    return (Path(folder), stem) if folder and stem else None


def cache_env(cache: Path = CACHE) -> dict[str, str]:
    """The environment variables that keep tool caches inside ``cache`` (defaults only, never overrides)."""
    return {
        "HF_HOME": str(cache / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "MPLCONFIGDIR": str(cache / "matplotlib"),
        "IPYTHONDIR": str(cache / "ipython"),
        "JUPYTER_CONFIG_DIR": str(cache / "jupyter" / "config"),
        "JUPYTER_DATA_DIR": str(cache / "jupyter" / "data"),
        "JUPYTER_RUNTIME_DIR": str(cache / "jupyter" / "runtime"),
        "JUPYTER_PLATFORM_DIRS": "1",
        "XDG_CACHE_HOME": str(cache / "xdg"),
        "PIP_CACHE_DIR": str(cache / "pip"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "VLLM_CONFIG_ROOT": str(cache / "vllm-config"),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
    }


@contextlib.contextmanager
def environment(values: dict[str, str]):
    """``values`` set in ``os.environ`` while the block runs (child processes started in it inherit them), then
    each variable restored or removed."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        restore(saved)


def restore(saved: dict[str, str | None]) -> None:
    """Put back variables saved as ``{name: os.environ.get(name)}``: each set to its value, or removed if None."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def setup_environment() -> None:
    """Set the cache variables that are not set yet (a user's own choice wins)."""
    for key, value in cache_env().items():
        os.environ.setdefault(key, value)


if (
    __name__ == "__main__"
):  # `python nbkit/runtime/paths.py`: KEY=VALUE of every cache variable not set yet (the Makefile's)
    print(" ".join(f"{k}={v}" for k, v in cache_env().items() if k not in os.environ))
