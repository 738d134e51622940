"""The command line as a new user meets it (issue 41, items 5-7 and 12-16): Ctrl-C is one line and exit 130 with
the way to continue, a notebook cut off is named partial on disk and on the findings page, the doctor lints the
setup it documents and says where it ran, a refusal is one line without argparse's usage block, negative numbers
are values, ``--version`` and a bare ``nbkit`` help, ``--set`` keys are checked, ranges read alike, error texts
name real flags, and the commands ``nbkit plan`` prints never replace a run when re-run."""

import json
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from nbkit.cli import doctor as doctor_cli
from nbkit.cli import main as cli_main
from nbkit.cli.commands import INTERRUPTED
from nbkit.offline import doctor, lints
from nbkit.rl import runfolder
from nbkit.runtime import outputs
from nbkit.workbook import runner


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "usage:" not in err, err
    return lines[0]


# --- 5. Ctrl-C --------------------------------------------------------------------------------------------------


def test_ctrl_c_during_train_is_one_line_with_step_checkpoint_and_resume_hint(
    tmp_path, arith_jsonl, monkeypatch, capsys
):
    import nbkit.rl

    out = tmp_path / "run"

    def interrupted_train(cfg, progress=True):  # three steps logged, a checkpoint at 2, then Ctrl-C
        outputs.write_marker(out, runfolder.KIND)
        (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
        (out / "checkpoint-2").mkdir()
        (out / "checkpoint-2" / "trainer_state.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(nbkit.rl, "train", interrupted_train)
    code = cli_main.main(
        [
            "train",
            "--dataset",
            arith_jsonl,
            "--train-dtype",
            "fp32",
            "--max-steps",
            "10",
            "--checkpoint-every",
            "2",
            "--output-dir",
            str(out),
        ]
    )
    assert code == INTERRUPTED == 130
    said = one_line(capsys.readouterr().err)
    assert "interrupted at step 3; last checkpoint checkpoint-2; resume with `nbkit train ... --resume`" in said


def test_ctrl_c_during_nbkit_run_leaves_a_notebook_named_partial_and_the_findings_page_says_so(
    tmp_path, monkeypatch, capsys
):
    import papermill

    def cut_off(path, target, **kw):  # papermill saves the notebook cell by cell: half of it is on disk
        Path(target).write_text(Path(path).read_text())
        raise KeyboardInterrupt

    monkeypatch.setattr(papermill, "execute_notebook", cut_off)
    out = tmp_path / "report"
    assert cli_main.main(["run", "--profile", "smoke", "--only", "00", "--out", str(out)]) == 130
    stem = runner.notebooks(["00"])[0].stem
    assert (out / f"{stem}.partial.ipynb").exists() and not (out / f"{stem}.ipynb").exists()
    page = (out / "index.html").read_text()
    assert "interrupted (Ctrl-C)" in page and f"{stem}.partial.ipynb" in page
    assert "interrupted (Ctrl-C)" in capsys.readouterr().err


# --- 6, 7. the doctor ---------------------------------------------------------------------------------------------

SETUP_FLAGS = dict(
    target_length=8192,
    train_dtype=None,
    engine_dtype=None,
    fp32_lm_head=None,
    temperature=None,
    top_p=None,
    top_k=None,
    logprobs_mode=None,
    is_level=None,
    is_cap=None,
    run=None,
    pi_filtered=False,
    router_replay=False,
    config=None,
)


def test_the_doctors_default_setup_is_fp16_on_both_sides_as_its_help_says():
    setup = doctor_cli.setup_from_args(Namespace(**SETUP_FLAGS))
    assert (setup.train_dtype, setup.engine_dtype) == ("fp16", "fp16")
    assert "dtype-mismatch" not in {f.code for f in lints.run(setup, lints.Measured(), "tiny-arith")}
    bf16 = doctor_cli.setup_from_args(Namespace(**{**SETUP_FLAGS, "train_dtype": "bf16"}))
    assert bf16.engine_dtype == "bf16"  # the engine follows the trainer unless told otherwise
    auto = doctor_cli.setup_from_args(Namespace(**{**SETUP_FLAGS, "engine_dtype": "auto"}))
    assert auto.engine_dtype is None  # asked for: vLLM's 'auto' reads the checkpoint (an fp32 one gives bf16)
    assert "dtype-mismatch" in {f.code for f in lints.run(auto, lints.Measured(), None)}


def test_doctor_html_and_json_carry_the_provenance_block(tmp_path):
    rng = np.random.default_rng(0)
    mu = [-rng.random(20) for _ in range(4)]
    pi = [m + rng.normal(0, 1e-3, m.size) for m in mu]
    diag = doctor.dtype_diagnosis(pi, mu)
    result = doctor.DoctorResult(
        doctor.DoctorConfig(model="tiny-arith"), "hf", {"fp16": diag}, "no verdict", [], 1.0, 1.0
    )
    page = doctor_cli.write_html(result, tmp_path / "doc").read_text()
    prov = json.loads((tmp_path / "doc" / "doctor.json").read_text())["provenance"]
    assert {"commit", "machine", "date", "versions", "cpu half flags", "gemm policy (auto)"} <= set(prov)
    assert prov["commit"] and "CPUs" in prov["machine"] and "torch" in prov["versions"]
    for value in prov.values():
        assert str(value).replace("&", "&amp;") in page or str(value) in page


def test_range_messages_read_alike_for_every_value_below_the_range():
    for bad in (-5, 0):
        with pytest.raises(ValueError, match=f"target_length must be >= 1, got {bad}"):
            doctor.DoctorConfig(target_length=bad)


# --- 12, 13, 15. refusals, negative numbers, --version, no arguments -------------------------------------------------


def test_a_refusal_is_one_line_without_the_usage_block_which_debug_shows(capsys):
    with pytest.raises(SystemExit) as done:
        cli_main.main(["train", "--max-steps", "0", "--print-config"])
    assert done.value.code == 2
    assert "max_steps must be >= 1, got 0" in one_line(capsys.readouterr().err)
    with pytest.raises(SystemExit):
        cli_main.main(["train", "--max-steps", "0", "--print-config", "--debug"])
    assert "usage: nbkit train" in capsys.readouterr().err


def test_a_negative_number_is_a_flags_value(capsys):
    from nbkit.cli import train as cli_train

    with pytest.raises(SystemExit):
        cli_train.resolve(["--learning-rate", "-1e-4", "--print-config"])
    said = one_line(capsys.readouterr().err)
    assert "learning_rate must be > 0, got -0.0001" in said and "expected one argument" not in said
    assert cli_train.resolve(["--seed", "3", "--beta", "1e-4", "--print-config"])[0].beta == 1e-4


def test_version_and_a_bare_nbkit_say_something_useful(capsys):
    import nbkit

    with pytest.raises(SystemExit) as done:
        cli_main.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"nbkit {nbkit.__version__}"
    assert cli_main.main([]) == 0
    said = capsys.readouterr()
    assert "nbkit run --profile smoke" in said.out and "required" not in said.out + said.err


# --- 14, 16. error texts name real flags; --set keys; nbkit plan -------------------------------------------------


def test_the_missing_column_error_names_nothing_nbkit_train_lacks(tmp_path):
    from nbkit import tasks

    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "1+1=", "answer": "2"}\n')
    with pytest.raises(ValueError) as err:
        tasks.make_task(source=str(data))
    said = str(err.value)
    assert "no column(s) ['problem']" in said and "name them 'problem' and 'answer'" in said
    assert "set problem_key=" not in said


def test_a_study_option_that_does_not_exist_is_refused_naming_the_valid_ones(capsys):
    assert cli_main.main(["study", "ablation_tiny_arith", "run", "--set", "bogus_key=1"]) == 2
    said = one_line(capsys.readouterr().err)
    assert "has no grid option 'bogus_key'" in said
    assert "its options: algorithm, output_dir, overrides, pairs, rollout_engine, seeds, steps" in said
    assert "unexpected keyword argument" not in said


def test_the_commands_nbkit_plan_prints_never_replace_a_run_when_re_run():
    from nbkit.cli import plan

    for profile in ("smoke", "gpu", "cpu-full"):
        commands = [c for _, cs in plan.make_plan(profile=profile).steps for c in cs]
        assert commands and not any("--overwrite" in c for c in commands), profile


@pytest.mark.slow
def test_a_real_sigint_during_nbkit_train_ends_in_one_line_and_the_run_resumes(tmp_path, arith_jsonl):
    """The real thing: ``python -m nbkit train`` on tiny-arith, SIGINT once three steps are logged."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from nbkit.runtime.paths import ROOT

    out = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "nbkit",
        "train",
        "--dataset",
        arith_jsonl,
        "--train-dtype",
        "fp32",
        "--max-steps",
        "400",
        "--prompts-per-step",
        "2",
        "--num-generations",
        "2",
        "--max-completion-length",
        "8",
        "--checkpoint-every",
        "2",
        "--output-dir",
        str(out),
        "--quiet",
    ]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        # as a terminal's foreground job gets Ctrl-C: a suite started in the background (`make test &`) passes its
        # children SIGINT ignored, and Python keeps an inherited SIG_IGN, so the run would never see the signal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if runfolder.last_logged_step(out) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("nbkit train: interrupted at step "), err
    assert "; last checkpoint checkpoint-" in last and "resume with `nbkit train ... --resume`" in last
