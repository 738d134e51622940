"""Nothing the workbook owns is replaced without a trace (issue 41's four data-loss paths and the folder defects).

A marked folder holds what its marker lists; a rebuild replaces only that and refuses, before any work, a folder
that holds anything else. A stored study is replaced only on purpose (``--replace``, the old one kept beside), and
the same study stored twice is byte for byte the same. A study never replaces a run of another setting without
``--overwrite``. A user's README.md in a run folder is never TRL's model card. Every data-loss check compares the
sha256 of every file of the user's before and after.
"""

import datetime
import hashlib
import json
from pathlib import Path

import pytest

from nbkit import results
from nbkit.cli import main as cli_main
from nbkit.rl import RLConfig, runfolder, train
from nbkit.runtime import outputs
from nbkit.studies.catalog import STUDIES
from nbkit.tasks import dataset as ds
from tests.tasks.test_dataset import FakeEngine, arith_task, cfg, planned


def sha256_tree(folder: Path) -> dict:
    """relative path -> sha256 (or "dir"/"link -> target") of everything under ``folder``."""
    out = {}
    for p in sorted(Path(folder).rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel] = f"link -> {p.readlink()}"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def build(tmp_path, out, **kw):
    task = arith_task(12)
    return ds.build(
        task, cfg(tmp_path, out_dir=str(out), lo=0.0, hi=1.0, **kw), FakeEngine(planned(task)), progress=False
    )


# --- 2. a dataset rebuilt in its own folder never takes the user's files with it -----------------------------------


def users_things(folder: Path) -> list[Path]:
    (folder / "NOTES.md").write_text("my notes on this set\n")
    (folder / "extra_split").mkdir()
    (folder / "extra_split" / "rows.jsonl").write_text('{"problem": "1+1=", "answer": "2"}\n')
    run = folder / "my-run"  # a complete RL run trained into a subfolder
    outputs.write_marker(run, runfolder.KIND)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "summary.json").write_text('{"steps": 1}\n')
    return [folder / "NOTES.md", folder / "extra_split", run]


def test_a_dataset_rebuild_refuses_a_folder_holding_anything_it_did_not_write(tmp_path):
    out = tmp_path / "sets" / "t"
    build(tmp_path, out)
    assert set(outputs.read_marker(out)["files"]) == {
        "README.md",
        "card.json",
        "dataset_dict.json",
        "pool.parquet",
        "train",
        "train.parquet",
    }
    users_things(out)
    before = sha256_tree(tmp_path / "sets")
    engine_calls = []
    with pytest.raises(outputs.OutputFolderError, match=r"also holds NOTES\.md, extra_split, my-run") as err:
        task = arith_task(12)
        engine = FakeEngine(planned(task))
        ds.build(task, cfg(tmp_path, out_dir=str(out), lo=0.0, hi=1.0, resume=False), engine, progress=False)
    engine_calls.append(engine.calls)
    assert "move them out" in str(err.value) and "overwrite" not in str(err.value)
    assert engine_calls == [0]  # refused before any sampling
    assert sha256_tree(tmp_path / "sets") == before  # every byte of the user's (and of the dataset) as it was


def test_a_dataset_marked_before_markers_listed_files_is_rebuilt_only_over_its_own_files(tmp_path):
    out = tmp_path / "t"
    build(tmp_path, out)
    mark = outputs.read_marker(out)
    outputs.write_json(out / outputs.MARKER, {k: v for k, v in mark.items() if k != "files"})  # an older marker
    assert build(tmp_path, out).path == out  # its own files only: rebuilt
    (out / "NOTES.md").write_text("mine\n")
    with pytest.raises(outputs.OutputFolderError, match="NOTES.md"):
        build(tmp_path, out)
    assert (out / "NOTES.md").read_text() == "mine\n"


# --- 9. a symlink as the output is followed, never replaced ----------------------------------------------------------


def test_a_dataset_build_into_a_symlink_rebuilds_its_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "real" / "t"
    first = build(tmp_path, target)
    link = tmp_path / "link"
    link.symlink_to(target)
    second = build(tmp_path, link)
    assert link.is_symlink() and link.resolve() == target.resolve()  # the link is the user's: kept
    assert second.path == target.resolve() and ds.load_card(target)["created"] == second.card["created"]
    assert first.card["counts"]["kept"] == second.card["counts"]["kept"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "link", "real"]  # no .link_….old beside it
    assert sorted(p.name for p in target.parent.iterdir()) == ["t"]


