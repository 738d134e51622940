"""One entry point for an RL run: ``train(RLConfig(...))``; ``resume`` continues a killed run.

Everything that can be wrong with the request is checked before a model is loaded: the config itself, the
dataset (exists, non-empty after dropping unreadable answers), the model ref, the reward function (called once).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from nbkit import launch, logs, models, tasks, versions
from nbkit.rl import algorithms
from nbkit.rl.config import RLConfig
from nbkit.rl.monitor import CollapseAlarm, MetricsLog


@dataclass
class RunResult:
    """What a finished (or resumed and finished) run leaves behind."""

    out: Path
    """The run folder."""
    rows: list[dict]
    """Every metrics row of the run, in step order."""
    seconds: float
    """Wall time of this invocation."""
    alarms: list
    """(step, message) of every collapse alarm raised in this invocation."""

    @property
    def final_accuracy(self) -> float:
        """Mean training accuracy over the last 5 steps."""
        tail = [r["accuracy"] for r in self.rows if "accuracy" in r][-5:]
        return sum(tail) / len(tail) if tail else float("nan")


def load_task(cfg: RLConfig) -> tuple[tasks.Task, list[dict]]:
    """The task and its usable problems (those with a checkable answer); errors name what is wrong."""
    task = tasks.make_task(tasks.TaskConfig(source=cfg.dataset, template=cfg.template, grader=cfg.grader))
    usable = [p for p in task.problems if task.answer_ok(p["answer"])]
    if not usable:
        raise ValueError(f"dataset {cfg.dataset!r} has no problem with a checkable answer "
                         f"({len(task.problems)} problems, all answers unreadable)")
    return task, usable


def reward_function(task: tasks.Task):
    """TRL reward function (``completions, answer`` → 0/1), checked once on a real problem before training.

    ``correctness.tally`` collects (sum, count) of every call on this process: the per-rank record that the
    gathered reward of a multi-process run is checked against."""
    def correctness(completions, answer, **_):
        values = [task.reward(c if isinstance(c, str) else c[-1]["content"], a) for c, a in zip(completions, answer)]
        correctness.tally.append((float(sum(values)), len(values)))
        return values

    correctness.__name__ = "correctness"
    correctness.tally = []
    return correctness


def world() -> tuple[int, int]:
    """(rank, number of processes) of this process as ``accelerate launch`` / torchrun set them; (0, 1) alone."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def per_device_batch(cfg: RLConfig, world_size: int) -> int:
    """Completions per process and step: the run's batch (prompts × samples) split evenly over the processes,
    so a 2-process run trains the same global batch as a 1-process run."""
    total = cfg.prompts_per_step * cfg.samples_per_prompt
    if total % world_size:
        raise ValueError(f"prompts_per_step × samples_per_prompt = {total} completions cannot be split evenly over "
                         f"{world_size} processes; choose prompts_per_step so that the product is a multiple of "
                         f"{world_size}")
    return total // world_size


def check_reward(fn, problems: list[dict]) -> None:
    """Call the reward once; a reward that raises or returns no number fails here, not mid-run."""
    try:
        value = fn(completions=["", problems[0].get("solution", "") or ""], answer=[problems[0]["answer"]] * 2)
    except Exception as exc:
        raise ValueError(f"the reward function {getattr(fn, '__name__', fn)!r} raised on a sample: {exc!r}") from exc
    if len(value) != 2 or not all(isinstance(v, (int, float)) for v in value):
        raise ValueError(f"the reward function must return one number per completion, got {value!r}")


