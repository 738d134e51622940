"""PPO with a critic, FP16 vs BF16 on the sanity test (the paper's PPO generalisation), stored for notebook 03.

``nbkit study ppo_tiny_arith run`` trains the ``ppo`` preset on tiny-arith in both precisions for a few seeds (HF
rollout engine in the training dtype, so μ comes from BF16 or FP16 weights) and ``... store`` stores the finished
runs as ``data/results/ppo_tiny_arith/`` (``nbkit.results``); ``--set seeds=[1]`` runs a part, so a study can be
trained in pieces and stored once.
"""

from __future__ import annotations

from nbkit.records import runlog, schema
from nbkit.stats.stats import mean_ci, t_quantile
from nbkit.studies import ppo_critic, prose
from nbkit.studies.base import GridStudy, add_run
from nbkit.studies.ppo_recipe import OUTPUT_DIR, STUDY, TAIL, base_config

SHARED_WITH_GRPO = (
    "model",
    "dataset",
    "template",
    "grader",
    "learning_rate",
    "prompts_per_step",
    "num_generations",
    "max_completion_length",
    "gradient_checkpointing",
)
"""The fields notebook 03's PPO slice takes from its GRPO runs: the same task, sizes and learning rate (and the
same memory-for-time choice, which changes no number)."""


PANELS = (
    (schema.PPO_APPROX_KL, "approx KL(π_old ‖ π) per minibatch", True),
    (schema.VALUE_LOSS, "critic's clipped value loss", True),
    (schema.VALUE_EXPLAINED_VARIANCE, "critic's explained variance", False),
    ("accuracy", "training accuracy", False),
)
"""Panels of ``curves`` (``nbkit.plots.training.training_curves`` layout): the paper's exploding KL and value loss."""


def curves(runs: dict[str, list[dict]], smooth: int = 1):
    """KL, value loss, explained variance and accuracy against step, runs overlaid."""
    from nbkit.plots import training

    fig = training.training_curves(runs, panels=PANELS, smooth=smooth)
    fig.update_layout(title="PPO with a critic: FP16 vs BF16")
    return fig


def table(runs: dict[str, list[dict]], meta: dict[str, dict], tail: int = 5) -> list[dict]:
    """One row per run: the PPO diagnostics averaged over the run (max KL too) and over its last ``tail`` rollouts
    (``meta``: each run's coordinates, ``nbkit.records.runlog.coords``)."""
    out = []
    for label, rows in sorted(runs.items()):
        dtype, seed = meta[label]["dtype"], meta[label]["seed"]

        def col(key, rows=rows):
            return [r[key] for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]]

        mean = prose.mean3
        kl, acc, ev = col(schema.PPO_APPROX_KL), col("accuracy"), col(schema.VALUE_EXPLAINED_VARIANCE)
        out.append(
            {
                "run": label,
                "dtype": dtype,
                "seed": seed,
                "steps": schema.optimiser_steps(rows),
                "approx KL (mean)": mean(kl),
                "approx KL (max)": float(f"{max(kl):.3g}") if kl else None,
                "value loss (first 5 → last 5)": f"{mean(col(schema.VALUE_LOSS)[:5])} → {mean(col(schema.VALUE_LOSS)[-5:])}",
                "explained variance (last 5 rollouts)": mean(ev[-tail:]),
                "accuracy (first → last 5 rollouts)": f"{mean(acc[:tail])} → {mean(acc[-tail:])}",
                "clip fraction (mean)": mean(col(schema.PPO_CLIP_FRACTION)),
                "mean |Δ log p|": mean(col(schema.TOKEN_ABS_LOGP_DIFF)),
                "s/step": mean(col(schema.TIME_STEP)),
            }
        )
    return out


SUMMARY = (
    (schema.KL_K3, "token KL[μ‖π] (mismatch, k3 ≥ 0), run mean", None, True),
    (schema.SEQ_KL, "sequence KL[μ‖π] (mismatch, k1: a sample can be < 0), run mean", None, False),
    (schema.TOKEN_ABS_LOGP_DIFF, "mean |Δ log p| per token (mismatch), run mean", None, True),
    (schema.PPO_APPROX_KL, "approx KL(π_old ‖ π) (k3 ≥ 0), run mean", None, True),
    (schema.VALUE_LOSS, f"value loss, last {TAIL} steps", TAIL, True),
    (schema.VALUE_EXPLAINED_VARIANCE, f"explained variance, last {TAIL} steps", TAIL, False),
)
"""What the precision comparison reports per run: ``(metric, label, window, positive)``; window None = the whole
run, else the values logged in its last ``window`` optimiser steps (the critic's error once it has had the run to
learn; as amended, ``AMENDMENTS``: first the last ``window`` logged values, which for a metric logged once per
rollout reached back 80 steps; shown beside as ``AS_FIRST_SHOWN``); positive: the metric cannot be negative, so its
interval over seeds is taken on the log scale (``positive_mean_ci``)."""
AS_FIRST_SHOWN = " (as first shown: last {n} logged values)"
"""Suffix of the windowed metrics' labels as first computed (the last ``window`` logged values), beside the steps."""


