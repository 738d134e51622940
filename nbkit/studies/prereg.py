"""A pre-registered grid study: its rule is committed before its first run trains, and its card proves the order.

A study whose verdicts a reviewer signs states its question, outcome, rule and analysis in its module and commits
them before any of its runs starts. ``PreRegistered`` keeps the evidence: the first ``run`` that has anything to
train writes the start time and the code's commit to ``STARTED`` in the runs' folder (never rewritten), and
``store`` puts it on the card as ``training_started`` beside the rule's own record (``rule_text``, ``rule_record``:
the commit that fixed the rule and its time). ``nbkit.studies.amendments`` reads both to say whether the rule came
first; anything changed after that is an amendment on the card.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from nbkit import results
from nbkit.runtime import outputs
from nbkit.studies.base import GridStudy

STARTED = "started.json"
"""File in the runs' folder the first training ``run`` writes (its start time; never rewritten)."""


class PreRegistered(GridStudy):
    """A ``GridStudy`` with a committed rule and a recorded first start."""

    rule_text: str = ""
    """The rule in one line, as the card records it."""
    rule_record: dict = {}
    """``{"commit", "time"}`` of the commit that fixed ``rule_text`` (``git log -1 --format=%cI``); empty until then."""

    def run(
        self,
        shard=(0, 1),
        progress=True,
        keep_stored=False,
        root=results.RESULTS,
        overwrite=False,
        threads=1,
        workers=None,
        **options,
    ):
        """``GridStudy.run``, writing the first training start to ``STARTED`` (never rewritten) before anything
        trains: the card's proof that the rule came first."""
        grid = self.grid(**options)
        if any(not self.finished(c) for c in grid.values()):
            path = self.folder(options) / STARTED
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                outputs.write_json(
                    path,
                    {
                        "time": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                        **results.git_state(),
                        "shard": list(shard),
                    },
                )
        return super().run(shard, progress, keep_stored, root, overwrite, threads, workers, **options)

    def started(self, options: dict) -> dict | None:
        """The card's ``training_started``, read from ``STARTED`` in the runs' folder (None before any run)."""
        path = Path(self.folder(options)) / STARTED
        if not path.is_file():
            return None
        started = json.loads(path.read_text())
        return {
            "time": started["time"],
            "commit": started.get("commit") or "?",
            "evidence": f"written by the first `nbkit study {self.name} run` that trained "
            f"(shard {started.get('shard')}) before its first run began",
        }

    def card_record(self, options: dict) -> dict:
        """The rule's record for the card (``rule_text`` with ``rule_record``) and the first training start."""
        out = {"rule": {"what": self.rule_text, **self.rule_record}} if self.rule_record else {}
        started = self.started(options)
        if started:
            out["training_started"] = started
        return out

    def rule_line(self) -> str:
        """The rule as a page states it while nothing is stored: committed (with commit and time) or not yet."""
        if self.rule_record:
            return (
                f"The rule, committed at `{self.rule_record['commit'][:7]}` ({self.rule_record['time']}) before any "
                f"of the study's runs: {self.rule_text}."
            )
        return f"The rule (not yet committed): {self.rule_text}."
