"""Number formats, exact rounding and the small experiments of the precision primer.

The paper's argument starts here: BF16 keeps 8 exponent bits but only 7 mantissa bits, so two engines that
compute the same probability in slightly different orders disagree by up to 2^-8 relative; FP16 keeps 10
mantissa bits (8x finer) at the price of a narrow range, which dynamic loss scaling repairs.

- ``NumberFormat`` / ``NUMBER_FORMATS`` / ``get_format``: the exact table (fp32, fp16, bf16, fp8 e4m3fn and e5m2).
- ``to_bits`` / ``from_bits`` / ``decompose`` / ``compose`` / ``round_to``: rounding to nearest, ties to even,
  done with integer arithmetic on float64 bit patterns, independently of torch (the tests compare the two).
- ``ulp``, ``relative_rounding_error``, ``representable_grid``: the spacing of the grid and where it lies.
- ``probability_ratios``, ``one_ulp_ratio``, ``accumulation_error``, ``loss_scaling_demo``,
  ``grad_scaler_trace``: the primer's experiments, measured, not drawn by hand.

Over ~400 lines: the exact rounding maths and the precision primer's small experiments that use it (notebook 00).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

KINDS = ("zero", "subnormal", "normal", "inf", "nan")
"""The classes of a bit pattern, as ``Decomposition.kind`` reports them."""


@dataclass(frozen=True)
class NumberFormat:
    """A binary floating-point format: 1 sign bit, ``exponent_bits``, ``mantissa_bits`` (stored fraction bits).

    Every value is exact (all are powers of two or short binary fractions, exactly representable in float64).
    """

    name: str
    """Short name used throughout the workbook (``fp32``, ``fp16``, ``bf16``, ``fp8_e4m3fn``, ``fp8_e5m2``)."""
    sign_bits: int
    """Always 1."""
    exponent_bits: int
    """Width of the biased exponent field: sets the range."""
    mantissa_bits: int
    """Stored fraction bits (the leading 1 of normal numbers is implicit): sets the precision."""
    bias: int
    """Exponent bias: a normal number is ``(-1)^s * 1.f * 2^(E - bias)`` for exponent field ``E``."""
    eps: float
    """Machine epsilon: the gap between 1.0 and the next representable number, ``2^-mantissa_bits``."""
    smallest_subnormal: float
    """Smallest positive value (exponent field 0, fraction 0...01)."""
    smallest_normal: float
    """Smallest positive normal value, ``2^(1 - bias)`` (``torch.finfo(dtype).tiny``)."""
    max_finite: float
    """Largest finite value."""
    has_inf: bool
    """Whether the all-ones exponent encodes inf/NaN (IEEE style). False for e4m3fn, which has no inf and
    uses the all-ones exponent for normal numbers except the single NaN pattern S.1111.111."""
    overflow: str
    """What rounding does past ``max_finite``: ``"inf"`` (IEEE, and torch's casts) or ``"saturate"`` (torch's
    cast to float8_e4m3fn clamps to +-448, inf included)."""
    torch_dtype: torch.dtype | None
    """The matching torch dtype (None if this torch build lacks it)."""

    @property
    def bits(self) -> int:
        """Total width in bits."""
        return self.sign_bits + self.exponent_bits + self.mantissa_bits

    @property
    def min_exponent(self) -> int:
        """Unbiased exponent of the smallest normal binade (also the exponent of every subnormal)."""
        return 1 - self.bias

    @property
    def max_exponent(self) -> int:
        """Unbiased exponent of the largest finite binade."""
        return math.frexp(self.max_finite)[1] - 1

    @property
    def unit_roundoff(self) -> float:
        """Largest relative error of round-to-nearest in the normal range: ``eps / 2``."""
        return self.eps / 2


def _make_format(
    name: str, exponent_bits: int, mantissa_bits: int, dtype_name: str, has_inf: bool = True, overflow: str = "inf"
) -> NumberFormat:
    """Derive every constant of a format from its field widths."""
    bias = 2 ** (exponent_bits - 1) - 1
    if has_inf:  # top exponent field reserved for inf/NaN
        max_finite = (2.0 - 2.0**-mantissa_bits) * 2.0 ** ((2**exponent_bits - 2) - bias)
    else:  # e4m3fn: top exponent is used, only fraction all-ones is NaN
        max_finite = (2.0 - 2.0 * 2.0**-mantissa_bits) * 2.0 ** ((2**exponent_bits - 1) - bias)
    return NumberFormat(
        name=name,
        sign_bits=1,
        exponent_bits=exponent_bits,
        mantissa_bits=mantissa_bits,
        bias=bias,
        eps=2.0**-mantissa_bits,
        smallest_subnormal=2.0 ** (1 - bias - mantissa_bits),
        smallest_normal=2.0 ** (1 - bias),
        max_finite=max_finite,
        has_inf=has_inf,
        overflow=overflow,
        torch_dtype=getattr(torch, dtype_name, None),
    )


NUMBER_FORMATS: dict[str, NumberFormat] = {
    f.name: f
    for f in (
        _make_format("fp32", 8, 23, "float32"),
        _make_format("fp16", 5, 10, "float16"),
        _make_format("bf16", 8, 7, "bfloat16"),
        _make_format("fp8_e4m3fn", 4, 3, "float8_e4m3fn", has_inf=False, overflow="saturate"),
        _make_format("fp8_e5m2", 5, 2, "float8_e5m2"),
    )
}
"""The formats of the primer, by short name."""

_ALIASES = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "single": "fp32",
    "f32": "fp32",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8_e4m3fn": "fp8_e4m3fn",
    "float8_e4m3fn": "fp8_e4m3fn",
    "e4m3fn": "fp8_e4m3fn",
    "e4m3": "fp8_e4m3fn",
    "fp8_e4m3": "fp8_e4m3fn",
    "fp8_e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
    "e5m2": "fp8_e5m2",
}


def get_format(fmt: str | torch.dtype | NumberFormat) -> NumberFormat:
    """The format named by a short name, an alias (``"half"``, ``"bfloat16"``, ``"torch.float16"``), a torch
    dtype or a ``NumberFormat``; ``ValueError`` naming the valid choices otherwise."""
    if isinstance(fmt, NumberFormat):
        return fmt
    if isinstance(fmt, torch.dtype):
        for f in NUMBER_FORMATS.values():
            if f.torch_dtype == fmt:
                return f
        raise ValueError(
            f"unsupported torch dtype {fmt!r}; choose one of "
            f"{[str(f.torch_dtype) for f in NUMBER_FORMATS.values() if f.torch_dtype is not None]}"
        )
    if isinstance(fmt, str):
        key = fmt.strip().lower().removeprefix("torch.")
        if key in _ALIASES:
            return NUMBER_FORMATS[_ALIASES[key]]
    raise ValueError(
        f"unknown number format {fmt!r}; choose one of {list(NUMBER_FORMATS)} "
        f"(aliases: {sorted(set(_ALIASES) - set(NUMBER_FORMATS))}, or a torch dtype)"
    )


# --------------------------------------------------------------------------------------------- bit patterns


def _as_float64(x) -> np.ndarray:
    """Any number, sequence, numpy array or torch tensor as a float64 array (exact for float inputs)."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def _field_masks(f: NumberFormat) -> tuple[int, int, int]:
    """(all-ones exponent field, fraction mask, magnitude of the largest finite value's bit pattern)."""
    exp_ones = (1 << f.exponent_bits) - 1
    frac_mask = (1 << f.mantissa_bits) - 1
    if f.has_inf:
        max_mag = ((exp_ones - 1) << f.mantissa_bits) | frac_mask
    else:
        max_mag = (exp_ones << f.mantissa_bits) | (frac_mask - 1)
    return exp_ones, frac_mask, max_mag


