"""A continuous dial between e8m2 and e8m1: e8m1 on the first n blocks of GEMMs, e8m2 on the rest.

The mantissa dial of ``nbkit.precision.formats`` jumps from e8m2 (≈ 0.035 per-token |Δ log p| on tiny-arith) to e8m1 (≈
0.5):
a 15× gap with no dose inside, just where harm starts. A *dial point* fills it with real rounding, not noise: the
model's GEMMs are cut into blocks in forward order, the attention block (q/k/v/o projections and both attention
products) and the MLP block of every decoder layer, 2L blocks for L layers, and

    ``dial-e8m1-<n>of<U>``: the first n of the U = 2L blocks run the ``e8m1`` format, the others ``e8m2``.

Both are the full dial (every GEMM's operands and output rounded, attention included, BF16 elsewhere), so
``dial-e8m1-0of<U>`` rounds exactly as ``e8m2`` and ``dial-e8m1-<U>of<U>`` exactly as ``e8m1``: GEMMs outside every
block (the LM head after the last layer, the rotary-frequency product before the first) run e8m1 only at n = U.
The fraction n/U is the dose's fixed rule (early blocks first: no choosing blocks after seeing their mismatch).

A second rule cuts within every GEMM instead of between them, for a finer dose where the blocks' steps are coarse:

    ``dial-e8m1-c<k>of<K>``: in every rounding of the full dial (each GEMM's operands and output, attention's Q, K, V,
    P and P·V), the first ⌈k/K · D⌉ of the D channels along the tensor's last dimension are rounded to e8m1, the
    others to e8m2.

Every GEMM then runs the point (counted under its name); the fixed rule (the leading channels, in the model's own
order) again leaves no choosing after the fact. Mixed-precision channels are a real scheme (LLM.int8() keeps
outlier channels in higher precision); here the split is by position, not by size. ``c0ofK`` is e8m2 and ``cKofK``
e8m1, bit for bit.

The blocks are found by name (a ``ModuleList`` called ``layers`` whose members have ``self_attn`` and ``mlp``, as
Llama, Qwen2, Mistral and SmolLM2 do); U must match the model (a ``ValueError`` says the model's U otherwise).
``DialGemm`` counts every GEMM under the point's name (the audit's evidence, ``formats.audit``) and by element under
``<point>/e8m1`` and ``<point>/e8m2`` (attention: ``sdpa/<point>/e8m<k>``), so a run shows the share it ran in e8m1.

    fmt = formats.get("dial-e8m1-3of8")      # tiny-arith: 4 layers, 8 blocks
    engine = make_engine("hf", "tiny-arith", format="dial-e8m1-3of8")
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import torch

from nbkit.precision import formats, gemm

PATTERN = re.compile(r"^dial-e8m1-(\d+)of(\d+)$")
"""A block dial point's name."""
CHANNEL_PATTERN = re.compile(r"^dial-e8m1-c(\d+)of(\d+)$")
"""A channel dial point's name."""
LOW, HIGH = 1, 2
"""Mantissa bits of the dial's two ends (e8m1 on the chosen blocks, e8m2 elsewhere)."""


@dataclass(frozen=True)
class DialPoint(formats.RolloutFormat):
    """A rollout format running e8m1 on the first ``n`` of ``blocks`` GEMM blocks and e8m2 on the rest."""

    n: int = 0
    """Blocks in e8m1, from the first (layer 0's attention) on."""
    blocks: int = 1
    """All blocks: twice the decoder layers."""

    @property
    def fraction(self) -> float:
        """Share of the blocks in e8m1: the dose rule."""
        return self.n / self.blocks


