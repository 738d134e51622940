"""How half-precision matrix products are computed: the GPU tensor-core contract, on any device.

A GPU's FP16 (or BF16) GEMM takes half operands, multiplies them exactly, accumulates in fp32 and rounds the
result once to the half format (cuBLAS' default in PyTorch). Upcasting a half operand to fp32 is exact and a
product of two half numbers is exact in fp32, so an fp32 GEMM on half-valued operands followed by one rounding
of its result to the half format keeps every rounding point of FP16/BF16 arithmetic. On CPUs without native half
instructions torch's own FP16 GEMM is a reference kernel 12–19× slower than fp32; this recipe runs at fp32 speed.

This is not FP32 relabelled: the policy acts *inside* a real half-precision forward/backward (weights cast, or
autocast), so every other op (norms, softmax, residual adds, activations) still reads and writes half tensors;
only the GEMM kernel changes, from one FP16 kernel to another (their results differ in the last bit of ~0.1 % of
elements, as two GPU kernels do).

Policies (``GEMM_POLICIES``):

- ``native``: torch's own kernels (what CUDA runs: tensor cores already follow the contract);
- ``fp32-accumulate``: half operands → fp32 GEMM → result rounded once to the operands' half format; half
  attention as flash attention computes it (fp32 scores and softmax, half P, fp32-accumulated products);
- ``bf16-split``: the same contract on BF16 matrix units: an FP16 value is exactly hi + lo, two BF16 values
  (hi = bf16(x), lo = bf16(x − hi): 11 significant bits = 8 + ≤ 3), and a product of two BF16 values is exact in
  fp32, so an FP16 GEMM is one fp32-accumulated BF16 GEMM over the contraction dimension laid out four times,
  [a_hi a_lo a_hi a_lo]·[b_hi; b_hi; b_lo; b_lo] = Σ a·b, rounded once to FP16. lo·lo cannot be dropped: it is
  ≤ 2⁻¹⁸ of a product, above fp32's 2⁻²⁴, so the fp32 sums (and some FP16 results) would change. BF16 operands
  need no split (one GEMM). The GEMM is an fp32 GEMM of BF16-valued operands with oneDNN's BF16 math allowed
  (``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``), exact by construction: a BF16 kernel where the CPU
  has one, torch's fp32 kernel elsewhere (same values, 4× the work: it pays only on BF16 matrix units);
- ``auto`` resolves to ``native`` where the device has native half GEMMs (CUDA; CPUs with AVX512-FP16 or AMX-FP16
  and AVX512-BF16 or AMX-BF16) and to ``fp32-accumulate`` elsewhere (AVX2-only CPUs; AVX512-BF16 without FP16), so
  FP16 and BF16 always share one kind of kernel (``default_policy``). ``bf16-split`` is chosen by name only: it
  should pay on CPUs with a BF16 matrix unit (AMX-BF16) but none for FP16 (e.g. Sapphire Rapids, whose AVX512-FP16
  GEMMs run at FP32's speed while its AMX-BF16 ones run 4–9× faster; ``cpu_has_bf16_matrix_only`` tells). Measured
  on such a Xeon (``benchmarks/README.md``, 28 Nov 2026) it does not pay: 2.0–3.6× FP32 per GEMM at SmolLM2's update
  shapes, as torch's CPU path for FP32-valued BF16 math runs the four-fold GEMM at 1.34× one FP32 GEMM before any
  splitting; ``auto`` keeps ``native`` there (``benchmarks/bench_real_lm_step.py`` prints the per-policy ratios).

Usage::

    with gemm.policy("fp32-accumulate") as mode:   # forward, backward, generate ...
        loss = model(**batch).loss; loss.backward()
    mode.counts                                     # Counter({"fp16": 24, "sdpa/fp16": 2}): what ran through it
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nbkit.precision.torch_dtypes import DTYPES

GEMM_POLICIES = ("auto", "native", "fp32-accumulate", "bf16-split")
"""Accepted values of every ``gemm`` setting of the workbook."""

ROUTED = ("fp32-accumulate", "bf16-split")
"""The policies that route half GEMMs through a dispatch mode of this module (``policy`` yields it; it counts)."""

HALF = {dt: name for name, dt in DTYPES.items() if name != "fp32"}
"""The half formats by torch dtype (from ``nbkit.precision.torch_dtypes.DTYPES``)."""

_aten = torch.ops.aten
GEMM_OPS = frozenset(
    {
        _aten.mm.default,
        _aten.addmm.default,
        _aten.bmm.default,
        _aten.baddbmm.default,
        _aten.addbmm.default,
        _aten.addmv.default,
        _aten.mv.default,
        _aten.dot.default,
    }
)
"""The matrix products the policy routes (linear layers, their backward, batched attention products)."""


def validate(name: str) -> str:
    """``name`` if it is a known policy, else a ``ValueError`` naming the choices."""
    if name not in GEMM_POLICIES:
        raise ValueError(f"unknown gemm policy {name!r}; choose one of {GEMM_POLICIES}")
    return name


def default_policy(device: str | torch.device | None = None) -> str:
    """``native`` where the device has native FP16 *and* BF16 GEMMs, else ``fp32-accumulate``.

    CUDA (and any non-CPU accelerator) counts as native; a CPU with AVX512-FP16 (or AMX-FP16) and AVX512-BF16 (or
    AMX-BF16) too. One policy for both formats: they must differ by format, not kernel. ``bf16-split`` is never the
    default: measured on a CPU with a BF16 matrix unit only, it did not pay (see the module docstring).
    """
    kind = torch.device(device).type if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    if kind != "cpu":
        return "native"
    return "native" if cpu_has_native_half() else "fp32-accumulate"


def _avx512_kernels() -> bool:
    """ATen runs AVX512 kernels here and oneDNN is not capped below them (``ONEDNN_MAX_CPU_ISA``): how
    ``benchmarks/bench_gemm.py --isa avx2`` emulates an AVX2 machine is seen."""
    if "AVX512" not in torch.backends.cpu.get_cpu_capability().upper():
        return False
    return not os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper().startswith(("SSE", "AVX2", "AVX_"))


def _flags() -> set[str]:
    """The CPU's flags as a set (empty where /proc/cpuinfo is unreadable)."""
    try:
        return set(_cpu_flags())
    except OSError:
        return set()


