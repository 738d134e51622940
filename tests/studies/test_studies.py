"""Every study shares one shape: grid → run a shard (resumable) → store finished runs with a card → load →
coordinates from configs → table → figure. Each registered grid study runs its smallest grid through it here."""

from __future__ import annotations

import pytest

from nbkit import results, schema
from nbkit.studies import GridStudy
from nbkit.studies.base import Study
from nbkit.studies.catalog import STUDIES

GRID_STUDIES = [s for s in STUDIES.values() if isinstance(s, GridStudy)]


def test_every_stored_study_of_rl_runs_is_a_grid_study_with_a_toy_grid():
    for study in STUDIES.values():  # the registry, not a list kept here: RL runs' rows have an optimiser step
        if (results.RESULTS / study.name).is_dir():
            rl_runs = all(schema.STEP in rows[0] for rows in study.load().values())
            assert rl_runs == isinstance(study, GridStudy), f"{study.name}: RL runs iff a GridStudy"
    assert GRID_STUDIES
    for study in GRID_STUDIES:
        assert study.toy, f"{study.name} declares no toy grid"
        if (results.RESULTS / study.name).is_dir():  # (a study registered before its first store has no data yet)
            assert study.stored_meta().keys() == study.load().keys(), f"{study.name}: a stored run has no config"


@pytest.mark.slow
@pytest.mark.parametrize("study", GRID_STUDIES, ids=lambda s: s.name)
def test_the_smallest_grid_runs_stores_loads_and_tabulates(study, tmp_path):
    opts = {**study.toy, "output_dir": str(tmp_path / "runs")}
    grid = study.grid(**opts)
    runs = study.run(progress=False, **opts)
    assert set(runs) == set(grid) and all(rows for rows in runs.values())
    logs = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("**/metrics.jsonl")}
    assert study.run(progress=False, **opts) == runs  # finished runs are read back, not re-trained
    assert {p: p.stat().st_mtime_ns for p in logs} == logs
    study.store(wall_seconds=1.0, command="test", root=tmp_path / "results", **opts)
    assert study.load(tmp_path / "results") == runs
    meta = study.stored_meta(tmp_path / "results")
    assert meta == study.meta({k: grid[k].to_dict() for k in grid})
    rows = study.table(runs, meta)
    assert rows and all(r.keys() == rows[0].keys() for r in rows), "a table's rows share their columns"
    stored = study.table(study.load(tmp_path / "results"), meta)
    assert repr(stored) == repr(rows)  # the stored runs give the live runs' table (repr: NaN cells compare equal)
    fig = study.figure(runs, meta)
    if type(study).figure is not Study.figure:  # a study that declares a figure draws one with data in it
        assert fig is not None and len(fig.data) > 0, f"{study.name}: its figure is empty"


@pytest.mark.slow
def test_a_study_cut_off_after_one_shard_resumes_without_re_running_it(tmp_path):
    """Shard 0/2 finishes, the process dies; the full run trains only what shard 0 did not."""
    study = STUDIES["hunt_tiny_long"]
    opts = {**study.toy, "output_dir": str(tmp_path / "runs")}
    first = study.run((0, 2), progress=False, **opts)
    assert len(first) == 1
    done = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/metrics.jsonl")}
    everything = study.run(progress=False, **opts)
    assert len(everything) == 2 and everything[next(iter(first))] == first[next(iter(first))]
    assert {p: p.stat().st_mtime_ns for p in done} == done


@pytest.mark.slow
def test_a_study_continued_in_a_later_sitting_trains_only_what_the_store_lacks(tmp_path):
    """Sitting 1 stores shard 0/2; its run folders are lost (another machine). Sitting 2 with keep_stored trains
    only shard 1, and its store keeps both, with a card that names each sitting and the runs it trained."""
    import shutil

    study = STUDIES["hunt_tiny_long"]
    root = tmp_path / "results"
    opts = {**study.toy, "output_dir": str(tmp_path / "runs")}
    first = study.run((0, 2), progress=False, **opts)
    study.store(wall_seconds=10.0, command="sitting 1", root=root, **opts)
    shutil.rmtree(tmp_path / "runs")
    second = study.run(progress=False, keep_stored=True, root=root, **opts)
    assert set(second) == set(study.grid(**opts)) - set(first)  # nothing stored is trained again
    assert not any((tmp_path / "runs" / label).exists() for label in first)
    study.store(wall_seconds=5.0, command="sitting 2", root=root, keep_stored=True, **opts)
    assert study.load(root) == {**first, **second}
    card = study.card(root)
    assert [p["runs"] for p in results.parts(card)] == [sorted(first), sorted(second)]
    assert card["wall_seconds"] == 15.0 and "2 sittings" in results.describe(study.name, root)
    assert study.stored_meta(root).keys() == study.load(root).keys()


def test_a_stored_run_of_other_settings_is_not_kept(tmp_path):
    study = STUDIES["hunt_tiny_long"]
    root = tmp_path / "results"
    opts = {**study.toy, "output_dir": str(tmp_path / "runs")}
    grid = study.grid(**opts)
    label = next(iter(grid))
    rows = [{"step": s, "accuracy": 0.5} for s in range(1, grid[label].steps + 1)]
    results.store(
        study.name,
        {label: rows},
        command="x",
        wall_seconds=1.0,
        root=root,
        configs={"runs": {label: grid[label].to_dict()}},
    )
    assert set(study.stored_runs(grid, root)[0]) == {label}
    results.store(
        study.name,
        {label: rows},
        command="x",
        wall_seconds=1.0,
        root=root,
        configs={"runs": {label: grid[label].to_dict() | {"lr": 0.5}}},
    )
    assert study.stored_runs(grid, root) == ({}, {})
    cut_off = [{**r, "step": r["step"] - 1} for r in rows]  # its last step not logged
    results.store(
        study.name,
        {label: cut_off},
        command="x",
        wall_seconds=1.0,
        root=root,
        configs={"runs": {label: grid[label].to_dict()}},
    )
    assert study.stored_runs(grid, root) == ({}, {})


def test_a_finished_run_of_other_settings_is_not_taken_for_this_run(tmp_path):
    import json

    study = STUDIES["hunt_tiny_long"]
    opts = {**study.toy, "output_dir": str(tmp_path / "runs")}
    label, cfg = next(iter(study.grid(**opts).items()))
    folder = tmp_path / "runs" / label
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "accuracy": 0.5}) + "\n")
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    assert study.finished(cfg)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict() | {"lr": 0.5}))
    assert not study.finished(cfg)
    assert study.collect(**opts) == ({}, {})


def test_bad_shards_and_unknown_studies_are_refused(capsys):
    from nbkit.cli import study as cli

    with pytest.raises(ValueError, match="shard must be"):
        STUDIES["hunt_tiny_long"].run((2, 2))
    with pytest.raises(SystemExit):
        cli.main(["no_such_study"])
    assert "unknown study 'no_such_study'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="expected key=value"):
        cli.parse_options(["steps"])
    assert cli.parse_options(["steps=4", "seeds=[0,1]", "engine=hf"]) == {"steps": 4, "seeds": [0, 1], "engine": "hf"}


def test_show_prints_the_stored_study(capsys):
    from nbkit.cli import study as cli

    assert cli.main(["ppo_tiny_arith", "show"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## PPO with a critic") and "**Question.**" in out
