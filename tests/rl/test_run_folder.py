"""Run folders never lose or mix work: a fresh run never lands on an earlier one, a resume continues exactly the
same run (the same rewards as if it had never stopped), a finished run is left alone, a half-written checkpoint
never blocks a resume, and nothing is changed before every check has passed.

Cheap runs: tiny-arith, HF engine, fp32, 2 prompts x 2 samples.
"""

import json

import pytest

from nbkit.rl import RLConfig, runfolder, train
from nbkit.rl.trainer import StepLogger
from nbkit.runtime import outputs


def config(out, data, **kw) -> RLConfig:
    base = dict(
        model="tiny-arith",
        dataset=data,
        train_dtype="fp32",
        rollout_engine="hf",
        max_steps=4,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=40,
        checkpoint_every=2,
        output_dir=str(out),
    )
    return RLConfig(**{**base, **kw})


class Killed(Exception):
    """Stands for kill -9 in the middle of a run."""


def kill_after_step(monkeypatch, step: int) -> None:
    """The run dies right after logging ``step`` (its row is on disk, the next checkpoint is not)."""
    logged = StepLogger.on_log

    def dying(self, args, state, control, logs=None, **kw):
        logged(self, args, state, control, logs=logs, **kw)
        if state.global_step == step:
            raise Killed(f"killed after step {step}")

    monkeypatch.setattr(StepLogger, "on_log", dying)


TRACKED = ("reward", "completions/mean_length", "grad_norm", "mismatch/token_abs_logp_diff/mean")


def trace(rows) -> list[tuple]:
    return [(r["step"],) + tuple(r[k] for k in TRACKED) for r in rows]


@pytest.mark.slow
def test_a_killed_and_resumed_run_logs_exactly_what_an_uninterrupted_run_logs(
    tmp_path, arith_jsonl, monkeypatch, capsys
):
    straight = train(config(tmp_path / "straight", arith_jsonl), progress=False)
    assert [r["step"] for r in straight.rows] == [1, 2, 3, 4]
    assert len({r["reward"] for r in straight.rows} | {r["completions/mean_length"] for r in straight.rows}) > 2
    saved = json.loads((straight.out / "checkpoint-2" / runfolder.STATE_FILE).read_text())
    assert saved["rollout_calls"] == 2 and saved["skipped_steps_total"] == 0 and saved["step"] == 2
    assert (straight.out / "checkpoint-4").is_dir()  # the last step is saved too: the run can be extended

    out = tmp_path / "killed"
    with monkeypatch.context() as m:
        kill_after_step(m, 3)
        with pytest.raises(Killed):
            train(config(out, arith_jsonl), progress=False)
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    (out / "checkpoint-4").mkdir()  # a kill while writing checkpoint-4: weights there, no trainer state
    (out / "checkpoint-4" / "model.safetensors").write_bytes(b"cut short")

    resumed = train(config(out, arith_jsonl, resume=True), progress=False)
    said = capsys.readouterr().out
    assert "from checkpoint-2" in said and "checkpoint-4" in said  # the partial checkpoint is named, not used
    assert trace(resumed.rows) == trace(straight.rows)  # row 3 recomputed, same seeds, same rewards
    assert not (out / "checkpoint-4" / "model.safetensors").read_bytes() == b"cut short"

    before = (out / "metrics.jsonl").read_bytes()
    again = train(config(out, arith_jsonl, resume=True), progress=False)
    assert "already finished at step 4" in capsys.readouterr().out
    assert (out / "metrics.jsonl").read_bytes() == before and trace(again.rows) == trace(straight.rows)

    longer = train(config(out, arith_jsonl, resume=True, max_steps=5), progress=False)  # steps may grow
    assert [r["step"] for r in longer.rows] == [1, 2, 3, 4, 5] and trace(longer.rows[:4]) == trace(straight.rows)


