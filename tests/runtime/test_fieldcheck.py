"""``nbkit.runtime.fieldcheck``: a field's declared choices (``metadata["choices"]``) are checked with its type and
range."""

from dataclasses import dataclass, field

import pytest

from nbkit.runtime.fieldcheck import FieldChoiceError, FieldTypeError, check_fields


@dataclass
class Run:
    engine: str = field(default="hf", metadata={"choices": ("hf", "vllm")})
    dtype: str | None = field(default=None, metadata={"choices": ("fp16", "bf16")})

    def __post_init__(self):
        check_fields(self)


def test_a_value_outside_the_declared_choices_is_refused_naming_value_and_choices():
    with pytest.raises(FieldChoiceError, match=r"unknown engine 'sglang'; choose one of \('hf', 'vllm'\)"):
        Run(engine="sglang")
    with pytest.raises(FieldChoiceError, match=r"unknown dtype 'fp8'; choose one of \('fp16', 'bf16'\)"):
        Run(dtype="fp8")


def test_none_of_an_optional_field_and_every_declared_choice_pass_and_the_type_is_checked_first():
    assert Run(engine="vllm", dtype=None).engine == "vllm" and Run(dtype="bf16").dtype == "bf16"
    with pytest.raises(FieldTypeError, match="engine must be a string, got 3"):
        Run(engine=3)
