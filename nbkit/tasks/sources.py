"""Problem sources and the task's config: where problems come from and which template and grader score them.

``GENERATED_SOURCES`` are made by a generator (``arith``, ``long_arith``), ``NAMED_SOURCES`` ship in ``data/``,
and any local HF dataset (a ``save_to_disk`` folder, ``.parquet``, ``.jsonl``/``.json``) is read by path.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from nbkit.models.toymodels.arith import ArithConfig
from nbkit.models.toymodels.arith import make_problems as make_additions
from nbkit.models.toymodels.long_arith import LongArithConfig
from nbkit.models.toymodels.long_arith import make_problems as make_chains
from nbkit.models.toymodels.number_after import NumberAfterConfig
from nbkit.models.toymodels.number_after import make_problems as make_after_problems
from nbkit.models.toymodels.word_arith import WordArithConfig
from nbkit.models.toymodels.word_arith import make_problems as make_word_problems
from nbkit.runtime import paths
from nbkit.tasks.graders import GRADERS, normalize_answer
from nbkit.tasks.templates import TEMPLATES

GENERATED_SOURCES = ("arith", "long_arith", "word_arith", "number_after")
"""Sources made by a generator (``pool_size`` problems): tiny-arith's additions, tiny-long's chains of additions,
SmolLM2's questions in words (``What is 347 plus 58?``, ``What number comes after 347?``)."""

NAMED_SOURCES = {
    "sanity_math_1460": ("sanity_math_1460", "train"),
    **{f"eval/{s}": ("eval", s) for s in ("aime", "amc", "math", "minerva", "olympiad_bench")},
}
"""Shipped sources: name → (folder under ``data/``, split). Copied from the paper's repository (data/README.md)."""


TEMPLATE_GRADERS = {"r1_distill_qwen": "r1_distill", "smol_answer": "boxed_int", "smol_after": "first_int"}
"""Templates that ask for the answer in one place, and the grader that reads it only there."""


def default_grader(source: str, template: str) -> str:
    """The grader that fits a source and template: arith for the tiny models' sources, the template's own
    (``TEMPLATE_GRADERS``: r1_distill, SmolLM2's strict integer graders), else math-verify."""
    if source in ("arith", "long_arith"):
        return "arith"
    return TEMPLATE_GRADERS.get(template, "math_verify")


