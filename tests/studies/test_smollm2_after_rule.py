"""The real-LM prediction study's rule: its committed predictions cover every arm from the measured doses, each
arm reads one side of one interval and can fail, the headline is an intersection-union reading, and the seed
extension reads the reference's spread alone."""

import pytest

from nbkit.studies import smollm2_after as S
from nbkit.studies import smollm2_after_rule as R


def test_the_committed_predictions_cover_every_arm_and_candidate_from_the_measured_doses():
    assert set(R.PREDICTIONS) == set(R.CRITERIA) == {S.arm_name(*a) for a in S.ARMS}
    doses = S.doses()
    for arm, by_cand in R.PREDICTIONS.items():
        assert set(by_cand) == set(S.CANDIDATE_KEYS)
        for cand, p in by_cand.items():
            assert p["lo"] <= p["gap"] <= p["hi"]
            assert p["value"] == pytest.approx(doses[arm]["candidates"][cand], rel=1e-3)


@pytest.mark.parametrize(
    ("arm", "lo", "hi", "expected"),
    [
        ("fp32/bf16", -0.09, -0.03, "holds"),
        ("fp32/bf16", -0.01, 0.02, "fails"),  # BF16 did no harm of 0.02: the prediction can fail
        ("fp32/bf16", -0.05, 0.0, "undecided"),
        ("fp16/fp16", -0.04, 0.01, "holds"),
        ("fp16/fp16", -0.09, -0.06, "fails"),
        ("fp16/fp16", -0.07, 0.0, "undecided"),
    ],
)
def test_each_arm_reads_one_side_of_its_one_interval(arm, lo, hi, expected):
    assert R.verdict(arm, {"gap": (lo + hi) / 2, "lo": lo, "hi": hi, "seeds": 5}) == expected
    assert R.verdict(arm, None) == "not run"


def test_the_headline_holds_only_when_every_arm_holds_and_fails_when_any_fails():
    every = dict.fromkeys(R.CRITERIA, "holds")
    assert R.headline(every) == "holds"
    assert R.headline({**every, "fp16/fp16": "undecided"}) == "undecided"
    assert R.headline({**every, "fp32/bf16": "fails", "fp16/fp16": "undecided"}) == "fails"
    assert R.headline({}) == "undecided"


def test_the_blinded_extension_adds_seeds_only_when_the_reference_spreads_and_stops_at_the_cap():
    assert R.seeds_planned([0.82, 0.82, 0.821, 0.819, 0.82])[0] == len(R.SEEDS)  # a quiet reference: five
    n, sd = R.seeds_planned([0.80, 0.83, 0.78, 0.84, 0.81])
    assert len(R.SEEDS) < n <= R.SEEDS_MAX and min(R.power(sd, n).values()) >= R.POWER_TARGET
    assert min(R.power(sd, n - 1).values()) < R.POWER_TARGET  # the smallest such n
    assert R.seeds_planned([0.6, 0.9, 0.7, 0.95, 0.65])[0] == R.SEEDS_MAX
    with pytest.raises(ValueError, match="reference's 5 seeds"):
        R.seeds_planned([0.8, 0.8])
