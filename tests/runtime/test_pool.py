"""Independent jobs on the free cores (``nbkit.runtime.pool``): placement from the affinity mask and an explicit limit,
each
child on the cores and threads it was given, the same rows however many run at once, failures named (a killed worker
by its signal), Ctrl-C stopping every worker, jobs started in the background and awaited one by one, nothing left in
the temporary folder."""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from nbkit.cli.commands import guarded
from nbkit.records import runlog, schema
from nbkit.runtime import pool


@pytest.fixture(autouse=True)
def no_worker_limit(monkeypatch):
    """The suite itself sets ``NBKIT_WORKERS=0`` (tests/conftest.py); these tests start from an unset limit."""
    monkeypatch.delenv(pool.WORKERS_ENV, raising=False)


def test_one_free_core_means_one_job_at_a_time_on_one_thread():
    placement = pool.place(jobs=6, threads=1, cores=[3])
    assert (placement.workers, placement.threads, placement.slots) == (1, 1, ((3,),))


def test_two_free_cores_hold_two_one_thread_jobs_on_disjoint_cores():
    placement = pool.place(jobs=6, threads=1, cores=[0, 1])
    assert placement.workers == 2 and placement.slots == ((0,), (1,))
    assert pool.place(jobs=3, threads=1, cores=[0, 1, 2, 3]).workers == 3  # never more workers than jobs
    assert pool.place(jobs=1, threads=1, cores=[0, 1]).workers == 0  # one job: in this process, no child to start
    assert pool.place(jobs=1, threads=1, cores=[0, 1], workers=1).workers == 1  # unless asked for
    assert pool.place(jobs=4, threads=2, cores=[0, 1]).slots == ((0, 1),)  # a 2-thread job takes both cores


def test_an_explicit_limit_wins_over_the_environment_and_the_cores(monkeypatch):
    monkeypatch.setenv(pool.WORKERS_ENV, "1")
    assert pool.place(jobs=4, cores=[0, 1]).workers == 1  # the shared machine's limit
    assert pool.place(jobs=4, cores=[0, 1], workers=2).workers == 2  # the caller's explicit choice
    assert pool.place(jobs=4, cores=[0, 1], workers=0).workers == 0  # in this process
    monkeypatch.setenv(pool.WORKERS_ENV, "0")
    assert pool.place(jobs=4, cores=[0, 1]).describe().startswith("in this process")


@pytest.mark.parametrize("bad", ["two", "-1", "1.5"])
def test_a_bad_worker_limit_is_refused_naming_the_value(monkeypatch, bad):
    monkeypatch.setenv(pool.WORKERS_ENV, bad)
    with pytest.raises(ValueError, match=rf"NBKIT_WORKERS={bad!r}.*whole number"):
        pool.place(jobs=2)


@pytest.mark.parametrize("kwargs, message", [({"threads": 0}, "threads must be"), ({"workers": -1}, "workers must")])
def test_bad_placement_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pool.place(jobs=2, **kwargs)


def where_am_i() -> dict:
    """A job that reports the cores and threads its process was given."""
    import torch

    return {
        "cores": sorted(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "workers_env": os.environ.get(pool.WORKERS_ENV),
        "pid": os.getpid(),
    }


def fail_loudly(message: str):
    raise RuntimeError(message)


def pid_then_sleep(path: str, seconds: float = 300) -> None:
    """A job that writes the pid of the process it runs in to ``path``, then waits."""
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)


def pid_then_sleep_noting_ctrl_c(path: str, seconds: float = 300) -> None:
    """``pid_then_sleep``, writing ``<path>.ctrl-c`` when it is stopped as Ctrl-C stops a run."""
    try:
        pid_then_sleep(path, seconds)
    except KeyboardInterrupt:
        Path(f"{path}.ctrl-c").write_text("stopped")
        raise


def pids_of(paths: list[Path], timeout: float = 180) -> list[int]:
    """The pids ``pid_then_sleep`` jobs wrote to ``paths``, once all are there."""
    deadline = time.time() + timeout
    while not all(p.is_file() and p.read_text() for p in paths):
        assert time.time() < deadline, f"the jobs did not start within {timeout} s"
        time.sleep(0.1)
    return [int(p.read_text()) for p in paths]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The temporary folder of this process and of the workers it starts: ``tmp_path/tmp``, empty at the start."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    return folder


