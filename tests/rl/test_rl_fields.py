"""The RL settings are RLConfig fields that reach TRL and the rollout engine: a field declared with a TRL name reaches
that ``GRPOConfig`` field unchanged, and any other ``GRPOConfig`` field, a later TRL's too, reaches it through
``RLConfig.trl``."""

import json
import re
from dataclasses import dataclass, field, fields

import pytest

from nbkit.models.toymodels import arith, tiny_arith
from nbkit.rl import RLConfig, train
from nbkit.rl.config import trl_fields
from nbkit.rl.run import TRL_DEFAULTS, grpo_config, workbook_args


def test_sampling_kl_and_vllm_memory_fields_reach_trls_config(tmp_path):
    cfg = RLConfig(top_p=0.9, top_k=20, beta=0.04, vllm_gpu_memory_utilization=0.5, output_dir=str(tmp_path))
    args = grpo_config(cfg)
    assert (args.top_p, args.top_k, args.beta, args.vllm_gpu_memory_utilization) == (0.9, 20, 0.04, 0.5)
    assert args.per_device_train_batch_size == cfg.prompts_per_step * cfg.num_generations  # one process


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("top_p", 1.5, "top_p must be in (0, 1]"),
        ("top_k", -1, "top_k must be >= 0"),
        ("beta", -0.1, "beta must be >= 0"),
        ("vllm_gpu_memory_utilization", 0.0, "vllm_gpu_memory_utilization must be in (0, 1]"),
        ("hf_engine_batch_size", 0, "hf_engine_batch_size must be >= 1"),
        ("vllm_max_num_batched_tokens", 0, "vllm_max_num_batched_tokens must be >= 1"),
        ("vllm_block_size", 0, "vllm_block_size must be >= 1"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("]", r"\]")):
        RLConfig(**{field: value})


@pytest.mark.slow
def test_a_run_with_a_kl_penalty_top_p_and_small_engine_batches_trains(tmp_path):
    model = tmp_path / "tiny"
    spec = tiny_arith.TinyArithConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, seed=1)
    tiny_arith.build_model(spec).save_pretrained(model)
    tiny_arith.build_tokenizer().save_pretrained(model)
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in arith.make_problems(16, seed=7)))
    result = train(
        RLConfig(
            model=str(model),
            dataset=str(data),
            max_steps=1,
            prompts_per_step=2,
            num_generations=2,
            max_completion_length=12,
            top_p=0.9,
            beta=0.04,
            hf_engine_batch_size=1,
            train_dtype="bf16",
            output_dir=str(tmp_path / "run"),
        ),
        progress=False,
    )
    row = result.rows[0]
    assert "kl" in row  # TRL logs the KL to the reference model only when beta > 0
    assert row["audit/rollout_dtype"] == "bf16" and row["ranks/reward_count"] == [4]


def test_gradient_checkpointing_is_trls_default_and_can_be_turned_off(tmp_path):
    assert grpo_config(RLConfig(output_dir=str(tmp_path))).gradient_checkpointing is True
    assert grpo_config(RLConfig(gradient_checkpointing=False, output_dir=str(tmp_path))).gradient_checkpointing is False


@pytest.mark.slow
def test_gradient_checkpointing_changes_the_time_not_the_numbers(tmp_path, arith_jsonl):
    """Two FP16 steps under fp32-accumulate (the AVX2 CPU's policy: attention routed, recomputed in backward) with
    and without checkpointing: the same losses, gradient norms and mismatch, to the bit."""
    runs = {
        on: train(
            RLConfig(
                dataset=arith_jsonl,
                max_steps=2,
                prompts_per_step=2,
                num_generations=2,
                max_completion_length=20,
                train_dtype="fp16",
                gemm="fp32-accumulate",
                gradient_checkpointing=on,
                output_dir=str(tmp_path / str(on)),
            ),
            progress=False,
        ).rows
        for on in (True, False)
    }
    keys = ("loss", "grad_norm", "mismatch/token_abs_logp_diff/mean", "reward")
    assert [[row[k] for k in keys] for row in runs[True]] == [[row[k] for k in keys] for row in runs[False]]
    assert all(row["audit/gemm_routed"]["sdpa/fp16"] > 0 for rows in runs.values() for row in rows)


