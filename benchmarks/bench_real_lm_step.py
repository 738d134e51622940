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

    .venv/bin/python benchmarks/bench_real_lm_step.py                          # 4 x 4, <= 64 tokens, 6 cells
    .venv/bin/python benchmarks/bench_real_lm_step.py --prompts 8 --samples 8  # the issue's batch
    .venv/bin/python benchmarks/bench_real_lm_step.py --dtypes fp32 --modes lora --checkpointing off
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DTYPES = ("fp32", "bf16", "fp16")
MODES = ("full", "lora")
PHASES = ("generation", "pi_old", "mismatch", "update")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="full fine-tuning and/or LoRA")
    p.add_argument("--prompts", type=int, default=4, help="prompts per step")
    p.add_argument("--samples", type=int, default=4, help="samples per prompt")
    p.add_argument("--max-tokens", type=int, default=64, help="longest completion")
    p.add_argument("--steps", type=int, default=1, help="steps per cell (the last one is reported)")
    p.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    p.add_argument("--algorithm", default="grpo")
    p.add_argument("--checkpointing", choices=["on", "off"], default="on", help="gradient checkpointing (TRL: on)")
    p.add_argument("--repeats", type=int, default=3, help="timings per GEMM (best kept)")
    return p.parse_args(argv)


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


def instrument(forwards: Forwards):
    """Wrap the trainer's π method and its phase boundaries to record every forward; returns an undo function."""
    import torch

    from nbkit.rl import trainer as trainer_module

    cls = trainer_module.PrecisionGRPOTrainer
    originals = {name: getattr(cls, name) for name in ("_get_per_token_logps_and_entropies", "_training_logps")}

    def logps(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        phase = "update" if torch.is_grad_enabled() else forwards.phase
        forwards.calls[phase].append((int(input_ids.size(0)), int(input_ids.size(1)), int(logits_to_keep)))
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


def cell(args, dtype: str, mode: str, tmp: str) -> tuple[dict, Forwards]:
    """Train one cell; returns its last metrics row and the forwards it ran."""
    from nbkit.rl import train
    from nbkit.studies import brevity

    forwards = Forwards()
    undo = instrument(forwards)
    try:
        cfg = brevity.config(
            dtype,
            dtype,
            0,
            Path(tmp) / f"{dtype}-{mode}",
            steps=args.steps,
            engine=args.engine,
            algorithm=args.algorithm,
            lora=mode == "lora",
            lr=5e-4 if mode == "lora" else 1e-6,
            prompts_per_step=args.prompts,
            samples_per_prompt=args.samples,
            max_tokens=args.max_tokens,
            gradient_checkpointing=args.checkpointing == "on",
        )
        rows = train(cfg, progress=False).rows
    finally:
        undo()
    step = max(r["step"] for r in rows)
    per_step = dict(forwards.calls)
    if args.steps > 1:  # keep the last step's forwards: each step runs the same number of them
        per_step = {p: calls[len(calls) * (step - 1) // step :] for p, calls in per_step.items()}
    forwards.calls = per_step
    return next(r for r in rows if r["step"] == step), forwards


def report(row: dict, forwards: Forwards, shape: Shape, lim: dict, dtype: str, mode: str, ckpt: bool, n: int):
    """One cell's table: per phase seconds, tokens, GFLOP, GFLOP/s and the ratio to its limit."""
    completion = row["completions/mean_length"] * n
    prompt = row["num_tokens"] - completion  # TRL counts prompt + completion tokens of the step
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
        f"prompt {prompt:.0f} + completion {completion:.0f} tokens, longest {steps:.0f}; "
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
    from nbkit.runtime import paths
    from nbkit.workbook import jobtime

    paths.setup_environment()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    print(jobtime.cpu_header())
    print(
        f"shared machine: load average {os.getloadavg()[0]:.2f} at the start; torch threads {torch.get_num_threads()}; "
        f"gemm auto = {gemm.resolve('auto')}; half flags {gemm.half_flags()}"
    )
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
        f"checkpointing {args.checkpointing}; 'floor/s' = the phase's floor at the limits measured right after the "
        "cell over its time"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            for dtype in args.dtypes:
                start = time.perf_counter()
                row, forwards = cell(args, dtype, mode, tmp)
                now = limits(shape, [dtype], n, args.repeats)  # the limits again, under the load the cell ran in
                report(row, forwards, shape, now, dtype, mode, args.checkpointing == "on", n)
                print(
                    f"  limits right after the cell: memory {now['bandwidth']:.1f} GB/s, {dtype} GEMM "
                    f"{now[dtype]['model']:.1f} / {now[dtype]['decode']:.1f} GFLOP/s (model shapes / decode batch)"
                )
                print(f"  (cell wall {time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main()
