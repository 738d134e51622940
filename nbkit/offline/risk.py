"""The doctor's risk lines: a user's dose placed against the stored harm thresholds, or a plain "none stored".

The harm-threshold study (issue 37: ``nbkit.threshold`` on the dial's paired gaps) stores what it found as
``data/results/harm_threshold/thresholds.json``:

    {"unit": "token_abs_logp_diff/mean",              # the dose's unit: a key of the doctor's diagnosis
     "measured_on": "1 M-parameter models, 50 steps",  # what the thresholds were measured on, said with every line
     "tasks": {"tiny-arith": {"outcome": "crossing", "dose": 0.08, "ci": [0.05, 0.12]}, ...}}

``lines`` turns the doctor's per-dtype diagnosis into one line per dtype: the dose measured here in the stored
unit and each task's threshold with its CI, or that task's outcome when it had no crossing inside its doses. With
nothing stored it says so for every dtype and reads no risk: no threshold is guessed.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbkit.results import RESULTS

STORE = RESULTS / "harm_threshold" / "thresholds.json"
"""Where the harm-threshold study stores its thresholds."""
CAVEAT = "evidence from small models, not a guarantee for this one"


def load(path: Path | str | None = None) -> dict | None:
    """The stored thresholds (``STORE`` by default), or None when none are stored; ValueError for a file that is
    there but lacks ``unit`` or ``tasks``."""
    path = Path(path) if path is not None else STORE
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    if not {"unit", "tasks"} <= set(stored):
        raise ValueError(f"{path} holds no harm thresholds (needs 'unit' and 'tasks'), has {sorted(stored)}")
    return stored


def _place(dose: float, task: str, t: dict) -> str:
    """Where ``dose`` lies against one task's threshold: beyond its CI, inside it, or short of it; or that task's
    outcome when it had no crossing inside its measured doses."""
    if t.get("outcome") != "crossing":
        where = {"below_range": "below", "above_range": "above"}.get(t.get("outcome"), "outside")
        return f"{task}: no threshold inside its measured doses (it lies {where} them)"
    lo, hi = t.get("ci") or (None, None)
    ci = f"CI {'below the doses' if lo is None else f'{lo:.3g}'}–{'above the doses' if hi is None else f'{hi:.3g}'}"
    side = (
        "above it, beyond its CI"
        if hi is not None and dose > hi
        else "below it, short of its CI"
        if lo is not None and dose < lo
        else "inside its CI"
    )
    return f"{task} threshold {t['dose']:.3g} ({ci}): {side}"


def lines(diagnoses: dict[str, dict], stored: dict | None) -> list[str]:
    """One risk line per dtype of ``diagnoses`` (the doctor's per-dtype metrics) against ``stored`` (``load``)."""
    if stored is None:
        return [
            f"risk {d.upper()}: no stored harm threshold (the harm-threshold study has not stored "
            f"{STORE.parent.name}/{STORE.name}), so no risk is read"
            for d in diagnoses
        ]
    unit, out = stored["unit"], []
    for d, diag in diagnoses.items():
        if unit not in diag:
            out.append(f"risk {d.upper()}: the thresholds are in {unit!r}, which this diagnosis did not measure")
            continue
        placed = "; ".join(_place(diag[unit], task, t) for task, t in stored["tasks"].items())
        out.append(
            f"risk {d.upper()} here: dose {diag[unit]:.3g} ({unit}); {placed} "
            f"[measured on {stored.get('measured_on', 'unstated models')}; {CAVEAT}]"
        )
    return out
