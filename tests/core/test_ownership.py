"""No user file is ever touched: every entry point that writes refuses a folder of the user's files before any
work, with or without ``overwrite``, and leaves every byte (and every neighbour of the folder) as it was.

The decoy holds exactly the names the workbook itself writes (``config.json``, ``README.md``, ``card.json``,
``index.html``, ``doctor.html``, ...): only the workbook's marker makes a folder the workbook's, never its file
names. Every call here is refused before a model loads (seconds in all).
"""

import hashlib
import json
import types
from pathlib import Path

import pytest

from nbkit import results, tasks
from nbkit.cli import doctor as doctor_cli
from nbkit.cli import main as cli_main
from nbkit.rl import RLConfig, runfolder, train
from nbkit.runtime import outputs
from nbkit.tasks import dataset
from nbkit.workbook import runner

USER_FILES = {
    "config.json": '{"lr": 1, "note": "my experiment settings"}\n',
    "README.md": "# my project\n",
    "card.json": '{"mine": true}\n',
    "index.html": "<p>my homepage</p>\n",
    "doctor.html": "<p>my appointment</p>\n",
    "about.html": "<p>about me</p>\n",
    "mynotes.ipynb": '{"cells": []}\n',
    "metrics.jsonl": '{"step": 1}\n',
    "provenance.json": "{}\n",
    "dataset_dict.json": '{"splits": ["train"]}\n',
}


def make_decoy(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, text in USER_FILES.items():
        (folder / name).write_text(text)
    (folder / "checkpoint-1").mkdir()
    (folder / "checkpoint-1" / "weights.bin").write_bytes(b"\x00\x01 my weights")
    return folder


def snapshot(folder: Path) -> dict:
    """relative path -> (sha256, mode) of everything in the decoy's parent: the decoy and any neighbour."""
    root = folder.parent
    return {
        str(p.relative_to(root)): (
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir",
            p.stat().st_mode,
        )
        for p in sorted(root.rglob("*"))
    }


def rl(data: str, out: Path, **kw) -> RLConfig:
    return RLConfig(
        dataset=data, train_dtype="fp32", max_steps=1, prompts_per_step=2, num_generations=2, output_dir=str(out), **kw
    )


def cli(argv: list[str]):
    code = cli_main.main(argv)
    assert code == 2, f"expected a refusal (exit 2), got {code}"


def grid_study_run(decoy: Path, data: str):
    from nbkit.studies.base import GridStudy
    from nbkit.studies.catalog import STUDIES

    study = next(s for s in STUDIES.values() if isinstance(s, GridStudy))
    options = {**study.toy, "output_dir": str(decoy.parent / "study")}
    first = next(iter(study.grid(**options).values()))
    Path(first.output_dir).parent.mkdir(parents=True)
    decoy.rename(first.output_dir)  # the decoy is where the study's first run would go
    try:
        study.run(progress=False, **options)
    finally:
        Path(first.output_dir).rename(decoy)
        Path(first.output_dir).parent.rmdir()  # only if nothing else was written there


ENTRY_POINTS = {
    "train": lambda d, data: train(rl(data, d), progress=False),
    "train-overwrite": lambda d, data: train(rl(data, d, overwrite=True), progress=False),
    "train-resume": lambda d, data: train(rl(data, d, resume=True), progress=False),
    "nbkit-train-overwrite": lambda d, data: cli(
        ["train", "--dataset", data, "--train-dtype", "fp32", "--steps", "1", "--output-dir", str(d), "--overwrite"]
    ),
    "nbkit-run": lambda d, data: cli(["run", "--profile", "smoke", "--only", "00", "--out", str(d)]),
    "runner-run": lambda d, data: runner.run("smoke", d, only=["00"]),
    "nbkit-doctor": lambda d, data: cli(["doctor", "--model", "tiny-arith", "--engine", "hf", "--out", str(d)]),
    "doctor-write-html": lambda d, data: doctor_cli.write_html(types.SimpleNamespace(), d),
    "dataset-build": lambda d, data: dataset.build(
        tasks.make_task(tasks.TaskConfig(source="arith", pool_size=4)),
        dataset.BuildConfig(out_dir=str(d), cache_dir=str(d.parent / "cache")),
        progress=False,
    ),
    "dataset-write": lambda d, data: dataset.write_dataset([], [], {"name": "x"}, d),
    "study-store": lambda d, data: results.store(
        d.name, {"a": [{"step": 1}]}, command="nbkit study x run", wall_seconds=1, root=d.parent
    ),
    "study-run": grid_study_run,
}


def refusal(entry: str, folder: Path, data: str, capsys) -> str:
    """What entry point ``entry`` said when pointed at ``folder``: the refusal's message (library calls) or its
    standard error (the command line: one line, exit 2)."""
    try:
        ENTRY_POINTS[entry](folder, data)
    except outputs.OutputFolderError as exc:
        return str(exc)
    return capsys.readouterr().err


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=list(ENTRY_POINTS))
def test_a_folder_of_user_files_is_refused_and_left_byte_for_byte(entry, tmp_path, arith_jsonl, capsys):
    decoy = make_decoy(tmp_path / "work" / "mine")
    before = snapshot(decoy)
    said = refusal(entry, decoy, arith_jsonl, capsys)
    assert "README.md" in said and "no .nbkit-output.json marker" in said, said  # names what it found
    assert "overwrite" not in said  # a refusal never advises replacing a folder that is not a marked run
    assert "Traceback" not in said
    assert snapshot(decoy) == before


