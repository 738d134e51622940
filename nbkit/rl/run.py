"""One entry point for an RL run: ``train(RLConfig(...))``; ``resume`` continues a killed run.

Everything that can be wrong with the request is checked before a model is loaded: the config itself, the run
folder (``runfolder.RunFolder``: a fresh run never mixes with an earlier one, a resume only continues the same
run), the dataset (exists, enough problems with answers the grader can read), the model ref, the prompts (each
one tokenizes to something, nothing the tokenizer cannot represent, fits the model's context with
``max_completion_length``), the reward function (called once).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import nbkit.rl.algorithms as algorithms
import nbkit.rl.judge as judge
import nbkit.rl.launch as launch
import nbkit.rl.lora as lora
import nbkit.rl.sizing as sizing
from nbkit import results, tasks
from nbkit.engines import encode_prompt
from nbkit.models import models
from nbkit.precision import lm_head
from nbkit.rl.config import RLConfig, trl_fields
from nbkit.rl.inputs import (  # noqa: F401 - re-exported: a run's input rules, as before
    FIT_ROWS,
    check_grader_fits,
    check_prompts,
    load_task,
    micro_batch,
    needed_context,
    per_device_batch,
)
from nbkit.rl.runfolder import RunFolder
from nbkit.rl.trackers import check_report_to
from nbkit.runtime import gcfreeze, logs


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
    def steps(self) -> int:
        """Optimiser steps logged (a judged run's step-0 row, the judge before any update, is not a step)."""
        return sum(r.get("step", 0) >= 1 for r in self.rows)

    @property
    def final_accuracy(self) -> float:
        """Mean training accuracy over the last 5 steps."""
        tail = [r["accuracy"] for r in self.rows if "accuracy" in r][-5:]
        return sum(tail) / len(tail) if tail else float("nan")


def trl_prompt(tokenizer, prompt: str) -> str:
    """The prompt text to hand TRL so that it tokenizes to the template's own ids, special tokens once.

    TRL tokenizes text prompts with the tokenizer's special tokens (``tokenizer(text)``); a tokenizer that adds a
    BOS itself (``add_bos_token``, e.g. R1-Distill's) would put a second one before a template that already holds
    the BOS text. Such a leading BOS text is dropped here; any other difference is refused."""
    own = encode_prompt(tokenizer, prompt)
    text = prompt
    bos = getattr(tokenizer, "bos_token", None)
    if bos and prompt.startswith(bos) and tokenizer(prompt)["input_ids"] != own:
        text = prompt[len(bos) :]
    if tokenizer(text)["input_ids"] != own:
        raise ValueError(
            f"the tokenizer adds special tokens to prompt {prompt[:60]!r} that its template does not "
            f"hold ({tokenizer(text)['input_ids'][:8]}... vs {own[:8]}...): TRL would train on other "
            f"ids than the engines sample from; put them in the template (nbkit.tasks.TEMPLATES)"
        )
    return text


def reward_function(task: tasks.Task, kind: str = "correctness", max_tokens: int = 1):
    """TRL reward function, checked once on a real problem before training: ``correctness`` (``completions,
    answer`` → 0/1 by the task's grader) or ``brevity`` (``completion_ids`` → −tokens / ``max_tokens``).

    ``fn.tally`` collects (sum, count) of every call on this process: the per-rank record that the gathered
    reward of a multi-process run is checked against."""

    def correctness(completions, answer, **_):
        values = [task.reward(c if isinstance(c, str) else c[-1]["content"], a) for c, a in zip(completions, answer)]
        correctness.tally.append((float(sum(values)), len(values)))
        return values

    def brevity(completion_ids, **_):
        values = [-len(ids) / max_tokens for ids in completion_ids]
        brevity.tally.append((float(sum(values)), len(values)))
        return values

    if kind not in ("correctness", "brevity"):
        raise ValueError(f"unknown reward {kind!r}; choose one of ('correctness', 'brevity')")
    fn = correctness if kind == "correctness" else brevity
    fn.tally = []
    return fn


def world() -> tuple[int, int]:
    """(rank, number of processes) of this process as ``accelerate launch`` / torchrun set them; (0, 1) alone."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def check_reward(fn, problems: list[dict]) -> None:
    """Call the reward once; a reward that raises or returns no number fails here, not mid-run."""
    try:
        value = fn(
            completions=["", problems[0].get("solution", "") or ""],
            answer=[problems[0]["answer"]] * 2,
            completion_ids=[[], [0, 0, 0]],
        )
    except Exception as exc:
        raise ValueError(f"the reward function {getattr(fn, '__name__', fn)!r} raised on a sample: {exc!r}") from exc
    if len(value) != 2 or not all(isinstance(v, (int, float)) for v in value):
        raise ValueError(f"the reward function must return one number per completion, got {value!r}")


TRL_DEFAULTS = {"lr_scheduler_type": "constant", "warmup_steps": 0, "weight_decay": 0.0}
"""The workbook's choice for TRL settings it has no field for, where TRL's default differs: a constant learning
rate, no warm-up, no weight decay (the paper's optimiser). ``RLConfig.trl`` may set them otherwise."""


def workbook_args(cfg: RLConfig, max_model_length: int | None = None) -> dict:
    """The ``GRPOConfig`` settings the workbook makes from its own fields: each field declared TRL's
    (``metadata["trl"]``, ``config.trl_fields``) as it is; precision (``bf16``/``fp16`` from ``train_dtype``, the CPU
    when there is no accelerator: GRPOConfig's own ``bf16=True`` default is never left standing), batch geometry,
    the algorithm preset, π's FP32 head, the run folder's checkpoints, one logged row per step;
    ``max_model_length``: the vLLM context the run needs (``check_prompts``: longest prompt + ``max_completion_length``)."""
    return {
        **{name: getattr(cfg, name) for name in trl_fields()},
        **RunFolder(cfg).checkpoint_args(),
        "per_device_train_batch_size": micro_batch(cfg, world()[1]),
        "num_iterations": 1,
        "bf16": cfg.train_dtype == "bf16",
        "fp16": cfg.train_dtype == "fp16",
        "use_cpu": not _has_accelerator(),
        "logging_steps": 1,
        "disable_tqdm": False,
        "vllm_max_model_length": max_model_length,
        "cast_lm_head_to_fp32": lm_head.sides(cfg.fp32_lm_head)[0],  # π's FP32 head: TRL's own switch (its fused head)
        **algorithms.grpo_options(cfg.algo, cfg.is_cap, (cfg.icepop_low, cfg.icepop_high)),
        **ppo_options(cfg),
    }


def check_trl(cfg: RLConfig) -> None:
    """``cfg.trl`` sets no ``GRPOConfig`` field the workbook sets itself (``workbook_args``); ValueError naming the
    key and those fields. (``RLConfig`` checked the names already: ``GRPOConfig`` fields, none its own.)"""
    own = workbook_args(cfg)
    taken = sorted(set(cfg.trl) & set(own))
    if taken:
        raise ValueError(
            f"trl: {taken[0]!r} is set by the workbook from RLConfig's own fields; the GRPOConfig fields it "
            f"sets: {sorted(own)}"
        )


def grpo_config(cfg: RLConfig, max_model_length: int | None = None):
    """TRL's ``GRPOConfig`` for the run: ``TRL_DEFAULTS``, then ``cfg.trl`` (any other TRL setting, unchanged), then
    what the workbook sets from its own fields (``workbook_args``; a ``trl`` key among them is refused)."""
    from trl import GRPOConfig

    check_trl(cfg)
    return GRPOConfig(**{**TRL_DEFAULTS, **cfg.trl, **workbook_args(cfg, max_model_length)})


def ppo_options(cfg: RLConfig) -> dict:
    """PPO presets: ``ppo_epochs`` passes (``num_iterations``) of ``ppo_minibatches`` minibatches
    (``steps_per_generation``) over each rollout batch, so the per-step batch is a minibatch; {} otherwise."""
    if not algorithms.get(cfg.algorithm).critic:
        return {}
    return {
        "num_iterations": cfg.ppo_epochs,
        "steps_per_generation": cfg.ppo_minibatches * cfg.gradient_accumulation_steps,
        "per_device_train_batch_size": micro_batch(cfg, world()[1]),
    }


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


def train(cfg: RLConfig, progress: bool = True) -> RunResult:
    """Run (or with ``cfg.resume`` continue) one RL fine-tuning run; returns its metrics.

    A resume of a finished run with no more steps returns the run's rows without training. The run folder
    (``RunFolder.open``) must be the workbook's (nothing is written into a folder that is not), then this process
    holds its lock until the run ends: a second process on it is refused."""
    if not isinstance(cfg, RLConfig):  # a dict of fields is the caller's slip: say how to make the config
        raise TypeError(
            f"train() takes an RLConfig, got a {type(cfg).__name__}"
            + ("; pass RLConfig(**fields) (or nbkit.rl.config_from(fields))" if isinstance(cfg, dict) else "")
        )
    with RunFolder.open(cfg, world()[0]) as folder:
        return _train(cfg, folder, progress)


def _train(cfg: RLConfig, folder: RunFolder, progress: bool) -> RunResult:
    """``train`` with the run folder's lock held."""
    rank, world_size = world()
    micro_batch(cfg, world_size)  # fails before anything loads
    if cfg.lora:
        lora.check_rank(cfg.lora_rank, cfg.model)  # from the model's config.json, no weights
    launch.check_weight_sync(cfg.train_dtype, cfg.rollout)  # ZeRO syncs half weights: no finer rollout
    launch.check_launch(cfg.train_dtype)  # an accelerate config for another precision is refused, not overridden
    launch.check_lora(cfg.lora, cfg.train_dtype)  # ZeRO: merges would round the frozen half base at every sync
    check_report_to(cfg.report_to)  # a tracker that would record nothing (WANDB_MODE=disabled) is refused
    gcfreeze.enabled()  # a bad NBKIT_GC_FREEZE is refused here, before the libraries load
    with gcfreeze.importing():  # loaded here, before the run's scope of the collector (below)
        import datasets  # noqa: F401
        import peft  # noqa: F401
        import transformers  # noqa: F401

        with logs.quiet():  # TRL's vLLM backend imports vLLM, whose import prints platform notices: to the log file
            import nbkit.rl.trainer  # noqa: F401
    with gcfreeze.walk_only_new():  # the run's collections walk what it makes, not the libraries just loaded
        return _trained(cfg, folder, progress, rank, world_size)


def _trained(cfg: RLConfig, folder: RunFolder, progress: bool, rank: int, world_size: int) -> RunResult:
    """``_train`` once its checks passed and its libraries loaded."""
    import datasets
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nbkit.rl.trainer import StepLogger

    start = time.time()
    cfg, _ = sizing.for_device(cfg, world_size, rank=rank)  # a GPU's micro-batch and vLLM sleep: memory estimate
    plan = folder.decide(cfg)  # reads only: refusals come before anything is changed or loaded
    out = cfg.out
    if plan.action == "finished":
        print(f"[nbkit] {plan.message}", flush=True)
        return RunResult(out, folder.rows(), time.time() - start, [])
    if cfg.trl:  # TRL's own checks of the settings given to it (e.g. a generation batch), before anything loads
        grpo_config(cfg)
    task, problems = load_task(cfg)
    judge_set = judge.load_set(cfg, problems) if cfg.judge_every else None  # refused here, not mid-run
    reward = reward_function(task, cfg.reward, cfg.max_completion_length)
    check_reward(reward, problems)
    reward.tally.clear()  # the check's call is not a training step
    path = models.resolve(cfg.model)
    rank_log = folder.rank_log(world_size)  # each process keeps its own log in step with the run's
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    max_model_length = check_prompts(cfg, tokenizer, [task.prompt(p) for p in problems], path)
    print(f"[nbkit] {plan.message}", flush=True)

    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")  # FP32 master weights
    data = datasets.Dataset.from_list(
        [{"prompt": trl_prompt(tokenizer, task.prompt(p)), "answer": p["answer"]} for p in problems]
    )
    peft_config = (
        LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, target_modules="all-linear", task_type="CAUSAL_LM")
        if cfg.lora
        else None
    )
    args = grpo_config(cfg, max_model_length)
    args.disable_tqdm = not progress
    with logs.quiet(f"TRL trainer ({cfg.algorithm}, {cfg.train_dtype}, rollouts {cfg.rollout_engine})"):
        trainer_class = algorithms.trainer_class(algorithms.get(cfg.algorithm))
        trainer = trainer_class(
            model=model,
            reward_funcs=[reward],
            args=args,
            train_dataset=data,
            processing_class=tokenizer,
            peft_config=peft_config,
            run=cfg,
        )
    log = folder.log  # written by rank 0 only (the folder's callback prepares it)
    logger = StepLogger(
        trainer,
        log,
        folder.alarm(),
        cfg.max_consecutive_skips,
        reward_tally=reward.tally,
        rank_log=rank_log,
        accuracy=cfg.reward == "correctness",
    )
    trainer.callback_handler.callbacks.insert(0, logger)  # first: its row reaches the trackers' on_log
    trainer.add_callback(folder.callback(trainer, logger))
    if judge_set is not None:  # after the logger (it adds to the row the logger holds) and the folder (begun)
        trainer.add_callback(
            judge.JudgeCallback(
                judge.Judge(cfg, *judge_set), trainer, logger, cfg.judge_every, fresh=plan.action == "fresh"
            )
        )
    _quiet_console(trainer)
    try:
        trainer.train(resume_from_checkpoint=str(folder.checkpoint) if folder.checkpoint else None)
    finally:
        trainer.close()
    if trainer.accelerator.num_processes > 1:  # rank 0's last row is written before anyone reads the log
        trainer.accelerator.wait_for_everyone()  # (single process: closing a colocated vLLM may end its group)
    result = RunResult(out, log.rows(), time.time() - start, logger.alarms)
    folder.finish(
        {
            "final_accuracy": result.final_accuracy,
            "steps": result.steps,
            "last_step": result.rows[-1]["step"] if result.rows else 0,
            "seconds": result.seconds,
            "alarms": result.alarms,
            "num_processes": world_size,
            "machine": results.machine(),  # what the run ran on: a later store may run elsewhere
        }
    )
    return result
