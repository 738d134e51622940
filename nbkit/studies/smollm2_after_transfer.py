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
