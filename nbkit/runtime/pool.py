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

A slot's worker is a one-process ``concurrent.futures.ProcessPoolExecutor`` whose initializer pins it to the slot's
cores and threads; it is started for the slot's first job and runs the slot's later jobs too (a child's start-up,
importing torch, transformers and vLLM, costs ~4-8 s: once per slot, not once per job). Workers are started with
``spawn`` (a fresh interpreter, never a fork of this one's threads), which imports a script's main module again in
each worker: a script that runs jobs keeps its work under ``if __name__ == "__main__":`` (a notebook, ``nbkit`` and
``pytest`` need nothing). With ``NBKIT_POOL_KEEP`` set
to a number of seconds, a worker left idle at the end of a run is kept that long for this process's next run with the
same cores, threads, environment and folder (the test suite sets it: its tests run a grid two at a time, then one at
a time). A job therefore may not rely on a fresh process, as a job run in this process (``workers=0``, one after
another) never could.

``start`` runs the same pool in the background and returns each job's future at once: a notebook starts the jobs of
its later sections with its first section's (both cores stay busy to the end) and awaits each where it is shown.

A job is ``Job(target="module:function", kwargs=...)``; its return value comes back pickled. Its output goes to its
worker's log, a file with no name (nothing is left in the temporary folder however a run ends). A failed job raises
``JobFailed`` naming it with the tail of its output, after the jobs already running have finished (finished work is
never thrown away), and its worker ends with it; a worker killed under a job (``kill -9``, the kernel's OOM killer)
is named with its pid and signal. Ctrl-C stops every worker as Ctrl-C stops a run, and re-raises. A worker whose
parent dies stops its job the same way and ends.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from nbkit.runtime import gcfreeze, paths

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
    with gcfreeze.importing():  # its libraries load with no automatic collection (nbkit.runtime.gcfreeze)
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


class Started(dict):
    """``start``'s value: ``label → concurrent.futures.Future`` of each job's value, in the jobs' order, each set as
    its job finishes. A job that did not finish (it failed, or a job before it failed and the pool stopped giving out
    jobs, or ``stop``) has its future raise the run's error (``JobFailed`` naming every failure)."""

    def __init__(self, futures: dict[str, Future], pool: _Pool, thread: threading.Thread):
        super().__init__(futures)
        self._pool, self._thread = pool, thread

    def result(self, label: str):
        """Job ``label``'s value, awaited. Ctrl-C while waiting stops every job as it stops ``run``, then re-raises."""
        try:
            return self[label].result()
        except KeyboardInterrupt:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every job as Ctrl-C stops ``run`` (checkpoints stay resumable) and wait until the workers are gone."""
        self._pool.stopping.set()
        self._thread.join()


def joined(*groups: dict[str, Job]) -> dict[str, Job]:
    """The jobs of every group (``label → Job``) in one dict, in order; a label in two groups is refused (the one
    check behind ``start``, ``nbkit.rl.grid.train_all``'s and ``nbkit.offline.analysis.run_grids``' ``beside``)."""
    jobs: dict[str, Job] = {}
    for group in groups:
        clash = sorted(set(group) & set(jobs))
        if clash:
            raise ValueError(f"job label(s) {clash} are in two groups; give them other names")
        jobs.update(group)
    return jobs


def start(
    *groups: dict[str, Job], threads: int = 1, workers: int | None = None, progress: bool = True, desc: str = "jobs"
) -> Started:
    """``run`` in the background: returns at once with ``label → Future`` (``Started``), so a notebook can start the
    jobs of its later sections with the first section's and await each in the section that shows it. ``groups``: the
    jobs (``label → Job``), e.g. one group per section, given out in that order; a label in two groups is refused.
    Always in worker processes (at least one, even where ``run`` would call the jobs in this process: one job,
    ``workers=0``, ``NBKIT_WORKERS=0``, a GPU), so that this process's work meanwhile shares no RNG, default dtype or
    GEMM policy with them. Placement and failures are ``run``'s."""
    jobs = joined(*groups)
    placement = place(len(jobs), threads, workers)
    if placement.workers == 0 and jobs:
        placement = place(len(jobs), threads, 1)  # never in this process
    futures = {label: Future() for label in jobs}
    background = _Pool(jobs, placement, progress, desc, lambda label, value: futures[label].set_result(value))

    def work() -> None:
        try:
            background.run()
        except BaseException as exc:  # noqa: BLE001 - handed to every job that did not finish
            for future in futures.values():
                if not future.done():
                    future.set_exception(exc)

    thread = threading.Thread(target=work, name=f"nbkit-pool-{desc}", daemon=True)
    started = Started(futures, background, thread)
    thread.start()
    return started


@dataclass(eq=False)
class _Worker:
    """A slot's worker: a one-process executor started with ``_start_worker`` (pinned, its threads fixed, its own
    rendezvous port) and ``key``, what a later run must ask for to be given it when it is kept."""

    executor: ProcessPoolExecutor
    key: tuple
    timer: threading.Timer | None = None

    @property
    def process(self) -> multiprocessing.Process | None:
        """Its process (None before its first job): the executor's own record, as it offers no public one."""
        return next(iter((self.executor._processes or {}).values()), None)

    def alive(self) -> bool:
        proc = self.process
        return proc is not None and proc.is_alive()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to its process group (the worker and whatever its job started, e.g. an engine's process)."""
        proc = self.process
        if proc is not None and proc.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
                os.killpg(proc.pid, sig)

    def end(self, grace: float = 30) -> None:
        """End it: it leaves its loop once idle; what is still running after ``grace`` seconds is killed."""
        proc = self.process
        self.executor.shutdown(wait=False, cancel_futures=True)
        if proc is not None:
            proc.join(grace)
            if proc.is_alive():
                self.signal(signal.SIGKILL)
                proc.join()

    def death(self) -> str:
        """How its process ended, for a job that was running in it."""
        proc = self.process
        if proc is None:
            return "its worker could not start"
        proc.join(5)
        for _ in range(50):  # the executor's own thread may be reaping it this very moment
            if proc.exitcode is not None:
                break
            time.sleep(0.1)
        code = proc.exitcode
        if code is not None and code < 0:
            return f"its worker (pid {proc.pid}) was killed by signal {-code} ({signal.Signals(-code).name})"
        return f"its worker (pid {proc.pid}) ended with exit code {code} before the job finished"


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
                if worker.alive():
                    return worker
                worker.end()
    return None


def _expire(worker: _Worker) -> None:
    with _kept_lock:
        if worker not in _kept:  # a run took it first
            return
        _kept.remove(worker)
    worker.end()


@atexit.register
def close_kept() -> None:
    """End every kept worker (at exit; a worker whose parent is gone also ends by itself)."""
    with _kept_lock:
        workers = list(_kept)
        _kept.clear()
    for worker in workers:
        worker.timer.cancel()
        worker.end()


class _Pool:
    """The workers of one ``run``: one per slot, started for its first job and kept for the next ones, and for a
    later run when ``NBKIT_POOL_KEEP`` says so."""

    def __init__(self, jobs, placement: Placement, progress: bool, desc: str, on_done):
        self.jobs, self.placement, self.on_done = jobs, placement, on_done
        self.progress, self.desc = progress, desc
        self.keep = keep_seconds()  # validated before any worker starts
        self.workers: dict[int, _Worker] = {}  # slot -> its worker
        self.running: dict[Future, tuple[str, int]] = {}  # a job's future -> (its label, its slot)
        self.results: dict[str, object] = {}
        self.failed: dict[str, str] = {}  # label -> why
        self.stopping = threading.Event()  # set by another thread (``Started.stop``): stop as Ctrl-C does

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
                if self.stopping.is_set():
                    raise KeyboardInterrupt
                while todo and free and not self.failed:
                    label, slot = todo.pop(0), free.pop(0)
                    self.running[self._submit(label, slot)] = (label, slot)
                finished, _ = wait(list(self.running), timeout=0.5, return_when=FIRST_COMPLETED)
                for future in [f for f in self.running if f in finished]:  # in the order they started
                    label, slot = self.running.pop(future)
                    if self._collect(label, slot, future):
                        free.append(slot)  # the worker takes the next job
                    done_units[label] = self.jobs[label].units if label in self.results else done_units.get(label, 0)
                for label, _ in self.running.values():
                    poll = self.jobs[label].poll
                    if poll is not None:
                        try:
                            done_units[label] = min(self.jobs[label].units, int(poll()))
                        except (OSError, ValueError):
                            pass
                now = sum(done_units.values())
                labels = [label for label, _ in self.running.values()]
                if now != bar.n or shown != labels:
                    shown = labels
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
        if self.failed:
            raise JobFailed(
                "; ".join(f"job {label!r} failed: {why}" for label, why in self.failed.items())
                + (f" ({len(self.results)} job(s) that finished are kept)" if self.results else "")
            )
        return {label: self.results[label] for label in self.jobs}

    def _submit(self, label: str, slot: int) -> Future:
        job = self.jobs[label]
        worker = self._worker(slot)
        try:
            return worker.executor.submit(_run_job, job.target, job.kwargs)
        except BrokenProcessPool:  # it died between jobs: a new one takes the job
            self._retire(slot)
            return self._worker(slot).executor.submit(_run_job, job.target, job.kwargs)

    def _worker(self, slot: int) -> _Worker:
        """The slot's worker: its own, else one kept from an earlier run with the same placement, environment and
        folder, else a new one (pinned to the slot's cores, its own rendezvous port)."""
        if slot in self.workers:
            return self.workers[slot]
        env = {k: v for k, v in os.environ.items() if k not in CHILD_CLEARED}
        settings = {k: str(self.placement.threads) for k in THREAD_ENV}
        settings.update({WORKERS_ENV: "0", "MASTER_ADDR": "127.0.0.1"})
        key = (
            self.placement.slots[slot],
            self.placement.threads,
            tuple(sorted({**env, **settings}.items())),
            os.getcwd(),
        )
        worker = _take(key)
        if worker is None:
            settings["MASTER_PORT"] = str(free_port())
            executor = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),  # a fresh interpreter: no copy of this one's threads
                initializer=_start_worker,
                initargs=(self.placement.slots[slot], self.placement.threads, settings),
            )
            worker = _Worker(executor, key)
        self.workers[slot] = worker
        return worker

    def _collect(self, label: str, slot: int, future: Future) -> bool:
        """Hand a finished job's value over (True), or record why it failed and end its worker (False)."""
        try:
            value = future.result()
        except BrokenProcessPool:
            self.failed[label] = self.workers[slot].death()
        except _Failed as exc:  # a job that failed may leave its process in any state: its worker ends with it
            self.failed[label] = str(exc)
        except Exception as exc:  # noqa: BLE001 - e.g. its arguments or its value would not pickle
            self.failed[label] = f"{type(exc).__name__}: {exc}"
        else:
            self.results[label] = value
            if self.on_done:
                self.on_done(label, value)
            return True
        self._retire(slot)
        return False

    def _retire(self, slot: int) -> None:
        """End a slot's worker (its next job, if any, starts a new one)."""
        self.workers.pop(slot).end()

    def _close_all(self) -> None:
        """Every idle worker: kept for a later run (``NBKIT_POOL_KEEP``), else ended."""
        for slot in list(self.workers):
            worker = self.workers.pop(slot)
            if self.keep > 0 and worker.alive():
                _keep(worker, self.keep)
            else:
                worker.end()

    def _stop_all(self) -> None:
        """Stop every worker as Ctrl-C stops a run (checkpoints stay resumable); killed after 20 s."""
        deadline = time.time() + 20
        for worker in self.workers.values():
            worker.signal(signal.SIGINT)
        wait(list(self.running), timeout=20)
        for worker in self.workers.values():
            worker.end(grace=max(0.1, deadline - time.time()))
        self.workers.clear()
        self.running.clear()


class _Failed(RuntimeError):
    """A job raised in its worker: the message is its error, then the tail of its output (its traceback included)."""


def _has_gpu() -> bool:
    """Whether torch sees a CUDA device (without importing torch when nothing has imported it yet)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on this node now (each socket held until all are found): rendezvous, servers."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in socks]


def free_port() -> int:
    """A TCP port free on this node now (each child's own torch.distributed rendezvous)."""
    return free_ports(1)[0]


# ----- in a worker -----------------------------------------------------------------------------------------------

_log: int | None = None
"""In a worker: the file descriptor its output goes to (None in any other process)."""
_busy = threading.Event()
"""In a worker: set while a job runs."""


def _start_worker(cores: tuple[int, ...], threads: int, settings: dict[str, str]) -> None:
    """A worker's start (the executor's initializer): its own session (Ctrl-C in a terminal reaches the parent, which
    stops the workers), pinned to ``cores``, ``threads`` threads, the launch variables of the parent's cleared and
    its own set, torch loaded; then its output goes to a file with no name, and it watches its parent."""
    global _log
    os.setsid()
    # Its SIGINT is the pool's "stop as Ctrl-C does" (no terminal reaches its session), also when the parent runs with
    # SIGINT ignored, as a background job (`cmd &` without job control) does and its children inherit.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    for key in CHILD_CLEARED:
        os.environ.pop(key, None)
    os.environ.update(settings)
    paths.setup_environment()
    with gcfreeze.importing():
        import torch

    torch.set_num_threads(threads)
    log = tempfile.TemporaryFile()  # removed by the system when the worker ends, however it ends
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    log.close()
    _log = 1
    threading.Thread(target=_watch_parent, daemon=True).start()


def _watch_parent() -> None:
    """When the parent dies (kill -9 included), stop the running job as Ctrl-C does, then end this worker."""
    multiprocessing.parent_process().join()
    if _busy.is_set():
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.time() + 20
        while _busy.is_set() and time.time() < deadline:
            time.sleep(0.2)
    os.killpg(0, signal.SIGKILL)


def _run_job(target: str, kwargs: dict):
    """One job in a worker: its output starts the worker's log afresh, its collections walk only what it makes
    (``nbkit.runtime.gcfreeze``); a failure comes back as ``_Failed`` with the tail of that output."""
    import traceback

    _busy.set()
    try:
        if _log is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os.ftruncate(_log, 0)
            os.lseek(_log, 0, os.SEEK_SET)
        with gcfreeze.walk_only_new():
            return call(target, kwargs)
    except KeyboardInterrupt:
        if _log is None:
            raise
        os._exit(130)  # stopped by the parent (Ctrl-C) or by its death: the job stopped as on Ctrl-C, the worker ends
    except BaseException as exc:  # noqa: BLE001 - reported, then the parent ends this worker
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        out = os.pread(_log, 1 << 16, max(0, os.fstat(_log).st_size - (1 << 16))) if _log is not None else b""
        tail = out.decode(errors="replace").strip().splitlines()[-25:]
        end = ["(the end of its output:)", *tail] if tail else []
        raise _Failed("\n".join([f"{type(exc).__name__}: {exc}", *end])) from None
    finally:
        _busy.clear()
