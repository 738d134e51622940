"""Prompt templates: how a problem becomes the prompt string the engine sees (``TEMPLATES``).

Names and texts as in Oat / sail-sg/Precision-RL's ``TEMPLATE_FACTORY`` where they exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from nbkit.models.toymodels import number_after

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""The instruction every math template carries (Qwen-Math's and DeepSeek-R1's recommended wording)."""
ANSWER_ONLY_INSTRUCTION = "Give only the final answer, as a number within \\boxed{}."
"""The system prompt of ``smol_answer``: a short answer (a few tokens) instead of a worked solution."""
ANSWER_ONLY_EXAMPLE = ("What is 12 plus 7?", "\\boxed{19}")
"""The one example turn of ``smol_answer`` (question, answer): without it SmolLM2-135M-Instruct ignores the system
prompt and writes ~50 tokens of (mostly wrong) working (probe of 2026-11-27: 142 of 240 responses cut at 64 tokens)."""
NUMBER_ONLY_INSTRUCTION = "Answer with the number only."
"""The system prompt of ``smol_after``: the answer is the first integer of the response (grader ``first_int``)."""


def chatml(system: str, turns: tuple[tuple[str, str], ...]) -> str:
    """A ChatML conversation up to the next user turn: the system prompt, then each (question, answer) example turn."""
    examples = "".join(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n" for q, a in turns)
    return f"<|im_start|>system\n{system}<|im_end|>\n{examples}<|im_start|>user\n"


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
            "smol_answer",
            "<|im_start|>system\n"
            + ANSWER_ONLY_INSTRUCTION
            + "<|im_end|>\n<|im_start|>user\n"
            + ANSWER_ONLY_EXAMPLE[0]
            + "<|im_end|>\n<|im_start|>assistant\n"
            + ANSWER_ONLY_EXAMPLE[1]
            + "<|im_end|>\n<|im_start|>user\n",
            "<|im_end|>\n<|im_start|>assistant\n",
            "ChatML asking for the answer only in \\boxed{}, with one worked turn (``ANSWER_ONLY_EXAMPLE``): "
            "SmolLM2-135M-Instruct's short-answer task (``word_arith``, issue 51), a few completion tokens per answer.",
        ),
        Template(
            "smol_after",
            chatml(NUMBER_ONLY_INSTRUCTION, number_after.EXAMPLES),
            "<|im_end|>\n<|im_start|>assistant\n",
            "ChatML asking for the number only, with four example turns (``number_after.EXAMPLES``): "
            "SmolLM2-135M-Instruct's RL task (``number_after``, issue 51), graded by ``first_int``.",
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
