"""Every study shares one shape: grid → run a shard (resumable) → store finished runs with a card → load →
coordinates from configs → table → figure. Each registered grid study runs its smallest grid through it here."""
from __future__ import annotations

import pytest

from nbkit import results
from nbkit.studies import GridStudy
from nbkit.studies.catalog import STUDIES

GRID_STUDIES = [s for s in STUDIES.values() if isinstance(s, GridStudy)]


def test_every_stored_study_of_rl_runs_is_a_grid_study_with_a_toy_grid():
    assert {s.name for s in GRID_STUDIES} == {"ablation_tiny_arith", "hunt_tiny_long", "ppo_tiny_arith",
                                               "moe_tiny_arith", "brevity_smollm2", "dose_response_tiny_arith"}
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
    assert study.table(runs, meta)
    study.figure(runs, meta)  # draws without error (None where the study has no figure)


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
    from nbkit.studies import cli

    with pytest.raises(ValueError, match="shard must be"):
        STUDIES["hunt_tiny_long"].run((2, 2))
    with pytest.raises(SystemExit):
        cli.main(["no_such_study"])
    assert "unknown study 'no_such_study'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="expected key=value"):
        cli.parse_options(["steps"])
    assert cli.parse_options(["steps=4", "seeds=[0,1]", "engine=hf"]) == {"steps": 4, "seeds": [0, 1], "engine": "hf"}


def test_show_prints_the_stored_study(capsys):
    from nbkit.studies import cli

    assert cli.main(["ppo_tiny_arith", "show"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## PPO with a critic") and "**Question.**" in out
