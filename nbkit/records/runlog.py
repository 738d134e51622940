"""Run folders read back: metric rows, configs, coordinates, and the tables a reader wants from them.

``MetricsLog`` is the append-only ``metrics.jsonl`` a run writes as it goes (a kill loses nothing) and reads back;
``load_runs`` reads every run folder below a folder (finished or not), so plots and tables work on killed runs too,
and ``load_meta`` reads each run's coordinates (algorithm, train and rollout dtype, seed) from its ``config.json``:
a folder's name is only a name. ``summary_table`` condenses runs into the numbers a reader wants, and
``seed_summary`` condenses the seeds of each (algorithm, dtype) into mean and range: one seed is an anecdote.
Pure Python (no torch): stored studies (``nbkit.results``) and live run folders are read alike. The grids of runs
themselves are trained by ``nbkit.rl.grid``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import MISSING, fields
from pathlib import Path

from nbkit.records import schema
from nbkit.runtime import outputs
from nbkit.stats import stats


class MetricsLog:
    """Append-only ``metrics.jsonl``: a row is flushed the moment its step ends, so a kill loses nothing."""

    def __init__(self, path: Path):
        self.path = Path(path)  # (its folder is made at the first row: naming a log writes nothing)

    def append(self, row: dict) -> None:
        """Add ``row`` as one line; a write that fails part-way (a file-size limit, a full disk) is cut back to the
        rows before it and raises ``OSError`` naming the file and the step, so the log never ends in half a row."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = memoryview((json.dumps(row, default=_plain) + "\n").encode("utf-8"))
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            start = os.fstat(fd).st_size
            try:
                while data:
                    data = data[os.write(fd, data) :]
            except OSError as exc:
                os.ftruncate(fd, start)
                raise OSError(
                    exc.errno,
                    f"{exc.strerror} writing {self.path}: the row of step {row.get('step', '?')} was not written "
                    f"(the log keeps its whole rows)",
                    str(self.path),
                ) from None
        finally:
            os.close(fd)

    def rows(self) -> list[dict]:
        """Every row in file order (see ``read``)."""
        return self.read(self.path)

    @staticmethod
    def read(path: Path) -> list[dict]:
        """The rows of a metrics file ([] when absent). A last line cut short by a kill is dropped; a malformed
        line elsewhere raises ValueError naming the file and line."""
        path = Path(path)
        if not path.exists():
            return []
        lines = (
            path.read_text(encoding="utf-8").removesuffix("\n").split("\n")
        )  # "\n" only: a text may hold U+2028 (splitlines)
        rows = []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if i == len(lines):
                    break  # the row being written when the run was killed
                raise ValueError(f"{path}: line {i} is not valid JSON ({exc.msg})") from exc
        return rows

    def truncate_after(self, step: int) -> int:
        """Drop rows of steps > ``step`` (a resume from checkpoint ``step`` recomputes them), atomically;
        returns how many."""
        rows = self.rows()
        keep = [r for r in rows if r.get("step", 0) <= step]
        outputs.write_text(self.path, "".join(json.dumps(r, default=_plain) + "\n" for r in keep))
        return len(rows) - len(keep)


def _plain(x):
    """JSON for a tensor (its value, or its list when it holds several) and anything else (its ``str``)."""
    if hasattr(x, "numel") and hasattr(x, "item"):  # a torch tensor, known without importing torch
        return x.item() if x.numel() == 1 else x.tolist()
    return str(x)


def run_label(algorithm: str, dtype: str, seed: int | None = None) -> str:
    """``grpo-fp16`` (one seed) or ``grpo-fp16-s2``."""
    return f"{algorithm}-{dtype}" + (f"-s{seed}" if seed is not None else "")


def pair_tag(train_dtype: str, rollout_dtype: str | None) -> str:
    """The dtype part of a run label: ``bf16`` when the rollout runs in the training dtype, ``bf16-fp32r`` when not."""
    return train_dtype if rollout_dtype in (None, train_dtype) else f"{train_dtype}-{rollout_dtype}r"


def coords(config: dict) -> dict:
    """A run's coordinates read from its config (``RLConfig.to_dict()``, a run folder's ``config.json``):
    algorithm, train and rollout dtype, the dtype tag of its label (``bf16`` or ``bf16-fp32r``) and seed."""
    train = config["train_dtype"]
    rollout = config.get("rollout_dtype") or train
    return {
        "algorithm": config["algorithm"],
        "train": train,
        "rollout": rollout,
        "dtype": pair_tag(train, rollout),
        "seed": int(config["seed"]),
    }


