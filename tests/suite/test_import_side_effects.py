"""Importing the library changes nothing in the process; the entry points set the cache variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from nbkit.runtime import paths

PROBE = """
import json, os, warnings
import torch, transformers, trl, trl.trainer.grpo_trainer  # the libraries' own import-time settings come first
before, filters = dict(os.environ), list(warnings.filters)
import nbkit, nbkit.rl, nbkit.engines, nbkit.mismatch.mismatch
changed = sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k))
ours = [f for f in warnings.filters if f not in filters and "TRL currently supports" in str(f[1] and f[1].pattern)]
print(json.dumps({"changed": changed, "our_filters": len(ours)}))
"""


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in paths.cache_env() and k != "NBKIT_REPORT_DIR"}
    env["PYTHONPATH"] = str(paths.ROOT)
    return env


def test_import_nbkit_sets_no_environment_variable_and_no_warning_filter():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=clean_env(), capture_output=True, text=True, timeout=300, cwd=paths.ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    ours = sorted(set(result["changed"]) & set(paths.cache_env()))
    assert ours == [], f"import nbkit set {ours}"
    assert result["our_filters"] == 0


def test_the_nbkit_command_sets_the_cache_variables_for_what_it_runs():
    code = (
        "import os, sys; from nbkit.cli import main as cli_main; sys.argv=['nbkit','list'];\n"
        "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()): cli_main.main(['list'])\n"
        "print(os.environ.get('HF_HUB_OFFLINE'), os.environ.get('VLLM_CACHE_ROOT'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=300, cwd=paths.ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    offline, vllm_cache = out.stdout.strip().splitlines()[-1].split()
    assert offline == "1" and vllm_cache == paths.cache_env()["VLLM_CACHE_ROOT"]


def test_a_users_own_setting_wins_over_the_entry_points_default():
    env = clean_env() | {"HF_HUB_OFFLINE": "0"}
    code = "import os; from nbkit.runtime import paths; paths.setup_environment(); print(os.environ['HF_HUB_OFFLINE'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "0"