def _nan_magnitude(f: NumberFormat) -> int:
    """The canonical quiet NaN pattern without its sign bit."""
    exp_ones, frac_mask, _ = _field_masks(f)
    quiet = frac_mask if not f.has_inf else 1 << (f.mantissa_bits - 1)
    return (exp_ones << f.mantissa_bits) | quiet


def to_bits(x, fmt) -> np.ndarray | int:
    """Bit pattern(s) of ``x`` rounded to ``fmt`` (round to nearest, ties to even), as unsigned integers.

    Pure integer arithmetic on the float64 bit pattern of ``x``, rounded once (torch casts float64 to the
    16-bit formats via float32, so for float64 inputs it can double-round where this does not). Overflow
    gives inf, or the largest finite value for saturating formats; NaN keeps its sign.
    """
    f = get_format(fmt)
    arr = _as_float64(x)
    scalar = arr.ndim == 0
    raw = np.atleast_1d(arr).view(np.uint64)
    sign = (raw >> np.uint64(63)).astype(np.int64)
    exp64 = ((raw >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    frac64 = (raw & np.uint64((1 << 52) - 1)).astype(np.int64)

    normal64 = exp64 > 0
    sig = np.where(normal64, frac64 | (1 << 52), frac64)  # value = sig * 2^(e - 52)
    e = np.where(normal64, exp64 - 1023, -1022)
    m = f.mantissa_bits
    shift = np.minimum(52 - m + np.maximum(f.min_exponent - e, 0), 54)  # bits dropped (more for subnormals)
    q = sig >> shift
    rem = sig & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    q = q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))  # ties to even
    # (biased exponent - 1) << m plus the significand q: a carry out of q bumps the exponent by itself.
    mag = ((np.maximum(e + f.bias, 1) - 1) << m) + q

    exp_ones, _, max_mag = _field_masks(f)
    over_mag = (exp_ones << m) if f.overflow == "inf" else max_mag
    is_inf = (exp64 == 0x7FF) & (frac64 == 0)
    is_nan = (exp64 == 0x7FF) & (frac64 != 0)
    mag = np.where((mag > max_mag) | is_inf, over_mag, mag)
    mag = np.where(is_nan, _nan_magnitude(f), mag)
    bits = ((sign << (f.bits - 1)) | mag).astype(np.uint64 if f.bits > 16 else np.uint32)
    return int(bits[0]) if scalar else bits.reshape(arr.shape)


