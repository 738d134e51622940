"""The identity of an RL run folder: which run it holds, whether a request may start, continue or replace it.

A run folder holds ``config.json`` (the run's config), ``metrics.jsonl``, ``checkpoint-N`` folders, ``summary.json``
once finished, and the marker of ``nbkit.runtime.outputs`` with the run's id. The rules:

- a fresh run (``resume=False``) goes into a new or empty folder; into a folder that holds a run only with
  ``overwrite=True`` (which removes that run's files first, keeping nothing), and only when the folder holds nothing
  else (a file the marker does not list, e.g. a user's README.md, is refused before any work); any other folder is
  refused;
- ``resume=True`` continues the run in the folder only if the config is the run's own, except the fields of
  ``SAFE_TO_CHANGE`` (e.g. ``max_steps``, to extend it); otherwise it names every differing field;
- resuming a finished run with no more steps does nothing and says so;
- a checkpoint is complete when its ``trainer_state.json`` (the last file transformers writes) reads as JSON;
  a partial one (a kill during the write) is named, ignored and removed when the run continues;
- a resume never leaves a step without its metrics row: when ``metrics.jsonl`` ends short of the newest complete
  checkpoint (its last row cut short), the run continues from the newest checkpoint at or before its last whole row
  and runs the missing steps again (the checkpoints past it are replaced); with no such checkpoint it is refused,
  naming the steps;
- TRL's model card (README.md, written with every checkpoint) never replaces a user's file, even one written
  mid-run: it goes to ``CARD_ASIDE`` when README.md is the user's, and the marker lists only the name it was written
  to, when it was written (``place_model_card``); a checkpoint that does not fit (a file-size limit, a full disk)
  stops the run with one line naming the file and how to continue (``guard_checkpoints``);
- ``plan_run`` only reads: every refusal happens before a model is loaded. ``begin`` makes the changes
  (clear, marker, ``config.json``, metrics truncated to the checkpoint) once training is about to start.

``RunFolder`` is the one object ``train`` asks about its folder: ``RunFolder.open(cfg)`` checks the folder is the
workbook's and takes its lock, ``decide`` plans the run (fresh / resume / finished, or a refusal), and the folder
then hands out the metrics log, the checkpoint to resume from, TRL's checkpoint settings, the callback that begins
the folder and saves the workbook's state with each checkpoint, and writes ``summary.json`` at the end. The
functions below are its parts (the grid and the CLI read the folder without training: ``plan_run``,
``checkpoints``, ``last_logged_step``).

The state saved with each checkpoint (``STATE_FILE``, written right after it) is what transformers does not save
itself: the rollout seed counter and the skipped-step counts, so that a resumed run continues exactly as the
uninterrupted one. A checkpoint without it (written before it existed, or a kill in between) gets the same
values from its step and the metric rows up to it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainerCallback

from nbkit.records.runlog import (  # noqa: F401 - re-exported: a run folder's identity, read back torch-free in runlog
    KIND,
    SAFE_TO_CHANGE,
    MetricsLog,
    differing_fields,
    last_logged_step,
    last_step,
)
from nbkit.rl.monitor import CollapseAlarm
from nbkit.runtime import outputs
from nbkit.runtime.locks import LOCK, FolderLock

STATE_FILE = "nbkit_state.json"
"""Written into ``checkpoint-N`` after transformers' files: the workbook's own state of the run at that step."""

BOOKKEEPING = ("resume", "overwrite")
"""How a run was invoked, not what it is: saved as False in ``config.json`` and never read from a config file, so
replaying a run's config (``nbkit train --config run/config.json``) never replaces or continues a run by itself."""

RUN_FILES = ("metrics.jsonl", "config.json", "summary.json", "ranks")
"""The files of a run that ``overwrite=True`` removes (with every ``checkpoint-N`` folder and the files the marker
lists; ``ranks/`` holds each process's own log in a multi-process run)."""

WRITTEN_BY_TRL = ("README.md",)
"""Files TRL writes into the run folder itself (its model card, with every checkpoint): the workbook's only once
its marker lists them (``place_model_card`` records the name it wrote, when it wrote it); a user's file of that
name is never replaced."""

CARD_ASIDE = "trl-model-card.md"
"""Where TRL's model card goes when the run folder's README.md is not the workbook's (a user's file, written before
or during the run)."""

