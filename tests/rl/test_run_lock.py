"""A run folder is held by one process: a second one, fresh or resume, is refused naming the holder, and the
lock of a process that died (kill -9) is taken over without a hand. The holder here is a real second process
taking the run folder's lock as ``train`` does (``runfolder.hold``, rank 0: ``locks.FolderLock(out)``)."""

import os
import signal
import subprocess
import sys

import pytest

from nbkit.cli import main as cli_main
from nbkit.rl import RLConfig, runfolder, train
from nbkit.runtime import locks

HOLDER = (
    "import sys, time; from nbkit.runtime import locks; "  # runfolder.hold's rank-0 lock, without importing torch
    "lock = locks.FolderLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(120)"
)


@pytest.fixture
def holder(tmp_path):
    """A second process holding the lock of ``tmp_path/run`` (killed at the end)."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield out, proc
    finally:
        proc.kill()
        proc.wait()


def cfg(out, data, **kw) -> RLConfig:
    return RLConfig(
        dataset=data, train_dtype="fp32", max_steps=1, prompts_per_step=2, num_generations=2, output_dir=str(out), **kw
    )


@pytest.mark.parametrize("how", [{}, {"resume": True}, {"overwrite": True}], ids=["fresh", "resume", "overwrite"])
def test_a_second_process_on_a_held_run_folder_is_refused_naming_the_holder(holder, arith_jsonl, how):
    out, proc = holder
    with pytest.raises(locks.FolderLockedError, match=rf"in use by process {proc.pid} on "):
        train(cfg(out, arith_jsonl, **how), progress=False)
    assert sorted(p.name for p in out.iterdir()) == [locks.LOCK]  # nothing written, the holder's lock kept


def test_the_command_line_refuses_in_one_line_with_status_2(holder, arith_jsonl, capsys):
    out, proc = holder
    code = cli_main.main(["train", "--dataset", arith_jsonl, "--train-dtype", "fp32", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"process {proc.pid}" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_lock_of_a_killed_process_is_taken_over(holder):
    out, proc = holder
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / locks.LOCK).exists()  # kill -9 left its file behind ...
    lock = runfolder.hold(out)  # ... but the OS dropped the lock with the process
    assert locks.holder(out / locks.LOCK)["pid"] == os.getpid()
    lock.release()
    assert list(out.iterdir()) == []  # nothing but the lock was ever there


def test_two_runs_in_one_process_take_turns_and_each_rank_holds_its_own_lock(tmp_path):
    out = tmp_path / "run"
    first = runfolder.hold(out)
    with pytest.raises(locks.FolderLockedError):
        runfolder.hold(out)  # the same process, a second run: refused too
    rank1 = runfolder.hold(out, rank=1)  # a multi-process run: rank 1 holds its own file
    with pytest.raises(locks.FolderLockedError):
        runfolder.hold(out, rank=1)
    rank1.release()
    first.release()
    runfolder.hold(out).release()
