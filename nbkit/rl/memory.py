"""GPU memory of one training process, estimated, and the micro-batch that fits (what ``nbkit plan`` sizes).

    shape = model_shape("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    fit = fit_micro_batch(shape, share=128, seq_tokens=10_240, kind="multi_gpu", trainers=4, gpu_gib=80)
    fit.micro_batch, fit.gradient_accumulation_steps, fit.peak_gib

An estimate, stated with its terms, not a measurement (nothing here has run on a GPU). Per training process:

- **states**: weights, gradients and AdamW moments. One GPU / DDP keep FP32 weights, FP32 gradients and two FP32
  moments (16 bytes per parameter) plus the half copies autocast caches during a forward (2); DDP adds its FP32
  gradient buckets (4 more) unless ``gradient_as_bucket_view`` makes the gradients views of them (accelerate's
  default is off; the workbook's trainer turns it on: ``BUCKET_VIEW``); FSDP2 shards all of it over the trainers;
  ZeRO-2 keeps the half module weights whole (2) and shards gradients, FP32 masters and moments (14 / trainers);
  ZeRO-3 shards everything (16 / trainers).
- **critic** (PPO): a copy of the policy's backbone with a value head (``nbkit.rl.critic``), trained with its own
  AdamW: the same bytes per parameter as the policy under the same launch kind, for the backbone's parameters
  (the policy's less its untied ``lm_head``); about 24 GiB for the 1.5B model under DDP. Its loss-time forward and
  backward run inside π's loss, before π's backward, so its activations (checkpointed like π's, ``nbkit.rl.critic``;
  no vocabulary head) are held beside π's: ``critic_activation_bytes``, added to the activations.
- **activations** of one micro-batch (TRL pads it to its longest sequence, so a full-length one is budgeted):
  the checkpointed hidden state of every layer (TRL's default gradient checkpointing) and one layer's recomputed
  activations with the residual stream's gradient into and out of it (without checkpointing, every layer's
  activations), the 4-D boolean attention mask SDPA gets for a padded batch (sequences × tokens² bytes), and π's
  head. Under autocast over FP32 weights the residual stream stays FP32, so a checkpointed hidden state costs 4
  bytes per unit whatever the training dtype (``RESIDUAL_BYTES``), its gradient is FP32 (``RESIDUAL_GRAD_BYTES``),
  and a layer held whole (not checkpointed, or the one being recomputed) holds FP32 residual and RMSNorm tensors
  beside its half ones (``LAYER_FP32``). ``tests/rl/test_memory.py`` measures small Qwen2 models of four shapes on
  CPU under the same autocast and checkpointing (torch's ``MemTracker``) and holds the estimate within 15 % of each.
  TRL 1.16 computes π with its fused, chunked
  head (``add_fused_lm_head``: tiles of 4,096 tokens × 32,768 vocabulary entries), which never builds the full
  logits: per token it keeps the FP32 hidden state for backward and its FP32 gradient (8 bytes per hidden unit),
  plus one FP32 ``lm_head`` gradient buffer and one tile. Full logits (``LOGIT_BYTES`` per token and vocabulary
  entry at the peak: the half output and the saved FP32 log-softmax) are what a plain ``.logits`` forward with
  gradient would cost (``fused_head=False``, the CPU measurement's path).
- **vLLM** (colocated): its ``gpu_memory_utilization`` share, held during backward unless it sleeps.

Peak = states + activations + vLLM share, or states + max(activations, vLLM share) when the engine sleeps
between rollouts. The micro-batch is the largest divisor of the process's share whose peak stays within
``HEADROOM`` of the GPU.

Why ours: accelerate's ``accelerate estimate-memory`` counts weights and Adam states only (no activations, no
critic, no vLLM engine), and TRL sizes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from nbkit.models import models

GIB = 2**30
HEADROOM = 0.9
"""Share of the GPU's memory the estimate may fill (the rest: CUDA context, allocator fragmentation, NCCL buffers)."""
LOGIT_BYTES = 6
"""Bytes per token and vocabulary entry a full-logit loss adds at the step's peak: the half logits 2 and the FP32
log-softmax output saved for backward 4 (the FP32 copy and the gradients are not live at the same time as the
trunk's peak). Measured on CPU beside the checkpointed trunk of four small Qwen2 shapes (``tests/rl/test_memory.py``;
the sum of every logit-sized tensor, 14, overcounted by up to 29 %). Not TRL 1.16's path: see ``head_bytes``."""
RESIDUAL_BYTES = 4
"""Bytes per hidden unit of a checkpointed layer input: FP32, the residual stream under autocast over FP32 weights
(and in FP32 training). Measured on CPU: 4 bytes per unit, token and layer (``tests/rl/test_memory.py``)."""
LAYER_FP32 = 10
"""FP32 bytes per hidden unit and token a layer held whole (not checkpointed, or the checkpointed one being
recomputed) keeps for backward beyond its half activations (residual adds, RMSNorm inputs and outputs under
autocast). Fitted on CPU to three small Qwen2 shapes without checkpointing (38.5 × hidden + 8.75 × intermediate
bytes per token and layer measured, against 28 × hidden + 8 × intermediate of half activations alone); an FP32 run
counts all of its activations at 4 bytes already."""
RESIDUAL_GRAD_BYTES = 8
"""Bytes per hidden unit and token of the FP32 gradient of the residual stream during a layer's backward: the
gradient arriving from the layer above and the one leaving it, both live while a checkpointed layer is recomputed
and back-propagated (the residual stream is FP32 under autocast over FP32 weights)."""
BUCKET_VIEW = True
"""The workbook's DDP runs pass ``gradient_as_bucket_view=True`` (``nbkit.rl.trainer``): no bucket copy of the
gradients."""
HEAD_TILE = (4096, 32768)
"""TRL's chunked log-prob kernel's tile (tokens × vocabulary entries: ``TOKEN_CHUNK_SIZE``, the chunk size)."""


