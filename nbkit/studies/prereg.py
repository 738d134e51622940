"""A pre-registered grid study: its rule is committed before its first run trains, and its card proves the order.

A study whose verdicts a reviewer signs states its question, outcome, rule and analysis in its module and commits
them before any of its runs starts. ``PreRegistered`` keeps the evidence: the first ``run`` that has anything to
train writes the start time and the code's commit to ``STARTED`` in the runs' folder (never rewritten), and
``store`` puts it on the card as ``training_started`` beside the rule's own record (``rule_text``, ``rule_record``:
the commit that fixed the rule and its time). ``nbkit.studies.amendments`` reads both to say whether the rule came
first; anything changed after that is an amendment on the card.

A study that tests a *prediction* (``predicted_arms``) also commits, with its rule, the predicted outcome of each of
those arms (``predictions``: one interval per predictor); ``run`` refuses to train until every such arm has one and
the rule is committed, and ``predicted_beside_observed`` puts each prediction beside the observed gap on the page.
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


class PredictionsMissing(ValueError):
    """A study that tests a prediction was asked to train before its rule held a committed prediction per arm."""


class PreRegistered(GridStudy):
    """A ``GridStudy`` with a committed rule and a recorded first start."""

    rule_text: str = ""
    """The rule in one line, as the card records it."""
    rule_record: dict = {}
    """``{"commit", "time"}`` of the commit that fixed ``rule_text`` (``git log -1 --format=%cI``); empty until then."""

    predicted_arms: tuple[str, ...] = ()
    """Arms whose outcome the rule predicts (empty: a study without predictions); ``run`` refuses to train until
    each has a prediction in ``predictions`` and ``rule_record`` says when the rule was committed."""
    predictions: dict = {}
    """``arm → predictor → {"gap", "lo", "hi"}``: the predicted outcome (gap to the reference) and its interval,
    committed with the rule before the first run."""

    def check_predictions(self) -> None:
        """Raise ``PredictionsMissing`` naming what is absent when the study predicts and its rule does not yet hold
        a committed prediction for every predicted arm (nothing trains then)."""
        if not self.predicted_arms:
            return
        missing = [a for a in self.predicted_arms if not self.predictions.get(a)]
        if missing:
            raise PredictionsMissing(
                f"{self.name}: the rule has no prediction for arm(s) {missing} (predicted arms: "
                f"{list(self.predicted_arms)}); commit them in `predictions` before any run trains"
            )
        bad = [
            f"{a}/{p}"
            for a in self.predicted_arms
            for p, v in self.predictions[a].items()
            if not (isinstance(v, dict) and {"gap", "lo", "hi"} <= set(v) and v["lo"] <= v["gap"] <= v["hi"])
        ]
        if bad:
            raise PredictionsMissing(
                f"{self.name}: prediction(s) {bad} are not {{'gap', 'lo', 'hi'}} with lo <= gap <= hi"
            )
        if not self.rule_record:
            raise PredictionsMissing(
                f"{self.name}: the predictions are not committed yet (`rule_record` is empty): commit the rule with "
                "its predictions and record that commit before any run trains"
            )

    def predicted_beside_observed(self, observed: dict[str, dict]) -> list[dict]:
        """One row per predicted arm and predictor: the committed prediction beside the observed gap and its CI
        (``observed``: ``arm → {"gap", "lo", "hi"}``, an arm not yet observed shown as such) and whether the
        observed gap lies inside the predicted interval (a prediction interval is for the gap itself; an overlap of
        two intervals would pass more easily the wider the observed CI, so it is not the test)."""
        rows = []
        for arm in self.predicted_arms:
            obs = observed.get(arm)
            for predictor, p in self.predictions.get(arm, {}).items():
                row = {
                    "arm": arm,
                    "predictor": predictor,
                    "predicted gap": p["gap"],
                    "predicted interval": (p["lo"], p["hi"]),
                    "observed gap": obs["gap"] if obs else None,
                    "observed CI": (obs["lo"], obs["hi"]) if obs else None,
                }
                row["inside"] = None if obs is None else bool(p["lo"] <= obs["gap"] <= p["hi"])
                rows.append(row)
        return rows

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
        trains: the card's proof that the rule came first. A study that predicts (``predicted_arms``) refuses first
        when its committed predictions are incomplete (``check_predictions``)."""
        self.check_predictions()
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
