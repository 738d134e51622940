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


def test_valid_jsonl_with_a_byte_order_mark_or_a_line_separator_in_a_string_is_read(tmp_path):
    """Issue 73, 7: a file saved with a BOM, and a problem holding U+2028 (``splitlines`` split the line there)."""
    rows = [{"problem": "1+1=\u2028", "answer": "2"}, {"problem": "2+2=\u2029\x85", "answer": "4"}]
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows).encode())
    problems = sources.load_problems(tasks.TaskConfig(source=str(path), grader="arith"))
    assert [(p["problem"], p["answer"]) for p in problems] == [(r["problem"], r["answer"]) for r in rows]