def cpu_has_native_half() -> bool:
    """True when torch's CPU kernels can use native FP16 and BF16 arithmetic here: the CPU has the instructions
    (/proc/cpuinfo; False where unreadable) and neither ATen (``ATEN_CPU_CAPABILITY``) nor oneDNN
    (``ONEDNN_MAX_CPU_ISA``) is capped below AVX512 (how ``benchmarks/bench_gemm.py --isa avx2`` emulates an
    AVX2 machine)."""
    flags = _flags()
    return _avx512_kernels() and bool(flags & {"avx512_fp16", "amx_fp16"}) and bool(flags & {"avx512_bf16", "amx_bf16"})


def cpu_has_bf16_matrix_only() -> bool:
    """True on a CPU with a BF16 matrix unit (AMX-BF16) and no FP16 one (AMX-FP16), kernels not capped below AVX512:
    where four BF16 GEMMs (``bf16-split``) beat one FP16 or FP32 GEMM. AVX512-BF16 alone (vector dot products, at
    most ~2× FP32's GEMM rate) does not count: four such GEMMs cost more than one FP32 GEMM."""
    flags = _flags()
    return _avx512_kernels() and "amx_bf16" in flags and "amx_fp16" not in flags


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> tuple[str, ...]:
    """The CPU's feature flags (read once per process: ``resolve`` runs for every π batch)."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return tuple(line.split(":", 1)[1].split())
    return ()


KERNEL_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
"""Environment variables that cap torch's, oneDNN's and MKL's CPU kernels below what the CPU has (how the
benchmarks emulate an AVX2 CPU on an AVX512 one): a measurement made under one is named as such."""


def kernel_caps() -> dict[str, str]:
    """The ``KERNEL_CAPS`` set in this process ({} on a CPU running its own kernels)."""
    return {k: os.environ[k] for k in KERNEL_CAPS if os.environ.get(k)}


HALF_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16")
"""The CPU flags that decide half-precision speed and ``auto``'s GEMM policy: named in every measurement's card."""


def half_flags() -> list[str]:
    """Which of ``HALF_FLAGS`` this CPU has ([] where /proc/cpuinfo is unreadable)."""
    try:
        flags = set(_cpu_flags())
    except OSError:
        return []
    return [f for f in HALF_FLAGS if f in flags]


def resolve(name: str, device: str | torch.device | None = None) -> str:
    """The concrete policy (``native`` | ``fp32-accumulate`` | ``bf16-split``) behind ``name``."""
    return default_policy(device) if validate(name) == "auto" else name


class AttentionRoutingMode(TorchDispatchMode):
    """A dispatch mode that also holds ``self._attention`` (a function mode routing ``scaled_dot_product_attention``,
    or a null context) entered and left with it, innermost last: the plumbing of ``nbkit.precision.formats``' dial."""

    _attention: contextlib.AbstractContextManager

    def __enter__(self):
        self._attention.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._attention.__exit__(*exc)


