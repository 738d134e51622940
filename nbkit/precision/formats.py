"""Rollout formats beyond a dtype: a base dtype plus, optionally, quantized GEMM operands, done as hardware does it.

A *rollout format* is what the rollout engine computes in. The plain formats are the workbook's three dtypes;
the others keep a real base-dtype forward (norms, softmax, residual adds, activations all read and write the base
dtype, as in ``nbkit.precision.gemm``) and change only what the GEMMs see:

- ``fp32``, ``fp16``, ``bf16``: the dtype itself; half GEMMs follow the engine's ``nbkit.precision.gemm`` policy.
- ``fp8-e4m3``: base BF16; every linear layer (the LM head excepted, as vLLM leaves it unquantized) multiplies
  FP8 E4M3 operands: the weight with one per-tensor scale (vLLM's online ``quantization="fp8"``: amax / 448),
  the activations with a dynamic per-token scale (row amax / 448, computed on the fly for every GEMM).
- ``fp8-e4m3-channel``: the same with one weight scale per output channel (the "FP8 dynamic" checkpoints' scheme).
- ``fp8-e5m2``: as ``fp8-e4m3`` with E5M2 elements (max 57344: range for precision).
- ``mxfp4``: base BF16; both operands of every linear layer in OCP MXFP4: blocks of 32 elements along K share a
  power-of-two (E8M0) scale 2^(floor(log2 amax) − 2), elements are E2M1 (±{0, 0.5, 1, 1.5, 2, 3, 4, 6}),
  rounded to nearest even and saturated at ±6 (so a block's largest element can lose up to a quarter of itself).
- ``nvfp4``: base BF16; both operands in NVIDIA NVFP4: a per-tensor FP32 scale s = amax / (448·6), blocks of 16
  along K with an E4M3 scale round_e4m3(block amax / 6 / s), E2M1 elements saturated at ±6. (The activation's
  per-tensor scale is computed on the fly from the GEMM's operand, where deployments calibrate it once.)
- ``e8m1`` … ``e8m10``: the mantissa dial, formats with BF16's 8 exponent bits and k mantissa bits, rounded to
  nearest even with IEEE subnormals and overflow to inf: every GEMM (linear layers, LM head and both attention
  products) takes operands rounded to e8m<k> and rounds its result to e8m<k>. For k ≤ 7 the rest of the forward is
  BF16 (so ``e8m7`` *is* BF16 with the ``fp32-accumulate`` kernel, bit for bit); for k ≥ 8 no such dtype exists
  and the rest runs in FP32 (``e8m10`` has FP16's mantissa with BF16's range). So the dial rounds *three* things
  where FP8/FP4 round one: the linear layers' operands, every GEMM's output, and both attention products (Q·Kᵀ's
  operands, P and V, P·V's result); on tiny-arith e8m2 sits far above FP8 E5M2 though both keep 2 mantissa bits.
- ``e8m1-linear`` … ``e8m10-linear``: the like-for-like variant, rounded only where FP8/FP4 are: the operands of
  every linear layer but the LM head, exact products, FP32 accumulation and one rounding of the result to the
  base dtype; the LM head, attention and every other op as the base dtype's own (no per-token or per-tensor scale:
  8 exponent bits need none). Its mismatch against the full dial's is what rounding outputs and attention costs.
- ``e8m0-linear-rn`` … ``e8m10-acts``: the mechanism variants (``MECHANISMS``), each an FP32 forward whose linear
  layers (the LM head excepted) see one kind of e8m<k> rounding: both operands to nearest (``-linear-rn``) or
  stochastically (``-linear-sr``: unbiased, ``Minifloat.round_stochastic``, its draws from an explicit generator that
  ``policy`` seeds with the rollout's seed), the weights only (``-weights``: a fixed error) or the activations only
  (``-acts``: a fresh one); the other operand enters the GEMM as its FP32 bits.

Every quantized GEMM is computed the way the hardware does it: operands quantized with their scales, exact
products (E4M3×E4M3, E2M1×E4M3-scaled and e8m<k>×e8m<k> products all fit FP32's 24-bit significand), FP32
accumulation, the outer scales applied to the FP32 result, the bias added in FP32, and one rounding to the base
dtype. ``FormatGemm`` routes them inside a real forward (a ``TorchDispatchMode``, as ``nbkit.precision.gemm``) and
counts
them per format: the evidence ``audit`` reads, so a run fails when the format it asked for did not run.

    fmt = formats.get("nvfp4")
    engine = make_engine("hf", "tiny-arith", format="nvfp4")  # the engine runs it; audit: engine.format_gemms

Over ~400 lines: the format registry, its schemes and the GEMM policy that applies them are one contract with the
audit; the dial's points live in ``nbkit.precision.dial``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

from nbkit.precision import gemm
from nbkit.records import schema
from nbkit.runtime.errors import PrecisionError

# ---------------------------------------------------------------------------------------------------------
# Element formats: round to nearest even on a minifloat grid


def _pow2(n: torch.Tensor) -> torch.Tensor:
    """2**n as float32, exact for integer n in [-149, 127] (built from its bits: no libm rounding)."""
    n = n.to(torch.int32).clamp(-149, 127)
    normal = (n + 127).clamp(min=0) << 23
    sub = torch.ones_like(n) << (n + 149).clamp(0, 22)
    return torch.where(n >= -126, normal, sub).view(torch.float32)


def _exponent(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 |x|) of float32 ``x`` for normal numbers; −127 for zeros and fp32 subnormals, 128 for inf/NaN."""
    return ((x.view(torch.int32) >> 23) & 0xFF) - 127


