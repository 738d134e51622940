"""The held-out judge: the policy's accuracy on problems it never trains on, sampled in FP32.

A run's training accuracy is measured on the rollouts its own engine drew, in the rollout precision: a format
that samples worse lowers it although the policy is no worse. The judge separates the two. Every
``RLConfig.judge_every`` steps, at step 0 (before any update) and at the last step, an HF engine in FP32 holding a
copy of the current weights samples ``judge_samples`` responses to each problem of a fixed held-out set
(``judge_set``, disjoint from the training set), graded like training; ``judge/accuracy`` goes into the step's
metrics row (step 0 gets a row of its own).

Sampling, not greedy decoding: at the run's temperature (1.0 by default, the policy's own distribution) with no
top-p/top-k, the distribution the training accuracy is measured under too, so judge and training accuracy differ
by the sampling precision and the problems only; a greedy judge would not see a policy whose distribution got
worse while its most likely answer stayed the same. Its sampling noise is small beside the effects studied
(351 problems × 1 sample: standard error ≤ 0.027; × 4: ≤ 0.014) and is shared between runs: the judge's seed
depends on the run's seed and the step only, so two runs of one seed that differ in their rollout format are
judged with the same random numbers. It draws them inside ``torch.random.fork_rng``: the judge never moves
training's random stream, and a run trains the same with or without it.

The engine's matmuls are audited (``amp.PrecisionAudit``): a judge whose matmuls did not all run in FP32 stops the
run (``amp.PrecisionError``).
"""

from __future__ import annotations

import time

import torch
from transformers import TrainerCallback

import nbkit.rl.amp as amp
from nbkit import engines, tasks
from nbkit.records import schema

MIN_PROBLEMS = 256
"""Fewest held-out problems a judge accepts (fewer would make its accuracy too noisy to compare runs)."""


def load_set(cfg, train_problems: list[dict]) -> tuple[tasks.Task, list[dict]]:
    """The judge's task and its gradable problems: ValueError (before any model is loaded) when the set is
    missing, too small, not readable by the run's grader, or shares a problem with the training set."""
    task = tasks.make_task(tasks.TaskConfig(source=cfg.judge_set, template=cfg.template, grader=cfg.grader))
    usable = [p for p in task.problems if task.answer_ok(p["answer"])]
    if len(usable) < MIN_PROBLEMS:
        raise ValueError(
            f"judge_set {cfg.judge_set!r} has {len(usable)} problems with an answer grader "
            f"{cfg.grader!r} can read ({len(task.problems)} in all); the judge needs at least "
            f"{MIN_PROBLEMS}"
        )
    shared = sorted({p["problem"] for p in usable} & {p["problem"] for p in train_problems})
    if shared:
        raise ValueError(
            f"judge_set {cfg.judge_set!r} shares {len(shared)} problems with the training set "
            f"{cfg.dataset!r} (e.g. {shared[:3]}): a held-out judge needs problems never trained on"
        )
    return task, usable


class Judge:
    """Grades the trainer's current policy on the held-out set with an FP32 HF engine (built at first use)."""

    def __init__(self, cfg, task: tasks.Task, problems: list[dict]):
        self.cfg, self.task, self.problems = cfg, task, problems
        self.engine = self.audit = None

    def _engine(self, device):
        if self.engine is None:
            self.engine = engines.HFEngine(
                self.cfg.model,
                "fp32",
                device=device,
                batch_size=self.cfg.hf_engine_batch_size,
                progress=False,
                share_prefix=True,  # every held-out prompt starts with the template: prefilled once
            )
            self.audit = amp.PrecisionAudit(self.engine.model)
        return self.engine

    @torch.no_grad()
    def _sync(self, trainer) -> None:
        """Copy the trainer's current weights (LoRA merged, gathered where sharded: TRL's own iterator, which every
        process must run) into the FP32 engine."""
        target = dict(self.engine.model.named_parameters())
        for name, value in trainer.vllm_generation._iter_named_params():
            target[name].copy_(value.to(device=target[name].device, dtype=target[name].dtype))

    def evaluate(self, trainer, step: int) -> dict:
        """The judge's metrics of the trainer's policy now (every process grades its share of the problems)."""
        from accelerate.utils import gather_object

        start = time.perf_counter()
        acc = trainer.accelerator
        device = acc.device
        mine = self.problems[acc.process_index :: acc.num_processes]
        sampling = engines.SamplingConfig(
            temperature=self.cfg.temperature,
            max_tokens=self.cfg.max_completion_length,
            n=self.cfg.judge_samples,
            seed=(self.cfg.seed * 1_000_003 + step * 7_919 + acc.process_index) % 2**31,
        )
        devices = [device.index or 0] if device.type == "cuda" else []
        # (building the engine may draw random numbers too: everything inside the forked stream)
        with torch.random.fork_rng(devices=devices), torch.autocast(device.type, enabled=False):
            engine = self._engine(device)
            self._sync(trainer)
            self.audit.take()
            rollouts = engine.generate([self.task.prompt(p) for p in mine], sampling) if mine else []
            ran = dict(self.audit.take())
        correct = sum(self.task.reward(r.text, mine[r.prompt_index]["answer"]) >= 1 for r in rollouts)
        tallies = gather_object([(float(correct), len(rollouts), ran)])
        if any(set(t[2]) - {"fp32"} for t in tallies) or not any(t[2] for t in tallies):
            raise amp.PrecisionError(
                f"step {step}: the held-out judge must sample in FP32, but its matmuls ran in {[t[2] for t in tallies]}"
            )
        total = sum(t[1] for t in tallies)
        dtypes: dict = {}
        for t in tallies:
            for k, v in t[2].items():
                dtypes[k] = dtypes.get(k, 0) + v
        return {
            schema.JUDGE_ACCURACY: sum(t[0] for t in tallies) / total,
            schema.JUDGE_RESPONSES: total,
            schema.JUDGE_MATMUL_DTYPES: dtypes,
            schema.TIME_JUDGE: time.perf_counter() - start,
        }

    def close(self) -> None:
        if self.audit is not None:
            self.audit.remove()
        self.engine = self.audit = None


class JudgeCallback(TrainerCallback):
    """Runs the ``Judge`` at step 0 (a fresh run: its own metrics row), every ``every`` steps and at the last step
    (into that step's row, which ``StepLogger`` writes: add this callback after it)."""

    def __init__(self, judge: Judge, trainer, logger, every: int, fresh: bool):
        self.judge, self.trainer, self.logger, self.every, self.fresh = judge, trainer, logger, every, fresh

    def on_train_begin(self, args, state, control, **kw):
        if self.fresh:  # (a resumed run has its step-0 row; transformers loads the checkpoint's step only later)
            row = {schema.STEP: 0, **self.judge.evaluate(self.trainer, 0)}
            if state.is_world_process_zero:
                self.logger.log.append(row)

    def on_step_end(self, args, state, control, **kw):
        step = state.global_step
        if step % self.every == 0 or step >= state.max_steps:
            self.logger.pending.update(self.judge.evaluate(self.trainer, step))

    def on_train_end(self, args, state, control, **kw):
        self.judge.close()