def another_value(default):
    """A valid-looking value other than ``default`` for a scalar field (None for the kinds not tried)."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default / 2 if default else 0.25
    return None


def test_every_field_declared_trls_reaches_grpoconfig_unchanged_under_its_own_name(tmp_path):
    """Each ``metadata["trl"]`` field, set to a value other than its default, is the value of the ``GRPOConfig``
    field of its name."""
    names = trl_fields()
    assert {"max_steps", "learning_rate", "max_completion_length", "num_generations"} <= set(names)
    for name in names:
        f = next(f for f in fields(RLConfig) if f.name == name)
        value = f.metadata["choices"][-1] if "choices" in f.metadata else another_value(f.default)
        assert value is not None and value != f.default, name
        args = grpo_config(RLConfig(output_dir=str(tmp_path), **{name: value}))
        assert getattr(args, name) in (value, [value]), name  # (TRL keeps report_to as a list)


def test_any_other_grpoconfig_field_reaches_the_trainer_as_trl_itself_takes_it(tmp_path):
    """Every scalar ``GRPOConfig`` field the workbook does not set, introspected from TRL (none named here): set
    through ``RLConfig.trl`` to another value, it is the trainer's value, or TRL's own check refuses it alike."""
    from trl import GRPOConfig

    base = RLConfig(output_dir=str(tmp_path))
    own = workbook_args(base)
    workbooks = set(own) | {f.name for f in fields(RLConfig)}  # set by the workbook, or its own field of that name
    tried = 0
    for f in fields(GRPOConfig):
        value = another_value(f.default)
        if f.name in workbooks or value is None:
            continue
        tried += 1
        try:
            expected = getattr(GRPOConfig(**{**TRL_DEFAULTS, **own, f.name: value}), f.name)
        except ValueError as exc:  # TRL refuses it (e.g. auto_find_batch_size for GRPO): refused here too
            with pytest.raises(ValueError, match=re.escape(str(exc)[:60])):
                grpo_config(RLConfig(output_dir=str(tmp_path), trl={f.name: value}))
            continue
        assert expected == value, f.name
        assert getattr(grpo_config(RLConfig(output_dir=str(tmp_path), trl={f.name: value})), f.name) == value, f.name
    assert tried > 50


def test_a_grpoconfig_field_added_upstream_needs_no_change_here(tmp_path, monkeypatch):
    """A later TRL's new setting (a subclass standing in for it) is accepted by name and reaches the trainer."""
    import trl

    @dataclass
    class LaterGRPOConfig(trl.GRPOConfig):
        a_setting_of_a_later_trl: float = field(default=1.0, metadata={"help": "New upstream."})

    monkeypatch.setattr(trl, "GRPOConfig", LaterGRPOConfig)
    args = grpo_config(RLConfig(output_dir=str(tmp_path), trl={"a_setting_of_a_later_trl": 3.5}))
    assert type(args) is LaterGRPOConfig and args.a_setting_of_a_later_trl == 3.5


def test_trl_replaces_the_workbooks_schedule_defaults_but_not_what_its_fields_set(tmp_path):
    args = grpo_config(RLConfig(output_dir=str(tmp_path)))
    assert (args.lr_scheduler_type.value, args.warmup_steps, args.weight_decay) == ("constant", 0, 0.0)
    args = grpo_config(RLConfig(output_dir=str(tmp_path), trl={"lr_scheduler_type": "cosine", "warmup_steps": 3}))
    assert (args.lr_scheduler_type.value, args.warmup_steps) == ("cosine", 3)


@pytest.mark.parametrize(
    "trl,message",
    [
        ({"max_stpes": 5}, r"'max_stpes' is no field of TRL's GRPOConfig \(did you mean \['max_steps'"),
        ({"max_steps": 5}, r"'max_steps' is RLConfig's own field max_steps"),
        ({"vllm_mode": "server"}, r"'vllm_mode' is RLConfig's own field vllm_mode"),
    ],
)
def test_a_trl_setting_that_is_no_grpoconfig_field_or_is_the_workbooks_is_refused_naming_it(trl, message):
    with pytest.raises(ValueError, match=message):
        RLConfig(trl=trl)


@pytest.mark.parametrize("key", ["bf16", "fp16", "per_device_train_batch_size", "save_steps", "loss_type"])
def test_a_trl_setting_the_workbook_makes_from_its_own_fields_is_refused_when_trls_config_is_made(tmp_path, key):
    """Precision, batch, checkpoints and the preset's loss are the workbook's: refused naming the fields it sets."""
    cfg = RLConfig(output_dir=str(tmp_path), trl={key: 1})
    with pytest.raises(ValueError, match=rf"trl: '{key}' is set by the workbook from RLConfig's own fields; .*'bf16'"):
        grpo_config(cfg)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_precision_is_the_train_dtype_never_grpoconfigs_bf16_default(tmp_path, dtype):
    """GRPOConfig defaults to ``bf16=True`` (on CPU too); the run's precision is ``train_dtype`` alone, and a TRL
    setting given beside it leaves it so."""
    args = grpo_config(RLConfig(output_dir=str(tmp_path), train_dtype=dtype, trl={"adam_beta2": 0.99}))
    assert (args.bf16, args.fp16) == (dtype == "bf16", dtype == "fp16")


def test_the_trainer_is_given_the_grpoconfig_with_the_trl_settings(tmp_path, arith_jsonl, monkeypatch):
    """What reaches the trainer class is ``grpo_config``'s ``GRPOConfig``: the workbook's fields and a TRL setting."""
    import nbkit.rl.algorithms as algorithms

    given = {}

    class Stop(Exception):
        pass

    def trainer_class(_algo):
        def build(*, args, **_):
            given["args"] = args
            raise Stop

        return build

    monkeypatch.setattr(algorithms, "trainer_class", trainer_class)
    cfg = RLConfig(dataset=arith_jsonl, max_steps=3, trl={"adam_beta2": 0.99}, output_dir=str(tmp_path / "run"))
    with pytest.raises(Stop):
        train(cfg, progress=False)
    args = given["args"]
    assert (args.adam_beta2, args.max_steps, args.num_generations, args.fp16) == (0.99, 3, 8, True)


def test_a_trl_setting_trl_refuses_stops_the_run_before_the_dataset_loads(tmp_path, monkeypatch):
    import nbkit.rl.run as run

    monkeypatch.setattr(run, "load_task", lambda cfg: pytest.fail("the dataset must not load"))
    cfg = RLConfig(trl={"generation_batch_size": 7}, output_dir=str(tmp_path / "run"))
    with pytest.raises(ValueError, match=r"generation_batch_size \(7\) must be divisible by the global batch size"):
        train(cfg, progress=False)