class Fp32AccumulateGemm(TorchDispatchMode):
    """Routes every half-precision GEMM through fp32: upcast operands (exact), fp32 GEMM, one rounding.

    Ops whose floating operands are not all of one half dtype pass through untouched (fp32 work stays fp32).
    Half-precision attention (the fused CPU kernel has its own half GEMMs, 5–9× slower than fp32 on AVX2) becomes
    the flash-attention recipe, forward and backward (``route_attention``). Both act at the dispatch level, below
    autocast and autograd, so a training forward under autocast, the recomputation of a gradient-checkpointed
    layer in backward and the backward itself all take the same path. ``counts`` tallies the GEMMs (per half
    format) and attentions (``sdpa/<format>``, forward calls) routed: the evidence the precision audit reads.
    """

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in GEMM_OPS:
            half = _half_dtype(args)
            if half is not None:
                self.counts[HALF[half]] += 1
                return self.gemm(func, args, kwargs).to(half)
        if func in FLASH_OPS:
            out = route_attention(func, args, kwargs, self.counts)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)

    def take(self) -> Counter:
        """The counts since the last call (then reset)."""
        out, self.counts = self.counts, Counter()
        return out

    @staticmethod
    def gemm(func, args, kwargs):
        """The fp32 result of one half GEMM: operands upcast (exactly), one fp32 GEMM."""
        return func(*[a.float() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)


_PRODUCT = {  # a GEMM with a bias term → its product alone (whether the product sums over the batch)
    _aten.addmm.default: (_aten.mm.default, False),
    _aten.baddbmm.default: (_aten.bmm.default, False),
    _aten.addbmm.default: (_aten.bmm.default, True),
    _aten.addmv.default: (_aten.mv.default, False),
}


class Bf16SplitGemm(Fp32AccumulateGemm):
    """``fp32-accumulate``'s contract (half operands, exact products, fp32 accumulation, one rounding) on BF16 GEMM
    kernels: each operand is split exactly into BF16-valued hi + lo (``split_bf16``; lo = 0 for BF16 operands, which
    then need one GEMM), the contraction dimension laid out as [a_hi a_lo a_hi a_lo]·[b_hi; b_hi; b_lo; b_lo], and
    one fp32 GEMM with oneDNN's BF16 math allowed computes Σ a·b with every product exact (``bf16_math``). A bias
    term (addmm, baddbmm, addbmm, addmv) is added to the product in fp32 afterwards. Attention, counts and the
    audit's evidence are ``Fp32AccumulateGemm``'s. Equal to ``fp32-accumulate`` up to the order of the fp32 sums."""

    @staticmethod
    def gemm(func, args, kwargs):
        product, over_batch = _PRODUCT.get(func, (func, False))
        bias = args[0] if func in _PRODUCT else None
        a, b = args[1:3] if func in _PRODUCT else args[:2]
        if a.dtype == torch.float16:  # BF16 operands are their own hi (lo = 0): one GEMM
            a_hi, a_lo = split_bf16(a)
            b_hi, b_lo = split_bf16(b)
            kb = -2 if b.dim() >= 2 else -1  # b's contraction dimension (a's is its last)
            a = torch.cat([a_hi, a_lo, a_hi, a_lo], dim=-1)
            b = torch.cat([b_hi, b_hi, b_lo, b_lo], dim=kb)
        else:
            a, b = a.float(), b.float()
        with bf16_math():
            out = product(a, b)
        if over_batch:
            out = out.sum(0)
        if bias is None:
            return out
        beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
        out = out if alpha == 1 else out * alpha
        return out if beta == 0 else out + (bias.float() if beta == 1 else bias.float() * beta)


def split_bf16(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (FP16 or BF16) as hi + lo, both BF16 values held in fp32: hi = bf16(x), lo = bf16(x − hi). Exact for
    every finite FP16 value (11 significant bits: hi takes 8, |x − hi| ≤ half of hi's last place leaves ≤ 3, and
    FP16's range, subnormals included, lies inside BF16's); ±inf is hi with lo = 0 (not inf − inf = NaN)."""
    xf = x.float()
    hi = xf.to(torch.bfloat16).float()
    lo = torch.nan_to_num(xf - hi, nan=0.0).to(torch.bfloat16).float()
    return hi, lo


@contextlib.contextmanager
def bf16_math():
    """fp32 GEMMs in the block may run on oneDNN's BF16 kernels (``torch.backends.mkldnn.matmul.fp32_precision =
    "bf16"``: operands rounded to BF16, fp32 accumulation, fp32 result); where the CPU has none, torch's fp32 kernels
    run. Exact for operands that are BF16 values already (what ``Bf16SplitGemm`` passes)."""
    setting = torch.backends.mkldnn.matmul
    before = setting.fp32_precision
    setting.fp32_precision = "bf16"
    try:
        yield
    finally:
        setting.fp32_precision = before


MODES = {"fp32-accumulate": Fp32AccumulateGemm, "bf16-split": Bf16SplitGemm}
"""The dispatch mode of each routed policy (``ROUTED``)."""


def mode(name: str, device: str | torch.device | None = None) -> Fp32AccumulateGemm | None:
    """A fresh dispatch mode for policy ``name`` (resolved on ``device``), or None where it resolves to native."""
    resolved = resolve(name, device)
    return MODES[resolved]() if resolved in MODES else None


_FLASH_CPU = _aten._scaled_dot_product_flash_attention_for_cpu.default
_FLASH_CPU_BACKWARD = _aten._scaled_dot_product_flash_attention_for_cpu_backward.default
FLASH_OPS = frozenset({_FLASH_CPU, _FLASH_CPU_BACKWARD})
"""The fused attention kernels ``route_attention`` replaces (what ``scaled_dot_product_attention`` calls on CPU)."""


def route_attention(func, args, kwargs, counts: Counter):
    """One of ``FLASH_OPS`` on half tensors as the flash-attention recipe, or ``NotImplemented`` (other dtypes,
    dropout): forward = scores Q·Kᵀ from half operands accumulated and kept in fp32, fp32 softmax (and its
    log-sum-exp, which autograd saves for backward), P rounded to half, P·V accumulated in fp32 and rounded once;
    backward = P recomputed in fp32 from the saved log-sum-exp, dV = Pᵀ·dO, dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O)) in
    fp32, dS rounded to half (as GPU flash kernels feed it to their dQ/dK GEMMs), dQ = dS·K, dK = dSᵀ·Q, every
    product accumulated in fp32 and each gradient rounded once to half."""
    backward = func is _FLASH_CPU_BACKWARD
    call = _flash_backward_arguments(*args, **kwargs) if backward else _flash_arguments(*args, **kwargs)
    half = call["query"].dtype
    if half not in HALF or call["dropout_p"]:
        return NotImplemented
    q, k, v = call["query"], call["key"], call["value"]
    groups = q.size(-3) // k.size(-3)  # grouped-query attention: the kernel takes K and V with fewer heads
    kx, vx = expand_gqa(q, k, v, groups > 1)
    scale = call["scale"] if call["scale"] is not None else q.size(-1) ** -0.5
    scores = attention_scores(q.float(), kx.float(), call["attn_mask"], call["is_causal"], scale)
    if not backward:
        counts[f"sdpa/{HALF[half]}"] += 1
        lse = torch.logsumexp(scores, dim=-1)
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a fully masked row (padding) gives zeros
        return (probs.to(half).float() @ vx.float()).to(half), lse
    grad, out = call["grad_out"].float(), call["out"].float()
    probs = torch.exp(scores - call["logsumexp"].unsqueeze(-1)).nan_to_num(0.0)
    dv = probs.to(half).float().transpose(-2, -1) @ grad
    ds = probs * (grad @ vx.float().transpose(-2, -1) - (grad * out).sum(-1, keepdim=True))
    ds = ds.to(half).float()
    dq = (ds @ kx.float()) * scale
    dk = (ds.transpose(-2, -1) @ q.float()) * scale
    if groups > 1:  # each key/value head's gradient sums over the query heads that shared it
        dk, dv = (t.unflatten(-3, (k.size(-3), groups)).sum(-3) for t in (dk, dv))
    return dq.to(half), dk.to(half), dv.to(half)


def _flash_arguments(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None) -> dict:
    return dict(
        query=query, key=key, value=value, dropout_p=dropout_p, is_causal=is_causal, attn_mask=attn_mask, scale=scale
    )


def _flash_backward_arguments(
    grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
) -> dict:
    return dict(
        grad_out=grad_out,
        query=query,
        key=key,
        value=value,
        out=out,
        logsumexp=logsumexp,
        dropout_p=dropout_p,
        is_causal=is_causal,
        attn_mask=attn_mask,
        scale=scale,
    )


def sdpa_arguments(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
) -> dict:
    """``scaled_dot_product_attention``'s arguments by name, however the caller passed them."""
    return dict(
        query=query,
        key=key,
        value=value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )


def expand_gqa(query, key, value, enable_gqa: bool):
    """Key and value repeated to the query's heads (grouped-query attention), as ``scaled_dot_product_attention``."""
    if enable_gqa and key.size(-3) != query.size(-3):
        key = key.repeat_interleave(query.size(-3) // key.size(-3), dim=-3)
        value = value.repeat_interleave(query.size(-3) // value.size(-3), dim=-3)
    return key, value


def attention_scores(q, k, attn_mask=None, is_causal: bool = False, scale: float | None = None):
    """q·kᵀ·scale with the causal and attention masks applied (−inf where masked), from ``q`` and ``k`` as given
    (the caller rounds or upcasts them)."""
    scale = scale if scale is not None else q.size(-1) ** -0.5
    scores = (q @ k.transpose(-2, -1)) * scale
    if is_causal:
        n, m = scores.shape[-2:]
        causal = torch.ones(n, m, dtype=torch.bool, device=scores.device).tril(m - n)
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        scores = (
            scores.masked_fill(~attn_mask, float("-inf"))
            if attn_mask.dtype == torch.bool
            else scores + attn_mask.float()
        )
    return scores


def attention_probs(q, k, attn_mask=None, is_causal: bool = False, scale: float | None = None):
    """softmax(q·kᵀ·scale + mask) (``attention_scores``): the part the plain-op attentions share. A fully masked
    row (padding) gives zeros."""
    return torch.softmax(attention_scores(q, k, attn_mask, is_causal, scale), dim=-1).nan_to_num(0.0)


def _half_dtype(args) -> torch.dtype | None:
    """The half dtype shared by every floating tensor operand, or None (mixed, fp32, or no tensor)."""
    dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()}
    if len(dtypes) == 1:
        (dt,) = dtypes
        return dt if dt in HALF else None
    return None


@contextlib.contextmanager
def policy(name: str, device: str | torch.device | None = None):
    """Run the block under GEMM policy ``name``; yields the active mode (``MODES``) or None (native)."""
    active = mode(name, device)
    if active is None:
        yield None
        return
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            f"the {resolve(name, device)} GEMM policy cannot act under torch.inference_mode(): inference "
            "tensors bypass its dispatch mode, so the GEMMs would silently run natively; use "
            "torch.no_grad() instead"
        )
    with active:
        yield active


@contextlib.contextmanager
def suspended():
    """Run the block with no GEMM policy mode active (e.g. inside vLLM, which keeps its own kernels)."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        yield
