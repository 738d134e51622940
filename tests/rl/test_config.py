"""``RLConfig``'s declarations: which fields a resume may change, the options that change a run's result, and the
configs the stored studies recorded (they load, and a config with no TRL setting records what it recorded before)."""

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from nbkit.records import runlog
from nbkit.rl import RLConfig
from nbkit.rl.config import SAFE_TO_CHANGE, result_options

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
    assert {"steps", "output_dir", "save_total_limit"} <= set(SAFE_TO_CHANGE)
    assert not {"lr", "train_dtype", "seed", "trl"} & set(SAFE_TO_CHANGE)


def test_result_options_are_every_field_but_the_safe_ones_a_missing_one_as_its_default():
    cfg = RLConfig(steps=7, lr=3e-4)
    options = result_options(cfg)
    assert set(options) == {f.name for f in fields(RLConfig)} - set(SAFE_TO_CHANGE)
    assert options["lr"] == 3e-4 and "steps" not in options and options["trl"] == {}
    saved = {k: v for k, v in cfg.to_dict().items() if k not in ("judge_every", "trl")}  # a run from before them
    assert result_options({**saved, "a_removed_field": 1}) == options
    assert result_options({**saved, "steps": 100}) == options  # a longer run of the same recipe
    assert result_options(RLConfig(lr=3e-4, trl={"adam_beta2": 0.99})) != options  # a TRL setting changes it


def test_a_config_without_trl_settings_records_what_it_recorded_before_trl_existed():
    assert "trl" not in RLConfig().to_dict()
    assert RLConfig(trl={"adam_beta2": 0.99}).to_dict()["trl"] == {"adam_beta2": 0.99}


@pytest.mark.skipif(not stored_configs(), reason="no stored study records run configs")
def test_every_run_config_a_stored_study_recorded_loads_and_records_the_same_fields_again():
    configs = stored_configs()
    assert len(configs) > 100
    for where, stored in configs.items():
        cfg = RLConfig(**stored)
        again = cfg.to_dict()
        assert {k: again[k] for k in stored} == stored, where
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
    saved = RLConfig(steps=5).to_dict()
    assert "trl" not in saved and runlog.differing_fields(saved, RLConfig(steps=9)) == []  # steps may change
    assert runlog.differing_fields(saved, RLConfig(trl={"adam_beta2": 0.99})) == [
        "trl (run: {}, now: {'adam_beta2': 0.99})"
    ]


def test_prompts_shared_across_samples_need_gradient_checkpointing_off():
    with pytest.raises(ValueError, match="shared_prefix=True needs gradient_checkpointing=False"):
        RLConfig(shared_prefix=True)
    assert RLConfig(shared_prefix=True, gradient_checkpointing=False).shared_prefix
