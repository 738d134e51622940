"""Every study shares one shape: grid → run a shard (resumable) → store finished runs with a card → load →
coordinates from configs → table → figure. Each registered grid study runs its smallest grid through it here."""

from __future__ import annotations

import json

import pytest

from nbkit import results
from nbkit.records import schema
from nbkit.studies import GridStudy
from nbkit.studies.base import Study
from nbkit.studies.catalog import STUDIES
from nbkit.studies.prereg import PredictionsMissing

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
def test_the_smallest_grid_runs_stores_loads_and_tabulates(study, tmp_path, monkeypatch):
    from nbkit.runtime.pool import free_port

    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # not 29500: another worker's trainer may hold it
    opts = {**study.toy, "output_dir": str(tmp_path / "runs")}
    if getattr(study, "predicted_arms", ()) and not study.rule_record:  # predictions not committed yet: no run
        with pytest.raises(PredictionsMissing):
            study.run(progress=False, **opts)
        assert not (tmp_path / "runs").exists()
        return
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
    elsewhere = {"cpu": "another CPU", "kernel_caps": {"ATEN_CPU_CAPABILITY": "avx2"}}
    for label in second:  # sitting 2's runs ran on another machine than the one that stores them
        summary = tmp_path / "runs" / label / "summary.json"
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "machine": elsewhere}))
    study.store(wall_seconds=5.0, command="sitting 2", root=root, keep_stored=True, **opts)
    assert study.load(root) == {**first, **second}
    card = study.card(root)
    assert [p["runs"] for p in results.parts(card)] == [sorted(first), sorted(second)]
    assert [p["machine"]["cpu"] for p in results.parts(card)] == [results.machine()["cpu"], "another CPU"]
    assert card["wall_seconds"] == 15.0 and "2 sittings" in results.describe(study.name, root)
    for p in results.parts(card):  # each sitting named with its own CPU, flags and kernel caps
        assert results.machine_text(p["machine"]) in results.describe(study.name, root)
    assert "another CPU (None cores; CPU flags not recorded; kernels capped: ATEN_CPU_CAPABILITY=avx2)" in (
        results.describe(study.name, root)
    )
    assert study.stored_meta(root).keys() == study.load(root).keys()


def test_a_stored_run_of_other_settings_is_not_kept(tmp_path):
    study = STUDIES["hunt_tiny_long"]
    root = tmp_path / "results"
    opts = {**study.toy, "output_dir": str(tmp_path / "runs")}
    grid = study.grid(**opts)
    label = next(iter(grid))
    rows = [{"step": s, "accuracy": 0.5} for s in range(1, grid[label].max_steps + 1)]
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
        configs={"runs": {label: grid[label].to_dict() | {"learning_rate": 0.5}}},
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
    (folder / "config.json").write_text(json.dumps(cfg.to_dict() | {"learning_rate": 0.5}))
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


