"""Stored results (``nbkit.results``): a study written from run folders reads back row for row, with a provenance
card naming a commit that exists, the machine, date, command and wall time."""

import gzip
import json
import subprocess

import pytest

from nbkit import results
from nbkit.outputs import OutputFolderError
from nbkit.paths import ROOT
from nbkit.runlog import MetricsLog


def _runs(tmp_path):
    for label, acc in (("grpo-fp16-s0", [0.1, 0.5]), ("grpo-bf16-s0", [0.2, 0.4])):
        log = MetricsLog(tmp_path / "runs" / label / "metrics.jsonl")
        for step, a in enumerate(acc, 1):
            log.append({"step": step, "accuracy": a, "mismatch/kl_k3": 1e-4 * step})
    return tmp_path / "runs"


def test_a_stored_study_reads_back_row_for_row_with_its_card(tmp_path):
    root = tmp_path / "results"
    out = results.store(
        "demo",
        _runs(tmp_path),
        command="make report PROFILE=cpu-full",
        wall_seconds=12.34,
        configs={"grpo-fp16-s0": {"lr": 1e-4}},
        root=root,
    )
    assert (out / "runs" / "grpo-fp16-s0.jsonl.gz").is_file()
    with gzip.open(out / "runs" / "grpo-fp16-s0.jsonl.gz", "rt") as fh:  # really compressed JSON lines
        assert json.loads(fh.readline())["accuracy"] == 0.1
    runs = results.load("demo", root=root)
    assert runs == {
        "grpo-bf16-s0": [
            {"step": 1, "accuracy": 0.2, "mismatch/kl_k3": 1e-4},
            {"step": 2, "accuracy": 0.4, "mismatch/kl_k3": 2e-4},
        ],
        "grpo-fp16-s0": [
            {"step": 1, "accuracy": 0.1, "mismatch/kl_k3": 1e-4},
            {"step": 2, "accuracy": 0.5, "mismatch/kl_k3": 2e-4},
        ],
    }
    card = results.card("demo", root=root)
    assert card["command"] == "make report PROFILE=cpu-full" and card["wall_seconds"] == 12.3
    assert card["runs"] == ["grpo-bf16-s0", "grpo-fp16-s0"] and card["rows"] == 4
    assert card["machine"]["cores"] >= 1 and card["machine"]["torch"] and card["date"].startswith("20")
    assert card["configs"] == {"grpo-fp16-s0": {"lr": 1e-4}}
    exists = subprocess.run(["git", "cat-file", "-e", f"{card['commit']}^{{commit}}"], cwd=ROOT)
    assert exists.returncode == 0, f"the card's commit {card['commit']} is not in this repository"
    assert "demo" in results.describe("demo", root=root) and card["commit"][:10] in results.describe("demo", root=root)


def test_storing_again_replaces_the_study_as_a_whole(tmp_path):
    root = tmp_path / "results"
    results.store("demo", _runs(tmp_path), command="x", wall_seconds=1, root=root)
    results.store("demo", {"only-one": [{"step": 1}]}, command="y", wall_seconds=2, root=root)
    assert list(results.load("demo", root=root)) == ["only-one"] and results.card("demo", root=root)["command"] == "y"


def test_bad_requests_fail_with_a_clear_message(tmp_path):
    root = tmp_path / "results"
    with pytest.raises(FileNotFoundError, match="no stored study 'missing'"):
        results.load("missing", root=root)
    with pytest.raises(ValueError, match="plain folder name"):
        results.store("../escape", {"a": [{"step": 1}]}, command="x", wall_seconds=1, root=root)
    with pytest.raises(ValueError, match="nothing to store"):
        results.store("demo", tmp_path / "no-runs-here", command="x", wall_seconds=1, root=root)
    with pytest.raises(ValueError, match="empty"):
        results.store("demo", {"a": []}, command="x", wall_seconds=1, root=root)
    foreign = root / "mine"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("the user's")
    with pytest.raises(OutputFolderError):
        results.store("mine", {"a": [{"step": 1}]}, command="x", wall_seconds=1, root=root)
    assert (foreign / "notes.txt").read_text() == "the user's"


def test_every_shipped_study_loads_and_names_a_commit_of_this_repository():
    studies = sorted(p.parent.name for p in results.RESULTS.glob(f"*/{results.CARD}"))
    for study in studies:
        runs, card = results.load(study), results.card(study)
        assert runs and set(runs) == set(card["runs"]), study
        assert all(rows for rows in runs.values()), study
        exists = subprocess.run(["git", "cat-file", "-e", f"{card['commit']}^{{commit}}"], cwd=ROOT)
        assert exists.returncode == 0, f"{study}: commit {card['commit']} is not in this repository"


def test_storing_the_same_rows_again_writes_the_same_bytes(tmp_path, monkeypatch):
    """A study continued in a later sitting re-stores its earlier runs: unchanged runs must not churn the repo."""
    rows = {"a": [{"step": 1, "x": 0.5}], "b": [{"step": 1, "x": 0.25}]}
    first = results.store("s", rows, command="c", wall_seconds=1.0, root=tmp_path / "one")
    monkeypatch.setattr(gzip.time, "time", lambda: 2e9)  # a later sitting (gzip stamps the time unless told not to)
    second = results.store("s", rows, command="c", wall_seconds=1.0, root=tmp_path / "two")
    for label in rows:
        assert (first / "runs" / f"{label}.jsonl.gz").read_bytes() == (
            second / "runs" / f"{label}.jsonl.gz"
        ).read_bytes()
    assert results.load("s", tmp_path / "two") == rows