def grpo_config(cfg: RLConfig):
    """TRL's ``GRPOConfig`` for the run (precision, batch geometry, the algorithm preset, checkpoints)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(cfg.out), max_steps=cfg.steps, learning_rate=cfg.lr, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=cfg.max_grad_norm, seed=cfg.seed,
        per_device_train_batch_size=per_device_batch(cfg, world()[1]), gradient_accumulation_steps=1,
        num_generations=cfg.samples_per_prompt, max_completion_length=cfg.max_tokens,
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, beta=cfg.beta, num_iterations=1,
        bf16=cfg.train_dtype == "bf16", fp16=cfg.train_dtype == "fp16",
        logging_steps=1, report_to="none", disable_tqdm=False, use_cpu=not _has_accelerator(),
        save_strategy="steps" if cfg.checkpoint_every else "no", save_steps=cfg.checkpoint_every or 500,
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization, vllm_max_model_length=None,
        **algorithms.grpo_options(algorithms.get(cfg.algorithm), cfg.is_cap),
    )


def _has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())


def _quiet_console(trainer) -> None:
    """Keep the progress bar, drop the per-step dump of every metric (``metrics.jsonl`` has them)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from transformers.utils.notebook import NotebookProgressCallback

    class QuietProgress(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            pass

    trainer.remove_callback(PrinterCallback)
    shown = [trainer.pop_callback(cb) for cb in (ProgressCallback, NotebookProgressCallback)]
    if any(cb is not None for cb in shown):  # a bar (tqdm, also in notebooks) instead of a table of losses
        trainer.add_callback(QuietProgress)


def last_checkpoint(out: Path) -> Path | None:
    """The newest ``checkpoint-N`` folder of a run, if any (transformers' own lookup)."""
    from transformers.trainer_utils import get_last_checkpoint

    found = get_last_checkpoint(str(out)) if out.is_dir() else None
    return Path(found) if found else None


def train(cfg: RLConfig, progress: bool = True) -> RunResult:
    """Run (or with ``cfg.resume`` continue) one RL fine-tuning run; returns its metrics."""
    rank, world_size = world()
    per_device_batch(cfg, world_size)  # fails before anything loads
    launch.check_launch(cfg.train_dtype)  # an accelerate config for another precision is refused, not overridden
    versions.check()  # names any TRL/transformers/accelerate/vLLM version other than the pinned ones
    import datasets
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with logs.quiet():  # TRL's vLLM backend imports vLLM, whose import prints platform notices: to the log file
        from nbkit.rl.trainer import PrecisionGRPOTrainer, StepLogger

    start = time.time()
    task, problems = load_task(cfg)
    reward = reward_function(task)
    check_reward(reward, problems)
    reward.tally.clear()  # the check's call is not a training step
    path = models.resolve(cfg.model)
    out = cfg.out
    log = MetricsLog(out / "metrics.jsonl")  # written by rank 0 only
    rank_log = MetricsLog(out / "ranks" / f"rank-{rank}.jsonl") if world_size > 1 else None
    resume_from = None
    if cfg.resume:
        resume_from = last_checkpoint(out)
        if resume_from is None:
            raise FileNotFoundError(f"resume=True but {out} holds no checkpoint-N folder")
        for own in ((log,) if rank == 0 else ()) + ((rank_log,) if rank_log else ()):
            own.truncate_after(int(resume_from.name.split("-")[-1]))
    else:  # a fresh run starts fresh logs
        for own in ((log,) if rank == 0 else ()) + ((rank_log,) if rank_log else ()):
            own.path.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))  # a valid `nbkit train --config`

    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")  # FP32 master weights
    data = datasets.Dataset.from_list([{"prompt": task.prompt(p), "answer": p["answer"]} for p in problems])
    peft_config = LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, target_modules="all-linear",
                             task_type="CAUSAL_LM") if cfg.lora else None
    args = grpo_config(cfg)
    args.disable_tqdm = not progress
    with logs.quiet(f"TRL trainer ({cfg.algorithm}, {cfg.train_dtype}, rollouts {cfg.rollout_engine})"):
        trainer = PrecisionGRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data,
                                       processing_class=tokenizer, peft_config=peft_config, run=cfg)
    logger = StepLogger(trainer, log, CollapseAlarm(cfg.collapse_window, cfg.collapse_mismatch_factor,
                                                    cfg.collapse_reward_drop), cfg.max_consecutive_skips,
                        reward_tally=reward.tally, rank_log=rank_log)
    trainer.add_callback(logger)
    _quiet_console(trainer)
    try:
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    finally:
        trainer.close()
    if trainer.accelerator.num_processes > 1:  # rank 0's last row is written before anyone reads the log
        trainer.accelerator.wait_for_everyone()  # (single process: closing a colocated vLLM may end its group)
    result = RunResult(out, log.rows(), time.time() - start, logger.alarms)
    if rank == 0:
        (out / "summary.json").write_text(json.dumps(
            {"final_accuracy": result.final_accuracy, "steps": len(result.rows), "seconds": result.seconds,
             "alarms": result.alarms, "num_processes": world_size}, indent=2))
    return result
