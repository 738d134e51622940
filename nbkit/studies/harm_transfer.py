"""Does the harm threshold transfer? The harm-threshold study again on tiny-long, at answers ~6× tiny-arith's.

``nbkit.studies.harm_threshold`` measures where harm starts on tiny-arith (31.5-token answers) in four candidate
dose units. A threshold means something for a user's model only in a unit that travels: this study repeats the
measurement on a second task whose answers are ~6× longer (tiny-long, ``REGIME``: chains of ``long_arith`` steps,
~180 tokens) and reads, for each unit, whether the two tasks' thresholds agree. The analysis, record, figure and
mechanism are ``HarmThreshold``'s, unchanged; only the task (model, data, judge set, length, lr) and the doses differ.

The rule (``RULE_TEXT``, committed as ``RULE_RECORD`` says once the pilot had fixed ``LR``):

- **Task.** tiny-long on ``DATASET`` (the regime's perfectible set, notebook 01's recipe on ``TRAIN_POOL`` problems:
  ``tiny_long_regimes.build_set``), ``max_completion_length`` = the regime's reference length + 24, judged every 10 steps on
  ``JUDGE_SET`` (the same recipe on a disjoint pool: ``build_judge_set``) by an FP32 engine, 1 sample a problem.
- **lr.** Fixed by ``pilot`` before the rule is committed: FP32 rollouts, seed 0, 50 steps at each of ``PILOT_LRS``;
  an lr *learns* when its judge accuracy at step 50 exceeds step 0's by more than ``PILOT_RISE``; ``LR`` = the
  smallest lr that learns (written into this module with the rule). If none learns, the rule is not committed as it
  stands (another regime or lr range first).
- **Doses.** ``POINTS``: e8m3 (the anchor below e8m2, as on tiny-arith) and ``pick_points(ladder, TARGETS)`` on
  tiny-long's own offline ladder (``LADDER_FILE``, measured before any training at this regime's length and
  prompts): e8m2, the channel points nearest in log dose to the targets log-spaced between, e8m1.
- **Runs, dose, outcome, threshold.** As ``harm_threshold``: FP32 trainer, HF engine, GRPO, 50 steps, FP32 rollouts
  paired on every seed, seeds 0–4 seed by seed, the step-0 mismatch in each of ``harm_threshold.UNITS``, the mean
  held-out judge accuracy of steps 40 and 50, ``nbkit.stats.threshold.estimate`` per unit. No extras (the mechanism
  reads
  the dosed runs themselves). *Amended* (``AMENDMENTS``, after training began, before any outcome was read): the
  extras BF16, FP16 and NVFP4 with μ as π_old on seeds 0–2, placed on the axis and read by the mechanism, not fitted,
  as on tiny-arith.
- **Transfer.** For each unit, tiny-arith's threshold (stored in ``harm_threshold.THRESHOLDS`` by its own study) and
  tiny-long's: ``agreement`` gives the ratio tiny-long / tiny-arith (both crossings only) and whether the 95 % CIs
  overlap (a censored CI end reaches 0 or ∞). A unit *agrees* when both tasks show a crossing and the CIs overlap;
  the units that agree are the transferable doses; if none agrees, the study says so.

    python -m nbkit.studies.harm_transfer pilot --store     # the lr pilot (FP32, 50 steps, PILOT_LRS) -> PILOT_FILE
    python -m nbkit.studies.harm_transfer ladder            # tiny-long's offline ladder -> LADDER_FILE
    python -m nbkit.studies.harm_transfer train-set         # DATASET (the regime's perfectible set, TRAIN_POOL)
    python -m nbkit.studies.harm_transfer judge-set         # JUDGE_SET (the held-out set, disjoint from DATASET)
    python -m nbkit.studies.harm_transfer transfer          # the transfer reading into THRESHOLDS (store does it too)
    nbkit study harm_transfer_tiny_long run | store         # the grid (after the rule is committed)

The study as data (the constants named above, the rule and its amendments) is ``nbkit.studies.harm_transfer_rule``;
the transfer reading is ``nbkit.studies.harm_transfer_reading``; the pilot, ladder and judge set made before the rule
(and the commands above) are ``nbkit.studies.harm_transfer_setup``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from nbkit import results
from nbkit.runtime import outputs
from nbkit.stats import threshold
from nbkit.studies import harm_threshold as H
from nbkit.studies import harm_threshold_rule as HR
from nbkit.studies import tiny_long_regimes as TL
from nbkit.studies.harm_transfer_reading import (
    _read,
    agreement,
    band_verdict,
    columns,
    overlap_note,
    verdict,
    with_transfer,
)
from nbkit.studies.harm_transfer_rule import (  # the study as data (read through this module too)
    AMENDMENTS,
    BAND,
    EXTRA_SEEDS,
    EXTRAS,
    LADDER_FILE,
    LR,
    PILOT_FILE,
    PILOT_LRS,
    POINTS,
    REFERENCE_TASK,
    REGIME,
    RULE_RECORD,
    RULE_TEXT,
    SEEDS,
    SOUND_AMENDMENTS,
    STEPS,
    STUDY,
    TASK,
    base_config,
)
from nbkit.studies.harm_transfer_setup import build_judge_set, measure_ladder, pilot, points_from_ladder


def kw_options(kw: dict) -> dict:
    """The grid options among ``store``'s keyword arguments (``keep_stored`` and ``replace`` are not options)."""
    return {k: v for k, v in kw.items() if k not in ("keep_stored", "replace")}


