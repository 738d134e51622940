"""The real-LM prediction study (issue 51): its grid, its refusal to train before the predictions are committed,
the candidates a run's first row gives, and a 2-step smoke run of every arm on SmolLM2 with the audit passing."""

from pathlib import Path

import pytest

from nbkit.records import schema
from nbkit.studies import prereg
from nbkit.studies import smollm2_after as S


def test_the_grid_pairs_every_arm_with_fp32_on_each_seed_seed_by_seed():
    grid = S.SmolLM2After().grid(seeds=[0, 1], output_dir="/tmp/s2a")
    assert list(grid)[:5] == ["fp32-s0", "fp32-fp16r-s0", "fp32-bf16r-s0", "bf16-s0", "fp16-s0"]
    assert len(grid) == 10
    cfg = grid["fp32-bf16r-s1"]
    assert (cfg.model, cfg.train_dtype, cfg.rollout, cfg.seed) == ("smollm2-135m", "fp32", "bf16", 1)
    assert cfg.shared_prefix and not cfg.gradient_checkpointing and cfg.vllm_block_size == 32
    assert Path(cfg.output_dir) == Path("/tmp/s2a/fp32-bf16r-s1")


def test_nothing_trains_before_the_predictions_are_committed(tmp_path):
    study = S.SmolLM2After()
    study.rule_record = {}  # as before the rule's commit was recorded
    with pytest.raises(prereg.PredictionsMissing, match="not committed yet"):
        study.run(output_dir=str(tmp_path))
    study.predictions = {a: p for a, p in S.PREDICTIONS.items() if a != "fp16/fp16"}
    with pytest.raises(prereg.PredictionsMissing, match="no prediction for arm"):
        study.run(output_dir=str(tmp_path))
    assert not (tmp_path / prereg.STARTED).exists()


def test_a_runs_first_row_gives_the_candidates_it_logs_ess_as_its_deficit():
    row = {
        schema.TOKEN_ABS_LOGP_DIFF: 0.04,
        schema.mismatch_key("kl_k1"): -1e-4,
        schema.mismatch_key("seq_kl"): 2e-4,
        schema.mismatch_key("seq_log_ratio/abs_mean"): 0.1,
        schema.mismatch_key("ess_seq"): 0.8,
    }
    assert S.candidate_values(row) == pytest.approx(
        {"token_abs": 0.04, "bias": -1e-4, "seq_kl": 2e-4, "seq_abs": 0.1, "ess_deficit": 0.25}
    )
    assert S.candidate_values({}) == {}


def test_the_gap_is_the_arm_minus_fp32_on_the_same_seed():
    def rows(acc):
        return [{"step": s, schema.JUDGE_ACCURACY: acc} for s in (0, 10, 20, 30, 40, 50)]

    runs = {"a0": rows(0.30), "r0": rows(0.40), "a1": rows(0.35), "r1": rows(0.38)}
    meta = {
        "a0": {"train": "fp32", "rollout": "bf16", "seed": 0},
        "r0": {"train": "fp32", "rollout": "fp32", "seed": 0},
        "a1": {"train": "fp32", "rollout": "bf16", "seed": 1},
        "r1": {"train": "fp32", "rollout": "fp32", "seed": 1},
    }
    gaps = S.SmolLM2After().gaps(runs, meta)
    assert gaps["fp32/bf16"] == pytest.approx({0: -0.10, 1: -0.03})
    obs = S.SmolLM2After().observed(runs, meta)["fp32/bf16"]
    assert obs["gap"] == pytest.approx(-0.065) and obs["lo"] < obs["gap"] < obs["hi"]


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("arm", [S.REFERENCE, *S.ARMS], ids=lambda a: S.arm_name(*a))
def test_every_arm_trains_two_steps_on_smollm2_with_the_audit_passing(arm, tmp_path, monkeypatch):
    from nbkit.runtime.pool import free_port

    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # not 29500: another worker's trainer may hold it
    from nbkit.rl.run import train

    t, r = arm
    rows = train(
        S.config(
            t,
            r,
            0,
            tmp_path,
            max_steps=2,
            prompts_per_step=2,
            num_generations=2,
            max_completion_length=8,
            judge_every=0,
        ),
        progress=False,
    ).rows
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row[schema.AUDIT_ROLLOUT_DTYPE] == r
        assert set(row[schema.AUDIT_MATMUL_DTYPES]) == {t}
        assert row[schema.AUDIT_SCALER_ENABLED] is (t == "fp16")


