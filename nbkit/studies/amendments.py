"""Changes to a study's rule after its training began, on the record: what the card proves about pre-registration.

A stored study's card (``nbkit.results``) may hold

- ``rule``: the primary rule as first committed: ``{"what", "commit", "time"}``;
- ``training_started``: when its first run began: ``{"time", "commit", "evidence"}`` (the evidence says how the
  time was read, e.g. from the first stored sitting's date minus its wall time);
- ``amendments``: each change made after that: ``{"what", "when": {"commit", "time"}, "why", "verdicts_moved"}``;
- ``outcomes_read``: for a study that scores outcomes stored before its own runs (e.g. gaps from other studies):
  when they had last been stored and read before its rule: ``{"time", "commit", "evidence"}``.

A page may say a rule was "fixed before the results" only when the card proves it: the rule's commit time precedes
the first run's start, and no outcome it scores had been read before its commit (``outcomes_read``). An amendment is reported as made after training began (with how long after), never as fixed
before the results. ``record_lines`` writes those sentences; ``amend`` adds an amendment to a stored card.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

from nbkit import results
from nbkit.runtime import outputs

RECORD_KEYS = ("rule", "training_started", "amendments", "outcomes_read")
"""Card fields a later sitting of the same study carries over (``GridStudy.store(keep_stored=True)``)."""


@dataclass(frozen=True)
class Amendment:
    """One change to a study's rule or grid after its training began."""

    what: str
    """The change, in one sentence (the rule before and after)."""
    commit: str
    """The commit that made it."""
    time: str
    """That commit's time (ISO 8601 with zone)."""
    why: str
    """The reason given for it."""
    verdicts_moved: list[str] = field(default_factory=list)
    """Each verdict the change moved ("cell: before → after"); empty when none did."""

    def to_card(self) -> dict:
        return {
            "what": self.what,
            "when": {"commit": self.commit, "time": self.time},
            "why": self.why,
            "verdicts_moved": list(self.verdicts_moved),
        }


def _time(text: str, where: str) -> _dt.datetime:
    try:
        t = _dt.datetime.fromisoformat(str(text))
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not an ISO 8601 time (e.g. 2026-11-24T21:09:19+00:00)") from None
    if t.tzinfo is None:
        raise ValueError(f"{where}: {text!r} has no time zone; write it with one (+00:00)")
    return t


def read(card: dict) -> list[Amendment]:
    """The card's amendments (a clear error naming the first malformed one)."""
    out = []
    for i, a in enumerate(card.get("amendments") or []):
        missing = [k for k in ("what", "when", "why", "verdicts_moved") if k not in a] + [
            f"when.{k}" for k in ("commit", "time") if k not in (a.get("when") or {})
        ]
        if missing:
            raise ValueError(
                f"amendment {i} on the card of {card.get('study')!r} lacks {missing}; each needs what, "
                "when (commit, time), why and verdicts_moved"
            )
        _time(a["when"]["time"], f"amendment {i}'s time")
        out.append(Amendment(a["what"], a["when"]["commit"], a["when"]["time"], a["why"], list(a["verdicts_moved"])))
    return out


def training_start(card: dict) -> _dt.datetime | None:
    """When the study's first run began, if the card says."""
    t = (card.get("training_started") or {}).get("time")
    return _time(t, "training_started.time") if t else None


def before_training(card: dict, time: str) -> bool | None:
    """Whether ``time`` precedes the first run's start (None: the card names no start, so it proves nothing)."""
    start = training_start(card)
    return None if start is None else _time(time, "time") < start


def outcomes_read_first(card: dict) -> bool:
    """Whether the card says the outcomes its rule scores had been stored and read before the rule's commit."""
    rule, read = card.get("rule") or {}, (card.get("outcomes_read") or {}).get("time")
    return bool(rule.get("time") and read) and _time(read, "outcomes_read.time") < _time(rule["time"], "rule.time")


def rule_fixed_before_results(card: dict) -> bool:
    """True only when the card proves it: its rule's commit time precedes the first run's start, and the outcomes it
    scores were not read before it (``outcomes_read_first``)."""
    rule = card.get("rule") or {}
    return bool(rule.get("time")) and before_training(card, rule["time"]) is True and not outcomes_read_first(card)


