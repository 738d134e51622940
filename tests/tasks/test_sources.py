"""Reading a large problem file shows its progress (issue 55 item 16: a 100k-row JSONL loaded for ~7 s with nothing
on screen); a small one stays silent."""

import json

from nbkit import tasks
from nbkit.models.toymodels import arith
from nbkit.tasks import sources


def _jsonl(path, n):
    rows = arith.make_problems(50, seed=3)
    path.write_text("".join(json.dumps(rows[i % 50]) + "\n" for i in range(n)))
    return str(path)


def test_a_long_load_shows_each_stage_with_its_row_count(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(sources, "PROGRESS_DELAY", 0.0)  # as if each stage outlasted the delay
    problems = sources.load_problems(tasks.TaskConfig(source=_jsonl(tmp_path / "big.jsonl", 3000), grader="arith"))
    assert len(problems) == 3000
    shown = capfd.readouterr().err
    for stage in ("reading big.jsonl", "checking big.jsonl", "reading answers of big.jsonl"):
        assert f"{stage}:   0%|          | 0/3000" in shown, shown  # the bar names the stage and the row count


def test_a_quick_load_shows_nothing(tmp_path, capfd):
    sources.load_problems(tasks.TaskConfig(source=_jsonl(tmp_path / "small.jsonl", 64), grader="arith"))
    assert "small.jsonl" not in capfd.readouterr().err
