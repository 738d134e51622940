"""The ``smollm2_after`` record corrected after unblinding (issue 74 item 1): readings added beside the rule's,
each an amendment on the card (``nbkit.studies.amendments``) with what it moved computed from the stored runs.

- **Machine deviation.** ``MACHINE_AMENDMENT`` says every arm of a seed trains on one machine; the card's sittings
  show a gap whose arm and FP32 reference ran on different CPUs (``crossed``). Each such arm is read on every seed
  (the rule's reading) and without those seeds, both computed (``deviation_rows``).

- **The closest predictor called descriptive** (made by 8c87cb7 after unblinding, recorded here): when every
  observed gap's CI half-width exceeds the spread of the predictors' errors, the ranking describes these seeds and
  tests no predictor against another (``descriptive``).
- **Training commits.** The provenance line named each sitting by the commit checked out when it was stored; it
  names the commit that trained a sitting where the card records one (``amendments.sitting_training_commits``) and
  says so where it does not (``sitting_commit``).

- **Answer length.** The question as committed stays word for word; a sentence after it names the runs' answer cap
  (``answer_length_question``) and the answer names their length computed from the stored runs (``answer_length``).

The rule (``smollm2_after_rule``) is untouched: every reading here is shown beside the one it corrects.
"""

from __future__ import annotations

import statistics

from nbkit import results
from nbkit.studies import amendments

MACHINE_DEVIATION_AMENDMENT = {
    "key": "machine-deviation",
    "commit": "cbabf205e77cc63e2ba5440aa5ce6c29e503ede7",
    "time": "2026-12-07T23:11:26+00:00",
    "what": "A reading added beside the rule's: a seed whose arm and FP32 reference trained on different CPUs (the "
    "card's sittings name each run's machine) is named, and its arm is read twice, on every seed as the rule reads it "
    "and without those seeds, both computed (gap, 95 % t-interval, the rule's verdict, the per-token threshold "
    "reading). The rule's reading on every seed stays the one its verdicts use.",
    "why": "Found after unblinding (issue 74): fp16-s3 trained on the AVX512 AMD EPYC (sitting of 2026-12-02) while "
    "fp32-s3, fp32-fp16r-s3, fp32-bf16r-s3 and bf16-s3 trained on the Intel Xeon (2026-11-28), against the machine "
    "amendment's 'every arm of a seed trains on one machine'; that gap is the study's most extreme, so the page "
    "shows what fp16/fp16 reads without it.",
}
"""The machine deviation (``crossed``); commit and time: the commit that made it, recorded by the next."""


def cpu_of(sittings: list[dict]) -> dict[str, str]:
    """``run label → its sitting's CPU`` (``results.machine_text``: model, cores, flags and kernel caps)."""
    return {lab: results.machine_text(p.get("machine") or {}) for p in sittings for lab in p.get("runs") or []}


def short_cpu(sittings: list[dict]) -> dict[str, str]:
    """``run label → its sitting's CPU model and half-precision flags`` (what a sentence names)."""
    return {
        lab: f"{(p.get('machine') or {}).get('cpu')} ({', '.join((p.get('machine') or {}).get('cpu_flags') or [])})"
        for p in sittings
        for lab in p.get("runs") or []
    }


def crossed(meta: dict[str, dict], sittings: list[dict], arm_of, reference: str) -> dict[str, dict[int, dict]]:
    """``arm → seed → {"arm run", "reference run", "arm CPU", "reference CPU"}`` for each gap whose arm run and
    reference run (same seed) trained on different CPUs by the card (``cpu_of``; ``arm_of``: coordinates → arm
    name; the CPUs named short, ``short_cpu``)."""
    cpu, short = cpu_of(sittings), short_cpu(sittings)
    ref = {m["seed"]: lab for lab, m in meta.items() if arm_of(m) == reference}
    out: dict[str, dict[int, dict]] = {}
    for lab, m in sorted(meta.items()):
        r = ref.get(m["seed"])
        if arm_of(m) == reference or r is None or lab not in cpu or r not in cpu or cpu[lab] == cpu[r]:
            continue
        out.setdefault(arm_of(m), {})[m["seed"]] = {
            "arm run": lab,
            "reference run": r,
            "arm CPU": short[lab],
            "reference CPU": short[r],
        }
    return out


