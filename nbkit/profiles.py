"""Run profiles: the parameters every notebook gets under each profile (papermill injects them).

- ``smoke``: what the tests run (every notebook, small parameters, minutes in total).
- ``cpu``: the default study on one CPU machine (the README's main job).
- ``gpu``: the paper's own setting (R1-Distill-Qwen-1.5B, vLLM, the sanity set) for GPU machines.

Keys are notebook file stems; a notebook missing from a profile runs with its own defaults there, but every
notebook must have a ``smoke`` entry (a test enforces it) so that CI executes it.
"""
from __future__ import annotations

PROFILES: dict[str, dict[str, dict]] = {
    "smoke": {
        "00_precision_primer": {"n_random": 20_000, "max_length": 512},
        "01_build_dataset": {  # 8 problems x 4 samples, window [0, 1] so something is kept; not the shipped set
            "pool_size": 8, "n_samples": 4, "lo": 0.0, "hi": 1.0, "batch_prompts": 4, "resume": False,
            "engine_kwargs": {"batch_size": 32, "progress": False},
            "name": "tiny_arith_smoke", "out_dir": ".cache/smoke/tiny_arith_smoke",
        },
    },
    "cpu": {
        "00_precision_primer": {},
        "01_build_dataset": {},  # the notebook's defaults: data/tiny_arith_sanity from 1,000 tiny-arith problems
    },
    "gpu": {
        "00_precision_primer": {},
        "01_build_dataset": {  # the paper's recipe: R1-Distill-Qwen-1.5B, 40 samples, [0.2, 0.8], on MATH-500
            "model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "engine": "vllm", "dtype": "bf16",
            "engine_kwargs": {"max_model_len": 10240, "gpu_memory_utilization": 0.85, "enforce_eager": False},
            "source": "eval/math", "template": "r1_distill_qwen", "pool_size": 0, "n_samples": 40,
            "lo": 0.2, "hi": 0.8, "max_tokens": 8192, "temperature": 1.0, "top_p": 1.0, "batch_prompts": 128,
            "name": "math500_r1_distill_sanity",
        },
    },
}