def from_bits(bits, fmt) -> np.ndarray | float:
    """The value(s) encoded by bit pattern(s) of ``fmt``, as float64 (exact)."""
    f = get_format(fmt)
    arr = np.asarray(bits)
    scalar = arr.ndim == 0
    b = np.atleast_1d(arr).astype(np.int64)
    if np.any((b < 0) | (b >= (1 << f.bits))):
        bad = b[(b < 0) | (b >= (1 << f.bits))][0]
        raise ValueError(f"bit pattern {int(bad)} does not fit {f.name}; valid patterns are 0..{(1 << f.bits) - 1}")
    m = f.mantissa_bits
    exp_ones, frac_mask, _ = _field_masks(f)
    sign = (b >> (f.bits - 1)) & 1
    expf = (b >> m) & exp_ones
    frac = b & frac_mask
    sig = np.where(expf == 0, frac, frac | (1 << m)).astype(np.float64)
    value = np.ldexp(sig, (np.maximum(expf, 1) - f.bias - m).astype(np.int32))
    if f.has_inf:
        value = np.where(expf == exp_ones, np.where(frac == 0, np.inf, np.nan), value)
    else:
        value = np.where((expf == exp_ones) & (frac == frac_mask), np.nan, value)
    value = np.where(sign == 1, -value, value)
    return float(value[0]) if scalar else value.reshape(arr.shape)


def round_to(x, fmt) -> np.ndarray | float:
    """``x`` rounded to ``fmt`` (nearest, ties to even; overflow as torch's casts), returned as float64."""
    return from_bits(to_bits(x, fmt), fmt)


@dataclass(frozen=True)
class Decomposition:
    """The bit fields of one value after rounding to a format."""

    format: str
    """Format name."""
    value: float
    """The value asked for (before rounding)."""
    rounded: float
    """The value the bit pattern encodes."""
    bits: int
    """The whole pattern as an unsigned integer."""
    sign: int
    """Sign bit (0 or 1)."""
    exponent: int
    """Biased exponent field as an integer."""
    mantissa: int
    """Fraction field as an integer."""
    bit_string: str
    """The pattern as 0/1 characters, sign first (no separators)."""
    exponent_bits: str
    """The exponent field as 0/1 characters."""
    mantissa_bits: str
    """The fraction field as 0/1 characters."""
    unbiased_exponent: int | None
    """Power of two of the leading bit's binade (min exponent for subnormals); None for zero, inf, NaN."""
    kind: str
    """One of ``KINDS``."""


