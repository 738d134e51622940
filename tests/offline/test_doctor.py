"""``nbkit doctor``: the verdict's numbers follow from the log-ratios, the length model is solved right, and a
head-less run on tiny-arith with the HF engine writes the HTML verdict in seconds."""

import json
import math

import numpy as np
import pytest

from nbkit.cli import main as cli_main
from nbkit.offline import doctor
from nbkit.precision import gemm


def test_crossing_length_solves_drift_plus_random_walk():
    assert doctor.crossing_length(0.0, 0.01, 1.0) == pytest.approx(100.0)  # pure random walk: c² / v
    assert doctor.crossing_length(0.01, 0.0, 1.0) == pytest.approx(100.0)  # pure drift: c / |δ|
    length = doctor.crossing_length(0.01, 0.01, 1.0)
    assert 0.01**2 * length**2 + 0.01 * length == pytest.approx(1.0) and length < 100
    assert doctor.crossing_length(0.0, 0.0, 1.0) == math.inf


def test_diagnosis_counts_clipped_tokens_and_masked_sequences():
    mu = [np.log([0.5, 0.5, 0.5]), np.log([0.5, 0.5])]
    pi = [np.log([0.5, 0.7, 0.5]), np.log([0.39, 0.5])]  # r = 1.4 (clipped), 0.78 (clipped), the rest 1
    d = doctor.dtype_diagnosis(pi, mu)
    assert d["clip_fraction"] == pytest.approx(2 / 5)
    assert d["masked_sequences"] == 0.0  # log R = log 1.4 < log 3
    d3 = doctor.dtype_diagnosis([np.log([0.5, 0.5])], [np.log([0.1, 0.5])])  # R = 5 > 3: masked by TRL
    assert d3["masked_sequences"] == 1.0 and d3["n_sequences"] == 1


def test_recommendation_follows_the_target_length_and_the_fp16_range():
    bf16 = {"token_abs_logp_diff/mean": 1e-3, "length_to_mask": 500.0, "length_to_clip": 50.0, "clip_fraction": 0.02}
    fp16 = {
        "token_abs_logp_diff/mean": 1e-4,
        "length_to_mask": 50_000.0,
        "length_to_clip": 5_000.0,
        "clip_fraction": 0.0,
    }
    verdict, reasons = doctor.recommend({"bf16": bf16, "fp16": fp16}, target_length=4096, max_abs_weight=3.0)
    assert verdict == "switch to FP16" and any("10× FP16's" in r for r in reasons)
    assert doctor.recommend({"bf16": bf16, "fp16": fp16}, 100, 3.0)[0] == "prefer FP16"  # inside the mask, 10× larger
    verdict, reasons = doctor.recommend({"bf16": bf16, "fp16": fp16}, 4096, max_abs_weight=1e5)
    assert verdict == "stay in BF16" and "65504" in reasons[0]
    assert doctor.recommend({"bf16": bf16}, 4096, 3.0)[0] == "no verdict"


def test_bad_requests_fail_before_anything_loads():
    with pytest.raises(ValueError, match=r"unknown dtypes \['fp8'\]"):
        doctor.DoctorConfig(dtypes=("bf16", "fp8"))
    with pytest.raises(ValueError, match="unknown engine 'sglang'"):
        doctor.DoctorConfig(engine="sglang")


@pytest.mark.parametrize("model", ["tiny-arith", "tiny-moe-arith", "tiny-long"])
def test_the_default_response_length_fits_every_shipped_toy_model_or_is_capped_saying_so(model):
    """Issue 55 item 18: tiny-arith has 128 positions, so the default 128 tokens after an 8-token prompt would
    make vLLM refuse at start-up; the doctor caps the responses to the room the context leaves and says so."""
    from transformers import AutoConfig

    from nbkit.models import models

    cfg = doctor.DoctorConfig(model=model, engine="hf")
    fitted, note = doctor.fit_context(cfg)
    context = AutoConfig.from_pretrained(models.resolve(model)).max_position_embeddings
    assert 1 <= fitted.max_tokens <= cfg.max_tokens and fitted.max_tokens < context
    assert (fitted.max_tokens < cfg.max_tokens) == bool(note)
    if note:
        assert f"max_tokens 128 capped to {fitted.max_tokens}" in note and f"{context} positions" in note
    assert doctor.fit_context(fitted) == (fitted, "")  # a fitted config is left alone


