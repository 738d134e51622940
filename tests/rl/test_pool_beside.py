"""Other jobs beside a grid's runs (``nbkit.rl.grid.train_all(beside=...)``, ``GridStudy.live(beside=...)``): one
pool for both, their values handed back under their labels, the same numbers however many jobs run at once."""

import os

import numpy as np
import pytest

from nbkit.offline.ladder import LadderConfig
from nbkit.records import schema
from nbkit.rl import grid
from nbkit.runtime import pool
from nbkit.studies.dose_response import DoseResponse


@pytest.fixture(autouse=True)
def no_worker_limit(monkeypatch):
    """The suite itself sets ``NBKIT_WORKERS=0`` (tests/conftest.py); these tests start from an unset limit."""
    monkeypatch.delenv(pool.WORKERS_ENV, raising=False)


def test_a_beside_job_named_like_a_run_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match=r"job label\(s\) \['grpo-fp32'\] are in two groups; give them other names"):
        grid.train_all({"grpo-fp32": None}, beside={"grpo-fp32": pool.Job("tests.runtime.test_pool:where_am_i")})


def test_a_beside_job_named_like_a_grid_job_is_refused_in_either_placement():
    from nbkit.offline import analysis

    cfg = analysis.GridConfig(model="tiny-arith", engine="hf", engine_dtypes=("fp16",), train_dtypes=("fp32",))
    clash = {"0:tiny-arith:fp16": pool.Job("tests.runtime.test_pool:where_am_i")}
    for workers in (0, 2):  # in this process as well as in the pool
        with pytest.raises(ValueError, match=r"job label\(s\) \['0:tiny-arith:fp16'\] are in two groups"):
            analysis.run_grids([cfg], progress=False, workers=workers, beside=clash)


def test_in_this_process_the_beside_jobs_run_here_and_come_back_under_their_labels():
    got = grid.train_all({}, progress=False, workers=0, beside={"here": pool.Job("tests.runtime.test_pool:where_am_i")})
    assert list(got) == ["here"] and got["here"]["pid"] == os.getpid()


_science = schema.without_timing


@pytest.mark.slow
@pytest.mark.skipif(len(pool.free_cores()) < 2, reason="needs two free cores")
def test_a_live_slice_with_a_ladder_beside_it_gives_the_rows_and_ladder_of_one_job_at_a_time(tmp_path):
    """Notebook 06's section 1 cell: the dose-response live runs and the offline ladder in one pool."""
    ladder = LadderConfig(model="tiny-arith", formats=("fp32", "mxfp4"), n_prompts=4, samples_per_prompt=2, n_boot=20)

    def live(folder, workers):
        return DoseResponse().live(
            progress=False,
            workers=workers,
            formats=["fp32", "mxfp4"],
            seeds=[0],
            steps=1,
            pairs=[],
            more_seeds={},
            corrected={"formats": [], "corrections": []},
            output_dir=str(folder),
            overrides={"judge_every": 0, "prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8},
            beside={"ladder": pool.Job("nbkit.offline.ladder:run_ladder", {"cfg": ladder})},
        )

    together, alone = live(tmp_path / "two", 2), live(tmp_path / "one", 1)
    runs, meta, _, values = together
    assert sorted(runs) == sorted(alone[0]) == ["fp32-none-s0", "mxfp4-none-s0"] and meta == alone[1]
    for label in runs:
        assert _science(runs[label]) == _science(alone[0][label]), label
    a, b = values["ladder"], alone[3]["ladder"]
    assert list(values) == ["ladder"] and a.config == b.config == ladder
    np.testing.assert_equal(a.metrics, b.metrics)  # bit for bit
    assert [r.token_ids for r in a.rollouts["mxfp4"]] == [r.token_ids for r in b.rollouts["mxfp4"]]


def _no_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in rows]