def _kind(f: NumberFormat, exponent: int, mantissa: int) -> str:
    exp_ones, frac_mask, _ = _field_masks(f)
    if exponent == exp_ones and (f.has_inf or mantissa == frac_mask):
        return "nan" if (mantissa != 0 or not f.has_inf) else "inf"
    if exponent == 0:
        return "zero" if mantissa == 0 else "subnormal"
    return "normal"


def decompose_bits(bits: int, fmt, value: float | None = None) -> Decomposition:
    """The fields of a bit pattern of ``fmt`` (``value`` = what was asked for, defaults to the pattern's)."""
    f = get_format(fmt)
    bits = int(bits)
    rounded = from_bits(bits, f)
    m = f.mantissa_bits
    sign, exponent, mantissa = bits >> (f.bits - 1), (bits >> m) & ((1 << f.exponent_bits) - 1), bits & ((1 << m) - 1)
    kind = _kind(f, exponent, mantissa)
    unbiased = {"normal": exponent - f.bias, "subnormal": f.min_exponent}.get(kind)
    s = format(bits, f"0{f.bits}b")
    return Decomposition(
        format=f.name,
        value=rounded if value is None else float(value),
        rounded=rounded,
        bits=bits,
        sign=sign,
        exponent=exponent,
        mantissa=mantissa,
        bit_string=s,
        exponent_bits=s[1 : 1 + f.exponent_bits],
        mantissa_bits=s[1 + f.exponent_bits :],
        unbiased_exponent=unbiased,
        kind=kind,
    )


def decompose(x: float, fmt) -> Decomposition:
    """The bit fields of the scalar ``x`` rounded to ``fmt``."""
    value = float(_as_float64(x))
    return decompose_bits(to_bits(value, fmt), fmt, value=value)


def compose(sign, exponent, mantissa, fmt) -> np.ndarray | float:
    """The value with these fields (sign bit, biased exponent field, fraction field); arrays broadcast."""
    f = get_format(fmt)
    fields = {"sign": (sign, 1), "exponent": (exponent, f.exponent_bits), "mantissa": (mantissa, f.mantissa_bits)}
    arrays = {}
    for name, (v, width) in fields.items():
        a = np.asarray(v).astype(np.int64)
        if np.any((a < 0) | (a >= (1 << width))):
            bad = a[(a < 0) | (a >= (1 << width))].flat[0]
            raise ValueError(f"{name} field {int(bad)} does not fit {f.name}; valid values are 0..{(1 << width) - 1}")
        arrays[name] = a
    bits = (arrays["sign"] << (f.bits - 1)) | (arrays["exponent"] << f.mantissa_bits) | arrays["mantissa"]
    return from_bits(bits, f)


# ------------------------------------------------------------------------------------------ grid and ulp


def _require_finite(x, what: str) -> np.ndarray:
    arr = _as_float64(x)
    if not np.all(np.isfinite(arr)):
        bad = np.atleast_1d(arr)[~np.isfinite(np.atleast_1d(arr))][0]
        raise ValueError(f"{what} must be finite, got {float(bad)!r}; valid values are finite real numbers")
    return arr


def ulp(x, fmt) -> np.ndarray | float:
    """Spacing of ``fmt``'s grid in the binade of ``x``: ``2^(max(E, min_exponent) - mantissa_bits)`` with
    ``E = floor(log2|x|)`` (capped at the largest finite binade). ``ulp(1.0) == eps``; ``ulp(0)`` is the
    smallest subnormal."""
    f = get_format(fmt)
    arr = _require_finite(x, "x")
    exponent = np.where(arr == 0, f.min_exponent, np.frexp(np.abs(arr))[1] - 1)
    exponent = np.clip(exponent, f.min_exponent, f.max_exponent)
    out = np.ldexp(1.0, (exponent - f.mantissa_bits).astype(np.int32))
    return float(out) if arr.ndim == 0 else out


def relative_rounding_error(x, fmt) -> np.ndarray | float:
    """``|round_to(x) - x| / |x|`` (0 at x = 0; inf where ``x`` overflows to inf). At most ``u / (1 + u)``
    with ``u = eps / 2`` in the normal range; larger for subnormals, where the grid no longer scales with x."""
    arr = _require_finite(x, "x")
    r = np.asarray(round_to(arr, fmt))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(arr == 0, 0.0, np.abs(r - arr) / np.abs(arr))
    return float(out) if arr.ndim == 0 else out


