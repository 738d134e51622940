"""Measuring the length law (``nbkit.offline.lengthlaw``): sample with the engine in each dtype (μ), recompute π by
the pure cast and by the RL trainer's recipe, one row per sequence; the law fitted to the rows is ``lengthlaw.laws``."""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from nbkit.engines import SamplingConfig, make_engine, vllm_available, vllm_sized_for
from nbkit.mismatch.mismatch import teacher_forced_logprobs
from nbkit.models import models
from nbkit.offline import analysis
from nbkit.offline.lengthlaw import INSTRUCTION
from nbkit.precision import gemm as gemm_policies


def measure(
    model: str = "smollm2-135m",
    dtypes=("bf16", "fp16", "fp32"),
    n_prompts: int = 12,
    samples_per_prompt: int = 2,
    max_tokens: int = 1024,
    prompt_source: str = "eval/math",
    instruction: str = INSTRUCTION,
    seed: int = 0,
    engine: str = "auto",
    engine_kwargs: dict | None = None,
    gemm: str = "auto",
    batch_size: int = 4,
    device: str | None = None,
) -> dict[str, list[dict]]:
    """Sample ``n_prompts × samples_per_prompt`` responses at temperature 1 with the engine in each dtype (μ), and
    recompute π two ways: ``cast`` (weights and compute in the dtype, notebook 02's π) and ``autocast`` (FP32
    weights under ``torch.autocast`` in the dtype: how the RL trainer computes π). Returns ``label → rows`` with
    labels ``<dtype>-cast`` / ``<dtype>-autocast`` and one row per sequence (length, Σ log π − log μ, Σ |…|)."""
    for d in dtypes:
        models.torch_dtype(d)  # validated before anything loads
    gemm_policies.validate(gemm)
    kind = engine if engine != "auto" else ("vllm" if vllm_available() else "hf")
    base, tok = models.load(model, "fp32", device=device)
    prompts = analysis.load_prompts(prompt_source, n_prompts, tok, seed, shortest=False, instruction=instruction)
    sampling = SamplingConfig(temperature=1.0, max_tokens=max_tokens, n=samples_per_prompt, seed=seed)
    dev = next(base.parameters()).device
    out: dict[str, list[dict]] = {}
    for d in dtypes:
        cast = base if d == "fp32" else copy.deepcopy(base).to(models.torch_dtype(d))
        own = {"tokenizer": tok} if kind == "hf" else {**vllm_sized_for(tok, prompts, sampling), "seed": seed}
        eng = make_engine(kind, cast if kind == "hf" else model, d, gemm=gemm, **{**own, **(engine_kwargs or {})})
        try:
            start = time.time()
            rollouts = [r for r in eng.generate(prompts, sampling) if len(r.token_ids)]
            gen_seconds = time.time() - start
        finally:
            eng.close()
        mu = [np.asarray(r.logprobs, dtype=np.float64) for r in rollouts]
        recipes = {
            "cast": lambda cast=cast, rollouts=rollouts, d=d: teacher_forced_logprobs(
                cast, rollouts, dtype=d, batch_size=batch_size, gemm=gemm
            )
        }
        if d != "fp32":

            def autocast(d=d, rollouts=rollouts):
                with torch.autocast(device_type=dev.type, dtype=models.torch_dtype(d)):
                    return teacher_forced_logprobs(base, rollouts, dtype=None, batch_size=batch_size, gemm=gemm)

            recipes["autocast"] = autocast
        for recipe, compute in recipes.items():
            start = time.time()
            pi = compute()
            seconds = time.time() - start
            out[f"{d}-{recipe}"] = [
                {
                    "sequence": i,
                    "prompt": r.prompt_index,
                    "length": len(r.token_ids),
                    "finish": r.finish_reason,
                    "sum_log_ratio": float((p - m).sum()),
                    "sum_abs_log_ratio": float(np.abs(p - m).sum()),
                    "engine": kind,
                    "generate_seconds": round(gen_seconds, 1),
                    "pi_seconds": round(seconds, 1),
                }
                for i, (r, p, m) in enumerate(zip(rollouts, pi, mu))
            ]
        del cast
    return out
