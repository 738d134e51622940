"""The transfer question's third point (issue 51 item 4): do the toy tasks' harm thresholds locate SmolLM2's harm?

``harm_transfer_tiny_long`` asks whether the harm threshold measured on tiny-arith holds on tiny-long, in some dose
unit (``data/results/harm_threshold/thresholds.json``: per unit and task, the dose at which the paired gap to FP32
crosses −0.05, with its 95 % CI). SmolLM2-135M at its own answer length is a third task; it has no threshold of its
own (two doses, not a ladder), so each toy threshold is read as a prediction for each of its arms:

- **Expected** from the arm's committed step-0 dose (``PREDICTIONS[arm][unit]["value"]``): above the threshold's
  CI, *crosses*; below it, *does not cross*; inside it, *no prediction* (the threshold cannot say).
- **Observed** from the arm's one interval (the 95 % t-interval of the paired gap the rule reads): wholly below
  −0.05, *crossed*; wholly above, *did not cross*; otherwise *undecided*. A false "crossed" or "did not cross" is at
  most 2.5 % per arm.
- **Reading**: *agrees* or *contradicts* where both are decided, *cannot tell* where the arm is undecided.

Added after training began, blind (``AMENDMENTS``: no gap had been read, the page showed none); it moves no verdict
of the rule, whose per-token reading against tiny-arith's threshold it extends to both tasks and all four units.

As first written the count was per unit, so one arm's one interval counted once per unit (four times for fp32/fp16).
As amended after unblinding (``PER_ARM_AMENDMENT``) it is counted per arm (``per_arm``, ``per_arm_summary``): one
interval counts once per task, the units that predict for it are listed beside, and the page says what the table
could and could not show; the per-unit table and count stay beside.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbkit.studies.harm_threshold_rule import THRESHOLDS

HARM = -0.05
"""The harm line the thresholds are read at (the gap to FP32 at which a threshold is crossed)."""
UNITS = {
    "token_abs": "token_abs_logp_diff/mean",
    "seq_abs": "seq_log_ratio/abs_mean",
    "seq_kl": "seq_kl",
    "ess_deficit": "ess_seq_deficit",
}
"""SmolLM2's committed dose candidates → the threshold units of the same statistic (the units the transfer study
reads; the signed bias has no threshold)."""

AMENDMENTS = (
    {
        "key": "transfer",
        "commit": "1b77ae028a2a22d0ef479125f60ddd9285888312",
        "time": "2026-11-28T11:14:40+00:00",
        "what": "Added a reading: the transfer question's third point. Per dose unit (per-token |d log p|, sequence "
        "|sum log pi/mu|, sequence KL, 1/ESS - 1) and toy task (tiny-arith, tiny-long; their stored thresholds and "
        "95 % CIs), each arm's committed step-0 dose predicts a crossing of -0.05 when above the threshold's CI, none "
        "when below, nothing when inside; the arm's gap CI (the one the rule reads) observes a crossing when wholly "
        "below -0.05, none when wholly above, undecided otherwise; each pair reads agrees, contradicts or cannot "
        "tell, counted per task.",
        "why": "Issue 51 item 4 asks for a real LM at its own answer length as the third point of the transfer "
        "question; the rule had only tiny-arith's per-token threshold. Made while blind: no gap had been read.",
    },
)
"""Changes after training began (``nbkit.studies.amendments``); the commit and time are the commit that made it."""


def thresholds(path: Path = THRESHOLDS) -> dict[str, dict[str, dict]]:
    """``unit → task → {"outcome", "dose", "ci"}`` of the stored thresholds (the harm studies write them)."""
    return json.loads(Path(path).read_text())["units"]


def expected(dose: float, threshold: dict) -> str:
    """What a threshold predicts for an arm at ``dose``: ``crosses``, ``does not cross`` or ``no prediction``
    (inside the CI, or a threshold without a crossing)."""
    if threshold.get("outcome") != "crossing":
        return "no prediction"
    lo, hi = threshold["ci"]
    return "crosses" if dose > hi else "does not cross" if dose < lo else "no prediction"


def observed(obs: dict | None) -> str:
    """What an arm's gap CI shows: ``crossed``, ``did not cross``, ``undecided``, or ``blind`` (not read yet)."""
    if obs is None:
        return "blind"
    return "crossed" if obs["hi"] < HARM else "did not cross" if obs["lo"] > HARM else "undecided"


def reading(exp: str, obs: str) -> str:
    """``agrees`` / ``contradicts`` when both sides are decided; ``cannot tell`` when the arm is undecided; the
    side that says nothing otherwise (``no prediction``, ``blind``)."""
    if exp == "no prediction" or obs == "blind":
        return exp if exp == "no prediction" else "blind"
    if obs == "undecided":
        return "cannot tell"
    return "agrees" if (exp == "crosses") == (obs == "crossed") else "contradicts"