def representable_grid(lo: float, hi: float, fmt, max_points: int = 100_000) -> np.ndarray:
    """Every finite value of ``fmt`` in ``[lo, hi]``, ascending (for plotting the grid)."""
    f = get_format(fmt)
    lo, hi = float(_require_finite(lo, "lo")), float(_require_finite(hi, "hi"))
    if lo > hi:
        raise ValueError(f"lo={lo!r} must not exceed hi={hi!r}")

    def positive_patterns(a: float, b: float) -> np.ndarray:  # patterns of values in [a, b], 0 <= a <= b
        a, b = min(a, f.max_finite), min(b, f.max_finite)
        start, stop = to_bits(a, f), to_bits(b, f)
        start += from_bits(start, f) < a  # first pattern >= a
        stop -= from_bits(stop, f) > b  # last pattern <= b
        if stop - start + 1 > max_points:
            raise ValueError(
                f"[{lo!r}, {hi!r}] holds {stop - start + 1} {f.name} values, more than "
                f"max_points={max_points}; narrow the interval or raise max_points"
            )
        return np.arange(start, stop + 1, dtype=np.int64)

    parts = []
    if hi >= 0:
        parts.append(from_bits(positive_patterns(max(lo, 0.0), hi), f))
    if lo < 0:
        parts.append(-from_bits(positive_patterns(max(-hi, 0.0), -lo), f))
    values = np.concatenate(parts) if parts else np.array([])
    return np.unique(values[np.isfinite(values)])  # unique also merges +0 and -0


# ------------------------------------------------------------------------------ the primer's experiments


@dataclass(frozen=True)
class RatioRow:
    """Two close probabilities π (trainer) and μ (rollout engine) stored in one format, and what the loss sees."""

    format: str
    """Format the probabilities were rounded to (``float64`` = the exact reference)."""
    pi: float
    """π after rounding."""
    mu: float
    """μ after rounding."""
    ratio: float
    """Importance ratio π/μ of the rounded values (computed in float64)."""
    log_ratio: float
    """log π − log μ."""
    clipped: bool
    """Whether the ratio leaves PPO's trust region [1 − clip, 1 + clip] (PPO's clip then acts)."""
    k1: float
    """k1 estimate of KL[μ‖π] for this token: log μ − log π."""
    k3: float
    """k3 estimate of KL[μ‖π]: r − 1 − log r with r = π/μ (non-negative)."""
    tokens_to_clip: float
    """Sequence length at which a sequence ratio would leave the clip range if every token carried this same
    log-ratio: ``log(1 + clip) / |log r|`` (inf when r == 1)."""


def probability_ratios(
    pi: float, mu: float, formats: Sequence = ("fp32", "fp16", "bf16"), clip: float = 0.2
) -> list[RatioRow]:
    """π and μ rounded to each format (plus the exact float64 row first) and the ratio, clip and KL terms."""
    for name, p in (("pi", pi), ("mu", mu)):
        if not (math.isfinite(p) and 0 < p <= 1):
            raise ValueError(f"{name} must be a probability in (0, 1], got {p!r}")
    if not (math.isfinite(clip) and 0 < clip < 1):
        raise ValueError(f"clip must be in (0, 1), got {clip!r}")
    rows = []
    for name in ["float64", *formats]:
        p, m = (pi, mu) if name == "float64" else (round_to(pi, name), round_to(mu, name))
        if p == 0 or m == 0:
            raise ValueError(f"pi={pi!r} or mu={mu!r} underflows to 0 in {name}; choose larger probabilities")
        r = p / m
        lr = math.log(p) - math.log(m)
        rows.append(
            RatioRow(
                format=name if name == "float64" else get_format(name).name,
                pi=p,
                mu=m,
                ratio=r,
                log_ratio=lr,
                clipped=not (1 - clip <= r <= 1 + clip),
                k1=-lr,
                k3=r - 1 - lr,
                tokens_to_clip=math.log1p(clip) / abs(lr) if lr != 0 else math.inf,
            )
        )
    return rows


