"""Why the mismatch grows during a run: each arm's shift-share split (``nbkit.mismatch.shiftshare``) over its seeds, in
words.

For an arm of a stored study (one rollout format and correction, several seeds), the sequence-level mismatch of an
early window of steps is compared with a late one, and the change is split into (a) response length, (b) the mix
of tokens across π's entropy (or probability) bins and (c) the mismatch per token within a bin; the CI is a
bootstrap over the arm's runs (``shiftshare.bootstrap`` over lists of windows). ``table`` gives one row per arm and
binning; ``paragraph`` answers the question from those rows for the arms that broke and those that did not.
"""

from __future__ import annotations

from nbkit.mismatch import shiftshare
from nbkit.studies import prose

BINNINGS = ("entropy", "prob")
"""The binnings a split is shown for (``nbkit.mismatch.tokenbins.EDGES``)."""
NAMES = {"length": "response length", "mix": "token mix across bins", "per_bin": "mismatch per token within a bin"}
"""The parts in words."""
COLUMNS = {
    "arm": "arm",
    "binning": "binning",
    "runs": "runs",
    "early": "early M",
    "late": "late M",
    "change": "change",
    "change_ci": "change CI",
    **{k: v for p in shiftshare.PARTS for k, v in ((p, p), (f"{p}_ci", f"{p} CI"), (f"{p}_share", f"{p} share"))},
}
"""A ``table`` row's named fields → the headers it is shown under."""

# -- the paragraph's sentences: templates over a row's named fields, or values named beside them -------------
NO_BINS = "No run logged the token bins in both windows: the growth of the mismatch cannot be split."
HEAD = (
    "The sequence-level mismatch fell from the early to the late steps in {n_fell} of {arms} arms ({fell}) and grew "
    "in {n_grew} ({grew}); the rest changed within their CIs."
)
FEW = "{arm} ({runs} runs, fewer than {min_runs})"
DISAGREE = "{arm} (the binnings disagree: {parts})"
CLAIM = "{arm} ({status}; {runs} runs): {parts}."
CLAIM_PART = "by {binning}, {main}"
MAIN = (
    "{part}, {value:+.3g} ({ci}, {excluding} 0) of a total change of {change:+.3g} (early {early:.3g}, late {late:.3g})"
)
PART_CI = "CI {0:+.3g} to {1:+.3g}"
NO_CI = "no CI"
CLAIMS = "Where the change came from (the largest part, the same in both binnings, >= 5 runs): {claims}"
NO_CLAIM = "No claim for {arms}."


def split(runs: list[list[dict]], binning: str, early, late, n_boot: int = 2000, seed: int = 0):
    """The shift-share split of one arm's runs (``rows`` per seed) between the steps ``early`` and ``late``, with a
    bootstrap over runs (a single run: over steps); None when a run lacks the bins or a window."""
    try:
        e = [shiftshare.window(rows, binning, early) for rows in runs]
        lt = [shiftshare.window(rows, binning, late) for rows in runs]
    except ValueError:
        return None
    if not e:
        return None
    if len(e) == 1:
        return shiftshare.bootstrap(e[0], lt[0], n_boot=n_boot, seed=seed)
    return shiftshare.bootstrap(e, lt, n_boot=n_boot, seed=seed)


def table(arms: dict[str, list[list[dict]]], early, late, binnings=BINNINGS) -> list[dict]:
    """One row per arm and binning: early and late sequence mismatch, each part with its CI and share."""
    rows = []
    for arm, runs in arms.items():
        for b in binnings:
            s = split(runs, b, early, late)
            if s is None:
                continue
            row = {"arm": arm, "binning": b, "runs": len(runs), "early": s.early, "late": s.late}
            row["change"], row["change_ci"] = s.total, list(s.ci.get("total", (None, None)))
            for p in shiftshare.PARTS:
                row[p] = s.parts[p]
                row[f"{p}_ci"] = list(s.ci.get(p, (None, None)))
                row[f"{p}_share"] = s.shares[p]
            rows.append(row)
    return prose.display(rows, COLUMNS)


def largest(row: dict) -> str:
    """The part of ``row`` (``table``) with the largest absolute share of the change."""
    return max(shiftshare.PARTS, key=lambda k: abs(row[k]))


def _main_part(row: dict) -> str:
    """The part with the largest share of the change in ``row`` (named fields), with whether its CI excludes 0."""
    p = largest(row)
    lo, hi = row[f"{p}_ci"]
    sure = lo is not None and hi is not None and (lo > 0 or hi < 0)
    return MAIN.format_map(
        {
            **row,
            "part": NAMES[p],
            "value": row[p],
            "ci": PART_CI.format(lo, hi) if lo is not None and hi is not None else NO_CI,
            "excluding": "excluding" if sure else "including",
        }
    )


MIN_RUNS = 5
"""Runs an arm needs before its split is read as a claim (the rule's minimum for a verdict)."""


def _direction(row: dict) -> str:
    """``grew``, ``fell`` (the change's CI clear of 0) or ``unclear``."""
    lo, hi = row["change_ci"]
    if lo is None or hi is None or lo != lo or hi != hi:
        return "unclear"
    return "grew" if lo > 0 else "fell" if hi < 0 else "unclear"


def paragraph(rows: list[dict], broke: set[str], binnings=BINNINGS) -> str:
    """One paragraph from ``rows`` (``table``: every binning) under the growth rule as amended (``harm_threshold``'s
    ``AMENDMENTS``): first where the sequence-level mismatch fell and where it grew (its change's CI clear of 0);
    then a claim about which part carried the change only for an arm with >= ``MIN_RUNS`` runs whose binnings all
    put the largest part in the same place; every other arm is named with why it gets no claim. ``broke``: the arms
    whose gap's CI lies below the harm line."""
    by_arm: dict[str, dict[str, dict]] = {}
    for r in prose.named(rows, COLUMNS):
        if r["binning"] in binnings:
            by_arm.setdefault(r["arm"], {})[r["binning"]] = r
    if not by_arm:
        return NO_BINS
    first = next(iter(binnings))
    moved = {
        w: [a for a, b in by_arm.items() if _direction(b.get(first) or next(iter(b.values()))) == w]
        for w in ("fell", "grew")
    }
    said = [
        HEAD.format(
            n_fell=len(moved["fell"]),
            arms=len(by_arm),
            fell=", ".join(moved["fell"]) or "none",
            n_grew=len(moved["grew"]),
            grew=", ".join(moved["grew"]) or "none",
        )
    ]
    claims, none = [], []
    for arm, b in by_arm.items():
        parts = {k: largest(r) for k, r in b.items()}
        runs = min(r["runs"] for r in b.values())
        if runs < MIN_RUNS:
            none.append(FEW.format(arm=arm, runs=runs, min_runs=MIN_RUNS))
        elif len(parts) < len(binnings) or len(set(parts.values())) > 1:
            disagree = ", ".join(f"{k} {NAMES[v]}" for k, v in parts.items())
            none.append(DISAGREE.format(arm=arm, parts=disagree))
        else:
            status = "broke" if arm in broke else "did not break"
            by = "; ".join(CLAIM_PART.format(binning=k, main=_main_part(r)) for k, r in b.items())
            claims.append(CLAIM.format(arm=arm, status=status, runs=runs, parts=by))
    if claims:
        said.append(CLAIMS.format(claims=" ".join(claims)))
    if none:
        said.append(NO_CLAIM.format(arms="; ".join(none)))
    return " ".join(said)
