"""The main job's estimate: stored per-notebook times of a measured run, scaled by this CPU's calibration; the
findings page's time table sets the measured times against it."""

from __future__ import annotations

import json

import pytest

from nbkit.workbook import jobtime, report
from nbkit.workbook.runner import NotebookResult


def _record(policy: str, date: str, calib: float, **times) -> dict:
    return {
        "profile": "cpu",
        "cpu": f"cpu-{policy}",
        "cores": 2,
        "cpu_flags": ["avx2"],
        "gemm_auto": policy,
        "calibration": {"seconds": calib},
        "commit": "abc",
        "date": date,
        "fresh_clone": True,
        "note": "",
        "notebooks": times,
    }


AVX512 = _record("native", "2026-11-20", 2.0, a=100.0, b=300.0)
AVX2 = _record("fp32-accumulate", "2026-11-21", 4.0, a=200.0, b=900.0)


def test_the_estimate_scales_the_newest_record_of_the_same_gemm_policy_by_the_calibration_ratio():
    here = {"gemm_auto": "native"}
    est = jobtime.estimate(["a", "b"], "cpu", {"seconds": 3.0}, here, stored=[AVX512, AVX2])
    assert est.reference is AVX512 and est.same_policy and est.scale == pytest.approx(1.5)
    assert est.seconds == {"a": pytest.approx(150.0), "b": pytest.approx(450.0)}
    assert est.total == pytest.approx(600.0) and "~10 min" in est.describe()
    assert "extrapolation" not in est.describe()


def test_without_a_record_of_this_policy_the_estimate_says_it_extrapolates():
    est = jobtime.estimate(["a", "c"], "cpu", {"seconds": 4.0}, {"gemm_auto": "native"}, stored=[AVX2])
    assert not est.same_policy and est.unknown == ["c"] and set(est.seconds) == {"a"}
    assert "extrapolation across kernel families" in est.describe() and "['c']" in est.describe()


def test_a_record_made_on_a_cpu_running_its_own_kernels_is_preferred_to_a_newer_emulation():
    emulated = {
        **_record("fp32-accumulate", "2026-11-25", 2.0, a=150.0, b=600.0),
        "kernel_caps": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    }
    here = {"gemm_auto": "fp32-accumulate"}
    assert jobtime.estimate(["a"], "cpu", {"seconds": 4.0}, here, stored=[AVX2, emulated]).reference is AVX2
    est = jobtime.estimate(["a"], "cpu", {"seconds": 4.0}, here, stored=[AVX512, emulated])
    assert est.reference is emulated and est.same_policy
    assert "kernels capped by ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2: an emulation" in est.describe()
    assert "emulation" not in jobtime.describe_cpu(AVX2)


def test_this_cpu_names_the_kernel_caps_in_force(monkeypatch):
    for key in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"):
        monkeypatch.delenv(key, raising=False)
    assert jobtime.cpu()["kernel_caps"] == {}
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    here = jobtime.cpu()
    assert here["kernel_caps"] == {"ONEDNN_MAX_CPU_ISA": "AVX2"} and here["gemm_auto"] == "fp32-accumulate"
    assert "an emulation" in jobtime.describe_cpu(here)


def test_the_benchmark_header_names_the_cpu_model_its_cores_and_how_busy_they_are(monkeypatch):
    monkeypatch.setattr(
        jobtime,
        "cpu",
        lambda: {
            "cpu": "Some CPU 9000",
            "cores": 2,
            "cpu_flags": ["avx2"],
            "gemm_auto": "fp32-accumulate",
            "kernel_caps": {},
        },
    )
    monkeypatch.setattr("os.getloadavg", lambda: (1.25, 1.0, 1.0))
    line = jobtime.cpu_header()
    assert line.startswith("CPU: Some CPU 9000 (avx2; gemm auto = fp32-accumulate), 2 cores;")
    assert "torch threads" in line and line.endswith("load average 1.25")


def test_every_benchmark_prints_the_cpu_header():
    """A measurement says which CPU it ran on: each benchmark script prints ``jobtime.cpu_header()``."""
    from pathlib import Path

    scripts = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("bench_*.py"))
    assert scripts
    silent = [p.name for p in scripts if "jobtime.cpu_header()" not in p.read_text()]
    assert silent == []


