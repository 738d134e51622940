"""The metrics row has one schema: every key a stored run wrote is accounted for, and the studies read through it."""

from __future__ import annotations

from nbkit import results
from nbkit.mismatch import mismatch
from nbkit.records import schema
from nbkit.studies.catalog import STUDIES


def test_every_key_of_every_stored_run_is_in_the_schema():
    """(Studies of RL runs: their rows have a step; the length law's rows are sequences, see nbkit.offline.lengthlaw.)"""
    stored = [name for name in STUDIES if (results.RESULTS / name).is_dir()]  # (tests/studies/test_results_md: all are)
    runs = [rows for name in stored for rows in results.load(name).values() if rows and schema.STEP in rows[0]]
    assert len(runs) > 100
    unknown = {k for rows in runs for r in rows for k in r if not schema.known(k)}
    assert unknown == set(), f"keys written by runs but not in nbkit.rl.schema: {sorted(unknown)}"


def test_the_trainers_mismatch_keys_are_mismatch_metrics():
    from nbkit.rl.trainer import MISMATCH_KEYS

    for key in MISMATCH_KEYS:
        assert key in mismatch.METRICS or key in mismatch.ALIASES, key
        assert schema.known(schema.mismatch_key(key))
    assert schema.TOKEN_ABS_LOGP_DIFF == schema.mismatch_key("token_abs_logp_diff/mean")


def test_every_workbook_key_is_described():
    assert all(isinstance(v, str) and v for v in schema.KEYS.values())
    assert not schema.known("mismatch") and not schema.known("made_up/key")


def test_windowed_statistics():
    rows = [{"step": i + 1, "accuracy": a} for i, a in enumerate([0.0, 0.5, 1.0, 1.0])] + [{"step": 5}]
    rows.append({"step": 6, "accuracy": float("nan")})
    assert schema.series(rows, "accuracy") == [0.0, 0.5, 1.0, 1.0]
    assert schema.first_window(rows, "accuracy", 2) == 0.25 and schema.last_window(rows, "accuracy", 2) == 1.0
    assert schema.last_window(rows, "missing") is None


def test_a_judged_runs_step_0_row_is_not_an_optimiser_step():
    from nbkit.records import schema

    rows = [{schema.STEP: 0, schema.JUDGE_ACCURACY: 0.5}] + [{schema.STEP: s, schema.ACCURACY: 1.0} for s in (1, 2, 3)]
    assert schema.optimiser_steps(rows) == 3 and schema.optimiser_steps(rows[1:]) == 3


def test_a_moe_layers_flip_rate_key_is_in_the_flip_rate_family():
    from nbkit.records import schema

    assert schema.moe_flip_rate_key(3) == "moe/flip_rate/layer3"
    assert schema.moe_flip_rate_key(0).startswith(tuple(schema.FAMILIES))