class HarmTransfer(H.HarmThreshold):
    """``HarmThreshold`` on tiny-long at ``REGIME``. Options: ``points``, ``seeds``, ``extras``, ``extra_seeds``,
    ``steps``, ``output_dir``, ``overrides`` (any ``RLConfig`` field, ``learning_rate`` among them)."""

    name = STUDY
    rule_text = RULE_TEXT
    rule_record = RULE_RECORD
    task = TASK
    rule_points = POINTS
    rule_seeds = SEEDS
    extras = EXTRAS
    extra_seeds = EXTRA_SEEDS
    steps = STEPS
    measured_on = (
        f"tiny-long (a ~1 M-parameter model) at ~{TL.max_tokens(REGIME) - TL.TOKEN_MARGIN}-token answers, 50 GRPO "
        "steps, FP32 trainer, HF engine"
    )
    title = "Does the harm threshold transfer? tiny-long at 6× tiny-arith's answer length"
    question = (
        "Is the harm threshold measured on tiny-arith the same on tiny-long at answers ~6× longer, in some dose unit? "
        f"{len(POINTS)} doses from e8m3 to e8m1 (picked from tiny-long's own offline ladder), 5 seeds each, FP32 "
        "paired by seed; for each candidate unit the thresholds of the two tasks, their ratio, and whether their "
        "CIs overlap. Rule fixed in nbkit.studies.harm_transfer before any of its runs trained."
    )
    statistic = (
        "as harm_threshold_tiny_arith (judge: the held-out set of the regime, 1 sample a problem, FP32 engine; "
        "outcome: mean of the judgments at steps 40 and 50); transfer: the threshold ratio tiny-long/tiny-arith "
        "and the overlap of the 95 % bootstrap CIs per unit."
    )
    output_dir = f"runs/{STUDY}"
    toy = {
        "points": ["e8m2", "dial-e8m1-c1of16"],
        "seeds": [0],
        "steps": 1,
        "overrides": {
            "learning_rate": 1e-4,
            "prompts_per_step": 2,
            "num_generations": 2,
            "max_completion_length": 8,
            "judge_every": 0,
        },
    }

    def base_config(self, **overrides):
        return base_config(**overrides)

    # -- sittings: blind until the last one ---------------------------------------------------------------------
    def missing(self, runs, options: dict | None = None) -> list[str]:
        """The runs of the grid at ``options`` that ``runs`` lacks, in grid order. ``options`` None: the stored
        study's grid when ``runs`` are its runs (``sitting``); other runs (a toy grid, a live slice) are not a sitting
        of the rule, and nothing is missing from them."""
        options = self.sitting(runs) if options is None else options
        return [] if options is None else [label for label in self.grid(**options) if label not in runs]

    def sitting(self, runs) -> dict | None:
        """The stored study's grid options when ``runs`` are exactly its stored runs, else None."""
        if not (results.study_dir(self.name) / results.CARD).is_file():
            return None
        card = self.card()
        return self.grid_options(card) if set(runs) == set(card.get("runs") or []) else None

    def progress(self, runs, options: dict | None = None) -> list[dict]:
        """Per arm of the grid (rollout format and correction), the runs stored of those planned and their seeds:
        all a page shows before the last sitting."""
        planned: dict[str, list[str]] = {}
        for label in self.grid(**(options if options is not None else self.sitting(runs) or {})):
            arm, seed = label.rsplit("-s", 1)
            planned.setdefault(arm, []).append(seed)
        rows = []
        for arm, seeds in planned.items():
            stored = [s for s in seeds if f"{arm}-s{s}" in runs]
            rows.append(
                {
                    "rollout": arm.removesuffix("-none").replace("-mu_old", " + mu_old"),
                    "runs stored": f"{len(stored)} of {len(seeds)}",
                    "seeds stored": ", ".join(stored) or "none",
                }
            )
        return rows

    def table(self, runs, meta) -> list[dict]:
        return self.progress(runs) if self.missing(runs) else super().table(runs, meta)

    def store(self, *, wall_seconds: float, command: str, root: Path = results.RESULTS, **kw) -> Path:
        """``HarmThreshold.store`` with ``AMENDMENTS`` put on the card."""
        path = super().store(wall_seconds=wall_seconds, command=command, root=root, **kw)
        self.record_amendments(root)
        return path

    amendments = tuple({**a, "key": a.get("key", f"first-{i}")} for i, a in enumerate(AMENDMENTS)) + SOUND_AMENDMENTS

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """``HarmThreshold.moves`` with the transfer rule's (each unit's reading as first committed → amended) and
        the first amendments' own (stated by hand: none moved a verdict)."""
        out = super().moves(runs, meta)
        for i, a in enumerate(AMENDMENTS):
            out[f"first-{i}"] = list(a["verdicts_moved"])
        if self.missing(runs):
            return out
        rows, joint = {r["unit"]: r for r in self.transfer(runs, meta)}, self.joint(runs, meta)
        for u, j in joint.items():
            before = "agrees" if rows[u]["agrees"] else "does not agree"
            out.setdefault("transfer", []).append(f"{H.UNITS[u]}: {before} → {j['verdict']}")
        return out

    def thresholds_record(self, old: dict | None, root: Path = results.RESULTS) -> dict:
        """``HarmThreshold``'s, with the rule's transfer reading (``with_transfer``, amended by the joint bootstrap:
        whether each unit transfers); written once every run of the rule is stored
        (``thresholds_ready``)."""
        runs = self.load(root)
        return with_transfer(
            super().thresholds_record(old, root), self.joint(runs, self.meta(self.card(root)["configs"]["runs"]), root)
        )

    def joint(self, runs, meta, root: Path = results.RESULTS) -> dict[str, dict]:
        """The amended transfer rule's reading per unit (``TRANSFER_RULE``: ``threshold.transfer`` of tiny-arith's
        stored study, under ``root``, and this one's ``runs``: each task's gaps with its seeds' own doses, the band
        ``BAND``, ``H.N_BOOT`` replicates, seed ``H.BOOT_SEED``): unit → ``Transfer.to_json``; {} when tiny-arith's
        study is not stored under ``root``."""
        key = (id(runs), str(root))
        if getattr(self, "_joint", (None,))[0] == key:  # the page asks twice (table and findings)
            return self._joint[1]
        ref = H.HarmThreshold()
        try:
            ref_runs = ref.load(root)
            ref_meta = ref.meta(ref.card(root)["configs"]["runs"])
        except FileNotFoundError:  # tiny-arith's study is not stored here: the rule as first committed alone
            return {}
        out = {}
        for unit in H.UNITS:
            tasks = []
            for study, r, m in ((ref, ref_runs, ref_meta), (self, runs, meta)):
                _, _, g = study.gap_matrix(r, m)
                d = study.dose_matrix(r, m, unit)
                tasks.append((g, np.where(np.isfinite(g), d, np.nan)))
            try:
                t = threshold.transfer(*tasks, band=BAND, harm=H.HARM, n_boot=H.N_BOOT, seed=H.BOOT_SEED)
            except ValueError:
                continue
            out[unit] = t.to_json()
        self._joint = (key, out)
        return out

    def thresholds_ready(self, root: Path, options: dict) -> bool:
        """The tiny-long thresholds join ``THRESHOLDS`` only once every run of the rule is
        stored: an earlier sitting stores its runs and nothing read from them."""
        return not self.missing(self.load(root), kw_options(options))

    # -- the transfer ----------------------------------------------------------------------------------------
    def units(self, runs, meta, stored: Path = H.THRESHOLDS, record: dict | None = None) -> dict[str, dict[str, dict]]:
        """Per unit, the stored thresholds of the other tasks (``stored``: tiny-arith's) and this study's from
        ``runs`` (unit → task → ``Threshold.to_json``); ``record``: ``self.record(runs, meta)`` when already made."""
        units = _read(stored).get("units", {})
        mine = (self.record(runs, meta) if record is None else record)["units"]
        return {u: {**units.get(u, {}), TASK: mine[u][TASK]} for u in H.UNITS}

    def transfer(self, runs, meta, stored: Path = H.THRESHOLDS) -> list[dict]:
        """``agreement`` of tiny-arith's stored thresholds (``stored``) with this study's, computed from ``runs``."""
        return agreement(self.units(runs, meta, stored))

    def figure(self, runs, meta):
        """Per unit, both tasks' isotonic gap-vs-dose fits with their thresholds and CIs
        (``nbkit.plots.transfer.transfer_figure``), each panel titled with the unit's agreement and ratio; None
        before the last sitting."""
        from nbkit.plots.transfer import transfer_figure

        if self.missing(runs):
            return None
        units = self.units(runs, meta)
        return transfer_figure(units, H.UNITS, agreement(units))

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        if self.missing(runs):
            return []
        joint = self.joint(runs, meta)
        shown = {**columns(), **{k: f"{v} (doses fixed)" for k, v in columns().items() if k.endswith("_ci")}}
        table = [
            {
                **{shown[k]: v for k, v in r.items() if k != "agrees"},
                "agrees (as first committed)": r["agrees"],
                "joint ratio": joint.get(r["unit"], {}).get("ratio"),
                "ratio 95 % CI (joint bootstrap)": joint.get(r["unit"], {}).get("ci"),
                f"reading (amended: band [{BAND[0]:g}, {BAND[1]:g}])": joint.get(r["unit"], {}).get("verdict"),
            }
            for r in self.transfer(runs, meta)
        ]
        return [
            ("Transfer: each unit's thresholds on tiny-arith and tiny-long", table),
            *super().page_tables(runs, meta, rows),
        ]

    def findings(self, runs, meta, rows) -> list[str]:
        missing = self.missing(runs)
        if missing:
            return [
                f"{len(runs)} of the rule's {len(runs) + len(missing)} runs are stored; the rest train in later "
                "sittings. The rule is read once, after the last sitting: until then this page shows which runs "
                "are stored and nothing measured by them (no dose, gap, threshold or transfer)."
            ]
        record = self.record(runs, meta)  # the thresholds' bootstrap, once
        units = self.units(runs, meta, record=record)
        lengths = (
            _read(H.THRESHOLDS).get("tasks", {}).get(REFERENCE_TASK, {}).get("response_length"),
            record["tasks"][TASK].get("response_length"),
        )
        note = overlap_note(units, lengths)
        joint = self.joint(runs, meta)
        return [
            band_verdict(joint),
            "As first committed (a unit agrees when both tasks cross and their 95 % CIs overlap; replaced by the "
            "amendment above, shown beside it): " + verdict(agreement(units)),
            *([note] if note else []),
            *super().findings(runs, meta, rows),
        ]

    def plan(self) -> list[str]:
        lr = f"lr {LR:g}" if LR is not None else "lr not yet fixed (the pilot fixes it)"
        return [self.rule_line(), self.planned_runs(", by amendment", f", {lr}")]


