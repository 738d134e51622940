"""The long task of the ``tiny-long`` model: a chain of additions whose answer length is a knob.

A problem asks for ``x + d × n`` on a ``width``-digit register that wraps around (the sum is taken modulo
10^width, like an odometer), and the model answers by adding ``d`` to the register ``n`` times, one step per line
of a scratchpad, with a count-down of the steps left, then the result after ``|``::

    47+58*03=0347+58=05,0205+58=63,0163+58=21,|21<eos>

Each step ``rrp+d=q,`` writes the count of steps left ``rr`` (two digits, glued to the register: the character
tokenizer has no separator to spare, and spaces are dropped by the saved tokenizer), then ``p+d=q``. It copies the count ``rr`` (one less than the step before), the register ``p`` (the last
step's ``q``) and the addend ``d`` from a fixed distance back, and adds; so every token depends only on a
window of the text just before it, which a 1 M-parameter model learns in minutes, and the answer grows by
``step_tokens`` tokens per step. ``n`` (``steps``) is the length knob: ``REGIMES`` names three of them. One
wrong sum anywhere makes the final result wrong, so pass rates fall with length, as they should.

The vocabulary is tiny-arith's (``arith.vocabulary``, this package); the reward is tiny-arith's ``arith`` grader (the
integer after the last ``|`` equals the reference).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MAX_STEPS = 90
"""Largest ``steps``: 90 steps at width 2 are 994 response tokens (the count-down writes 2 digits)."""
WIDTH_CHOICES = (2, 3)
"""Register widths the task supports (tiny-long is trained on 2)."""
REGIMES: dict[str, int] = {"short": 9, "mid": 16, "medium": 27, "long": 72}
"""Named length regimes → steps (at width 2: ~100, ~180, ~300 and ~800 response tokens; ``mid`` is the harm-transfer
study's, ``nbkit.studies.harm_transfer``: ~6× tiny-arith's answers at ~60 % of ``medium``'s cost)."""


@dataclass(frozen=True)
class LongArithConfig:
    """The length knob and the register width of the chain-of-additions task."""

    steps: int = field(
        default=REGIMES["medium"],
        metadata={
            "help": (
                "Additions in the chain (1..MAX_STEPS): the response has ``step_tokens * steps + width + 2`` tokens."
            )
        },
    )
    width: int = field(
        default=2, metadata={"help": ("Digits of the register and of the addend (sums wrap modulo 10^width).")}
    )

    def __post_init__(self) -> None:
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or not 1 <= self.steps <= MAX_STEPS:
            raise ValueError(
                f"steps must be an integer between 1 and {MAX_STEPS} (named regimes: {REGIMES}), got {self.steps!r}"
            )
        if self.width not in WIDTH_CHOICES:
            raise ValueError(f"width must be one of {WIDTH_CHOICES}, got {self.width!r}")

    @classmethod
    def regime(cls, name: str, width: int = 2) -> LongArithConfig:
        """The config of a named length regime (``short``, ``medium``, ``long``)."""
        if name not in REGIMES:
            raise ValueError(
                f"unknown length regime {name!r}; choose one of {sorted(REGIMES)} or give steps=1..{MAX_STEPS}"
            )
        return cls(steps=REGIMES[name], width=width)

    @property
    def step_tokens(self) -> int:
        """Tokens of one scratchpad step ``rrp+d=q,``."""
        return 2 + 3 * self.width + 3

    @property
    def response_tokens(self) -> int:
        """Tokens of the reference response, end-of-sequence included (the tokenizer is one token a character)."""
        return self.step_tokens * self.steps + 1 + self.width + 1


def prompt_for(x: int, d: int, cfg: LongArithConfig = LongArithConfig()) -> str:
    """The prompt ``x+d*nn=`` (register, addend and step count zero-padded)."""
    w = cfg.width
    return f"{x:0{w}d}+{d:0{w}d}*{cfg.steps:02d}="


def answer_for(x: int, d: int, cfg: LongArithConfig = LongArithConfig()) -> str:
    """The result ``(x + d * steps) mod 10^width``, zero-padded to the width."""
    return f"{(x + d * cfg.steps) % 10**cfg.width:0{cfg.width}d}"


def solution_for(x: int, d: int, cfg: LongArithConfig = LongArithConfig()) -> str:
    """The reference response (the steps, ``|``, the result) without the end-of-sequence token."""
    w, mod, p, lines = cfg.width, 10**cfg.width, x, []
    for left in range(cfg.steps, 0, -1):
        q = (p + d) % mod
        lines.append(f"{left:02d}{p:0{w}d}+{d:0{w}d}={q:0{w}d},")
        p = q
    return "".join(lines) + f"|{p:0{w}d}"


def make_problems(n: int, cfg: LongArithConfig = LongArithConfig(), seed: int = 0) -> list[dict]:
    """``n`` distinct seeded problems: dicts with ``problem``, ``answer``, ``solution`` and ``steps``."""
    space = (10**cfg.width) ** 2
    if not 1 <= n <= space:
        raise ValueError(f"n must be between 1 and {space} (distinct width-{cfg.width} problems), got {n!r}")
    rng = random.Random(seed)
    pairs = rng.sample(range(space), n)
    out = []
    for pair in pairs:
        x, d = divmod(pair, 10**cfg.width)
        out.append(
            {
                "problem": prompt_for(x, d, cfg),
                "answer": answer_for(x, d, cfg),
                "solution": solution_for(x, d, cfg),
                "steps": cfg.steps,
            }
        )
    return out
