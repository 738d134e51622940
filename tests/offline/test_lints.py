"""The doctor's lints: each one trips on a setup made to trip it, names the setting, the consequence and the fix,
and all of them stay silent on a clean setup."""

import json

import pytest

from nbkit.cli import doctor as doctor_cli
from nbkit.offline import lints
from nbkit.offline.lints import Measured, Setup

MEASURED = Measured(
    token_abs={("bf16", "fp16"): 2e-3, ("fp16", "fp16"): 2e-4},
    token_stats={"fp16": (-1e-4, 1e-4), "bf16": (-2e-3, 4e-3)},
    heads={"fp16": {"none": 1e-4, "trainer": 3e-4, "engine": 2.5e-4, "both": 1.2e-4}},
    kept_mass=0.9,
    max_abs_weight=3.0,
    max_abs_activation=40.0,
    moe=False,
)
CLEAN = Setup(train_dtype="fp16", engine_dtype="fp16", target_length=512)


def codes(setup, measured=MEASURED, path=None):
    return [f.code for f in lints.run(setup, measured, path)]


def test_a_clean_setup_has_no_finding():
    assert codes(CLEAN) == []
    assert (
        codes(
            Setup(
                train_dtype="fp16",
                engine_dtype="fp16",
                fp32_lm_head="both",
                top_p=0.9,
                pi_filtered=True,
                is_level="sequence",
                is_cap=3.0,
                target_length=512,
                skip_rate=0.01,
            )
        )
        == []
    )


def test_trainer_and_engine_dtypes_differ_names_where_the_engine_dtype_came_from(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "bfloat16"}))
    found = lints.run(Setup(train_dtype="fp16", engine_dtype=None, target_length=512), MEASURED, str(tmp_path))
    assert [f.code for f in found] == ["dtype-mismatch"]
    assert "checkpoint's bfloat16" in found[0].setting and "0.002" in found[0].consequence and "dtype" in found[0].fix
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "float32"}))
    assert (
        "gives bfloat16" in lints.run(Setup(engine_dtype=None, target_length=512), MEASURED, str(tmp_path))[0].setting
    )


@pytest.mark.parametrize("side", ["trainer", "engine"])
def test_an_fp32_head_on_one_side_only(side):
    found = lints.run(Setup(train_dtype="fp16", engine_dtype="fp16", fp32_lm_head=side, target_length=512), MEASURED)
    assert [f.code for f in found] == ["one-sided-fp32-head"]
    assert "0.0001 with no FP32 head" in found[0].consequence and "both" in found[0].fix


def test_processed_logprobs_with_a_sampling_filter_and_unfiltered_pi():
    found = lints.run(Setup(train_dtype="fp16", engine_dtype="fp16", top_p=0.9, target_length=512), MEASURED)
    assert [f.code for f in found] == ["filtered-mu"] and "kept mass (0.9" in found[0].consequence
    assert (
        codes(Setup(train_dtype="fp16", engine_dtype="fp16", top_k=20, logprobs_mode="raw_logprobs", target_length=512))
        == []
    )


def test_sequence_is_whose_clamp_the_expected_length_hits():
    long_bf16 = Setup(train_dtype="bf16", engine_dtype="bf16", is_level="sequence", is_cap=3.0, target_length=8192)
    found = lints.run(long_bf16, MEASURED)
    assert [f.code for f in found] == ["sequence-is-clamp"] and "of sequences fall outside" in found[0].consequence
    assert codes(Setup(train_dtype="fp16", engine_dtype="fp16", is_level="sequence", target_length=100)) == []


def test_a_model_fp16_cannot_hold_and_an_engine_that_refuses_fp16():
    assert codes(CLEAN, Measured(max_abs_activation=1e5)) == ["fp16-overflow"]
    assert codes(CLEAN, Measured(max_abs_weight=7e4)) == ["fp16-overflow"]
    assert codes(CLEAN, Measured(engine_refused_fp16="ValueError: float16 is not supported")) == ["fp16-refused"]


def test_a_high_loss_scale_skip_rate(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": i, "skipped_step": i % 4 == 0}) for i in range(20))
    )
    rate = lints.skip_rate(tmp_path)
    assert rate == pytest.approx(0.25)
    found = lints.run(Setup(train_dtype="fp16", engine_dtype="fp16", target_length=512, skip_rate=rate), MEASURED)
    assert [f.code for f in found] == ["loss-scale-skips"] and "25.0%" in found[0].setting


def test_moe_without_routing_replay():
    moe = Measured(moe=True, moe_flip_rate=0.0016)
    assert codes(CLEAN, moe) == ["moe-no-replay"]
    assert codes(Setup(train_dtype="fp16", engine_dtype="fp16", target_length=512, router_replay=True), moe) == []


def test_bad_setups_are_refused_naming_the_value():
    with pytest.raises(ValueError, match="unknown fp32_lm_head 'left'"):
        Setup(fp32_lm_head="left")
    with pytest.raises(ValueError, match="unknown engine_dtype 'fp8'"):
        Setup(engine_dtype="fp8")
    with pytest.raises(ValueError, match="unknown is_level 'group'"):
        Setup(is_level="group")


def test_the_setup_of_an_rlconfig_file_with_flags_over_it(tmp_path):
    from argparse import Namespace

    (tmp_path / "run.yaml").write_text(
        "train_dtype: bf16\nrollout_dtype: fp16\ntop_p: 0.9\nalgorithm: pg_seq_is\nis_cap: 2.0\n"
    )
    flags = dict(
        target_length=4096,
        train_dtype=None,
        engine_dtype=None,
        fp32_lm_head="trainer",
        temperature=None,
        top_p=None,
        top_k=None,
        logprobs_mode=None,
        is_level=None,
        is_cap=None,
        run=None,
        pi_filtered=False,
        router_replay=False,
        config=str(tmp_path / "run.yaml"),
    )
    setup = doctor_cli.setup_from_args(Namespace(**flags))
    assert (setup.train_dtype, setup.engine_dtype, setup.top_p, setup.is_level, setup.is_cap) == (
        "bf16",
        "fp16",
        0.9,
        "sequence",
        2.0,
    )
    assert setup.fp32_lm_head == "trainer" and setup.target_length == 4096
    found = {f.code for f in lints.run(setup, MEASURED)}
    assert found >= {"dtype-mismatch", "one-sided-fp32-head"}
    assert setup.pi_filtered and "filtered-mu" not in found  # the workbook's trainer puts π on the filter's support
