"""The harm-transfer rule's reading: do the two tasks' thresholds agree, per dose unit, as first committed (the CIs
overlap) and as amended (a joint bootstrap's ratio CI against the band), and its record in ``THRESHOLDS``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from nbkit.stats import threshold
from nbkit.studies import harm_threshold as H
from nbkit.studies.harm_transfer_rule import BAND, REFERENCE_TASK, STUDY, TASK


def _interval(t: dict) -> tuple[float, float] | None:
    """Where a task's threshold lies (stored ``Threshold.to_json``): the CI of a crossing (a censored end reaches 0
    or ∞), below or above the measured doses for a threshold outside them, None when none was estimable."""
    out = t.get("outcome")
    if out == "crossing":
        # the rule as first committed read the CI with the doses fixed (``ci_as_committed`` once amended)
        lo, hi = t.get("ci_as_committed") or t.get("ci") or (None, None)  # stored without a CI: 0 and ∞
        return (0.0 if lo is None else lo, math.inf if hi is None else hi)
    if out == "below_range":
        return (0.0, t["doses"][0])
    if out == "above_range":
        return (t["doses"][-1], math.inf)
    return None


def columns(first: str = REFERENCE_TASK, second: str = TASK) -> dict[str, str]:
    """``agreement``'s named fields → the transfer table's headers (the two tasks named)."""
    return {
        "unit": "unit",
        "first_outcome": f"{first}: outcome",
        "first_threshold": f"{first}: threshold",
        "first_ci": f"{first}: CI",
        "second_outcome": f"{second}: outcome",
        "second_threshold": f"{second}: threshold",
        "second_ci": f"{second}: CI",
        "ratio": f"ratio {second}/{first}",
        "overlap": "CIs overlap",
        "agrees": "agrees",
    }


def agreement(units: dict[str, dict[str, dict]], first: str = REFERENCE_TASK, second: str = TASK) -> list[dict]:
    """The transfer table of the rule: per unit (``units``: unit → task → stored threshold, as
    ``harm_threshold.THRESHOLDS`` holds them) the two tasks' thresholds and CIs, the ratio ``second``/``first`` (both
    crossings), whether the intervals overlap, and whether the unit *agrees* (both crossings and overlapping CIs);
    named fields (``columns`` gives their headers)."""
    rows = []
    for unit in H.UNITS:
        a, b = units.get(unit, {}).get(first), units.get(unit, {}).get(second)
        ia, ib = (_interval(a) if a else None), (_interval(b) if b else None)
        both = bool(a and b and a.get("outcome") == b.get("outcome") == "crossing")
        overlap = None if ia is None or ib is None else max(ia[0], ib[0]) <= min(ia[1], ib[1])
        rows.append(
            {
                "unit": unit,
                "first_outcome": a.get("outcome") if a else "not stored",
                "first_threshold": a.get("dose") if a else None,
                "first_ci": list(ia) if ia else None,
                "second_outcome": b.get("outcome") if b else "not stored",
                "second_threshold": b.get("dose") if b else None,
                "second_ci": list(ib) if ib else None,
                "ratio": b["dose"] / a["dose"] if both else None,
                "overlap": overlap,
                "agrees": both and bool(overlap),
            }
        )
    return rows


NONE_AGREES = "No unit's thresholds agree between {first} and {second} ({said}): no dose unit transfers here."
UNIT_READING = "{unit}: {first} {first_outcome}, {second} {second_outcome}{cis}"
TRANSFERABLE = (
    "The transferable dose (thresholds on {first} and {second} agree, 95 % CIs overlap): {named}; ratio "
    "{second}/{first} beside each."
)


def verdict(rows: list[dict], first: str = REFERENCE_TASK, second: str = TASK) -> str:
    """The rule's sentence from ``agreement``'s rows: the units that agree with their ratios, or that none does."""
    agree = [r for r in rows if r["agrees"]]
    if not agree:
        said = "; ".join(
            UNIT_READING.format_map(
                {
                    **r,
                    "first": first,
                    "second": second,
                    "cis": "" if r["overlap"] is None else f", CIs {'overlap' if r['overlap'] else 'do not overlap'}",
                }
            )
            for r in rows
        )
        return NONE_AGREES.format(first=first, second=second, said=said)
    named = ", ".join(f"{H.UNITS[r['unit']]} (ratio {r['ratio']:.3g})" for r in agree)
    return TRANSFERABLE.format(first=first, second=second, named=named)


def band_verdict(joint: dict[str, dict], first: str = REFERENCE_TASK, second: str = TASK) -> str:
    """The amended rule's sentence (``TRANSFER_RULE``) from each unit's joint bootstrap (unit → ``Transfer.to_json``):
    the units that transfer with their ratios and CIs, or that none does, with every unit's reading."""
    said = "; ".join(
        f"{H.UNITS[u]}: {j['verdict']} (ratio "
        + ("none: a task has no crossing" if j["ratio"] is None else f"{j['ratio']:.3g}")
        + f", 95 % CI {j['ci'][0]:.3g}–{j['ci'][1]:.3g})"
        for u, j in joint.items()
    )
    lo, hi = next(iter(joint.values()))["band"] if joint else BAND
    yes = [u for u, j in joint.items() if j["verdict"] == threshold.TRANSFERS]
    head = (
        f"Transfer by the amended rule (joint bootstrap of both tasks' seeds, the ratio {second}/{first}'s 95 % CI "
        f"read against the band [{lo:g}, {hi:g}]): "
    )
    if yes:
        return head + f"the dose that transfers: {', '.join(H.UNITS[u] for u in yes)}. Per unit: {said}."
    return head + f"no unit is shown to transfer. Per unit: {said}."