@dataclass(frozen=True)
class ModelShape:
    """The few numbers of a decoder-only transformer that memory depends on."""

    params: int
    """Parameters."""
    layers: int
    """Decoder layers."""
    hidden: int
    """Hidden size."""
    intermediate: int
    """MLP intermediate size."""
    vocab: int
    """Vocabulary size (the logits' width)."""
    kv_dim: int
    """Key/value width per layer (key-value heads × head size): the KV cache per token is 2 × layers × kv_dim."""
    context: int
    """The model's own context length (``max_position_embeddings``)."""


KNOWN_SHAPES = {
    # from the model's config.json (Qwen2: hidden 1536, 28 layers, 12 heads / 2 KV heads of 128, MLP 8960,
    # vocabulary 151,936, untied embeddings, 131,072 positions); parameters counted from these as model_shape
    # counts a local config (biases and norms, 0.1 M, left out)
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": ModelShape(
        params=1_776_943_104, layers=28, hidden=1536, intermediate=8960, vocab=151_936, kv_dim=256, context=131_072
    ),
}
"""Shapes of hub models the profiles name (a plan is printed where the model is not downloaded yet)."""


def model_shape(ref: str) -> ModelShape:
    """The shape of a model the ``KNOWN_SHAPES`` table names, else read from its config (local path or name)."""
    if ref in KNOWN_SHAPES:
        return KNOWN_SHAPES[ref]
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(models.resolve(ref))
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    kv_dim = getattr(c, "num_key_value_heads", heads) * head_dim
    per_layer = (
        c.hidden_size * (heads * head_dim) * 2 + c.hidden_size * kv_dim * 2 + 3 * c.hidden_size * c.intermediate_size
    )
    embeddings = c.vocab_size * c.hidden_size * (1 if getattr(c, "tie_word_embeddings", False) else 2)
    return ModelShape(
        params=c.num_hidden_layers * per_layer + embeddings,
        layers=c.num_hidden_layers,
        hidden=c.hidden_size,
        intermediate=c.intermediate_size,
        vocab=c.vocab_size,
        kv_dim=kv_dim,
        context=c.max_position_embeddings,
    )


