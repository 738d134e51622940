"""The GPU install's pins held to what the chosen vLLM wheel itself declares.

A GPU node installs the official ``vllm`` wheel first (``make venv TORCH_SPEC=vllm==X``), then
``requirements/base.txt`` under the torch vLLM brought. pip does not re-check vLLM's own requirements when base.txt
moves a library it depends on (transformers), so a pin outside vLLM's range installs silently and breaks vLLM at
import or, worse, at run time. This machine has no GPU wheel, so its declared requirements are kept in
``requirements/vllm-metadata/vllm-<version>.METADATA`` (the wheel's ``Requires-Dist`` lines, source stated in
each file) and checked here against the project's pins.

    chosen_gpu_vllm()          # the version the ``vllm`` extra of pyproject.toml resolves to among the vendored ones
    conflicts()                # one sentence per pin outside that wheel's requirements ([] when consistent)
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from nbkit.runtime.paths import ROOT

METADATA = ROOT / "requirements" / "vllm-metadata"
"""Vendored ``Requires-Dist`` lines of the GPU vLLM wheels considered."""
GPU_NODE = {
    "platform_machine": "x86_64",
    "platform_system": "Linux",
    "sys_platform": "linux",
    "os_name": "posix",
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
"""The environment markers of the GPU node the plan targets (Linux x86_64, CPython 3.11)."""


def vendored(root: Path = ROOT) -> dict[str, Path]:
    """Version -> its vendored metadata file."""
    folder = root / "requirements" / "vllm-metadata"
    out = {}
    for path in sorted(folder.glob("vllm-*.METADATA")):
        m = re.fullmatch(r"vllm-(.+)\.METADATA", path.name)
        if m:
            out[m.group(1)] = path
    return out


def gpu_vllm_range(root: Path = ROOT) -> str | None:
    """The ``vllm`` extra's spec in ``pyproject.toml`` (the official CUDA build); None when there is none."""
    from packaging.requirements import Requirement

    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    specs = [str(r.specifier) for r in map(Requirement, extras.get("vllm", [])) if r.name == "vllm"]
    return specs[0] if specs else None


def chosen_gpu_vllm(root: Path = ROOT) -> str:
    """The newest vendored vLLM inside the ``vllm`` extra's spec (what pip picks when it is the newest released);
    ValueError when none is vendored for it (a new spec needs its metadata here first)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    spec = gpu_vllm_range(root)
    if spec is None:
        raise ValueError("pyproject.toml has no `vllm` extra naming the GPU vLLM")
    inside = [v for v in vendored(root) if Version(v) in SpecifierSet(spec)]
    if not inside:
        raise ValueError(
            f"no vendored metadata for vllm{spec} in {METADATA.relative_to(ROOT)} (have "
            f"{sorted(vendored(root))}): add the wheel's Requires-Dist lines first"
        )
    return max(inside, key=Version)


def requirements(version: str, root: Path = ROOT) -> dict[str, str]:
    """Package (lower case) -> the specifier the vLLM ``version`` wheel requires on a GPU node (markers evaluated
    for ``GPU_NODE``; extras left out)."""
    from packaging.requirements import Requirement

    path = vendored(root).get(version)
    if path is None:
        raise ValueError(f"no vendored metadata for vllm {version}; have {sorted(vendored(root))}")
    out = {}
    for line in path.read_text().splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.removeprefix("Requires-Dist:").strip())
        if req.marker is None or req.marker.evaluate(GPU_NODE):
            out[req.name.lower()] = str(req.specifier)
    return out


def project_pins(root: Path = ROOT) -> dict[str, str]:
    """Exact pins a GPU install applies after vLLM: every ``name==version`` of base.txt, and the torch of the
    Makefile's ``TORCH_SPEC`` default (the torch the workbook is tested with)."""
    out = {}
    for line in (root / "requirements" / "base.txt").read_text().splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s#;]+)", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    m = re.search(r"^TORCH_SPEC \?= torch==(\S+)", (root / "Makefile").read_text(), re.M)
    if m:
        out["torch"] = m.group(1)
    return out


def conflicts(root: Path = ROOT, version: str | None = None) -> list[str]:
    """One sentence per project pin that the GPU vLLM's declared requirements exclude."""
    from packaging.specifiers import SpecifierSet

    version = version or chosen_gpu_vllm(root)
    wanted = requirements(version, root)
    out = []
    for name, pin in project_pins(root).items():
        spec = wanted.get(name)
        if spec and pin not in SpecifierSet(spec, prereleases=True):
            out.append(f"{name}=={pin} is pinned but vllm {version} requires {name}{spec}")
    return out
