"""Suite-wide checks and shared fixtures.

``NBKIT_REQUIRE_VLLM=1`` (set by ``make test`` whenever the Makefile's ``VLLM_SPEC`` names a vLLM build) makes a
vLLM that does not import a failure of the whole run instead of a row of skipped tests: the venv was meant to
have it, so its absence is a broken install, not an optional feature.

``smoke_report``: one smoke-profile run of the whole workbook per test session.
``tests/workbook/test_notebooks.py`` checks that every notebook of that run succeeded and
``tests/workbook/test_browser.py`` opens its reports in Chromium, so each notebook executes once per session however many tests read its report.

``tiny_random_model`` / ``arith_jsonl``: a 2-layer randomly initialised tiny-arith model folder and 64 arithmetic
problems, built once per session for the training tests.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest

from nbkit.runtime import gcfreeze, paths

paths.setup_environment()  # the suite is an entry point: caches inside the project before any HF library loads

XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""``gw0``, ``gw1``, ... when pytest-xdist runs the suite in several processes (``make test``), else None."""
PER_WORKER_CACHES = (
    "VLLM_CACHE_ROOT",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "IPYTHONDIR",
    "XDG_CACHE_HOME",
    "MPLCONFIGDIR",
)
"""Tool caches written while a test runs: each xdist worker gets its own (``.cache/xdist/<worker>/``). Derived
artefacts that are written once under a lock (the converted SmolLM2) stay shared; run folders, reports and
datasets of tests live in each test's own ``tmp_path``; ports are chosen free by each process."""
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(os.environ["XDG_CACHE_HOME"]) / "torch_extensions"))
"""C++ ops built on first use (DeepSpeed's shared-memory comm op: ~40 s of compiling in a ZeRO test) stay shared
between the workers, where a one-process run keeps them: torch builds each under its own file lock."""
if XDIST_WORKER:
    for _key in PER_WORKER_CACHES:
        os.environ[_key] = str(paths.CACHE / "xdist" / XDIST_WORKER / _key.lower())
os.environ.setdefault("NBKIT_WORKERS", "0")  # the suite's workers share the cores: a test's grid trains in-process
os.environ.setdefault("NBKIT_POOL_KEEP", "300")  # a pool test's workers serve the next pool test (nbkit.runtime.pool)