def test_a_context_too_short_for_any_response_is_refused_naming_the_limit(tmp_path):
    import shutil

    from nbkit.models import models

    short = tmp_path / "short-context"
    shutil.copytree(models.resolve("tiny-arith"), short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 6}))
    with pytest.raises(ValueError, match="has a context of 6 positions and the longest of the doctor's 32 prompts"):
        doctor.fit_context(doctor.DoctorConfig(model=str(short), engine="hf"))


def test_the_command_line_says_it_capped_the_responses_before_any_engine_starts(monkeypatch, tmp_path, capsys):
    seen = []

    def measured_nothing(cfg, progress=False, setup=None):
        seen.append(cfg)
        raise KeyboardInterrupt  # stop where the engines would start

    monkeypatch.setattr(doctor, "diagnose", measured_nothing)
    assert cli_main.main(["doctor", "--model", "tiny-arith", "--engine", "hf", "--out", str(tmp_path / "d")]) == 130
    printed = capsys.readouterr().out
    assert "[nbkit] doctor: max_tokens 128 capped to 120: model 'tiny-arith' has a context of 128" in printed
    assert seen and seen[0].max_tokens == 128  # diagnose fits it again itself (and notes it in the verdict)


@pytest.mark.slow
@pytest.mark.cpu_kernels("HF engine and π half GEMMs under gemm auto: the shared-recipe caution follows the policy")
def test_headless_doctor_on_tiny_arith_writes_the_verdict(tmp_path, capsys):
    code = cli_main.main(
        [
            "doctor",
            "--model",
            "tiny-arith",
            "--engine",
            "hf",
            "--n-prompts",
            "8",
            "--max-tokens",
            "40",
            "--target-length",
            "40",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "verdict:" in printed and "doctor report:" in printed
    saved = json.loads((tmp_path / "doctor.json").read_text())
    assert set(saved["diagnoses"]) == {"bf16", "fp16"} and saved["engine"] == "hf"
    b, f = saved["diagnoses"]["bf16"], saved["diagnoses"]["fp16"]
    for d in (b, f):
        assert d["n_tokens"] > 0 and 0 <= d["clip_fraction"] <= 1 and d["length_to_mask"] > d["length_to_clip"] > 0
    # Which format has the larger mismatch depends on the kernels (on an AMD EPYC without FP16 units the HF engine
    # and π agree to ~1e-6 in both formats): the doctor must report what it measured and conclude from it.
    ratio = b["token_abs_logp_diff/mean"] / f["token_abs_logp_diff/mean"]
    # where the HF engine runs the trainer's own fp32-accumulate recipe the doctor says first that it measured no engine
    shared = gemm.resolve("auto") in gemm.ROUTED
    assert saved["reasons"][0].startswith("caution: the HF engine ran the trainer's own") == shared
    reasons = saved["reasons"][1:] if shared else saved["reasons"]
    assert f"is {ratio:.3g}× FP16's" in reasons[0] and len(reasons) >= 4
    assert b["length_to_mask"] > 40 and f["length_to_mask"] > 40  # 40-token answers stay inside TRL's mask
    assert saved["verdict"] == ("prefer FP16" if ratio >= 2 else "either")
    page = (tmp_path / "doctor.html").read_text()
    assert f"Verdict: {saved['verdict']}" in page and page.count("plotly.js") >= 1 and "TRL sequence mask" in page
