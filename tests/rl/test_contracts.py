"""Contracts with the libraries whose private names ``nbkit.rl`` overrides: these fail loudly, naming what moved,
when TRL changes the hooks the trainer and the rollout backend rely on (and the pins say which versions fit).

``PRIVATE_NAMES`` lists every private name of TRL, transformers, accelerate and vLLM that the workbook overrides,
calls or mutates; ``broken`` says which of them no longer holds in the installed libraries, and a private method the
workbook's subclasses override on a library base but that the list misses fails too (the list is complete by
construction). Read from the installed sources (``inspect`` / ``ast``), so they cost milliseconds and need no GPU or
server.
"""

import ast
import importlib
import inspect
import textwrap
from dataclasses import dataclass

from trl import GRPOTrainer
from trl.generation.vllm_client import VLLMClient
from trl.generation.vllm_generation import VLLMGeneration


def source_tree(fn) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(fn)))


def self_assignments(fn) -> set[str]:
    """Names X of every ``self.X = ...`` in a function."""
    return {
        t.attr
        for node in ast.walk(source_tree(fn))
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def test_generate_and_score_completions_still_returns_the_keys_the_trainer_reads():
    tree = source_tree(GRPOTrainer._generate_and_score_completions)
    keys = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "output" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "output"
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.ctx, ast.Store)
        ):
            keys.add(node.slice.value)
    read_by_nbkit = {
        "prompt_ids",
        "prompt_mask",
        "completion_ids",
        "completion_mask",
        "old_per_token_logps",
        "sampling_per_token_logps",
        "importance_sampling_ratio",
    }
    missing = read_by_nbkit - keys
    assert not missing, (
        f"TRL's _generate_and_score_completions no longer returns {sorted(missing)} (has {sorted(keys)})"
    )


def test_the_overridden_trainer_hooks_keep_their_signatures():
    def params(fn):
        return list(inspect.signature(fn).parameters)

    assert params(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    assert params(GRPOTrainer.compute_loss)[:5] == ["self", "model", "inputs", "return_outputs", "num_items_in_batch"]
    assert params(GRPOTrainer._get_per_token_logps_and_entropies)[:6] == [
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
    ]
    returns = [
        n
        for n in ast.walk(source_tree(GRPOTrainer._get_per_token_logps_and_entropies))
        if isinstance(n, ast.Return) and n.value is not None
    ]
    assert returns and all(isinstance(r.value, ast.Tuple) and len(r.value.elts) == 3 for r in returns), (
        "_get_per_token_logps_and_entropies no longer returns (logps, entropies, aux): nbkit unpacks three values"
    )
    for attr in (
        "_metrics",
        "vllm_importance_sampling_clip_max",
        "temperature",
        "top_p",
        "top_k",
        "max_completion_length",
        "use_vllm",
        "vllm_generation",
    ):
        assert attr in self_assignments(GRPOTrainer.__init__), f"GRPOTrainer.__init__ no longer sets self.{attr}"


def test_trl_still_drives_the_rollout_backend_the_way_engine_generation_implements_it():
    call_site = inspect.getsource(GRPOTrainer._generate_single_turn)
    assert "self.vllm_generation.sync_weights()" in call_site
    calls = [
        n
        for n in ast.walk(source_tree(GRPOTrainer._generate_single_turn))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "generate"
        and "vllm_generation" in ast.unparse(n.func.value)
    ]
    assert calls, "GRPOTrainer no longer calls self.vllm_generation.generate(...)"
    assert {k.arg for k in calls[0].keywords} == {"prompts", "images", "num_generations", "profiler"}
    assert "_, completion_ids, logprobs, _ = self.vllm_generation.generate(" in call_site, (
        "the generate() result is no longer unpacked as 4 values (prompt_ids, completion_ids, logprobs, extra)"
    )


def test_vllm_generation_constructor_and_methods_used_by_nbkit_are_there():
    init = inspect.signature(VLLMGeneration.__init__).parameters
    passed = {
        "model",
        "accelerator",
        "processing_class",
        "mode",
        "server_base_url",
        "server_timeout",
        "gpu_memory_utilization",
        "max_model_length",
        "max_num_seqs",
        "temperature",
        "top_p",
        "top_k",
        "max_completion_length",
        "logprobs",
    }
    assert not passed - set(init), f"VLLMGeneration.__init__ lost {sorted(passed - set(init))}"
    assigned = self_assignments(VLLMGeneration.__init__)
    read = {
        "accelerator",
        "temperature",
        "top_p",
        "top_k",
        "max_completion_length",
        "max_num_seqs",
        "gpu_memory_utilization",
        "max_model_length",
        "server_base_url",
        "group_port",
        "server_timeout",
        "mode",
    }
    assert not read - assigned, f"VLLMGeneration.__init__ no longer sets {sorted(read - assigned)}"
    body = inspect.getsource(VLLMGeneration.__init__)
    assert body.rstrip().endswith("self._init_vllm()"), "VLLMGeneration.__init__ must end by calling _init_vllm()"
    for method, first in (
        ("_init_vllm", ["self"]),
        ("_iter_named_params", ["self"]),
        ("sync_weights", ["self"]),
        ("generate", ["self", "prompts", "images", "num_generations", "profiler"]),
    ):
        assert list(inspect.signature(getattr(VLLMGeneration, method)).parameters)[: len(first)] == first, method
    for method in ("get_server_info", "init_communicator", "close_communicator"):
        assert callable(getattr(VLLMClient, method, None)), f"VLLMClient.{method} is gone (server mode uses it)"


# ----- the one list of private names ----------------------------------------------------------------------------


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
        "wrapped by nbkit.precision.vllm_gemm (a vLLM plugin): half linear layers get the tensor-core contract on CPUs",
    ),
    Contact(
        "vllm._custom_ops", "create_onednn_mm", "function", "called by nbkit.precision.vllm_gemm: oneDNN's FP32 matmul"
    ),
    Contact(
        "vllm._custom_ops", "onednn_mm", "function", "called by nbkit.precision.vllm_gemm on each half layer's call"
    ),
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


