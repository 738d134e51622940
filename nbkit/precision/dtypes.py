"""The precisions the workbook compares, by the paper's short names, and the other spellings of them: the one table.

``nbkit.precision.torch_dtypes.DTYPES`` maps the same names to torch dtypes; the vLLM command lines (``nbkit plan``),
the vLLM server checks (``nbkit.rl.server``) and the lints (``nbkit.offline.lints``) read the spellings here. Pure
Python, so a command line reads it without importing torch. It sits in the precision package, the lowest of the model
layers, so every layer above (models, engines, GEMM policies, the LM head) reads the one table downward.
"""

from __future__ import annotations

NAMES: tuple[str, ...] = ("fp32", "bf16", "fp16")
"""The workbook's dtype names, in the order tables show them."""

TORCH_NAMES: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""Ours → torch's attribute name (``torch.bfloat16``), which is also vLLM's ``--dtype`` spelling."""

VLLM_NAMES: dict[str, str] = TORCH_NAMES
"""Ours → vLLM's ``--dtype`` spelling (the same words as torch's)."""

FROM_VLLM: dict[str, str] = {**{v: k for k, v in VLLM_NAMES.items()}, "half": "fp16", "float": "fp32"}
"""vLLM's dtype spellings (``bfloat16`` on its command line, ``torch.bfloat16`` in ``/server_info`` once the prefix
is dropped, and its aliases ``half`` and ``float``) → ours."""
