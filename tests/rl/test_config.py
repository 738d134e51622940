"""``RLConfig``'s declarations: which fields a resume may change, the options that change a run's result, the old
names of the fields renamed to TRL's (``RENAMED``), and the configs the stored studies recorded (they load through that
table, and a config with no TRL setting records what it recorded before)."""

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from nbkit.records import runlog
from nbkit.rl import RLConfig
from nbkit.rl.config import RENAMED, SAFE_TO_CHANGE, check_field_names, config_from, result_options, trl_fields

RESULTS = Path(__file__).resolve().parents[2] / "data" / "results"


def stored_configs() -> dict[str, dict]:
    """``study/label`` → the run config a stored study recorded (``provenance.json``'s ``configs.runs``)."""
    return {
        f"{path.parent.name}/{label}": config
        for path in sorted(RESULTS.glob("*/provenance.json"))
        for label, config in json.loads(path.read_text()).get("configs", {}).get("runs", {}).items()
    }


def test_the_fields_a_resume_may_change_are_declared_with_them_and_runlog_spells_the_same():
    assert set(SAFE_TO_CHANGE) == set(runlog.SAFE_TO_CHANGE)
    assert {"max_steps", "output_dir", "save_total_limit"} <= set(SAFE_TO_CHANGE)
    assert not {"learning_rate", "train_dtype", "seed", "trl"} & set(SAFE_TO_CHANGE)


def test_result_options_are_every_field_but_the_safe_ones_a_missing_one_as_its_default():
    cfg = RLConfig(max_steps=7, learning_rate=3e-4)
    options = result_options(cfg)
    assert set(options) == {f.name for f in fields(RLConfig)} - set(SAFE_TO_CHANGE)
    assert options["learning_rate"] == 3e-4 and "max_steps" not in options and options["trl"] == {}
    saved = {k: v for k, v in cfg.to_dict().items() if k not in ("judge_every", "trl")}  # a run from before them
    assert result_options({**saved, "a_removed_field": 1}) == options
    assert result_options({**saved, "max_steps": 100}) == options  # a longer run of the same recipe
    assert result_options(RLConfig(learning_rate=3e-4, trl={"adam_beta2": 0.99})) != options  # a TRL setting does
    old = {next((o for o, n in RENAMED.items() if n == k), k): v for k, v in saved.items()}  # saved before the rename
    assert "lr" in old and result_options(old) == options


def test_the_fields_renamed_to_trls_names_are_those_trl_names_and_their_old_names_are_read_as_them():
    from trl import GRPOConfig

    assert set(RENAMED.values()) <= set(trl_fields()) <= {f.name for f in fields(GRPOConfig)}
    assert not set(RENAMED) & {f.name for f in fields(RLConfig)}
    cfg = RLConfig.from_dict(
        {"steps": 7, "lr": 3e-4, "samples_per_prompt": 4, "max_tokens": 9, "vllm_sleep_mode": True}
    )
    assert (cfg.max_steps, cfg.learning_rate, cfg.num_generations, cfg.max_completion_length) == (7, 3e-4, 4, 9)
    assert cfg.vllm_enable_sleep_mode and config_from({"steps": 3}).max_steps == 3
    check_field_names(["steps", "max_tokens"])  # a notebook's config_overrides under the old names


@pytest.mark.parametrize("read", [RLConfig.from_dict, config_from, check_field_names])
def test_one_field_given_under_its_old_and_its_new_name_is_refused_naming_both(read):
    with pytest.raises(ValueError, match="'steps' and 'max_steps' are one field, max_steps"):
        read({"steps": 5, "max_steps": 6})


def test_a_config_without_trl_settings_records_what_it_recorded_before_trl_existed():
    assert "trl" not in RLConfig().to_dict()
    assert RLConfig(trl={"adam_beta2": 0.99}).to_dict()["trl"] == {"adam_beta2": 0.99}


@pytest.mark.skipif(not stored_configs(), reason="no stored study records run configs")
def test_every_run_config_a_stored_study_recorded_loads_through_the_table_and_records_the_same_values_again():
    configs = stored_configs()
    assert len(configs) > 100
    for where, stored in configs.items():
        cfg = RLConfig.from_dict(stored)
        again = cfg.to_dict()
        assert {RENAMED.get(k, k): again[RENAMED.get(k, k)] for k in stored} == runlog.renamed(stored), where
        assert (cfg.max_steps, cfg.learning_rate) == (stored["steps"], stored["lr"]), where  # every card: old names
        assert (cfg.num_generations, cfg.max_completion_length) == (stored["samples_per_prompt"], stored["max_tokens"])
        assert "trl" not in again, where  # no key the stored study's checks would read as a changed option


def test_every_field_is_read_somewhere_besides_its_declaration():
    """No dead field: each one reaches TRL (``metadata["trl"]``) or is read as an attribute by the workbook."""
    root = Path(__file__).resolve().parents[2] / "nbkit"
    text = "\n".join(p.read_text("utf-8") for p in root.rglob("*.py") if p.name != "config.py")
    unread = [
        f.name
        for f in fields(RLConfig)
        if "trl" not in f.metadata and not re.search(rf"\.{f.name}\b|\"{f.name}\"", text)
    ]
    assert unread == []


def test_a_resume_compares_the_result_options_a_run_saved_before_trl_existed_as_the_same():
    saved = RLConfig(max_steps=5).to_dict()
    assert "trl" not in saved and runlog.differing_fields(saved, RLConfig(max_steps=9)) == []  # steps may change
    assert runlog.differing_fields({"lr": 1e-3}, RLConfig(learning_rate=1e-3, seed=1)) == ["seed (run: 0, now: 1)"]
    assert runlog.differing_fields(saved, RLConfig(trl={"adam_beta2": 0.99})) == [
        "trl (run: {}, now: {'adam_beta2': 0.99})"
    ]


def test_prompts_shared_across_samples_need_gradient_checkpointing_off():
    with pytest.raises(ValueError, match="shared_prefix=True needs gradient_checkpointing=False"):
        RLConfig(shared_prefix=True)
    assert RLConfig(shared_prefix=True, gradient_checkpointing=False).shared_prefix
