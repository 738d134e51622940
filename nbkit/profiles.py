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
    },
    "cpu": {
        "00_precision_primer": {},
    },
    "gpu": {
        "00_precision_primer": {},
    },
}
