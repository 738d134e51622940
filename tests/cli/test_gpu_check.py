"""``nbkit gpu-check`` on a node without a GPU: one "cannot check here" line per item and a JSON record, exit 0, no
traceback; a failing item is its own FAIL line and exit 1."""

from __future__ import annotations

import json

import pytest

from nbkit.cli import gpu_check
from nbkit.cli.main import main as nbkit_main


def test_on_a_cpu_every_item_says_it_cannot_check_here(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "cuda_gpus", lambda: 0)
    record = tmp_path / "record.json"
    assert nbkit_main(["gpu-check", "--json", str(record)]) == 0
    out, err = capsys.readouterr()
    names = [name for name, _ in gpu_check.items()]
    lines = out.splitlines()
    for name in names:
        (line,) = [ln for ln in lines if ln.startswith(f"SKIP {name}: ")]
        assert "needs" in line and "CUDA GPU" in line
    assert f"cannot check here ({len(names)})" in out and "Traceback" not in out + err
    saved = json.loads(record.read_text())
    assert [r["item"] for r in saved["results"]] == names
    assert {r["status"] for r in saved["results"]} == {"cannot check here"}
    assert {"fp16", "bf16", "pi-fp32", "vllm-colocate-sleep", "vllm-server-sync", "scaler-single_gpu"} <= set(names)


def test_a_failing_item_is_one_fail_line_and_exit_1(tmp_path, monkeypatch, capsys):
    def broken(work):
        raise AssertionError("audited matmul dtypes ['fp32'], expected only fp16")

    monkeypatch.setattr(gpu_check, "items", lambda: [("fp16", broken), ("bf16", lambda work: "2 steps")])
    assert gpu_check.main(["--json", str(tmp_path / "r.json")]) == 1
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