@dataclass(frozen=True)
class Minifloat:
    """A floating-point element format: ``man_bits`` stored mantissa bits, smallest normal exponent ``emin``,
    largest finite value ``max``; ``saturate`` clamps overflow to ±max (the FP8/FP4 quantizers' rule) instead of
    rounding it to inf (a dtype cast's rule)."""

    name: str
    man_bits: int
    emin: int
    max: float
    saturate: bool

    def round(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (float32) rounded to the nearest value of this format, ties to even; NaN stays NaN."""
        x = x.float()
        if self.emin == -126 and not self.saturate:  # fp32's own exponent range: integer rounding of the bits
            return _round_bits(x, self.man_bits)
        return self.round_reference(x)

    def spacing(self, x: torch.Tensor) -> torch.Tensor:
        """The grid's spacing around float32 ``x``: 2^(max(e, emin) − man_bits), e = floor(log2 |x|) (below emin the
        subnormals' fixed spacing)."""
        e = _exponent(x.float()).clamp(self.emin, 127)
        if self.emin - self.man_bits >= -126:  # every spacing is a normal fp32 number: its bits directly
            return ((e - self.man_bits + 127) << 23).view(torch.float32)
        return _pow2(e - self.man_bits)

    def round_reference(self, x: torch.Tensor) -> torch.Tensor:
        """The definition ``round`` implements: on the grid of spacing ``spacing(x)`` around x, round half to even,
        then saturate."""
        x = x.float()
        q = self.spacing(x)
        y = torch.round(x / q) * q  # division and product by a power of two are exact; torch.round is half-even
        return y.clamp(-self.max, self.max) if self.saturate else y

    def round_stochastic(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``x`` (float32) rounded to one of its two neighbours on this format's grid, the upper with probability
        (x − lower) / spacing: E[round] = x (unbiased), where ``round`` errs the same way every time. The draws come
        from ``generator`` (explicit: the same generator state gives the same bits). Values on the grid, zeros,
        inf and NaN stay as they are; overflow as ``round`` (saturate or inf)."""
        x = x.float()
        if self.emin == -126 and not self.saturate:
            return _round_bits_stochastic(x, self.man_bits, generator)
        q = self.spacing(x).double()
        u = torch.rand(x.shape, generator=generator, dtype=torch.float64, device=x.device)
        y = torch.copysign((torch.floor(x.double() / q + u) * q).float(), x)  # x / q exact in float64; keeps −0
        y = y.clamp(-self.max, self.max) if self.saturate else torch.where(y.abs() > self.max, y * math.inf, y)
        return torch.where(torch.isfinite(x), y, x)


def _round_bits(x: torch.Tensor, man_bits: int) -> torch.Tensor:
    """Round float32 ``x`` to ``man_bits`` mantissa bits, ties to even, on its own bits (what torch's bfloat16
    cast does for 7 bits): add half an ulp minus one plus the kept lsb, clear the dropped bits. Carries move into
    the exponent (1.111… → 10.0) and past the largest finite value to inf; NaN is kept as it is."""
    if man_bits >= 23:
        return x
    drop = 23 - man_bits
    b = x.view(torch.int32)
    r = ((b + ((1 << (drop - 1)) - 1) + ((b >> drop) & 1)) & -(1 << drop)).view(torch.float32)
    return torch.where(torch.isnan(x), x, r)


def _round_bits_stochastic(x: torch.Tensor, man_bits: int, generator: torch.Generator) -> torch.Tensor:
    """Stochastic rounding of float32 ``x`` to ``man_bits`` mantissa bits on its own bits: a uniform integer below
    2^dropped added to the magnitude, then the dropped bits cleared (the round-up happens with probability equal to
    the dropped fraction; carries move into the exponent and past the largest finite value to inf). Inf and NaN are
    kept."""
    if man_bits >= 23:
        return x
    drop = 23 - man_bits
    noise = torch.randint(0, 1 << drop, x.shape, generator=generator, dtype=torch.int32, device=x.device)
    r = ((x.view(torch.int32) + noise) & -(1 << drop)).view(torch.float32)  # sign-magnitude: the sign bit is kept
    return torch.where(torch.isfinite(x), r, x)


E4M3 = Minifloat("e4m3", man_bits=3, emin=-6, max=448.0, saturate=True)
"""FP8 E4M3 (``torch.float8_e4m3fn``: no inf, max 448)."""
E5M2 = Minifloat("e5m2", man_bits=2, emin=-14, max=57344.0, saturate=True)
"""FP8 E5M2 (``torch.float8_e5m2``), saturating as FP8 quantizers do."""
E2M1 = Minifloat("e2m1", man_bits=1, emin=0, max=6.0, saturate=True)
"""FP4 E2M1 (the MXFP4/NVFP4 element): ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}."""


def e8m(k: int) -> Minifloat:
    """BF16's exponent with ``k`` mantissa bits (``e8m(7)`` rounds exactly as torch's bfloat16 cast)."""
    if not 0 <= k <= 23:
        raise ValueError(f"e8m<k> needs 0 <= k <= 23 mantissa bits, got {k!r}")
    return Minifloat(f"e8m{k}", man_bits=k, emin=-126, max=(2 - 2.0**-k) * 2.0**127, saturate=False)


# ---------------------------------------------------------------------------------------------------------
# Operand quantizers: (values with their inner scales applied, outer scale) along the last dim (K)


def _blocks(x: torch.Tensor, size: int) -> torch.Tensor:
    """[rows, K] → [rows, ceil(K/size), size], zero-padded (zeros change no block's amax)."""
    pad = (-x.shape[-1]) % size
    return torch.nn.functional.pad(x, (0, pad)).view(x.shape[0], -1, size)


def fp8_quantize(x: torch.Tensor, elem: Minifloat, per_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 with scale amax / max per row (``per_row``: a token's activations, a weight's output channel) or per
    tensor; returns (the E4M3/E5M2 values, the scale: [rows, 1] or a scalar). A zero row keeps scale 1."""
    x = x.float()
    amax = x.abs().amax(dim=-1, keepdim=True) if per_row else x.abs().amax()
    scale = torch.where(amax > 0, amax / elem.max, torch.ones_like(amax))
    return elem.round(x / scale), scale


def mxfp4_quantize(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """OCP MXFP4 along the last dim: per block of 32 a scale X = 2^(floor(log2 amax) − 2) (E8M0, clamped to
    2^±127), elements E2M1(x / X) saturated at ±6; returns the dequantized values P·X (exact in fp32)."""
    k = x.shape[-1]
    b = _blocks(x.float(), block)
    shared = (_exponent(b.abs().amax(-1, keepdim=True)) - 2).clamp(-127, 127)  # emax of E2M1 is 2
    scale = _pow2(shared)
    return (E2M1.round(b / scale) * scale).view(x.shape[0], -1)[:, :k]


def nvfp4_quantize(x: torch.Tensor, block: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4 along the last dim: a per-tensor FP32 scale s = amax / (448·6), per block of 16 an E4M3 scale
    round_e4m3(block amax / 6 / s), elements E2M1 saturated at ±6; returns (P·block scale, s): the first is
    exact in fp32 (2 × 4 significant bits), s is applied to the GEMM's FP32 result as the hardware does."""
    k = x.shape[-1]
    x = x.float()
    amax = x.abs().amax()
    s = torch.where(amax > 0, amax / (E4M3.max * E2M1.max), torch.ones_like(amax))
    b = _blocks(x, block)
    bscale = E4M3.round(b.abs().amax(-1, keepdim=True) / E2M1.max / s)
    safe = torch.where(bscale > 0, bscale, torch.ones_like(bscale))
    p = torch.where(bscale > 0, E2M1.round(b / (safe * s)), torch.zeros_like(b))  # a block whose scale underflowed
    return (p * bscale).view(x.shape[0], -1)[:, :k], s


# ---------------------------------------------------------------------------------------------------------
# The formats


@dataclass(frozen=True)
class Scheme:
    """How a format's GEMMs see their operands: the one place a quantization scheme's behaviour is written, read by
    ``quantize_operand``, ``quantized_linear`` and ``FormatGemm`` (no scheme is named anywhere else)."""

    name: str
    """Registry name (``SCHEMES``; ``RolloutFormat.scheme``)."""
    summary: str
    """One line for tables."""
    quantize: Callable[[torch.Tensor, RolloutFormat, str], tuple[torch.Tensor, torch.Tensor]] | None = None
    """(fp32 operand [rows, K], format, role) → (values with inner scales applied, outer scale); None: the base
    dtype's own GEMMs."""
    outer_scales: bool = False
    """The outer scales multiply the GEMM's FP32 result (per token × per tensor or per channel)."""
    round_output: bool = False
    """The GEMM's result is rounded to the element format before the base dtype (the dial)."""
    all_gemms: bool = False
    """Every GEMM and attention runs in the format (the dial); otherwise only the linear layers' weights ×
    activations, never the LM head or attention (as vLLM and the FP4 deployments do)."""
    operands: tuple[str, ...] = ("activation", "weight")
    """The roles ``quantize`` rounds; an operand of another role enters the GEMM as the base dtype's own values
    (``e8m-weights``: the weights only, a fixed error; ``e8m-activations``: the activations only, a fresh one)."""
    stochastic: bool = False
    """``quantize`` rounds stochastically and takes a ``generator`` (``Minifloat.round_stochastic``)."""


def _one(x: torch.Tensor) -> torch.Tensor:
    return torch.ones((), device=x.device)


SCHEMES: dict[str, Scheme] = {
    x.name: x
    for x in (
        Scheme("none", "the base dtype's own GEMMs"),
        Scheme(
            "fp8",
            "FP8 operands: per-token activation scale, per-tensor or per-channel weight scale",
            lambda x, f, role: fp8_quantize(x, f.element, per_row=role == "activation" or f.weight_scale == "channel"),
            outer_scales=True,
        ),
        Scheme(
            "mxfp4",
            "MXFP4 operands: E2M1 in 32-blocks with power-of-two scales",
            lambda x, f, role: (mxfp4_quantize(x), _one(x)),
        ),
        Scheme(
            "nvfp4",
            "NVFP4 operands: E2M1 in 16-blocks with E4M3 scales and a tensor scale",
            lambda x, f, role: nvfp4_quantize(x),
            outer_scales=True,
        ),
        Scheme(
            "e8m",
            "the mantissa dial: every GEMM's operands and output, and attention",
            lambda x, f, role: (f.element.round(x), _one(x)),
            round_output=True,
            all_gemms=True,
        ),
        Scheme(
            "e8m-linear",
            "the dial on linear operands only, as FP8/FP4",
            lambda x, f, role: (f.element.round(x), _one(x)),
        ),
        Scheme(
            "e8m-linear-rn",
            "the dial on linear operands only, rounded to nearest (the stochastic scheme's twin, on an FP32 forward)",
            lambda x, f, role: (f.element.round(x), _one(x)),
        ),
        Scheme(
            "e8m-linear-sr",
            "the dial on linear operands only, rounded stochastically (unbiased)",
            lambda x, f, role, generator: (f.element.round_stochastic(x, generator), _one(x)),
            stochastic=True,
        ),
        Scheme(
            "e8m-weights",
            "the dial on the linear layers' weights only (a fixed error: the same rounding every forward)",
            lambda x, f, role: (f.element.round(x), _one(x)),
            operands=("weight",),
        ),
        Scheme(
            "e8m-activations",
            "the dial on the linear layers' activations only (a fresh error every operation)",
            lambda x, f, role: (f.element.round(x), _one(x)),
            operands=("activation",),
        ),
    )
}
"""Name → quantization scheme."""


@dataclass(frozen=True)
class RolloutFormat:
    """A rollout format: the dtype of the forward and what, if anything, its GEMM operands are quantized to."""

    name: str
    """Registry name (``FORMATS``)."""
    base: str
    """The forward's dtype (``nbkit.precision.torch_dtypes.DTYPES``): weights, activations and every non-GEMM op."""
    scheme: str = "none"
    """A key of ``SCHEMES``: ``none`` (the base dtype's own GEMMs), ``fp8``, ``mxfp4``, ``nvfp4``, ``e8m`` (the
    mantissa dial: every GEMM's operands and output and attention), ``e8m-linear`` (the dial on linear operands
    only, as FP8/FP4), or one of the mechanism variants' (``MECHANISMS``: ``e8m-linear-rn``, ``e8m-linear-sr``,
    ``e8m-weights``, ``e8m-activations``)."""
    element: Minifloat | None = None
    """The operands' element format (E4M3, E5M2, E2M1 or e8m<k>); None for ``none``."""
    weight_scale: str = "tensor"
    """FP8 only: ``tensor`` (one scale per weight matrix) or ``channel`` (one per output channel)."""
    description: str = ""
    """One line for tables and figures."""
    vllm_quantization: str | None = None
    """vLLM's ``quantization=`` name when vLLM runs the format itself (on CUDA), else None."""

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(
                f"rollout format {self.name!r}: unknown scheme {self.scheme!r}; choose one of {tuple(SCHEMES)}"
            )
        if self.base not in ("fp32", "fp16", "bf16"):
            raise ValueError(
                f"rollout format {self.name!r}: unknown base dtype {self.base!r}; choose one of "
                "('fp32', 'fp16', 'bf16')"
            )
        if (self.element is None) != (SCHEMES[self.scheme].quantize is None):
            raise ValueError(
                f"rollout format {self.name!r}: scheme {self.scheme!r} "
                + ("needs an element format" if self.element is None else "takes no element format")
            )

    @property
    def rules(self) -> Scheme:
        """Its scheme's behaviour (``SCHEMES[scheme]``)."""
        return SCHEMES[self.scheme]

    @property
    def quantized(self) -> bool:
        """True when the GEMMs see something other than the base dtype's own values."""
        return self.rules.quantize is not None

    @property
    def all_gemms(self) -> bool:
        """The dial rounds every GEMM (it stands for a dtype); FP8/FP4 schemes only the linear layers' weights ×
        activations, never the LM head or attention (as vLLM and the FP4 deployments do)."""
        return self.rules.all_gemms


DIAL = tuple(range(1, 11))
"""Mantissa bits of the ``e8m<k>`` formats in the registry."""
MECHANISM_BITS = tuple(range(0, 11))
"""Mantissa bits of the mechanism variants in the registry (``e8m0``, powers of two only, reaches the doses the full
dial reaches with more bits: these round the linear layers only)."""
MECHANISMS = (
    ("e8m{k}-linear-rn", "e8m-linear-rn", "FP32 forward, linear operands (not the LM head) rounded to nearest e8m{k}"),
    (
        "e8m{k}-linear-sr",
        "e8m-linear-sr",
        "FP32 forward, linear operands (not the LM head) rounded stochastically to e8m{k}",
    ),
    ("e8m{k}-weights", "e8m-weights", "FP32 forward, linear weights only (not the LM head) rounded to nearest e8m{k}"),
    (
        "e8m{k}-acts",
        "e8m-activations",
        "FP32 forward, linear activations only (not the LM head) rounded to nearest e8m{k}",
    ),
)
"""The mechanism variants (issue 50 item 3): ``(name pattern, scheme, description)``, one format per ``DIAL`` point.
Each runs an FP32 forward whose linear layers (the LM head excepted) see one kind of rounding, so the only mismatch
is the one under study: nearest against stochastic (``-linear-rn`` / ``-linear-sr``), a fixed error in the weights
against a fresh one in the activations (``-weights`` / ``-acts``), at each of ``MECHANISM_BITS``."""
FORMATS: dict[str, RolloutFormat] = {}
"""Every rollout format by name (filled by ``register``)."""


def register(fmt: RolloutFormat) -> RolloutFormat:
    """Add ``fmt`` to ``FORMATS``: the one place a format is declared (the choices every
    config lists and the tests read it there). A second format of one name is refused."""
    if fmt.name in FORMATS:
        raise ValueError(f"rollout format {fmt.name!r} is registered already")
    FORMATS[fmt.name] = fmt
    return fmt


for _fmt in (
    RolloutFormat("fp32", "fp32", description="FP32 (exact reference)"),
    RolloutFormat("fp16", "fp16", description="FP16 (10 mantissa bits, 5 exponent bits)"),
    RolloutFormat("bf16", "bf16", description="BF16 (7 mantissa bits, 8 exponent bits)"),
    RolloutFormat(
        "fp8-e4m3",
        "bf16",
        "fp8",
        E4M3,
        "tensor",
        "FP8 E4M3 linears, per-tensor weight and per-token activation scales",
        vllm_quantization="fp8",
    ),
    RolloutFormat(
        "fp8-e4m3-channel",
        "bf16",
        "fp8",
        E4M3,
        "channel",
        "FP8 E4M3 linears, per-channel weight and per-token activation scales",
    ),
    RolloutFormat(
        "fp8-e5m2", "bf16", "fp8", E5M2, "tensor", "FP8 E5M2 linears, per-tensor weight and per-token activation scales"
    ),
    RolloutFormat(
        "mxfp4", "bf16", "mxfp4", E2M1, description="MXFP4 linears: E2M1, 32-blocks with power-of-two scales"
    ),
    RolloutFormat(
        "nvfp4", "bf16", "nvfp4", E2M1, description="NVFP4 linears: E2M1, 16-blocks with E4M3 scales and a tensor scale"
    ),
    *(
        RolloutFormat(
            f"e8m{k}",
            "bf16" if k <= 7 else "fp32",
            "e8m",
            e8m(k),
            description=f"every GEMM in e8m{k} (BF16's exponent, {k} mantissa bits): operands, outputs and attention",
        )
        for k in DIAL
    ),
    *(
        RolloutFormat(
            f"e8m{k}-linear",
            "bf16" if k <= 7 else "fp32",
            "e8m-linear",
            e8m(k),
            description=f"e8m{k} linear operands only (as FP8/FP4: no LM head, outputs or attention)",
        )
        for k in DIAL
    ),
    *(
        RolloutFormat(name.format(k=k), "fp32", scheme, e8m(k), description=what.format(k=k))
        for name, scheme, what in MECHANISMS
        for k in MECHANISM_BITS
    ),
):
    register(_fmt)

LADDER = ("fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "mxfp4", "nvfp4")
"""The hardware ladder, from exact to FP4 (the dial ``e8m<k>`` fills in between)."""


def choices_text() -> str:
    """The registered formats for help texts, a run of four or more of one scheme collapsed (``e8m1`` … ``e8m10``)."""
    parts = []
    for _, run in itertools.groupby(FORMATS.values(), key=lambda f: f.scheme):
        names = [f"``{f.name}``" for f in run]
        parts += [f"{names[0]} … {names[-1]}"] if len(names) >= 4 else names
    return ", ".join(parts)


@dataclass(frozen=True)
class Family:
    """A parametric family of rollout formats: its points are named by a pattern instead of listed in ``FORMATS``
    (``nbkit.precision.dial``'s points between e8m2 and e8m1). The module that defines one registers it on import
    (``register_family``); ``validate``/``get``/``policy`` then know its points without importing that module."""

    title: str
    """What one of its points is called in a refusal (e.g. ``dial point``)."""
    pattern: str
    """How its names read, for the refusal of an unknown name (e.g. ``dial-e8m1-<n>of<U>``)."""
    point: Callable[[str], RolloutFormat | None]
    """The point called ``name``, or None when the name is not one of this family's."""
    kind: type
    """The class of its points (``policy`` recognises them by it)."""
    policy: Callable
    """``(point, weights, half_gemm, model)`` → the context manager that rounds as the point says."""


FAMILIES: list[Family] = []
"""The registered parametric families (``register_family``)."""


def register_family(family: Family) -> Family:
    """Add ``family`` to ``FAMILIES`` (once per pattern)."""
    if all(f.pattern != family.pattern for f in FAMILIES):
        FAMILIES.append(family)
    return family


def _family_point(name: str) -> RolloutFormat | None:
    return next((p for p in (f.point(name) for f in FAMILIES) if p is not None), None)


def validate(name: str) -> str:
    """``name`` if it is a known rollout format, else a ``ValueError`` naming it and listing the choices."""
    if name not in FORMATS and _family_point(name) is None:
        raise ValueError(
            f"unknown rollout format {name!r}; choose one of {tuple(FORMATS)}"
            + "".join(f" or a {f.title} {f.pattern}" for f in FAMILIES)
        )
    return name


def get(name: str | RolloutFormat) -> RolloutFormat:
    """The format called ``name`` (a ``RolloutFormat`` passes through)."""
    return name if isinstance(name, RolloutFormat) else FORMATS.get(validate(name)) or _family_point(name)


# ---------------------------------------------------------------------------------------------------------
# The quantized GEMM


def quantize_operand(
    x: torch.Tensor, fmt: str | RolloutFormat, role: str, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A GEMM operand [rows, K] in ``fmt``: (values with their inner scales applied, exact in fp32; the outer
    scale applied to the GEMM's fp32 result: [rows, 1] or a scalar). ``role``: ``activation`` (FP8: per-token
    scale) or ``weight`` (FP8: per-tensor or per-channel scale, as the format says); a role the scheme does not
    round (``Scheme.operands``) comes back as it is. ``generator``: the draws of a stochastic scheme (required
    there, refused elsewhere: a nearest rounding has nothing to draw)."""
    fmt, x = get(fmt), x.float()
    if role not in ("activation", "weight"):
        raise ValueError(f"unknown operand role {role!r}; choose 'activation' or 'weight'")
    if not fmt.quantized:
        raise ValueError(f"rollout format {fmt.name!r} quantizes nothing")
    if fmt.rules.stochastic != (generator is not None):
        raise ValueError(
            f"rollout format {fmt.name!r} "
            + (
                "rounds stochastically: pass a torch.Generator"
                if generator is None
                else "rounds to nearest: no generator"
            )
        )
    if role not in fmt.rules.operands:
        return x, _one(x)
    if generator is not None:
        return fmt.rules.quantize(x, fmt, role, generator)
    return fmt.rules.quantize(x, fmt, role)


def quantized_linear(
    a: torch.Tensor,
    w: torch.Tensor | None,
    fmt: str | RolloutFormat,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    qw: tuple[torch.Tensor, torch.Tensor] | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """a @ w.T (+ bias) in ``fmt``: activations ``a`` [M, K], weight ``w`` [N, K] (K is the quantization axis;
    ``qw``: the weight already through ``quantize_operand``, then ``w`` may be None).

    Operands quantized with their scales, exact products and FP32 accumulation (one FP32 GEMM of the exactly
    representable quantized values), outer scales and bias applied in FP32, one rounding to ``out_dtype``
    (default: ``a``'s dtype). ``e8m<k>`` rounds the result to e8m<k> first (exact in the base dtype);
    ``e8m<k>-linear`` does not (its result is rounded once, to ``out_dtype``, as FP8/FP4's). ``generator``: a
    stochastic scheme's draws (``quantize_operand``).
    """
    fmt = get(fmt)
    out_dtype = out_dtype or a.dtype
    qa, sa = quantize_operand(a, fmt, "activation", generator)
    qw, sw = qw if qw is not None else quantize_operand(w, fmt, "weight", generator)
    out = qa @ qw.T
    if fmt.rules.outer_scales:
        out = out * (sa * sw.reshape(1, -1))  # per token × per tensor or per channel (NVFP4: tensor × tensor)
    if bias is not None:
        out = out + bias.float()
    if fmt.rules.round_output:
        out = fmt.element.round(out)
    return out.to(out_dtype)


# ---------------------------------------------------------------------------------------------------------
# Inside a forward: the dispatch mode


_aten = torch.ops.aten
_LINEAR_OPS = frozenset({_aten.mm.default, _aten.addmm.default})


class FormatGemm(gemm.AttentionRoutingMode):
    """Runs the block's GEMMs in rollout format ``fmt`` inside a real base-dtype forward.

    FP8/FP4 schemes: an ``mm``/``addmm`` whose second operand is (the transpose of) one of ``weights`` (data
    pointers of the quantized linear layers' weights; None = every 2-D ``mm``/``addmm``) becomes
    ``quantized_linear``. The dial (``e8m<k>``): every GEMM and attention. Every other half GEMM and attention
    follows ``half_gemm`` (``native`` or ``fp32-accumulate``, as ``nbkit.precision.gemm``). ``counts`` tallies GEMMs per
    format: ``<format name>`` for quantized ones, the half format for routed ones, ``sdpa/<name>`` for attention.
    """

    def __init__(
        self,
        fmt: str | RolloutFormat,
        weights: set[int] | None = None,
        half_gemm: str = "native",
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.fmt = get(fmt)
        if self.fmt.rules.stochastic and generator is None:
            raise ValueError(f"rollout format {self.fmt.name!r} rounds stochastically: pass a torch.Generator")
        self.generator = generator
        """A stochastic scheme's draws, in the order the GEMMs run (a weight's rounding is drawn once per version)."""
        self.weights = weights
        self.route_half = gemm.validate(half_gemm) == "fp32-accumulate"
        self.counts: Counter[str] = Counter()
        self._cache: dict = {}
        self._attention = _FormatAttention(self) if self.fmt.all_gemms else contextlib.nullcontext()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in gemm.FLASH_OPS and self.route_half and not self.fmt.all_gemms:
            out = gemm.route_attention(func, args, kwargs, self.counts)
            if out is not NotImplemented:
                return out
        if func not in gemm.GEMM_OPS:
            return func(*args, **kwargs)
        base = gemm._half_dtype(args) if not self.fmt.all_gemms else _float_dtype(args)
        if self.fmt.all_gemms and base is not None:
            self.counts[self.fmt.name] += 1
            up = [self._rounded(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
            return self.fmt.element.round(func(*up, **kwargs)).to(base)
        if self.fmt.quantized and func in _LINEAR_OPS and self._is_weight(args[-1]):
            self.counts[self.fmt.name] += 1
            bias = args[0] if func is _aten.addmm.default else None
            if func is _aten.addmm.default and (kwargs.get("beta", 1) != 1 or kwargs.get("alpha", 1) != 1):
                raise NotImplementedError("addmm with beta/alpha != 1 is not a linear layer")
            a = args[-2]
            qw = self._weight(args[-1])
            return quantized_linear(a, None, self.fmt, bias, out_dtype=a.dtype, qw=qw, generator=self.generator)
        if self.route_half and base is not None:
            self.counts[gemm.HALF[base]] += 1
            return func(*[a.float() if isinstance(a, torch.Tensor) else a for a in args], **kwargs).to(base)
        return func(*args, **kwargs)

    def _is_weight(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.dim() == 2 and (self.weights is None or t.data_ptr() in self.weights)

    def _rounded(self, t: torch.Tensor) -> torch.Tensor:
        """A dial operand rounded to e8m<k>; a weight's rounding is reused while its version stands."""
        if not self._is_weight(t) or self.weights is None:
            return self.fmt.element.round(t)
        key = (t.data_ptr(), t._version, tuple(t.shape), t.stride())
        if key not in self._cache:
            self._cache[key] = self.fmt.element.round(t)
        return self._cache[key]

    def _weight(self, w_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The quantized weight of a linear layer's GEMM operand wᵀ, quantized once per (storage, version): a
        weight sync writes in place and bumps the version, so a stale quantization is never reused."""
        key = (w_t.data_ptr(), w_t._version, tuple(w_t.shape))
        if key not in self._cache:
            self._cache[key] = quantize_operand(w_t.t(), self.fmt, "weight", self.generator)
        return self._cache[key]

    def take(self) -> Counter:
        """The counts since the last call (then reset)."""
        out, self.counts = self.counts, Counter()
        return out


def _float_dtype(args) -> torch.dtype | None:
    """The floating dtype shared by every floating tensor operand, or None."""
    dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()}
    return next(iter(dtypes)) if len(dtypes) == 1 else None


class _FormatAttention(TorchFunctionMode):
    """The dial's attention: Q, K, V rounded to e8m<k>, scores accumulated and kept in FP32 (flash attention),
    FP32 softmax, P rounded to e8m<k>, P·V accumulated in FP32 and rounded to e8m<k>: ``nbkit.precision.gemm``'s half
    attention with e8m<k> in place of the half format (for ``e8m7`` the very same roundings). K and V go through
    ``RoundedPrefix``: a decoding step's cache extends the last step's, whose rounding is reused."""

    def __init__(self, owner: FormatGemm):
        super().__init__()
        self.owner = owner
        self.prefix = RoundedPrefix()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (
            func is torch.nn.functional.scaled_dot_product_attention
            and not gemm.sdpa_arguments(*args, **kwargs)["dropout_p"]
        ):
            fmt = self.owner.fmt
            self.owner.counts[f"sdpa/{fmt.name}"] += 1
            with _disable_current_modes():
                rnd = fmt.element.round
                return _dial_attention(rnd, *args, **kwargs, round_kv=lambda x: self.prefix(fmt.name, rnd, x))
        return func(*args, **kwargs)


class RoundedPrefix:
    """``rnd(x)`` for attention's K and V, reusing earlier roundings along the sequence (dim −2).

    Decoding with a KV cache hands attention the whole cache each step: the last step's K (or V) with one position
    more. Rounding is elementwise, so when the new operand's first positions equal an earlier operand's (checked,
    bit for bit: ``torch.equal``), its rounding is that operand's rounding followed by the rounding of the new
    positions only: the same bits as rounding it whole, at a cost that does not grow with the cache. Anything else
    (a first pass, another layer's cache, a NaN) is rounded whole. Entries are per rounding (``name``) and shape;
    the ``limit`` most recent are kept, for as long as the rollout's format policy is active: one earlier copy of
    each layer's K and V and its rounding, i.e. about twice the KV cache's memory more. Without it the dial's
    rollout cost grows with the square of the length (``benchmarks/bench_dial_rollout.py``)."""

    def __init__(self, limit: int = 256):
        self.limit = limit
        self.entries: dict[tuple, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.reused = 0
        """Calls answered from an earlier rounding (a test reads it)."""

    def __call__(self, name: str, rnd, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2:
            return rnd(x)
        key = (name, tuple(x.shape[:-2]), x.shape[-1], x.dtype, x.device)
        entries = self.entries.setdefault(key, [])
        t = x.shape[-2]
        for i, (raw, done) in enumerate(entries):
            n = raw.shape[-2]
            if n <= t and torch.equal(x[..., :1, :], raw[..., :1, :]) and torch.equal(x[..., :n, :], raw):
                out = done if n == t else torch.cat([done, rnd(x[..., n:, :])], dim=-2)
                entries[i] = (x, out)
                self.reused += 1
                return out
        out = rnd(x)
        entries.append((x, out))
        del entries[: -self.limit]
        return out


def _dial_attention(
    rnd,
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    round_kv=None,
):
    """The forward of ``nbkit.precision.gemm.route_attention`` with every rounding to the half format replaced by
    ``rnd``
    (``round_kv``: how K and V are rounded, by default ``rnd``; ``RoundedPrefix`` gives the same bits)."""
    dtype = query.dtype
    round_kv = round_kv or rnd
    key, value = gemm.expand_gqa(query, key, value, enable_gqa)
    probs = gemm.attention_probs(rnd(query), round_kv(key), attn_mask, is_causal, scale)
    return rnd(rnd(probs) @ round_kv(value)).to(dtype)


def quantized_weights(model: torch.nn.Module, head: bool = False) -> set[int]:
    """Data pointers of the weights of every ``nn.Linear`` of ``model``, the LM head only with ``head`` (FP8/FP4
    formats leave it unquantized; the dial rounds it)."""
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") and not head else None
    head_ptr = out.weight.data_ptr() if out is not None else None
    return {
        m.weight.data_ptr()
        for m in model.modules()
        if isinstance(m, torch.nn.Linear) and m.weight.data_ptr() != head_ptr
    }


@contextlib.contextmanager
def policy(
    fmt: str | RolloutFormat,
    half_gemm: str = "auto",
    model: torch.nn.Module | None = None,
    device=None,
    seed: int | None = None,
):
    """Run the block in rollout format ``fmt``; yields the mode that counts its GEMMs, or None (a plain format
    whose GEMMs run natively). ``model``: the network whose linear layers FP8/FP4 quantize (None = every 2-D GEMM);
    ``half_gemm``: the ``nbkit.precision.gemm`` policy of the GEMMs the format leaves in the base dtype. ``seed``: a
    stochastic format's generator seed; None = ``torch.initial_seed()``, the seed the caller last set (the HF
    engine sets the rollout's ``SamplingConfig.seed`` before it generates), so a run's roundings follow its seed."""
    fmt = get(fmt)
    half = gemm.resolve(half_gemm, device)
    if not fmt.quantized:
        with gemm.policy(half if fmt.base != "fp32" else "native", device) as mode:
            yield mode
        return
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            "rollout formats cannot act under torch.inference_mode() (inference tensors bypass "
            "the dispatch mode): use torch.no_grad()"
        )
    weights = quantized_weights(model, head=fmt.all_gemms) if model is not None else None
    family = next((f for f in FAMILIES if isinstance(fmt, f.kind)), None)
    generator = None
    if fmt.rules.stochastic:
        where = next(model.parameters()).device if model is not None else torch.device(device or "cpu")
        generator = torch.Generator(where).manual_seed(torch.initial_seed() if seed is None else seed)
    with family.policy(fmt, weights, half, model) if family else FormatGemm(fmt, weights, half, generator) as mode:
        yield mode


# ---------------------------------------------------------------------------------------------------------
# The audit and the vLLM mapping


def audit(requested: str, counts: Counter | dict) -> dict:
    """Audit record of a rollout in format ``requested`` from its GEMM counts (``FormatGemm.counts``); raises
    ``nbkit.rl.amp.PrecisionError`` when a quantized format's GEMMs did not run in it, or another format's did."""
    fmt = get(requested)
    counts = dict(counts)
    others = {k: v for k, v in counts.items() if k in FORMATS and FORMATS[k].quantized and k != fmt.name}
    if others:
        raise PrecisionError(f"requested rollout format {fmt.name!r} but GEMMs ran in {others} (counts {counts})")
    if fmt.quantized and not counts.get(fmt.name):
        raise PrecisionError(f"requested rollout format {fmt.name!r} but no GEMM ran in it (counts {counts})")
    return {schema.AUDIT_ROLLOUT_FORMAT: fmt.name, schema.AUDIT_ROLLOUT_FORMAT_GEMMS: counts.get(fmt.name, 0)}


def vllm_kwargs(fmt: str | RolloutFormat, cuda: bool | None = None) -> dict:
    """Extra ``vllm.LLM`` arguments for ``fmt``: {} for a plain dtype, ``quantization="fp8"`` for FP8 E4M3 on CUDA;
    any other case raises a ``ValueError`` that names the HF engine (which runs every format)."""
    fmt = get(fmt)
    if not fmt.quantized:
        return {}
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if fmt.vllm_quantization and cuda:
        return {"quantization": fmt.vllm_quantization}
    where = "on CUDA GPUs only" if fmt.vllm_quantization else "not at all"
    own = tuple(f.name for f in FORMATS.values() if f.vllm_quantization)
    raise ValueError(
        f"the vLLM engine runs rollout format {fmt.name!r} {where} (formats vLLM runs itself: "
        f"{own} on CUDA); use the HF engine (engine='hf', rollout_engine='hf'), "
        f"which runs every format of nbkit.precision.formats"
    )