def store_transfer(root: Path = results.RESULTS) -> Path | None:
    """Add the transfer reading to the thresholds stored under ``root`` (``with_transfer``; ``HarmTransfer.store``
    writes it with them once every run of the rule is stored). None when no thresholds or not both tasks' are
    stored."""
    path = Path(root) / H.THRESHOLDS.relative_to(results.RESULTS)
    study = HarmTransfer()
    runs = study.load(root)
    joint = study.joint(runs, study.meta(study.card(root)["configs"]["runs"]), root) if runs else None
    read = with_transfer(_read(path), joint)
    return outputs.write_json(path, read) if "transfer" in read else None


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m nbkit.studies.harm_transfer", description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("pilot", "ladder", "train-set", "judge-set", "points", "transfer"))
    p.add_argument("--lrs", type=float, nargs="+", default=list(PILOT_LRS), help="pilot: candidate lrs")
    p.add_argument("--steps", type=int, default=STEPS, help="pilot: steps per run (the rule: 50)")
    p.add_argument("--output-dir", default=f"runs/{STUDY}_pilot", help="pilot: where its runs go")
    p.add_argument("--store", action="store_true", help=f"pilot: also write the record to {PILOT_FILE}")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    if a.what == "pilot":
        res = pilot(a.lrs, a.steps, output_dir=a.output_dir, store=PILOT_FILE if a.store else None)
        for k, v in res["runs"].items():
            print(
                f"lr {k}: judge {v['judge']}; rise {v['rise']}; learns: {v['learns']}; "
                f"{v['seconds_per_step']} s/step, {v['seconds_per_judgment']} s/judgment"
            )
        print(f"smallest lr that learns (rise > {res['rise']}): {res['lr']}")
    elif a.what == "ladder":
        rec = measure_ladder()
        print(json.dumps(rec["doses"], indent=1))
        print("points:", points_from_ladder(rec["doses"]))
    elif a.what == "points":
        print(points_from_ladder(HR.ladder_record(LADDER_FILE)["doses"]))
    elif a.what == "transfer":
        path = store_transfer()
        print(
            f"wrote the transfer reading into {path}" if path else f"{HR.THRESHOLDS} lacks {REFERENCE_TASK} or {TASK}"
        )
    elif a.what == "train-set":
        print(TL.build_set(REGIME).card["counts"])
    else:
        print(build_judge_set().card["counts"])
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
