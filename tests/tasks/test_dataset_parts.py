"""A dataset build's sampling split into parts on the free cores (``nbkit.tasks.dataset.estimate_pass_rates``):
the built dataset is byte for byte the one-batch-after-another build, and a cut-off split build resumes."""

import json

import pytest

from nbkit.runtime import pool
from nbkit.tasks import TaskConfig, make_task
from nbkit.tasks import dataset as ds
from tests.tasks.test_dataset import FakeEngine, planned


@pytest.fixture(autouse=True)
def no_worker_limit(monkeypatch):
    """The suite itself sets ``NBKIT_WORKERS=0`` (tests/conftest.py); these tests start from an unset limit."""
    monkeypatch.delenv(pool.WORKERS_ENV, raising=False)


def _cfg(folder, **kw) -> ds.BuildConfig:
    base = {
        "name": "t",
        "out_dir": str(folder / "out"),
        "cache_dir": str(folder / "cache"),
        "model": "tiny-arith",
        "engine": "hf",
        "dtype": "fp32",
        "n_samples": 4,
        "batch_prompts": 4,
        "lo": 0.0,
        "hi": 1.0,
        "engine_kwargs": {"batch_size": 16, "progress": False},
    }
    return ds.BuildConfig(**{**base, **kw})


DATA = ("train.parquet", "pool.parquet", "dataset_dict.json", "train/dataset_info.json")


@pytest.mark.slow
@pytest.mark.skipif(len(pool.free_cores()) < 2, reason="needs two free cores")
def test_a_build_sampled_in_two_parts_at_once_is_the_serial_build_byte_for_byte(tmp_path):
    task = make_task(TaskConfig(source="arith", pool_size=12, seed=3))  # 3 batches of 4: parts of 2 and 1 batch
    serial = ds.build(task, _cfg(tmp_path / "serial"), progress=False, workers=0)
    split = ds.build(task, _cfg(tmp_path / "split"), progress=False, workers=2)
    assert serial.card["counts"] == split.card["counts"] and split.card["counts"]["sampled_this_run"] == 12
    for name in (*DATA, *(p.relative_to(serial.path).as_posix() for p in serial.path.glob("train/*.arrow"))):
        assert (serial.path / name).read_bytes() == (split.path / name).read_bytes(), name
    card = {k: v for k, v in serial.card.items() if k not in ("created", "time_seconds", "sampling_seconds")}
    assert card == {k: v for k, v in split.card.items() if k not in ("created", "time_seconds", "sampling_seconds")}
    cache = ds.cache_file(task, _cfg(tmp_path / "split"))
    assert not list(cache.parent.glob("*.part-*")), "the parts are folded into the cache"
    keys = [json.loads(line)["key"] for line in cache.read_text().splitlines()]
    assert keys == [ds.problem_key(p) for p in task.problems]  # in batch order, as the serial build writes it


def test_the_parts_of_a_cut_off_split_build_count_as_finished_at_the_next_build(tmp_path):
    task = make_task(TaskConfig(source="arith", pool_size=8, seed=3))
    cfg = _cfg(tmp_path, model="fake", engine="fake")
    cache = ds.cache_file(task, cfg)
    finished = [
        {
            "key": ds.problem_key(p),
            "n_samples": 4,
            "n_correct": 2,
            "pass_rate": 0.5,
            "n_no_answer": 0,
            "n_truncated": 0,
            "mean_tokens": 3.0,
            "seconds": 0.1,
            "example_correct": None,
            "example_wrong": None,
        }
        for p in task.problems
    ]
    ds._append(cache.with_name("rates.part-1.jsonl"), finished[4:6])  # part 1 had written one batch of two
    ds._append(cache.with_name("rates.part-0.jsonl"), finished[:4])
    cache.with_name("rates.part-0.jsonl").open("a").write('{"key": "cut sh')  # and part 0 a line cut by the kill

    engine = FakeEngine(planned(task, 4))
    records, sampled = ds.estimate_pass_rates(task, task.problems, cfg, engine, progress=False)
    assert engine.prompts == [task.prompt(p) for p in task.problems[6:]] and sampled == 2  # only the unfinished two
    assert [r["pass_rate"] for r in records[:6]] == [0.5] * 6  # the parts' records, as written
    keys = [json.loads(line)["key"] for line in cache.read_text().splitlines()]
    assert keys == [ds.problem_key(p) for p in task.problems]  # part 0, part 1 (the cut line left out), then the rest
    assert not list(cache.parent.glob("*.part-*"))
