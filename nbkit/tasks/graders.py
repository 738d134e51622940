"""Graders: how a response is read and scored against the reference answer (``GRADERS``).

Math answers are checked with math-verify (``math_verify.parse``/``verify``), the checker Oat and the paper's
repository (sail-sg/Precision-RL) use; ``arith`` answers with ``nbkit.models.toymodels.arith.is_correct``; the
short integer answers of SmolLM2's task (issue 51) strictly, as the template asks for them (``boxed_int``,
``first_int``): math-verify would take the last number of a response with an empty box as its answer.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from nbkit.models.toymodels.arith import extract_answer, is_correct


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


_INTEGER = re.compile(r"[+-]?\d+")
_BOX = re.compile(r"\\boxed\s*\{([^{}]*)\}")


def _integer_answer_ok(answer: str) -> bool:
    return _INTEGER.fullmatch(answer.strip()) is not None


def boxed_int(response: str) -> str | None:
    """The integer in the response's only ``\\boxed{}`` (``"so \\boxed{ 12 }."`` → ``"12"``); None when there is
    no box, more than one (hedging), or the box holds anything but an integer (``\\boxed{}``, ``\\boxed{12.5}``)."""
    boxes = _BOX.findall(response)
    if len(boxes) != 1 or "\\boxed" in _BOX.sub("", response):  # a box left over is one nested or never closed
        return None
    text = boxes[0].strip()
    return str(int(text)) if _INTEGER.fullmatch(text) else None


def first_int(response: str) -> str | None:
    """The first integer written in the response (``"12."`` → ``"12"``, ``"7 plus 5 is 12"`` → ``"7"``); None
    when it has none. For a template that asks for the number only: restating the question is wrong."""
    match = _INTEGER.search(response)
    return str(int(match.group())) if match else None


def _int_grader(extract: Callable[[str], str | None]) -> Callable[[str, str], bool]:
    def correct(response: str, answer: str) -> bool:
        got = extract(response)
        return got is not None and int(got) == int(answer.strip())

    return correct


GRADERS: dict[str, Grader] = {
    g.name: g
    for g in (
        Grader(
            "arith",
            extract_answer,
            is_correct,
            _arith_answer_ok,
            "nbkit.models.toymodels.arith: the integer after the last '|' equals the sum.",
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
        Grader(
            "boxed_int",
            boxed_int,
            _int_grader(boxed_int),
            _integer_answer_ok,
            "The integer in the response's only \\boxed{} equals the integer reference; no box, an empty or "
            "non-integer box, or several boxes = no answer (``smol_answer``).",
        ),
        Grader(
            "first_int",
            first_int,
            _int_grader(first_int),
            _integer_answer_ok,
            "The first integer of the response equals the integer reference (a template asking for the number "
            "only, ``smol_number``); no integer = no answer.",
        ),
    )
}