def workbook_subclasses():
    from nbkit.rl import ppo_trainer, rollout, server, trainer

    return [
        trainer.PrecisionGRPOTrainer,
        ppo_trainer.PPOTrainer,
        rollout.EngineGeneration,
        *[c for c in vars(server).values() if isinstance(c, type) and issubclass(c, VLLMGeneration)],
    ]


def test_every_private_name_the_workbook_relies_on_is_still_there():
    assert broken() == []


def test_every_private_override_of_the_workbook_is_listed():
    assert unlisted_overrides(workbook_subclasses()) == []


def test_a_private_method_that_disappears_is_named(monkeypatch):
    monkeypatch.delattr(GRPOTrainer, "_compute_loss")
    found = broken()
    assert len(found) == 1 and "trl:GRPOTrainer._compute_loss is gone" in found[0] and "phantom" in found[0]


def test_a_vllm_function_the_plugin_wraps_that_disappears_is_named(monkeypatch):
    from vllm.model_executor.layers import utils

    monkeypatch.delattr(utils, "dispatch_cpu_unquantized_gemm")
    found = broken()
    assert found == [
        "vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm is gone; the workbook: wrapped "
        "by nbkit.precision.vllm_gemm (a vLLM plugin): half linear layers get the tensor-core contract on CPUs"
    ]


def test_an_instance_attribute_the_library_stops_setting_is_named(monkeypatch):
    from accelerate import Accelerator

    def backward_without_scaler(self, loss, **kwargs):
        loss.backward(**kwargs)

    monkeypatch.setattr(Accelerator, "backward", backward_without_scaler)
    found = broken()
    assert found == [
        "accelerate:Accelerator.backward no longer uses self.scaler; the workbook: read by backward(): "
        "the loss is scaled by accelerator.scaler"
    ]


def test_a_new_unlisted_override_is_caught():
    from nbkit.rl.trainer import PrecisionGRPOTrainer

    class Sneaky(PrecisionGRPOTrainer):
        def _prepare_inputs(self, inputs):  # a private TRL hook not in PRIVATE_NAMES
            return inputs

    assert unlisted_overrides([Sneaky]) == [f"{__name__}.Sneaky._prepare_inputs"]


def test_every_dependency_has_an_upper_bound():
    """A library the workbook overrides or calls may change shape at its next release: no open-ended ranges."""
    import tomllib

    from packaging.requirements import Requirement

    from nbkit.runtime.paths import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"]) + [s for extra in project["optional-dependencies"].values() for s in extra]
    open_ended = [
        s for s in specs if not any(sp.operator in ("<", "<=", "==", "~=") for sp in Requirement(s).specifier)
    ]
    assert open_ended == [], f"give these an upper bound in pyproject.toml: {open_ended}"
