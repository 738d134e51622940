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
    assert study.moves(runs, meta)["threshold-sentence"] == moved  # the sentence as first written said so


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
    assert S.SmolLM2After().moves(runs, meta)["threshold-sentence"] == []  # both readings agree here


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


# -- the record corrected after unblinding (issue 74 item 1), each reading asserted from the stored runs -------------
STORED = (S.results.RESULTS / S.STUDY / S.results.CARD).is_file()


def _stored():
    study = S.SmolLM2After()
    return study, study.load(), study.stored_meta()


def test_a_gap_whose_arm_and_reference_ran_on_different_cpus_is_found_from_the_sittings():
    meta = {
        "fp32-s0": {"train": "fp32", "rollout": "fp32", "seed": 0},
        "fp16-s0": {"train": "fp16", "rollout": "fp16", "seed": 0},
        "bf16-s0": {"train": "bf16", "rollout": "bf16", "seed": 0},
    }
    epyc = {"cpu": "AMD EPYC", "cores": 2, "cpu_flags": ["avx2"]}
    xeon = {"cpu": "Intel Xeon", "cores": 2, "cpu_flags": ["avx2", "avx512_fp16"]}
    sittings = [{"machine": epyc, "runs": ["fp32-s0", "bf16-s0"]}, {"machine": xeon, "runs": ["fp16-s0"]}]
    found = S.record.crossed(meta, sittings, lambda m: S.arm_name(m["train"], m["rollout"]), "fp32/fp32")
    assert list(found) == ["fp16/fp16"] and found["fp16/fp16"][0]["reference run"] == "fp32-s0"
    assert found["fp16/fp16"][0]["arm CPU"] == "Intel Xeon (avx2, avx512_fp16)"


@pytest.mark.skipif(not STORED, reason="smollm2_after is not stored")
def test_the_machine_deviation_is_read_on_every_seed_and_without_seed_3_both_computed_from_the_stored_runs():
    study, runs, meta = _stored()
    found = study.crossings(meta)
    assert {a: sorted(s) for a, s in found.items()} == {"fp16/fp16": [3]}  # the only gap across two CPUs
    c = found["fp16/fp16"][3]
    assert (c["arm run"], c["reference run"]) == ("fp16-s3", "fp32-s3")
    assert c["arm CPU"].startswith("AMD EPYC") and c["reference CPU"].startswith("Intel(R) Xeon(R)")
    gaps = study.gaps(runs, meta)
    assert gaps["fp16/fp16"][3] == pytest.approx(-0.302, abs=5e-4)
    assert max(abs(g) for by_seed in gaps.values() for g in by_seed.values()) == abs(gaps["fp16/fp16"][3])
    every, without = study.deviation(runs, meta)
    assert every["gap"] == pytest.approx(-0.0242) and every["95 % CI"] == pytest.approx([-0.1154, 0.0670], abs=1e-4)
    assert without["gap"] == pytest.approx(0.00667, abs=1e-5)
    assert without["95 % CI"] == pytest.approx([-0.0601, 0.0735], abs=1e-4) and "9 seeds" in without["read on"]
    assert every["verdict"] == without["verdict"] == "undecided"  # the rule's verdict does not move
    assert study.moves(runs, meta)["machine-deviation"] == []
    text = " ".join(study.findings(runs, meta, []))
    assert "fp16-s3 trained on AMD EPYC (avx2, avx512f, avx512_bf16) while fp32-s3 trained on Intel" in text
    assert "with seed 3 left out (9 seeds): +0.007 (95 % CI -0.060 to +0.073), undecided" in text


@pytest.mark.skipif(not STORED, reason="smollm2_after is not stored")
def test_the_sittings_line_names_the_training_commit_the_card_records_and_says_where_it_records_none():
    from nbkit.studies.results_md import provenance

    study = S.SmolLM2After()
    card = study.card()
    assert card["training_started"]["commit"].startswith("08a7c42")
    assert S.results.parts(card)[0]["commit"].startswith("56ae903")  # checked out when the first sitting was stored
    line = provenance(study, card)
    assert "2 runs at training commit `08a7c42a81` (the card's training_started; stored at `56ae903edc`)" in line
    assert line.count("a training commit not on the card (stored at `") == len(S.results.parts(card)) - 1 == 16
    assert "at commit `56ae903edc`" not in line
    moved = study.moves(study.load(), study.stored_meta())["training-commits"]
    assert moved[0] == "provenance, sitting 1 (2026-11-28T07:31): commit 56ae903 (stored at) → training commit 08a7c42"
    assert moved[1].startswith("provenance, sittings 2, 3, 4,") and len(moved) == 2


def _git(*args) -> str | None:
    import subprocess

    shown = subprocess.run(["git", *args], capture_output=True, text=True, cwd=S.results.ROOT)
    return shown.stdout.strip() if shown.returncode == 0 else None


@pytest.mark.skipif(not STORED, reason="smollm2_after is not stored")
def test_8c87cb7s_caveat_is_an_amendment_on_the_card_made_after_unblinding_with_what_it_moved():
    from nbkit.studies import amendments as A

    study, runs, meta = _stored()
    a = S.record.CLOSEST_CAVEAT_AMENDMENT
    assert a in study.amendments
    (on_card,) = [x for x in A.read(study.card()) if x.commit == a["commit"]]
    moved = study.moves(runs, meta)["closest-caveat"]
    assert on_card.verdicts_moved == moved and len(moved) == 1
    assert "CI half-widths 0.038-0.091 against errors 0.014-0.034" in moved[0]
    assert not S.results.verify(S.STUDY), "an amendment leaves the card's seal intact"
    text = " ".join(study.findings(runs, meta, []))
    assert "0.034); as amended after unblinding (see the record), the observed gaps' CI half-widths" in text
    when, unblinded = _git("show", "-s", "--format=%cI", a["commit"]), _git("show", "-s", "--format=%cI", "968b8ab")
    if when is None:
        pytest.skip("no git history here")
    assert when == a["time"] > unblinded  # the commit that made it, after the commit that unblinded the page


@pytest.mark.skipif(not STORED, reason="smollm2_after is not stored")
def test_the_question_and_the_answer_name_the_answer_length_computed_from_the_stored_runs():
    study, runs, meta = _stored()
    length = S.record.answer_length(runs)
    assert length["max"] == S.ANSWER_TOKENS == 16 and length["steps"] == 50 * len(runs) == 2500
    assert length["mean"] == pytest.approx(4.127, abs=1e-3) and length["capped"] == pytest.approx(0.0101, abs=1e-4)
    assert (
        study.question.startswith(S.QUESTION + " As amended after unblinding") and "at most 16 tokens" in study.question
    )
    first = study.findings(runs, meta, [])[0]
    assert first.startswith(
        "The prediction is undecided (read on 10 seeds, at answers of at most 16 tokens, 4.1 on average over the "
        "2,500 training steps' rollouts): "
    )
    assert study.moves(runs, meta)["answer-length"] == []
    committed = _git("show", f"{S.RULE_RECORD['commit']}:nbkit/studies/smollm2_after.py")
    if committed is None:
        pytest.skip("no git history here")
    import ast

    (cls,) = [n for n in ast.parse(committed).body if isinstance(n, ast.ClassDef) and n.name == "SmolLM2After"]
    (node,) = [n for n in cls.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "question"]
    assert ast.literal_eval(node.value) == S.QUESTION  # the committed question, word for word
