"""The stored MoE study's page: its table under the headers of ``COLUMNS`` and its sentences over named fields."""

from __future__ import annotations

import pytest

from nbkit import results
from nbkit.studies import moe

STORED = (results.study_dir(moe.STUDY) / results.CARD).is_file()


@pytest.mark.skipif(not STORED, reason="the MoE study is not stored")
def test_each_variant_sentence_gives_bf16s_mismatch_against_fp16s_and_both_accuracies(monkeypatch):
    study = moe.MoEStudy()
    runs, meta = study.load(), study.stored_meta()
    rows = study.table(runs, meta)
    assert list(rows[0]) == list(moe.COLUMNS.values())
    text = study.findings(runs, meta, rows)
    by = {(r["algorithm"], r["dtype"]): r for r in rows}
    bf16, fp16 = by[("moe.grpo", "bf16")], by[("moe.grpo", "fp16")]
    ratio = bf16["mean |Δ log p| last 5 (mean)"] / fp16["mean |Δ log p| last 5 (mean)"]
    assert text[0].startswith(f"moe: BF16's mismatch over the last 5 steps is {ratio:.1f}× FP16's")
    assert f"final accuracy {bf16['final accuracy (mean)']} (BF16)" in text[0] and text[1].startswith("moe_replay:")
    monkeypatch.setattr(moe, "COLUMNS", {k: f"<{v}>" for k, v in moe.COLUMNS.items()})
    renamed = [{f"<{k}>": v for k, v in r.items()} for r in rows]
    assert study.findings(runs, meta, renamed) == text  # the sentences read named fields, not the headers