def test_doses_are_one_step_of_each_arms_own_run_written_per_arm_and_never_remeasured(tmp_path, monkeypatch):
    import types

    import nbkit.rl.run as run

    trained = []

    def fake_train(cfg, progress=True):
        trained.append((cfg.train_dtype, cfg.rollout, cfg.max_steps, cfg.prompts_per_step, cfg.judge_every, cfg.seed))
        bf16 = cfg.rollout == "bf16"
        row = {
            schema.TOKEN_ABS_LOGP_DIFF: 0.04 if bf16 else 0.005,
            schema.mismatch_key("kl_k1"): 0.0,
            schema.mismatch_key("seq_kl"): 1e-4,
            schema.mismatch_key("seq_log_ratio/abs_mean"): 0.1,
            schema.mismatch_key("ess_seq"): 0.5,
            schema.TIME_STEP: 30.0,
        }
        return types.SimpleNamespace(rows=[row])

    monkeypatch.setattr(run, "train", fake_train)
    arms = (("fp32", "fp32"), ("fp32", "bf16"))
    S.measure_doses(tmp_path / "work", arms=arms, folder=tmp_path / "doses", progress=False)
    assert trained == [(t, r, 1, S.DOSE_PROMPTS, 0, s) for t, r in arms for s in S.DOSE_SEEDS]
    measured = S.doses(tmp_path / "doses")
    assert measured["fp32/bf16"]["candidates"]["token_abs"] == pytest.approx(0.04)
    assert measured["fp32/bf16"]["candidates"]["ess_deficit"] == pytest.approx(1.0)
    assert "commit" in measured["fp32/fp32"] and "time" in measured["fp32/fp32"]
    S.measure_doses(tmp_path / "work", arms=arms, folder=tmp_path / "doses", progress=False)
    assert len(trained) == 2 * len(S.DOSE_SEEDS)  # nothing measured twice


def _study_runs(gaps: dict[str, float], ref: list[float], seeds=range(5), skip=()):
    """Runs judged at 0, 20, 40, 50: the reference at ``ref[seed]``, each arm ``gaps[arm]`` below it."""

    def rows(acc):
        return [{"step": s, schema.JUDGE_ACCURACY: acc, schema.TOKEN_ABS_LOGP_DIFF: 0.01} for s in (0, 20, 40, 50)]

    runs, meta = {}, {}
    for seed in seeds:
        for t, r in (S.REFERENCE, *S.ARMS):
            arm = S.arm_name(t, r)
            if (arm, seed) in skip:
                continue
            lab = S.label(t, r, seed)
            runs[lab] = rows(ref[seed] + (gaps[arm] + 0.002 * seed if arm in gaps else 0.0))
            meta[lab] = {"train": t, "rollout": r, "seed": seed}
    return runs, meta


QUIET = [0.82, 0.821, 0.819, 0.82, 0.822]
AS_PREDICTED = {"fp32/fp16": -0.01, "fp16/fp16": -0.012, "fp32/bf16": -0.06, "bf16/bf16": -0.06}


def test_the_page_is_blind_until_every_arm_is_judged_on_every_planned_seed():
    study = S.SmolLM2After()
    runs, meta = _study_runs(AS_PREDICTED, QUIET, skip={("fp16/fp16", 4)})
    assert not study.complete(runs, meta) and study.planned(runs, meta) == 5
    assert study.read(runs, meta) == {} and all(r["gap"] is None for r in study.table(runs, meta))
    assert {v["verdict"] for v in study.verdicts(runs, meta)} == {"blind"}
    assert "Blind until" in study.findings(runs, meta, [])[0]
    fig = study.figure(runs, meta)
    assert len(fig.data) == len(S.CANDIDATE_KEYS)  # the committed predictions only, nothing observed