@pytest.mark.slow
def test_a_run_folder_is_never_reused_by_another_run_without_consent(tmp_path, arith_jsonl):
    out = tmp_path / "run"
    first = train(config(out, arith_jsonl, max_steps=2), progress=False)
    run_id = outputs.read_marker(out)["id"]
    log, cfg_file = (out / "metrics.jsonl").read_bytes(), (out / "config.json").read_bytes()

    with pytest.raises(FileExistsError, match=r"already holds a run \(2 steps logged\).*overwrite=True"):
        train(config(out, arith_jsonl, max_steps=2, learning_rate=1e-2), progress=False)
    with pytest.raises(runfolder.RunMismatchError, match=r"learning_rate \(run: 0\.0001, now: 0\.01\)"):
        train(config(out, arith_jsonl, max_steps=3, learning_rate=1e-2, resume=True), progress=False)
    with pytest.raises(runfolder.RunMismatchError, match=r"train_dtype \(run: 'fp32', now: 'bf16'\)"):
        train(config(out, arith_jsonl, max_steps=3, train_dtype="bf16", resume=True), progress=False)
    # every refusal left the run exactly as it was
    assert (out / "metrics.jsonl").read_bytes() == log and (out / "config.json").read_bytes() == cfg_file

    replaced = train(config(out, arith_jsonl, max_steps=1, learning_rate=1e-2, overwrite=True), progress=False)
    assert [r["step"] for r in replaced.rows] == [1] and replaced.rows[0]["learning_rate"] == 1e-2
    assert outputs.read_marker(out)["id"] != run_id
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]  # nothing of the first run kept
    assert json.loads((out / "config.json").read_text())["learning_rate"] == 1e-2
    assert first.rows[0]["learning_rate"] == 1e-4


def test_a_run_never_writes_into_a_folder_of_someone_elses_files(tmp_path, arith_jsonl):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    for resume in (False, True):
        with pytest.raises(outputs.OutputFolderError, match=r"thesis\.tex"):
            train(config(mine, arith_jsonl, resume=resume), progress=False)
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]
    with pytest.raises(outputs.OutputFolderError, match="project root"):
        runfolder.plan_run(config(".", arith_jsonl))