def one_ulp_ratio(p, fmt) -> np.ndarray | float:
    """The smallest ratio above 1 that two probabilities near ``p`` can have in ``fmt``: ``(q + ulp(q)) / q``
    with ``q = round_to(p)``. Two engines that disagree by one rounding step produce at least this ratio."""
    arr = _require_finite(p, "p")
    bad = np.atleast_1d(arr)[(np.atleast_1d(arr) <= 0) | (np.atleast_1d(arr) > 1)]
    if bad.size:
        raise ValueError(f"p must be probabilities in (0, 1], got {float(bad[0])!r}")
    q = np.asarray(round_to(arr, fmt))
    out = (q + np.asarray(ulp(q, fmt))) / q
    return float(out) if arr.ndim == 0 else out


@dataclass
class AccumulationResult:
    """Error of summing per-token log-probs in a low-precision dtype, against a float64 sum, per length."""

    lengths: list[int]
    """Sequence lengths at which the running sums were compared."""
    mean_abs_error: dict[str, list[float]]
    """Format -> mean over sequences of |low-precision sum − float64 sum of the exact values|, per length."""
    max_abs_error: dict[str, list[float]]
    """Format -> max over sequences of the same error, per length."""
    input_rounding_error: dict[str, list[float]]
    """Format -> mean |float64 sum of the rounded inputs − float64 sum|: the error left if accumulation were
    exact (e.g. an fp32 accumulator), separating input rounding from accumulation."""
    n_sequences: int
    """Random sequences averaged over."""
    mean_nll: float
    """Mean negative log-prob per token of the synthetic data (log-probs are −Exponential(mean_nll))."""
    seed: int
    """Seed of the torch generator that drew the data."""


def length_grid(max_length: int) -> list[int]:
    """Powers of two up to ``max_length``, plus ``max_length`` itself."""
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length!r}")
    return sorted({2**k for k in range(int(math.log2(max_length)) + 1)} | {max_length})


def accumulation_error(
    max_length: int = 4096,
    n_random: int = 200_000,
    formats: Sequence = ("bf16", "fp16", "fp32"),
    mean_nll: float = 0.5,
    seed: int = 0,
) -> AccumulationResult:
    """Sum ``n_random // max_length`` random sequences of per-token log-probs one token at a time, the running
    sum kept in each dtype with torch (every addition rounds to it), and measure the error at each length."""
    if n_random < max_length:
        raise ValueError(f"n_random={n_random!r} must be at least max_length={max_length!r} (one sequence)")
    if not (math.isfinite(mean_nll) and mean_nll > 0):
        raise ValueError(f"mean_nll must be a positive finite number, got {mean_nll!r}")
    lengths = length_grid(max_length)
    n_seq = n_random // max_length
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.empty(n_seq, max_length, dtype=torch.float64).exponential_(1 / mean_nll, generator=gen)
    exact = torch.cumsum(logp, dim=1)
    result = AccumulationResult(lengths, {}, {}, {}, n_seq, mean_nll, seed)
    for name in formats:
        f = get_format(name)
        x = logp.to(torch.float32).to(f.torch_dtype)  # the log-probs as the engine would hold them
        inputs_only = torch.cumsum(x.to(torch.float64), dim=1)
        acc = torch.zeros(n_seq, dtype=f.torch_dtype)
        mean_err, max_err = [], []
        for t in range(max_length):
            acc = acc + x[:, t]  # rounds to the dtype after every addition
            if t + 1 in lengths:
                err = (acc.to(torch.float64) - exact[:, t]).abs()
                mean_err.append(err.mean().item())
                max_err.append(err.max().item())
        result.mean_abs_error[f.name] = mean_err
        result.max_abs_error[f.name] = max_err
        idx = torch.tensor(lengths) - 1
        result.input_rounding_error[f.name] = (inputs_only[:, idx] - exact[:, idx]).abs().mean(0).tolist()
    return result