def overlap_note(
    units: dict[str, dict[str, dict]],
    lengths: tuple[float | None, float | None] = (None, None),
    first: str = REFERENCE_TASK,
    second: str = TASK,
) -> str | None:
    """What an agreement by overlap can and cannot say, from the numbers (beside the rule: ``AMENDMENTS``' second
    entry): the range of the agreeing units' ratios, how wide each task's 95 % CI is (its upper end over its lower
    end), and the two tasks' mean response ``lengths`` (``first``'s, ``second``'s). None when no unit agrees."""
    rows = [r for r in agreement(units, first, second) if r["agrees"]]
    if not rows:
        return None
    lo, hi = min(rows, key=lambda r: r["ratio"]), max(rows, key=lambda r: r["ratio"])
    widths = [c[1] / c[0] for r in rows for c in (r["first_ci"], r["second_ci"]) if 0 < c[0] and math.isfinite(c[1])]
    said = (
        f"Beside the rule (an amendment after the reading; no verdict moved): among the units that agree, the ratio "
        f"{second}/{first} runs from {lo['ratio']:.3g} ({H.UNITS[lo['unit']]}) to {hi['ratio']:.3g} "
        f"({H.UNITS[hi['unit']]})" + (", on both sides of 1" if lo["ratio"] < 1 < hi["ratio"] else "")
    )
    if widths:
        said += f", and their 95 % CIs span {min(widths):.2g}× to {max(widths):.2g}× (upper end over lower end)"
    said += (
        ": at this width, overlapping CIs say the two tasks' thresholds cannot be told apart with these seeds, not "
        "that they are equal."
    )
    if all(lengths):
        said += (
            f" {second}'s responses are {lengths[1] / lengths[0]:.2g}× {first}'s ({lengths[1]:.3g} against "
            f"{lengths[0]:.3g} tokens): a unit that grows with length moves by about that factor between the tasks."
        )
    return said


def transfer_record(
    units: dict[str, dict[str, dict]],
    first: str = REFERENCE_TASK,
    second: str = TASK,
    joint: dict[str, dict] | None = None,
) -> dict:
    """The rule's transfer reading as ``THRESHOLDS`` keeps it: the two tasks, the verdict
    and per unit whether it agrees, the ratio ``second``/``first`` and whether the CIs overlap (``agreement``: the
    rule as first committed); with ``joint`` (unit → ``Transfer.to_json``) the amended rule's reading too: the
    verdict by the band, and per unit its ``reading``, ratio CI and band (``agrees_as_committed`` keeps the first)."""
    rows = agreement(units, first, second)
    out = {
        "tasks": [first, second],
        "study": STUDY,
        "verdict": verdict(rows, first, second),
        "units": {r["unit"]: {"agrees": r["agrees"], "ratio": r["ratio"], "cis_overlap": r["overlap"]} for r in rows},
    }
    if joint:
        out["verdict_as_committed"] = out["verdict"]
        out["verdict"] = band_verdict(joint, first, second)
        out["band"] = list(BAND)
        for u, j in joint.items():
            r = out["units"].setdefault(u, {})
            r.update(
                {
                    "agrees_as_committed": r.get("agrees"),
                    "agrees": j["verdict"] == threshold.TRANSFERS,
                    "reading": j["verdict"],
                    "joint_ratio": j["ratio"],
                    "ratio_ci": j["ci"],
                }
            )
    return out


def with_transfer(thresholds: dict, joint: dict[str, dict] | None = None) -> dict:
    """``thresholds`` (as ``THRESHOLDS`` holds them) with the rule's transfer reading (``transfer_record``, the
    amended one from ``joint``) when both tasks' are in them; unchanged otherwise."""
    if not {REFERENCE_TASK, TASK} <= set(thresholds.get("tasks", {})):
        return thresholds
    return {
        **thresholds,
        "unit_note": f"the primary unit, pre-registered on {REFERENCE_TASK}",
        "transfer": transfer_record(thresholds.get("units", {}), joint=joint),
    }


def _read(path: Path) -> dict:
    """A stored JSON file ({} when absent)."""
    return json.loads(Path(path).read_text()) if Path(path).is_file() else {}
