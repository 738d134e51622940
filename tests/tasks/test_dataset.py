"""Specification of nbkit.tasks.dataset: pass rates through any engine, resume after a kill, window, card."""

import json

import datasets
import pyarrow.parquet as pq
import pytest

from nbkit.engines import Rollout
from nbkit.tasks import Task, TaskConfig, make_task
from nbkit.tasks import dataset as ds

N = 10


class FakeEngine:
    """Deterministic engine: problem i's prompt gets ``correct[prompt]`` right answers out of n, the rest wrong
    (or with no answer at all when ``no_answer`` is set). Counts calls and prompts; can die after k calls."""

    def __init__(self, correct: dict[str, int], die_after: int | None = None, no_answer: bool = False):
        self.correct, self.die_after, self.no_answer = correct, die_after, no_answer
        self.calls, self.prompts = 0, []

    def generate(self, prompts, sampling):
        if self.die_after is not None and self.calls >= self.die_after:
            raise KeyboardInterrupt("killed")  # what a user's Ctrl-C or a dead kernel looks like mid-build
        self.calls += 1
        self.prompts += prompts
        out = []
        for i, prompt in enumerate(prompts):
            a, b = prompt.rstrip("=").split("+")
            right = str(int(a) + int(b))
            for j in range(sampling.n):
                text = (
                    "|" + right if j < self.correct[prompt] else ("no idea" if self.no_answer else "|0" + right + "1")
                )
                out.append(
                    Rollout(
                        prompt_index=i,
                        prompt=prompt,
                        prompt_ids=[],
                        token_ids=[5] * len(text),
                        text=text,
                        logprobs=[-0.1] * len(text),
                        finish_reason="stop",
                    )
                )
        return out


def arith_task(n=30, seed=0) -> Task:
    return make_task(TaskConfig(source="arith", pool_size=n, seed=seed))


def planned(task, n=N):
    """Problem i gets i % (n+1) correct answers: pass rates 0, 0.1, ..., 1.0, 0, ..."""
    return {p["problem"]: i % (n + 1) for i, p in enumerate(task.problems)}


def cfg(tmp_path, **kw) -> ds.BuildConfig:
    base = dict(
        name="t",
        out_dir=str(tmp_path / "out"),
        cache_dir=str(tmp_path / "cache"),
        n_samples=N,
        batch_prompts=4,
        model="fake",
        engine="fake",
    )
    return ds.BuildConfig(**{**base, **kw})


def test_pass_rates_through_an_engine_are_exact_and_batched(tmp_path):
    task = arith_task(30)
    engine = FakeEngine(planned(task))
    records, sampled = ds.estimate_pass_rates(task, task.problems, cfg(tmp_path), engine, progress=False)
    assert sampled == 30 and engine.calls == 8  # ceil(30 / 4) calls
    assert [r["pass_rate"] for r in records] == [(i % (N + 1)) / N for i in range(30)]
    assert [r["problem"] for r in records] == [p["problem"] for p in task.problems]
    assert all(r["n_samples"] == N for r in records)


def test_resume_after_a_kill_recomputes_only_unfinished_problems(tmp_path):
    task = arith_task(30)
    c = cfg(tmp_path)
    dying = FakeEngine(planned(task), die_after=3)  # 3 batches of 4 problems finish, then death
    with pytest.raises(KeyboardInterrupt):
        ds.build(task, c, dying, progress=False)
    assert len(ds.read_cache(ds.cache_file(task, c))) == 12

    fresh = FakeEngine(planned(task))
    result = ds.build(task, c, fresh, progress=False)
    done_before = set(dying.prompts)
    assert len(fresh.prompts) == 18 and not done_before & set(fresh.prompts)
    assert result.card["counts"]["sampled_this_run"] == 18 and result.card["counts"]["from_cache"] == 12
    assert [r["pass_rate"] for r in result.records] == [(i % (N + 1)) / N for i in range(30)]

    again = FakeEngine(planned(task))
    ds.build(task, c, again, progress=False)
    assert again.calls == 0  # everything cached: no engine work at all