def _span(minutes: float) -> str:
    """``"2 h 07 min"`` (``"46 min"`` under an hour)."""
    h, m = divmod(round(minutes), 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


def sitting_training_commits(card: dict) -> list[str | None]:
    """The commit that trained each sitting (``results.parts``) where the card records it, else None (never the
    commit checked out when a sitting was stored, which a later sitting's store may have moved past its training).
    The card records one: ``training_started``, written by the first run that trained; it is the first sitting's
    when it precedes that sitting's start (its date minus its wall time) and that start precedes every other
    sitting's. A card without the wall times to place it records none."""
    parts = results.parts(card)
    out: list[str | None] = [None] * len(parts)
    began, commit = training_start(card), (card.get("training_started") or {}).get("commit")
    if began is None or not commit or commit == "?":
        return out
    starts = []
    for p in parts:
        if p.get("wall_seconds") is None or not p.get("date"):
            return out
        starts.append(_time(p["date"], "a sitting's date") - _dt.timedelta(seconds=float(p["wall_seconds"])))
    first = min(range(len(parts)), key=starts.__getitem__)
    if began <= starts[first] and starts.count(starts[first]) == 1:
        out[first] = commit
    return out


def _short(t: str) -> str:
    return _time(t, "time").astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def record_lines(card: dict) -> list[str]:
    """Sentences for a page: what the card proves about the rule, then each amendment with when, why and the
    verdicts it moved. Empty for a card with none of these fields."""
    out = []
    rule, start = card.get("rule") or {}, training_start(card)
    began = card.get("training_started") or {}
    begun = (
        (
            f"{_short(began['time'])}, at commit `{str(began.get('commit', '?'))[:7]}`"
            + (f"; {began['evidence']}" if began.get("evidence") else "")
        )
        if start
        else ""
    )
    if rule:
        head = (
            f"The rule as first committed (`{str(rule.get('commit', '?'))[:7]}`, {_short(rule['time'])}: "
            f"{rule['what']})"
        )
        if rule_fixed_before_results(card):
            out.append(f"{head} precedes the first run's start ({begun}): that rule was fixed before the results.")
        elif start and before_training(card, rule["time"]) and outcomes_read_first(card):
            seen = card["outcomes_read"]
            ahead = (_time(rule["time"], "rule.time") - _time(seen["time"], "outcomes_read.time")).total_seconds()
            out.append(
                f"{head} precedes the first run's start ({begun}), but not the outcomes it scores: they had been "
                f"stored and read by {_short(seen['time'])} (`{str(seen.get('commit', '?'))[:7]}`, "
                f"{_span(ahead / 60)} before the rule's commit; {seen.get('evidence', 'no evidence recorded')}). "
                "The rule was fixed before its first run, not before the results (as first read, before the "
                "amendment below: 'that rule was fixed before the results')."
            )
        elif start:
            out.append(
                f"{head} is dated after the first run's start ({begun}): the card cannot show it was fixed in advance."
            )
        else:
            out.append(f"{head}; the card names no training start, so it cannot show the rule came first.")
    elif start:
        out.append(f"The card names no committed rule; the first run began {begun}.")
    for a in read(card):
        after = before_training(card, a.time)
        if after is None:
            when = "at a time the card cannot place against the training (no start recorded)"
        elif after:
            when = "before training began"
        else:
            minutes = (_time(a.time, "time") - start).total_seconds() / 60
            when = f"after training began: {minutes:,.0f} min after the first run started"
        moved = ("verdicts moved: " + "; ".join(a.verdicts_moved)) if a.verdicts_moved else "no verdict moved"
        out.append(
            f"Amendment, commit `{a.commit[:7]}`, {_short(a.time)}, {when}. {a.what} Why: {a.why} "
            f"{moved[0].upper() + moved[1:]}."
        )
    return out


def amend(study: str, amendment: Amendment, root: Path = results.RESULTS, **record) -> Path:
    """Add ``amendment`` to a stored study's card (one with the same ``what`` is replaced, not repeated);
    ``record``: ``rule``, ``training_started`` and ``outcomes_read`` set beside it. Returns the card's path."""
    bad = set(record) - {"rule", "training_started", "outcomes_read"}
    if bad:
        raise ValueError(
            f"unknown card record fields {sorted(bad)}; choose 'rule', 'training_started' or 'outcomes_read'"
        )
    path = results.study_dir(study, root) / results.CARD
    card = results.card(study, root)
    _time(amendment.time, "amendment time")
    for key, value in record.items():
        _time(value["time"], f"{key}.time")
        card[key] = value
    kept = [a for a in card.get("amendments") or [] if a.get("what") != amendment.what]
    card["amendments"] = [*kept, amendment.to_card()]
    outputs.write_json(path, card, indent=1)
    return path


def put(
    study: str, declared, moved: dict[str, list[str]] | None = None, root: Path = results.RESULTS, **record
) -> None:
    """Put a study's declared amendments (``{"key", "what", "commit", "time", "why"}`` each, as the study modules
    declare ``AMENDMENTS``) on its stored card, each with what it moved (``moved[key]``, computed from the stored
    runs; none when absent); ``record``: ``rule``, ``training_started`` and ``outcomes_read`` set beside them
    (``amend``)."""
    for a in declared:
        amend(
            study,
            Amendment(a["what"], a["commit"], a["time"], a["why"], list((moved or {}).get(a["key"], []))),
            root,
            **record,
        )
