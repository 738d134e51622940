"""The command line as a user meets it: ``python -m nbkit`` works, a refusal is one line on stderr with exit
status 2 and no traceback (``--debug`` shows it), and replaying a run's ``config.json`` never replaces a run."""
import json
import subprocess
import sys

from nbkit import outputs
from nbkit.cli import train as cli_train
from nbkit.paths import ROOT
from nbkit.rl import RLConfig, runfolder


def nbkit(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbkit", *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_python_dash_m_nbkit_is_the_nbkit_command_and_refuses_in_one_line():
    assert nbkit("--help").returncode == 0
    done = nbkit("run", "--profile", "fast")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "nbkit: error: unknown profile 'fast'; choose one of ('smoke', 'cpu', 'gpu', 'cpu-full') (--debug shows "
        "the traceback)"]
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