@dataclass(frozen=True)
class ChannelMix:
    """The channel rule's element: e8m1 on the first ⌈k/K · D⌉ of a tensor's D last-dimension channels, e8m2 on the
    rest (``round``, as ``formats.Minifloat.round``)."""

    k: int
    """Channels (in K-ths) rounded to e8m1."""
    of: int
    """K."""

    def channels(self, d: int) -> int:
        """How many of ``d`` channels are rounded to e8m1."""
        return -(-self.k * d // self.of)

    def round(self, x: torch.Tensor) -> torch.Tensor:
        c = self.channels(x.shape[-1])
        out = formats.e8m(HIGH).round(x)
        if c:
            out[..., :c] = formats.e8m(LOW).round(x[..., :c])
        return out


def channel_point(name: str) -> formats.RolloutFormat | None:
    """The channel dial point called ``name``; None for a name that is none; ValueError for k > K or K < 1."""
    m = CHANNEL_PATTERN.match(name) if isinstance(name, str) else None
    if m is None:
        return None
    k, of = int(m.group(1)), int(m.group(2))
    if of < 1 or not 0 <= k <= of:
        raise ValueError(f"channel dial point {name!r} needs K >= 1 and 0 <= k <= K")
    return formats.RolloutFormat(
        name,
        "bf16",
        "e8m",
        ChannelMix(k, of),
        description=f"every GEMM: e8m1 on the first {k}/{of} of the channels, e8m2 on the rest",
    )


def channel_names(steps: int = 8) -> tuple[str, ...]:
    """The channel dial in ``steps`` steps, from e8m2 (k = 0) to e8m1 (k = steps)."""
    return tuple(f"dial-e8m1-c{k}of{steps}" for k in range(steps + 1))


def names(layers: int) -> tuple[str, ...]:
    """Every dial point of a model with ``layers`` decoder layers, from e8m2 (n = 0) to e8m1 (n = 2·layers)."""
    return tuple(f"dial-e8m1-{n}of{2 * layers}" for n in range(2 * layers + 1))


def point(name: str) -> formats.RolloutFormat | None:
    """The dial point called ``name`` (block or channel rule), None for a name that is no dial point; ValueError for
    one whose n exceeds U or whose U is odd (or a channel point's k > K)."""
    m = PATTERN.match(name) if isinstance(name, str) else None
    if m is None:
        return channel_point(name)
    n, blocks = int(m.group(1)), int(m.group(2))
    if blocks < 2 or blocks % 2 or not 0 <= n <= blocks:
        raise ValueError(f"dial point {name!r} needs an even number of blocks U = 2 × layers >= 2 and 0 <= n <= U")
    return DialPoint(
        name,
        "bf16",
        "e8m",
        formats.e8m(HIGH),
        description=f"e8m1 on the first {n} of {blocks} GEMM blocks, e8m2 on the rest",
        n=n,
        blocks=blocks,
    )


def _ends(p: DialPoint) -> tuple[formats.RolloutFormat, formats.RolloutFormat]:
    """The point's two element formats, named for its counts (``<point>/e8m1``, ``<point>/e8m2``)."""
    return tuple(formats.RolloutFormat(f"{p.name}/e8m{k}", "bf16", "e8m", formats.e8m(k)) for k in (LOW, HIGH))


def gemm_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's GEMM blocks in forward order: each decoder layer's ``self_attn`` then its ``mlp``."""
    layers = next(
        (
            m
            for name, m in model.named_modules()
            if name.split(".")[-1] == "layers" and isinstance(m, torch.nn.ModuleList)
        ),
        None,
    )
    if layers is None or not all(hasattr(layer, "self_attn") and hasattr(layer, "mlp") for layer in layers):
        raise ValueError(
            f"the dial needs decoder layers with self_attn and mlp (a ModuleList called 'layers'); "
            f"{type(model).__name__} has none"
        )
    return [block for layer in layers for block in (layer.self_attn, layer.mlp)]


class DialGemm(formats.FormatGemm):
    """``FormatGemm`` whose element follows the block running: e8m1 inside the first n blocks, e8m2 in the others
    and outside every block (e8m1 there too at n = U). Hooks on the blocks switch it; ``hooked`` installs them."""

    def __init__(self, p: DialPoint, weights: set[int] | None = None, half_gemm: str = "native"):
        self.low, self.high = _ends(p)
        self.point = p
        super().__init__(self.low if p.n == p.blocks else self.high, weights, half_gemm)
        self.outside = self.fmt

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in gemm.GEMM_OPS and formats._float_dtype(args) is not None:
            self.counts[self.point.name] += 1  # every dial GEMM, whichever element: the audit's count
        return super().__torch_dispatch__(func, types, args, kwargs)

    @contextlib.contextmanager
    def hooked(self, model: torch.nn.Module):
        """Block hooks on ``model`` while active (removed on exit, also on error)."""
        blocks = gemm_blocks(model)
        if len(blocks) != self.point.blocks:
            raise ValueError(
                f"dial point {self.point.name!r} cuts the model into {self.point.blocks} blocks but "
                f"{type(model).__name__} has {len(blocks)} (choose from {names(len(blocks) // 2)[:3]}…)"
            )

        def enter(fmt):
            def hook(module, args):
                self.fmt = fmt

            return hook

        def leave(module, args, output):
            self.fmt = self.outside

        handles = []
        for i, block in enumerate(blocks):
            handles.append(block.register_forward_pre_hook(enter(self.low if i < self.point.n else self.high)))
            handles.append(block.register_forward_hook(leave))
        try:
            yield self
        finally:
            for h in handles:
                h.remove()
            self.fmt = self.outside


@contextlib.contextmanager
def policy(p: DialPoint, weights: set[int] | None, half_gemm: str, model: torch.nn.Module | None):
    """``formats.policy`` for a dial point: the mode, hooked on ``model`` (which it needs to find the blocks)."""
    if model is None:
        raise ValueError(f"dial point {p.name!r} needs the model (its blocks decide each GEMM's element)")
    mode = DialGemm(p, weights, half_gemm)
    with mode.hooked(model), mode:
        yield mode


formats.register_family(
    formats.Family(
        title="dial point",
        pattern="dial-e8m1-<n>of<U> or dial-e8m1-c<k>of<K> (nbkit.precision.dial)",
        point=point,
        kind=DialPoint,
        policy=policy,
    )
)