@pytest.mark.slow
@pytest.mark.skipif(len(pool.free_cores()) < 2, reason="needs two free cores")
def test_notebook_02_s_later_parts_beside_the_grid_give_the_numbers_of_one_job_at_a_time(small_grid):
    """The grid's jobs, the length law, the routing flips and the anatomy in one pool (notebook 02's section 1)."""
    from nbkit.offline import analysis
    from nbkit.offline.moe_analysis import MoeConfig

    cfg = small_grid
    later = {
        "lengthlaw": pool.Job(
            "nbkit.offline.lengthlaw_measure:measure",
            {
                "model": "tiny-arith",
                "dtypes": ("bf16",),
                "n_prompts": 4,
                "samples_per_prompt": 2,
                "max_tokens": 40,
                "prompt_source": "arith",
                "engine": "hf",
            },
        ),
        "moe": pool.Job("nbkit.offline.moe_analysis:run", {"cfg": MoeConfig(n_prompts=4, samples_per_prompt=2)}),
        "anatomy": pool.Job(
            "nbkit.offline.anatomy:run",
            {
                "model": "tiny-arith",
                "engine": "hf",
                "dtype": "fp16",
                "n_prompts": 2,
                "max_tokens": 16,
                "sequences": 2,
                "n_boot": 20,
            },
        ),
    }
    (together, t_later), (alone, a_later) = (
        analysis.run_grids([cfg], progress=False, workers=w, beside=later) for w in (2, 1)
    )
    assert list(t_later) == list(a_later) == ["lengthlaw", "moe", "anatomy"]
    np.testing.assert_equal(together[0].metrics, alone[0].metrics)
    assert {k: _no_time(v) for k, v in t_later["lengthlaw"].items()} == {
        k: _no_time(v) for k, v in a_later["lengthlaw"].items()
    }
    assert t_later["moe"].table() == a_later["moe"].table()
    assert t_later["anatomy"].table().equals(a_later["anatomy"].table())


def test_notebook_02_s_grid_started_in_the_background_gives_the_numbers_of_run_grids(small_grid):
    """``pool.start(analysis.grid_jobs(...))`` awaited by ``grid_results`` (notebook 02 since its pool starts before
    section 1) gives ``run_grids``' cells."""
    from nbkit.offline import analysis

    cfg = small_grid
    (started,) = analysis.grid_results([cfg], pool.start(analysis.grid_jobs([cfg]), progress=False))
    (alone,) = analysis.run_grids([cfg], progress=False, workers=1)
    assert list(started.rollouts) == list(alone.rollouts) == ["fp32", "bf16"]
    np.testing.assert_equal(started.metrics, alone.metrics)


@pytest.mark.slow
@pytest.mark.skipif(len(pool.free_cores()) < 2, reason="needs two free cores")
def test_a_study_s_runs_trained_beside_a_grid_are_read_back_by_live_with_the_rows_of_live_alone(
    tmp_path, tiny_random_model, arith_jsonl
):
    """Notebook 03: the live PPO slice (``GridStudy.jobs``) in the GRPO grid's pool, then ``live`` reads it back."""
    from nbkit.rl import RLConfig
    from nbkit.studies.ppo import PPOStudy

    def opts(folder):
        return {**PPOStudy.toy, "output_dir": str(folder)}

    base = RLConfig(
        model=tiny_random_model,
        dataset=arith_jsonl,
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=8,
        rollout_engine="hf",
        checkpoint_every=0,
        output_dir=str(tmp_path / "grpo"),
    )
    jobs = PPOStudy().jobs(**opts(tmp_path / "ppo"))
    assert sorted(jobs) == sorted(PPOStudy().grid(**opts(tmp_path / "ppo")))
    values = grid.train_grid(base, ["grpo"], ["fp32"], progress=False, workers=2, beside=jobs)
    assert sorted(values) == sorted([*jobs, "grpo-fp32"])
    logs = {p: p.stat().st_mtime_ns for p in (tmp_path / "ppo").glob("**/metrics.jsonl")}
    assert logs and PPOStudy().jobs(**opts(tmp_path / "ppo")) == {}  # nothing left to train
    beside, meta, _ = PPOStudy().live(progress=False, **opts(tmp_path / "ppo"))
    assert {p: p.stat().st_mtime_ns for p in logs} == logs  # read back, not trained again
    alone, alone_meta, _ = PPOStudy().live(progress=False, workers=1, **opts(tmp_path / "alone"))
    assert sorted(beside) == sorted(alone) and meta == alone_meta
    for label in beside:
        assert _science(beside[label]) == _science(alone[label]), label