def positive_mean_ci(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean of positive values and a t-interval that stays above 0: on the log scale of the mean (standard error by
    the delta method, SE / mean), mapped back; to first order the plain t-interval. NaN bounds below 2 values."""
    import math
    import statistics

    m = statistics.fmean(xs)
    if len(xs) < 2 or m <= 0:
        return m, float("nan"), float("nan")
    half = t_quantile(0.5 + level / 2, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs)) / m
    return m, m * math.exp(-half), m * math.exp(half)


def per_seed(runs: dict[str, list[dict]], meta: dict[str, dict]) -> dict[str, dict[int, dict[str, float]]]:
    """``dtype → seed → label → value`` of every ``SUMMARY`` metric (a run that never logs a metric lacks it)."""
    out: dict = {}
    for label, rows in runs.items():
        values = {}
        last = max((r.get(schema.STEP, 0) for r in rows), default=0)
        for key, name, window, _ in SUMMARY:
            logged = [
                (r.get(schema.STEP, 0), r[key])
                for r in rows
                if isinstance(r.get(key), (int, float)) and r[key] == r[key]
            ]
            xs = [v for step, v in logged if not window or step > last - window]
            if xs:
                values[name] = sum(xs) / len(xs)
            if window and logged:  # the reading as first shown, beside
                first = [v for _, v in logged[-window:]]
                values[name + AS_FIRST_SHOWN.format(n=window)] = sum(first) / len(first)
        out.setdefault(meta[label]["dtype"], {})[int(meta[label]["seed"])] = values
    return out


def _labels() -> list[tuple[str, bool]]:
    """``(label, positive)`` of every reported metric: ``SUMMARY``'s, each windowed one followed by its reading as
    first shown (``AS_FIRST_SHOWN``)."""
    out = []
    for _, name, window, positive in SUMMARY:
        out.append((name, positive))
        if window:
            out.append((name + AS_FIRST_SHOWN.format(n=window), positive))
    return out


def _interval(xs: list[float], positive: bool = False) -> dict:
    m, lo, hi = positive_mean_ci(xs) if positive and min(xs) > 0 else mean_ci(xs)
    return {"mean": m, "95 % CI": None if lo != lo else [lo, hi], "seeds": len(xs)}


def precision_table(runs: dict[str, list[dict]], meta: dict[str, dict]) -> list[dict]:
    """Per dtype and metric: the mean over seeds of each run's value with its 95 % t-interval (seeds as units)."""
    seeds = per_seed(runs, meta)
    out = []
    for dtype in sorted(seeds, key=lambda d: ("fp16", "bf16", "fp32").index(d) if d in ("fp16", "bf16", "fp32") else 9):
        for name, positive in _labels():
            xs = [v[name] for _, v in sorted(seeds[dtype].items()) if name in v]
            if xs:
                out.append({"dtype": dtype, "metric": name, **_interval(xs, positive)})
    return out


PAIRED = {
    "metric": "metric",
    "diff": "{a} − {b}",
    "ci": "95 % CI",
    "seeds": "seeds",
    "ratio": "{a} / {b}",
    "ratio_ci": "{a} / {b} 95 % CI",
}
"""A paired row's named fields → the headers ``paired_difference`` shows them under (``{a}``, ``{b}``: the dtypes)."""


def paired_rows(runs: dict[str, list[dict]], meta: dict[str, dict], a: str = "bf16", b: str = "fp16") -> list[dict]:
    """Per metric, a row of named fields (``PAIRED``' keys): ``a − b`` paired by seed (the seeds both dtypes have),
    mean with its 95 % t-interval; for a positive metric also the ratio ``a / b`` (geometric mean of the per-seed
    ratios, t-interval on the log scale)."""
    import math

    seeds = per_seed(runs, meta)
    if a not in seeds or b not in seeds:
        return []
    out = []
    for name, positive in _labels():
        both = sorted(s for s in set(seeds[a]) & set(seeds[b]) if name in seeds[a][s] and name in seeds[b][s])
        if not both:
            continue
        diff = _interval([seeds[a][s][name] - seeds[b][s][name] for s in both])
        row = {"metric": name, "diff": diff["mean"], "ci": diff["95 % CI"], "seeds": diff["seeds"]}
        logs = [
            math.log(seeds[a][s][name] / seeds[b][s][name])
            for s in both
            if positive and seeds[a][s][name] > 0 and seeds[b][s][name] > 0
        ]
        row["ratio"], row["ratio_ci"] = None, None
        if logs and len(logs) == len(both):
            m, lo, hi = mean_ci(logs)
            row["ratio"], row["ratio_ci"] = math.exp(m), None if lo != lo else [math.exp(lo), math.exp(hi)]
        out.append(row)
    return out


def paired_difference(
    runs: dict[str, list[dict]], meta: dict[str, dict], a: str = "bf16", b: str = "fp16"
) -> list[dict]:
    """``paired_rows`` under their headers (``PAIRED``), as the page shows them."""
    return prose.display(paired_rows(runs, meta, a, b), {k: v.format(a=a, b=b) for k, v in PAIRED.items()})


AMENDMENTS = (
    {
        "key": "last_steps",
        "commit": "a6c9174adf4ac334fef2221e2572ff67cfe71a59",
        "time": "2026-11-27T18:28:36+00:00",
        "what": "The value loss and explained variance 'last 20 steps' read the values logged in the last 20 "
        "optimiser steps; they had read the last 20 logged values, which for explained variance (logged once per "
        "rollout) covered steps 21–100. The reading as first shown stays beside it.",
        "why": "Issue 50 item 7: the label said steps, the code read rows.",
    },
)
"""Changes to the page's readings after the runs (``nbkit.studies.amendments``), put on the card by
``record_amendments`` with the readings each moved."""


# -- the page's sentences: templates over a row's named fields, or values named beside them -----------------
DIFF = "BF16 − FP16 in {metric}, paired over {seeds} seeds: {diff:+.3g} ({interval}){ratio_text}."
CI = "95 % CI {0:+.3g} to {1:+.3g}"
NO_CI = "one seed, no interval"
RATIO = "; BF16/FP16 {ratio:.3g}×{ratio_interval}"
RATIO_CI = " (95 % CI {0:.3g}–{1:.3g})"
MISMATCH = (
    "BF16's training-time mismatch is {ratio:.1f}× FP16's (mean |Δ log p| over steps and seeds); the largest approx "
    "KL of any seed is {kl_fp16:.3g} (FP16) and {kl_bf16:.3g} (BF16), far from the paper's BF16 PPO KL > 40."
)
EV = "{mean:.3g} ({DTYPE}, {n_seeds})"
CRITIC = (
    "The critic above reads the last hidden state only; its explained variance over the last {tail} steps, mean "
    "over seeds: {evs}. Given the running minimum of log π ({study}, pre-registered): "
)
NOT_RUN = "not yet run. {rule}"


def critic_line(runs: dict[str, list[dict]], meta: dict[str, dict], root=None) -> str:
    """Whether a critic learns here (issue 50, item 4): this study's explained variance over the last ``TAIL`` steps
    per dtype, then the stored ``ppo_critic_tiny_arith`` under ``root`` (``nbkit.studies.ppo_critic``): its verdict
    with each seed's numbers, or that it is registered and not yet run."""
    from nbkit import results

    PC = ppo_critic
    root = root or results.RESULTS
    study = PC.PPOCriticStudy()
    name = next(name for key, name, *_ in SUMMARY if key == schema.VALUE_EXPLAINED_VARIANCE)
    evs = ", ".join(
        EV.format_map({**r, "DTYPE": r["dtype"].upper(), "n_seeds": prose.seeds(r["seeds"])})
        for r in precision_table(runs, meta)
        if r["metric"] == name
    )
    head = CRITIC.format(tail=TAIL, evs=evs, study=PC.STUDY)
    if not (results.study_dir(PC.STUDY, root) / results.CARD).is_file():
        return head + NOT_RUN.format(rule=study.rule_line())
    return head + PC.sentence(study.outcomes(study.load(root), study.stored_meta(root)))


COLUMNS = {
    "dtype": "dtype",
    "seeds": "seeds",
    "kl_mean": "approx KL, mean over steps (each seed)",
    "kl_max": "approx KL, max (each seed)",
    "accuracy": "accuracy first → last 5 rollouts (each seed)",
    "ev": "explained variance, last 5 (mean)",
    "mismatch": "mean |Δ log p| (mean)",
}
"""The study table's named fields (``PPOStudy.table``) → the headers the page shows them under."""


class PPOStudy(GridStudy):
    """The stored PPO study: options ``dtypes``, ``seeds``, ``steps``, ``output_dir`` and ``RLConfig`` fields in
    ``overrides`` (notebook 03 trains its live slice through the same grid)."""

    name = STUDY
    title = "PPO with a critic, FP16 vs BF16"
    question = "Does BF16 PPO's KL explode on tiny-arith as in the paper (KL > 40)?"
    statistic = (
        "per seed: approx KL(π_old ‖ π) mean and max over minibatches; accuracy = mean of the first and the "
        "last 5 rollout batches; explained variance over the last 5 rollouts, mean over seeds."
    )
    notebook = "03_rl_training"
    output_dir = OUTPUT_DIR
    twins = 2
    amendments = AMENDMENTS
    toy = {
        "dtypes": ["fp32"],
        "seeds": [0],
        "steps": 4,
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8},
    }

    def defaults(self) -> dict:
        return {"dtypes": ["fp16", "bf16"], "seeds": [0, 1, 2], "steps": 100}

    def grid(
        self,
        dtypes=("fp16", "bf16"),
        seeds=(0, 1, 2),
        steps: int = 100,
        output_dir: str | None = None,
        overrides: dict | None = None,
    ) -> dict:
        base = base_config(max_steps=steps, output_dir=output_dir or self.output_dir, **(overrides or {}))
        out = {}
        for s in seeds:
            for d in dtypes:
                add_run(out, base, runlog.run_label("ppo", d, s), train_dtype=d, seed=s)
        return out

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """``AMENDMENTS``' key → the readings it moved ("dtype metric: before → after", means over seeds)."""
        out: list[str] = []
        for r in precision_table(runs, meta):
            if not r["metric"].endswith(AS_FIRST_SHOWN.format(n=TAIL)):
                continue
            now = next(
                x
                for x in precision_table(runs, meta)
                if x["dtype"] == r["dtype"] and x["metric"] == r["metric"][: -len(AS_FIRST_SHOWN.format(n=TAIL))]
            )
            if f"{r['mean']:.3g}" != f"{now['mean']:.3g}":  # value loss is logged every step: unmoved
                out.append(f"{r['dtype']} {now['metric']}: {r['mean']:.3g} → {now['mean']:.3g}")
        return {"last_steps": out}

    def table(self, runs, meta):
        """``table`` per dtype over seeds: each seed's value, then the mean."""
        per_run = table(runs, meta)
        out = []
        for dtype in sorted({r["dtype"] for r in per_run}, key=("fp16", "bf16", "fp32").index):
            rows = sorted((r for r in per_run if r["dtype"] == dtype), key=lambda r: r["seed"])

            def each(key, rows=rows):
                return [r[key] for r in rows]

            def mean(key):
                return prose.mean3([x for x in each(key) if isinstance(x, (int, float))])

            out.append(
                {
                    "dtype": dtype,
                    "seeds": len(rows),
                    "kl_mean": each("approx KL (mean)"),
                    "kl_max": each("approx KL (max)"),
                    "accuracy": each("accuracy (first → last 5 rollouts)"),
                    "ev": mean("explained variance (last 5 rollouts)"),
                    "mismatch": mean("mean |Δ log p|"),
                }
            )
        return prose.display(out, COLUMNS)

    def page_tables(self, runs, meta, rows):
        return [
            (
                (
                    "Per precision: the π–μ mismatch, PPO's KL and the critic's value error, each run's value averaged "
                    "over seeds with its 95 % t-interval (seeds as units; a metric that cannot be negative: the interval "
                    "on the log scale of the mean, so it stays above 0)"
                ),
                precision_table(runs, meta),
            ),
            (
                (
                    "BF16 − FP16 paired by seed, with its 95 % t-interval (and BF16 / FP16 for the metrics that cannot "
                    "be negative: geometric mean of the per-seed ratios, interval on the log scale)"
                ),
                paired_difference(runs, meta),
            ),
        ]

    def findings(self, runs, meta, rows):
        return self.precision_findings(rows, runs, meta) + [critic_line(runs, meta)]

    def precision_findings(self, rows, runs, meta):
        by = {r["dtype"]: r for r in prose.named(rows, COLUMNS)}
        if "fp16" not in by or "bf16" not in by:
            return []
        out = []
        for d in paired_rows(runs, meta):
            ratio = ""
            if d["ratio"] is not None:
                ratio = RATIO.format(
                    ratio=d["ratio"], ratio_interval=RATIO_CI.format(*d["ratio_ci"]) if d["ratio_ci"] else ""
                )
            out.append(
                DIFF.format_map({**d, "interval": CI.format(*d["ci"]) if d["ci"] else NO_CI, "ratio_text": ratio})
            )
        return out + [
            MISMATCH.format(
                ratio=by["bf16"]["mismatch"] / by["fp16"]["mismatch"],
                kl_fp16=max(by["fp16"]["kl_max"]),
                kl_bf16=max(by["bf16"]["kl_max"]),
            )
        ]

    def figure(self, runs, meta):
        return curves(runs)