CARD_SCRATCH = ".nbkit-model-card"
"""The folder in the run folder where TRL writes its card before ``place_model_card`` names it (removed at once)."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written for want of room (a file-size limit, a full disk): the run stopped there,
    its complete checkpoints kept."""


ROOM = {errno.EFBIG: "file too large", errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
"""Write errors that mean a checkpoint does not fit (what ``guard_checkpoints`` reports in one line)."""

_ROOM_TEXT = ("file too large", "filetoolarge", "no space left", "storagefull", "quota", "file write failed")
"""How libraries that do not raise ``OSError`` say it (safetensors' Rust IoError, torch's stream writer)."""

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class RunMismatchError(ValueError):
    """``resume=True`` asked to continue a run with a different config."""


@dataclass
class RunPlan:
    """What ``train`` will do with the run folder (decided by ``plan_run`` before anything is loaded)."""

    out: Path
    """The run folder."""
    action: str
    """``fresh`` (a new run), ``resume`` (continue from ``checkpoint``) or ``finished`` (nothing to do)."""
    run_id: str = ""
    """The run's id (kept by a resume, new for a fresh run)."""
    checkpoint: Path | None = None
    """The complete checkpoint a resume starts from."""
    state: dict = field(default_factory=dict)
    """The workbook's state saved with ``checkpoint`` (``STATE_FILE``)."""
    partial: list[Path] = field(default_factory=list)
    """Checkpoint folders cut short by a kill, and complete ones past the last whole row of ``metrics.jsonl`` (the
    steps between are run again, so the log has no gap): ignored (removed by ``begin``)."""
    clear: bool = False
    """``overwrite=True`` on a folder holding a run: its files are removed by ``begin``."""
    message: str = ""
    """What happens, in one line for the log."""


def checkpoints(out: Path) -> tuple[list[Path], list[Path]]:
    """(complete, partial) ``checkpoint-N`` folders of ``out``, by step."""
    if not out.is_dir():
        return [], []
    found = sorted((p for p in out.iterdir() if p.is_dir() and _CHECKPOINT.match(p.name)), key=_step)
    complete = [p for p in found if _read_json(p / "trainer_state.json") is not None]
    return complete, [p for p in found if p not in complete]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def foreign_entries(out: Path) -> list[str]:
    """The top-level names in run folder ``out`` that are not the run's: neither ``RUN_FILES``, a ``checkpoint-N``
    folder, the lock files, the model card's scratch folder (``CARD_SCRATCH``), nor listed by its marker
    (``outputs.foreign_entries``)."""
    legacy = "files" not in (outputs.read_marker(out) or {})
    return [
        n
        for n in outputs.foreign_entries(out, RUN_FILES)
        if n not in RUN_FILES
        and not _CHECKPOINT.match(n)
        and n != CARD_SCRATCH
        and not (legacy and n in WRITTEN_BY_TRL and _trl_card(out / n))
    ]


def _trl_card(path: Path) -> bool:
    """Whether ``path`` is TRL's model card (a run marked before markers listed files: its README.md was TRL's)."""
    try:
        head = path.read_text(errors="replace")[:4000]
    except OSError:
        return False
    return head.startswith("---") and "trl" in head.lower() and "library_name" in head


def place_model_card(out: Path, write) -> str | None:
    """Have ``write(folder)`` (TRL's ``create_model_card`` pointed at ``folder``) write the model card into
    ``CARD_SCRATCH``, then put it at README.md when that name is free or holds the workbook's card (listed by the
    marker and still TRL's), else at ``CARD_ASIDE`` by the same rule: a user's file is never replaced, even one
    written a moment ago (a new name is created exclusively, which fails when the name exists). The name used is
    recorded in the marker when written; returns it, or None (no card written: both names are the user's)."""
    scratch = Path(out) / CARD_SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        write(scratch)
        made = scratch / WRITTEN_BY_TRL[0]
        if not made.is_file():
            return None
        owned = set((outputs.read_marker(out) or {}).get("files") or [])
        for name in (*WRITTEN_BY_TRL, CARD_ASIDE):
            dest = Path(out) / name
            if name in owned and dest.is_file() and not dest.is_symlink() and _trl_card(dest):
                os.replace(made, dest)
                return name
            if dest.exists() or dest.is_symlink():
                continue
            try:
                with dest.open("xb") as f:  # O_EXCL: fails when the name was taken a moment ago
                    f.write(made.read_bytes())
            except FileExistsError:  # the user's, since a moment ago
                continue
            outputs.record_files(Path(out), [name])
            return name
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def guard_model_card(trainer, out: Path) -> None:
    """Route ``trainer``'s model card (TRL writes ``output_dir/README.md`` with every checkpoint) through
    ``place_model_card``."""
    create = trainer.create_model_card
    said = []

    def create_model_card(*args, **kwargs):
        if not trainer.is_world_process_zero():
            return  # (TRL's writes nothing there either; only rank 0 touches the scratch folder)

        def write(folder: Path) -> None:
            saved = trainer.args.output_dir
            trainer.args.output_dir = str(folder)
            try:
                create(*args, **kwargs)
            finally:
                trainer.args.output_dir = saved

        if place_model_card(out, write) is None and not said:
            names = " and ".join((*WRITTEN_BY_TRL, CARD_ASIDE))
            print(f"[nbkit] {out}: {names} are files of yours: TRL's model card is not written", flush=True)
            said.append(True)

    trainer.create_model_card = create_model_card


def no_room(exc: BaseException) -> str:
    """What ``exc`` says about room to write (``ROOM``'s text), or "" when it is another error."""
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, OSError) and e.errno in ROOM:
            return ROOM[e.errno]
    text = str(exc).lower().replace(" ", "")
    return next((t for t in _ROOM_TEXT if t.replace(" ", "") in text), "")


