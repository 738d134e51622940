"""The harm-threshold page: its figure, tables and sentences, filled from the study's thresholds and rows.

``Page`` is the part of ``nbkit.studies.harm_threshold.HarmThreshold`` (and of ``harm_transfer.HarmTransfer``) that
writes the page; the numbers come from the study's ``thresholds``, ``gap_matrix``, ``doses`` and ``mechanism``.
"""

from __future__ import annotations

import statistics

from nbkit.stats import threshold
from nbkit.stats.stats import mean_ci
from nbkit.studies import growth, prose
from nbkit.studies.harm_threshold_rule import EARLY, LATE, PRIMARY, UNITS


def mean_gap_ci(xs: list[float]) -> tuple[float | None, float | None, float | None]:
    """Mean gap and its 95 % t-interval over seeds (NaN bounds with one seed; as amended, ``AMENDMENTS``: the
    interval first shown was bounded in (−1, 1), which the verdicts never read); (None, None, None) with no gap."""
    return mean_ci(xs) if xs else (None, None, None)


PLANNED = (
    "Planned runs: {n} ({seeds} seeds × FP32 and {points} doses; {extras} formats placed on the axis × {extra_seeds} "
    "seeds{note}){after}."
)
"""The plan's count of runs (a page shows it while the study is not stored)."""


class Page:
    """The page of a harm-threshold study."""

    # -- the page ---------------------------------------------------------------------------------------------
    def figure(self, runs, meta):
        """The gap against the step-0 dose: mean paired gaps with CIs, the isotonic fit, the threshold and its CI,
        the harm line, and the formats placed on the axis (``nbkit.plots.doctor.gap_dose_figure``)."""
        from nbkit.plots.doctor import gap_dose_figure

        return gap_dose_figure(self.record(runs, meta), title=f"{self.title} ({self.task}, step-0 dose)")

    def table(self, runs, meta) -> list[dict]:
        pts, seeds, g = self.gap_matrix(runs, meta)
        fit = self.thresholds(runs, meta).get(PRIMARY)
        doses = {u: self.doses(runs, meta, u) for u in UNITS}
        fitted = {}
        if isinstance(fit, threshold.Threshold):  # the fit is in ascending dose; the table in the rule's order
            by_dose = dict(zip(fit.doses, fit.fitted, strict=True))
            fitted = {p: by_dose.get(doses[PRIMARY].get((p, "none"))) for p in pts}
        rows = []
        for j, p in enumerate(pts):
            xs = [x for x in g[:, j] if x == x]
            m, lo, hi = mean_gap_ci(xs)
            row = {"rollout": p, "seeds": len(xs)}
            row.update({f"dose: {u}": doses[u].get((p, "none")) for u in UNITS})
            row.update({"gap to fp32": m, "gap CI": [lo, hi] if lo is not None and lo == lo else None})
            row["isotonic fit"] = fitted.get(p)
            rows.append(row)
        return rows

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        est, committed = self.thresholds(runs, meta), self.thresholds(runs, meta, as_committed=True)
        thr = [
            {
                "unit": u,
                "outcome": t.outcome if isinstance(t, threshold.Threshold) else t,
                "threshold": t.dose if isinstance(t, threshold.Threshold) else None,
                "95 % CI (amended: doses and gaps resampled)": list(t.ci)
                if isinstance(t, threshold.Threshold)
                else None,
                "95 % CI as first committed (doses fixed)": list(committed[u].ci)
                if isinstance(committed[u], threshold.Threshold)
                else None,
                "bracket": list(t.bracket) if isinstance(t, threshold.Threshold) else None,
            }
            for u, t in est.items()
        ]
        pts = set(self.gap_matrix(runs, meta)[0])
        doses = self.doses(runs, meta)
        placed = [
            {
                "rollout": prose.arm(f, c),
                "seeds": len(gaps),
                f"dose: {PRIMARY}": doses.get((f, c)),
                "gap to fp32 (direction only)": statistics.fmean(gaps.values()) if gaps else None,
            }
            for (f, c), gaps in self.arm_gaps(runs, meta).items()
            if not (f in pts and c == "none")
        ]
        mech, _ = self.mechanism(runs, meta)
        return [
            ("Thresholds per dose unit (primary first)", thr),
            ("Placed on the axis, not fitted", placed),
            (
                f"Why the mismatch grew: shift-share split of the sequence mismatch, steps {EARLY.start}–{EARLY.stop - 1}"
                f" against {LATE.start}–{LATE.stop - 1} (CI: bootstrap over runs)",
                mech,
            ),
        ]

    def findings(self, runs, meta, rows) -> list[str]:
        est, committed = self.thresholds(runs, meta), self.thresholds(runs, meta, as_committed=True)
        out = []

        def first(u):  # the reading as first committed, beside the amended one
            c = committed[u]
            return (
                f"; as first committed, doses fixed at their means: {c.describe()}"
                if isinstance(c, threshold.Threshold)
                else ""
            )

        main = est.get(PRIMARY)
        if isinstance(main, threshold.Threshold):
            out.append(
                f"Harm threshold in {UNITS[PRIMARY]} at step 0 (the rule's answer, CI as amended: each drawn seed's "
                f"doses resampled with its gaps): {main.describe()}{first(PRIMARY)}."
            )
        for u, t in est.items():
            if u != PRIMARY and isinstance(t, threshold.Threshold):
                out.append(f"In {UNITS[u]}: {t.describe()} (secondary unit){first(u)}.")
        mech, broke = self.mechanism(runs, meta)
        if mech:
            out.append(growth.paragraph(mech, broke))
        short = sorted({r["seeds"] for r in rows} - {len(self.rule_seeds)})
        if short and rows:
            out.append(
                f"The rule planned {len(self.rule_seeds)} seeds per dose; doses here have {short}: the study stopped short of "
                "its plan."
            )
        return out

    def planned_runs(self, note: str = "", after: str = "") -> str:
        """``PLANNED`` over the default grid's seeds, doses and extras (``note`` inside its parenthesis, ``after``
        behind it)."""
        d = self.defaults()
        seeds, points, extras, extra_seeds = (len(d[k]) for k in ("seeds", "points", "extras", "extra_seeds"))
        n = seeds * (1 + points) + extra_seeds * extras
        return PLANNED.format(
            n=n, seeds=seeds, points=points, extras=extras, extra_seeds=extra_seeds, note=note, after=after
        )

    def plan(self) -> list[str]:
        return [self.rule_line(), self.planned_runs()]