@pytest.mark.skipif(len(pool.free_cores()) < 2, reason="needs two free cores")
def test_each_child_runs_on_the_cores_and_threads_it_was_given():
    jobs = {f"j{i}": pool.Job("tests.runtime.test_pool:where_am_i") for i in range(2)}
    got = pool.run(jobs, threads=1, workers=2, progress=False)
    placement = pool.place(2, 1, 2)
    assert sorted(tuple(g["cores"]) for g in got.values()) == sorted(placement.slots)
    assert all(g["torch_threads"] == 1 and g["omp"] == "1" for g in got.values())
    assert all(g["workers_env"] == "0" for g in got.values())  # a child never starts a pool of its own
    assert len({g["pid"] for g in got.values()}) == 2 and os.getpid() not in {g["pid"] for g in got.values()}


def test_a_slot_s_worker_runs_its_later_jobs_too_and_only_one_starts_per_slot():
    jobs = {f"j{i}": pool.Job("tests.runtime.test_pool:where_am_i") for i in range(3)}
    got = pool.run(jobs, threads=1, workers=1, progress=False)
    assert len({g["pid"] for g in got.values()}) == 1  # one start-up for three jobs
    assert os.getpid() not in {g["pid"] for g in got.values()}
    assert list(got) == ["j0", "j1", "j2"]


def test_a_failed_job_is_named_with_its_output_and_the_finished_ones_are_returned_first(private_tmp):
    done = []
    jobs = {
        "fine": pool.Job("tests.runtime.test_pool:where_am_i"),
        "broken": pool.Job("tests.runtime.test_pool:fail_loudly", {"message": "the planted failure"}),
    }
    with pytest.raises(pool.JobFailed, match=r"(?s)job 'broken' failed.*the planted failure"):
        pool.run(jobs, workers=1, progress=False, on_done=lambda label, value: done.append(label))
    assert done == ["fine"]  # it ran first and was handed over before the failure was raised
    assert list(private_tmp.iterdir()) == []  # no log or job file left behind


def test_a_worker_killed_under_its_job_is_named_in_one_line_with_its_job_and_signal(tmp_path, private_tmp, capsys):
    jobs = {"victim": pool.Job("tests.runtime.test_pool:pid_then_sleep", {"path": str(tmp_path / "pid")})}
    killer = threading.Thread(target=lambda: os.kill(pids_of([tmp_path / "pid"])[0], signal.SIGKILL))
    killer.start()
    code = guarded(lambda argv: pool.run(jobs, workers=1, progress=False), [])  # as `nbkit study run` reports it
    killer.join()
    pid = int((tmp_path / "pid").read_text())
    err = capsys.readouterr().err.strip()
    assert code == 1 and err == f"nbkit: job 'victim' failed: its worker (pid {pid}) was killed by signal 9 (SIGKILL)"
    assert list(private_tmp.iterdir()) == []


CTRL_C = """import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's foreground process: Ctrl-C is not ignored
from nbkit.runtime import pool
from nbkit.cli.commands import guarded
jobs = {f"j{i}": pool.Job("tests.runtime.test_pool:pid_then_sleep", {"path": f"{sys.argv[1]}/pid{i}"}) for i in range(2)}
sys.exit(guarded(lambda argv: pool.run(jobs, workers=2, progress=False), []))
"""


@pytest.mark.skipif(len(pool.free_cores()) < 2, reason="needs two free cores")
def test_ctrl_c_stops_every_worker_and_exits_130_within_seconds_leaving_nothing_behind(tmp_path, private_tmp):
    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C, str(tmp_path)], start_new_session=True, stderr=subprocess.PIPE, text=True
    )
    try:
        workers = pids_of([tmp_path / "pid0", tmp_path / "pid1"])
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: to the foreground process group
        code = proc.wait(timeout=60)
        took = time.monotonic() - start
    finally:
        proc.kill()
    assert code == 130 and took < 10, (code, took, proc.stderr.read())
    assert not [pid for pid in workers if alive(pid)]  # no orphan
    assert list(private_tmp.iterdir()) == []


def test_in_this_process_calls_the_target_here():
    got = pool.run({"here": pool.Job("tests.runtime.test_pool:where_am_i")}, workers=0, progress=False)
    assert got["here"]["pid"] == os.getpid()


# -- in the background (``start``): a notebook's later sections awaited where they are shown ---------------------