def threads_per_worker(cores: int, workers: int) -> int:
    """Intra-op threads each of ``workers`` xdist processes gets on ``cores`` cores: an equal share, at least one.
    Without it every worker's torch (and every notebook kernel or engine it starts) spins up one OpenMP thread per
    core, so two workers run four busy threads on two cores: on a 2-core EPYC the fast tier took 201 s at 190 % CPU
    this way and 96 s at 167 % with one thread per worker (benchmarks/README.md)."""
    return max(1, cores // max(1, workers))


if XDIST_WORKER:
    _threads = str(
        threads_per_worker(len(os.sched_getaffinity(0)), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    )
    for _key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_key, _threads)  # set before torch loads; a value the user exported wins

from nbkit.models.toymodels import arith, tiny_arith  # noqa: E402
from nbkit.workbook import runner  # noqa: E402


def vllm_import_error() -> str | None:
    """Why ``import vllm`` fails here (None when it imports)."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to import is the finding
        return f"{type(exc).__name__}: {exc}"
    return None


def pytest_configure(config):
    if os.environ.get("NBKIT_REQUIRE_VLLM") == "1":
        error = vllm_import_error()
        if error is not None:
            raise pytest.UsageError(
                f"NBKIT_REQUIRE_VLLM=1 (make test with VLLM_SPEC set) but vLLM does not "
                f"import: {error}. Reinstall with `make clean-venv venv`, or run "
                f"`make test VLLM_SPEC=` on a machine without vLLM."
            )


SHARED_FIXTURES = {
    "tests/workbook/test_browser.py": "smoke_report",
    "tests/workbook/test_notebooks.py::test_notebook_executes_with_smoke_parameters": "smoke_report",
    "tests/core/test_engines.py": "vllm_runs",
    "tests/rl/test_corrections.py": "applied",
    "tests/rl/test_rl.py::test_every_is_preset_applies_its_correction": "one_step_per_preset",
    "tests/rl/test_sampling_filter_rl.py": "steps",
    "tests/offline/test_analysis.py": "grid",
    "tests/offline/test_anatomy.py": "fp32_anatomy",
    "tests/cli/test_cpu_dry_run.py::test_zero_stops_at_deepspeeds_batch_check_on_cpu": "deepspeed_shm_op",
}
"""Tests (a module, or one test function of it, by node id) -> the expensive session- or module-scoped fixture they
share. Under ``--dist loadgroup`` (``make test``) all tests of one fixture run on one xdist worker, so it is built
once per suite rather than once per worker (the module's vLLM engines took 62 s on each of the two workers), and
these groups start first, largest first, while single tests fill the other worker."""


def xdist_group(nodeid: str) -> str:
    """The work unit of the test ``nodeid`` under ``--dist loadgroup``: the fixture it shares, else the test alone."""
    for prefix, fixture in SHARED_FIXTURES.items():
        if nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "[")):
            return fixture
    return nodeid


CPU_KINDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "xeon-avx512fp16": (("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16"), "AVX512", "native"),
    "epyc-avx512bf16": (("avx2", "avx512f", "avx512_bf16"), "AVX512", "fp32-accumulate"),
    "avx2": (("avx2", "fma", "f16c"), "AVX2", "fp32-accumulate"),
}
"""The CPU kinds the project meets, as ``nbkit.precision.gemm`` reads them (kind → (CPU flags, torch's CPU capability, the
policy ``gemm="auto"`` resolves to there)): a Sapphire Rapids Xeon (native half GEMMs), an EPYC with AVX512-BF16
only and an AVX2-only EPYC (both ``fp32-accumulate``). A test whose result depends on the CPU's half kernels takes
the ``cpu_kind`` fixture and runs once per kind on any machine; ``NBKIT_TEST_CPU_KIND=<kind>`` makes a whole session
resolve ``auto`` as that kind (``tests/suite/test_cpu_kinds.py`` runs the cross-CPU tests so, and under
``benchmarks/avx2.py``'s process-level emulation)."""


def as_cpu_kind(monkeypatch, kind: str) -> str:
    """Make ``nbkit.precision.gemm`` see the CPU of ``kind`` (its flags and torch's capability; no kernel cap in the
    environment); returns the policy ``auto`` resolves to there. Only the decision changes: torch's kernels stay
    this machine's (``native`` on an AVX2 CPU runs torch's slow reference half kernels, with the same roundings)."""
    from nbkit.precision import gemm

    flags, capability, policy = CPU_KINDS[kind]
    monkeypatch.setattr(gemm, "_cpu_flags", lambda: flags)
    monkeypatch.setattr(gemm.torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert gemm.resolve("auto", "cpu") == policy
    return policy


@pytest.fixture(params=list(CPU_KINDS))
def cpu_kind(request, monkeypatch) -> str:
    """The test runs once per CPU kind (``CPU_KINDS``), ``gemm="auto"`` resolving as on that CPU; yields the kind."""
    as_cpu_kind(monkeypatch, request.param)
    return request.param


@pytest.fixture(autouse=True, scope="session")
def _session_cpu_kind():
    """``NBKIT_TEST_CPU_KIND=<kind>``: the whole session resolves ``gemm="auto"`` as on that CPU kind."""
    kind = os.environ.get("NBKIT_TEST_CPU_KIND")
    if not kind:
        yield None
        return
    if kind not in CPU_KINDS:
        raise pytest.UsageError(f"NBKIT_TEST_CPU_KIND={kind!r}; choose one of {list(CPU_KINDS)}")
    with pytest.MonkeyPatch.context() as mp:
        yield as_cpu_kind(mp, kind)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Collection imports the libraries (torch, transformers, TRL, vLLM): no automatic collection walks them meanwhile."""
    with gcfreeze.importing():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test (its fixtures' set-up and tear-down included) runs in ``nbkit.runtime.gcfreeze.walk_only_new``, as a
    run
    does: the collections it triggers walk what the test made, not the ~1 M objects the worker keeps (libraries,
    other tests' session fixtures); everything is walked again after it. ``NBKIT_GC_FREEZE=0`` turns it off."""
    with gcfreeze.walk_only_new():
        yield


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups of :data:`SHARED_FIXTURES`. (pytest-xdist 3.8 groups by an
    ``xdist_group`` mark by renaming ``item._nodeid``, which pytest 9 no longer reads, so marks group nothing here.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return SharedFixtureScheduling(config, log)


@pytest.fixture(scope="session")
def smoke_report(tmp_path_factory) -> tuple[Path, dict[str, runner.NotebookResult]]:
    """``(report folder, stem -> result)`` of ``nbkit run --profile smoke`` into a temporary folder.

    Under pytest-xdist the workers share one run: the first worker to need it runs it under a lock into the
    session's common temporary folder and pickles the results; the others wait for the lock and read them (so the
    workbook executes once per suite, whichever worker reaches a test of it first)."""
    if not XDIST_WORKER:
        out = tmp_path_factory.mktemp("smoke_report")
        return out, {r.stem: r for r in runner.run("smoke", out)}
    import fcntl
    import pickle

    shared = tmp_path_factory.getbasetemp().parent  # pytest-<n>/, one per session, above every worker's own folder
    out, done = shared / "smoke_report", shared / "smoke_report.pickle"
    with open(shared / "smoke_report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            results = runner.run("smoke", out)
            done.write_bytes(pickle.dumps(results))
    return out, {r.stem: r for r in pickle.loads(done.read_bytes())}


@pytest.fixture
def outside_the_suites_freeze(monkeypatch):
    """The test runs as a process with no ``gcfreeze`` block open (a notebook's kernel, a script), not inside the
    block ``pytest_runtest_protocol`` opens for it: the suite's freeze is undone, and put back for the hook to end."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    monkeypatch.setattr(gcfreeze, "_depth", 0)
    yield
    if frozen:
        gc.freeze()


@pytest.fixture
def small_grid():
    """The small tiny-arith offline grid the pool and grid-splitting tests run: 4 prompts × 2 samples, ≤ 16 tokens,
    FP32 and BF16 engines × FP32 and BF16 trainers."""
    from nbkit.offline import analysis

    return analysis.GridConfig(
        model="tiny-arith",
        engine="hf",
        n_prompts=4,
        samples_per_prompt=2,
        max_tokens=16,
        n_boot=10,
        engine_dtypes=("fp32", "bf16"),
        train_dtypes=("fp32", "bf16"),
    )


@pytest.fixture(scope="session")
def tiny_random_model(tmp_path_factory) -> str:
    """Folder of a 2-layer, 32-wide tiny-arith model with random weights (fast to train; not the shipped model)."""
    path = tmp_path_factory.mktemp("tiny-random")
    cfg = tiny_arith.TinyArithConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, seed=1)
    tiny_arith.build_model(cfg).save_pretrained(path)
    tiny_arith.build_tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def arith_jsonl(tmp_path_factory) -> str:
    """A JSONL dataset of 64 arithmetic problems (seed 7)."""
    path = tmp_path_factory.mktemp("data") / "arith.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in arith.make_problems(64, seed=7)))
    return str(path)
