"""The command line as a user meets it: ``python -m nbkit`` works, a refusal is one line on stderr with exit
status 2 and no traceback (``--debug`` shows it), and replaying a run's ``config.json`` never replaces a run."""

import json
import subprocess
import sys

from nbkit.cli import train as cli_train
from nbkit.rl import RLConfig, runfolder
from nbkit.runtime import outputs
from nbkit.runtime.paths import ROOT


def nbkit(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbkit", *argv], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_python_dash_m_nbkit_is_the_nbkit_command_and_refuses_in_one_line():
    assert nbkit("--help").returncode == 0
    done = nbkit("run", "--profile", "fast")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "nbkit: error: unknown profile 'fast'; choose one of ('smoke', 'cpu', 'gpu', 'cpu-full') (--debug shows "
        "the traceback)"
    ]
    debug = nbkit("run", "--profile", "fast", "--debug")
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "unknown profile 'fast'" in debug.stderr


def test_a_runs_saved_config_never_replays_overwrite_or_resume(tmp_path, arith_jsonl):
    cfg = RLConfig(dataset=arith_jsonl, output_dir=str(tmp_path / "run"), overwrite=True)
    runfolder.begin(runfolder.plan_run(cfg), cfg)  # what a run started with --overwrite saves
    saved = json.loads((cfg.out / "config.json").read_text())
    assert saved["overwrite"] is False and saved["resume"] is False
    assert outputs.read_marker(cfg.out)["kind"] == runfolder.KIND
    old = tmp_path / "old-config.json"  # a config.json saved before this rule: overwrite true in it
    old.write_text(json.dumps({**saved, "overwrite": True}))
    replayed, _ = cli_train.resolve(["--config", str(old)])
    assert replayed.overwrite is False and replayed.resume is False
    assert cli_train.resolve(["--config", str(old), "--overwrite"])[0].overwrite  # only the command line says so


def nbkit_here(capsys, *argv: str) -> tuple[int, str]:
    """``nbkit *argv`` in this process: (exit status, stderr). The same ``main`` as ``python -m nbkit`` without a
    Python start-up (2-3 s each); the user's path through a new process is checked once below and in the test above."""
    from nbkit.cli.main import main

    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse's own exit for bad usage
        status = exc.code
    return status, capsys.readouterr().err


def test_an_unknown_flag_is_refused_with_the_close_flags_before_any_work(capsys):
    """argparse names no alternative; every nbkit command names the flags close to an unknown one (a subcommand's
    own flags included), and says nothing when none is close."""
    cases = {
        ("train", "--dtype", "fp16"): "for --dtype did you mean --train_dtype or --rollout_dtype?",
        ("doctor", "--modle", "tiny-arith"): "for --modle did you mean --model?",
        ("run", "--outt", "x"): "for --outt did you mean --out?",
        ("--debg", "list"): "for --debg did you mean --debug?",
    }
    done = nbkit("train", "--dtype", "fp16")  # as a user meets it: a new process
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert cases["train", "--dtype", "fp16"] in done.stderr.strip().splitlines()[-1], done.stderr
    for argv, hint in cases.items():
        status, stderr = nbkit_here(capsys, *argv)
        assert status == 2 and "Traceback" not in stderr, argv
        assert hint in stderr.strip().splitlines()[-1], (argv, stderr)
    status, far = nbkit_here(capsys, "train", "--zzzzzz")
    assert status == 2 and far.strip().endswith("unrecognized arguments: --zzzzzz")


def test_the_close_flags_are_named_once_each_by_their_first_long_spelling():
    from nbkit.cli.commands import unknown_arguments

    flags = {"--train_dtype": "--train_dtype", "--train-dtype": "--train_dtype", "--steps": "--steps"}
    assert unknown_arguments(["--trian_dtype", "bf16"], flags) == (
        "unrecognized arguments: --trian_dtype bf16 (for --trian_dtype did you mean --train_dtype?)"
    )
    assert unknown_arguments(["extra"], flags) == "unrecognized arguments: extra"


def test_a_raw_operating_system_error_is_one_line_naming_the_file_and_what_to_do():
    """Issue 55 item 15: "[Errno 27] File too large" named no file; "[Errno 17] File exists" no remedy."""
    import errno

    from nbkit.cli.commands import describe

    assert describe(OSError(errno.EFBIG, "File too large")) == (
        "File too large (no file named by the system); a file-size limit stopped the write (`ulimit -f`): raise it "
        "(`ulimit -f unlimited`) and run again"
    )
    said = describe(FileExistsError(errno.EEXIST, "File exists", "/tmp/out"))
    assert said.startswith("File exists: '/tmp/out'; ") and "a symlink to nowhere" in said
    assert describe(FileNotFoundError("config file 'x.yaml' not found")) == "config file 'x.yaml' not found"


def test_an_ascii_locale_without_utf8_mode_is_one_line_saying_what_to_set():
    """Issue 73, 12: with PYTHONUTF8=0 and LANG=C, a 40-line traceback from an upstream template read as ASCII."""
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUTF8": "0", "LANG": "C", "LC_ALL": "C"}
    env.pop("PYTHONIOENCODING", None)
    done = subprocess.run(
        [sys.executable, "-m", "nbkit", "list"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    said = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(said) == 1, done.stderr
    assert "set PYTHONUTF8=1 (or LANG=C.UTF-8) and run again" in said[0] and "Traceback" not in done.stderr