# --- 11. a long name is refused before any work -------------------------------------------------------------------


def test_a_long_dataset_name_is_refused_before_sampling_naming_the_temporary_path(tmp_path):
    out = tmp_path / ("d" * 250)  # a legal folder name: its temporary sibling is not
    task = arith_task(12)
    engine = FakeEngine(planned(task))
    with pytest.raises(outputs.OutputFolderError, match=r"is 250 bytes long.*at most 226 bytes"):
        ds.build(task, cfg(tmp_path, out_dir=str(out)), engine, progress=False)
    assert engine.calls == 0 and not (tmp_path / "cache").exists()
    assert build(tmp_path, tmp_path / ("d" * 226)).card["counts"]["kept"] > 0  # the longest name allowed works


# --- 10. an output that cannot be written is refused before any work -----------------------------------------------


@pytest.mark.parametrize("where", ["under-a-file", "read-only-fs"])
def test_an_unwritable_output_is_refused_before_any_sampling(where, tmp_path):
    if where == "under-a-file":
        (tmp_path / "a-file").write_text("x")
        out = tmp_path / "a-file" / "set"
        said = "is not a folder"
    else:
        out = Path("/proc/nbkit-no-such-folder/set")  # /proc takes no new files, not even root's
        said = "is not writable"
    task = arith_task(12)
    engine = FakeEngine(planned(task))
    with pytest.raises(outputs.OutputFolderError, match=said):
        ds.build(task, cfg(tmp_path, out_dir=str(out)), engine, progress=False)
    assert engine.calls == 0 and not (tmp_path / "cache").exists()


# --- 8. relative paths resolve against the current directory -------------------------------------------------------


def test_relative_output_paths_resolve_against_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert RLConfig(output_dir="runs/r").out == tmp_path / "runs" / "r"
    assert ds.BuildConfig(out_dir="sets/t").output_path() == tmp_path / "sets" / "t"
    (tmp_path / "mine.jsonl").write_text('{"problem": "1+1=", "answer": "2"}\n')
    from nbkit import tasks

    assert tasks.make_task(source="mine.jsonl").problems[0]["problem"] == "1+1="


# --- 4. a user's README.md in a run folder is not TRL's model card --------------------------------------------------


def marked_run(folder: Path, cfg: RLConfig, steps: int, files: list[str] | None = None) -> None:
    """A finished run of ``cfg`` in ``folder`` as the workbook leaves one (no model: the folder's files only)."""
    outputs.write_marker(folder, runfolder.KIND, **({"files": files} if files is not None else {}))
    outputs.write_json(folder / "config.json", {**cfg.to_dict(), "output_dir": str(folder)})
    (folder / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "accuracy": 0.5}) + "\n" for s in range(1, steps + 1))
    )
    outputs.write_json(folder / "summary.json", {"steps": steps})


def test_overwrite_never_deletes_a_users_readme_in_a_marked_run_folder(tmp_path, arith_jsonl):
    out = tmp_path / "run"
    cfg = RLConfig(
        dataset=arith_jsonl,
        train_dtype="fp32",
        max_steps=1,
        prompts_per_step=2,
        num_generations=2,
        output_dir=str(out),
        overwrite=True,
    )
    marked_run(out, cfg, 1, files=[])
    (out / "README.md").write_text("# what I learned from this run\n")
    before = sha256_tree(tmp_path)
    with pytest.raises(outputs.OutputFolderError, match="README.md, which the workbook did not write"):
        train(cfg, progress=False)
    assert sha256_tree(tmp_path) == before
    assert "README.md" not in runfolder.RUN_FILES


def test_a_readme_the_workbook_recorded_is_replaced_with_its_run(tmp_path, arith_jsonl):
    out = tmp_path / "run"
    cfg = RLConfig(
        dataset=arith_jsonl,
        train_dtype="fp32",
        max_steps=1,
        prompts_per_step=2,
        num_generations=2,
        output_dir=str(out),
        overwrite=True,
    )
    marked_run(out, cfg, 1, files=["README.md"])  # TRL's model card, recorded when a checkpoint wrote it
    (out / "README.md").write_text("---\nlibrary_name: transformers\ntags: [trl]\n---\n")
    plan = runfolder.plan_run(cfg)
    assert plan.clear
    runfolder.begin(plan, cfg)
    assert sorted(p.name for p in out.iterdir()) == [outputs.MARKER, "config.json"]


