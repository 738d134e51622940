"""The synthetic arithmetic task of the ``tiny-arith`` model: problems, scratchpad answers, vocabulary, reward.

A problem adds two zero-padded ``digits``-digit numbers, ``347+058=``. The model answers with a right-to-left
column scratchpad and the result after ``|``::

    347+058=7+8+0=15,4+5+1=10,3+0+1=04|405<eos>

Each column writes ``a+b+carry=two-digit sum``; the carry is the tens digit of the previous column. The
scratchpad spreads pass rates: a small model gets some columns right some of the time, which is what the
paper's "perfectible" sanity set needs (problems solved sometimes, neither never nor always).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")
CHARS = tuple("0123456789+-*=,| ")
VOCAB_SIZE = 32
"""Vocabulary size of the tiny model (special tokens, characters, then unused slots up to a round size)."""


def vocabulary() -> dict[str, int]:
    """Token → id for the character-level tokenizer (ids fixed forever: the shipped checkpoint relies on them)."""
    tokens = list(SPECIAL_TOKENS) + list(CHARS)
    tokens += [f"<unused{i}>" for i in range(VOCAB_SIZE - len(tokens))]
    return {tok: i for i, tok in enumerate(tokens)}


@dataclass(frozen=True)
class ArithConfig:
    """Difficulty knobs of the arithmetic problems."""

    digits: int = field(default=3, metadata={"help": "Digits per operand (operands are zero-padded to this width)."})
    scratchpad: bool = field(
        default=True,
        metadata={
            "help": (
                "Answer with the column scratchpad before ``|`` (False: answer only, much harder for a tiny model)."
            )
        },
    )

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 9:
            raise ValueError(f"digits must be between 1 and 9, got {self.digits!r}")


def prompt_for(a: int, b: int, cfg: ArithConfig = ArithConfig()) -> str:
    """The prompt text for ``a + b``: zero-padded operands followed by ``=``."""
    return f"{a:0{cfg.digits}d}+{b:0{cfg.digits}d}="


def solution_for(a: int, b: int, cfg: ArithConfig = ArithConfig()) -> str:
    """The reference response (scratchpad, ``|``, result) without the end-of-sequence token."""
    da, db = f"{a:0{cfg.digits}d}"[::-1], f"{b:0{cfg.digits}d}"[::-1]
    carry, columns = 0, []
    for x, y in zip(da, db):
        s = int(x) + int(y) + carry
        columns.append(f"{x}+{y}+{carry}={s:02d}")
        carry = s // 10
    answer = str(a + b)
    return (",".join(columns) + "|" + answer) if cfg.scratchpad else ("|" + answer)


def make_problems(n: int, cfg: ArithConfig = ArithConfig(), seed: int = 0) -> list[dict]:
    """``n`` distinct seeded problems as dicts with ``problem`` (the prompt), ``answer`` and ``solution``."""
    space = (10**cfg.digits) ** 2
    if n > space:
        raise ValueError(f"only {space} distinct {cfg.digits}-digit problems exist, asked for n={n}")
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out = []
    while len(out) < n:
        a, b = rng.randrange(10**cfg.digits), rng.randrange(10**cfg.digits)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        out.append({"problem": prompt_for(a, b, cfg), "answer": str(a + b), "solution": solution_for(a, b, cfg)})
    return out


def extract_answer(response: str) -> str | None:
    """The result the model wrote after the last ``|`` (None when it wrote no ``|`` or no digits after it)."""
    if "|" not in response:
        return None
    tail = response.rsplit("|", 1)[1].strip()
    digits = ""
    for ch in tail:
        if not ch.isdigit():
            break
        digits += ch
    return digits or None


def is_correct(response: str, answer: str) -> bool:
    """True when the extracted result equals the reference answer as an integer."""
    got = extract_answer(response)
    return got is not None and int(got) == int(answer)