def test_a_finished_run_of_more_steps_is_not_this_grids_run_and_the_card_matches_its_runs(tmp_path, capsys):
    """Issue 55, 6: `study run --set steps=2` over finished 3-step runs said "finished" and `store --replace` wrote a
    card saying 2 steps over runs whose configs say 3. Every config field that changes a run's result counts."""
    from nbkit.cli import main as cli_main
    from tests.rl.test_replace_safely import finished_runs, sha256_tree

    study = STUDIES["ablation_tiny_arith"]
    options = {**study.toy, "steps": 3, "output_dir": str(tmp_path / "runs")}
    finished_runs(study, options)
    before = sha256_tree(tmp_path)
    fewer = {**options, "steps": 2}
    assert not any(study.finished(c) for c in study.grid(**fewer).values())
    sets = [f"--set={k}={json.dumps(v)}" for k, v in fewer.items()]
    assert cli_main.main(["study", study.name, "run", *sets]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "steps (run: 3, now: 2)" in err[0] and "--overwrite" in err[0], err
    assert cli_main.main(["study", study.name, "store", f"--set=output_dir={options['output_dir']}", *sets[:-1]]) == 2
    assert "no finished run" in capsys.readouterr().err
    assert sha256_tree(tmp_path) == before
    root = tmp_path / "results"
    study.store(wall_seconds=1.0, command="x", root=root, **options)
    card = results.card(study.name, root)
    assert {c["max_steps"] for c in card["configs"]["runs"].values()} == {card["configs"]["grid"]["steps"]} == {3}


def test_every_config_field_but_the_result_neutral_ones_changes_a_runs_identity():
    """The study's check is derived from the config's dataclass fields: a field declared later counts unless it is
    declared result-neutral; a resume may change only the neutral fields, steps and the skip cap."""
    from dataclasses import fields

    from nbkit.records import runlog
    from nbkit.rl import RLConfig

    names = {f.name for f in fields(RLConfig)}
    assert set(runlog.RESULT_NEUTRAL) <= names and set(runlog.SAFE_TO_CHANGE) <= names
    cfg = RLConfig(dataset="tiny-arith", train_dtype="fp32")
    saved = cfg.to_dict()
    for name in sorted(names - set(runlog.RESULT_NEUTRAL)):
        f = next(f for f in fields(RLConfig) if f.name == name)
        changed = {**saved, name: ["a value no field takes"]}
        assert runlog.result_differences(changed, cfg), f"{name} is not counted as changing the result"
        assert bool(runlog.differing_fields(changed, cfg)) == (name not in runlog.SAFE_TO_CHANGE), f.name


def test_show_names_a_stored_study_whose_table_cannot_be_made_and_what_to_do(tmp_path, monkeypatch, capsys):
    """Issue 55, 7: `study show` after `store --replace` with a grid lacking the table's reference pair."""
    from nbkit.cli import main as cli_main
    from tests.rl.test_replace_safely import finished_runs

    study = STUDIES["ablation_tiny_arith"]
    root = tmp_path / "results"
    options = {**study.toy, "output_dir": str(tmp_path / "runs")}  # its pairs lack ("bf16", "bf16")
    finished_runs(study, options)
    study.store(wall_seconds=1.0, command="x", root=root, **options)
    monkeypatch.setattr(results, "RESULTS", root)
    assert cli_main.main(["study", study.name, "show"]) == 1
    out, err = capsys.readouterr()
    err = err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"nbkit study: study {study.name} ("), err
    assert "its table cannot be made" in err[0] and "nbkit study ablation_tiny_arith run" in err[0]
    assert "**Not shown.**" in out and "|---" not in out


def test_store_without_wall_seconds_records_none_not_its_own_seconds(tmp_path, monkeypatch):
    """Issue 55, 16: the store command recorded its own ~0 s as the study's wall time."""
    import functools

    from nbkit.cli import main as cli_main
    from tests.rl.test_replace_safely import finished_runs

    study = STUDIES["ablation_tiny_arith"]
    root = tmp_path / "results"
    options = {**study.toy, "output_dir": str(tmp_path / "runs")}
    finished_runs(study, options)
    monkeypatch.setattr(study, "store", functools.partial(study.store, root=root))  # not into data/results
    sets = [f"--set={k}={json.dumps(v)}" for k, v in options.items()]
    assert cli_main.main(["study", study.name, "store", *sets]) == 0
    assert results.card(study.name, root)["wall_seconds"] is None
    assert "wall time not recorded" in results.describe(study.name, root)
    with pytest.raises(SystemExit):
        cli_main.main(["study", study.name, "store", "--wall-seconds", "-5", *sets])


def test_a_sitting_names_the_machine_its_runs_ran_on_and_refuses_runs_of_two_machines(tmp_path):
    """The card's machine is the one the runs wrote in their summaries, not the storing process's (a store run
    unemulated beside runs trained under the AVX2 emulation would name the wrong kernels)."""
    from nbkit.studies.stored import ran_on

    def run(label, machine=None):
        (tmp_path / label).mkdir()
        (tmp_path / label / "summary.json").write_text(
            json.dumps({"steps": 1, **({"machine": machine} if machine else {})})
        )
        return label, tmp_path / label

    xeon = {"cpu": "Xeon", "kernel_caps": {"ATEN_CPU_CAPABILITY": "avx2"}}
    epyc = {"cpu": "EPYC", "kernel_caps": {}}
    assert ran_on("s", dict([run("old")])) is None  # runs from before the record: the storing machine stands in
    assert ran_on("s", dict([run("a", xeon), run("b", xeon), run("c")])) == xeon
    with pytest.raises(ValueError, match=r"2 machines .*Xeon; kernels capped: ATEN_CPU_CAPABILITY=avx2: \['a', 'b'\]"):
        ran_on("s", dict([("a", tmp_path / "a"), ("b", tmp_path / "b"), run("d", epyc)]))


