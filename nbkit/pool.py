"""Independent jobs on the cores this process may use: each slot of cores has a worker process pinned to it.

A grid of RL runs (notebook 03's seeds and dtypes, a stored study's shard) or of offline cells is a list of
independent jobs. On a 2-core machine one small-model job keeps about one core busy (an RL step alternates
between the trainer and its rollout engine), so two jobs at once use both. ``run`` places them:

- **which cores**: those of ``os.sched_getaffinity(0)`` (what this process may use, not what the machine has);
- **how many at once** (``workers``): an explicit argument, else ``NBKIT_WORKERS`` (a shared machine's limit),
  else ``cores // threads``, never more than the jobs; ``0`` runs the jobs one after another in this process
  (tracebacks and debuggers as usual, the behaviour before pools), the default for a single job (a child would
  only add its start-up) and where torch sees a GPU (jobs sized for one GPU would share it);
- **threads per job** (``threads``): a property of the job, not of the machine. A job's numbers may depend on
  its thread count (a GEMM split another way rounds another way), never on how many jobs share the machine: every
  job runs in a worker process pinned to ``threads`` cores with ``threads`` OpenMP threads, whether it runs alone or
  beside another, so a grid run two at a time gives the rows it gives one at a time.

A slot's worker is started for its first job and runs the slot's later jobs too (a child's start-up, importing
torch, transformers and vLLM, costs ~4-8 s: once per slot, not once per job). With ``NBKIT_POOL_KEEP`` set to a number
of seconds, a worker left idle at the end of a run is kept that long for this process's next run with the same cores,
threads, environment and folder (the test suite sets it: its tests run a grid two at a time, then one at a time). A
job therefore may not rely on a fresh process, as a job run in this process (``workers=0``, one after another) never
could.

A job is ``Job(target="module:function", kwargs=...)``; its return value comes back pickled. Its output goes to a
log file; a failed job raises ``JobFailed`` naming it with the tail of its log, after the jobs already running
have finished (finished work is never thrown away), and its worker ends with it; Ctrl-C stops every worker and
re-raises.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nbkit import gcfreeze, paths

WORKERS_ENV = "NBKIT_WORKERS"
"""Environment variable capping the jobs run at once (``0``: in this process, one after another)."""
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""The thread-count variables set in every child (read once, when its numerical libraries start)."""
LAUNCH_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""The torch.distributed variables of a launch (a colocated vLLM engine sets them: ``nbkit.rl.rollout``)."""
CHILD_CLEARED = (*LAUNCH_ENV, "VLLM_CPU_OMP_THREADS_BIND", "PYTEST_CURRENT_TEST")
"""Variables a child must not inherit: a launch of the parent's (each child is a launch of its own, on its own
port), a core binding that names the parent's cores, and the test pytest is running in the parent (a worker kept
for a later run would carry a stale one)."""
KEEP_ENV = "NBKIT_POOL_KEEP"
"""Seconds a worker left idle at the end of a run is kept for this process's next run with the same cores, threads,
environment and folder (unset or ``0``: every run starts its own workers and ends them when it ends). Off by
default: a kept worker holds the modules it imported, so code edited in between would not reach it."""


@dataclass(frozen=True)
class Placement:
    """How ``run`` lays jobs out on this process's cores."""

    workers: int
    """Jobs at once (0: in this process, one after another)."""
    threads: int
    """Threads (and cores) each job gets."""
    slots: tuple[tuple[int, ...], ...]
    """The cores of each worker slot (disjoint when the cores suffice, shared round-robin when not)."""

    def describe(self) -> str:
        if self.workers == 0:
            return f"in this process, one job after another ({self.threads} thread(s))"
        cores = "; ".join(",".join(map(str, s)) for s in self.slots)
        return f"{self.workers} job(s) at once, {self.threads} thread(s) each, cores {cores}"


def free_cores() -> list[int]:
    """The cores this process may run on (its affinity mask; every core where the OS has no such mask)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def limit_from_env() -> int | None:
    """``NBKIT_WORKERS`` as an integer ≥ 0 (None when unset); anything else is refused naming the value."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ValueError(
            f"{WORKERS_ENV}={raw!r}: expected a whole number >= 0 (0: in this process, one job after "
            f"another; 1: one child at a time; unset: as many as the cores allow)"
        )
    return int(raw)