CARD = "---\nlibrary_name: transformers\ntags: [trl, grpo]\n---\n# Model Card for run\n"
"""What TRL's ``create_model_card`` writes (its head is what ``runfolder`` recognises as TRL's card)."""


def trl_writes_its_card(folder: Path) -> None:
    """Stands for TRL's ``create_model_card`` with ``args.output_dir`` = ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(CARD)


def test_trls_card_goes_aside_when_readme_is_the_users_and_the_marker_lists_only_what_was_written(tmp_path):
    out = tmp_path / "run"
    outputs.write_marker(out, runfolder.KIND, files=[])
    (out / "README.md").write_text("# mine\n")
    before = hashlib.sha256(b"# mine\n").hexdigest()
    assert runfolder.place_model_card(out, trl_writes_its_card) == runfolder.CARD_ASIDE
    assert runfolder.place_model_card(out, trl_writes_its_card) == runfolder.CARD_ASIDE  # the next checkpoint's
    assert hashlib.sha256((out / "README.md").read_bytes()).hexdigest() == before
    assert (out / runfolder.CARD_ASIDE).read_text() == CARD
    assert outputs.read_marker(out)["files"] == [runfolder.CARD_ASIDE]
    assert sorted(p.name for p in out.iterdir()) == sorted([outputs.MARKER, "README.md", runfolder.CARD_ASIDE])


def test_a_readme_the_user_writes_over_the_runs_card_is_never_replaced(tmp_path):
    out = tmp_path / "run"
    outputs.write_marker(out, runfolder.KIND, files=[])
    assert runfolder.place_model_card(out, trl_writes_its_card) == "README.md"  # free: the run's card, recorded
    assert outputs.read_marker(out)["files"] == ["README.md"]
    assert runfolder.place_model_card(out, trl_writes_its_card) == "README.md"  # its own card: replaced
    (out / "README.md").write_text("# what I saw at step 4\n")  # the user's, mid-run
    assert runfolder.place_model_card(out, trl_writes_its_card) == runfolder.CARD_ASIDE
    assert (out / "README.md").read_text() == "# what I saw at step 4\n"
    (out / runfolder.CARD_ASIDE).write_text("# mine too\n")
    outputs.write_marker(out, runfolder.KIND, files=[])
    assert runfolder.place_model_card(out, trl_writes_its_card) is None  # both names the user's: no card
    assert (out / runfolder.CARD_ASIDE).read_text() == "# mine too\n"
    assert not (out / runfolder.CARD_SCRATCH).exists()


def test_a_user_readme_does_not_stop_a_resume(tmp_path, arith_jsonl):
    out = tmp_path / "run"
    cfg = RLConfig(
        dataset=arith_jsonl,
        train_dtype="fp32",
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        output_dir=str(out),
        checkpoint_every=1,
    )
    marked_run(out, cfg, 1, files=[])
    (out / "checkpoint-1").mkdir()
    (out / "checkpoint-1" / "trainer_state.json").write_text("{}")
    (out / "README.md").write_text("# mine\n")
    assert runfolder.plan_run(RLConfig(**{**cfg.to_dict(), "resume": True})).action == "resume"


@pytest.mark.slow
def test_a_readme_written_into_the_run_folder_mid_run_is_never_replaced(tmp_path, arith_jsonl, monkeypatch):
    """Issue 55, 2: a user's README.md written at step 4 of a run was replaced by TRL's model card at the next
    checkpoint, and the marker then listed it as the workbook's."""
    from nbkit.rl.trainer import StepLogger

    out = tmp_path / "run"
    cfg = RLConfig(
        model="tiny-arith",
        dataset=arith_jsonl,
        train_dtype="fp32",
        rollout_engine="hf",
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=12,
        checkpoint_every=1,
        output_dir=str(out),
    )
    logged, mine = StepLogger.on_log, b"# notes on this run, written at step 1\n"

    def user_writes(self, args, state, control, logs=None, **kw):
        logged(self, args, state, control, logs=logs, **kw)
        if state.global_step == 1 and not (out / "README.md").exists():
            (out / "README.md").write_bytes(mine)

    with monkeypatch.context() as m:
        m.setattr(StepLogger, "on_log", user_writes)
        train(cfg, progress=False)
    assert (out / "README.md").read_bytes() == mine
    assert "README.md" not in outputs.read_marker(out)["files"]
    assert (
        runfolder.CARD_ASIDE in outputs.read_marker(out)["files"] and "trl" in (out / runfolder.CARD_ASIDE).read_text()
    )
    resumed = train(RLConfig(**{**cfg.to_dict(), "max_steps": 3, "resume": True}), progress=False)
    assert [r["step"] for r in resumed.rows] == [1, 2, 3] and (out / "README.md").read_bytes() == mine


