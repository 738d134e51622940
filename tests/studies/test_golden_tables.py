"""Every stored study's main table, recomputed from its runs, equals its golden copy frozen at 69690b4.

The golden files (``tests/studies/golden/<study>.json``) are what ``Study.table`` gave from the stored runs at
69690b4, before the thin-library refactor (issue 71): whatever the code that reads a study becomes, its main table
stays value for value. Floats compare to 1e-9 relative (the same numbers up to the last bits a CPU's SIMD reduction
may order differently). A golden file changes only with an amendment on its study's record, in a commit that says so:
rewrite them with ``python tests/studies/test_golden_tables.py``.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from nbkit import results
from nbkit.studies.catalog import STUDIES

GOLDEN = Path(__file__).parent / "golden"
ADDED_COLUMNS = {"dose_response_tiny_arith": ["gap CI kept in [−1, 1]"]}
"""Columns a study's table gained after 69690b4 by an amendment, shown beside the frozen ones (issue 74: the gap CI
clipped to the bounds of what it estimates); every other column is the golden one, value for value."""
STORED = sorted(name for name in STUDIES if (results.RESULTS / name).is_dir())


def table(name: str, root: Path = results.RESULTS) -> list[dict]:
    """The study's main table from its stored runs, as JSON would hold it (tuples as lists)."""
    study = STUDIES[name]
    return json.loads(json.dumps(study.table(study.load(root), study.stored_meta(root))))


def differences(got, want, where: str = "") -> list[str]:
    """Each place where ``got`` and ``want`` differ ([] when equal; floats to 1e-9 relative, NaN equals NaN)."""
    if isinstance(want, float) or isinstance(got, float):
        if isinstance(got, (int, float)) and isinstance(want, (int, float)):
            same = (math.isnan(got) and math.isnan(want)) or math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
            return [] if same else [f"{where}: {got!r} != {want!r}"]
        return [f"{where}: {got!r} != {want!r}"]
    if isinstance(want, dict) and isinstance(got, dict):
        if list(got) != list(want):
            return [f"{where}: columns {list(got)} != {list(want)}"]
        return [d for k in want for d in differences(got[k], want[k], f"{where}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} rows/items != {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True)) for d in differences(g, w, f"{where}[{i}]")]
    return [] if got == want else [f"{where}: {got!r} != {want!r}"]


def test_every_stored_study_has_a_golden_table_and_every_golden_table_a_stored_study():
    assert STORED and sorted(p.stem for p in GOLDEN.glob("*.json")) == STORED


@pytest.mark.parametrize("name", STORED)
def test_the_main_table_recomputed_from_the_stored_runs_equals_its_golden_copy(name):
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    added = ADDED_COLUMNS.get(name, [])
    got = table(name)
    assert all(set(added) <= set(row) for row in got), f"{name}: an amended column is missing"
    assert differences([{k: v for k, v in row.items() if k not in added} for row in got], want, name) == []


def test_a_hand_edited_stored_run_fails_the_comparison(tmp_path):
    name = "ppo_tiny_arith"
    shutil.copytree(results.RESULTS / name, tmp_path / name)
    runs = results.load(name, tmp_path)
    label, rows = next(iter(runs.items()))
    assert table(name, tmp_path) == json.loads((GOLDEN / f"{name}.json").read_text())
    edited = [{k: v * 1.5 if isinstance(v, float) else v for k, v in r.items()} for r in rows]
    with gzip.open(tmp_path / name / "runs" / f"{label}.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in edited)
    assert differences(table(name, tmp_path), json.loads((GOLDEN / f"{name}.json").read_text()), name)


def test_the_comparison_reads_floats_to_1e9_and_names_each_difference():
    assert differences([{"a": 0.1 + 0.2, "b": [1, None]}], [{"a": 0.3, "b": [1, None]}]) == []
    assert differences([{"a": 0.3001}], [{"a": 0.3}], "t") == ["t[0].a: 0.3001 != 0.3"]
    assert differences([{"a": 1}], [{"b": 1}], "t") == ["t[0]: columns ['a'] != ['b']"]
    assert differences([], [{"a": 1}], "t") == ["t: 0 rows/items != 1"]


if __name__ == "__main__":  # rewrite the golden files (only with an amendment that says why)
    GOLDEN.mkdir(exist_ok=True)
    for name in sys.argv[1:] or STORED:
        (GOLDEN / f"{name}.json").write_text(json.dumps(table(name), indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {GOLDEN / name}.json")