def deviation_rows(observed, gaps: dict[str, dict[int, float]], crossings, verdict, reading) -> list[dict]:
    """Two rows per arm with a crossed seed (``crossed``): read on every seed (the rule's reading) and without the
    crossed seeds. ``observed(seeds)``: ``arm → {"gap", "lo", "hi", "seeds"}`` on ``seeds`` (None: every seed);
    ``gaps``: ``arm → seed → gap``; ``verdict(arm, obs)``: the rule's; ``reading(obs)``: the per-token threshold's
    crossed / did not cross / undecided."""
    every = observed(None)
    rows = []
    for arm, by_seed in crossings.items():
        if arm not in every:
            continue
        out = sorted(by_seed)
        kept = observed(set(gaps.get(arm, {})) - set(out)).get(arm)
        left = f"seed{'s' if len(out) > 1 else ''} {', '.join(map(str, out))} left out"
        for name, o in (
            (f"every seed (the rule's reading, {o_n(every[arm])})", every[arm]),
            (f"{left} ({o_n(kept)})", kept),
        ):
            rows.append(
                {
                    "arm": arm,
                    "read on": name,
                    "gap": o["gap"] if o else None,
                    "95 % CI": [o["lo"], o["hi"]] if o else None,
                    "verdict": verdict(arm, o) if o else "not run",
                    "per-token threshold reading": reading(o) if o else "—",
                }
            )
    return rows


def o_n(obs: dict | None) -> str:
    """``"9 seeds"`` of an observation (``"no seed"`` without one)."""
    return results.count(obs["seeds"], "seed") if obs else "no seed"


def deviation_sentence(crossings: dict[str, dict[int, dict]], gaps: dict[str, dict[int, float]], rows) -> str:
    """The machine deviation in one sentence: which runs trained on which CPU, the crossed gap against the study's
    largest, and each arm's reading with and without those seeds (``deviation_rows``); "" when no gap crossed."""
    if not crossings:
        return ""
    where = "; ".join(
        f"{c['arm run']} trained on {c['arm CPU']} while {c['reference run']} trained on {c['reference CPU']}"
        for by_seed in crossings.values()
        for c in by_seed.values()
    )
    largest = max((abs(g), a, s) for a, by_seed in gaps.items() for s, g in by_seed.items())
    n = sum(len(by_seed) for by_seed in gaps.values())
    said = []
    for arm, by_seed in crossings.items():
        for s in sorted(by_seed):
            if (g := gaps.get(arm, {}).get(s)) is not None:
                top = f", the largest of the study's {n} gaps in size" if (largest[1], largest[2]) == (arm, s) else ""
                said.append(f"{arm}'s gap on seed {s} is {g:+.3f}{top}")

    def one(r):
        if r["gap"] is None:
            return f"{r['read on']}: not read"
        lo, hi = r["95 % CI"]
        return (
            f"{r['read on']}: {r['gap']:+.3f} (95 % CI {lo:+.3f} to {hi:+.3f}), {r['verdict']}, per-token threshold "
            f"reading {r['per-token threshold reading']}"
        )

    read = "; ".join(
        f"{every['arm']} on {one(every)}; with {one(without)}" for every, without in zip(rows[::2], rows[1::2])
    )
    return (
        f"Machine deviation (a reading added after unblinding; see the record): {where}, against the machine "
        f"amendment's 'every arm of a seed trains on one machine'. {'; '.join(said)}. {read}."
    )


SITTINGS_AMENDMENT = {
    "key": "training-commits",
    "commit": "cebeceff525ce7d6a85206470da58b9fb9dbb092",
    "time": "2026-12-07T23:18:14+00:00",
    "what": "The provenance line named each sitting by the commit checked out when it was stored (56ae903 for the "
    "first), which reads as the commit that trained it. It now names the commit that trained a sitting where the "
    "card records one (the first sitting: 08a7c42, the card's training_started, written by the first run that "
    "trained, before that sitting's start) and says 'training commit not on the card' for every other sitting, each "
    "with the commit it was stored at beside.",
    "why": "Found after unblinding (issue 74): the card records one training commit (started.json is written once, "
    "by the first run that trains); the commit a later sitting trained at is not on the card, and the page does not "
    "guess it from the store commit or from commit messages.",
}
"""The sittings line's commits (``sitting_commit``); commit and time: the commit that made it, recorded by the next."""


def sitting_commit(card: dict, index: int) -> str:
    """How the provenance line names sitting ``index``'s commit: the one that trained it where the card records it
    (``amendments.sitting_training_commits``), else that the card does not; the commit it was stored at beside."""
    p = results.parts(card)[index]
    stored = f"`{(p.get('commit') or 'unknown')[:10]}`" + (" with uncommitted changes" if p.get("dirty") else "")
    trained = amendments.sitting_training_commits(card)[index]
    if trained:
        return f"training commit `{trained[:10]}` (the card's training_started; stored at {stored})"
    return f"a training commit not on the card (stored at {stored})"


def sittings_moved(card: dict) -> list[str]:
    """What ``SITTINGS_AMENDMENT`` moved on the provenance line: each sitting whose commit as named before (the
    stored-at commit) differs from its training commit, and the sittings whose training commit is not on the card."""
    trained = amendments.sitting_training_commits(card)
    parts = results.parts(card)
    out = [
        f"provenance, sitting {i + 1} ({str(p.get('date'))[:16]}): commit {str(p.get('commit'))[:7]} (stored at) → "
        f"training commit {t[:7]}"
        for i, (p, t) in enumerate(zip(parts, trained, strict=True))
        if t and t != p.get("commit")
    ]
    unknown = [i + 1 for i, t in enumerate(trained) if not t]
    if unknown:
        out.append(
            f"provenance, sittings {', '.join(map(str, unknown))}: their stored-at commits → training commit not on "
            "the card (stored-at commit beside)"
        )
    return out


