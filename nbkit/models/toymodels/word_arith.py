"""Short-answer arithmetic questions in words for a small chat LM (SmolLM2-135M-Instruct's RL task, issue 51).

A problem is one operation on two numbers asked in plain English, ``What is 347 plus 58?``; the answer is the
integer result (``405``), which the model writes in ``\\boxed{}`` after at most a few tokens (the ``smol_answer``
template asks for that). ``op`` picks the operation and ``digits_a``/``digits_b`` the operands' sizes (operands
have exactly that many digits: no leading zeros), which together set how often a 135M model gets it right.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

OPS = {"add": ("plus", lambda a, b: a + b), "sub": ("minus", lambda a, b: a - b), "mul": ("times", lambda a, b: a * b)}
"""Operation name → (the word in the question, the result)."""


@dataclass(frozen=True)
class WordArithConfig:
    """Which operation and how large its operands are."""

    op: str = field(default="add", metadata={"help": "Operation: ``add``, ``sub`` or ``mul`` (``OPS``)."})
    digits_a: int = field(default=3, metadata={"help": "Digits of the first operand (1..6, no leading zero)."})
    digits_b: int = field(default=2, metadata={"help": "Digits of the second operand (1..6, no leading zero)."})

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}; choose one of {sorted(OPS)}")
        for name in ("digits_a", "digits_b"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 6:
                raise ValueError(f"{name} must be an integer between 1 and 6, got {value!r}")

    def space(self) -> int:
        """How many distinct problems exist."""
        return 9 * 10 ** (self.digits_a - 1) * 9 * 10 ** (self.digits_b - 1)


def prompt_for(a: int, b: int, cfg: WordArithConfig = WordArithConfig()) -> str:
    """The question for ``a op b``."""
    return f"What is {a} {OPS[cfg.op][0]} {b}?"


def make_problems(n: int, cfg: WordArithConfig = WordArithConfig(), seed: int = 0) -> list[dict]:
    """``n`` distinct seeded problems as dicts with ``problem``, ``answer`` (the integer result as text) and ``op``."""
    if not 1 <= n <= cfg.space():
        raise ValueError(f"n must be between 1 and {cfg.space()} (distinct {cfg} problems), got {n!r}")
    lo_a, lo_b = 10 ** (cfg.digits_a - 1), 10 ** (cfg.digits_b - 1)
    width_b = 9 * lo_b
    rng = random.Random(seed)
    out = []
    for k in rng.sample(range(cfg.space()), n):
        i, j = divmod(k, width_b)
        a, b = lo_a + i, lo_b + j
        out.append({"problem": prompt_for(a, b, cfg), "answer": str(OPS[cfg.op][1](a, b)), "op": cfg.op})
    return out