def load_configs(folder: str | Path) -> dict[str, dict]:
    """``label → config`` of every run folder below ``folder`` that has metric rows and a ``config.json``."""
    return {
        log.parent.name: json.loads((log.parent / "config.json").read_text())
        for log in sorted(Path(folder).glob("**/metrics.jsonl"))
        if (log.parent / "config.json").is_file()
    }


def load_meta(folder: str | Path, coords_of=coords) -> dict[str, dict]:
    """``label → coordinates`` of every run folder below ``folder``, from the runs' configs."""
    return {label: coords_of(cfg) for label, cfg in load_configs(folder).items()}


def load_runs(folder: str | Path) -> dict[str, list[dict]]:
    """``label → metric rows`` for every run folder below ``folder`` (and ``folder`` itself if it is a run)."""
    folder = Path(folder)
    runs = {}
    for log in sorted(folder.glob("**/metrics.jsonl")):
        rows = MetricsLog.read(log)  # a row cut short by a kill is left out
        if rows:
            runs[log.parent.name] = rows
    return runs


def steps_to(rows: list[dict], target: float, window: int = 5, key: str = "accuracy") -> int | None:
    """First step at which the mean of ``key`` over the last ``window`` steps reaches ``target``."""
    values = [r[key] for r in rows if key in r]
    for i in range(window, len(values) + 1):
        if sum(values[i - window : i]) / window >= target:
            return rows[i - 1][schema.STEP]
    return None


def summary_table(runs: dict[str, list[dict]], target: float = 0.95, window: int = 5) -> list[dict]:
    """One row per run: final / best accuracy (``window``-step means), steps to ``target``, mismatch, time."""
    table = []
    for label, rows in runs.items():
        acc = [r[schema.ACCURACY] for r in rows if schema.ACCURACY in r]
        means = [sum(acc[i - window : i]) / window for i in range(window, len(acc) + 1)] or [float("nan")]
        mism = [r[schema.TOKEN_ABS_LOGP_DIFF] for r in rows if schema.TOKEN_ABS_LOGP_DIFF in r]
        table.append(
            {
                "run": label,
                "steps": schema.optimiser_steps(rows),
                "initial accuracy": round(acc[0], 3) if acc else None,
                f"final accuracy ({window}-step mean)": round(means[-1], 3),
                "best accuracy": round(max(means), 3),
                f"steps to {target:.0%}": steps_to(rows, target, window),
                "mean |Δ log p| (first 5)": _mean(mism[:5]),
                "mean |Δ log p| (last 5)": _mean(mism[-5:]),
                "skipped steps": rows[-1].get(schema.SKIPPED_STEPS_TOTAL, 0) if rows else 0,
                "minutes": round(sum(r.get(schema.TIME_STEP, 0) for r in rows) / 60, 1),
                "alarms": sum(1 for r in rows if r.get("alarm")),
            }
        )
    return table


