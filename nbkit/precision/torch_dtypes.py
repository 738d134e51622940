"""The workbook's dtype names (``nbkit.precision.dtypes``) as torch dtypes, and back: the one table every torch-side
module reads (the model loader re-exports it as ``nbkit.models.models.DTYPES``)."""

from __future__ import annotations

import torch

from nbkit.precision.dtypes import NAMES, TORCH_NAMES

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, TORCH_NAMES[name]) for name in NAMES}
"""The precisions the workbook compares, by the paper's short names (``nbkit.precision.dtypes``) → torch dtypes."""


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    """``"fp16"`` → ``torch.float16`` (a torch dtype passes through if it is one of the three)."""
    if isinstance(name, torch.dtype) and name in DTYPES.values():
        return name
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {tuple(DTYPES)}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` → ``"bf16"``."""
    for name, value in DTYPES.items():
        if value == dtype:
            return name
    raise ValueError(f"unsupported torch dtype {dtype!r}; choose one of {tuple(DTYPES.values())}")