def test_a_line_cut_by_a_kill_is_recomputed(tmp_path):
    task = arith_task(8)
    c = cfg(tmp_path)
    ds.estimate_pass_rates(task, task.problems, c, FakeEngine(planned(task)), progress=False)
    path = ds.cache_file(task, c)
    text = path.read_text()
    path.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 1] + text.splitlines()[-1][:20])  # half a line
    engine = FakeEngine(planned(task))
    records, sampled = ds.estimate_pass_rates(task, task.problems, c, engine, progress=False)
    assert sampled == 1 and engine.prompts == [task.problems[-1]["problem"]]
    assert len(ds.read_cache(path)) == 8 and records[-1]["pass_rate"] == 7 / N


def test_resume_false_and_other_settings_recompute(tmp_path):
    task = arith_task(8)
    ds.estimate_pass_rates(task, task.problems, cfg(tmp_path), FakeEngine(planned(task)), progress=False)
    for changed in (dict(resume=False), dict(dtype="bf16"), dict(seed=1), dict(max_tokens=7)):
        engine = FakeEngine(planned(task))
        ds.estimate_pass_rates(task, task.problems, cfg(tmp_path, **changed), engine, progress=False)
        assert len(engine.prompts) == 8, changed


def test_window_is_inclusive_and_exact(tmp_path):
    task = make_task(TaskConfig(source="arith", pool_size=40))
    correct = {p["problem"]: i for i, p in enumerate(task.problems)}  # pass rates 0/40 ... 39/40
    result = ds.build(task, cfg(tmp_path, n_samples=40, batch_prompts=16), FakeEngine(correct), progress=False)
    assert sorted(r["n_correct"] for r in result.kept) == list(range(8, 33))  # 8/40 = 0.2 ... 32/40 = 0.8
    assert result.card["counts"]["below"] == 8 and result.card["counts"]["above"] == 7


def test_empty_window_error_shows_the_histogram_summary(tmp_path):
    task = arith_task(12)
    extremes = {p["problem"]: (0 if i % 2 else N) for i, p in enumerate(task.problems)}
    with pytest.raises(ValueError) as err:
        ds.build(task, cfg(tmp_path), FakeEngine(extremes), progress=False)
    summary = ds.histogram_summary(ds.histogram([0.0, 1.0] * 6))
    assert "no problem has a pass rate in [0.2, 0.8]" in str(err.value) and summary in str(err.value)
    assert "never solved 6, always solved 6" in summary


def test_config_validation():
    for bad in (
        dict(lo=0.9, hi=0.1),
        dict(lo=-0.1),
        dict(hi=1.5),
        dict(n_samples=0),
        dict(dtype="fp8"),
        dict(name="a/b"),
        dict(max_tokens=0),
    ):
        with pytest.raises(ValueError):
            ds.BuildConfig(**bad)
    ds.BuildConfig(lo=0.5, hi=0.5)


def test_empty_source_and_unparsable_answers(tmp_path):
    with pytest.raises(ValueError, match="no problems"):
        ds.build(Task(TaskConfig(source="arith", pool_size=1), []), cfg(tmp_path), FakeEngine({}), progress=False)
    task = arith_task(10)
    task.problems[0]["answer"] = None
    task.problems[1]["answer"] = "twelve"
    task.problems[2] = dict(task.problems[3])  # a duplicate
    result = ds.build(task, cfg(tmp_path, lo=0.0, hi=1.0), FakeEngine(planned(task)), progress=False)
    counts = result.card["counts"]
    assert (counts["unparsable_answers"], counts["duplicates"], counts["evaluated"]) == (2, 1, 7)
    bad = Task(task.cfg, [{"problem": "1+1=", "answer": "x"}])
    with pytest.raises(ValueError, match="can be parsed"):
        ds.build(bad, cfg(tmp_path), FakeEngine({}), progress=False)


