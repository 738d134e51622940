"""``nbkit gpu-check``: a five-minute self-check of a GPU node before the long runs (issue 54).

    nbkit gpu-check                       # one pass/fail line per item, a JSON record in .cache/gpu-check/
    nbkit gpu-check --json record.json    # the record where you want it

Each item trains the shipped tiny-arith model for two steps (seconds on any GPU) and reads what the run itself
recorded, so a pass is the workbook's own evidence, not a second implementation:

- ``fp16`` / ``bf16``: one run per training dtype on one GPU; every audited matmul ran in that dtype, and FP16 had
  a live loss scaler (enabled, scale > 1) while BF16 had none;
- ``pi-fp32``: π's log-softmax is FP32 where the trainer promises it (``nbkit.rl.trainer.fp32_logits``) under an
  FP16 autocast forward;
- ``vllm-colocate-sleep``: a colocated vLLM engine that sleeps during the update, wakes and reloads the trained
  weights each step (CUDA graphs on), its rollouts in the requested dtype, and π–μ still matched after the reload;
- ``vllm-server-sync``: a ``vllm serve`` (the command ``nbkit plan`` prints) and a run that syncs weights to it;
- ``scaler-<kind>``: a live FP16 scaler under each accelerate launch kind this node can run (DDP, FSDP2 with 2+
  GPUs; ZeRO-2/3 with DeepSpeed installed).

Where an item cannot run (no CUDA GPU, no vLLM, one GPU for a multi-GPU kind) its line says so: "cannot check
here" and why; the command then exits 0 when nothing failed. Any failure exits 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from nbkit.cli.commands import Parser
from nbkit.records import schema
from nbkit.runtime import paths

MODEL = "tiny-arith"
"""The shipped model every item trains (two steps)."""
STEPS = 2
SERVER_WAIT = 240
"""Seconds the server item waits for ``vllm serve`` to answer ``/health``."""


class CannotCheck(Exception):
    """The item needs what this node does not have (a CUDA GPU, vLLM, two GPUs, DeepSpeed)."""


@dataclasses.dataclass
class Result:
    """One item's verdict."""

    item: str
    status: str
    """``pass``, ``fail`` or ``cannot check here``."""
    detail: str
    seconds: float

    def line(self) -> str:
        return f"{self.status.upper() if self.status != 'cannot check here' else 'SKIP'} {self.item}: {self.detail}"


