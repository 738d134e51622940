"""The accelerate configs shipped in ``configs/accelerate`` and what a launch with one of them really asks for.

    launch_env(config_path("zero2", "fp16"), num_processes=7)   # the environment `accelerate launch` would set
    launched_precision(os.environ)                               # fp16 | bf16 | no | None (not under accelerate)
    check_launch(train_dtype="fp16")                             # refuses a bf16 launch of an fp16 run

Every config exists in an FP16 and a BF16 variant. For DDP and FSDP2 the precision is accelerate's
``mixed_precision`` (FP16 = autocast + torch's GradScaler, which accelerate builds itself on GPUs); for DeepSpeed it
is the ``fp16`` / ``bf16`` block of the DeepSpeed file the config points to (FP16 = DeepSpeed's own dynamic loss
scaler). ``launch_env`` runs accelerate's own launcher code on the file (argument parser, config loader,
validation, environment preparation) without starting anything, so a config accelerate would reject fails here.

Why ours: ``accelerate launch`` never compares its config's precision with the run's ``train_dtype``, so a BF16
config would run an FP16 run in BF16 without a word.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from nbkit.runtime.paths import ROOT

CONFIGS = ROOT / "configs" / "accelerate"
KINDS = ("single_gpu", "multi_gpu", "zero2", "zero3", "fsdp2")
"""One GPU, DDP on one node, DeepSpeed ZeRO-2 / ZeRO-3, FSDP2."""
PRECISIONS = ("fp16", "bf16")
_LAUNCH_NAMES = {"fp16": "fp16", "bf16": "bf16", "fp32": "no"}


def config_path(kind: str, precision: str) -> Path:
    """``configs/accelerate/<kind>-<precision>.yaml``; ValueError naming the choices for anything else."""
    if kind not in KINDS:
        raise ValueError(f"unknown accelerate config {kind!r}; choose one of {KINDS}")
    if precision not in PRECISIONS:
        raise ValueError(
            f"accelerate configs exist for {PRECISIONS}, not {precision!r} (fp32 needs none: "
            "use the bf16 file's layout with mixed_precision: 'no')"
        )
    return CONFIGS / f"{kind}-{precision}.yaml"


def launch_env(config_file: str | Path, num_processes: int | None = None) -> dict[str, str]:
    """The environment ``accelerate launch --config_file config_file`` gives the training processes, computed by
    accelerate's own code (nothing is launched). DeepSpeed paths in the config are resolved from the project root."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import (
        prepare_deepspeed_cmd_env,
        prepare_multi_gpu_env,
        prepare_simple_launcher_cmd_env,
    )

    argv = ["--config_file", str(config_file)]
    if num_processes is not None:
        argv += ["--num_processes", str(num_processes)]
    cwd = os.getcwd()
    os.chdir(ROOT)  # deepspeed_config_file is relative to where `accelerate launch` runs: the project root
    try:
        with warnings.catch_warnings():  # the port check is for a real launch on this machine; nothing launches
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            args = launch_command_parser().parse_args(argv + ["train.py"])
            args, defaults, mp_from_config = _validate_launch_command(args)
            if args.use_deepspeed:  # as accelerate's launch_command does before its DeepSpeed launcher
                fields = list(defaults.deepspeed_config) if defaults else []
                args.deepspeed_fields_from_accelerate_config = ",".join(fields + ["mixed_precision"] * mp_from_config)
                _, env = prepare_deepspeed_cmd_env(args)
            elif args.multi_gpu or args.use_fsdp:
                env = prepare_multi_gpu_env(args)
            else:
                _, env = prepare_simple_launcher_cmd_env(args)
        if env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"):
            env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = str(ROOT / env["ACCELERATE_DEEPSPEED_CONFIG_FILE"])
    finally:
        os.chdir(cwd)
    return dict(env)


def deepspeed_precision(ds_config: dict | str | Path) -> str:
    """fp16 | bf16 | no from a DeepSpeed config's blocks; ValueError when both are enabled (DeepSpeed refuses it)."""
    if not isinstance(ds_config, dict):
        ds_config = json.loads(Path(ds_config).read_text())
    on = [p for p in PRECISIONS if _enabled(ds_config.get(p, {}))]
    if len(on) > 1:
        raise ValueError(
            f"DeepSpeed config enables both fp16 and bf16: {ds_config.get('fp16')}, {ds_config.get('bf16')}"
        )
    return on[0] if on else "no"