def test_once_complete_the_page_reads_each_arm_and_the_headline_from_the_numbers():
    study = S.SmolLM2After()
    runs, meta = _study_runs(AS_PREDICTED, QUIET)
    assert study.complete(runs, meta)
    verdicts = study.verdicts(runs, meta)
    assert [v["verdict"] for v in verdicts] == ["holds"] * 4 + ["holds"]
    assert verdicts[1]["gap"] == pytest.approx(-0.06 + 0.004)
    text = " ".join(study.findings(runs, meta, []))
    assert text.startswith("The prediction held (read on 5 seeds)") and "Closest predictor: token_abs" in text
    assert "tests no predictor against another" not in text  # CIs this narrow do tell the predictors apart
    assert "Power of the rule applied, at the blinded SD of a gap (0.002" in text  # √2 × SD of QUIET
    assert len(study.figure(runs, meta).data) == len(S.CANDIDATE_KEYS) + 1
    runs, meta = _study_runs({**AS_PREDICTED, "fp32/bf16": 0.0}, QUIET)  # BF16 rollouts did no harm
    assert study.verdicts(runs, meta)[-1]["verdict"] == "fails"
    assert study.findings(runs, meta, [])[0].startswith("The prediction failed")
    runs, meta = _study_runs({**AS_PREDICTED, "fp32/bf16": -0.024}, QUIET)  # mean -0.020: its CI straddles -0.02
    assert study.verdicts(runs, meta)[-1]["verdict"] == "undecided"
    assert study.findings(runs, meta, [])[0].startswith("The prediction is undecided (read on 5 seeds)")


def test_the_per_token_threshold_sentence_reads_each_arm_by_its_one_interval():
    study = S.SmolLM2After()
    runs, meta = _study_runs(AS_PREDICTED, QUIET)
    text = " ".join(study.findings(runs, meta, []))
    assert "fp32/fp16 did not cross it (CI wholly above −0.05); fp16/fp16 did not cross it" in text
    noisy = [0.80, 0.86, 0.74, 0.85, 0.77]  # fp16/fp16's gaps drawn from a spread reference: its CI spans −0.05
    runs, meta = _study_runs(AS_PREDICTED, QUIET)
    for seed, acc in enumerate(noisy):
        for step in runs[S.label("fp16", "fp16", seed)]:
            step[schema.JUDGE_ACCURACY] = acc - 0.05
    assert S.transfer.observed(study.observed(runs, meta)["fp16/fp16"]) == "undecided"
    assert "fp16/fp16 undecided (CI spans −0.05)" in " ".join(study.findings(runs, meta, []))
    moved = ["per-token threshold reading, fp16/fp16: did not cross → undecided"]
    assert study.moves(runs, meta) == {"threshold-sentence": moved}  # the sentence as first written said so


def test_the_closest_predictor_is_called_descriptive_when_every_gaps_ci_is_wider_than_the_predictors_spread():
    study = S.SmolLM2After()
    runs, meta = _study_runs(AS_PREDICTED, QUIET)
    noise = [0.06, -0.04, 0.08, -0.07, 0.0]
    for i, (t, r) in enumerate(S.ARMS):
        for seed in range(5):
            for step in runs[S.label(t, r, seed)]:
                step[schema.JUDGE_ACCURACY] += noise[(seed + i) % 5]
    text = " ".join(study.findings(runs, meta, []))
    assert "so the ranking describes these seeds and tests no predictor against another" in text


def test_the_amendment_after_unblinding_says_so_and_moves_no_verdict_of_the_rule():
    a = S.THRESHOLD_SENTENCE_AMENDMENT
    assert a in S.SmolLM2After.amendments and len(a["commit"]) == 40 and a["time"] > S.RULE_RECORD["time"]
    assert "after unblinding" in a["why"] and "verdicts" in a["what"]
    runs, meta = _study_runs(AS_PREDICTED, QUIET)
    assert S.SmolLM2After().moves(runs, meta) == {"threshold-sentence": []}  # both readings agree here


