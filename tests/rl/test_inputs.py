"""A run's inputs are checked before any model loads (``nbkit.rl.inputs``): prompts against the model's context."""

import pytest

from nbkit.models import models
from nbkit.rl import RLConfig, inputs


def test_a_10_mb_problem_is_refused_from_its_length_without_being_tokenized(monkeypatch):
    """Issue 73, 8: it was tokenized (4.4 GB of memory), then the advice read 'lower max_tokens to at most
    -9999874'."""
    from transformers import AutoTokenizer

    path = models.resolve("tiny-arith")
    tokenizer = AutoTokenizer.from_pretrained(path)
    real = inputs.encode_prompt
    monkeypatch.setattr(
        inputs, "encode_prompt", lambda tok, p: real(tok, p) if len(p) < 1000 else pytest.fail("tokenized")
    )
    with pytest.raises(ValueError) as err:
        inputs.check_prompts(RLConfig(max_completion_length=40), tokenizer, ["1+1=", "1" * 10_000_000 + "+1="], path)
    said = str(err.value)
    assert "has 10000003 characters" in said and "more than the model's whole context of 128 positions" in said
    assert "shorten it or drop it from dataset" in said and "at most -" not in said


def test_a_prompt_that_fills_the_context_alone_is_told_to_be_shortened_not_max_tokens_lowered():
    with pytest.raises(ValueError, match="the prompt alone fills the context: shorten it or drop it") as err:
        inputs.needed_context(RLConfig(max_completion_length=40), 130, 128, "1" * 130)
    assert "at most -" not in str(err.value)
    with pytest.raises(ValueError, match="lower max_completion_length to at most 28"):
        inputs.needed_context(RLConfig(max_completion_length=40), 100, 128, "1" * 100)