def test_notebooks_whose_parameters_changed_since_the_record_are_named():
    rec = {**AVX512, "parameters": {"a": {"steps": 100}, "b": {}}}
    est = jobtime.estimate(
        ["a", "b"],
        "cpu",
        {"seconds": 2.0},
        {"gemm_auto": "native"},
        stored=[rec],
        parameters={"a": {"steps": 50}, "b": {}},
    )
    assert est.changed == ["a"] and "parameters changed since for ['a']" in est.describe()
    assert jobtime.estimate(["a"], "cpu", {"seconds": 2.0}, {"gemm_auto": "native"}, stored=[rec]).changed == []


def test_a_notebook_default_changed_since_the_record_is_named_too():
    """The profile injects the same parameters as before, but the notebook's own default changed: a record that kept
    the notebook's defaults tells it (an older record without them is compared on the injected parameters only)."""
    rec = {
        **AVX512,
        "parameters": {"a": {}, "b": {}},
        "effective_parameters": {"a": {"engine": "hf", "n": 4}, "b": {"n": 1}},
    }
    now = {"a": {"engine": "auto", "n": 4}, "b": {"n": 1}}
    args = (["a", "b"], "cpu", {"seconds": 2.0}, {"gemm_auto": "native"})
    assert jobtime.estimate(*args, stored=[rec], parameters={"a": {}, "b": {}}, effective=now).changed == ["a"]
    old = {k: v for k, v in rec.items() if k != "effective_parameters"}
    assert jobtime.estimate(*args, stored=[old], parameters={"a": {}, "b": {}}, effective=now).changed == []


def test_the_effective_parameters_are_the_notebooks_defaults_with_the_injected_ones_over_them():
    from nbkit.workbook import runner

    path = runner.notebooks(["02"])[0]
    defaults = runner.notebook_defaults(path)
    got = runner.effective_parameters(path, {"n_prompts": 3})
    assert got == {**defaults, "n_prompts": 3} and defaults["n_prompts"] != 3


def test_no_record_of_the_profile_gives_no_estimate():
    assert jobtime.estimate(["a"], "smoke", {"seconds": 1.0}, {"gemm_auto": "native"}, stored=[AVX512]) is None


def test_the_time_table_sets_measured_against_estimated_and_totals_them():
    est = jobtime.estimate(["a", "b"], "cpu", {"seconds": 2.0}, {"gemm_auto": "native"}, stored=[AVX512])
    rows = report.time_table([NotebookResult("a", True, 120.0, {}), NotebookResult("b", False, 150.0, {})], est)
    assert rows[0] == {"notebook": "a", "ok": True, "measured s": 120, "estimated s": 100, "measured / estimated": 1.2}
    assert rows[-1] == {
        "notebook": "total",
        "ok": False,
        "measured s": 270,
        "estimated s": 400,
        "measured / estimated": 0.68,
    }
    assert report.time_table([NotebookResult("a", True, 5.0, {})], None)[0]["estimated s"] is None


def _run_json(folder, ok=True):
    folder.mkdir()
    (folder / "run.json").write_text(
        json.dumps(
            {
                "provenance": {"profile": "cpu", "commit": "def", "date": "2026-11-24"},
                "notebooks": [{"stem": "a", "ok": ok, "seconds": 12.34, "parameters": {"steps": 3}}],
                "cpu": {"cpu": "X", "cores": 2, "cpu_flags": [], "gemm_auto": "native"},
                "calibration": {"seconds": 2.5},
            }
        )
    )


def test_a_finished_report_is_appended_to_the_stored_records(tmp_path):
    _run_json(tmp_path / "r")
    store = tmp_path / "main_job.json"
    rec = jobtime.record(tmp_path / "r", fresh_clone=True, note="idle", path=store)
    assert rec["notebooks"] == {"a": 12.3} and rec["calibration"] == {"seconds": 2.5} and rec["fresh_clone"]
    assert rec["parameters"] == {"a": {"steps": 3}} and "effective_parameters" not in rec  # a report without defaults
    jobtime.record(tmp_path / "r", fresh_clone=False, path=store)
    assert [r["fresh_clone"] for r in jobtime.records(store)] == [True, False]