def guard_checkpoints(trainer, out: Path) -> None:
    """A checkpoint that does not fit (a file-size limit, a full disk) stops the run with ``CheckpointWriteError``:
    one line naming the file being written, the limit and how to continue (the partial checkpoint is ignored by a
    resume), not the writer's traceback."""
    save = trainer._save_checkpoint

    def _save_checkpoint(*args, **kwargs):
        try:
            return save(*args, **kwargs)
        except Exception as exc:
            why = no_room(exc)
            if not why:
                raise
            ckpt = Path(out) / f"checkpoint-{trainer.state.global_step}"
            at = _written(exc, ckpt)
            complete = checkpoints(Path(out))[0]
            then = (
                f"continue the run with resume=True (nbkit train ... --resume): it starts from {complete[-1].name} "
                f"and ignores {ckpt.name}"
                if complete
                else "start the run again with overwrite=True (--overwrite): it has no complete checkpoint to resume"
            )
            raise CheckpointWriteError(
                f"run folder {str(out)!r}: {ckpt.name} could not be written ({why} at {str(at)!r}; "
                f"{_fsize_limit()}): raise the limit or free space, then {then}"
            ) from None

    trainer._save_checkpoint = _save_checkpoint


def _written(exc: BaseException, ckpt: Path) -> Path:
    """The file a checkpoint write failed on: the error's own file name, the weights for safetensors' error (which
    names none), else the checkpoint folder."""
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, OSError) and e.filename:
            return Path(e.filename)
    return ckpt / "model.safetensors" if "safetensor" in type(exc).__name__.lower() else ckpt


