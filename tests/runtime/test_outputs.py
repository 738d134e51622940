"""Output folders: the workbook deletes and overwrites only what it wrote itself, and every write is whole."""

import json
import os

import pytest

from nbkit.runtime import outputs
from nbkit.tasks import dataset as ds
from tests.tasks.test_dataset import FakeEngine, arith_task, cfg, planned


def build(tmp_path, out):
    task = arith_task(12)
    return ds.build(task, cfg(tmp_path, out_dir=str(out), lo=0.0, hi=1.0), FakeEngine(planned(task)), progress=False)


def test_a_dataset_build_never_deletes_a_folder_it_did_not_write(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(outputs.OutputFolderError, match=r"notes\.txt"):
        build(tmp_path, out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert not (tmp_path / "cache").exists()  # refused before any sampling
    with pytest.raises(outputs.OutputFolderError, match="project root"):
        build(tmp_path, ".")


def test_a_dataset_build_replaces_its_own_earlier_build_and_leaves_no_temporary_folder(tmp_path):
    out = tmp_path / "sets" / "t"
    first = build(tmp_path, out)
    assert outputs.read_marker(out)["kind"] == "dataset"
    second = build(tmp_path, out)  # the workbook's own folder: replaced whole
    assert second.path == out and ds.load_card(out)["created"] == second.card["created"]
    assert first.card["counts"]["kept"] == second.card["counts"]["kept"]
    assert sorted(p.name for p in (tmp_path / "sets").iterdir()) == ["t"]  # no .tmp or .old left beside it


def test_only_the_marker_makes_a_folder_the_workbooks_never_its_file_names(tmp_path):
    out = tmp_path / "old"
    build(tmp_path, out)
    assert outputs.check_folder(out, "dataset") == "own"
    (out / outputs.MARKER).unlink()  # exactly a dataset's files, but nothing says the workbook wrote them
    with pytest.raises(outputs.OutputFolderError, match=r"card\.json.*no \.nbkit-output\.json marker") as err:
        outputs.check_folder(out, "dataset")
    assert "overwrite" not in str(err.value)  # a refusal never advises replacing the user's folder


def test_a_folder_of_another_kind_is_refused(tmp_path):
    outputs.write_marker(tmp_path / "run", "rl-run")
    with pytest.raises(outputs.OutputFolderError, match="a workbook 'rl-run' output"):
        outputs.check_folder(tmp_path / "run", "dataset")
    assert outputs.check_folder(tmp_path / "new", "dataset") == "new"
    (tmp_path / "empty").mkdir()
    assert outputs.check_folder(tmp_path / "empty", "dataset") == "empty"


def test_an_atomic_write_that_fails_leaves_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "config.json"
    outputs.write_json(target, {"lr": 1})

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        outputs.write_json(target, {"lr": 2})
    assert json.loads(target.read_text()) == {"lr": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # the temporary file is gone too


def test_the_shipped_tiny_arith_set_is_marked_as_a_workbook_dataset():
    assert outputs.check_folder(ds.BuildConfig().output_path(), "dataset") == "own"