def test_a_report_with_a_failed_notebook_is_not_a_reference(tmp_path):
    _run_json(tmp_path / "r", ok=False)
    with pytest.raises(ValueError, match=r"notebooks \['a'\] failed"):
        jobtime.record(tmp_path / "r", fresh_clone=True, path=tmp_path / "t.json")


@pytest.mark.cpu_kernels("the calibration's BF16 pass runs under gemm auto: its policy is recorded")
def test_the_calibration_times_fp32_and_bf16_passes_under_the_auto_policy():
    from nbkit.precision import gemm

    c = jobtime.calibrate(passes=1, batch=2, length=8)
    assert c["policy"] == gemm.resolve("auto") and c["fp32"] > 0 and c["bf16"] > 0
    assert c["seconds"] == pytest.approx(c["fp32"] + c["bf16"], abs=1e-3)


def test_every_stored_record_names_its_cpu_policy_and_a_complete_notebook_list():
    from nbkit.workbook.runner import notebooks

    for rec in jobtime.records():
        assert rec["gemm_auto"] in ("native", "fp32-accumulate") and rec["cpu"] and rec["calibration"]["seconds"] > 0
        if rec["profile"] == "cpu":
            assert set(rec["notebooks"]) <= {p.stem for p in notebooks()}


def test_a_report_that_kept_the_notebooks_defaults_is_recorded_with_its_effective_parameters(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run.json").write_text(
        json.dumps(
            {
                "provenance": {"profile": "cpu", "commit": "def", "date": "2026-11-25"},
                "notebooks": [
                    {"stem": "a", "ok": True, "seconds": 1.0, "parameters": {"steps": 3}, "defaults": {"lr": 0.1}}
                ],
                "cpu": {"cpu": "X", "cores": 2, "cpu_flags": [], "gemm_auto": "native"},
                "calibration": {"seconds": 2.5},
            }
        )
    )
    rec = jobtime.record(tmp_path / "r", fresh_clone=True, path=tmp_path / "t.json")
    assert rec["effective_parameters"] == {"a": {"lr": 0.1, "steps": 3}}


EPYC = {"cpu": "AMD EPYC", "cpu_flags": ["avx2"], "gemm_auto": "fp32-accumulate", "kernel_caps": {}}


def _epyc_report(date: str, calib: float, measured: dict, estimated: dict | None, params: dict) -> dict:
    rec = {**_record("fp32-accumulate", date, calib, **measured), **EPYC, "parameters": params}
    if estimated is not None:
        rec["estimated"] = estimated
    return rec


def test_a_second_report_on_the_same_kind_of_cpu_is_estimated_from_the_first_one():
    first = _epyc_report("2026-11-22", 4.0, {"a": 400.0, "b": 1800.0}, {"a": 200.0, "b": 900.0}, {"a": {}, "b": {}})
    est = jobtime.estimate(
        ["a", "b"], "cpu", {"seconds": 4.4}, EPYC, stored=[AVX2, first], parameters={"a": {}, "b": {}}
    )
    assert est.own is first and est.learned == {"a": "own", "b": "own"}
    assert est.seconds == {"a": pytest.approx(400.0), "b": pytest.approx(1800.0)}  # its own times, not rescaled
    assert "learned on this kind of CPU: 2 notebook(s) from its own report" in est.describe()


def test_a_notebook_whose_parameters_changed_is_corrected_by_the_ratio_that_cpu_measured():
    first = _epyc_report(
        "2026-11-22", 4.0, {"a": 400.0, "b": 1800.0}, {"a": 200.0, "b": 900.0}, {"a": {}, "b": {"steps": 50}}
    )
    newer = {
        **_record("fp32-accumulate", "2026-11-23", 4.0, a=200.0, b=900.0),
        "parameters": {"a": {}, "b": {"steps": 100}},
    }  # another CPU's report, already with today's parameters
    est = jobtime.estimate(
        ["a", "b"], "cpu", {"seconds": 4.0}, EPYC, stored=[first, newer], parameters={"a": {}, "b": {"steps": 100}}
    )
    assert est.reference is newer and est.learned == {"a": "own", "b": "ratio"}
    # b: the reference's 900 s (calibration ratio 1) x the 1800 / 900 this CPU measured against its estimate
    assert est.seconds["b"] == pytest.approx(1800.0)
    alone = jobtime.estimate(["b"], "cpu", {"seconds": 4.0}, EPYC, stored=[first], parameters={"b": {"steps": 100}})
    assert alone.reference is first and alone.learned == {} and alone.changed == ["b"]  # never corrected twice
    assert alone.seconds["b"] == pytest.approx(1800.0)
    assert "1 corrected by the measured / estimated ratios" in est.describe()


