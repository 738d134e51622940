"""Sampling filters on the π side: make the trainer's log-probs comparable with an engine's processed ones.

With temperature, top-k or top-p an engine samples from a *processed* distribution: logits / T, then only the
kept tokens (the k most likely, the smallest set holding mass p), renormalised over them. An engine reporting
``processed_logprobs`` (vLLM; the workbook's HF engine with ``logprobs_mode="processed_logprobs"``) gives μ of
that distribution, so for every sampled token μ_proc = μ_raw / (kept mass). A trainer scoring the same token
with its unfiltered softmax gets π_raw, and the IS ratio π_raw / μ_proc ≈ kept mass < 1: a bias of the size of
the mass the filter dropped (a public report: ratio mean 0.896 for a kept mass of 0.895), not a precision effect.

Two ways to compare like with like: (1) apply the same filter to π (``token_logprobs`` here; the teacher-forced
π of ``nbkit.mismatch.mismatch`` takes ``top_k``/``top_p``), which is what this module does; (2) ask the engine for
``raw_logprobs`` and keep π unfiltered (the ratio is then the unfiltered one, still ≈ 1 when π = μ, and the
filter's effect on the sampled tokens is left to the behaviour policy). The filter uses transformers' own warpers
in the HF engine's order (temperature, top-k, top-p), so π and the HF engine keep the same tokens. A token the
engine sampled but π's own filter drops (a borderline token when π ≠ μ) stays kept on the π side, so its log π
is finite; the other kept tokens are π's own.
"""

from __future__ import annotations

import torch


def is_filtered(temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> bool:
    """True when the sampled distribution differs from the model's softmax (a processed μ then differs from raw)."""
    return temperature != 1.0 or top_k > 0 or top_p < 1.0


def validate(top_k: int, top_p: float) -> None:
    """ValueError naming a bad ``top_k`` (an integer ≥ 0, 0 = off) or ``top_p`` (in (0, 1], 1 = off)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (1 = off), got {top_p!r}")


def warpers(temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0):
    """transformers' logits warpers for the filter, in the HF engine's order (``SampledLogprobs.processors``)."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    return (
        ([TemperatureLogitsWarper(temperature)] if temperature != 1.0 else [])
        + ([TopKLogitsWarper(top_k)] if top_k else [])
        + ([TopPLogitsWarper(top_p)] if top_p < 1.0 else [])
    )


def token_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """log p of ``tokens`` (``[n]``) under the processed distribution of ``logits`` (``[n, vocab]``), in float32.

    Without a filter: log_softmax(logits / T). With one: the kept tokens (plus the scored token itself, see the
    module note) renormalised."""
    validate(top_k, top_p)
    scores = logits.float()
    if not (top_k or top_p < 1.0):
        return torch.log_softmax(scores / temperature, dim=-1).gather(-1, tokens[:, None])[:, 0]
    scores = scores / temperature
    kept = scores.clone()
    for warp in warpers(1.0, top_k, top_p):  # the temperature is already applied
        kept = warp(None, kept)
    keep = torch.isfinite(kept)
    keep[torch.arange(len(tokens), device=keep.device), tokens] = True  # the sampled token always counts
    scores = scores.masked_fill(~keep, float("-inf"))
    return torch.log_softmax(scores, dim=-1).gather(-1, tokens[:, None])[:, 0]


def kept_mass(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Per position, the mass of the kept tokens under the tempered softmax: exp(log p_raw − log p_processed), the
    factor by which an unfiltered π understates a processed μ (the biased IS ratio's expected value)."""
    raw = token_logprobs(logits, tokens, temperature)
    return torch.exp(raw - token_logprobs(logits, tokens, temperature, top_k, top_p))


def log_kept_mass(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """log ``kept_mass`` (≤ 0) without the round trip through exp: log p_raw − log p_processed. Subtracting it from
    an unfiltered log π puts π on the filter's renormalised support (what the RL trainer does for its IS ratio)."""
    return token_logprobs(logits, tokens, temperature) - token_logprobs(logits, tokens, temperature, top_k, top_p)


HEAD_CHUNK = 256
"""Positions whose logits the kept-mass head builds at once (``log_kept_mass_chunked``): 256 × 151,936 entries of a
Qwen2 vocabulary are ≈ 0.16 GB per FP32 copy, against ≈ 120 GB for 16 sequences of 8,193 positions at once."""


def log_kept_mass_chunked(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    chunk: int = HEAD_CHUNK,
) -> torch.Tensor:
    """``log_kept_mass`` of the logits ``head(hidden)`` (``hidden`` ``[n, hidden]``, ``tokens`` ``[n]``), ``chunk``
    positions at a time: the logits (and their FP32 copies and sorting work) of at most ``chunk`` positions exist
    at once, never ``[n, vocab]``. ``head`` runs as the model runs it (under the caller's autocast)."""
    out = torch.empty(len(tokens), dtype=torch.float32, device=hidden.device)
    for lo in range(0, len(tokens), chunk):
        logits = head(hidden[lo : lo + chunk])
        out[lo : lo + chunk] = log_kept_mass(logits, tokens[lo : lo + chunk], temperature, top_k, top_p)
    return out


class KeptMassHead:
    """While active, the causal LM's output layer computes the log kept mass of ``tokens`` (``[rows, T]``, the
    positions the model's last ``T + 1`` hidden states predict, as with ``logits_to_keep = T + 1``) in chunks
    (``log_kept_mass_chunked``) and returns empty logits, so a forward of the whole model never builds its
    ``[rows, T + 1, vocab]`` logits. The work runs inside the model's own forward, where a sharding wrapper (FSDP2,
    ZeRO-3) holds the head's weight whole. ``value``: the ``[rows, T]`` result after the forward.

        with KeptMassHead(lm_head, tokens, temperature, top_k=20, top_p=0.9) as kept:
            model(input_ids=ids, attention_mask=attn, logits_to_keep=tokens.size(1) + 1)
        kept.value
    """

    def __init__(self, head: torch.nn.Module, tokens: torch.Tensor, temperature=1.0, top_k=0, top_p=1.0, chunk=None):
        self.head, self.tokens, self.value = head, tokens, None
        self.sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "chunk": chunk or HEAD_CHUNK}
        self._handle = None

    def _pre_hook(self, module, args):
        (hidden, *rest) = args
        rows, width = self.tokens.shape
        states = hidden[:, -width - 1 : -1].reshape(rows * width, hidden.size(-1))
        handle, self._handle = self._handle, None
        handle.remove()  # the chunks call the head itself: without this hook
        try:
            self.value = log_kept_mass_chunked(states, module, self.tokens.reshape(-1), **self.sampling).view(
                rows, width
            )
        finally:
            self._handle = module.register_forward_pre_hook(self._pre_hook)
        return (hidden[:, :0], *rest)  # the model's own logits: none

    def __enter__(self):
        self._handle = self.head.register_forward_pre_hook(self._pre_hook)
        return self

    def __exit__(self, *exc):
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
