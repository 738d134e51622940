"""Why the mismatch grows, per arm: the shift-share table over an arm's seeds and the paragraph it writes."""

from __future__ import annotations

from nbkit.mismatch import tokenbins
from nbkit.studies import growth


def _rows(length_of_step, per_token=0.1, low_entropy_share=0.5):
    """Metric rows with bins: two entropy bins used (0 and 5), 8 sequences per step, mismatch 0.01 in bin 0."""
    out = []
    for step in range(1, 51):
        n, L = 8, length_of_step(step)
        t0 = n * L * low_entropy_share
        t5 = n * L - t0
        row = {"step": step, tokenbins.SEQUENCES: n, tokenbins.RESPONSE_LENGTH: L}
        for i in range(6):
            row[tokenbins.tokens_key("entropy", i)] = {0: t0, 5: t5}.get(i, 0)
        row[tokenbins.mismatch_key("entropy", 0)] = 0.01
        row[tokenbins.mismatch_key("entropy", 5)] = per_token
        out.append(row)
    return out


def test_a_run_whose_responses_only_grow_puts_the_change_in_length_and_the_paragraph_says_so():
    arms = {"grows": [_rows(lambda s: 20 + s) for _ in range(5)]}
    rows = growth.table(arms, range(1, 11), range(41, 51), binnings=("entropy",))
    (r,) = rows
    assert r["runs"] == 5 and r["change"] > 0
    assert r["length share"] >= 0.95 and abs(r["mix"]) < 1e-9 and abs(r["per_bin"]) < 1e-9
    assert abs(r["length"] + r["mix"] + r["per_bin"] - r["change"]) < 1e-9
    text = growth.paragraph(rows, broke={"grows"}, binnings=("entropy",))
    assert text.startswith("The sequence-level mismatch fell from the early to the late steps in 0 of 1 arms")
    assert "grows (broke; 5 runs): by entropy, response length" in text


LAST = tokenbins.n_bins("prob") - 1


def _both(rows_of_run):
    """``_rows`` with the same bins also under the probability binning, or with the mix moved there instead."""
    out = []
    for r in rows_of_run:
        r = dict(r)
        for i in range(LAST + 1):
            e = {0: 0, LAST: 5}.get(i)  # entropy bins 0 and 5 are probability bins 0 and the last
            r[tokenbins.tokens_key("prob", i)] = r.get(tokenbins.tokens_key("entropy", e), 0) if e is not None else 0
            r[tokenbins.mismatch_key("prob", i)] = (
                r.get(tokenbins.mismatch_key("entropy", e), 0.0) if e is not None else 0.0
            )
        out.append(r)
    return out


def test_the_growth_rule_claims_only_where_both_binnings_agree_on_five_runs_and_says_first_where_it_fell():
    """Issue 50's rule: a claim only for an arm of >= 5 runs whose binnings agree on the largest part; an arm of 3
    runs, or one whose binnings disagree, is named with why it gets none; the first sentence says where it fell."""
    falls = [_both(_rows(lambda s: 60 - s)) for _ in range(5)]
    few = [_both(_rows(lambda s: 60 - s)) for _ in range(3)]
    split = []  # the entropy bins see a change of length, the probability bins a change of mix
    for _ in range(5):
        run = _both(_rows(lambda s: 60 - s))
        for r in run:
            if r["step"] > 40:
                t = r[tokenbins.tokens_key("prob", 0)] + r[tokenbins.tokens_key("prob", LAST)]
                r[tokenbins.tokens_key("prob", 0)], r[tokenbins.tokens_key("prob", LAST)] = 0.95 * t, 0.05 * t
        split.append(run)
    rows = growth.table({"falls": falls, "few": few, "split": split}, range(1, 11), range(41, 51))
    text = growth.paragraph(rows, broke=set())
    assert text.startswith("The sequence-level mismatch fell from the early to the late steps in 3 of 3 arms")
    assert "falls (did not break; 5 runs): by entropy, response length" in text
    assert "few (3 runs, fewer than 5)" in text
    assert "split (the binnings disagree: entropy response length, prob token mix across bins)" in text


def test_an_arm_without_bins_is_left_out_and_the_paragraph_says_nothing_can_be_split():
    bare = [{"step": s} for s in range(1, 51)]
    assert growth.table({"bare": [bare]}, range(1, 11), range(41, 51)) == []
    assert "cannot be split" in growth.paragraph([], broke=set())


def test_the_paragraph_reads_named_fields_so_a_header_can_change_without_touching_it(monkeypatch):
    arms = {"falls": [_both(_rows(lambda s: 60 - s)) for _ in range(5)], "few": [_both(_rows(lambda s: 60 - s))]}
    rows = growth.table(arms, range(1, 11), range(41, 51))
    text = growth.paragraph(rows, broke={"falls"})
    assert "falls (broke; 5 runs): by entropy, response length, " in text and "few (1 runs, fewer than 5)" in text
    monkeypatch.setattr(growth, "COLUMNS", {k: f"<{v}>" for k, v in growth.COLUMNS.items()})
    renamed = growth.table(arms, range(1, 11), range(41, 51))
    assert "<change CI>" in renamed[0] and "change CI" not in renamed[0]
    assert growth.paragraph(renamed, broke={"falls"}) == text
