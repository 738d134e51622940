"""Prompt templates: how a problem becomes the prompt string the engine sees (``TEMPLATES``).

Names and texts as in Oat / sail-sg/Precision-RL's ``TEMPLATE_FACTORY`` where they exist.
"""

from __future__ import annotations

from dataclasses import dataclass

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