def test_another_kind_of_cpu_or_a_report_without_its_estimate_teaches_nothing():
    other = {**EPYC, "cpu": "Another CPU"}
    first = _epyc_report("2026-11-22", 4.0, {"a": 400.0}, None, {"a": {"x": 1}})
    est = jobtime.estimate(["a"], "cpu", {"seconds": 4.0}, other, stored=[AVX2, first], parameters={"a": {}})
    assert est.learned == {} and est.own is None and est.seconds["a"] == pytest.approx(400.0)  # newest same policy
    est = jobtime.estimate(["a"], "cpu", {"seconds": 4.0}, EPYC, stored=[AVX2, first], parameters={"a": {}})
    assert est.learned == {} and est.seconds["a"] == pytest.approx(400.0)  # changed parameters, no estimate kept
    emulated = {**EPYC, "kernel_caps": {"ONEDNN_MAX_CPU_ISA": "AVX2"}}
    assert not jobtime.same_cpu(EPYC, emulated) and jobtime.same_cpu(EPYC, dict(EPYC))


def test_a_recorded_report_keeps_the_estimate_printed_before_it_and_the_ratio(tmp_path):
    run = {
        "provenance": {"profile": "cpu", "commit": "abc", "date": "2026-11-25"},
        "notebooks": [{"stem": "a", "ok": True, "seconds": 300.0, "parameters": {}}],
        "cpu": {**EPYC, "cores": 2},
        "calibration": {"seconds": 4.0},
        "estimate": {"a": 200.0},
    }
    (tmp_path / "run.json").write_text(json.dumps(run))
    rec = jobtime.record(tmp_path, fresh_clone=True, path=tmp_path / "timings.json")
    assert rec["estimated"] == {"a": 200.0} and rec["measured_over_estimated"] == {"a": 1.5}


def test_a_notebook_rewritten_since_this_cpu_measured_it_is_named_beside_the_old_notebook_s_time():
    """Its parts may now run beside each other: the estimate says its time is the old notebook's."""
    first = {
        **_epyc_report("2026-11-22", 4.0, {"a": 400.0, "b": 1800.0}, {"a": 200.0, "b": 900.0}, {"a": {}, "b": {}}),
        "code": {"a": "aaaa", "b": "bbbb"},
    }
    est = jobtime.estimate(
        ["a", "b"],
        "cpu",
        {"seconds": 4.0},
        EPYC,
        stored=[AVX2, first],
        parameters={"a": {}, "b": {}},
        code={"a": "aaaa", "b": "b-new"},
    )
    assert est.learned == {"a": "own", "b": "own"} and est.rewritten == ["b"]
    assert est.seconds == {"a": pytest.approx(400.0), "b": pytest.approx(1800.0)}
    assert "notebook code changed since for ['b']" in est.describe()
    unknown = jobtime.estimate(
        ["a", "b"],
        "cpu",
        {"seconds": 4.0},
        EPYC,
        stored=[AVX2, first],
        parameters={"a": {}, "b": {}},
        code={"a": None, "b": None},
    )
    assert unknown.learned == {"a": "own", "b": "own"} and unknown.rewritten == []  # unknown code: as before


def test_a_code_fingerprint_reads_the_code_cells_but_not_the_parameters():
    fp = jobtime.code_fingerprint("06_dose_response")
    assert fp is not None and len(fp) == 12 and fp == jobtime.code_fingerprint("06_dose_response")
    assert jobtime.code_fingerprint("no_such_notebook") is None
    assert jobtime.code_fingerprint("06_dose_response", "0000000000000000000000000000000000000000") is None
