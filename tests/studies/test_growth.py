"""Why the mismatch grows, per arm: the shift-share table over an arm's seeds and the paragraph it writes."""

from __future__ import annotations

from nbkit import tokenbins
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
    arms = {"grows": [_rows(lambda s: 20 + s) for _ in range(3)]}
    rows = growth.table(arms, range(1, 11), range(41, 51), binnings=("entropy",))
    (r,) = rows
    assert r["runs"] == 3 and r["change"] > 0
    assert r["length share"] >= 0.95 and abs(r["mix"]) < 1e-9 and abs(r["per_bin"]) < 1e-9
    assert abs(r["length"] + r["mix"] + r["per_bin"] - r["change"]) < 1e-9
    text = growth.paragraph(rows, broke={"grows"})
    assert "Runs that broke: grows (3 runs): response length" in text and "Runs that did not" not in text
    assert "where it grew (1 arm(s): grows), the largest part was response length in 1" in text


def test_an_arm_without_bins_is_left_out_and_the_paragraph_says_nothing_can_be_split():
    bare = [{"step": s} for s in range(1, 51)]
    assert growth.table({"bare": [bare]}, range(1, 11), range(41, 51)) == []
    assert "cannot be split" in growth.paragraph([], broke=set())
