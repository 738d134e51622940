"""What every engine shares: the sampling asked for (``SamplingConfig``), the rollout returned (``Rollout``),
the prompt encoding, and freeing the device after an engine."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import torch

from nbkit.models.models import DTYPES
from nbkit.runtime import gcfreeze

ENGINE_DTYPES = tuple(DTYPES)
"""Engine dtypes: the short names of ``nbkit.models.models.DTYPES``."""
LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")
SEEDINGS = ("engine", "request")
"""How vLLM seeds its sampler (``SamplingConfig.seeding``)."""
FINISH_REASONS = ("stop", "length")


@dataclass
class SamplingConfig:
    """Sampling parameters, explicit so that two engines can be asked for the same thing."""

    temperature: float = field(
        default=1.0,
        metadata={
            "help": ("Softmax temperature; 1.0 samples from the model's own distribution (the paper's setting).")
        },
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass; 1.0 = off."})
    top_k: int = field(default=0, metadata={"help": "Keep only the k most likely tokens; 0 = off."})
    max_tokens: int = field(default=64, metadata={"help": "Maximum number of generated tokens per response."})
    n: int = field(default=1, metadata={"help": "Responses per prompt."})
    seed: int = field(
        default=0,
        metadata={
            "help": (
                "Seed of the sampler (same seed + same engine + same dtype = same samples). The HF engine seeds torch with "
                "it at every call (one seed per batch); vLLM per ``seeding``."
            )
        },
    )
    seeding: str = field(
        default="engine",
        metadata={
            "help": (
                "How vLLM seeds its sampler (``SEEDINGS``). ``engine``: every request draws from the engine's own generator, "
                "seeded once when it starts (``VLLMEngine(seed=)``, which must equal ``seed``); no request carries a seed, "
                "so vLLM's batched sampler runs (one draw for the batch, FlashInfer's top-k/top-p on GPUs). Kept: a fresh "
                "engine with the same seed asked the same batches in the same order gives the same samples. Not kept: the "
                "same batch asked twice of one engine gives new samples, and a request's samples depend on the batches "
                "before it and on its batch-mates. ``request``: one seed per request (``seed * 1_000_003 + i``), samples "
                "independent of the engine's history and of the batch, at the price of vLLM's per-request sampling path "
                "every token (a Python loop over the batch, no FlashInfer)."
            )
        },
    )
    logprobs_mode: str = field(
        default="raw_logprobs",
        metadata={
            "help": (
                "``raw_logprobs``: μ = log_softmax(logits); ``processed_logprobs``: μ after temperature/top-k/top-p, i.e. "
                "the distribution actually sampled from (vLLM's names). Identical at temperature 1 without top-k/p."
            )
        },
    )

    def __post_init__(self) -> None:
        for name in ("top_k", "max_tokens", "n", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an integer, got {value!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens!r}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n!r}")
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"unknown logprobs_mode {self.logprobs_mode!r}; choose one of {LOGPROBS_MODES}")
        if self.seeding not in SEEDINGS:
            raise ValueError(f"unknown seeding {self.seeding!r}; choose one of {SEEDINGS}")


@dataclass
class Rollout:
    """One sampled response with the engine's own log-probability of every generated token."""

    prompt_index: int
    """Index of the prompt in the batch passed to ``generate``."""
    prompt: str
    """The prompt text as given (templates already applied)."""
    prompt_ids: list[int]
    """Token ids of the prompt, exactly as the engine consumed them."""
    token_ids: list[int]
    """Generated token ids (the stop token included when generation stopped on it)."""
    text: str
    """Decoded response (special tokens skipped)."""
    logprobs: list[float]
    """μ: the engine's log-probability of each generated token, ``len(logprobs) == len(token_ids)``."""
    finish_reason: str
    """``stop`` (an end-of-sequence token was sampled) or ``length`` (max_tokens reached)."""
    meta: dict = field(default_factory=dict)
    """Engine name, dtype and anything else worth keeping with the sample."""
    routing: torch.Tensor | None = None
    """Mixture-of-experts models on the HF engine: the engine's top-k experts per position of prompt + response,
    ``(len(prompt_ids) + len(token_ids), layers, k)`` (``nbkit.models.routing``; the last token, never fed back, is -1)."""

    def __len__(self) -> int:
        return len(self.token_ids)


ENGINE_KINDS = ("hf", "vllm")


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Prompt ids as every engine consumes them: the text as given, no special tokens added
    (chat templates already carry theirs)."""
    return tokenizer.encode(prompt, add_special_tokens=False)


def release_memory() -> None:
    """Collect dropped engine objects and return the accelerator's cached blocks to the device, so a later
    engine (vLLM checks free memory at start-up) or run in the same process finds the memory free. What survives
    the collection is frozen again inside a run's block (``nbkit.runtime.gcfreeze.refreeze``: vLLM's shutdown unfreezes
    the whole process)."""
    import gc

    gc.collect()
    gcfreeze.refreeze()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
