"""Whether an existing project venv can be used, checked by ``make`` before it installs into it or runs it.

    python3 nbkit/runtime/venvcheck.py .venv     # what every make target that needs the venv runs first

A venv is refused, in one line naming what was found and ``make clean-venv``, with exit status 1, when its
``bin/python`` is missing or a link to nowhere, does not run, or is older than the project's ``requires-python``
(``pyproject.toml``: a venv of Python 3.10 would have torch installed into it, then fail on vLLM); and when its
install stamp (``.nbkit-installed``) says it is complete but a package the workbook needs does not import there.
A venv that does not exist yet passes when the Python running this check (``make``'s ``PYTHON``, which creates
it) is new enough. Standard library only: it runs with the system Python.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
STAMP = ".nbkit-installed"
"""The file ``make`` touches when an install finished (the Makefile's ``STAMP``)."""
NEEDED = ("torch", "transformers", "trl", "papermill", "pytest")
"""What a finished install provides (the project's pins and its test runner)."""
PROBE = (
    "import importlib.util, sys; print('%d.%d' % sys.version_info[:2]); "
    "print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))"
)


def required_python(pyproject: Path = ROOT / "pyproject.toml") -> tuple[int, int]:
    """The oldest Python ``pyproject.toml``'s ``requires-python = ">=X.Y"`` allows."""
    found = re.search(r'^requires-python\s*=\s*">=\s*(\d+)\.(\d+)', pyproject.read_text(), re.M)
    if found is None:
        raise ValueError(f'{pyproject} has no requires-python = ">=X.Y" line')
    return int(found.group(1)), int(found.group(2))


def problem(venv: str | Path, pyproject: Path = ROOT / "pyproject.toml") -> str | None:
    """None when ``venv`` can be used (or does not exist yet), else one line naming the problem and the fix."""
    venv = Path(venv)
    need = required_python(pyproject)
    if not venv.exists() and not venv.is_symlink():  # make creates it with the Python running this check
        if sys.version_info[:2] < need:
            return (
                f"{sys.executable} is Python {sys.version_info[0]}.{sys.version_info[1]}, and the project needs "
                f"Python >= {need[0]}.{need[1]} (pyproject.toml requires-python): run make with "
                f"PYTHON=python{need[0]}.{need[1]} or newer"
            )
        return None
    fix = f"run `make clean-venv VENV={venv}` (it removes only {venv}), then make again"
    python = venv / "bin" / "python"
    if python.is_symlink() and not python.exists():
        return f"the venv {venv} is broken: {python} is a link to {python.readlink()}, which does not exist; {fix}"
    if not python.exists():
        return f"{venv} exists but has no {python}; {fix}"
    try:
        said = subprocess.run(
            [str(python), "-c", PROBE, *NEEDED], capture_output=True, text=True, timeout=60, check=True
        ).stdout.splitlines()
        version = tuple(int(x) for x in said[0].split("."))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return f"the venv {venv} is broken: {python} does not run ({type(exc).__name__}); {fix}"
    if version < need:
        return (
            f"the venv {venv} was made by Python {'.'.join(map(str, version))}, and the project needs Python >= "
            f"{'.'.join(map(str, need))} (pyproject.toml requires-python); {fix} with PYTHON=python{need[0]}.{need[1]} "
            f"or newer"
        )
    missing = said[1].split() if len(said) > 1 else []
    if (venv / STAMP).exists() and missing:
        return f"the venv {venv} is marked installed but lacks {', '.join(missing)}; {fix}"
    return None


def main(argv: list[str]) -> int:
    """Print the problem of venv ``argv[0]`` on stderr and return 1, or return 0."""
    said = problem(argv[0] if argv else ".venv")
    if said:
        print(f"[make] {said}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