@dataclass
class LossScalingDemo:
    """Gradients cast to fp16 directly and after multiplying by a loss scale (then unscaled in fp32)."""

    grads: np.ndarray
    """The true gradient magnitudes (float64)."""
    scale: float
    """The loss scale."""
    unscaled: np.ndarray
    """fp16(g) as stored without scaling."""
    scaled: np.ndarray
    """fp16(g * scale) / scale: what the optimizer sees after unscaling in fp32."""
    kind_unscaled: list[str]
    """Kind (zero, subnormal, normal, inf) of each fp16 value without scaling."""
    kind_scaled: list[str]
    """Kind of each fp16 value of g * scale."""

    @staticmethod
    def _rel(stored: np.ndarray, grads: np.ndarray) -> np.ndarray:
        return np.abs(stored - grads) / np.abs(grads)

    @property
    def rel_error_unscaled(self) -> np.ndarray:
        """Relative error of fp16(g) (1.0 where it flushed to zero)."""
        return self._rel(self.unscaled, self.grads)

    @property
    def rel_error_scaled(self) -> np.ndarray:
        """Relative error of fp16(g * scale) / scale."""
        return self._rel(self.scaled, self.grads)

    def counts(self) -> dict[str, dict[str, int]]:
        """How many gradients were flushed to zero, kept as subnormals (precision lost), normal, overflowed."""
        return {
            label: {k: kinds.count(k) for k in ("zero", "subnormal", "normal", "inf")}
            for label, kinds in (("without scale", self.kind_unscaled), ("with scale", self.kind_scaled))
        }


def loss_scaling_demo(grads=None, scale: float = 2.0**16, fmt="fp16") -> LossScalingDemo:
    """Cast gradients (default: 141 log-spaced magnitudes from 1e-9 to 1e-2) to ``fmt`` with torch, with and
    without multiplying by ``scale`` first, as mixed-precision training stores them."""
    f = get_format(fmt)
    g = np.logspace(-9, -2, 141) if grads is None else _require_finite(grads, "grads").ravel()
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    gt = torch.tensor(g, dtype=torch.float32)
    plain = gt.to(f.torch_dtype)
    scaled = (gt * scale).to(f.torch_dtype)

    def kinds(t):
        return [decompose_bits(b, f).kind for b in to_bits(t.to(torch.float64), f).tolist()]

    return LossScalingDemo(
        grads=g,
        scale=float(scale),
        unscaled=plain.to(torch.float64).numpy(),
        scaled=(scaled.to(torch.float32) / scale).to(torch.float64).numpy(),
        kind_unscaled=kinds(plain),
        kind_scaled=kinds(scaled),
    )


@dataclass(frozen=True)
class ScalerStep:
    """One optimizer step driven by ``torch.amp.GradScaler``."""

    step: int
    """Step index (0-based)."""
    scale: float
    """Loss scale used for this step's backward."""
    next_scale: float
    """Scale after ``scaler.update()``: halved after an overflow, doubled after ``growth_interval`` good steps."""
    injected_inf: bool
    """Whether an inf was written into a gradient at this step."""
    skipped: bool
    """Whether the optimizer step was skipped (parameters bit-identical before and after ``scaler.step``)."""
    loss: float
    """Unscaled loss of the step."""


def grad_scaler_trace(
    n_steps: int = 12,
    inject_inf_at: Iterable[int] = (4,),
    init_scale: float = 2.0**10,
    growth_interval: int = 3,
    lr: float = 0.05,
    seed: int = 0,
) -> list[ScalerStep]:
    """Train a tiny linear regressor with an fp16 autocast forward and a live ``GradScaler("cpu")``, writing an
    inf into a gradient at the chosen steps, and record the scale and whether each step was applied."""
    inject = set(inject_inf_at)
    if n_steps < 1 or growth_interval < 1:
        raise ValueError(f"n_steps and growth_interval must be >= 1, got {n_steps!r}, {growth_interval!r}")
    if bad := [s for s in inject if not 0 <= s < n_steps]:
        raise ValueError(f"inject_inf_at steps {bad} are outside the run; valid steps are 0..{n_steps - 1}")
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 8, generator=gen)
    y = x @ torch.randn(8, 1, generator=gen)
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    trace = []
    for step in range(n_steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        if step in inject:
            model.weight.grad.view(-1)[0] = math.inf
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        skipped = all(torch.equal(b, p) for b, p in zip(before, model.parameters()))
        trace.append(
            ScalerStep(
                step=step,
                scale=scale,
                next_scale=scaler.get_scale(),
                injected_inf=step in inject,
                skipped=skipped,
                loss=loss.item(),
            )
        )
    return trace
