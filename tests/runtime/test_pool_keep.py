"""Workers kept between runs (``NBKIT_POOL_KEEP``): a run with the same cores, threads, environment and folder is
given the idle worker of an earlier one instead of starting its own; anything else starts a new worker; a kept
worker ends when its time is up or the process exits; without the setting a run's workers end with it."""

import os
import time

import pytest

from nbkit.runtime import pool

JOB = {"j": pool.Job("tests.runtime.test_pool_keep:pid")}


def pid() -> int:
    """A job: the process it ran in."""
    return os.getpid()


@pytest.fixture(autouse=True)
def no_worker_limit(monkeypatch):
    """The suite itself sets ``NBKIT_WORKERS=0`` (tests/conftest.py); these tests start from an unset limit."""
    monkeypatch.delenv(pool.WORKERS_ENV, raising=False)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def worker_pid() -> int:
    return pool.run(JOB, workers=1, progress=False)["j"]


def test_a_kept_worker_serves_the_next_run_with_the_same_placement_and_environment_only(monkeypatch):
    monkeypatch.setenv(pool.KEEP_ENV, "120")
    first = worker_pid()
    assert worker_pid() == first and alive(first)  # the second run started no worker
    monkeypatch.setenv("NBKIT_POOL_TEST_MARK", "another environment")
    other = worker_pid()
    assert other != first  # a worker started in another environment is not given to this run
    pool.close_kept()
    assert not alive(first) and not alive(other)


def test_a_kept_worker_ends_when_its_time_is_up_and_without_the_setting_with_its_run(monkeypatch):
    monkeypatch.setenv(pool.KEEP_ENV, "0.5")
    pid = worker_pid()
    deadline = time.time() + 30
    while alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    assert not alive(pid)
    monkeypatch.setenv(pool.KEEP_ENV, "0")
    assert not alive(worker_pid())


@pytest.mark.parametrize("bad", ["soon", "-1"])
def test_a_bad_keep_time_is_refused_naming_the_value_before_any_worker_starts(monkeypatch, bad):
    monkeypatch.setenv(pool.KEEP_ENV, bad)
    started = []
    monkeypatch.setattr(pool, "ProcessPoolExecutor", lambda *a, **k: started.append(a))
    with pytest.raises(ValueError, match=rf"NBKIT_POOL_KEEP={bad!r}.*seconds >= 0"):
        pool.run(JOB, workers=1, progress=False)
    assert started == []