def seed_summary(table: list[dict], meta: dict[str, dict], target: float = 0.95, window: int = 5) -> list[dict]:
    """Rows of ``summary_table`` grouped by (algorithm, dtype) over seeds (``meta``: each run's coordinates, see
    ``coords``): mean and [min, max] of final and best accuracy, how many seeds reached ``target`` and at which steps
    (mean over those that did)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in table:
        m = meta[row["run"]]
        groups.setdefault((m["algorithm"], m["dtype"]), []).append(row)
    out = []
    reach_key, final_key = f"steps to {target:.0%}", f"final accuracy ({window}-step mean)"
    for (algorithm, dtype), rows in groups.items():
        final = [r[final_key] for r in rows]
        best = [r["best accuracy"] for r in rows]
        reached = [r[reach_key] for r in rows if r[reach_key] is not None]
        out.append(
            {
                "algorithm": algorithm,
                "dtype": dtype,
                "seeds": len(rows),
                f"reached {target:.0%}": f"{len(reached)}/{len(rows)}",
                f"{reach_key} (mean)": round(sum(reached) / len(reached), 1) if reached else None,
                f"{reach_key} (each)": [r[reach_key] for r in rows],
                "final accuracy (mean)": round(sum(final) / len(final), 3),
                "final accuracy [min, max]": [min(final), max(final)],
                "best accuracy (mean)": round(sum(best) / len(best), 3),
                "best accuracy [min, max]": [min(best), max(best)],
                "mean |Δ log p| last 5 (mean)": _mean(
                    [r["mean |Δ log p| (last 5)"] for r in rows if r["mean |Δ log p| (last 5)"] is not None]
                ),
            }
        )
    return out


def precision_comparison(
    table: list[dict],
    meta: dict[str, dict],
    target: float = 0.95,
    a: str = "fp16",
    b: str = "bf16",
    power: float = 0.8,
    alpha: float = 0.05,
) -> list[str]:
    """Notebook 03's primary comparison, one sentence per algorithm run in both precisions: steps to ``target`` of
    ``a`` minus ``b``, over the seeds that reached it, with the two-sample t CI (pooled SD) and, where the CI covers
    0, the smallest difference those seeds find with ``power``. Seeds that never reach the target are counted, not
    given a step; fewer than two reaching seeds on a side give no CI."""
    reach = f"steps to {target:.0%}"
    steps: dict[tuple[str, str], list] = {}
    for row in table:
        m = meta[row["run"]]
        steps.setdefault((m["algorithm"], m["dtype"]), []).append(row[reach])
    out = []
    for algorithm in dict.fromkeys(alg for alg, _ in steps):
        if (algorithm, a) not in steps or (algorithm, b) not in steps:
            continue
        xs, ys = ([v for v in steps[(algorithm, d)] if v is not None] for d in (a, b))
        counts = (
            f"{a.upper()} {len(xs)} of {len(steps[(algorithm, a)])} seeds reached {target:.0%}, "
            f"{b.upper()} {len(ys)} of {len(steps[(algorithm, b)])}"
        )
        if len(xs) < 2 or len(ys) < 2:
            out.append(f"{algorithm}: {counts}; too few seeds reached it on a side for a CI of the difference.")
            continue
        sd, df = stats.pooled_sd([xs, ys])
        se = sd * math.sqrt(1 / len(xs) + 1 / len(ys))
        diff, half = statistics.fmean(xs) - statistics.fmean(ys), stats.t_quantile(1 - alpha / 2, df) * se
        text = (
            f"{algorithm}: {a.upper()} − {b.upper()} {reach} {diff:+.3g} ({1 - alpha:.0%} CI {diff - half:+.3g} "
            f"to {diff + half:+.3g}; {counts}, means {statistics.fmean(xs):.3g} and {statistics.fmean(ys):.3g}); "
        )
        if diff - half <= 0 <= diff + half:
            found = stats.detectable_difference(se, df, power, alpha)
            text += (
                f"no difference shown: the CI covers 0, and these seeds find a difference with {power:.0%} power "
                f"only from {found:.3g} steps up."
            )
        else:
            text += f"{(a if diff < 0 else b).upper()} reached it sooner."
        out.append(text)
    return out


def _mean(xs: list[float]) -> float | None:
    return float(f"{sum(xs) / len(xs):.3g}") if xs else None


def headline(runs: dict[str, list[dict]], meta: dict[str, dict], target: float = 0.95, window: int = 5) -> dict:
    """The findings page's headline (``nbkit.workbook.report.publish``): the sanity-test outcome per run, a table of the
    main numbers, collapse alarms and the precision audit's verdict."""
    table = summary_table(runs, target, window)
    reach = f"steps to {target:.0%}"
    outcome = "; ".join(
        f"{r['run']}: " + (f"passed at step {r[reach]}" if r[reach] is not None else "not reached") for r in table
    )
    keys = (
        "run",
        "steps",
        reach,
        f"final accuracy ({window}-step mean)",
        "best accuracy",
        "mean |Δ log p| (first 5)",
        "mean |Δ log p| (last 5)",
        "skipped steps",
        "minutes",
        "alarms",
    )
    seeds = [
        {k: ", ".join(map(str, v)) if isinstance(v, list) else v for k, v in r.items()}
        for r in seed_summary(table, meta, target, window)
    ]  # lists as text: the page shows scalars
    primary = precision_comparison(table, meta, target)
    return {
        f"sanity test (training accuracy ≥ {target:.0%})": outcome,
        **({"primary comparison (FP16 − BF16 steps to target)": " ".join(primary)} if primary else {}),
        "over seeds (mean and range per algorithm and precision)": seeds,
        "runs": [{k: r[k] for k in keys} for r in table],
        "collapse alarms": sum(r["alarms"] for r in table),
        "precision audit": audit_verdict(runs),
    }


