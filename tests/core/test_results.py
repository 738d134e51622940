"""Stored results (``nbkit.results``): a study written from run folders reads back row for row, with a provenance
card naming a commit that exists, the machine, date, command and wall time."""

import gzip
import json
import subprocess

import pytest

from nbkit import results
from nbkit.records.runlog import MetricsLog
from nbkit.runtime.outputs import OutputFolderError
from nbkit.runtime.paths import ROOT


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


def test_every_shipped_study_is_sealed_and_is_what_was_stored():
    studies = sorted(p.parent.name for p in results.RESULTS.glob(f"*/{results.CARD}") if results.REPLACED not in str(p))
    assert studies
    for study in studies:
        assert results.card(study).get("sealed"), f"{study}: its card carries no seal"
        assert results.verify(study) == [], study


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


def _stored(tmp_path, **kw):
    root = tmp_path / "results"
    configs = {"runs": {"grpo-fp16-s0": {"lr": 1e-5, "steps": 2}, "grpo-bf16-s0": {"lr": 1e-5, "steps": 2}}}
    results.store("demo", _runs(tmp_path), command="x", root=root, configs=configs, **{"wall_seconds": 9.0, **kw})
    return root


def _edit_card(root, edit):
    path = root / "demo" / results.CARD
    card = json.loads(path.read_text())
    edit(card)
    path.write_text(json.dumps(card, indent=1))


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda c: c.update(rows=c["rows"] + 1), "card says 5 rows but its runs hold 4"),
        (lambda c: c["configs"]["runs"]["grpo-fp16-s0"].update(lr=1e-3), "provenance.json"),
        (lambda c: c.update(wall_seconds=1.0), "provenance.json"),
        (lambda c: c.update(runs=["grpo-fp16-s0"]), "card lists runs ['grpo-fp16-s0'] but runs/ holds"),
    ],
    ids=["rows", "a run's lr", "wall_seconds", "runs"],
)
def test_a_hand_edited_card_fails_its_check_naming_what_changed(tmp_path, edit, named):
    """Issue 55, 8: a card edited by hand (its rows, a run's lr) passed as up to date."""
    root = _stored(tmp_path)
    assert results.verify("demo", root) == []
    _edit_card(root, edit)
    said = " | ".join(results.verify("demo", root))
    assert named in said, said


def test_a_run_file_changed_after_store_is_named(tmp_path):
    root = _stored(tmp_path)
    run = root / "demo" / "runs" / "grpo-bf16-s0.jsonl.gz"
    run.write_bytes(gzip.compress(b'{"step": 1, "accuracy": 0.9}\n{"step": 2, "accuracy": 0.9}\n', mtime=0))
    assert results.verify("demo", root) == [
        "changed after it was stored (sha256 differs from the card's seal): runs/grpo-bf16-s0.jsonl.gz"
    ]


def test_an_amendment_is_no_edit(tmp_path):
    from nbkit.studies import amendments

    root = _stored(tmp_path)
    amendments.amend("demo", amendments.Amendment("a rule", "abc", "2026-01-01T00:00:00+00:00", "why"), root)
    assert results.verify("demo", root) == []
    assert set(results.RECORD) == set(amendments.RECORD_KEYS)


def test_a_wall_time_not_measured_is_recorded_as_unknown_never_as_zero(tmp_path):
    """Issue 55, 16: `nbkit study NAME store` recorded its own ~0 s as the study's wall time."""
    root = _stored(tmp_path, wall_seconds=None)
    assert results.card("demo", root)["wall_seconds"] is None
    assert "wall time not recorded" in results.describe("demo", root)
    assert "12 min wall" == results.wall_text(720.0)


def test_a_count_of_one_is_singular_every_other_plural():
    assert [results.count(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]


def test_a_machine_recorded_under_capped_kernels_says_so_wherever_its_sitting_is_described(tmp_path, monkeypatch):
    """A sitting run under the AVX2 emulation on an AVX512 CPU names the caps: the CPU's name alone would not say
    which kernels ran."""
    caps = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert (
        results.caps_text({"kernel_caps": caps})
        == "; kernels capped: ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2"
    )
    assert results.caps_text({"kernel_caps": {}}) == results.caps_text(None) == ""
    from nbkit.precision import gemm

    monkeypatch.setattr(gemm, "kernel_caps", lambda: caps)
    root = tmp_path / "results"
    results.store("demo", _runs(tmp_path), command="x", wall_seconds=1, root=root)
    assert "kernels capped: ATEN_CPU_CAPABILITY=avx2" in results.describe("demo", root)


def test_the_benchmark_header_names_the_cpu_its_cores_and_how_busy_they_are(monkeypatch):
    box = {"cpu": "Some CPU 9000", "cores": 2, "cpu_flags": ["avx2"], "kernel_caps": {}}
    monkeypatch.setattr(results, "machine", lambda: box)
    monkeypatch.setattr("os.getloadavg", lambda: (1.25, 1.0, 1.0))
    line = results.cpu_header()
    assert line.startswith("CPU: Some CPU 9000 (2 cores; avx2)")
    assert "torch threads" in line and line.endswith("load average 1.25")


def test_every_benchmark_prints_the_cpu_header():
    """A measurement says which CPU it ran on: each benchmark script prints ``results.cpu_header()``."""
    scripts = sorted((ROOT / "benchmarks").glob("bench_*.py"))
    assert scripts
    assert [p.name for p in scripts if "cpu_header()" not in p.read_text()] == []