@dataclass
class TaskConfig:
    """Which problems, which prompt, which reward."""

    source: str = field(
        default="arith",
        metadata={
            "help": (
                "``arith``, a ``NAMED_SOURCES`` key, or a path (``save_to_disk`` folder, ``.parquet``, ``.jsonl``, "
                "``.json``); relative paths are resolved against the project root."
            )
        },
    )
    split: str | None = field(
        default=None,
        metadata={"help": ("Split of a ``DatasetDict`` folder (default: ``train`` if present, else the only split).")},
    )
    problem_key: str = field(default="problem", metadata={"help": "Column holding the problem text."})
    answer_key: str = field(
        default="answer",
        metadata={
            "help": ("Column holding the reference answer (a MATH ``solution`` with its ``\\boxed{}`` works too).")
        },
    )
    template: str = field(default="raw", metadata={"help": "Prompt template, a key of ``TEMPLATES``."})
    grader: str = field(
        default="auto",
        metadata={"help": ("Reward rule, a key of ``GRADERS``; ``auto`` picks with ``default_grader``.")},
    )
    pool_size: int = field(
        default=0,
        metadata={
            "help": (
                "Number of problems to take (a seeded random subset of a file source; the count generated for ``arith``); "
                "0 = all (``arith`` needs a positive count)."
            )
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the arith generator and of the subset choice."})
    arith: ArithConfig = field(
        default_factory=ArithConfig, metadata={"help": ("Difficulty knobs of ``arith`` problems (digits, scratchpad).")}
    )
    long_arith: LongArithConfig = field(
        default_factory=LongArithConfig,
        metadata={
            "help": (
                'Length knob of ``long_arith`` problems (``steps`` 1..80; ``LongArithConfig.regime("long")``): '
                "tiny-long's task."
            )
        },
    )

    word_arith: WordArithConfig = field(
        default_factory=WordArithConfig,
        metadata={"help": "Operation and operand sizes of ``word_arith`` problems (SmolLM2's short-answer task)."},
    )
    number_after: NumberAfterConfig = field(
        default_factory=NumberAfterConfig,
        metadata={"help": "Range of the numbers ``number_after`` problems ask about (SmolLM2's RL task)."},
    )

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            raise ValueError(f"unknown template {self.template!r}; choose one of {sorted(TEMPLATES)}")
        if self.grader == "auto":
            self.grader = default_grader(self.source, self.template)
        if self.grader not in GRADERS:
            raise ValueError(f"unknown grader {self.grader!r}; choose one of {sorted(GRADERS)} or 'auto'")
        if self.pool_size < 0:
            raise ValueError(f"pool_size must be >= 0 (0 = all), got {self.pool_size!r}")
        if self.source in GENERATED_SOURCES and self.pool_size == 0:
            raise ValueError(f"the {self.source} source generates problems: give pool_size > 0")


PROGRESS_DELAY = 1.0
"""Seconds a row loop runs silently before its progress bar appears (a 100k-row JSONL takes ~7 s to read and
check; a small file none)."""


def rows_progress(rows, desc: str, total: int | None = None):
    """``rows`` with a ``tqdm`` bar that appears only when the loop outlasts ``PROGRESS_DELAY`` (stderr)."""
    from tqdm.auto import tqdm

    return tqdm(rows, desc=desc, total=total, unit="row", delay=PROGRESS_DELAY, leave=False)


def _read_rows(source: str, split: str | None) -> list[dict]:
    """Rows of a named source or a local file/folder, as dicts."""
    import datasets

    if source in NAMED_SOURCES:
        folder, named_split = NAMED_SOURCES[source]
        path, split = paths.DATA / folder, split or named_split
    else:
        path = Path(source).expanduser().absolute()  # a relative path from the current directory, as a shell's;
        if not path.exists() and not Path(source).expanduser().is_absolute() and (paths.ROOT / source).exists():
            path = paths.ROOT / source  # else the project's own (the default data/tiny_arith_sanity from anywhere)
    if not path.exists():
        raise FileNotFoundError(
            f"problem source {source!r} not found (looked at {path}); "
            f"named sources: arith, long_arith, {', '.join(NAMED_SOURCES)}"
        )
    if path.is_dir():
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            splits = list(ds)
            split = split or ("train" if "train" in ds else (splits[0] if len(splits) == 1 else None))
            if split not in ds:
                raise ValueError(f"{path} holds splits {splits}: choose one with split=")
            ds = ds[split]
        return ds.to_list()
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix in (".jsonl", ".json"):
        try:
            text = path.read_text(encoding="utf-8-sig")  # a byte-order mark before the first row is no row's
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}); expected JSON lines of problems") from None
        if suffix == ".json" and text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
                ) from exc
            bad = next((i for i, r in enumerate(rows, 1) if not isinstance(r, dict)), None)
            if bad is not None:
                raise ValueError(
                    f"{path}: item {bad} of the list is a {type(rows[bad - 1]).__name__}, not an object with columns"
                )
            return rows
        rows = []
        lines = text.removesuffix("\n").split(
            "\n"
        )  # JSON lines end at "\n" only: splitlines() also splits a string holding U+2028
        for number, line in enumerate(rows_progress(lines, f"reading {path.name}"), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {number} is not valid JSON ({exc.msg}): {line[:80]!r}") from exc
            if not isinstance(row, dict):
                raise ValueError(f"{path}: line {number} is a {type(row).__name__}, not an object with columns")
            rows.append(row)
        return rows
    raise ValueError(f"cannot read {path}: expected a save_to_disk folder, .parquet, .jsonl or .json")


def check_rows(cfg: TaskConfig, rows: list) -> None:
    """Every row (not only the first) is an object holding the problem and answer columns, with a non-empty text
    problem; ValueError naming the source, the row (1-based) and what it holds."""
    for number, row in enumerate(rows_progress(rows, f"checking {Path(str(cfg.source)).name}"), 1):
        if not isinstance(row, dict):
            raise ValueError(
                f"problem source {cfg.source!r}: row {number} is a {type(row).__name__}, not an object with columns"
            )
        missing = [k for k in (cfg.problem_key, cfg.answer_key) if k not in row]
        if missing:
            raise ValueError(
                f"problem source {cfg.source!r}: row {number} has no column(s) {missing}; its columns: {sorted(row)}"
            )
        problem = row[cfg.problem_key]
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError(
                f"problem source {cfg.source!r}: row {number}'s {cfg.problem_key!r} is {problem!r}, "
                f"not a non-empty text"
            )


def load_problems(cfg: TaskConfig) -> list[dict]:
    """The problems of ``cfg.source`` as dicts with ``problem``, ``answer`` (str or None) and ``source_index``.

    Other columns are kept. Raises ValueError on an empty source or a missing column (naming the columns
    that exist). Answers that cannot be read stay None here; the dataset builder counts them.
    """
    if cfg.source == "arith":
        rows = make_additions(cfg.pool_size, cfg.arith, seed=cfg.seed)
        return [{**r, "source_index": i} for i, r in enumerate(rows)]
    if cfg.source == "long_arith":
        rows = make_chains(cfg.pool_size, cfg.long_arith, seed=cfg.seed)
        return [{**r, "source_index": i} for i, r in enumerate(rows)]
    if cfg.source == "word_arith":
        rows = make_word_problems(cfg.pool_size, cfg.word_arith, seed=cfg.seed)
        return [{**r, "source_index": i} for i, r in enumerate(rows)]
    if cfg.source == "number_after":
        rows = make_after_problems(cfg.pool_size, cfg.number_after, seed=cfg.seed)
        return [{**r, "source_index": i} for i, r in enumerate(rows)]
    rows = _read_rows(cfg.source, cfg.split)
    if not rows:
        raise ValueError(f"problem source {cfg.source!r} is empty")
    columns = list(rows[0])
    missing = [k for k in (cfg.problem_key, cfg.answer_key) if k not in columns]
    if missing:
        raise ValueError(
            f"problem source {cfg.source!r} has no column(s) {missing}; available columns: "
            f"{columns}: name them {cfg.problem_key!r} and {cfg.answer_key!r} in the file (nbkit train "
            f"reads those names; from Python, TaskConfig's problem_key and answer_key name others)"
        )
    check_rows(cfg, rows)
    order = list(range(len(rows)))
    if cfg.pool_size and cfg.pool_size < len(rows):
        order = sorted(random.Random(cfg.seed).sample(order, cfg.pool_size))
    out = []
    for i in rows_progress(order, f"reading answers of {Path(str(cfg.source)).name}"):
        r = {k: v for k, v in rows[i].items() if k not in (cfg.problem_key, cfg.answer_key)}
        out.append(
            {
                "problem": str(rows[i][cfg.problem_key]),
                "answer": normalize_answer(rows[i][cfg.answer_key]),
                **r,
                "source_index": i,
            }
        )
    return out