def test_overwrite_replaces_only_a_marked_folder_of_the_same_kind(tmp_path, arith_jsonl):
    other = tmp_path / "a-dataset"
    outputs.write_marker(other, "dataset")
    (other / "card.json").write_text("{}")
    before = snapshot(other)
    with pytest.raises(outputs.OutputFolderError, match="a workbook 'dataset' output"):
        train(rl(arith_jsonl, other, overwrite=True), progress=False)
    assert snapshot(other) == before
    run = tmp_path / "a-run"
    outputs.write_marker(run, runfolder.KIND)
    (run / "config.json").write_text(json.dumps(rl(arith_jsonl, run).to_dict()))
    with pytest.raises(FileExistsError, match="already holds a run.*overwrite=True"):  # a marked run: advised
        train(rl(arith_jsonl, run), progress=False)
    assert runfolder.plan_run(rl(arith_jsonl, run, overwrite=True)).clear  # and replaced when asked


def test_a_refused_run_into_a_new_folder_leaves_no_folder_behind(tmp_path):
    out = tmp_path / "new" / "run"
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        train(rl(str(tmp_path / "nowhere.jsonl"), out), progress=False)
    assert list(tmp_path.iterdir()) == []  # neither the run folder nor the parent the lock created


def test_outputs_follow_the_umask(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        outputs.write_text(tmp_path / "a.txt", "x")
        tmp = outputs.temp_folder_beside(tmp_path / "out")
        assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644  # as open() makes it, not 0600
        assert tmp.stat().st_mode & 0o777 == 0o755  # as mkdir makes it, not 0700
        os.umask(0o077)
        outputs.write_text(tmp_path / "b.txt", "x")
        assert (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o600  # a private umask is kept too
    finally:
        os.umask(old)


def test_a_killed_builds_temporary_folder_is_removed_by_the_next_build(tmp_path):
    import os
    import subprocess
    import sys

    out = tmp_path / "set"
    code = (
        "import os, sys; from pathlib import Path; from nbkit.runtime import outputs; "
        f"t = outputs.temp_folder_beside(Path({str(out)!r})); (t / 'half.parquet').write_text('x'); "
        "os.kill(os.getpid(), 9)"
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".set.")]
    assert len(left) == 1 and (left[0] / "half.parquet").exists()  # what a kill -9 leaves
    alive = tmp_path / f".set.{os.getpid()}-building.tmp"  # a build still running (this process): kept
    alive.mkdir()
    (tmp_path / "set-notes").mkdir()  # any other name: kept
    fresh = outputs.temp_folder_beside(out)
    assert not left[0].exists() and fresh.exists() and alive.exists() and (tmp_path / "set-notes").exists()


EXACT_DECOYS = {  # the user's files named exactly as a workbook output of that kind (the reported data losses)
    "train-overwrite": ("config.json", "README.md"),
    "nbkit-train-overwrite": ("config.json", "README.md", "metrics.jsonl"),
    "dataset-build": ("README.md", "card.json"),
    "nbkit-run": ("index.html", "about.html", "mynotes.ipynb"),
    "nbkit-doctor": ("doctor.html",),
    "study-store": ("provenance.json", "README.md"),
}


@pytest.mark.parametrize("entry", EXACT_DECOYS, ids=list(EXACT_DECOYS))
def test_file_names_the_workbook_uses_do_not_make_a_folder_its_own(entry, tmp_path, arith_jsonl, capsys):
    decoy = tmp_path / "work" / "mine"
    decoy.mkdir(parents=True)
    for name in EXACT_DECOYS[entry]:
        (decoy / name).write_text(f"the user's {name}\n")
    before = snapshot(decoy)
    said = refusal(entry, decoy, arith_jsonl, capsys)
    assert EXACT_DECOYS[entry][0] in said and "overwrite" not in said, said
    assert snapshot(decoy) == before


MARKED_KINDS = {
    "dataset-build": "dataset",
    "dataset-write": "dataset",
    "study-store": "results",
    "train-overwrite": runfolder.KIND,
    "nbkit-train-overwrite": runfolder.KIND,
}
"""Entry points that replace a marked folder of their own kind (a rebuild, a re-store, an overwrite)."""
EXTRAS = {"NOTES.md": "my notes\n", "README.md": "# my project\n"}
"""What a user adds to a folder the workbook made (issue 41: a rebuild took them with it)."""


@pytest.mark.parametrize("entry", MARKED_KINDS, ids=list(MARKED_KINDS))
def test_a_marked_folder_holding_the_users_files_is_refused_and_left_byte_for_byte(
    entry, tmp_path, arith_jsonl, capsys
):
    folder = tmp_path / "work" / "mine"
    outputs.write_marker(folder, MARKED_KINDS[entry], files=[])  # the workbook's, and it wrote nothing listed
    if MARKED_KINDS[entry] == runfolder.KIND:  # a run there, so that --overwrite has something to replace
        (folder / "config.json").write_text(json.dumps(rl(arith_jsonl, folder).to_dict()))
        (folder / "metrics.jsonl").write_text('{"step": 1}\n')
    for name, text in EXTRAS.items():
        (folder / name).write_text(text)
    (folder / "my-run").mkdir()
    (folder / "my-run" / "metrics.jsonl").write_text('{"step": 1}\n')
    before = snapshot(folder)
    said = refusal(entry, folder, arith_jsonl, capsys)
    assert "NOTES.md" in said and "README.md" in said and "which the workbook did not write" in said, said
    assert "Traceback" not in said
    assert snapshot(folder) == before


@pytest.mark.parametrize("entry", ["nbkit-doctor", "nbkit-run", "runner-run"])
def test_a_report_or_doctor_folder_listing_its_files_refuses_a_users_file_added_to_it(
    entry, tmp_path, arith_jsonl, capsys
):
    folder = tmp_path / "work" / "mine"
    kind = "doctor" if "doctor" in entry else "report"
    outputs.write_marker(folder, kind, files=["doctor.html"] if kind == "doctor" else ["index.html"])
    (folder / ("doctor.html" if kind == "doctor" else "index.html")).write_text("the workbook's\n")
    (folder / "NOTES.md").write_text("mine\n")
    before = snapshot(folder)
    said = refusal(entry, folder, arith_jsonl, capsys)
    assert "NOTES.md, which the workbook did not write" in said and "Traceback" not in said, said
    assert snapshot(folder) == before
