"""The task: a source's problems with a template and a grader, what RL code and the dataset builder need."""

from __future__ import annotations

from dataclasses import dataclass

from nbkit.tasks.graders import GRADERS, Grader
from nbkit.tasks.sources import TaskConfig, load_problems
from nbkit.tasks.templates import TEMPLATES, Template


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