def test_started_jobs_run_in_a_worker_even_when_run_would_call_them_here_and_a_failure_reaches_the_jobs_it_cut(
    private_tmp,
):
    started = pool.start(
        {
            "fine": pool.Job("tests.runtime.test_pool:where_am_i"),
            "broken": pool.Job("tests.runtime.test_pool:fail_loudly", {"message": "the planted failure"}),
            "after": pool.Job("tests.runtime.test_pool:where_am_i"),
        },
        workers=0,  # run would call them in this process, one after another
        progress=False,
    )
    assert list(started) == ["fine", "broken", "after"]
    assert started.result("fine")["pid"] != os.getpid()
    for label in ("broken", "after"):  # the failed job, and the one the pool no longer gave out after it
        with pytest.raises(pool.JobFailed, match=r"(?s)job 'broken' failed.*the planted failure"):
            started.result(label)
    started.stop()  # nothing left to stop: returns
    assert list(private_tmp.iterdir()) == []


def test_a_label_in_two_groups_of_started_jobs_is_refused_before_anything_starts():
    job = pool.Job("tests.runtime.test_pool:where_am_i")
    with pytest.raises(ValueError, match=r"job label\(s\) \['grpo-fp16-s0'\] are in two groups"):
        pool.start({"grpo-fp16-s0": job}, {"grpo-fp16-s0": job, "other": job}, progress=False)


def test_stopping_started_jobs_stops_them_as_ctrl_c_does_and_ends_their_worker(tmp_path, private_tmp):
    path = tmp_path / "pid"
    started = pool.start(
        {"j": pool.Job("tests.runtime.test_pool:pid_then_sleep_noting_ctrl_c", {"path": str(path)})}, progress=False
    )
    (worker,) = pids_of([path])
    started.stop()
    assert not alive(worker)
    assert (tmp_path / "pid.ctrl-c").read_text() == "stopped"  # a KeyboardInterrupt in the job, not a kill
    with pytest.raises(KeyboardInterrupt):
        started["j"].result(timeout=0)
    assert list(private_tmp.iterdir()) == []


ORPHAN = """import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[2] == "ignored" else signal.default_int_handler)
from nbkit.runtime import pool
pool.run({"j": pool.Job("tests.runtime.test_pool:pid_then_sleep_noting_ctrl_c", {"path": sys.argv[1]})}, workers=1,
         progress=False)
"""


# "ignored": a background job's parent (`cmd &` without job control), whose children inherit SIGINT ignored
@pytest.mark.parametrize("parent_sigint", ["handled", "ignored"])
def test_a_worker_whose_parent_is_killed_stops_its_job_as_ctrl_c_does_and_ends(tmp_path, parent_sigint):
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN, str(tmp_path / "pid"), parent_sigint])
    try:
        worker = pids_of([tmp_path / "pid"])[0]
    finally:
        parent.kill()  # kill -9: no Ctrl-C handling, no exit handler in the parent
        parent.wait()
    deadline = time.time() + 30
    while alive(worker) and time.time() < deadline:
        time.sleep(0.2)
    assert not alive(worker)
    assert (tmp_path / "pid.ctrl-c").read_text() == "stopped"  # a KeyboardInterrupt, not the kill 20 s later


_science = schema.without_timing


@pytest.mark.slow
@pytest.mark.skipif(len(pool.free_cores()) < 2, reason="needs two free cores")
def test_a_grid_run_two_at_a_time_gives_the_rows_it_gives_one_at_a_time(tmp_path, tiny_random_model, arith_jsonl):
    from nbkit.rl import RLConfig  # here, not at the top: the workers of the other tests import this module
    from nbkit.rl.grid import train_grid

    def grid(folder, workers):
        base = RLConfig(
            model=tiny_random_model,
            dataset=arith_jsonl,
            max_steps=2,
            prompts_per_step=2,
            num_generations=2,
            max_completion_length=8,
            rollout_engine="hf",
            checkpoint_every=0,
            output_dir=str(folder),
        )
        train_grid(base, ["grpo"], ["fp32", "bf16"], progress=False, threads=1, workers=workers)
        return runlog.load_runs(folder)

    together, alone = grid(tmp_path / "two", 2), grid(tmp_path / "one", 1)
    assert sorted(together) == sorted(alone) == ["grpo-bf16", "grpo-fp32"]
    for label in together:
        assert len(together[label]) == len(alone[label]) == 2
        assert _science(together[label]) == _science(alone[label]), label