def _enabled(block) -> bool:
    value = block.get("enabled", False) if isinstance(block, dict) else False
    if value == "auto":
        raise ValueError("the workbook's DeepSpeed configs state fp16/bf16 'enabled' explicitly, got 'auto'")
    return bool(value)


def launched_precision(env=None) -> str | None:
    """The precision an ``accelerate launch`` asked for (fp16 | bf16 | no), None when not launched by accelerate."""
    env = os.environ if env is None else env
    if env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"):
        return deepspeed_precision(env["ACCELERATE_DEEPSPEED_CONFIG_FILE"])
    return env.get("ACCELERATE_MIXED_PRECISION")


def check_launch(train_dtype: str, env=None, has_accelerator: bool | None = None) -> None:
    """Refuse a launch whose half precision differs from ``train_dtype`` (transformers would otherwise let the
    run's own setting win silently, and the config the user chose would be a lie). ``no`` (accelerate's default
    when no precision is given) lets the run's ``train_dtype`` decide. Also refuse an FSDP or DeepSpeed launch
    without a GPU: on CPU the trainer runs plain DDP (``MULTI_CPU``) whatever the config says."""
    env = os.environ if env is None else env
    sharded = [
        name
        for key, name in (("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed"))
        if str(env.get(key, "")).lower() == "true"
    ]
    if sharded:
        if has_accelerator is None:
            import torch

            has_accelerator = torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())
        if not has_accelerator:
            raise ValueError(
                f"accelerate was launched with a {sharded[0]} config but there is no GPU here: the run "
                "would silently train as plain DDP on CPU; use `accelerate launch --multi_gpu` (gloo) "
                "or a GPU machine"
            )
    launched = launched_precision(env)
    if launched in (None, "no") or launched == _LAUNCH_NAMES[train_dtype]:
        return
    raise ValueError(
        f"accelerate was launched for {launched} but train_dtype={train_dtype!r}: use the "
        f"{_LAUNCH_NAMES[train_dtype]} variant of the config (configs/accelerate/*-{train_dtype}.yaml) "
        f"or set train_dtype={launched!r}"
    )


def check_weight_sync(train_dtype: str, rollout_dtype: str, env=None) -> None:
    """Refuse an FP32 rollout of a half-precision DeepSpeed run: DeepSpeed's fp16/bf16 modes keep the module's
    weights in the half format (FP32 master copies live inside its optimiser), so the weights synced to the engine
    are half-valued and an "FP32 rollout" would sample from BF16/FP16-rounded weights. DDP, one GPU and FSDP2
    keep FP32 weights in the module and sync those."""
    env = os.environ if env is None else env
    if (
        str(env.get("ACCELERATE_USE_DEEPSPEED", "")).lower() == "true"
        and train_dtype in PRECISIONS
        and rollout_dtype == "fp32"
    ):
        raise ValueError(
            f"a DeepSpeed launch trains {train_dtype} with half-precision module weights, so an fp32 "
            f"rollout would sample from {train_dtype}-rounded weights: use multi_gpu or fsdp2 "
            f"(FP32 weights, autocast / param casts) for this train {train_dtype} / rollout fp32 run, "
            f"or set rollout_dtype to {train_dtype!r}"
        )


def check_lora(lora: bool, train_dtype: str, env=None) -> None:
    """Refuse LoRA under a half-precision DeepSpeed launch. DeepSpeed's fp16/bf16 modes hold the module's weights in
    the half format, and frozen weights get no FP32 master (only trained ones have one, inside its optimiser). At
    every weight sync to vLLM TRL merges the adapters into the base weights and unmerges them after: each
    merge/unmerge rounds the frozen base to half again, so the base drifts step by step, a change the run never
    trained. DDP, one GPU and FSDP2 keep FP32 base weights in the module."""
    env = os.environ if env is None else env
    if lora and str(env.get("ACCELERATE_USE_DEEPSPEED", "")).lower() == "true" and train_dtype in PRECISIONS:
        raise ValueError(
            f"lora=True under a DeepSpeed {train_dtype} launch: TRL merges the adapters into the "
            f"{train_dtype} base weights and unmerges them at every sync to vLLM, and DeepSpeed keeps "
            f"no FP32 copy of frozen weights, so the base drifts by a {train_dtype} rounding per sync; "
            f"use multi_gpu or fsdp2 (FP32 base weights) for LoRA, or train all weights under ZeRO"
        )
