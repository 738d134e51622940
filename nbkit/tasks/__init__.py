"""Problems, prompt templates and rewards: what the policy is asked and how its answers are scored.

The ``nbkit.tasks`` package holds each task's problems (``arith``, ``long_arith``), the perfectible-set
builder (``dataset``) and the RL judge's held-out sets (``heldout``); this module is the registry that
makes a ``Task`` of a source, a template and a grader.

A ``Task`` bundles three choices that the RL notebooks and the dataset builder share:

- a **source** of problems (dicts with ``problem`` and ``answer``): the ``tiny-arith`` model's synthetic
  additions (``arith``), the paper's sanity set (``sanity_math_1460``), an evaluation suite (``eval/math``,
  ``eval/aime``, ...), or any local HF dataset (a ``save_to_disk`` folder, ``.parquet``, ``.jsonl``/``.json``);
- a **template** that turns a problem into the prompt string the engine sees (``TEMPLATES``);
- a **grader** that turns (response, reference answer) into a 0/1 reward (``GRADERS``).

Math answers are checked with math-verify (``math_verify.parse``/``verify``), the checker Oat and the paper's
repository (sail-sg/Precision-RL) use; ``arith`` answers with ``nbkit.tasks.arith.is_correct``.

    task = make_task(TaskConfig(source="eval/math", template="qwen_math"))
    prompts = [task.prompt(p) for p in task.problems]
    reward = task.reward(response, task.problems[0]["answer"])   # 1.0 or 0.0, never raises
"""

from __future__ import annotations

import functools
import json
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nbkit import paths
from nbkit.tasks import arith, long_arith
from nbkit.tasks.arith import ArithConfig
from nbkit.tasks.long_arith import LongArithConfig

# ----------------------------------------------------------------------------------------------------------
# Prompt templates (names and texts as in Oat / sail-sg/Precision-RL's ``TEMPLATE_FACTORY`` where they exist)

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""The instruction every math template carries (Qwen-Math's and DeepSeek-R1's recommended wording)."""


@dataclass(frozen=True)
class Template:
    """A named prompt template: ``prefix + problem + suffix``."""

    name: str
    """Key in ``TEMPLATES``."""
    prefix: str
    """Text before the problem."""
    suffix: str
    """Text after the problem (the engine continues from here)."""
    doc: str
    """When to use it."""

    def __call__(self, problem: str) -> str:
        return self.prefix + problem + self.suffix


TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template("raw", "", "", "The problem unchanged: the tiny-arith model's prompt (``347+058=``); Oat's 'no'."),
        Template(
            "plain",
            "",
            "\n" + BOXED_INSTRUCTION + "\n",
            "Problem then the boxed instruction, no chat markup: base models, or models whose chat template "
            "the engine applies itself.",
        ),
        Template(
            "qwen_math",
            "<|im_start|>system\n" + BOXED_INSTRUCTION + "<|im_end|>\n<|im_start|>user\n",
            "<|im_end|>\n<|im_start|>assistant\n",
            "Oat's 'qwen_math': ChatML with the boxed instruction as system prompt (Qwen2.5-Math, and any "
            "ChatML model such as SmolLM2-Instruct).",
        ),
        Template(
            "r1_distill_qwen",
            "<｜begin▁of▁sentence｜><｜User｜>",
            " " + BOXED_INSTRUCTION + "\n<｜Assistant｜><think>\n",
            "Oat's 'r1_distill_qwen', used by the paper's sanity runs with DeepSeek-R1-Distill-Qwen-1.5B "
            "(the model thinks, closes </think>, then answers). The BOS token is in the text: do not let the "
            "engine add a second one (nbkit.engines encodes prompts without special tokens).",
        ),
    )
}


# ----------------------------------------------------------------------------------------------------------
# Answer extraction and checking


def _parse_timeout() -> int | None:
    """math-verify's timeout uses SIGALRM, which only the main thread may set: no timeout elsewhere."""
    return 5 if threading.current_thread() is threading.main_thread() else None


def normalize_answer(answer) -> str | None:
    """A reference answer as a string: ``142.0`` → ``"142"``, ``["9.6\\n"]`` → ``"9.6"``, None/empty → None.

    The evaluation suites mix types (amc stores floats, minerva and olympiad_bench lists of strings).
    """
    if answer is None:
        return None
    if isinstance(answer, (list, tuple)):
        parts = [a for a in (normalize_answer(x) for x in answer) if a]
        return ", ".join(parts) or None
    if isinstance(answer, float):
        return str(int(answer)) if answer.is_integer() else repr(answer)
    text = str(answer).strip()
    return text or None


@functools.lru_cache(maxsize=65536)
def parse_reference(answer: str) -> tuple:
    """math-verify's parse of a reference answer, wrapped in ``\\boxed{}`` unless it has one already.

    Wrapping makes bare LaTeX (``\\frac12``, ``\\left(3, \\frac{\\pi}{2}\\right)``, ``x(x+2)``) parse as a whole;
    a reference that already contains ``\\boxed`` (a MATH ``solution``) is parsed as written (last box wins).
    An empty tuple means unparsable.
    """
    from math_verify import parse

    text = answer if "\\boxed" in answer else "\\boxed{" + answer + "}"
    return tuple(parse(text, parsing_timeout=_parse_timeout()))


def parse_response(response: str) -> list:
    """math-verify's parse of a model response (``\\boxed{}`` first, then the last LaTeX/plain expression)."""
    from math_verify import parse

    return parse(response, parsing_timeout=_parse_timeout())