def critic_params(shape: ModelShape) -> int:
    """Parameters of PPO's critic: the policy's backbone (its parameters less the untied ``lm_head``) + a value head."""
    return shape.params - shape.vocab * shape.hidden + shape.hidden + 1


def state_bytes(
    shape: ModelShape, kind: str, trainers: int, critic: bool = False, bucket_view: bool = BUCKET_VIEW
) -> float:
    """Weights, gradients and optimiser moments held by one training process under launch ``kind`` (with PPO's
    critic and its AdamW state when ``critic``; under DDP its gradient buckets unless ``bucket_view``)."""
    if critic:
        backbone = ModelShape(
            critic_params(shape),
            shape.layers,
            shape.hidden,
            shape.intermediate,
            shape.vocab,
            shape.kv_dim,
            shape.context,
        )
        return state_bytes(shape, kind, trainers, bucket_view=bucket_view) + state_bytes(
            backbone, "single_gpu" if kind == "multi_gpu" else kind, trainers
        )  # the critic is not wrapped in DDP (nbkit.rl.ppo_trainer): no buckets
    p = shape.params
    per_kind = {
        "single_gpu": 18 * p,
        "multi_gpu": 18 * p + (0 if bucket_view else 4 * p),
        "fsdp2": 18 * p / trainers,
        "zero2": 2 * p + 14 * p / trainers,
        "zero3": 16 * p / trainers,
    }
    if kind not in per_kind:
        raise ValueError(f"unknown launch kind {kind!r}; choose one of {tuple(per_kind)}")
    return per_kind[kind]


def head_bytes(shape: ModelShape, tokens: int, fused: bool = True) -> float:
    """π's head in the loss forward + backward of ``tokens`` tokens: TRL's fused chunked kernel (per token the FP32
    hidden state saved for backward and its FP32 gradient, 16 bytes of per-token statistics; one FP32 ``lm_head``
    gradient buffer and one tile of half products and FP32 work), or full logits when not ``fused``."""
    if not fused:
        return tokens * LOGIT_BYTES * shape.vocab
    rows, cols = HEAD_TILE
    return (
        tokens * (8 * shape.hidden + 16)
        + 4 * shape.vocab * shape.hidden
        + min(tokens, rows) * min(shape.vocab, cols) * 6
    )


def activation_bytes(
    shape: ModelShape,
    sequences: int,
    seq_tokens: int,
    checkpointing: bool = True,
    fused_head: bool = True,
    value_bytes: int = 2,
    head: bool = True,
) -> float:
    """Loss forward + backward of ``sequences`` padded to ``seq_tokens`` tokens each: with gradient checkpointing
    each layer keeps its FP32 input hidden state (``RESIDUAL_BYTES``) and one layer is live at a time, recomputed
    whole (its half activations and FP32 residual tensors, ``LAYER_FP32``) with the FP32 gradient of the residual
    stream into and out of it (``RESIDUAL_GRAD_BYTES``); without, every layer's activations and FP32 residual
    tensors; plus the 4-D boolean attention mask and π's head (``head_bytes``). ``value_bytes``: 2 for FP16/BF16
    training, 4 for FP32 (whose activations count at 4 bytes already). ``head`` False: no vocabulary head (the critic)."""
    layer = value_bytes * (14 * shape.hidden + 4 * shape.intermediate)
    layer += LAYER_FP32 * shape.hidden if value_bytes < 4 else 0
    if checkpointing:
        kept = RESIDUAL_BYTES * shape.hidden * shape.layers + layer + RESIDUAL_GRAD_BYTES * shape.hidden
    else:
        kept = layer * shape.layers
    tokens = sequences * seq_tokens
    mask = sequences * seq_tokens**2
    return tokens * kept + mask + (head_bytes(shape, tokens, fused_head) if head else 0)


def critic_activation_bytes(
    shape: ModelShape, sequences: int, seq_tokens: int, checkpointing: bool = True, value_bytes: int = 2
) -> float:
    """PPO's critic's loss-time forward + backward of the same micro-batch: π's trunk without its vocabulary head
    (the value head's output is one number per token), checkpointed when π is (``nbkit.rl.critic``)."""
    return activation_bytes(shape, sequences, seq_tokens, checkpointing, value_bytes=value_bytes, head=False)


