"""Which number comes after n: SmolLM2-135M-Instruct's short-answer RL task (issue 51).

A problem is ``What number comes after 347?``; the answer is ``348``, which the model writes alone (the
``smol_after`` template asks for the number only, with four example turns, ``EXAMPLES``). At temperature 1 the
shipped SmolLM2-135M-Instruct gets about one answer in nine right (FP32), with about a quarter of the problems
between 0.2 and 0.8 (60 of 256: ``data/smollm2_after_sanity``): more of them in that window than any arithmetic
family probed (``data/smollm2_task_probe``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

EXAMPLES = (
    ("What number comes after 23?", "24"),
    ("What number comes after 59?", "60"),
    ("What number comes after 347?", "348"),
    ("What number comes after 699?", "700"),
)
"""The template's four example turns (question, answer), two- and three-digit, two with a carry; their numbers are
never drawn as problems. Four turns instead of the first two raised the pass rate on three-digit numbers from 0.047
(3 of 32 problems in [0.2, 0.8]) to 0.121 (8 of 30): ``data/smollm2_task_probe``."""
_EXAMPLE_NUMBERS = frozenset(int(q.rstrip("?").rsplit(" ", 1)[1]) for q, _ in EXAMPLES)


@dataclass(frozen=True)
class NumberAfterConfig:
    """Which numbers are asked about."""

    lo: int = field(default=10, metadata={"help": "Smallest number asked about (>= 0)."})
    hi: int = field(default=999, metadata={"help": "Largest number asked about (>= lo, < 10**6)."})

    def __post_init__(self) -> None:
        for name in ("lo", "hi"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 10**6:
                raise ValueError(f"{name} must be an integer between 0 and 999999, got {value!r}")
        if self.hi < self.lo:
            raise ValueError(f"hi must be >= lo, got lo={self.lo!r}, hi={self.hi!r}")
        if not self.numbers():
            raise ValueError(
                f"[{self.lo}, {self.hi}] holds only the template's example numbers {sorted(_EXAMPLE_NUMBERS)}"
            )

    def numbers(self) -> list[int]:
        """Every number a problem may ask about (the range without the examples' numbers)."""
        return [n for n in range(self.lo, self.hi + 1) if n not in _EXAMPLE_NUMBERS]


def prompt_for(n: int) -> str:
    """The question about ``n``."""
    return f"What number comes after {n}?"


def make_problems(count: int, cfg: NumberAfterConfig = NumberAfterConfig(), seed: int = 0) -> list[dict]:
    """``count`` distinct seeded problems as dicts with ``problem`` and ``answer`` (``n + 1`` as text)."""
    numbers = cfg.numbers()
    if not 1 <= count <= len(numbers):
        raise ValueError(f"count must be between 1 and {len(numbers)} (distinct numbers of {cfg}), got {count!r}")
    return [{"problem": prompt_for(n), "answer": str(n + 1)} for n in random.Random(seed).sample(numbers, count)]