# --- 1. a stored study is replaced only on purpose ------------------------------------------------------------------

ABLATION = STUDIES["ablation_tiny_arith"]


def finished_runs(study, options: dict) -> dict:
    """Every run of the grid, finished in its folder (as ``train`` leaves it, without training)."""
    grid = study.grid(**options)
    for c in grid.values():
        marked_run(Path(c.output_dir), c, c.max_steps)
    return grid


def store(study, root, **options):
    return study.store(wall_seconds=1.0, command="nbkit study x run", root=root, **options)


def test_storing_the_same_study_twice_changes_no_byte(tmp_path):
    options = {**ABLATION.toy, "output_dir": str(tmp_path / "runs")}
    finished_runs(ABLATION, options)
    root = tmp_path / "results"
    path = store(ABLATION, root, **options)
    before = sha256_tree(root)
    assert store(ABLATION, root, **options) == path
    assert sha256_tree(root) == before


def test_storing_another_grid_is_refused_with_the_count_and_the_differing_fields(tmp_path, capsys):
    root = tmp_path / "results"
    options = {**ABLATION.toy, "seeds": [0, 1], "output_dir": str(tmp_path / "runs")}
    finished_runs(ABLATION, options)
    store(ABLATION, root, **options)
    before = sha256_tree(root)
    other = {**ABLATION.toy, "steps": 2, "seeds": [0], "pairs": [["fp32", "fp32"]], "output_dir": str(tmp_path / "x")}
    finished_runs(ABLATION, other)
    with pytest.raises(FileExistsError) as err:
        store(ABLATION, root, **other)
    said = str(err.value)
    assert "4 stored runs -> 1" in said, said
    assert "steps (stored: 1, now: 2)" in said and "seeds (stored: [0, 1], now: [0])" in said
    assert 'pairs (stored: [["fp32", "fp32"], ["bf16", "fp32"]], now: [["fp32", "fp32"]])' in said
    assert "--replace" in said
    assert sha256_tree(root) == before  # byte for byte: the 4 stored runs are all there
    path = store(ABLATION, root, replace=True, **other)  # on purpose: replaced, the old study kept beside
    kept = root / f"{ABLATION.name}.replaced-{datetime.date.today().isoformat()}"
    assert sha256_tree(kept) == before_under(before, ABLATION.name)
    assert results.card(ABLATION.name, root)["runs"] == ["grpo-fp32-s0"] and path == root / ABLATION.name
    assert str(kept) in capsys.readouterr().out


def before_under(tree: dict, prefix: str) -> dict:
    return {k[len(prefix) + 1 :]: v for k, v in tree.items() if k.startswith(prefix + "/")}


def test_storing_with_keep_stored_adds_the_runs_it_lacks_and_keeps_every_stored_byte(tmp_path):
    root = tmp_path / "results"
    options = {**ABLATION.toy, "output_dir": str(tmp_path / "runs")}
    grid = finished_runs(ABLATION, options)
    later = tmp_path / "runs" / "grpo-fp32-s0"
    later.rename(tmp_path / "later")  # trained in a later sitting
    store(ABLATION, root, **options)
    assert results.card(ABLATION.name, root)["runs"] == ["grpo-bf16-fp32r-s0"]
    before = sha256_tree(root / ABLATION.name / "runs")
    (tmp_path / "later").rename(later)
    store(ABLATION, root, keep_stored=True, **options)
    assert sorted(results.card(ABLATION.name, root)["runs"]) == sorted(grid)
    after = sha256_tree(root / ABLATION.name / "runs")
    assert {k: after[k] for k in before} == before  # the stored run is byte for byte what it was