def kv_cache_bytes(shape: ModelShape, tokens: int) -> float:
    """vLLM's KV cache for ``tokens`` tokens in a half format."""
    return 2 * 2 * shape.layers * shape.kv_dim * tokens


@dataclass(frozen=True)
class Fit:
    """The micro-batch chosen for one training process and its estimated memory (GiB)."""

    micro_batch: int
    """Sequences per loss forward/backward."""
    gradient_accumulation_steps: int
    """Micro-batches per optimiser step (the process's share / ``micro_batch``)."""
    states_gib: float
    activations_gib: float
    vllm_gib: float
    peak_gib: float
    gpu_gib: float

    def text(self, seq_tokens: int) -> str:
        """One comment line for a printed plan."""
        vllm = f" + colocated vLLM {self.vllm_gib:.1f}" if self.vllm_gib else ""
        return (
            f"per training GPU (estimate, nbkit/rl/memory.py): states {self.states_gib:.1f} GiB + "
            f"activations of {self.micro_batch} × {seq_tokens} tokens {self.activations_gib:.1f}{vllm} -> peak "
            f"{self.peak_gib:.1f} of {self.gpu_gib:g} GiB; {self.gradient_accumulation_steps} micro-batches per step"
        )


def fit_micro_batch(
    shape: ModelShape,
    share: int,
    seq_tokens: int,
    kind: str,
    trainers: int,
    gpu_gib: float,
    vllm_share: float = 0.0,
    vllm_sleeps: bool = True,
    checkpointing: bool = True,
    critic: bool = False,
    minibatches: int = 1,
    value_bytes: int = 2,
    largest: int | None = None,
) -> Fit:
    """The largest micro-batch (a divisor of ``share`` / ``minibatches``: the process's completions per optimiser
    step; at most ``largest`` when given) whose estimated peak stays within ``HEADROOM`` × ``gpu_gib``; ValueError
    naming the terms when even one sequence does not fit. ``critic``: PPO's critic and its optimiser are held too,
    and its activations (``critic_activation_bytes``) beside π's: its forward and backward run inside π's loss."""
    if share % minibatches:
        raise ValueError(f"{share} completions per process do not split into {minibatches} minibatches")
    share //= minibatches
    states = state_bytes(shape, kind, trainers, critic)
    vllm = vllm_share * gpu_gib * GIB
    budget = HEADROOM * gpu_gib * GIB

    def activations(m: int) -> float:
        act = activation_bytes(shape, m, seq_tokens, checkpointing, value_bytes=value_bytes)
        return act + (critic_activation_bytes(shape, m, seq_tokens, checkpointing, value_bytes) if critic else 0)

    def peak(m: int) -> float:
        act = activations(m)
        return states + (max(act, vllm) if vllm_sleeps else act + vllm)

    cap = share if largest is None else min(share, largest)
    fits = [m for m in range(1, cap + 1) if share % m == 0 and peak(m) <= budget]
    if not fits:
        raise ValueError(
            f"one sequence of {seq_tokens} tokens does not fit a {gpu_gib:g} GiB GPU: states "
            f"{states / GIB:.1f} GiB ({kind}, {trainers} trainers) + activations "
            f"{activations(1) / GIB:.1f} GiB + vLLM "
            f"{vllm / GIB:.1f} GiB > "
            f"{HEADROOM:.0%} of the GPU; use a sharded kind (fsdp2, zero2, zero3), more GPUs, shorter max_completion_length "
            f"or a smaller vLLM share"
        )
    m = max(fits)
    return Fit(
        micro_batch=m,
        gradient_accumulation_steps=share // m,
        states_gib=states / GIB,
        activations_gib=activations(m) / GIB,
        vllm_gib=vllm / GIB,
        peak_gib=peak(m) / GIB,
        gpu_gib=gpu_gib,
    )
