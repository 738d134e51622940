"""``nbkit train``: every RLConfig field is a documented flag, a YAML file sets fields, flags override it, and
anything invalid stops the command before a model or dataset loads, naming the key and the choices."""

import dataclasses
import json
import re

import pytest

from nbkit.cli import main as cli_main
from nbkit.cli import train as cli_train
from nbkit.rl import RLConfig


def test_every_field_is_a_flag_whose_help_is_the_help_declared_with_the_field(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_train.main(["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    docs = cli_train.field_docs()
    assert set(docs) == {f.name for f in dataclasses.fields(RLConfig)}, "a field without metadata['help']"
    for name, doc in docs.items():
        assert f"--{name.replace('_', '-')}" in text, name
        assert " ".join(doc.split()[:6]) in text, f"help of --{name} is not its metadata['help']"


def test_field_docs_are_the_metadata_help_declared_with_each_field():
    docs = cli_train.field_docs()
    declared = {f.name: f.metadata["help"] for f in dataclasses.fields(RLConfig)}
    assert docs["top_p"].startswith("Nucleus sampling mass") and docs["top_p"] == " ".join(declared["top_p"].split())
    assert docs["vllm_mode"].startswith("``colocate``")


def test_building_the_parser_leaves_rlconfigs_declared_field_types_alone():
    declared = {f.name: f.type for f in dataclasses.fields(RLConfig)}
    cli_train.build_parser()  # HfArgumentParser rewrites field.type while it builds the flags
    assert {f.name: f.type for f in dataclasses.fields(RLConfig)} == declared
    assert declared["max_steps"] == "Annotated[int, at_least(1)]" and declared["rollout_dtype"] == "str | None"


def test_null_sets_an_optional_field_to_none_but_none_is_the_correction_named_none(tmp_path):
    cfg, _ = cli_train.resolve(["--algorithm", "grpo_token_tis", "--correction", "none", "--rollout-dtype", "null"])
    assert cfg.correction == "none" and cfg.algo.is_mode is None and cfg.rollout_dtype is None  # no IS weight
    original = RLConfig(algorithm="grpo_token_tis", correction="none")
    (tmp_path / "config.json").write_text(json.dumps(original.to_dict()))
    assert cli_train.resolve(["--config", str(tmp_path / "config.json")])[0] == original  # replayed as saved


def test_yaml_sets_fields_and_flags_override_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("algorithm: pg_seq_is\ntrain-dtype: bf16\nmax_steps: 7\nlora: true\nrollout_dtype: null\n")
    cfg, _ = cli_train.resolve(["--config", str(path), "--max-steps", "3", "--no-lora", "--top-p", "0.9"])
    assert (cfg.algorithm, cfg.train_dtype, cfg.max_steps, cfg.lora, cfg.top_p, cfg.rollout_dtype) == (
        "pg_seq_is",
        "bf16",
        3,
        False,
        0.9,
        None,
    )
    assert cli_train.resolve(["--config", str(path), "--max_completion_length", "9"])[0].max_completion_length == 9


def test_a_fields_old_name_is_read_as_its_new_one_in_a_file_and_as_a_flag(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("steps: 7\nsamples-per-prompt: 4\nlr: 0.001\n")
    cfg, _ = cli_train.resolve(["--config", str(path), "--max-tokens", "9", "--vllm-sleep-mode"])
    assert (cfg.max_steps, cfg.num_generations, cfg.learning_rate, cfg.max_completion_length) == (7, 4, 1e-3, 9)
    assert (
        cfg.vllm_enable_sleep_mode and cli_train.resolve(["--config", str(path), "--max-steps", "3"])[0].max_steps == 3
    )


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--config", "both.yaml"], "both.yaml': 'steps' and 'max_steps' are one field, max_steps"),
        (["--steps", "7", "--max-steps", "8"], "--steps and --max_steps are one field, max_steps"),
    ],
)
def test_a_field_given_under_its_old_and_its_new_name_is_a_usage_error_naming_both(tmp_path, capsys, argv, expected):
    (tmp_path / "both.yaml").write_text("steps: 7\nmax_steps: 8\n")
    argv = [str(tmp_path / a) if a.endswith(".yaml") else a for a in argv]
    with pytest.raises(SystemExit) as exit_:
        cli_train.resolve(argv)
    assert exit_.value.code == 2 and expected in capsys.readouterr().err


def test_a_run_folders_config_json_is_a_valid_config_file(tmp_path):
    original = RLConfig(algorithm="gspo", max_steps=5, rollout_dtype="fp32")
    (tmp_path / "config.json").write_text(json.dumps(original.to_dict()))
    cfg, _ = cli_train.resolve(["--config", str(tmp_path / "config.json")])
    assert cfg == original


def test_trl_settings_come_as_a_yaml_mapping_or_a_flags_json(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("steps: 3\ntrl:\n  adam_beta2: 0.99\n  warmup_steps: 2\n")
    assert cli_train.resolve(["--config", str(path)])[0].trl == {"adam_beta2": 0.99, "warmup_steps": 2}
    cfg, _ = cli_train.resolve(["--config", str(path), "--trl", '{"adam_beta2": 0.9}'])
    assert cfg.trl == {"adam_beta2": 0.9}  # the flag replaces the file's mapping
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    assert cli_train.resolve(["--config", str(tmp_path / "config.json")])[0] == cfg


@pytest.mark.parametrize(
    "yaml_text,expected",
    [
        ("max_stepz: 3\n", r"unknown key 'max_stepz' \(did you mean \['max_steps'\]\?\); valid keys: .*'train_dtype'"),
        ("steps: many\n", r"max_steps: expects an integer, got 'many'"),
        ("lora: 3\n", r"lora: expects true or false, got 3"),
        ("train_dtype: fp8\n", r"unknown train_dtype 'fp8'; choose one of \('fp32', 'bf16', 'fp16'\)"),
        (
            "grader: exact\n",
            r"unknown grader 'exact'; choose one of \['arith', 'boxed_int', 'first_int', 'math_verify', 'r1_distill'\] or 'auto'",
        ),
        ("template: chatml\n", r"unknown template 'chatml'; choose one of \[.*'qwen_math'.*\]"),
        ("vllm_mode: remote\n", r"unknown vllm_mode 'remote'; choose one of \('colocate', 'server'\)"),
        ("trl:\n  adam_beta9: 1\n", r"bad.yaml', line 1: trl: 'adam_beta9' is no field of TRL's GRPOConfig"),
    ],
)
def test_bad_yaml_fails_before_anything_loads_naming_key_and_choices(
    tmp_path, capsys, monkeypatch, yaml_text, expected
):
    monkeypatch.setattr("nbkit.rl.train", lambda *a, **k: pytest.fail("train() must not be reached"))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(SystemExit) as exit_:
        cli_train.main(["--config", str(path)])
    assert exit_.value.code == 2
    assert re.search(expected, capsys.readouterr().err)


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--max-steps", "2.5"], "max_steps: expects an integer, got '2.5'"),
        (["--algorithm", "ppo_magic"], "unknown algorithm 'ppo_magic'; choose one of"),
        (["--algorithm", "ppo", "--ppo-lambda", "2"], "ppo_lambda must be in [0, 1], got 2.0"),
        (["--rollout-engine", "sglang"], "unknown rollout_engine 'sglang'; choose one of ('hf', 'vllm')"),
        (["--vllm-mode", "server"], "vllm_mode='server' needs rollout_engine='vllm'"),
        (["--top-p", "0"], "top_p must be in (0, 1], got 0.0"),
        (["--trl", "[1, 2]"], "trl: expects a mapping of names to values, got [1, 2]"),
        (["--trl", '{"max_steps": 9}'], "trl: 'max_steps' is RLConfig's own field max_steps"),
        (["--trl", '{"bf16": true}'], "trl: 'bf16' is set by the workbook from RLConfig's own fields"),
        (["--config", "/nowhere/run.yaml"], "config file '/nowhere/run.yaml' not found"),
    ],
)
def test_bad_flags_fail_naming_the_key(capsys, argv, expected):
    with pytest.raises(SystemExit) as exit_:
        cli_train.main(argv)
    assert exit_.value.code == 2 and expected in capsys.readouterr().err


def test_print_config_resolves_without_training(capsys, monkeypatch):
    monkeypatch.setattr("nbkit.rl.train", lambda *a, **k: pytest.fail("train() must not be reached"))
    assert cli_main.main(["train", "--max-steps", "4", "--rollout-dtype", "fp32", "--print-config"]) == 0
    import yaml

    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == RLConfig(max_steps=4, rollout_dtype="fp32").to_dict()


def test_an_accelerate_launch_for_another_precision_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setattr("nbkit.rl.train", lambda *a, **k: pytest.fail("train() must not be reached"))
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    with pytest.raises(SystemExit) as exit_:
        cli_train.main(["--train-dtype", "fp16"])
    assert (
        exit_.value.code == 2 and "accelerate was launched for bf16 but train_dtype='fp16'" in capsys.readouterr().err
    )