CLOSEST_CAVEAT_AMENDMENT = {
    "key": "closest-caveat",
    "commit": "8c87cb79fff1d53d2080ca426051d8b41f475fd7",
    "time": "2026-12-02T13:59:00+00:00",
    "what": "The closest-predictor sentence, which named the candidate with the smallest mean |observed - predicted| "
    "gap, now adds, when every observed gap's CI half-width exceeds the spread of the candidates' errors, that the "
    "ranking describes these seeds and tests no predictor against another. The ranking and the rule's verdicts are "
    "unchanged.",
    "why": "Made after unblinding (8c87cb7, 6.6 min after the page unblinded at 968b8ab, 13:52 UTC), on reading "
    "half-widths of 0.038-0.091 against errors 0.014-0.034: a ranking inside the noise is no test. 8c87cb7 did "
    "not put it on the card as an amendment; recorded on the card on 2026-12-07 (issue 74).",
}
"""The post-unblinding caveat of 8c87cb7 (``descriptive``), on the record as the commit that made it."""


TIE = 0.005
"""Errors within this of the smallest are named closest together (the rule's ties)."""


def descriptive(observed: dict[str, dict], close: list[dict]) -> tuple[float, float] | None:
    """``(smallest, largest)`` CI half-width of the observed gaps when even the smallest exceeds the spread of the
    candidates' mean errors (``close``, smallest first): the ranking then tests no predictor against another;
    None otherwise (or with nothing read)."""
    if not observed or not close:
        return None
    errors = [r["mean |observed − predicted|"] for r in close]
    half = [(o["hi"] - o["lo"]) / 2 for o in observed.values()]
    return (min(half), max(half)) if min(half) > errors[-1] - errors[0] else None


def caveat_moved(observed: dict[str, dict], close: list[dict]) -> list[str]:
    """What ``CLOSEST_CAVEAT_AMENDMENT`` moved: the closest-predictor reading, where the caveat applies."""
    half = descriptive(observed, close)
    if half is None:
        return []
    errors = [r["mean |observed − predicted|"] for r in close]
    tied = [r["predictor"] for r in close if r["mean |observed − predicted|"] - errors[0] <= TIE]
    return [
        f"closest-predictor reading: {', '.join(tied)} named closest → a ranking that describes these seeds "
        f"and tests no predictor against another (CI half-widths {half[0]:.3f}-{half[1]:.3f} against errors "
        f"{errors[0]:.3f}-{errors[-1]:.3f})"
    ]


ANSWER_LENGTH_AMENDMENT = {
    "key": "answer-length",
    "commit": "8743356747f65edeb49716fe9460068b3df08228",
    "time": "2026-12-07T23:34:20+00:00",
    "what": "The study's question, as committed, stays word for word and is followed by a sentence naming the runs' "
    "answer cap (16 tokens); the answer (the findings' first sentence) names the answer length computed from the "
    "stored runs: the longest answer and the mean length over every training step's rollouts. No reading changes.",
    "why": "Found after unblinding (issue 74): the answers were at most 16 tokens and about 4 on average, and the "
    "mismatch the rule reads was measured on answers that short, while the collapse the question is about was seen "
    "at thousands of tokens; the page did not say what length its answer holds for.",
}
"""The answer length named in the question and the answer; commit and time: the commit that made it, recorded by the next."""


MEAN_LENGTH, MAX_LENGTH, CAPPED = "completions/mean_length", "completions/max_length", "completions/clipped_ratio"
"""TRL's per-step logs of the rollouts' answers: mean and longest length in tokens, and the fraction cut at the cap."""


def answer_length_question(cap: int) -> str:
    """The sentence the amended question adds after the committed one (``ANSWER_LENGTH_AMENDMENT``)."""
    return (
        f"As amended after unblinding (see the record): asked of short answers, at most {cap} tokens (the runs' cap; "
        "the answer gives their mean length), not of the thousands of tokens where the paper's collapse was seen."
    )


def answer_length(runs: dict[str, list[dict]]) -> dict | None:
    """``{"mean", "max", "capped", "steps"}`` of the rollouts' answers over every logged training step of ``runs``:
    the mean of each step's mean length in tokens, the longest answer, the mean fraction cut at the cap, and the
    steps counted; None when no step logged a length."""
    rows = [r for rs in runs.values() for r in rs if isinstance(r.get(MEAN_LENGTH), (int, float))]
    if not rows:
        return None
    return {
        "mean": statistics.fmean(r[MEAN_LENGTH] for r in rows),
        "max": max(r.get(MAX_LENGTH, 0) for r in rows),
        "capped": statistics.fmean(r.get(CAPPED, 0.0) for r in rows),
        "steps": len(rows),
    }