# -- a live slice started in the background (a notebook trains it while earlier sections compute) ----------------


def _slice(**more) -> dict:
    return dict(
        formats=["fp32"],
        seeds=[0],
        steps=1,
        pairs=[],
        more_seeds={},
        corrected={"formats": [], "corrections": []},
        output_dir="unused",
        **more,
    )


def test_a_background_slice_trains_in_worker_processes_even_where_live_would_train_in_this_one(monkeypatch):
    import threading

    from nbkit.runtime import pool
    from nbkit.studies.dose_response import DoseResponse

    monkeypatch.setenv(pool.WORKERS_ENV, "0")  # "in this process": a foreground live() would train here
    calls = []

    def live(self, **options):
        calls.append((options, threading.current_thread()))
        return {}, {}, 0.0

    monkeypatch.setattr(DoseResponse, "live", live)
    assert DoseResponse().start_live(**_slice(progress=False)).result(timeout=60) == ({}, {}, 0.0)
    ((options, thread),) = calls
    assert options["workers"] >= 1 and options["progress"] is False  # a child, at least one; the rest passed on
    assert thread is not threading.current_thread()  # the caller went on meanwhile


def test_a_background_slice_with_a_bad_option_is_refused_before_anything_starts(monkeypatch):
    from nbkit.studies.dose_response import DoseResponse

    monkeypatch.setattr(DoseResponse, "live", lambda self, **o: pytest.fail("the slice started"))
    with pytest.raises(ValueError, match=r"unknown rollout format 'fp33'; choose one of \('fp32'"):
        DoseResponse().start_live(**{**_slice(), "formats": ["fp33"]})
    with pytest.raises(ValueError, match="no beside jobs"):
        DoseResponse().start_live(**_slice(beside={"x": None}))


def _hold(lock_code: str, folder):
    """Another process holding a lock (``lock_code`` acquires it into ``held``: a lock object dropped is released),
    as a second ``nbkit study ... run`` finds it."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", f"import sys, time; {lock_code}; print('held', flush=True); time.sleep(900)", folder],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_run_of_one_study_shard_is_one_line_and_exit_2_before_anything_trains(tmp_path, capsys):
    """Issue 73, 9: it was a failed pool job with a traceback and exit 1."""
    from nbkit.cli import main as cli_main
    from nbkit.rl import grid  # noqa: F401 - imported before the holder starts: its lock outlives the import

    study = STUDIES["hunt_tiny_long"]
    runs = tmp_path / "runs"
    holder = _hold(
        "from nbkit.studies.catalog import STUDIES; "
        "held = STUDIES['hunt_tiny_long'].shard_lock((0, 1), {'output_dir': sys.argv[1]}).acquire()",
        str(runs),
    )
    try:
        code = cli_main.main(["study", study.name, "run", "--set", f"output_dir={runs}"])
        said = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(said) == 1, said
        assert f"study hunt_tiny_long shard 0/1: its folder '{runs}' is in use by process {holder.pid}" in said[0]
        assert sorted(p.name for p in runs.iterdir()) == [".nbkit-lock-shard-0-of-1"]  # no run folder was made
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_a_grid_refuses_a_run_folder_another_process_trains_before_its_first_run(tmp_path):
    from nbkit.rl import RLConfig, grid
    from nbkit.runtime import locks

    configs = {"a": RLConfig(output_dir=str(tmp_path / "a")), "b": RLConfig(output_dir=str(tmp_path / "grpo-fp32"))}
    busy = tmp_path / "grpo-fp32"
    holder = _hold("from nbkit.runtime.locks import FolderLock; held = FolderLock(sys.argv[1]).acquire()", str(busy))
    try:
        with pytest.raises(locks.FolderLockedError, match=f"run folder '{busy}' is in use by process {holder.pid}"):
            grid.train_all(configs)
        assert not (tmp_path / "a").exists()
    finally:
        holder.kill()
        holder.wait(timeout=30)
