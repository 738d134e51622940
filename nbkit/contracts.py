"""Every private name of TRL, transformers, accelerate and vLLM that the workbook overrides, calls or mutates, in one
list.

``nbkit.rl`` subclasses TRL's ``GRPOTrainer`` and ``VLLMGeneration`` narrowly: its overrides hook into private
methods, and its FP16 policy gives accelerate's ``Accelerator`` a ``GradScaler`` on CPU. ``PRIVATE_NAMES`` names
each such contact point and ``broken`` says which of them no longer holds in the installed libraries, so a version
change fails ``tests/rl/test_contracts.py`` naming what moved instead of failing a run hours in. A method the
workbook's subclasses override that is private on the base but missing here fails the tests too (the list is
complete by construction). Checks read the installed sources (``inspect`` / ``ast``): milliseconds, no GPU.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Contact:
    """One private name the workbook relies on."""

    owner: str
    """``module:Class`` of the library object (``module`` alone for a ``function``)."""
    name: str
    """The attribute or method."""
    kind: str
    """``method`` (must exist on the class), ``instance`` (must be assigned as ``self.<name>`` in ``where``) or
    ``function`` (a callable of the module ``owner``)."""
    use: str
    """How the workbook uses it (for the failure message)."""
    where: str = "__init__"
    """For ``instance``: the method of ``owner`` that must assign it."""


PRIVATE_NAMES: tuple[Contact, ...] = (
    Contact(
        "trl:GRPOTrainer",
        "_generate_and_score_completions",
        "method",
        "overridden in nbkit.rl.trainer / ppo_trainer: attaches the engine's μ and logs the mismatch",
    ),
    Contact(
        "trl:GRPOTrainer",
        "_get_per_token_logps_and_entropies",
        "method",
        "overridden in nbkit.rl.trainer: π under the precision policy, router replay",
    ),
    Contact(
        "trl:GRPOTrainer",
        "_compute_loss",
        "method",
        "overridden in nbkit.rl.trainer (phantom-clip fraction) and ppo_trainer (GAE advantages, critic)",
    ),
    Contact("trl:GRPOTrainer", "_calculate_rewards", "method", "overridden in nbkit.rl.ppo_trainer: keeps the rewards"),
    Contact("trl:GRPOTrainer", "_metrics", "instance", "read and extended by nbkit.rl.trainer's per-step logging"),
    Contact(
        "trl:GRPOTrainer",
        "_last_loaded_step",
        "instance",
        "reset by nbkit.rl.trainer when it installs its own rollout engine (TRL syncs weights when it differs)",
    ),
    Contact(
        "transformers:Trainer", "_save_checkpoint", "method", "overridden in nbkit.rl.ppo_trainer: saves the critic"
    ),
    Contact(
        "transformers:Trainer",
        "_build_accelerator_args",
        "method",
        "overridden in nbkit.rl.trainer: adds GradScalerKwargs (the run's FP16 loss scaling) to accelerate's handlers",
    ),
    Contact(
        "transformers:Trainer",
        "_load_optimizer_and_scheduler",
        "method",
        "overridden in nbkit.rl.ppo_trainer: restores the critic on resume",
    ),
    Contact(
        "trl.generation.vllm_generation:VLLMGeneration",
        "_init_vllm",
        "method",
        "overridden in nbkit.rl.rollout / server: the engine in an explicit dtype",
    ),
    Contact(
        "trl.generation.vllm_generation:VLLMGeneration",
        "_iter_named_params",
        "method",
        "called by nbkit.rl.rollout's weight sync (reload_weights)",
    ),
    Contact(
        "accelerate:Accelerator",
        "scaler",
        "instance",
        "set by nbkit.rl.amp.enable_cpu_fp16 before prepare(): accelerate builds no scaler for fp16 on CPU",
    ),
    Contact("accelerate:Accelerator", "native_amp", "instance", "set by nbkit.rl.amp.enable_cpu_fp16 with the scaler"),
    Contact(
        "accelerate:Accelerator",
        "scaler",
        "instance",
        "read by prepare_optimizer: the optimizer wrapper takes the scaler at prepare time",
        "prepare_optimizer",
    ),
    Contact(
        "accelerate:Accelerator",
        "scaler",
        "instance",
        "read by backward(): the loss is scaled by accelerator.scaler",
        "backward",
    ),
    Contact(
        "vllm.model_executor.layers.utils",
        "dispatch_cpu_unquantized_gemm",
        "function",
        "wrapped by nbkit.vllm_gemm (a vLLM plugin): half linear layers get the tensor-core contract on CPUs",
    ),
    Contact("vllm._custom_ops", "create_onednn_mm", "function", "called by nbkit.vllm_gemm: oneDNN's FP32 matmul"),
    Contact("vllm._custom_ops", "onednn_mm", "function", "called by nbkit.vllm_gemm on each half layer's call"),
)
"""The contact points, one per (object, name, use)."""


def resolve(owner: str):
    """``"module:Class"`` → the class."""
    module, _, cls = owner.partition(":")
    return getattr(importlib.import_module(module), cls)


def _self_names(fn) -> tuple[set[str], set[str]]:
    """(assigned, read) names X of ``self.X`` in a function's source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    assigned, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            (assigned if isinstance(node.ctx, ast.Store) else read).add(node.attr)
    return assigned, read


def broken(contacts: tuple[Contact, ...] = PRIVATE_NAMES) -> list[str]:
    """One sentence per contact point that no longer holds in the installed libraries (empty when all hold)."""
    out = []
    for c in contacts:
        if c.kind == "function":
            try:
                ok = callable(getattr(importlib.import_module(c.owner), c.name, None))
            except ImportError as exc:
                out.append(f"{c.owner} cannot be imported ({exc}); used for {c.name}: {c.use}")
                continue
            if not ok:
                out.append(f"{c.owner}.{c.name} is gone; the workbook: {c.use}")
            continue
        try:
            cls = resolve(c.owner)
        except (ImportError, AttributeError) as exc:
            out.append(f"{c.owner} cannot be imported ({exc}); used for {c.name}: {c.use}")
            continue
        if c.kind == "method":
            if not callable(getattr(cls, c.name, None)):
                out.append(f"{c.owner}.{c.name} is gone; the workbook {c.use}")
            continue
        fn = getattr(cls, c.where, None)
        if fn is None:
            out.append(f"{c.owner}.{c.where} is gone (it must use self.{c.name}); the workbook: {c.use}")
            continue
        assigned, read = _self_names(fn)
        if c.name not in (assigned if c.where == "__init__" else assigned | read):
            out.append(f"{c.owner}.{c.where} no longer uses self.{c.name}; the workbook: {c.use}")
    return out


def unlisted_overrides(classes) -> list[str]:
    """Private methods that ``classes`` (the workbook's subclasses) override on a library base but that
    ``PRIVATE_NAMES`` does not list: a new contact point nobody checks."""
    listed = {c.name for c in PRIVATE_NAMES if c.kind == "method"}
    out = []
    for cls in classes:
        library_bases = [b for b in cls.__mro__[1:] if not b.__module__.startswith("nbkit")]
        for name, value in vars(cls).items():
            if (
                name.startswith("_")
                and not name.startswith("__")
                and callable(value)
                and any(name in vars(b) for b in library_bases)
                and name not in listed
            ):
                out.append(f"{cls.__module__}.{cls.__name__}.{name}")
    return out