def table(predictions: dict, obs: dict[str, dict], stored: dict[str, dict[str, dict]]) -> list[dict]:
    """One row per unit, toy task and arm: the threshold and its CI, the arm's dose, what the threshold predicts,
    what the arm showed and the reading (``obs``: ``arm → {"lo", "hi"}``, empty while blind)."""
    rows = []
    for cand, unit in UNITS.items():
        for task, th in stored.get(unit, {}).items():
            for arm, preds in predictions.items():
                dose = preds[cand]["value"]
                exp, seen = expected(dose, th), observed(obs.get(arm))
                rows.append(
                    {
                        "unit": cand,
                        "task": task,
                        "threshold": th.get("dose"),
                        "95 % CI": th.get("ci"),
                        "arm": arm,
                        "dose": dose,
                        "expected": exp,
                        "observed": seen,
                        "reading": reading(exp, seen),
                    }
                )
    return rows


def summary(rows: list[dict]) -> str:
    """One sentence per toy task: how many of its predictions (unit × arm with one) agreed, contradicted or could
    not be told; while blind, how many it makes."""
    parts = []
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task and r["expected"] != "no prediction"]
        if any(r["reading"] == "blind" for r in mine):
            crosses = sum(r["expected"] == "crosses" for r in mine)
            parts.append(
                f"{task}'s thresholds predict {len(mine)} outcomes ({crosses} crossing{'' if crosses == 1 else 's'})"
            )
            continue
        counts = {k: sum(r["reading"] == k for r in mine) for k in ("agrees", "contradicts", "cannot tell")}
        parts.append(
            f"{task}'s thresholds: {counts['agrees']} of {len(mine)} predictions agree, {counts['contradicts']} "
            f"contradict, {counts['cannot tell']} cannot tell"
            + (
                " (" + ", ".join(f"{r['unit']} {r['arm']}" for r in mine if r["reading"] == "contradicts") + ")"
                if counts["contradicts"]
                else ""
            )
        )
    blind = any(r["reading"] == "blind" for r in rows)
    head = "The transfer question's third point (SmolLM2 at its own answer length"
    tail = "; read when the study is." if blind else "."
    return f"{head}, each toy threshold read as a prediction per unit and arm): " + "; ".join(parts) + tail


PER_ARM_AMENDMENT = {
    "key": "transfer-per-arm",
    "commit": "104483abe03cefc6710112527ed6f673512a5e21",
    "time": "2026-12-07T23:29:41+00:00",
    "what": "The transfer reading is counted per arm, not per unit: an arm's one gap interval counts once per toy "
    "task, its units' predictions listed beside it (agrees when every unit's prediction agrees, contradicts when every "
    "one contradicts, mixed otherwise, cannot tell when the interval spans -0.05), and the page says what the table "
    "could show: a 'does not cross' is contradicted only by an interval wholly below -0.05, a 'crosses' only by one "
    "wholly above. The per-unit table and its count stay beside, as first written.",
    "why": "Found after unblinding (issue 74): the per-unit count counted fp32/fp16's one interval four times per "
    "task (once per unit), and its '0 contradict' could not have come out otherwise, since no arm's interval lay "
    "wholly below -0.05 and nearly every prediction was 'does not cross'.",
}
"""The per-arm count (``per_arm``); commit and time: the commit that made it, recorded by the next."""


def per_arm(rows: list[dict], obs: dict[str, dict]) -> list[dict]:
    """One row per toy task and arm from ``table``'s rows: the arm's one interval (``obs``), what each unit with a
    prediction expects, what the interval showed and the one reading it gives (``agrees`` / ``contradicts`` when
    every predicting unit reads so, ``mixed: ...`` otherwise, ``cannot tell`` when undecided, ``no prediction``
    when no unit predicts)."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for arm in dict.fromkeys(r["arm"] for r in rows if r["task"] == task):
            mine = [r for r in rows if r["task"] == task and r["arm"] == arm and r["expected"] != "no prediction"]
            by_exp: dict[str, list[str]] = {}
            for r in mine:
                by_exp.setdefault(r["expected"], []).append(r["unit"])
            seen = observed(obs.get(arm))
            readings = {r["reading"] for r in mine}
            if not mine:
                said = "no prediction"
            elif seen in ("blind", "undecided"):
                said = reading(next(iter(by_exp)), seen)
            elif len(readings) == 1:
                said = readings.pop()
            else:
                said = "mixed: " + "; ".join(
                    f"{k} for {', '.join(r['unit'] for r in mine if r['reading'] == k)}" for k in sorted(readings)
                )
            o = obs.get(arm)
            out.append(
                {
                    "task": task,
                    "arm": arm,
                    "gap CI": [o["lo"], o["hi"]] if o else None,
                    "units' predictions": "; ".join(f"{e}: {', '.join(u)}" for e, u in by_exp.items()) or "none",
                    "observed": seen,
                    "reading": said,
                }
            )
    return out


def per_arm_counts(arms: list[dict]) -> dict[str, dict[str, list[str]]]:
    """``task → reading → arms`` of ``per_arm``'s rows with a prediction (a mixed reading counted as ``mixed``)."""
    out: dict[str, dict[str, list[str]]] = {}
    for r in arms:
        if r["reading"] != "no prediction":
            out.setdefault(r["task"], {}).setdefault(r["reading"].split(":")[0], []).append(r["arm"])
    return out