def place(jobs: int, threads: int = 1, workers: int | None = None, cores: list[int] | None = None) -> Placement:
    """The placement of ``jobs`` jobs of ``threads`` threads on ``cores`` (default ``free_cores()``): ``workers``
    (else ``NBKIT_WORKERS``, else as many as the cores hold) at once, never more than the jobs."""
    if not (isinstance(threads, int) and threads >= 1):
        raise ValueError(f"threads must be a whole number >= 1, got {threads!r}")
    if workers is not None and not (isinstance(workers, int) and workers >= 0):
        raise ValueError(f"workers must be a whole number >= 0 (0: in this process) or None, got {workers!r}")
    cores = list(cores) if cores is not None else free_cores()
    limit = workers if workers is not None else limit_from_env()
    if limit is None and _has_gpu():  # jobs sized for one GPU each would share it: one at a time, in this process
        limit = 0
    if limit is None and jobs == 1:  # nothing to run beside it: no process to start, the caller's imports serve
        limit = 0
    if limit == 0 or jobs <= 0:
        return Placement(0, threads, ())
    n = max(1, min(jobs, len(cores) // threads or 1, limit if limit is not None else jobs))
    need = n * threads
    pool = [cores[i % len(cores)] for i in range(need)]  # wraps only when the cores cannot give each slot its own
    return Placement(n, threads, tuple(tuple(pool[i * threads : (i + 1) * threads]) for i in range(n)))


@dataclass
class Job:
    """One unit of work: ``target`` (``"module:function"``) called with ``kwargs`` (picklable) in a child."""

    target: str
    """``"package.module:function"``; the function's return value must pickle."""
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the call."""
    units: int = 1
    """Its size in progress units (e.g. optimiser steps)."""
    poll: Callable[[], int] | None = None
    """Called in the parent twice a second while the job runs: units done so far (e.g. rows in its metrics log)."""


class JobFailed(RuntimeError):
    """A job's process ended with an error; the message names the job and shows the end of its log."""


def call(target: str, kwargs: dict):
    """Import ``target`` (``"module:function"``) and call it with ``kwargs``."""
    module, _, name = target.partition(":")
    with gcfreeze.importing():  # its libraries load with no automatic collection (nbkit.gcfreeze)
        function = getattr(importlib.import_module(module), name)
    return function(**kwargs)


def run(
    jobs: dict[str, Job],
    threads: int = 1,
    workers: int | None = None,
    progress: bool = True,
    desc: str = "jobs",
    on_done: Callable[[str, object], None] | None = None,
) -> dict[str, object]:
    """Run every job (``label → Job``) under ``place(len(jobs), threads, workers)``; returns ``label → value`` in
    ``jobs``' order. ``on_done(label, value)`` is called as each job finishes (e.g. to print its outcome)."""
    placement = place(len(jobs), threads, workers)
    if placement.workers == 0:
        out = {}
        for label, job in jobs.items():
            out[label] = call(job.target, job.kwargs)
            if on_done:
                on_done(label, out[label])
        return out
    return _Pool(jobs, placement, progress, desc, on_done).run()


@dataclass(eq=False)
class _Worker:
    """A worker process, its output log (its own file: named when a job dies before the job's log opened) and the
    placement and environment it was started with (``key``: what a later run must ask for to be given it)."""

    proc: subprocess.Popen
    log: object
    log_path: Path
    key: tuple
    timer: threading.Timer | None = None

    def close(self) -> None:
        """End an idle worker: its input closes, it returns from its loop (killed after 30 s); its log goes."""
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        self.log_path.unlink(missing_ok=True)


_kept: list[_Worker] = []
"""Idle workers kept for a later run (``KEEP_ENV``), oldest first."""
_kept_lock = threading.Lock()


def keep_seconds() -> float:
    """``NBKIT_POOL_KEEP`` as seconds ≥ 0 (0 when unset); anything else is refused naming the value."""
    raw = os.environ.get(KEEP_ENV, "").strip()
    try:
        seconds = float(raw or 0)
    except ValueError:
        seconds = -1
    if not seconds >= 0:
        raise ValueError(f"{KEEP_ENV}={raw!r}: expected seconds >= 0 (0 or unset: no worker is kept between runs)")
    return seconds


def _keep(worker: _Worker, seconds: float) -> None:
    """Keep an idle worker for ``seconds``, then end it unless a run has taken it."""
    worker.timer = threading.Timer(seconds, _expire, args=(worker,))
    worker.timer.daemon = True
    with _kept_lock:
        _kept.append(worker)
    worker.timer.start()


def _take(key: tuple) -> _Worker | None:
    """A kept worker started with ``key`` that is still alive (None when there is none)."""
    with _kept_lock:
        for worker in list(_kept):
            if worker.key == key:
                _kept.remove(worker)
                worker.timer.cancel()
                if worker.proc.poll() is None:
                    return worker
                worker.close()  # it ended while kept: no job ran in it since, so its log goes too
    return None


def _expire(worker: _Worker) -> None:
    with _kept_lock:
        if worker not in _kept:  # a run took it first
            return
        _kept.remove(worker)
    worker.close()


@atexit.register
def close_kept() -> None:
    """End every kept worker (at exit; a worker whose parent is gone also ends when its input closes)."""
    with _kept_lock:
        workers = list(_kept)
        _kept.clear()
    for worker in workers:
        worker.timer.cancel()
        worker.close()


class _Pool:
    """The workers of one ``run``: one process per slot, started for its first job and kept for the next ones
    (a child's start-up, importing torch, transformers and vLLM, is ~4-8 s: paid once per slot, not once per job),
    and for a later run when ``NBKIT_POOL_KEEP`` says so."""

    def __init__(self, jobs, placement: Placement, progress: bool, desc: str, on_done):
        self.jobs, self.placement, self.on_done = jobs, placement, on_done
        self.progress, self.desc = progress, desc
        self.tmp = Path(tempfile.mkdtemp(prefix="nbkit-pool-"))
        self.keep = keep_seconds()  # validated before any worker starts
        self.workers: dict[int, _Worker] = {}  # slot -> its worker
        self.worker_log: dict[str, Path] = {}  # label -> the log of the worker that ran it
        self.running: dict[str, int] = {}  # label -> the slot running it
        self.results: dict[str, object] = {}
        self.failed: list[str] = []
        self.specs: dict[str, Path] = {}  # label -> its spec file (the job's log and result sit beside it)

    def run(self) -> dict[str, object]:
        from tqdm.auto import tqdm

        todo = list(self.jobs)
        free = list(range(self.placement.workers))
        total = sum(j.units for j in self.jobs.values())
        bar = tqdm(total=total, desc=self.desc, disable=not self.progress, unit="step" if total > len(todo) else "job")
        done_units: dict[str, int] = {}
        shown: list[str] = []
        try:
            while todo or self.running:
                while todo and free and not self.failed:
                    self._start(todo.pop(0), free.pop(0))
                time.sleep(0.5)
                for label in list(self.running):
                    slot = self.running[label]
                    proc = self.workers[slot].proc
                    finished = self.specs[label].with_suffix(".result").is_file()
                    if not finished and proc.poll() is None:
                        continue
                    del self.running[label]
                    if finished:
                        free.append(slot)  # the worker takes the next job
                    else:
                        self._retire(slot)
                    self._collect(label)
                    done_units[label] = self.jobs[label].units if label in self.results else done_units.get(label, 0)
                for label in self.running:
                    poll = self.jobs[label].poll
                    if poll is not None:
                        try:
                            done_units[label] = min(self.jobs[label].units, int(poll()))
                        except (OSError, ValueError):
                            pass
                now = sum(done_units.values())
                if now != bar.n or shown != list(self.running):
                    shown = list(self.running)
                    bar.set_postfix_str(", ".join(shown), refresh=False)
                    bar.update(now - bar.n)
                if self.failed and not self.running:
                    break
        except BaseException:
            self._stop_all()
            raise
        finally:
            bar.close()
        self._close_all()
        if not self.failed:
            shutil.rmtree(self.tmp, ignore_errors=True)  # a failure keeps its log for the message to name
        else:
            raise JobFailed(
                "; ".join(self._failure(label) for label in self.failed)
                + (f" ({len(self.results)} job(s) that finished are kept)" if self.results else "")
            )
        return {label: self.results[label] for label in self.jobs}

    def _worker(self, slot: int) -> _Worker:
        """The slot's worker: its own, else one kept from an earlier run with the same placement, environment and
        folder, else started now (pinned to the slot's cores, its own rendezvous port)."""
        if slot in self.workers:
            if self.workers[slot].proc.poll() is None:
                return self.workers[slot]
            self._retire(slot)  # it ended while idle: a new one takes the job
        env = {k: v for k, v in os.environ.items() if k not in CHILD_CLEARED}
        env.update({k: str(self.placement.threads) for k in THREAD_ENV})
        env.update({WORKERS_ENV: "0", "MASTER_ADDR": "127.0.0.1", "PYTHONUNBUFFERED": "1"})
        key = (self.placement.slots[slot], self.placement.threads, tuple(sorted(env.items())), os.getcwd())
        kept = _take(key)
        if kept is not None:
            self.workers[slot] = kept
            return kept
        env["MASTER_PORT"] = str(_free_port())
        fd, log_path = tempfile.mkstemp(prefix="nbkit-pool-worker-", suffix=".log")
        log = os.fdopen(fd, "a")  # closed when the worker ends
        cores = ",".join(map(str, self.placement.slots[slot]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "nbkit.pool", "--worker", cores],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=os.getcwd(),
            start_new_session=True,
            text=True,
        )
        self.workers[slot] = _Worker(proc, log, Path(log_path), key)
        return self.workers[slot]

    def _start(self, label: str, slot: int) -> None:
        job = self.jobs[label]
        spec = self.tmp / f"{len(self.specs)}.spec"
        spec.write_bytes(
            pickle.dumps(
                {
                    "target": job.target,
                    "kwargs": job.kwargs,
                    "result": str(spec.with_suffix(".result")),
                    "log": str(spec.with_suffix(".log")),
                }
            )
        )
        self.specs[label] = spec
        self.running[label] = slot
        worker = self._worker(slot)
        self.worker_log[label] = worker.log_path
        proc = worker.proc
        try:
            proc.stdin.write(f"{spec}\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):  # the worker died between jobs: the poll names the job as failed
            pass

    def _collect(self, label: str) -> None:
        result = self.specs[label].with_suffix(".result")
        if result.is_file():
            self.results[label] = pickle.loads(result.read_bytes())
            if self.on_done:
                self.on_done(label, self.results[label])
        else:
            self.failed.append(label)

    def _failure(self, label: str) -> str:
        log = self.specs[label].with_suffix(".log")
        if not log.is_file() or not log.read_text(errors="replace").strip():  # died before the job's log opened
            log = self.worker_log[label]
        tail = log.read_text(errors="replace").strip().splitlines()[-25:] if log.is_file() else []
        return f"job {label!r} failed (log {log}):\n" + "\n".join(tail)

    def _retire(self, slot: int) -> None:
        """Forget a worker that has ended (its slot starts a new one for its next job; its log stays, as a failed
        job's message may name it)."""
        worker = self.workers.pop(slot)
        worker.proc.wait()
        worker.log.close()

    def _close_all(self) -> None:
        """Every idle worker: kept for a later run (``NBKIT_POOL_KEEP``), else ended."""
        for slot in list(self.workers):
            worker = self.workers.pop(slot)
            if self.keep > 0 and worker.proc.poll() is None:
                _keep(worker, self.keep)
            else:
                worker.close()

    def _stop_all(self) -> None:
        for worker in self.workers.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
                os.killpg(worker.proc.pid, signal.SIGINT)  # a run stops as on Ctrl-C: checkpoints stay resumable
        deadline = time.time() + 20
        for proc, log in ((w.proc, w.log) for w in self.workers.values()):
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
        self.workers.clear()
        self.running.clear()


def _has_gpu() -> bool:
    """Whether torch sees a CUDA device (without importing torch when nothing has imported it yet)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


def _free_port() -> int:
    """A TCP port free on localhost now (each child's own torch.distributed rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_main(cores: str) -> int:
    """A worker's whole life: pin to its cores, cap its threads, then run each job whose spec path arrives on its
    input (one line each) until the input closes. A job's output goes to its own log; its value is pickled beside
    its spec; a job that raises ends the worker (exit 1) with its traceback in that log."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, [int(c) for c in cores.split(",")])
    paths.setup_environment()
    with gcfreeze.importing():
        import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for line in sys.stdin:
        if line.strip():
            _run_one(line.strip())
    return 0


def _run_one(spec_path: str) -> None:
    """Run one job with this process's output sent to its log; the value is written last, atomically."""
    import traceback

    spec = pickle.loads(Path(spec_path).read_bytes())
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(spec["log"], "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            with gcfreeze.walk_only_new():  # the job's collections walk what it makes, not what earlier jobs left
                value = call(spec["target"], spec["kwargs"])
        except BaseException:  # noqa: BLE001 - printed to the job log, the worker ends
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)  # a job that failed may leave this process in any state: the worker ends with it
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    for fd in saved:
        os.close(fd)
    tmp = Path(spec["result"]).with_suffix(".partial")
    tmp.write_bytes(pickle.dumps(value))
    tmp.replace(spec["result"])


if __name__ == "__main__":
    if sys.argv[1:2] != ["--worker"] or len(sys.argv) != 3:
        sys.exit("usage: python -m nbkit.pool --worker <cores, comma-separated> (job spec paths on its input)")
    sys.exit(_worker_main(sys.argv[2]))