def math_verify_correct(response: str, answer: str) -> bool:
    """True when math-verify finds the response's answer equal to the reference (False on any failure)."""
    gold = parse_reference(answer)
    if not gold:
        return False
    pred = parse_response(response)
    if not pred:
        return False
    from math_verify import verify

    return bool(verify(list(gold), pred, timeout_seconds=_parse_timeout()))


def after_think(response: str) -> str | None:
    """The text after the last ``</think>``; None while the model is still thinking (no answer given yet)."""
    return response.rsplit("</think>", 1)[1] if "</think>" in response else None


@dataclass(frozen=True)
class Grader:
    """How to read a response: ``extract`` the model's answer, ``correct`` against the reference."""

    name: str
    """Key in ``GRADERS``."""
    extract: Callable[[str], str | None]
    """The answer the model gave, as text (None = no answer found: counted, scored 0)."""
    correct: Callable[[str, str], bool]
    """True when the response answers the reference correctly."""
    answer_ok: Callable[[str], bool]
    """True when a reference answer can be checked at all (False: counted as unparsable, never sampled)."""
    doc: str
    """What it checks."""


def _extract_math(response: str) -> str | None:
    pred = parse_response(response)
    return str(pred[-1]) if pred else None


def _arith_answer_ok(answer: str) -> bool:
    return answer.strip().isdigit()


def _r1_extract(response: str) -> str | None:
    tail = after_think(response)
    return None if tail is None else _extract_math(tail)


def _r1_correct(response: str, answer: str) -> bool:
    tail = after_think(response)
    return tail is not None and math_verify_correct(tail, answer)


GRADERS: dict[str, Grader] = {
    g.name: g
    for g in (
        Grader(
            "arith",
            arith.extract_answer,
            arith.is_correct,
            _arith_answer_ok,
            "nbkit.tasks.arith: the integer after the last '|' equals the sum.",
        ),
        Grader(
            "math_verify",
            _extract_math,
            math_verify_correct,
            lambda a: bool(parse_reference(a)),
            "math-verify on the whole response (\\boxed{} preferred), equivalence up to sympy; several "
            "boxes are read as one set answer, so hedging (\\boxed{3} ... \\boxed{7}) is not rewarded.",
        ),
        Grader(
            "r1_distill",
            _r1_extract,
            _r1_correct,
            lambda a: bool(parse_reference(a)),
            "math-verify on the text after </think> only; no </think> = no answer (as Oat grades R1-distill models).",
        ),
    )
}


def default_grader(source: str, template: str) -> str:
    """The grader that fits a source and template: arith for arith, r1_distill for its template, else math."""
    if source in GENERATED_SOURCES:
        return "arith"
    return "r1_distill" if template == "r1_distill_qwen" else "math_verify"


# ----------------------------------------------------------------------------------------------------------
# Problem sources

GENERATED_SOURCES = ("arith", "long_arith")
"""Sources made by a generator (``pool_size`` problems): tiny-arith's additions, tiny-long's chains of additions."""

NAMED_SOURCES = {
    "sanity_math_1460": ("sanity_math_1460", "train"),
    **{f"eval/{s}": ("eval", s) for s in ("aime", "amc", "math", "minerva", "olympiad_bench")},
}
"""Shipped sources: name → (folder under ``data/``, split). Copied from the paper's repository (data/README.md)."""


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
            text = path.read_text(encoding="utf-8")
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
        for number, line in enumerate(text.splitlines(), 1):
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
    for number, row in enumerate(rows, 1):
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
        rows = arith.make_problems(cfg.pool_size, cfg.arith, seed=cfg.seed)
        return [{**r, "source_index": i} for i, r in enumerate(rows)]
    if cfg.source == "long_arith":
        rows = long_arith.make_problems(cfg.pool_size, cfg.long_arith, seed=cfg.seed)
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
    for i in order:
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


# ----------------------------------------------------------------------------------------------------------
# The task


@dataclass
class Task:
    """Problems + template + grader: what RL code and the dataset builder need."""

    cfg: TaskConfig
    """How the task was made (kept for dataset cards and cache keys)."""
    problems: list[dict]
    """Dicts with at least ``problem`` and ``answer``."""

    @property
    def template(self) -> Template:
        return TEMPLATES[self.cfg.template]

    @property
    def grader(self) -> Grader:
        return GRADERS[self.cfg.grader]

    def prompt(self, problem: dict | str) -> str:
        """The prompt string for a problem (a problem dict or its text)."""
        return self.template(problem["problem"] if isinstance(problem, dict) else problem)

    def answer_ok(self, answer: str | None) -> bool:
        """True when the reference answer can be checked (never raises)."""
        try:
            return answer is not None and self.grader.answer_ok(answer)
        except Exception:  # noqa: BLE001 - a reference we cannot read is counted, not fatal
            return False

    def extract(self, response: str) -> str | None:
        """The model's answer as text, None when it gave none or it cannot be parsed (never raises)."""
        try:
            return self.grader.extract(response)
        except Exception:  # noqa: BLE001
            return None

    def reward(self, response: str, answer: str | None) -> float:
        """1.0 for a correct answer, 0.0 otherwise: no answer, an unreadable reference, a parser error."""
        if answer is None:
            return 0.0
        try:
            return float(self.grader.correct(response, answer))
        except Exception:  # noqa: BLE001 - a reward function must not kill a training run
            return 0.0


def make_task(cfg: TaskConfig | None = None, **overrides) -> Task:
    """A ``Task`` from a config (or keyword overrides of the default config)."""
    cfg = cfg or TaskConfig(**overrides)
    return Task(cfg, load_problems(cfg))
