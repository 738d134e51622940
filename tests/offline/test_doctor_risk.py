"""``nbkit doctor`` reads a risk (issue 37, item 5): each dtype's dose in the stored unit at the user's response
length — measured where the sampled responses reach it, extrapolated by the length model where not, and saying
which — placed against every stored task's threshold and CI, and drawn on the gap-vs-dose figure of doctor.html.

Every store here is written by the test from ``nbkit.stats.threshold.estimate`` on synthetic gaps: a fixture, never a
result (its ``measured_on`` says so)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nbkit.cli import doctor as doctor_cli
from nbkit.cli import main as cli_main
from nbkit.mismatch import mismatch
from nbkit.offline import dose, risk
from nbkit.offline.doctor import DoctorConfig, DoctorResult, dtype_diagnosis
from nbkit.plots import doctor as doctor_plots
from nbkit.records import schema
from nbkit.stats import threshold

UNIT = schema.METRIC_TOKEN_ABS_LOGP_DIFF
DOSES = np.geomspace(0.03, 0.5, 6)


def synthetic_store(path, unit=UNIT, response_length=31.5):
    """A thresholds.json as the study will write it, from synthetic paired gaps with a crossing near dose 0.15."""
    rng = np.random.default_rng(0)
    truth = np.minimum(0.0, -0.12 * np.log(DOSES / 0.1))  # 0 up to 0.1, −0.05 near 0.15, ≈ −0.2 at 0.5
    gaps = truth + rng.normal(0, 0.02, size=(6, DOSES.size))
    est = threshold.estimate(gaps, DOSES, n_boot=300)
    sd = gaps.std(axis=0, ddof=1) / math.sqrt(gaps.shape[0])
    means = gaps.mean(axis=0)
    record = {
        **est.to_json(),
        "mean_gaps": means.tolist(),
        "gap_ci": [[m - 2.57 * s, m + 2.57 * s] for m, s in zip(means, sd)],
        "points": {f"dial-{i}": float(d) for i, d in enumerate(DOSES)},
        "placed": {"bf16": 5e-4, "fp16": 6e-5, "nvfp4": 0.9},
        "response_length": response_length,
        "study": "synthetic fixture of tests/offline/test_doctor_risk.py",
    }
    path.write_text(
        json.dumps(
            {
                "unit": unit,
                "unit_note": "synthetic test store",
                "measured_on": "synthetic gaps written by a test (not a result)",
                "tasks": {"tiny-arith": record},
            }
        )
    )
    return est


def pairs_of(lengths, delta=-0.002, sd=0.03, seed=0):
    """(log π, log μ) per sequence with i.i.d. per-token log r ~ normal(delta, sd²)."""
    rng = np.random.default_rng(seed)
    mu = [np.log(rng.uniform(0.2, 0.9, n)) for n in lengths]
    pi = [np.minimum(m + rng.normal(delta, sd, m.size), 0.0) for m in mu]
    return pi, mu


# --- the dose at the user's length --------------------------------------------------------------------------------


def test_a_sequence_unit_is_measured_on_prefixes_where_enough_responses_reach_the_length():
    pi, mu = pairs_of([50] * 10 + [20] * 5)
    diag = dtype_diagnosis(pi, mu)
    r = dose.at_length("seq_kl", diag, 40, (pi, mu))
    prefixes = np.array([(p[:40] - m[:40]).sum() for p, m in zip(pi, mu) if p.size >= 40])
    assert r.measured and r.how.startswith("measured at 40 tokens") and "10 responses" in r.how
    assert r.value == pytest.approx(-prefixes.mean())
    ess = dose.at_length("ess_seq_deficit", diag, 40, (pi, mu))
    assert ess.value == pytest.approx(1 / mismatch.effective_sample_size(prefixes) - 1)


def test_beyond_the_measured_lengths_a_sequence_unit_is_extrapolated_by_the_length_model_and_says_from_where():
    pi, mu = pairs_of([50] * 10 + [20] * 5)
    diag = dtype_diagnosis(pi, mu)
    d, v = diag["token_log_ratio/mean"], diag["token_log_ratio/var"]
    r = dose.at_length("seq_kl", diag, 400, (pi, mu))
    assert not r.measured and r.how == "extrapolated from 50 to 400 tokens by the length model"
    assert r.value == pytest.approx(-d * 400)
    assert dose.at_length("ess_seq_deficit", diag, 400, (pi, mu)).value == pytest.approx(math.expm1(v * 400))
    # fewer than MIN_REACH responses reach 60 tokens: no measurement there, though the longest one is 70 tokens long
    pi, mu = pairs_of([70] * (dose.MIN_REACH - 1) + [30] * 10)
    r = dose.at_length("seq_log_ratio/abs_mean", dtype_diagnosis(pi, mu), 60, (pi, mu))
    assert not r.measured and r.how == "extrapolated from 30 to 60 tokens by the length model"


def test_a_per_token_unit_does_not_scale_with_length_and_says_the_responses_mean_length():
    pi, mu = pairs_of([50] * 10 + [20] * 10)
    diag = dtype_diagnosis(pi, mu)
    short, long = dose.at_length(UNIT, diag, 10, (pi, mu)), dose.at_length(UNIT, diag, 8192, (pi, mu))
    assert short.value == long.value == diag[UNIT]
    assert long.how == "measured on responses of mean 35 tokens (per token: does not scale with length)"


def test_the_length_model_agrees_with_the_measurement_where_both_exist():
    """On i.i.d. tokens (the model's own assumption) the extrapolation read at a measured length matches the
    measured prefixes: the three sequence units within sampling error (4000 responses)."""
    pi, mu = pairs_of([60] * 4000, delta=-0.003, sd=0.05, seed=1)
    diag = dtype_diagnosis(pi, mu)
    for unit in dose.SEQ_UNITS:
        measured = dose.at_length(unit, diag, 60, (pi, mu))
        model = dose.modelled(unit, diag["token_log_ratio/mean"], diag["token_log_ratio/var"], 60)
        assert measured.measured and model == pytest.approx(measured.value, rel=0.1), unit


# --- the risk lines -----------------------------------------------------------------------------------------------


def test_each_dtype_gets_a_risk_line_naming_the_threshold_its_ci_and_how_its_dose_was_read(tmp_path):
    est = synthetic_store(tmp_path / "thresholds.json")
    stored = risk.load(tmp_path / "thresholds.json")
    pi, mu = pairs_of([50] * 10, sd=0.3)
    diags = {"bf16": dtype_diagnosis(pi, mu), "fp16": dtype_diagnosis(*pairs_of([50] * 10, sd=0.001))}
    bf16, fp16 = risk.lines(diags, stored, target_length=8192, pairs={"bf16": (pi, mu)})
    ci = f"(CI {est.ci[0]:.3g}–{est.ci[1]:.3g})"
    for line, d in ((bf16, "BF16"), (fp16, "FP16")):
        assert line.startswith(f"risk {d} here: dose ") and f"tiny-arith threshold {est.dose:.3g} {ci}" in line
        assert "measured on responses of mean 50 tokens" in line
        assert "its responses: 31.5 tokens, yours 8192" in line  # a per-token dose read at another length
        assert "synthetic gaps written by a test" in line and risk.CAVEAT in line and "synthetic test store" in line
    assert "above it, beyond its CI" in bf16 and "below it, short of its CI" in fp16


def test_a_sequence_unit_store_reads_the_dose_at_the_target_length(tmp_path):
    synthetic_store(tmp_path / "t.json", unit="seq_kl")
    stored = risk.load(tmp_path / "t.json")
    pi, mu = pairs_of([50] * 10)
    diags, pairs = {"bf16": dtype_diagnosis(pi, mu)}, {"bf16": (pi, mu)}
    (within,) = risk.lines(diags, stored, target_length=40, pairs=pairs)
    (beyond,) = risk.lines(diags, stored, target_length=4000, pairs=pairs)
    assert "(seq_kl, measured at 40 tokens" in within
    assert "(seq_kl, extrapolated from 50 to 4000 tokens by the length model)" in beyond
    assert "its responses: 31.5 tokens)" in beyond and "yours" not in beyond  # a sequence dose carries the length


# --- doctor.html --------------------------------------------------------------------------------------------------


def result_with(tmp_path, thresholds: str, target_length: int = 40) -> DoctorResult:
    pairs = {"bf16": pairs_of([30] * 12, sd=0.2, seed=2), "fp16": pairs_of([30] * 12, sd=0.01, seed=3)}
    diags = {d: dtype_diagnosis(*p) for d, p in pairs.items()}
    cfg = DoctorConfig(model="tiny-arith", engine="hf", target_length=target_length, thresholds=thresholds)
    return DoctorResult(cfg, "hf", diags, "prefer FP16", ["r"], 1.0, 1.0, pairs)


def test_the_report_draws_the_users_formats_on_the_stored_gap_vs_dose_figure(tmp_path):
    est = synthetic_store(tmp_path / "thresholds.json")
    result = result_with(tmp_path, str(tmp_path / "thresholds.json"))
    fig = doctor_plots.harm_figure(result)
    names = {t.name for t in fig.data}
    assert {"yours: BF16", "yours: FP16", "tiny-arith: isotonic fit", "harm line -0.05"} <= names
    assert {
        "tiny-arith: mean paired gap (CI over seeds)",
        "tiny-arith: formats placed on the axis (not dosed)",
    } <= names
    assert f"tiny-arith: threshold {est.dose:.3g}" in names
    assert f"tiny-arith: threshold CI {est.ci[0]:.3g}–{est.ci[1]:.3g}" in names
    assert {"BF16", "FP16", "NVFP4"} <= {a.text for a in fig.layout.annotations}  # the placed formats, labelled
    yours = next(t for t in fig.data if t.name == "yours: BF16")
    assert yours.x[0] == pytest.approx(result.diagnoses["bf16"][UNIT])  # at the dose the risk line reads
    page = doctor_cli.write_html(result, tmp_path / "out").read_text()
    assert doctor_plots.HARM_TITLE in page and '"yours: BF16"' in page and "No gap-vs-dose figure" not in page
    assert "risk BF16 here: dose" in page


def test_placed_format_labels_close_on_the_axis_take_rows_of_their_own_and_far_ones_share_the_first():
    labels = [(-3.0, "FP16"), (-2.97, "BF16"), (-2.9, "FP8-E4M3"), (0.0, "NVFP4"), (-1.0, "MXFP4")]
    rows = doctor_plots.label_rows(labels, decades=6)
    assert len(set(rows[:3])) == 3  # three labels within a tenth of a decade: three rows
    assert rows[3] == rows[4] == 0  # alone where they are: the first row
    assert doctor_plots.label_rows(labels[:2], decades=0.01) == [0, 0]  # zoomed in, the same two are far apart


def test_with_no_store_the_report_has_no_figure_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(risk, "STORE", tmp_path / "absent" / "thresholds.json")
    result = result_with(tmp_path, "")
    assert doctor_plots.harm_figure(result) is None
    page = doctor_cli.write_html(result, tmp_path / "out").read_text()
    assert doctor_plots.HARM_TITLE not in page and "yours: BF16" not in page
    assert "No gap-vs-dose figure: no harm threshold is stored" in page
    assert "risk BF16: no stored harm threshold" in page and "risk FP16: no stored harm threshold" in page


def test_a_named_store_that_is_absent_or_malformed_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="thresholds '.*nope.json': no such file"):
        DoctorConfig(thresholds=str(tmp_path / "nope.json"))
    (tmp_path / "other.json").write_text(json.dumps({"tasks": {}}))
    with pytest.raises(ValueError, match="holds no harm thresholds"):
        DoctorConfig(thresholds=str(tmp_path / "other.json"))


@pytest.mark.slow
def test_the_doctor_on_tiny_arith_prints_a_risk_line_per_dtype_and_draws_the_figure(tmp_path, capsys):
    est = synthetic_store(tmp_path / "thresholds.json")
    argv = ["doctor", "--model", "tiny-arith", "--engine", "hf", "--n-prompts", "8", "--max-tokens", "40"]
    code = cli_main.main(
        argv
        + ["--target-length", "40", "--thresholds", str(tmp_path / "thresholds.json"), "--out", str(tmp_path / "o")]
    )
    assert code == 0
    printed = capsys.readouterr().out
    risk_lines = [line for line in printed.splitlines() if line.startswith("risk ")]
    assert [line.split()[1] for line in risk_lines] == ["BF16", "FP16"]
    for line in risk_lines:
        assert f"tiny-arith threshold {est.dose:.3g} (CI {est.ci[0]:.3g}–{est.ci[1]:.3g})" in line
    page = (tmp_path / "o" / "doctor.html").read_text()
    assert doctor_plots.HARM_TITLE in page and "yours: BF16" in page and "yours: FP16" in page
    saved = json.loads((tmp_path / "o" / "doctor.json").read_text())
    assert saved["risk"] == risk_lines