def test_only_a_partial_checkpoint_is_reported_by_name(tmp_path, arith_jsonl):
    cfg = config(tmp_path / "run", arith_jsonl, resume=True)
    outputs.write_marker(cfg.out, runfolder.KIND)  # the workbook's own run folder (only its marker says so)
    (cfg.out / "config.json").write_text(json.dumps(cfg.to_dict()))
    (cfg.out / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    (cfg.out / "checkpoint-2").mkdir()
    (cfg.out / "checkpoint-2" / "model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"no complete checkpoint.*\['checkpoint-2'\]"):
        runfolder.plan_run(cfg)


def test_resume_may_change_only_the_declared_safe_fields(tmp_path, arith_jsonl):
    saved = config(tmp_path, arith_jsonl).to_dict()
    assert (
        runfolder.differing_fields(saved, config(tmp_path, arith_jsonl, max_steps=99, checkpoint_every=5, resume=True))
        == []
    )
    diffs = runfolder.differing_fields(saved, config(tmp_path, arith_jsonl, seed=3, algorithm="gspo"))
    assert diffs == ["algorithm (run: 'grpo', now: 'gspo')", "seed (run: 0, now: 3)"]
    del saved["lora_rank"]  # a config written before a field existed holds the field's default
    assert runfolder.differing_fields(saved, config(tmp_path, arith_jsonl)) == []


def test_resume_and_overwrite_together_are_refused():
    with pytest.raises(ValueError, match="contradict"):
        RLConfig(resume=True, overwrite=True)


def test_a_grid_checks_every_run_folder_before_its_first_run(tmp_path, arith_jsonl):
    from nbkit.rl import grid

    (tmp_path / "grpo-bf16").mkdir()
    (tmp_path / "grpo-bf16" / "notes.txt").write_text("mine")
    with pytest.raises(outputs.OutputFolderError, match=r"notes\.txt"):
        grid.train_grid(config(tmp_path, arith_jsonl), ["grpo"], ["fp32", "bf16"], progress=False)
    assert not (tmp_path / "grpo-fp32").exists()  # the first run never started


def test_runs_read_back_without_the_row_a_kill_cut_short(tmp_path):
    from nbkit.records import runlog

    (tmp_path / "grpo-fp16").mkdir()
    (tmp_path / "grpo-fp16" / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')
    assert runlog.load_runs(tmp_path) == {"grpo-fp16": [{"step": 1}, {"step": 2}]}
    (tmp_path / "grpo-fp16" / "metrics.jsonl").write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl: line 2 is not valid JSON"):
        runlog.load_runs(tmp_path)


@pytest.mark.slow
def test_a_checkpoint_too_large_for_the_file_size_limit_is_one_line_and_the_run_resumes(
    tmp_path, arith_jsonl, monkeypatch, capsys
):
    """Issue 55, 4: a file-size limit hit while checkpoint-2 was written gave a 19-frame traceback (safetensors'
    "File too large"), and --resume was then refused: TRL's README.md was not in the marker."""
    import resource

    from nbkit.cli import main as cli_main

    out = tmp_path / "run"
    flags = ["--model", "tiny-arith", "--dataset", arith_jsonl, "--train_dtype", "fp32", "--rollout_engine", "hf"]
    flags += ["--steps", "3", "--prompts_per_step", "2", "--samples_per_prompt", "2", "--max_tokens", "12"]
    flags += ["--checkpoint_every", "1", "--output_dir", str(out), "--quiet"]
    logged, limit = StepLogger.on_log, resource.getrlimit(resource.RLIMIT_FSIZE)

    def limited_after_step_2(self, args, state, control, logs=None, **kw):
        logged(self, args, state, control, logs=logs, **kw)
        if state.global_step == 2:  # checkpoint-2 is written next; the weights are 4 MB
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, limit[1]))

    try:
        with monkeypatch.context() as m:
            m.setattr(StepLogger, "on_log", limited_after_step_2)
            assert cli_main.main(["train", *flags]) == 2
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    said = capsys.readouterr().err
    err = [line for line in said.splitlines() if line.startswith("nbkit")]  # (the rest: progress bars)
    assert len(err) == 1 and "Traceback" not in said, said
    assert "checkpoint-2 could not be written (file too large at" in err[0] and "model.safetensors" in err[0]
    assert "file-size limit 1048576 bytes" in err[0] and "--resume" in err[0]
    assert "it starts from checkpoint-1 and ignores checkpoint-2" in err[0]
    assert [p.name for p in runfolder.checkpoints(out)[0]] == ["checkpoint-1"]  # checkpoint-2 partial: ignored
    assert cli_main.main(["train", *flags, "--resume"]) == 0, capsys.readouterr().err
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def _stopped_run(cfg, rows: str, complete: tuple[int, ...]) -> None:
    """A run folder as a kill leaves it: ``metrics.jsonl`` holding ``rows`` and the ``complete`` checkpoints."""
    outputs.write_marker(cfg.out, runfolder.KIND)
    (cfg.out / "config.json").write_text(json.dumps(cfg.to_dict()))
    (cfg.out / "metrics.jsonl").write_text(rows)
    for step in complete:
        (cfg.out / f"checkpoint-{step}").mkdir()
        (cfg.out / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def test_a_resume_whose_log_ends_short_of_the_checkpoint_runs_the_missing_steps_again(tmp_path, arith_jsonl):
    """Issue 73, 4: the log's last row cut short (step 4) beside a complete checkpoint-4: continuing from it would
    log 1, 2, 3, 5, ... The run continues from checkpoint-2 instead, the log cut back to its whole rows up to 2."""
    cfg = config(tmp_path / "run", arith_jsonl, max_steps=6, resume=True)
    _stopped_run(cfg, '{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4, "rew', complete=(2, 4))
    plan = runfolder.plan_run(cfg)
    assert plan.checkpoint.name == "checkpoint-2"
    assert (
        "metrics.jsonl ends at step 3, short of checkpoint-4: step(s) 3 are run again from checkpoint-2" in plan.message
    )
    assert "the missing 4 logged (checkpoint-4 replaced)" in plan.message
    runfolder.begin(plan, cfg)
    assert (cfg.out / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    assert sorted(p.name for p in cfg.out.glob("checkpoint-*")) == ["checkpoint-2"]


def test_a_resume_whose_log_ends_short_of_every_checkpoint_is_refused_naming_the_steps(tmp_path, arith_jsonl):
    cfg = config(tmp_path / "run", arith_jsonl, max_steps=6, checkpoint_every=4, resume=True)
    _stopped_run(cfg, '{"step": 1}\n{"step": 2}\n{"step": 3', complete=(4,))
    before = (cfg.out / "metrics.jsonl").read_bytes()
    with pytest.raises(FileNotFoundError, match=r"ends at step 2, short of .*\['checkpoint-4'\]: .* step\(s\) 3-4 "):
        runfolder.plan_run(cfg)
    assert (cfg.out / "metrics.jsonl").read_bytes() == before and (cfg.out / "checkpoint-4").is_dir()


@pytest.mark.parametrize("resume", [False, True])
def test_a_run_whose_config_json_is_corrupt_is_refused_alike_with_or_without_resume(tmp_path, arith_jsonl, resume):
    """Issue 73, 6: each refusal pointed at the other (resume: "holds no run to continue"; a plain run: "pass
    resume=True"); both now name the unreadable config.json and what to do."""
    cfg = config(tmp_path / "run", arith_jsonl, resume=resume)
    _stopped_run(cfg, '{"step": 1}\n{"step": 2}\n', complete=(2,))
    (cfg.out / "config.json").write_text('{"model": "tiny-ar')
    with pytest.raises(FileExistsError, match=r"\(2 steps logged\) whose config.json cannot be read") as err:
        runfolder.plan_run(cfg)
    assert "overwrite=True" in str(err.value) and "holds no run to continue" not in str(err.value)
    assert "pass resume=True" not in str(err.value)