def test_keep_stored_with_another_grid_changes_no_stored_byte(tmp_path, capsys):
    """Issue 55, 1: a plain store of another grid is refused and suggests --keep-stored; --keep-stored with that grid
    deleted the stored runs outside it and overwrote the others, with no copy kept."""
    root = tmp_path / "results"
    options = {**ABLATION.toy, "seeds": [0, 1], "output_dir": str(tmp_path / "runs")}
    finished_runs(ABLATION, options)
    store(ABLATION, root, **options)
    before = sha256_tree(root)
    other = {**ABLATION.toy, "steps": 2, "seeds": [0], "output_dir": str(tmp_path / "other")}
    finished_runs(ABLATION, other)
    with pytest.raises(FileExistsError) as err:
        store(ABLATION, root, keep_stored=True, **other)
    said = str(err.value)
    assert said.startswith(f"study {ABLATION.name}: --keep-stored only adds runs of the stored study's grid"), said
    assert "steps (stored: 1, now: 2)" in said and "4 stored run(s) are not runs of this grid" in said
    assert "--replace" in said
    assert sha256_tree(root) == before  # every stored file, byte for byte; no file added or removed
    sets = [f"--set={k}={json.dumps(v)}" for k, v in other.items()]
    assert cli_main.main(["study", ABLATION.name, "store", "--keep-stored", *sets]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--keep-stored only adds runs" in err[0], err
    assert sha256_tree(root) == before
    store(ABLATION, root, keep_stored=True, replace=True, **other)  # on purpose: the old study kept beside
    kept = root / f"{ABLATION.name}.replaced-{datetime.date.today().isoformat()}"
    assert sha256_tree(kept) == before_under(before, ABLATION.name)


def test_keep_stored_never_replaces_a_stored_run_with_its_run_folders_copy(tmp_path, capsys):
    root = tmp_path / "results"
    options = {**ABLATION.toy, "output_dir": str(tmp_path / "runs")}
    grid = finished_runs(ABLATION, options)
    store(ABLATION, root, **options)
    before = sha256_tree(root)
    label = next(iter(grid))
    with open(Path(grid[label].output_dir) / "metrics.jsonl", "w") as f:  # the run trained again, other numbers
        f.write("".join(json.dumps({"step": s, "accuracy": 0.9}) + "\n" for s in range(1, grid[label].max_steps + 1)))
    store(ABLATION, root, keep_stored=True, **options)
    assert sha256_tree(root) == before
    assert "keep their stored rows" in capsys.readouterr().out


# --- 3. a study never replaces a finished run of another setting without --overwrite --------------------------------


def test_a_study_run_refuses_a_finished_run_of_another_setting_naming_the_fields(tmp_path, monkeypatch):
    from nbkit.rl import grid

    trained = []

    def stand_in(cfg, progress=True):  # the grid's trainer: records the run instead of training it
        trained.append(cfg)
        return grid.RunResult(cfg.out, [], 0.0, [])

    monkeypatch.setattr(grid, "train", stand_in)
    monkeypatch.setenv("NBKIT_WORKERS", "0")  # in this process, where the stand-in is
    options = {**ABLATION.toy, "output_dir": str(tmp_path / "runs")}
    earlier = {**options, "overrides": {**ABLATION.toy["overrides"], "max_completion_length": 12}}  # another setting
    finished_runs(ABLATION, earlier)
    before = sha256_tree(tmp_path)
    with pytest.raises(FileExistsError, match=r"max_completion_length \(run: 12, now: 8\).*--overwrite"):
        ABLATION.run(progress=False, **options)
    assert trained == [] and sha256_tree(tmp_path) == before  # nothing trained, every byte kept
    ABLATION.run(progress=False, overwrite=True, **options)  # on purpose
    assert len(trained) == 2 and all(c.overwrite for c in trained)


def test_the_study_command_refuses_a_run_of_another_setting_in_one_line(tmp_path, capsys):

    earlier = {**ABLATION.toy, "output_dir": str(tmp_path / "runs"), "steps": 3}
    finished_runs(ABLATION, {**earlier, "overrides": {**ABLATION.toy["overrides"], "max_completion_length": 12}})
    before = sha256_tree(tmp_path)
    sets = [f"--set={k}={json.dumps(v)}" for k, v in earlier.items()]
    assert cli_main.main(["study", ABLATION.name, "run", *sets]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_completion_length (run: 12, now: 8)" in err[0] and "--overwrite" in err[0], err
    assert sha256_tree(tmp_path) == before