# -- what the node has ------------------------------------------------------------------------------------------
def cuda_gpus() -> int:
    """CUDA GPUs torch sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def need_gpus(n: int = 1) -> None:
    have = cuda_gpus()
    if have < n:
        import torch

        raise CannotCheck(
            f"needs {n} CUDA GPU{'s' * (n > 1)}, this node has {have} (torch {torch.__version__}, CUDA "
            f"{torch.version.cuda})"
        )


def need_vllm() -> None:
    from nbkit.engines import vllm_available

    if not vllm_available():
        raise CannotCheck("vLLM is not installed (make venv TORCH_SPEC=vllm==X VLLM_SPEC=)")


# -- the items ---------------------------------------------------------------------------------------------------
def _config(out: Path, **overrides):
    from nbkit.rl import RLConfig

    return RLConfig(
        model=MODEL,
        max_steps=STEPS,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=24,
        output_dir=str(out),
        overwrite=True,
        checkpoint_every=0,
        **overrides,
    )


def _train_rows(cfg) -> list[dict]:
    from nbkit.rl import train

    return train(cfg, progress=False).rows


def _dtype_run(dtype: str, work: Path) -> str:
    need_gpus(1)
    rows = _train_rows(_config(work / dtype, train_dtype=dtype))
    dtypes = set().union(*(r[schema.AUDIT_MATMUL_DTYPES] for r in rows))
    if dtypes != {dtype}:
        raise AssertionError(f"audited matmul dtypes {sorted(dtypes)}, expected only {dtype}")
    scaler = [r[schema.AUDIT_SCALER_ENABLED] for r in rows]
    scale = [r[schema.LOSS_SCALE] for r in rows]
    if dtype == "fp16" and not (all(scaler) and min(scale) > 1):
        raise AssertionError(f"FP16 loss scaler enabled {scaler}, scales {scale}: not live")
    if dtype != "fp16" and any(scaler):
        raise AssertionError(f"{dtype} ran with a loss scaler: {scaler}")
    return f"{len(rows)} steps, matmuls {sorted(dtypes)}, loss scale {scale[-1]:g}"


def check_pi_fp32(work: Path) -> str:
    need_gpus(1)
    import torch

    from nbkit.models import models
    from nbkit.rl.trainer import fp32_logits

    model, _ = models.load(MODEL, "fp32")
    model = model.cuda()
    ids = torch.randint(0, model.config.vocab_size, (2, 16), device="cuda")
    with torch.autocast("cuda", dtype=torch.float16), fp32_logits(model):
        logits = model(input_ids=ids).logits
    logps = torch.log_softmax(logits, dim=-1)
    if logits.dtype != torch.float32 or logps.dtype != torch.float32:
        raise AssertionError(f"π logits {logits.dtype}, log-softmax {logps.dtype} under FP16 autocast")
    return "logits and log-softmax FP32 under FP16 autocast"


def check_colocated_sleep(work: Path) -> str:
    need_gpus(1)
    need_vllm()
    rows = _train_rows(
        _config(
            work / "colocate",
            train_dtype="fp16",
            max_steps=3,
            rollout_engine="vllm",
            vllm_mode="colocate",
            vllm_enable_sleep_mode=True,
            vllm_gpu_memory_utilization=0.2,
        )
    )
    rollout = {r.get(schema.AUDIT_ROLLOUT_DTYPE) for r in rows}
    if rollout != {"fp16"}:
        raise AssertionError(f"rollout dtypes {rollout}, expected fp16")
    kl = [r.get("mismatch/kl_sample_train_v1") for r in rows]
    if any(k is None or not abs(k) < 0.05 for k in kl[1:]):
        raise AssertionError(f"π–μ KL after wake + reload {kl}: the engine does not hold the trained weights")
    return f"{len(rows)} sleep → wake → reload cycles, FP16 rollouts, KL per step {[f'{k:.2g}' for k in kl]}"


def check_server_sync(work: Path) -> str:
    need_gpus(2)
    need_vllm()
    import requests

    from nbkit.cli import plan
    from nbkit.runtime.pool import free_port

    port = free_port()
    server_cfg = _config(work / "server", train_dtype="fp16", rollout_engine="vllm", vllm_mode="server")
    command = plan.server_command(server_cfg, 1, port)
    command[0] = str(Path(sys.executable).with_name("vllm"))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "1", "VLLM_SERVER_DEV_MODE": "1"}
    log = (work / "server.log").open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + SERVER_WAIT
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            if server.poll() is not None:
                raise AssertionError(f"vllm serve exited {server.returncode} (log: {work / 'server.log'})")
            time.sleep(2)
        else:
            raise AssertionError(f"vllm serve did not answer within {SERVER_WAIT} s (log: {work / 'server.log'})")
        rows = []
        for run in ("first", "second"):  # one server, two runs: the second opens a fresh weight-sync group
            cfg = dataclasses.replace(
                server_cfg, output_dir=str(work / f"server-{run}"), vllm_server_base_url=f"http://127.0.0.1:{port}"
            )
            rows += _train_rows(cfg)
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=60)
        if server.poll() is None:
            server.kill()
        log.close()
    kl = [r.get("mismatch/kl_sample_train_v1") for r in rows]
    if any(k is None or not abs(k) < 0.05 for k in kl):
        raise AssertionError(f"π–μ KL {kl}: the server does not hold the synced weights")
    return f"two runs on one server, {len(rows)} steps, KL per step {[f'{k:.2g}' for k in kl]}"


def launch_kinds() -> list[str]:
    """The launch kinds of ``nbkit.rl.launch`` (each is checked, or said why not)."""
    from nbkit.rl import launch

    return list(launch.KINDS)


def check_scaler_under(kind: str, work: Path) -> str:
    from nbkit.rl import launch

    gpus = 1 if kind == "single_gpu" else 2
    need_gpus(gpus)
    if kind.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
        raise CannotCheck("DeepSpeed is not installed")
    out = work / f"scaler-{kind}"
    command = [
        str(Path(sys.executable).with_name("accelerate")),
        "launch",
        "--config_file",
        str(launch.config_path(kind, "fp16")),
        "--num_processes",
        str(gpus),
        "-m",
        "nbkit.cli.train",
        "--model",
        MODEL,
        "--max-steps",
        str(STEPS),
        "--train-dtype",
        "fp16",
        "--prompts-per-step",
        "4",
        "--num-generations",
        "4",
        "--max-completion-length",
        "24",
        "--checkpoint-every",
        "0",
        "--output-dir",
        str(out),
    ]
    done = subprocess.run(command, cwd=paths.ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise AssertionError(f"accelerate launch exited {done.returncode}: {tail}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    scaler = [r.get(schema.AUDIT_SCALER_ENABLED) for r in rows]
    scale = [r.get(schema.LOSS_SCALE) for r in rows]
    if not rows or not all(scaler) or not min(scale) > 1:
        raise AssertionError(f"FP16 scaler enabled {scaler}, scales {scale}")
    return f"{gpus} process{'es' * (gpus > 1)}, live scaler, loss scale {scale[-1]:g}"


def items() -> list[tuple[str, Callable[[Path], str]]]:
    """(name, check) in the order they run."""
    out = [
        ("fp16", lambda w: _dtype_run("fp16", w)),
        ("bf16", lambda w: _dtype_run("bf16", w)),
        ("pi-fp32", check_pi_fp32),
        ("vllm-colocate-sleep", check_colocated_sleep),
        ("vllm-server-sync", check_server_sync),
    ]
    return out + [(f"scaler-{k}", lambda w, k=k: check_scaler_under(k, w)) for k in launch_kinds()]


def run_item(name: str, check: Callable[[Path], str], work: Path) -> Result:
    start = time.perf_counter()
    try:
        status, detail = "pass", check(work)
    except CannotCheck as exc:
        status, detail = "cannot check here", str(exc)
    except Exception as exc:  # a check that breaks is a failed item, reported on its line, not a traceback
        status, detail = "fail", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return Result(name, status, detail, round(time.perf_counter() - start, 1))


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="nbkit gpu-check", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, help="where the JSON record goes (default: .cache/gpu-check/<UTC time>.json)")
    p.add_argument("--only", nargs="+", help="check only these items (names as printed)")
    a = p.parse_args(argv)
    chosen = items()
    if a.only:
        names = [n for n, _ in chosen]
        unknown = [n for n in a.only if n not in names]
        if unknown:
            p.error(f"unknown item(s) {unknown}; choose from {names}")
        chosen = [(n, c) for n, c in chosen if n in a.only]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    record_path = a.json or paths.CACHE / "gpu-check" / f"{stamp}.json"
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-", dir=paths.CACHE if paths.CACHE.exists() else None) as tmp:
        for name, check in chosen:
            result = run_item(name, check, Path(tmp))
            print(result.line(), flush=True)
            results.append(result)
    skipped = [r for r in results if r.status == "cannot check here"]
    failed = [r for r in results if r.status == "fail"]
    if skipped:
        print(f"cannot check here ({len(skipped)}): {', '.join(r.item for r in skipped)}")
    record = {"time_utc": stamp, "gpus": cuda_gpus(), "results": [dataclasses.asdict(r) for r in results]}
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"record: {record_path}")
    return 1 if failed else 0