def audit_verdict(runs: dict[str, list[dict]]) -> str:
    """One sentence: did every audited step's matmuls run in the requested dtype, with a live GradScaler in FP16?"""
    bad, audited = [], 0
    for label, rows in runs.items():
        for r in rows:
            if schema.AUDIT_MATMUL_DTYPES not in r:
                continue
            audited += 1
            requested, ran = r.get(schema.AUDIT_REQUESTED), r[schema.AUDIT_MATMUL_DTYPES]
            ran_in = {k.split(":")[-1] for k in ran}  # MoE keys: "moe_experts:bf16", "moe_router:bf16"
            if ran_in != {requested} or (requested == "fp16" and not r.get(schema.AUDIT_SCALER_ENABLED)):
                bad.append(f"{label} step {r.get('step')}: {ran}")
    if not audited:
        return "no audited step"
    if bad:
        return f"MISMATCH in {len(bad)} of {audited} steps: " + "; ".join(bad[:3])
    policies = sorted(
        {str(r.get(schema.AUDIT_GEMM)) for rows in runs.values() for r in rows if r.get(schema.AUDIT_GEMM)}
    )
    return (
        f"passed: in all {audited} audited steps every linear layer ran in the requested dtype "
        "(a live GradScaler in every FP16 step)" + (f"; GEMM policy {', '.join(policies)}" if policies else "")
    )


# ---------------------------------------------------------------------------------------------------------
# A run folder's identity, read back (``nbkit.rl.runfolder`` writes and guards run folders; stored studies and the
# command line read these without importing training)

KIND = "rl-run"
"""The ``nbkit.runtime.outputs`` kind of a run folder."""

RENAMED = {
    "steps": "max_steps",
    "samples_per_prompt": "num_generations",
    "lr": "learning_rate",
    "max_tokens": "max_completion_length",
    "vllm_sleep_mode": "vllm_enable_sleep_mode",
}
"""Run-config fields renamed to the ``GRPOConfig`` field each sets (issue 71): old name → TRL's. Configs stored under
the old names (cards' ``configs.runs``, run folders' ``config.json``, YAML files) are read through it (``renamed``).
Here, not in ``nbkit.rl.config``, so that the readers below training (this module, ``nbkit.results``) use it too."""


def renamed(config: dict) -> dict:
    """``config`` with each old field name of ``RENAMED`` spelled as the new one (order kept); ValueError naming
    both names when it gives one field under both."""
    for old, new in RENAMED.items():
        if old in config and new in config:
            raise ValueError(f"{old!r} and {new!r} are one field, {new} ({old} is its old name): give it once")
    return {RENAMED.get(k, k): v for k, v in config.items()}


RESULT_NEUTRAL = (
    "output_dir",
    "resume",
    "overwrite",
    "checkpoint_every",
    "save_total_limit",
    "report_to",
    "vllm_kv_cache_gib",
    "gradient_checkpointing",
    "gpu_memory_gib",
)
"""Config fields that never change a run's metric rows: where the run is written, how it was invoked, how often it
is saved and reported, and the resources it is given (the same numbers either way). Every other field of the
config's dataclass changes the result, a field declared later included (``result_differences``)."""

SAFE_TO_CHANGE = (*RESULT_NEUTRAL, "max_steps", "max_consecutive_skips")
"""Config fields a resume may change: the result-neutral ones, and ``max_steps`` (extends or shortens the run) and
``max_consecutive_skips`` (when a run that can no longer recover stops): neither changes the steps already taken."""


def differing_fields(saved: dict, cfg, ignore: tuple[str, ...] = SAFE_TO_CHANGE) -> list[str]:
    """``name (run: old, now: new)`` for every field of ``cfg``'s dataclass outside ``ignore`` (default: what a
    resume may change, ``SAFE_TO_CHANGE``) where ``cfg`` differs from the saved config (a field the saved config
    lacks counts as its default: it did not exist then; one it holds under an old name, ``RENAMED``, as the new)."""
    saved = renamed(saved)
    diffs = []
    for f in fields(cfg):
        if f.name in ignore:
            continue
        old = saved.get(f.name, f.default_factory() if f.default_factory is not MISSING else f.default)
        new = getattr(cfg, f.name)
        if old != new:
            diffs.append(f"{f.name} (run: {old!r}, now: {new!r})")
    return diffs


def result_differences(saved: dict, cfg) -> list[str]:
    """``differing_fields`` over every field that changes a run's result (all of ``cfg``'s dataclass fields but
    ``RESULT_NEUTRAL``, ``max_steps`` included): whether a finished run is *this* run of a grid, not one a resume may
    continue."""
    return differing_fields(saved, cfg, ignore=RESULT_NEUTRAL)


def last_logged_step(out: Path) -> int:
    """The step of the last metrics row in run folder ``out`` (0 when none)."""
    return last_step(MetricsLog.read(out / "metrics.jsonl"))


def last_step(rows: list[dict]) -> int:
    """The step of the last of ``rows`` (0 when none): a run folder's log or a stored run alike."""
    return max((int(r.get("step", 0)) for r in rows), default=0)
