"""The pre-registered critic study (issue 50, item 4): its outcome reads the explained variance logged in the last 20
optimiser steps, its verdict needs every one of the 3 seeds above 0.2, its "why" reads the bins' in-batch ceiling, and
the PPO page says which (or that the study is not yet run), from synthetic runs of known values."""

from __future__ import annotations

import pytest

from nbkit.records import schema
from nbkit.studies import ppo
from nbkit.studies import ppo_critic as PC


def _rows(ev_late: float, ceiling_late: float, steps: int = 100) -> list[dict]:
    """One PPO run: a rollout batch every 4 steps (1, 5, ..., 97) logging EV and the ceiling, low until step 80."""
    rows = []
    for step in range(1, steps + 1):
        row = {schema.STEP: step, schema.VALUE_LOSS: 0.1}
        if step % 4 == 1:
            late = step > steps - ppo.TAIL
            row[schema.VALUE_EXPLAINED_VARIANCE] = ev_late if late else -0.5
            row[schema.VALUE_MIN_LOGP_CEILING] = ceiling_late if late else 0.9
        rows.append(row)
    return rows


def _study(values: dict[int, tuple[float, float]]):
    runs = {PC.LABEL.format(seed=s): _rows(*v) for s, v in values.items()}
    meta = {PC.LABEL.format(seed=s): {"dtype": "fp16", "seed": s} for s in values}
    return runs, meta


def test_the_outcome_is_the_mean_over_the_batches_logged_in_the_last_20_steps():
    rows = _rows(0.3, 0.4)
    rows[-4][schema.VALUE_EXPLAINED_VARIANCE] = 0.1  # step 97, the last batch: (0.3 · 4 + 0.1) / 5
    assert PC.tail_mean(rows, schema.VALUE_EXPLAINED_VARIANCE) == pytest.approx(0.26)
    assert PC.tail_mean(rows, schema.VALUE_MIN_LOGP_CEILING) == pytest.approx(0.4)  # steps 81–97, not the 0.9 before
    assert PC.tail_mean(rows, "no such metric") is None


def test_the_critic_learns_only_when_every_one_of_the_three_seeds_is_above_the_threshold():
    assert PC.verdict({0: 0.25, 1: 0.3, 2: 0.21}) == "learns"
    assert PC.verdict({0: 0.25, 1: 0.3, 2: 0.2}) == "does not learn"  # > 0.2, not ≥
    assert PC.verdict({0: 0.9, 1: 0.9}) == "no verdict"  # two seeds stored
    assert PC.verdict({0: 0.9, 1: 0.9, 2: None}) == "no verdict"


def test_a_seed_below_the_threshold_reads_the_ceiling_for_why():
    assert PC.reading(0.05, 0.1) == "the feature stopped predicting"
    assert PC.reading(0.05, 0.2) == "the feature stopped predicting"
    assert PC.reading(0.05, 0.35) == "the critic did not fit the feature"
    assert PC.reading(0.25, 0.35) == "above 0.2"


def test_the_finding_states_the_verdict_and_each_seeds_numbers():
    runs, meta = _study({0: (0.25, 0.3), 1: (0.1, 0.15), 2: (0.3, 0.4)})
    study = PC.PPOCriticStudy()
    (line,) = study.findings(runs, meta, study.table(runs, meta))
    assert line.startswith("The critic does not learn by the rule")
    assert "seed 1: EV 0.1 (bins' ceiling 0.15: the feature stopped predicting)" in line
    runs, meta = _study({s: (0.3, 0.4) for s in PC.SEEDS})
    assert study.findings(runs, meta, study.table(runs, meta))[0].startswith("The critic learns")


def test_the_grid_is_the_stored_ppo_fp16_run_with_the_min_logp_critic_and_nothing_else_changed():
    grid = PC.PPOCriticStudy().grid()
    assert list(grid) == [f"ppo-fp16-min_logp-s{s}" for s in (0, 1, 2)]
    base = ppo.base_config(max_steps=100, train_dtype="fp16", critic_lr=1e-3, seed=0)
    cfg = grid["ppo-fp16-min_logp-s0"]
    changed = {k for k, v in cfg.to_dict().items() if base.to_dict().get(k) != v}
    assert changed == {"critic_input", "output_dir"}  # critic_feature_lr 3e-2 is the field's default
    assert cfg.critic_input == "hidden+min_logp" and cfg.critic_feature_lr == 3e-2


def test_the_ppo_page_says_the_critic_study_is_not_yet_run_with_its_committed_rule(tmp_path):
    runs = {"ppo-fp16-s0": [{schema.STEP: 100, schema.VALUE_EXPLAINED_VARIANCE: -0.001}]}
    meta = {"ppo-fp16-s0": {"dtype": "fp16", "seed": 0}}
    line = ppo.critic_line(runs, meta, root=tmp_path)
    assert "-0.001 (FP16, 1 seed)" in line and "not yet run" in line
    assert f"`{PC.RULE_RECORD['commit'][:7]}`" in line and "> 0.2 in all 3 seeds" in line
