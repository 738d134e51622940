"""``make test`` runs the suite on every free core (pytest-xdist): two test workers never share a cache folder, a
temporary folder (where every run folder, report and dataset of a test lives) or a port."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbkit import paths, pool

PROBE_ENV = "NBKIT_ISOLATION_PROBE"


@pytest.mark.skipif(not os.environ.get(PROBE_ENV), reason="the inner half of the isolation test below")
@pytest.mark.parametrize("i", range(6))
def test_worker_records_what_it_uses(i, tmp_path):
    import time

    from tests.conftest import PER_WORKER_CACHES

    time.sleep(0.5)  # long enough that both workers take some of the six
    record = {"worker": os.environ.get("PYTEST_XDIST_WORKER"), "tmp": str(tmp_path.parent),  # the worker's base temporary folder
              "port": pool._free_port(), "caches": {k: os.environ[k] for k in PER_WORKER_CACHES}}
    (Path(os.environ[PROBE_ENV]) / f"{i}.json").write_text(json.dumps(record))


@pytest.mark.slow
def test_two_workers_never_share_a_cache_folder_a_temporary_folder_or_a_port(tmp_path):
    env = {**os.environ, PROBE_ENV: str(tmp_path), "PYTHONPATH": str(paths.ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider",
                           "tests/test_xdist_isolation.py::test_worker_records_what_it_uses"],
                          cwd=paths.ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]
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
