"""``make test`` runs the suite on every free core (pytest-xdist): two test workers never share a cache folder, a
temporary folder (where every run folder, report and dataset of a test lives) or a port, and each takes its share
of the cores' threads instead of one per core."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbkit.runtime import paths, pool

PROBE_ENV = "NBKIT_ISOLATION_PROBE"


@pytest.mark.skipif(not os.environ.get(PROBE_ENV), reason="the inner half of the isolation test below")
@pytest.mark.parametrize("i", range(6))
def test_worker_records_what_it_uses(i, tmp_path):
    import time

    import torch

    from tests.conftest import PER_WORKER_CACHES

    time.sleep(0.5)  # long enough that both workers take some of the six
    record = {
        "worker": os.environ.get("PYTEST_XDIST_WORKER"),
        "tmp": str(tmp_path.parent),  # the worker's base temporary folder
        "port": pool.free_port(),
        "caches": {k: os.environ[k] for k in PER_WORKER_CACHES},
        "torch_threads": torch.get_num_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
    }
    (Path(os.environ[PROBE_ENV]) / f"{i}.json").write_text(json.dumps(record))


def probe_workers(tmp_path, **env_set) -> list[dict]:
    """Run the probe above under ``pytest -n 2`` in a fresh process (environment as on a fresh shell, plus
    ``env_set``) and return the six records its workers wrote. ``make test``'s ``NBKIT_REQUIRE_VLLM=1`` is not passed
    on: the outer run has checked vLLM already, and the probe's three processes would each import it (~5 s)."""
    env = {**os.environ, PROBE_ENV: str(tmp_path), "PYTHONPATH": str(paths.ROOT)}
    for key in ("PYTEST_XDIST_WORKER", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NBKIT_REQUIRE_VLLM"):
        env.pop(key, None)
    env.update(env_set)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/suite/test_xdist_isolation.py::test_worker_records_what_it_uses",
        ],
        cwd=paths.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]


@pytest.mark.slow
def test_two_workers_never_share_a_cache_folder_a_temporary_folder_or_a_port(tmp_path):
    records = probe_workers(tmp_path)
    assert len(records) == 6
    by_worker = {}
    for r in records:
        by_worker.setdefault(r["worker"], []).append(r)
    assert sorted(by_worker) == ["gw0", "gw1"]
    one, two = (by_worker[w][0] for w in ("gw0", "gw1"))
    assert one["tmp"] != two["tmp"]
    for key, folder in one["caches"].items():
        assert folder != two["caches"][key] and "gw0" in folder and "gw1" in two["caches"][key], key
    ports = [r["port"] for r in records]
    assert len(set(ports)) == len(ports)
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert {(r["torch_threads"], r["omp"]) for r in records} == {(share, str(share))}


@pytest.mark.parametrize("cores, workers, threads", [(2, 2, 1), (8, 2, 4), (3, 2, 1), (1, 2, 1), (4, 1, 4), (4, 0, 4)])
def test_each_worker_gets_an_equal_share_of_the_cores_and_at_least_one_thread(cores, workers, threads):
    from tests.conftest import threads_per_worker

    assert threads_per_worker(cores, workers) == threads


@pytest.mark.slow
def test_a_thread_count_the_user_exported_wins_over_the_share(tmp_path):
    records = probe_workers(tmp_path, OMP_NUM_THREADS="3")
    assert len(records) == 6 and {r["omp"] for r in records} == {"3"}  # what torch makes of it is its own affair
