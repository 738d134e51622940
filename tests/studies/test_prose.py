"""A study page's writing (``nbkit.studies.prose``): arm names, seed counts, and rows moved between named fields and
display headers."""

from __future__ import annotations

import pytest

from nbkit.studies import prose


def test_seeds_says_one_seed_and_many_seeds():
    assert [prose.seeds(n) for n in (0, 1, 2)] == ["0 seeds", "1 seed", "2 seeds"]


@pytest.mark.parametrize(
    "fmt, correction, train, name",
    [
        ("e8m2", "none", "fp32", "e8m2"),
        ("nvfp4", None, "fp32", "nvfp4"),
        ("nvfp4", "mu_old", "fp32", "nvfp4 + mu_old"),
        ("bf16", "none", "bf16", "bf16/bf16"),
        ("bf16", "icepop", "bf16", "bf16/bf16 + icepop"),
    ],
)
def test_an_arm_is_named_by_format_correction_and_a_trainer_other_than_fp32(fmt, correction, train, name):
    assert prose.arm(fmt, correction, train) == name


def test_rows_go_to_display_headers_and_back_keeping_their_order():
    columns = {"gap": "gap vs fp32", "ci_low": "gap CI low"}
    rows = [{"format": "bf16", "gap": -0.01, "ci_low": -0.03}]
    shown = prose.display(rows, columns)
    assert shown == [{"format": "bf16", "gap vs fp32": -0.01, "gap CI low": -0.03}]
    assert list(shown[0]) == ["format", "gap vs fp32", "gap CI low"]
    assert prose.named(shown, columns) == rows