def test_responses_without_answer_are_counted(tmp_path):
    task = arith_task(6)
    result = ds.build(task, cfg(tmp_path, lo=0, hi=1), FakeEngine(planned(task), no_answer=True), progress=False)
    expected = sum(N - (i % (N + 1)) for i in range(6))
    assert result.card["responses_without_answer"] == expected and result.card["responses_total"] == 6 * N


def test_engine_returning_the_wrong_number_of_rollouts_is_an_error(tmp_path):
    task = arith_task(4)
    engine = FakeEngine(planned(task))
    engine.generate = lambda prompts, sampling: FakeEngine.generate(engine, prompts[:-1], sampling)
    with pytest.raises(RuntimeError, match="rollouts per prompt"):
        ds.estimate_pass_rates(task, task.problems, cfg(tmp_path), engine, progress=False)


def test_card_numbers_match_the_written_data(tmp_path):
    task = arith_task(33)
    result = ds.build(task, cfg(tmp_path), FakeEngine(planned(task)), progress=False)
    card = ds.load_card(result.path)
    assert card == json.loads(json.dumps(result.card))
    train = datasets.load_from_disk(str(result.path))["train"]
    parquet = pq.read_table(result.path / "train.parquet").to_pylist()
    pool = pq.read_table(result.path / "pool.parquet").to_pylist()
    assert len(train) == len(parquet) == card["counts"]["kept"] == sum(r["kept"] for r in pool)
    assert len(pool) == card["counts"]["evaluated"] == card["histogram_pool"]["n"] == 33
    assert card["histogram_kept"] == ds.histogram(train["pass_rate"])
    assert card["histogram_pool"] == ds.histogram([r["pass_rate"] for r in pool])
    assert card["counts"]["below"] + card["counts"]["kept"] + card["counts"]["above"] == card["counts"]["evaluated"]
    assert all(0.2 <= r <= 0.8 for r in train["pass_rate"])
    assert train.column_names[:6] == list(ds.DATA_COLUMNS) and "solution" in train.column_names
    assert parquet == train.to_list()
    readme = (result.path / "README.md").read_text()
    assert f"**kept {card['counts']['kept']}**" in readme and card["model"] in readme
    assert (card["model"], card["n_samples"], card["window"], card["dtype"]) == ("fake", N, [0.2, 0.8], "fp32")


def test_rebuild_replaces_the_folder(tmp_path):
    task = arith_task(12)
    ds.build(task, cfg(tmp_path), FakeEngine(planned(task)), progress=False)
    (tmp_path / "out" / "stale.txt").write_text("old")  # a file an older build wrote (its marker lists it) ...
    from nbkit.runtime import outputs

    outputs.record_files(tmp_path / "out", ["stale.txt"])  # ... an unlisted one is refused (test_replace_safely)
    result = ds.build(task, cfg(tmp_path, lo=0, hi=1), FakeEngine(planned(task)), progress=False)
    assert not (result.path / "stale.txt").exists() and len(datasets.load_from_disk(str(result.path))["train"]) == 12


def test_a_template_whose_text_changed_under_the_same_name_is_sampled_anew(tmp_path, monkeypatch):
    from nbkit.tasks import templates

    task = arith_task(8)
    c = cfg(tmp_path)
    ds.estimate_pass_rates(task, task.problems, c, FakeEngine(planned(task)), progress=False)
    edited = templates.Template("raw", " ", "", "raw with a leading space: same name, other prompts")
    monkeypatch.setitem(templates.TEMPLATES, "raw", edited)
    assert task.prompt(task.problems[0]) == " " + task.problems[0]["problem"]
    engine = FakeEngine({task.prompt(p): n for p, n in zip(task.problems, planned(task).values())})
    records, sampled = ds.estimate_pass_rates(task, task.problems, c, engine, progress=False)
    assert sampled == 8 and engine.prompts == [task.prompt(p) for p in task.problems]
    assert [r["pass_rate"] for r in records] == [(i % (N + 1)) / N for i in range(8)]