def per_arm_summary(arms: list[dict], obs: dict[str, dict]) -> str:
    """The per-arm count in one sentence, then what the table could and could not show: which arms' intervals could
    contradict a 'does not cross' (wholly below −0.05) or a 'crosses' (wholly above), and which were decided."""
    counts = per_arm_counts(arms)
    parts = []
    for task, by in counts.items():
        n = sum(len(v) for v in by.values())
        agree, contra, tell = by.get("agrees", []), by.get("contradicts", []), by.get("cannot tell", [])
        mixed = by.get("mixed", [])
        parts.append(
            f"{task}'s thresholds: {len(agree)} of {n} arms agree"
            + (f" ({', '.join(agree)})" if agree else "")
            + f", {len(contra)} contradict"
            + (f" ({', '.join(contra)})" if contra else "")
            + (f", {len(mixed)} mixed ({', '.join(mixed)})" if mixed else "")
            + f", {len(tell)} cannot tell"
            + (f" ({', '.join(tell)})" if tell else "")
        )
    predicted = [r for r in arms if r["reading"] != "no prediction"]
    crossing = [r for r in predicted if "crosses:" in r["units' predictions"]]
    only_not = len(predicted) - len(crossing)
    order = list(dict.fromkeys(r["arm"] for r in arms))
    read = {a: observed(obs.get(a)) for a in order}
    below = [a for a in order if read[a] == "crossed"]
    above = [a for a in order if read[a] == "did not cross"]
    spans = [a for a in order if read[a] == "undecided"]
    forced = not below and not any(read[r["arm"]] == "did not cross" for r in crossing)
    could = [
        f"What it could show: a 'does not cross' is contradicted only by an interval wholly below {HARM:g}, a "
        f"'crosses' only by one wholly above; {only_not} of the {len(predicted)} arm-and-task predictions say 'does "
        "not cross' on every unit"
        + (
            f", {len(crossing)} {'predicts' if len(crossing) == 1 else 'predict'} a crossing on some unit ("
            + ", ".join(f"{r['arm']} on {r['task']}" for r in crossing)
            + ")"
            if crossing
            else ""
        )
        + "."
    ]
    if below:
        could.append(f"{', '.join(below)}'s interval lay wholly below {HARM:g}.")
    else:
        could.append(f"No arm's interval lay wholly below {HARM:g}, so no 'does not cross' could be contradicted.")
    if forced:
        could.append(
            "'0 contradict' follows from the intervals (no arm was seen to cross"
            + (", and every arm predicted to cross spans the line" if crossing else "")
            + "), not from the thresholds passing a test."
        )
    if above:
        could.append(
            f"Only {', '.join(above)}'s interval lay wholly above {HARM:g}: "
            + ("its" if len(above) == 1 else "their")
            + " agreement, once per task, is what the table shows."
        )
    if spans:
        could.append(f"It cannot tell for {', '.join(spans)}, whose intervals span {HARM:g}.")
    could.append("The units of one arm share its one interval, so they are not separate tests.")
    return (
        "Counted per arm (as amended after unblinding; see the record: one interval counts once per task): "
        + "; ".join(parts)
        + ". "
        + " ".join(could)
    )


def per_arm_moved(rows: list[dict], obs: dict[str, dict]) -> list[str]:
    """What ``PER_ARM_AMENDMENT`` moved: each task's count per unit (as first written) → per arm."""
    if not obs:
        return []
    out = []
    counts = per_arm_counts(per_arm(rows, obs))
    for task, by in counts.items():
        mine = [r for r in rows if r["task"] == task and r["expected"] != "no prediction"]
        unit = {k: sum(r["reading"] == k for r in mine) for k in ("agrees", "contradicts", "cannot tell")}
        arm = {k: len(by.get(k, [])) for k in ("agrees", "contradicts", "cannot tell", "mixed")}
        out.append(
            f"transfer count, {task}: {unit['agrees']} of {len(mine)} predictions agree, {unit['contradicts']} "
            f"contradict, {unit['cannot tell']} cannot tell (per unit) → {arm['agrees']} of {sum(arm.values())} arms "
            f"agree, {arm['contradicts']} contradict, {arm['cannot tell']} cannot tell"
            + (f", {arm['mixed']} mixed" if arm["mixed"] else "")
            + " (per arm)"
        )
    return out
