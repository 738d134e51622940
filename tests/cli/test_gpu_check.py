"""``nbkit gpu-check`` on a node without a GPU: one line and exit 3 (nothing checked); ``--smoke`` there: one SKIP
line per GPU item naming why, a JSON record, exit 0; a failing item is its own FAIL line and exit 1, no traceback."""

from __future__ import annotations

import json

import pytest

from nbkit.cli import gpu_check
from nbkit.cli.main import main as nbkit_main


def test_without_a_gpu_the_check_refuses_in_one_line_and_exits_non_zero(tmp_path, capsys):
    """Issue 73, item 11: skipping every item and exiting 0 let ``nbkit gpu-check && train`` go ahead on a machine
    without a GPU. This machine has none."""
    assert gpu_check.cuda_gpus() == 0
    record = tmp_path / "record.json"
    assert nbkit_main(["gpu-check", "--json", str(record)]) == gpu_check.NO_GPU == 3
    out, err = capsys.readouterr()
    (line,) = out.splitlines()
    assert line.startswith("nbkit gpu-check: no CUDA GPU found (torch ") and "--smoke" in line and err == ""
    assert not record.exists()  # nothing was checked


def test_the_help_states_both_modes_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "3 without --smoke on a machine with no CUDA GPU" in text
    assert "--smoke on a machine without a GPU lists what cannot run here and exits 0" in text


def test_the_smoke_test_on_a_cpu_skips_every_gpu_item_naming_why_and_exits_0(tmp_path, capsys):
    """Issue 72, deliver 3: the environment line, then one SKIP line per GPU item with its reason; the server's
    command is checked against the model's positions first, and the critic's estimate is computed; exit 0."""
    record = tmp_path / "smoke.json"
    assert nbkit_main(["gpu-check", "--smoke", "--json", str(record)]) == 0
    out = capsys.readouterr().out
    names = [name for name, _ in gpu_check.smoke_items()]
    assert names == ["environment", "fp16", "bf16", "pi-fp32", "vllm-colocate-sleep", "vllm-server-sync"] + [
        "critic-memory"
    ]
    lines = {ln.split(":")[0]: ln for ln in out.splitlines()}
    assert lines["PASS environment"].startswith("PASS environment: Python 3.")
    for name in names[1:]:  # the server's weight sync takes a second GPU (one NCCL rank per device)
        assert f"needs {2 if name == 'vllm-server-sync' else 1} CUDA GPU" in lines[f"SKIP {name}"]
    server = lines["SKIP vllm-server-sync"]
    assert "server command checked (data/models/tiny-arith, --max-model-len 128 within 128 positions)" in server
    saved = json.loads(record.read_text())
    assert saved["mode"] == "smoke" and [r["item"] for r in saved["results"]] == names
    values = {r["item"]: r["values"] for r in saved["results"]}
    assert values["environment"]["gpus"] == 0 and values["environment"]["torch"]
    assert "estimate" in lines["SKIP critic-memory"] and "Traceback" not in out


def test_the_smoke_test_with_vllm_and_trl_hidden_names_them_in_each_skip(tmp_path):
    """Issue 72, deliver 4: an air-gapped node without vLLM or TRL still runs the smoke test; the items that need
    them say so (this CPU: besides the GPU). A meta-path finder hides both packages from a fresh interpreter."""
    import os
    import subprocess
    import sys

    from nbkit.runtime.paths import ROOT

    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('vllm', 'trl'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (hidden)')\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    record = tmp_path / "smoke.json"
    done = subprocess.run(
        [sys.executable, "-m", "nbkit", "gpu-check", "--smoke", "--json", str(record)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {ln.split(":")[0]: ln for ln in done.stdout.splitlines()}
    environment = lines["PASS environment"]
    assert (
        "vLLM not importable (No module named 'vllm' (hidden))" in environment and "TRL not importable" in environment
    )
    for name in ("vllm-colocate-sleep", "vllm-server-sync"):
        assert "vllm is not importable" in lines[f"SKIP {name}"] and "trl is not importable" in lines[f"SKIP {name}"]
    for name in ("fp16", "bf16", "pi-fp32", "critic-memory"):
        assert "trl is not importable" in lines[f"SKIP {name}"] and "vllm" not in lines[f"SKIP {name}"]
    assert "Traceback" not in done.stdout + done.stderr


def test_a_failing_item_is_one_fail_line_and_exit_1(tmp_path, monkeypatch, capsys):
    def broken(work):
        raise AssertionError("audited matmul dtypes ['fp32'], expected only fp16")

    monkeypatch.setattr(gpu_check, "smoke_items", lambda: [("fp16", broken), ("bf16", lambda work: "2 steps")])
    assert gpu_check.main(["--smoke", "--json", str(tmp_path / "r.json")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        "FAIL fp16: AssertionError: audited matmul dtypes ['fp32'], expected only fp16",
        "PASS bf16: 2 steps",
    ]


def test_an_unknown_item_is_refused_naming_the_items(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        nbkit_main(["gpu-check", "--only", "fp17", "--json", str(tmp_path / "r.json")])
    assert stop.value.code == 2
    assert "unknown item(s) ['fp17']; choose from ['fp16'" in capsys.readouterr().err