def test_step_times_are_read_per_sitting_on_its_own_machine():
    meta = {
        S.label("fp32", "fp32", 0): {"train": "fp32", "rollout": "fp32", "seed": 0},
        S.label("bf16", "bf16", 0): {"train": "bf16", "rollout": "bf16", "seed": 0},
    }
    a, b = meta
    runs = {a: [{schema.TIME_STEP: t} for t in (10.0, 12.0, 30.0)], b: [{schema.TIME_STEP: 20.0}, {"step": 0}]}
    sittings = [
        {"date": "2026-11-28T07:31:02+00:00", "machine": {"cpu": "AMD EPYC", "cores": 2}, "runs": [a]},
        {"date": "2026-12-02T13:47:57+00:00", "machine": {"cpu": "Intel Xeon", "cores": 2}, "runs": [b]},
    ]
    rows = S.SmolLM2After().step_times(runs, meta, sittings)
    assert [r["sitting"] for r in rows] == ["2026-11-28T07:31", "2026-12-02T13:47"]
    assert rows[0]["CPU"].startswith("AMD EPYC") and rows[1]["CPU"].startswith("Intel Xeon")
    assert rows[0]["fp32/fp32"] == 12.0 and rows[0]["bf16/bf16"] is None
    assert rows[1]["bf16/bf16"] == 20.0 and rows[1]["fp32/fp32"] is None


def test_a_spread_reference_extends_the_study_and_the_first_look_is_shown_beside():
    study = S.SmolLM2After()
    spread = [0.80, 0.83, 0.78, 0.84, 0.81, 0.80, 0.82, 0.79, 0.83, 0.81]
    runs, meta = _study_runs(AS_PREDICTED, spread)
    n = study.planned(runs, meta)
    assert n > 5 and not study.complete(runs, meta)
    runs, meta = _study_runs(AS_PREDICTED, spread, seeds=range(n))
    assert study.complete(runs, meta)
    captions = [c for c, _ in study.page_tables(runs, meta, [])]
    assert "first look: seeds 0-4" in captions
    first = dict(study.page_tables(runs, meta, []))["first look: seeds 0-4"]
    assert {r["seeds"] for r in first[:-1]} == {5}


def test_the_page_audits_every_steps_rollout_dtype_against_its_arm():
    meta = {"a": {"train": "fp32", "rollout": "bf16", "seed": 0}}
    ok = {"a": [{"step": 1, schema.AUDIT_ROLLOUT_DTYPE: "bf16"}, {"step": 2, schema.AUDIT_ROLLOUT_DTYPE: "bf16"}]}
    assert S.SmolLM2After.rollout_audit(ok, meta) == "all 2 in the arm's dtype"
    bad = {"a": [*ok["a"], {"step": 3, schema.AUDIT_ROLLOUT_DTYPE: "fp32"}]}
    assert S.SmolLM2After.rollout_audit(bad, meta) == "MISMATCH in 1 of 3 steps: a step 3: fp32"
    assert S.SmolLM2After.rollout_audit({"a": [{"step": 1}]}, meta) == "no audited step"
    runs, meta = _study_runs(AS_PREDICTED, QUIET, skip={("fp16/fp16", 4)})
    assert S.SmolLM2After().findings(runs, meta, [])[-1].startswith("Audit, trainer: no audited step; rollouts:")


@pytest.mark.parametrize(
    ("a", "names"),
    [(S.MACHINE_AMENDMENT, "AVX2 emulation"), (S.AVX512_BF16_AMENDMENT, "benchmarks/avx2.py")],
    ids=["machine", "machine-avx512-bf16"],
)
def test_each_change_of_machine_is_an_amendment_made_after_the_rule_that_names_its_commit_and_moves_no_verdict(
    a, names
):
    assert a in S.SmolLM2After.amendments and len(a["commit"]) == 40
    assert a["time"] > S.RULE_RECORD["time"] and "blind" in a["why"] and names in a["what"]
