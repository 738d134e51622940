"""The presets, rollout formats, mismatch metrics and studies are registries in code (the README names them): adding
an entry in its one place (a temporary one here, never a file edit) makes it appear in what the command line accepts
and in the tests that read the registry. The README itself stays short: the two commands on top."""

from __future__ import annotations

import numpy as np
import pytest

from nbkit.mismatch import mismatch
from nbkit.precision import formats
from nbkit.records import metrics
from nbkit.rl import algorithms
from nbkit.rl.config import RLConfig
from nbkit.runtime.paths import ROOT
from nbkit.studies.catalog import STUDIES


@pytest.fixture
def restore():
    """The registries as they were after the test (entries are added through their own ``register``)."""
    saved = [(table, dict(table)) for table in (algorithms.ALGORITHMS, formats.FORMATS, metrics.MISMATCH, STUDIES)]
    yield
    for table, before in saved:
        table.clear()
        table.update(before)


def test_the_readme_is_short_starts_with_the_two_commands_and_names_the_registries():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert all(name in text for name in ("STUDIES", "FORMATS", "ALGORITHMS", "CORRECTIONS", "MISMATCH"))
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in first_block] == [["make", "report"], ["make", "test"]]
    assert text.index("```bash") < text.index("\n## ")  # before the first section


def test_a_preset_added_in_one_place_reaches_the_cli_and_the_tests(restore):
    algorithms.register(algorithms.Algorithm("tmp_ppo_icepop", "PPO with IcePop", "ppo", ("icepop",), "ppo"))
    from nbkit.cli.train import resolve

    cfg, _ = resolve(["--algorithm", "tmp_ppo_icepop", "--print-config"])
    assert cfg.algo.is_mode == "token_mask" and cfg.algo.critic and not cfg.algo.mu_as_old
    with pytest.raises(ValueError, match="'tmp_ppo_icepop'"):  # the refusal lists it among the choices
        RLConfig(algorithm="nope")
    from tests.rl import test_mu_old, test_ppo_trainer

    test_mu_old.test_the_mu_as_old_presets_exist_and_clip()  # field-reading checks cover the new preset
    test_ppo_trainer.test_ppo_presets_are_registered_with_a_critic()
    with pytest.raises(ValueError, match="unknown loss 'ppo2'"):
        algorithms.Algorithm("bad", "a loss nobody declared", "ppo2")
    with pytest.raises(ValueError, match="more than one IS mode"):
        algorithms.Algorithm("bad", "two IS weights", "grpo", ("token_tis", "seq_mis"))
    with pytest.raises(ValueError, match="registered already"):
        algorithms.register(algorithms.Algorithm("grpo", "again"))


def test_a_format_added_in_one_place_reaches_the_cli_and_the_quantizer(restore):
    fmt = formats.register(
        formats.RolloutFormat(
            "tmp-e4m3-fp16", "fp16", "fp8", formats.E4M3, "channel", "FP8 E4M3 linears on an FP16 forward"
        )
    )
    from nbkit.cli.train import resolve

    cfg, _ = resolve(
        ["--rollout-format", "tmp-e4m3-fp16", "--rollout-engine", "hf", "--train-dtype", "fp16", "--print-config"]
    )
    assert cfg.rollout == "fp16"
    with pytest.raises(ValueError, match="'tmp-e4m3-fp16'"):
        formats.validate("nope")
    from tests.precision import test_formats

    test_formats.test_quantized_operands_stay_within_their_element_bound(fmt.name)
    with pytest.raises(ValueError, match="unknown scheme 'fp6'"):
        formats.RolloutFormat("bad", "bf16", "fp6", formats.E2M1)


def test_a_metric_added_in_one_place_reaches_the_computed_row_and_the_trainers_keys(restore, monkeypatch):
    metrics.register(
        metrics.Metric("tmp/abs_log_ratio_max", "max over tokens of |log r|", ("oat/tmp",), ("tmp/abs_log_ratio_max",))
    )
    real = mismatch.ess_metrics
    monkeypatch.setattr(
        mismatch,
        "ess_metrics",
        lambda pi, mu: {
            **real(pi, mu),
            "tmp/abs_log_ratio_max": float(max(np.abs(p - m).max() for p, m in zip(pi, mu, strict=True))),
        },
    )
    out = mismatch.mismatch_metrics([np.array([-1.0, -2.0])], [np.array([-1.5, -2.0])])
    assert out["tmp/abs_log_ratio_max"] == out["oat/tmp"] == 0.5
    assert "tmp/abs_log_ratio_max" in metrics.logged()
    assert list(out)[: len(metrics.MISMATCH)] == list(metrics.MISMATCH)  # in the registry's order


def test_a_study_added_in_one_place_reaches_the_study_command(restore, capsys):
    from nbkit.cli import study as cli
    from nbkit.studies.base import Study

    class Temp(Study):
        name = "tmp_study"
        title = "A temporary study"
        question = "Does the registry reach the README?"
        statistic = "none"
        notebook = ""

    STUDIES["tmp_study"] = Temp()  # (restored after the test)
    assert cli.main(["tmp_study"]) == 0 and "Not stored yet" in capsys.readouterr().out
