"""The doctor's risk lines: a user's dose placed against the stored harm thresholds, or a plain "none stored".

The harm-threshold study (issue 37: ``nbkit.stats.threshold`` on the dial's paired gaps) stores what it found as
``data/results/harm_threshold/thresholds.json``:

    {"unit": "token_abs_logp_diff/mean",              # the dose's unit: a key of the doctor's diagnosis
     "measured_on": "1 M-parameter models, 50 steps",  # what the thresholds were measured on, said with every line
     "tasks": {"tiny-arith": {"outcome": "crossing", "dose": 0.08, "ci": [0.05, 0.12]}, ...}}

The full record of a task is ``nbkit.stats.threshold.Threshold.to_json()`` plus what the figure draws: ``mean_gaps`` and
``gap_ci`` per dose, ``points`` (dosed formats → dose), ``placed`` (formats placed on the axis only → dose),
``response_length`` (mean tokens of the runs behind the doses) and ``study``; the store may add ``unit_note``
(e.g. "primary unit, pre-registered; transfer to a second task not yet tested"), ``units`` (the same thresholds
in each candidate unit) and ``transfer`` (the transfer study's reading: ``tasks``, ``study``, ``verdict`` and per unit
``agrees``, ``ratio``, ``cis_overlap``; each risk line says whether its unit transfers). Every key beyond ``unit``
and ``tasks`` is optional.

``readings`` measures each dtype's dose in the stored unit at the user's response length (``nbkit.offline.dose``:
measured where the sampled responses reach it, extrapolated by the length model where not, saying which); ``lines``
turns them into one line per dtype: that dose with its provenance and each task's threshold with its CI, or that
task's outcome when it had no crossing inside its doses, with what the thresholds were measured on and that they are
evidence, not a guarantee. With nothing stored it says so for every dtype and reads no risk: no threshold is guessed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from nbkit.offline import dose as dose_
from nbkit.offline.dose import Reading
from nbkit.records import schema
from nbkit.results import RESULTS

STORE = RESULTS / "harm_threshold" / "thresholds.json"
"""Where the harm-threshold study stores its thresholds."""
PREDICTOR = STORE.with_name("predictor.json")
"""Where the predictors study (``nbkit.studies.predictors``) stores its verdict: which candidate statistic predicts
the accuracy gap (``winner``, or none: ``verdict`` "no clear winner"), with the winner's fit and prediction
interval."""
DIAG_KEYS = {
    "token_abs": schema.METRIC_TOKEN_ABS_LOGP_DIFF,
    "p99": "token_abs_logp_diff/p99",
    "clip_out": "clip_fraction",
    "seq_kl": "seq_kl",
    "seq_abs": "seq_log_ratio/abs_mean",
    "ess_deficit": "ess_seq_deficit",
}
"""Candidate (``nbkit.mismatch.candidates``) → the doctor's diagnosis key that measures it (``bias`` and ``rms`` are
read from the per-token log-ratio's mean and variance; argmax flips, low-probability |Δ| and the advantage
covariance the doctor does not measure)."""
THRESHOLD_UNITS = {
    "token_abs": schema.METRIC_TOKEN_ABS_LOGP_DIFF,
    "seq_abs": "seq_log_ratio/abs_mean",
    "seq_kl": "seq_kl",
    "ess_deficit": "ess_seq_deficit",
}
"""Candidate → the harm-threshold unit the transfer study read for it (the others it did not read)."""
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


def readings(
    diagnoses: dict[str, dict], stored: dict | None, target_length: int | None = None, pairs: dict | None = None
) -> dict[str, Reading | None]:
    """dtype → its dose in the stored unit (``nbkit.offline.dose.Reading``) at ``target_length`` tokens, from the
    doctor's per-dtype diagnosis and its (log π, log μ) ``pairs``; None where the unit cannot be read. No target
    length: the dose as the diagnosis measured it. Empty when nothing is stored."""
    if stored is None:
        return {}
    unit, out = stored["unit"], {}
    for d, diag in diagnoses.items():
        if target_length is None:
            n = diag.get("mean_length")
            at = f"on responses of mean {n:.3g} tokens" if n is not None else "on the sampled responses"
            out[d] = (
                Reading(unit, float(diag[unit]), f"as measured {at}", True, n or math.nan) if unit in diag else None
            )
        else:
            out[d] = dose_.at_length(unit, diag, target_length, (pairs or {}).get(d))
    return out


def _length_note(task: dict, reading: Reading, target_length: int | None) -> str:
    """The threshold's response length where it was stored, and for a per-token unit at another length a warning
    that the per-token dose does not carry the length."""
    n = task.get("response_length")
    if n is None:
        return ""
    if reading.unit in dose_.SEQ_UNITS or target_length is None or round(target_length) == round(n):
        return f" (its responses: {n:.3g} tokens)"
    return (
        f" (its responses: {n:.3g} tokens, yours {target_length}: a per-token dose does not carry the length, "
        f"so this reads a {target_length}-token run against {n:.3g}-token ones)"
    )


def transfer_note(unit: str, transfer: dict) -> str:
    """Whether ``unit``'s thresholds agree across the two tasks of the stored transfer reading (``transfer``: tasks,
    study, per unit ``agrees``, ``ratio``, ``cis_overlap``), and which units do when it does not."""
    first, second = transfer["tasks"]
    units = transfer.get("units", {})
    mine = units.get(unit)
    by = f"read by {transfer['study']}" if transfer.get("study") else "the stored transfer reading"
    if mine is None:
        return f"the transfer between {first} and {second} ({by}) did not read {unit!r}"
    if "reading" in mine:  # the amended rule (harm_transfer_rule.TRANSFER_RULE): the ratio's CI against a band
        lo, hi = transfer.get("band") or (None, None)
        ci = mine.get("ratio_ci") or (math.nan, math.nan)
        said = {"transfers": "transfers", "differs": "differs", "cannot tell": "is not shown to transfer"}
        return (
            f"{unit} {said.get(mine['reading'], mine['reading'])} between {first} and {second} (threshold ratio "
            f"{second}/{first} {mine.get('joint_ratio') or math.nan:.3g}, 95 % CI {ci[0]:.3g}–{ci[1]:.3g} against "
            f"the band [{lo:g}, {hi:g}]; {by})"
        )
    if mine.get("agrees"):
        return (
            f"{unit}'s thresholds agree across {first} and {second} (95 % CIs overlap; ratio {second}/{first} "
            f"{mine['ratio']:.3g}; {by})"
        )
    others = [u for u, r in units.items() if r.get("agrees")]
    why = "no crossing on both tasks" if mine.get("cis_overlap") is not False else "their 95 % CIs do not overlap"
    return f"{unit}'s thresholds do not agree across {first} and {second} ({why}; {by}); " + (
        f"units whose thresholds agree: {', '.join(others)}" if others else "no unit's thresholds agree"
    )


def lines(
    diagnoses: dict[str, dict],
    stored: dict | None,
    target_length: int | None = None,
    pairs: dict | None = None,
    predictor: dict | None = None,
) -> list[str]:
    """One risk line per dtype of ``diagnoses`` (the doctor's per-dtype metrics): with a stored ``predictor``
    (``load_predictor``) that named a winner, its prediction (``predicted_lines``); else the dose read at
    ``target_length`` tokens (``readings``) against ``stored`` (``load``), and where the predictor found no clear
    winner, each line says so and that it is one reading among several."""
    if predictor is not None and predictor["verdict"] == "winner":
        return predicted_lines(diagnoses, predictor, (stored or {}).get("transfer"), target_length, pairs)
    if predictor is not None:
        head = (
            f"no clear winner among the candidate predictors ({predictor.get('study', 'the predictors study')}, "
            f"evidence from {_evidence(predictor)}: {predictor.get('reason', 'no reason stored')}"
            f"{_against_constant(predictor)}); the reading below is one among several, not a verdict: "
        )
        return [
            f"{line.split(':', 1)[0]}: {head}{line.split(':', 1)[1].strip()}"
            for line in lines(diagnoses, stored, target_length, pairs)
        ]
    if stored is None:
        return [
            f"risk {d.upper()}: no stored harm threshold (the harm-threshold study has not stored "
            f"{STORE.parent.name}/{STORE.name}), so no risk is read"
            for d in diagnoses
        ]
    unit, out = stored["unit"], []
    note = f"; {stored['unit_note']}" if stored.get("unit_note") else ""
    if stored.get("transfer"):
        note += f"; {transfer_note(unit, stored['transfer'])}"
    for d, reading in readings(diagnoses, stored, target_length, pairs).items():
        if reading is None:
            out.append(f"risk {d.upper()}: the thresholds are in {unit!r}, which this diagnosis did not measure")
            continue
        placed = "; ".join(
            _place(reading.value, task, t) + _length_note(t, reading, target_length)
            for task, t in stored["tasks"].items()
        )
        out.append(
            f"risk {d.upper()} here: dose {reading.value:.3g} ({unit}, {reading.how}); {placed} "
            f"[thresholds measured on {stored.get('measured_on', 'unstated models')}{note}; {CAVEAT}]"
        )
    return out


def predictor_path(thresholds: Path | str | None = None) -> Path:
    """The predictor store read with a thresholds store: ``predictor.json`` beside the named ``thresholds`` file,
    else beside ``STORE`` (``PREDICTOR``)."""
    return Path(thresholds or STORE).with_name(PREDICTOR.name)


def load_predictor(path: Path | str | None = None) -> dict | None:
    """The stored predictor verdict (``PREDICTOR`` by default), or None when none is stored; ValueError for a file
    that is there but lacks ``verdict``, or names a winner without its fit."""
    path = Path(path) if path is not None else PREDICTOR
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    if stored.get("verdict") not in ("winner", "no clear winner"):
        raise ValueError(f"{path} holds no predictor verdict ('winner' or 'no clear winner'), has {sorted(stored)}")
    if stored["verdict"] == "winner" and not {"winner", "curve", "interval", "range"} <= set(stored):
        raise ValueError(f"{path} names a winner but lacks its curve, interval or range: has {sorted(stored)}")
    return stored


def candidate_reading(cand: str, diag: dict, target_length: int | None = None, pair=None) -> Reading | None:
    """The candidate ``cand`` as the doctor's diagnosis measures it (sequence candidates at ``target_length``, as
    ``dose.at_length`` reads them); None where the doctor does not measure it."""
    if cand == "bias" and "token_log_ratio/mean" in diag:
        return Reading(cand, -float(diag["token_log_ratio/mean"]), "measured per token", True, math.nan)
    if cand == "rms" and {"token_log_ratio/mean", "token_log_ratio/var"} <= set(diag):
        d, v = diag["token_log_ratio/mean"], diag["token_log_ratio/var"]
        return Reading(cand, math.sqrt(d * d + v), "measured per token", True, math.nan)
    key = DIAG_KEYS.get(cand)
    if key is None:
        return None
    if key in dose_.SEQ_UNITS and target_length is not None:
        return dose_.at_length(key, diag, target_length, pair)
    return Reading(cand, float(diag[key]), "measured on the sampled responses", True, math.nan) if key in diag else None


def _against_constant(pred: dict) -> str:
    """The stored predictor's reading against a constant prediction (added after its results, an amendment), in a
    clause: which candidates beat the constant under both schemes, or none; "" when it stores no such reading."""
    beats = (pred.get("against_constant") or {}).get("beats")
    if not beats:
        return ""
    both = [c for c in next(iter(beats.values())) if all(c in b for b in beats.values())]
    some = sorted({c for b in beats.values() for c in b} - set(both))
    said = f"{', '.join(both)} beat(s) it under both schemes" if both else "none beats it under both schemes"
    said += f" ({', '.join(some)} under one only)" if some else ""
    return f"; against a constant prediction (a reading added after the results): {said}"


def _evidence(pred: dict) -> str:
    models = pred.get("models") or {}
    return ", ".join(f"{t} (model {models.get(t, '?')})" for t in pred.get("tasks") or models)


def _winner_transfer(cand: str, transfer: dict | None) -> str:
    """Whether the winner is shown to transfer between tasks by the stored transfer rule."""
    unit = THRESHOLD_UNITS.get(cand)
    if not transfer or unit is None:
        study = (transfer or {}).get("study") or "the transfer study"
        return f"not shown to transfer: {study} did not read {cand}"
    mine = (transfer.get("units") or {}).get(unit) or {}
    if mine.get("reading") == "transfers":
        return transfer_note(unit, transfer)
    return "not shown to transfer (" + transfer_note(unit, transfer) + ")"


def predicted_lines(
    diagnoses: dict[str, dict],
    pred: dict,
    transfer: dict | None = None,
    target_length: int | None = None,
    pairs: dict | None = None,
) -> list[str]:
    """One risk line per dtype from a stored predictor with a winner: the winner's value, the gap its fit predicts
    with the prediction interval, the evidence's tasks and models, and whether it is shown to transfer."""
    w, desc = pred["winner"], (pred.get("candidates") or {}).get(pred["winner"], pred["winner"])
    xs, gaps = pred["curve"]["x"], pred["curve"]["gap"]
    half, (lo_x, hi_x) = pred["interval"]["half_width"], pred["range"]
    note = _winner_transfer(w, transfer)
    out = []
    for d, diag in diagnoses.items():
        reading = candidate_reading(w, diag, target_length, (pairs or {}).get(d))
        if reading is None:
            out.append(
                f"risk {d.upper()}: the stored predictor is {w} ({desc}), which this diagnosis did not measure; "
                "no risk is read"
            )
            continue
        gap = float(np.interp(reading.value, xs, gaps))
        where = (
            ""
            if lo_x <= reading.value <= hi_x
            else f"; outside the measured {lo_x:.3g}–{hi_x:.3g}, so the fit's end value: an extrapolation"
        )
        out.append(
            f"risk {d.upper()} here: predicted accuracy gap to FP32 {gap:+.3g} (95 % prediction interval "
            f"{gap - half:+.3g} to {gap + half:+.3g}; {pred['interval']['how']}) from {w} = {reading.value:.3g} "
            f"({desc}; {reading.how}){where} [the predictor {pred['study']} picked; evidence from {_evidence(pred)}; "
            f"{note}; {CAVEAT}]"
        )
    return out