def _fsize_limit() -> str:
    """This process's file-size limit (``ulimit -f``), in words."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return "no file-size limit set" if soft == resource.RLIM_INFINITY else f"file-size limit {soft} bytes"


def plan_run(cfg) -> RunPlan:
    """Decide what ``train(cfg)`` does with ``cfg.out``; raises (changing nothing) when it must not run."""
    out = cfg.out
    status = outputs.check_folder(out, KIND, "run folder")
    has_run = status == "own" and (any((out / n).exists() for n in RUN_FILES) or any(checkpoints(out)))
    mark = outputs.read_marker(out) or {}
    extra = foreign_entries(out) if status == "own" else []
    if cfg.overwrite and has_run and not cfg.resume and extra:
        raise outputs.OutputFolderError(
            f"run folder {str(out)!r} holds a run and also {', '.join(extra[:5])}{', ...' if len(extra) > 5 else ''}, "
            f"which the workbook did not write (its {outputs.MARKER} does not list them): replacing the run would "
            f"leave them among a new run's files, or write over them; move them out of it, or choose another "
            f"output_dir"
        )
    unreadable = has_run and (out / "config.json").exists() and not isinstance(_read_json(out / "config.json"), dict)
    if unreadable and not cfg.overwrite:  # neither a resume (its config is lost) nor a fresh run may use it
        raise FileExistsError(
            f"run folder {str(out)!r} holds a run ({last_logged_step(out)} steps logged) whose config.json cannot "
            f"be read (not JSON: cut short or edited), so it cannot be continued or compared: restore its "
            f"config.json, pass overwrite=True (resume=False) to replace the run (keeps nothing), or choose another "
            f"output_dir"
        )
    if not cfg.resume:
        if has_run and not cfg.overwrite:
            raise FileExistsError(
                f"run folder {str(out)!r} already holds a run ({last_logged_step(out)} steps logged): pass "
                f"resume=True to continue it, overwrite=True to replace it (keeps nothing), or choose another "
                f"output_dir"
            )
        return RunPlan(
            out,
            "fresh",
            clear=has_run,
            message=f"new run in {out}" + (" (replacing the run that was there)" if has_run else ""),
        )
    saved = _read_json(out / "config.json") if has_run else None
    if saved is None:
        raise FileNotFoundError(
            f"resume=True but {out} holds no run to continue (no config.json and no "
            f"checkpoint-N folder); start it with resume=False"
        )
    diffs = differing_fields(saved, cfg)
    if diffs:
        raise RunMismatchError(
            f"resume=True continues the run in {str(out)!r} only with its own config, but these fields differ: "
            f"{'; '.join(diffs)}. Only {', '.join(SAFE_TO_CHANGE)} may change; start a new run in another "
            f"output_dir, or pass overwrite=True (and resume=False) to replace this one"
        )
    run_id = mark.get("id", "")
    done = last_logged_step(out)
    summary = _read_json(out / "summary.json")
    if summary is not None and done >= cfg.max_steps:
        return RunPlan(
            out,
            "finished",
            run_id,
            message=f"run {run_id or out.name} already finished at step "
            f"{done} (max_steps={cfg.max_steps}): nothing to do; raise max_steps to extend it",
        )
    complete, partial = checkpoints(out)
    named = f"; ignored partial checkpoint(s) {[p.name for p in partial]} (cut short by a kill)" if partial else ""
    if not complete:
        raise FileNotFoundError(
            f"resume=True but {out} holds no complete checkpoint-N folder{named} "
            f"(checkpoint_every was {saved.get('checkpoint_every', 0)})"
        )
    usable = [c for c in complete if _step(c) <= done]  # a log cut short of a checkpoint: re-run the missing steps
    if not usable:
        raise FileNotFoundError(
            f"resume=True but {out}'s metrics.jsonl ends at step {done}, short of its only complete checkpoint(s) "
            f"{[c.name for c in complete]}: continuing would leave step(s) {_span(done + 1, _step(complete[0]))} "
            f"without a metrics row, and no earlier checkpoint is there to re-run them from; start the run again "
            f"with overwrite=True (resume=False), or choose another output_dir"
        )
    ckpt, ahead = usable[-1], complete[len(usable) :]
    rerun = (
        f"; metrics.jsonl ends at step {done}, short of {ahead[-1].name}: step(s) {_span(_step(ckpt) + 1, done)} are "
        f"run again from {ckpt.name} and the missing {_span(done + 1, _step(ahead[-1]))} logged "
        f"({', '.join(c.name for c in ahead)} replaced)"
        if ahead
        else ""
    )
    return RunPlan(
        out,
        "resume",
        run_id,
        ckpt,
        _read_json(ckpt / STATE_FILE) or {},
        [*partial, *ahead],
        message=f"resuming run {run_id or out.name} from {ckpt.name} ({done} steps logged){named}{rerun}",
    )


def _step(checkpoint: Path) -> int:
    """The step of a ``checkpoint-N`` folder."""
    return int(_CHECKPOINT.match(checkpoint.name).group(1))


def _span(first: int, last: int) -> str:
    """``5``, ``5-6`` or ``none`` (``first`` > ``last``)."""
    return "none" if first > last else str(first) if first == last else f"{first}-{last}"


def hold(out: Path, rank: int = 0) -> FolderLock:
    """This process's lock on run folder ``out`` for the life of the run (``nbkit.runtime.locks``): a second process on
    the
    folder, fresh or resume, is refused naming the holder. Each rank of a multi-process run holds its own lock file,
    so a second launch is refused rank by rank. Call after ``outputs.check_folder`` passed: the lock file is
    written into the folder."""
    return FolderLock(out, "run folder", LOCK if rank == 0 else f"{LOCK}-rank-{rank}").acquire()


def begin(plan: RunPlan, cfg) -> str:
    """Make the folder ready for training (called when training starts); returns the run id."""
    out = plan.out
    mark = outputs.read_marker(out) or {}
    written = [n for n in mark.get("files") or [] if n != outputs.MARKER]
    if "files" not in mark:  # marked before markers listed files: TRL's model card was the run's
        written = [n for n in WRITTEN_BY_TRL if _trl_card(out / n)]
    if plan.clear:
        for name in (*RUN_FILES, *written):  # the run's files and what its marker lists: nothing else
            shutil.rmtree(out / name) if (out / name).is_dir() else (out / name).unlink(missing_ok=True)
        for ckpt in sum(checkpoints(out), []):
            shutil.rmtree(ckpt)
        written = []
    for ckpt in plan.partial:
        shutil.rmtree(ckpt, ignore_errors=True)
    mark = outputs.write_marker(out, KIND, id=plan.run_id or None, files=written)
    outputs.write_json(out / "config.json", {**cfg.to_dict(), **{k: False for k in BOOKKEEPING}})
    log = MetricsLog(out / "metrics.jsonl")
    if plan.action == "resume":
        log.truncate_after(_step(plan.checkpoint))
        (out / "summary.json").unlink(missing_ok=True)  # finished again only when this invocation finishes
    return mark["id"]


class RunFolderCallback(TrainerCallback):
    """Starts the run folder when training starts, restores and saves the workbook's state with checkpoints,
    and saves a final checkpoint so that a finished run can be extended exactly."""

    def __init__(self, plan: RunPlan, cfg, trainer, logger, folder: RunFolder | None = None):
        self.plan, self.cfg, self.trainer, self.logger = plan, cfg, trainer, logger
        self.folder = folder
        self.run_id = plan.run_id

    def on_train_begin(self, args, state, control, **kw):
        if state.is_world_process_zero:  # one process prepares the folder; the others wait for it
            self.run_id = begin(self.plan, self.cfg)
            if self.folder is not None:
                self.folder.run_id = self.run_id
        guard_model_card(self.trainer, self.plan.out)  # TRL's card never lands on a user's file
        guard_checkpoints(self.trainer, self.plan.out)
        if self.trainer.accelerator.num_processes > 1:
            self.trainer.accelerator.wait_for_everyone()
        if self.plan.action == "resume":
            rows = self.logger.log.rows()  # up to the checkpoint's step
            in_row = 0
            for row in rows:
                in_row = in_row + 1 if row.get("skipped_step") else 0
                self.logger.alarm.update(row)  # the alarm sees the run's history again (its messages were logged)
            saved = self.plan.state
            self.trainer.vllm_generation._calls = int(saved.get("rollout_calls", state.global_step))  # 1 per step
            self.logger.skipped_total = int(
                saved.get("skipped_steps_total", rows[-1].get("skipped_steps_total", 0) if rows else 0)
            )
            self.logger.skips_in_row = int(saved.get("skips_in_row", in_row))

    def on_step_end(self, args, state, control, **kw):
        if self.cfg.checkpoint_every and state.global_step >= state.max_steps:
            control.should_save = True  # the last step too: a finished run stays extendable

    def on_save(self, args, state, control, **kw):
        if not state.is_world_process_zero:
            return
        ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        outputs.write_json(
            ckpt / STATE_FILE,
            {
                "run_id": self.run_id,
                "step": state.global_step,
                "rollout_calls": self.trainer.vllm_generation._calls,
                "skipped_steps_total": self.logger.skipped_total,
                "skips_in_row": self.logger.skips_in_row,
            },
        )


class RunFolder:
    """One RL run folder as ``train`` uses it: ownership (``outputs``), the lock (``nbkit.runtime.locks``), the plan
    (``plan_run``), the checkpoints and the metrics log, asked of one object instead of five modules in turn.

    ``RunFolder.open(cfg, rank)`` refuses a folder that is not the workbook's (``outputs.check_folder``) and takes
    this process's lock (``hold``); ``close`` (or leaving a ``with`` block) releases it. Nothing else is written
    before ``decide`` has passed and training begins (``callback``)."""

    def __init__(self, cfg, rank: int = 0, lock: FolderLock | None = None):
        self.cfg = cfg
        """The run's config (the one ``decide`` planned, once it has: device sizing may change it)."""
        self.out: Path = cfg.out
        """The folder."""
        self.rank = rank
        """This process's rank (rank 0 writes the folder's files)."""
        self.lock = lock
        """This process's lock on the folder (None once released, or for a folder only read)."""
        self.plan: RunPlan | None = None
        """What the run does with the folder (``decide``)."""
        self.run_id = ""
        """The run's id: the plan's, then the marker's once training has begun (``callback``)."""

    @classmethod
    def open(cls, cfg, rank: int = 0) -> RunFolder:
        """The run folder of ``cfg``, checked to be the workbook's (or new, or empty) and locked by this process."""
        outputs.check_folder(cfg.out, KIND, "run folder")
        return cls(cfg, rank, hold(cfg.out, rank))

    def close(self) -> None:
        """Release this process's lock (removing what taking it created, when nothing else was written)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def decide(self, cfg=None) -> RunPlan:
        """Plan the run of ``cfg`` (default: the one opened) in this folder (``plan_run``: reads only, refusals
        here); the plan is kept as ``plan``."""
        self.cfg = cfg if cfg is not None else self.cfg
        self.plan = plan_run(self.cfg)
        self.run_id = self.plan.run_id
        return self.plan

    @property
    def log(self) -> MetricsLog:
        """The run's ``metrics.jsonl`` (written by rank 0; ``begin`` truncates it to the checkpoint on a resume)."""
        return MetricsLog(self.out / "metrics.jsonl")

    def rows(self) -> list[dict]:
        """Every metrics row logged in the folder."""
        return self.log.rows()

    @property
    def checkpoint(self) -> Path | None:
        """The complete checkpoint a resume starts from (None for a fresh run)."""
        return self.plan.checkpoint if self.plan else None

    def rank_log(self, world_size: int) -> MetricsLog | None:
        """This process's own log in a multi-process run (``ranks/rank-N.jsonl``), kept in step with the run's:
        cut back to the checkpoint on a resume, started anew otherwise; None for a single process."""
        if world_size <= 1:
            return None
        log = MetricsLog(self.out / "ranks" / f"rank-{self.rank}.jsonl")
        if self.checkpoint:
            log.truncate_after(int(self.checkpoint.name.split("-")[-1]))
        else:
            log.path.unlink(missing_ok=True)
        return log

    def checkpoint_args(self) -> dict:
        """TRL's checkpoint settings for this folder: where, how often (none without ``checkpoint_every``), how many
        kept."""
        cfg = self.cfg
        return dict(
            output_dir=str(cfg.out),
            save_strategy="steps" if cfg.checkpoint_every else "no",
            save_steps=cfg.checkpoint_every or 500,
            save_total_limit=cfg.save_total_limit,
        )

    def alarm(self) -> CollapseAlarm:
        """The run's collapse alarm (``nbkit.rl.monitor``), as the config sets it; a resume replays the folder's
        rows into it (``RunFolderCallback``)."""
        cfg = self.cfg
        return CollapseAlarm(cfg.collapse_window, cfg.collapse_mismatch_factor, cfg.collapse_reward_drop)

    def callback(self, trainer, logger) -> RunFolderCallback:
        """The callback that begins the folder when training starts and saves the workbook's state with each
        checkpoint; the run id it settles on is this folder's ``run_id``."""
        return RunFolderCallback(self.plan, self.cfg, trainer, logger, folder=self)

    def finish(self, summary: dict) -> None:
        """Write ``summary.json`` (rank 0 only): the run is finished (a resume removes it until it finishes again)."""
        if self.rank == 0:
            outputs.write_json(self.out / "summary.json", {"run_id": self.run_id, **summary})
