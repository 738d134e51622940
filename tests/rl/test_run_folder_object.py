"""``RunFolder`` is the one object ``train`` asks about its run folder: opening it checks ownership and takes the lock
(or refuses, taking nothing), ``decide`` plans the run, and the folder hands out the checkpoint to resume from,
TRL's checkpoint settings, the metrics logs and the collapse alarm. No model is loaded here."""

import json

import pytest

from nbkit.rl import RLConfig
from nbkit.rl.runfolder import KIND, RunFolder
from nbkit.runtime import locks, outputs


def config(out, data, **kw) -> RLConfig:
    return RLConfig(
        **{**dict(dataset=data, train_dtype="fp32", max_steps=4, checkpoint_every=2, output_dir=str(out)), **kw}
    )


def a_run_with_checkpoint(cfg, step: int) -> None:
    """What a run killed after ``step`` (its checkpoint written) leaves in ``cfg.out``."""
    outputs.write_marker(cfg.out, KIND, id="run-1")
    (cfg.out / "config.json").write_text(json.dumps(cfg.to_dict()))
    (cfg.out / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, step + 2)))
    (cfg.out / f"checkpoint-{step}").mkdir()
    (cfg.out / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")


def test_opening_a_folder_of_the_users_refuses_and_takes_no_lock(tmp_path, arith_jsonl):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("mine")
    with pytest.raises(outputs.OutputFolderError, match=r"thesis\.tex"):
        RunFolder.open(config(mine, arith_jsonl))
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]


def test_an_open_folder_is_held_until_closed_and_a_second_open_is_refused(tmp_path, arith_jsonl):
    cfg = config(tmp_path / "new" / "run", arith_jsonl)
    with RunFolder.open(cfg) as folder:
        assert (cfg.out / locks.LOCK).exists()
        with pytest.raises(locks.FolderLockedError, match="in use by process"):
            RunFolder.open(cfg)
        assert folder.decide().action == "fresh" and folder.checkpoint is None
    assert not (tmp_path / "new").exists()  # nothing was written: the folders the lock made are gone again


def test_a_resume_names_its_checkpoint_and_cuts_a_rank_log_back_to_it(tmp_path, arith_jsonl):
    cfg = config(tmp_path / "run", arith_jsonl)
    a_run_with_checkpoint(cfg, 2)
    (cfg.out / "ranks").mkdir()
    (cfg.out / "ranks" / "rank-1.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    with RunFolder.open(RLConfig(**{**cfg.to_dict(), "resume": True}), rank=1) as folder:
        plan = folder.decide()
        assert (plan.action, folder.checkpoint, folder.run_id) == ("resume", cfg.out / "checkpoint-2", "run-1")
        assert [r["step"] for r in folder.rows()] == [1, 2, 3]  # the run's log: cut back only when training begins
        assert [r["step"] for r in folder.rank_log(world_size=2).rows()] == [1, 2]
        assert folder.rank_log(world_size=1) is None


def test_a_fresh_multi_process_run_starts_each_rank_log_anew(tmp_path, arith_jsonl):
    cfg = config(tmp_path / "run", arith_jsonl)
    (cfg.out / "ranks").mkdir(parents=True)
    (cfg.out / "ranks" / "rank-0.jsonl").write_text('{"step": 7}\n')
    outputs.write_marker(cfg.out, KIND)
    with RunFolder.open(RLConfig(**{**cfg.to_dict(), "overwrite": True})) as folder:
        assert folder.decide().clear
        assert folder.rank_log(world_size=2).rows() == []


def test_checkpoint_settings_and_alarm_follow_the_config(tmp_path, arith_jsonl):
    folder = RunFolder(config(tmp_path / "run", arith_jsonl, save_total_limit=3, collapse_window=7))
    assert folder.checkpoint_args() == dict(
        output_dir=str(tmp_path / "run"), save_strategy="steps", save_steps=2, save_total_limit=3
    )
    assert RunFolder(config(tmp_path, arith_jsonl, checkpoint_every=0)).checkpoint_args()["save_strategy"] == "no"
    assert folder.alarm().window == 7


def test_finish_writes_the_summary_on_rank_zero_only(tmp_path, arith_jsonl):
    cfg = config(tmp_path / "run", arith_jsonl)
    RunFolder(cfg, rank=1).finish({"steps": 4})
    assert not (cfg.out / "summary.json").exists()
    folder = RunFolder(cfg)
    folder.run_id = "run-1"
    folder.finish({"steps": 4})
    assert json.loads((cfg.out / "summary.json").read_text()) == {"run_id": "run-1", "steps": 4}
