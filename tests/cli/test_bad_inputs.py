"""Bad inputs across the public API and the CLI, as data: each fails early, with the stated error type and a
message that names the bad value (or what to do about it), and no model is ever loaded for it.

Every case runs in well under a second: the checks happen before any model is loaded or any sample is drawn
(a model load during a case fails it: ``no_model_loads``). A case is (id, call, expected exception type or
``EXIT_2``, fragment(s) of the message); ``call`` gets the ``Ctx`` of files below. ``EXIT_2``: a command line that
returns status 2 and prints one line naming the value on stderr, no traceback. The ``RLConfig`` cases are generated
from the dataclass's annotations (``field_cases``): a field added tomorrow is covered by the table today.
"""

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from nbkit import engines, tasks
from nbkit.cli import main as cli_main
from nbkit.cli import plan
from nbkit.mismatch import mismatch
from nbkit.models import models
from nbkit.models.toymodels import arith
from nbkit.rl import RLConfig, config_from, train
from nbkit.runtime import fieldcheck, outputs
from nbkit.tasks import dataset
from nbkit.workbook import runner
from nbkit.workbook.parameters import check_notebook_parameters

EXIT_2 = 2
"""A command line's refusal: status 2, one line on stderr naming the value."""


@dataclass
class Ctx:
    """Files the cases point at (made once per module)."""

    tmp: Path
    arith: str  # 64 good arith problems
    tiny: str  # 1 good arith problem
    letters: str  # prompts the tiny-arith tokenizer reduces to nothing
    accents: str  # prompts with a character outside tiny-arith's vocabulary
    long: str  # a prompt longer than tiny-arith's context
    malformed: str  # a JSONL file whose second line is cut
    not_rows: str  # a JSONL line that is a list, not an object
    no_answers: str  # answers the arith grader cannot read
    users_folder: str  # a folder of someone else's files
    f: dict  # more files by name (see the fixture)


def _jsonl(path: Path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> Ctx:
    tmp = tmp_path_factory.mktemp("bad")
    users = tmp / "my-notes"
    users.mkdir()
    (users / "thesis.tex").write_text("years of work")
    good = arith.make_problems(64, seed=7)
    return Ctx(
        tmp=tmp,
        arith=_jsonl(tmp / "arith.jsonl", good),
        tiny=_jsonl(tmp / "tiny.jsonl", good[:1]),
        letters=_jsonl(tmp / "letters.jsonl", [{"problem": "what is two plus two", "answer": "4"}] * 4),
        accents=_jsonl(tmp / "accents.jsonl", [{"problem": "12+3=é", "answer": "15"}] * 4),
        long=_jsonl(tmp / "long.jsonl", [{"problem": "1" * 120 + "+1=", "answer": "2"}] * 4),
        malformed=_jsonl(tmp / "malformed.jsonl", [good[0], '{"problem": "1+1=", "ans']),
        not_rows=_jsonl(tmp / "not_rows.jsonl", ['["1+1=", "2"]']),
        no_answers=_jsonl(tmp / "no_answers.jsonl", [{"problem": "1+1=", "answer": "two"}] * 4),
        users_folder=str(users),
        f=more_files(tmp, good),
    )


def more_files(tmp: Path, good: list[dict]) -> dict:
    """Dataset rows bad after the first, undecodable files, config files and folders of the user's."""
    f = {}
    f["row3_no_answer"] = _jsonl(tmp / "row3.jsonl", good[:2] + [{"problem": "1+1="}] + good[3:8])
    f["row2_null_problem"] = _jsonl(tmp / "row2.jsonl", good[:1] + [{"problem": None, "answer": "2"}] + good[2:8])
    (tmp / "latin1.jsonl").write_bytes(b'{"problem": "caf\xe9", "answer": "1"}\n')
    f["latin1"] = str(tmp / "latin1.jsonl")
    (tmp / "strings.json").write_text(json.dumps(["1+1=", "2+2="]))
    f["strings_json"] = str(tmp / "strings.json")
    for name, content in {"not_model": json.dumps({"lr": 1e-4, "steps": 10}), "text_model": "hello"}.items():
        (tmp / name).mkdir()
        (tmp / name / "config.json").write_text(content)
        f[name] = str(tmp / name)
    (tmp / "dangling").symlink_to(tmp / "nowhere-at-all")
    f["dangling"] = str(tmp / "dangling")
    tiny = Path(models.resolve("tiny-arith"))
    for name in ("no_tokenizer", "cut_weights", "no_weights"):  # issue 55 items 11, 12: copies of tiny-arith
        shutil.copytree(tiny, tmp / name)
        f[name] = str(tmp / name)
    for file in (tmp / "no_tokenizer").glob("tokenizer*"):
        file.unlink()
    with open(tmp / "cut_weights" / "model.safetensors", "r+b") as w:
        w.truncate(w.seek(0, 2) // 2)  # a copy cut off half-way
    (tmp / "no_weights" / "model.safetensors").unlink()
    configs = {
        "invalid.yaml": "steps: 4\n  lr: : 1\n",
        "list.yaml": "- steps\n- 4\n",
        "seed.yaml": "steps: 4\nseed: -1\n",
        "unknown.yaml": "max_stepz: 4\n",
        "bool.yaml": "lora: maybe\n",
        "float_steps.yaml": "steps: 2.5\n",
        "url.yaml": "vllm_server_base_url: 8000\n",
        "twice.yaml": "train_dtype: fp16\nsteps: 4\ntrain_dtype: bf16\n",
        "twice_spelled.yaml": "train-dtype: fp16\ntrain_dtype: bf16\n",
        "twice_nested.yaml": "engine_kwargs:\n  kv_cache_gib: 1\n  kv_cache_gib: 2\n",
        "twice.json": '{"steps": 4, "seed": 1, "steps": 8}',
    }
    for name, text in configs.items():
        (tmp / name).write_text(text)
        f[name] = str(tmp / name)
    (tmp / "binary.yaml").write_bytes(b"\x00\x01\x02steps")
    (tmp / "latin1.yaml").write_bytes(b"model: caf\xe9\n")
    f["binary.yaml"], f["latin1.yaml"] = str(tmp / "binary.yaml"), str(tmp / "latin1.yaml")
    for kind, names in {
        "run": ("config.json", "README.md"),
        "dataset": ("README.md", "card.json"),
        "report": ("index.html", "about.html", "mynotes.ipynb"),
        "doctor": ("doctor.html",),
    }.items():
        (tmp / f"decoy-{kind}").mkdir()
        for name in names:
            (tmp / f"decoy-{kind}" / name).write_text("the user's")
        f[f"decoy-{kind}"] = str(tmp / f"decoy-{kind}")
    return f


def rl(c: Ctx, **kw) -> RLConfig:
    """A cheap valid run config (tiny-arith, HF, fp32) changed by ``kw``."""
    base = dict(
        dataset=c.arith,
        train_dtype="fp32",
        max_steps=1,
        prompts_per_step=2,
        num_generations=2,
        output_dir=str(c.tmp / "runs" / "r"),
    )
    return RLConfig(**{**base, **kw})


def build_into(c: Ctx, out: str):
    task = tasks.make_task(tasks.TaskConfig(source="arith", pool_size=4))
    return dataset.build(task, dataset.BuildConfig(out_dir=out, cache_dir=str(c.tmp / "cache")), progress=False)


@dataclass
class Case:
    id: str
    call: Callable[[Ctx], object]
    error: type | int
    fragment: str | tuple[str, ...]


class Opaque:
    """A value of no type a field accepts, with the same repr in every process (``object()``'s names its address,
    so the case's id differed between pytest-xdist workers and the suite refused to run)."""

    def __repr__(self) -> str:
        return "<opaque>"


def field_cases() -> list[Case]:
    """For every ``RLConfig`` field, from its annotation: values of the wrong type and values just outside its
    declared range (or the default range of its type), each refused naming the field and the value."""
    cases = []
    for name, (base, optional, rng) in fieldcheck.spec(RLConfig).items():
        wrong = {
            bool: ["false", "no", 1, 0.0],
            int: [2.5, "3", True],
            float: ["0.1", True, float("inf")],
            str: [3, b"x", ["a"]],
        }.get(base, [Opaque()])
        if not optional:
            wrong.append(None)
        for value in wrong:
            error = ValueError if isinstance(value, float) and base is float else TypeError
            cases.append(
                Case(
                    f"field-{name}-{type(value).__name__}-{value!r}"[:80],
                    lambda c, n=name, v=value: RLConfig(**{n: v}),
                    error,
                    (f"{name} must be", repr(value)),
                )
            )
        rng = rng or (fieldcheck.DEFAULT_INT if base is int else None)
        outside = []
        if base is float:
            outside.append(float("nan"))
        if rng is not None and rng.lo is not None:
            outside.append(rng.lo if rng.lo_open else rng.lo - (1 if base is int else 0.5))
        if rng is not None and rng.hi is not None:
            outside.append(rng.hi if rng.hi_open else rng.hi + 1)
        for value in outside:
            cases.append(
                Case(
                    f"field-{name}-range-{value!r}",
                    lambda c, n=name, v=value: RLConfig(**{n: v}),
                    ValueError,
                    (f"{name} must be", repr(value)),
                )
            )
    return cases


def _text(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def edited_page(c: Ctx) -> str:
    """A results page a user wrote under the page's own heading (or one they edited): not the workbook's to replace."""
    from nbkit.studies import results_md

    (c.tmp / "R-edited.md").write_text(results_md.HEADER + "\nmy own line\n")
    return str(c.tmp / "R-edited.md")


def stopped_run(c: Ctx, name: str, rows: str, complete: tuple[int, ...], config: str | None = None) -> str:
    """A run folder of the workbook's as a kill leaves it: ``metrics.jsonl`` holding ``rows``, the ``complete``
    checkpoints and ``config.json`` (``config``: its text; default the run's own, that of ``rl(c)``)."""
    out = c.tmp / name
    shutil.rmtree(out, ignore_errors=True)
    outputs.write_marker(out, "rl-run")
    cfg = rl(c, output_dir=str(out))
    (out / "config.json").write_text(json.dumps(cfg.to_dict()) if config is None else config)
    (out / "metrics.jsonl").write_text(rows)
    for step in complete:
        (out / f"checkpoint-{step}").mkdir()
        (out / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return str(out)


def nbkit(*argv):
    """The ``nbkit`` command line (what a user types)."""
    return lambda c: cli_main.main([a(c) if callable(a) else a for a in argv])


LOGP = [np.array([-0.1, -0.2]), np.array([-0.3])]

CASES = [
    # --- RLConfig: every field checked when the config is made
    Case("rl-algorithm", lambda c: RLConfig(algorithm="ppo_magic"), ValueError, "'ppo_magic'; choose one of"),
    Case("rl-train-dtype", lambda c: RLConfig(train_dtype="fp8"), ValueError, "unknown train_dtype 'fp8'"),
    Case("rl-rollout-dtype", lambda c: RLConfig(rollout_dtype="float16"), ValueError, "rollout_dtype 'float16'"),
    Case("rl-engine", lambda c: RLConfig(rollout_engine="sglang"), ValueError, "rollout_engine 'sglang'"),
    Case("rl-gemm", lambda c: RLConfig(gemm="fast"), ValueError, "gemm policy 'fast'"),
    Case(
        "rl-reward",
        lambda c: RLConfig(reward="length"),
        ValueError,
        "unknown reward 'length'; choose one of ('correctness', 'brevity')",
    ),
    Case("rl-group-of-one", lambda c: RLConfig(num_generations=1), ValueError, "num_generations must be >= 2"),
    Case("rl-steps-fraction", lambda c: RLConfig(max_steps=2.5), TypeError, "max_steps must be an integer, got 2.5"),
    Case("rl-steps-string", lambda c: RLConfig(max_steps="10"), TypeError, "max_steps must be an integer, got '10'"),
    Case("rl-steps-zero", lambda c: RLConfig(max_steps=0), ValueError, "max_steps must be >= 1, got 0"),
    Case(
        "rl-prompts-float", lambda c: RLConfig(prompts_per_step=16.0), TypeError, "prompts_per_step must be an integer"
    ),
    Case(
        "rl-max-tokens-zero",
        lambda c: RLConfig(max_completion_length=0),
        ValueError,
        "max_completion_length must be >= 1",
    ),
    Case("rl-lr-zero", lambda c: RLConfig(learning_rate=0), ValueError, "learning_rate must be > 0, got 0"),
    Case(
        "rl-lr-nan",
        lambda c: RLConfig(learning_rate=float("nan")),
        ValueError,
        "learning_rate must be a finite number, got nan",
    ),
    Case("rl-is-cap-inf", lambda c: RLConfig(is_cap=float("inf")), ValueError, "is_cap must be a finite number"),
    Case("rl-loss-scale-zero", lambda c: RLConfig(loss_scale_init=0), ValueError, "loss_scale_init must be > 0"),
    Case("rl-loss-scale-negative", lambda c: RLConfig(loss_scale_init=-1.0), ValueError, "got -1.0"),
    Case("rl-ppo-epochs-zero", lambda c: RLConfig(algorithm="ppo", ppo_epochs=0), ValueError, "must be >= 1, got 0"),
    Case(
        "rl-ppo-lambda",
        lambda c: RLConfig(algorithm="ppo", ppo_lambda=1.2),
        ValueError,
        "ppo_lambda must be in [0, 1], got 1.2",
    ),
    Case(
        "rl-ppo-gamma",
        lambda c: RLConfig(algorithm="ppo", ppo_gamma=-0.5),
        ValueError,
        "ppo_gamma must be in [0, 1], got -0.5",
    ),
    Case(
        "rl-ppo-value-clip",
        lambda c: RLConfig(algorithm="ppo", ppo_value_clip=0),
        ValueError,
        "ppo_value_clip must be > 0, got 0",
    ),
    Case(
        "rl-critic-lr",
        lambda c: RLConfig(algorithm="ppo", critic_lr=-1.0),
        ValueError,
        "critic_lr must be > 0, got -1.0",
    ),
    Case(
        "rl-alarm-drop-negative",
        lambda c: RLConfig(collapse_reward_drop=-0.1),
        ValueError,
        "collapse_reward_drop must be > 0",
    ),
    Case(
        "rl-alarm-factor-zero",
        lambda c: RLConfig(collapse_mismatch_factor=0),
        ValueError,
        "collapse_mismatch_factor must be > 0",
    ),
    Case(
        "rl-checkpoint-negative", lambda c: RLConfig(checkpoint_every=-1), ValueError, "checkpoint_every must be >= 0"
    ),
    Case("rl-output-dir-empty", lambda c: RLConfig(output_dir=""), ValueError, "output_dir must name a folder"),
    Case("rl-resume-and-overwrite", lambda c: RLConfig(resume=True, overwrite=True), ValueError, "contradict"),
    # --- train(): data, prompts and the run folder, before any model is loaded
    Case(
        "train-missing-dataset",
        lambda c: train(rl(c, dataset=str(c.tmp / "nowhere.jsonl"))),
        FileNotFoundError,
        "nowhere.jsonl",
    ),
    Case(
        "train-unreadable-answers",
        lambda c: train(rl(c, dataset=c.no_answers)),
        ValueError,
        "no problem with a checkable answer",
    ),
    Case(
        "train-dataset-smaller-than-a-step",
        lambda c: train(rl(c, dataset=c.tiny, prompts_per_step=2)),
        ValueError,
        "1 usable problems, fewer than one step's prompts_per_step=2",
    ),
    Case(
        "train-math-with-arith-grader",
        lambda c: train(rl(c, dataset="sanity_math_1460", grader="arith")),
        ValueError,
        "grader 'arith' cannot read 8 of the first 32 reference answers",
    ),
    Case(
        "train-prompt-tokenizes-to-nothing",
        lambda c: train(rl(c, dataset=c.letters)),
        ValueError,
        "turns prompt 'what is two plus two' into no tokens",
    ),
    Case(
        "train-prompt-outside-vocabulary",
        lambda c: train(rl(c, dataset=c.accents)),
        ValueError,
        "cannot represent prompt '12+3=é'",
    ),
    Case(
        "train-prompt-longer-than-context",
        lambda c: train(rl(c, dataset=c.long)),
        ValueError,
        "exceeds model 'tiny-arith''s context of 128 positions",
    ),
    Case(
        "train-malformed-jsonl",
        lambda c: train(rl(c, dataset=c.malformed)),
        ValueError,
        "malformed.jsonl: line 2 is not valid JSON",
    ),
    Case(
        "train-jsonl-line-not-an-object",
        lambda c: train(rl(c, dataset=c.not_rows)),
        ValueError,
        "line 1 is a list, not an object",
    ),
    Case(
        "train-unknown-model",
        lambda c: train(rl(c, model="no-such-model")),
        ValueError,
        "unknown model 'no-such-model'",
    ),
    Case(
        "train-into-users-folder",
        lambda c: train(rl(c, output_dir=c.users_folder)),
        outputs.OutputFolderError,
        "thesis.tex",
    ),
    Case("train-into-project-root", lambda c: train(rl(c, output_dir=".")), outputs.OutputFolderError, "project root"),
    Case(
        "train-resume-nothing",
        lambda c: train(rl(c, output_dir=str(c.tmp / "empty-run"), resume=True)),
        FileNotFoundError,
        "no run to continue",
    ),
    Case(
        "train-lora-rank-above-width",
        lambda c: train(rl(c, lora=True, lora_rank=4096)),
        ValueError,
        ("lora_rank=4096 is more than model 'tiny-arith' can hold", "maps 128 -> 128", "choose lora_rank in [1, 128]"),
    ),
    Case(
        "train-lora-rank-above-smollm2-width",
        lambda c: train(rl(c, model="smollm2-135m", lora=True, lora_rank=1024)),
        ValueError,
        ("lora_rank=1024", "q_proj, maps 576 -> 576", "choose lora_rank in [1, 576]"),
    ),
    Case(
        "cli-train-lora-rank",
        nbkit(
            "train",
            "--dataset",
            lambda c: c.arith,
            "--train-dtype",
            "fp32",
            "--lora",
            "--lora-rank",
            "512",
            "--output-dir",
            lambda c: str(c.tmp / "runs" / "r"),
        ),
        EXIT_2,
        "lora_rank=512 is more than model 'tiny-arith' can hold",
    ),
    # --- tasks
    Case("task-template", lambda c: tasks.TaskConfig(template="chatml"), ValueError, "unknown template 'chatml'"),
    Case("task-grader", lambda c: tasks.TaskConfig(grader="exact"), ValueError, "unknown grader 'exact'"),
    Case("task-arith-without-count", lambda c: tasks.TaskConfig(source="arith"), ValueError, "give pool_size > 0"),
    Case(
        "task-missing-column",
        lambda c: tasks.make_task(source=c.arith, answer_key="result"),
        ValueError,
        "no column(s) ['result']",
    ),
    Case(
        "task-unknown-suffix",
        lambda c: tasks.make_task(source=str(Path(c.users_folder) / "thesis.tex")),
        ValueError,
        "expected a save_to_disk folder, .parquet, .jsonl or .json",
    ),
    # --- dataset builds
    Case("build-window-reversed", lambda c: dataset.BuildConfig(lo=0.9, hi=0.1), ValueError, "lo=0.9, hi=0.1"),
    Case("build-no-samples", lambda c: dataset.BuildConfig(n_samples=0), ValueError, "n_samples must be >= 1"),
    Case(
        "build-samples-string",
        lambda c: dataset.BuildConfig(n_samples="40"),
        TypeError,
        "n_samples must be an integer, got '40'",
    ),
    Case("build-dtype", lambda c: dataset.BuildConfig(dtype="fp64"), ValueError, "unknown dtype 'fp64'"),
    Case("build-name-path", lambda c: dataset.BuildConfig(name="../x"), ValueError, "plain folder name, got '../x'"),
    Case("build-into-users-folder", lambda c: build_into(c, c.users_folder), outputs.OutputFolderError, "thesis.tex"),
    Case("build-into-project-root", lambda c: build_into(c, "."), outputs.OutputFolderError, "project root"),
    # --- engines and models
    Case(
        "sampling-temperature", lambda c: engines.SamplingConfig(temperature=0), ValueError, "temperature must be > 0"
    ),
    Case("sampling-top-p", lambda c: engines.SamplingConfig(top_p=1.5), ValueError, "top_p must be in (0, 1]"),
    Case("sampling-n-float", lambda c: engines.SamplingConfig(n=2.0), TypeError, "n must be an integer, got 2.0"),
    Case(
        "sampling-logprobs-mode",
        lambda c: engines.SamplingConfig(logprobs_mode="logits"),
        ValueError,
        "unknown logprobs_mode 'logits'",
    ),
    Case("engine-kind", lambda c: engines.make_engine("sglang", "tiny-arith"), ValueError, "unknown engine 'sglang'"),
    Case("model-dtype", lambda c: models.torch_dtype("fp8"), ValueError, "unknown dtype 'fp8'"),
    # --- mismatch metrics
    Case(
        "mismatch-padded-2d",
        lambda c: mismatch.mismatch_metrics(np.zeros((2, 3)) - 0.1, np.zeros((2, 3)) - 0.1),
        ValueError,
        "one 1-D array per sequence",
    ),
    Case(
        "mismatch-positive-logp",
        lambda c: mismatch.mismatch_metrics([np.array([0.5])], [np.array([-0.5])]),
        ValueError,
        "holds 0.5 > 0, not a log-probability",
    ),
    Case(
        "mismatch-lengths",
        lambda c: mismatch.mismatch_metrics(LOGP, [np.array([-0.1]), np.array([-0.3])]),
        ValueError,
        "sequence 0: log π has 2 tokens but log μ has 1",
    ),
    Case(
        "mismatch-nan",
        lambda c: mismatch.mismatch_metrics([np.array([np.nan])], [np.array([-0.1])]),
        ValueError,
        "non-finite",
    ),
    Case(
        "mismatch-count",
        lambda c: mismatch.mismatch_metrics(LOGP, LOGP[:1]),
        ValueError,
        "log π has 2 sequences but log μ has 1",
    ),
    # --- the runner and its CLI
    Case(
        "cli-only-without-value",
        lambda c: cli_main.main(["run", "--only"]),
        SystemExit,
        "expected at least one argument",
    ),
    Case(
        "cli-out-empty",
        lambda c: cli_main.main(["run", "--profile", "smoke", "--out", ""]),
        EXIT_2,
        "the report folder must be named",
    ),
    Case(
        "runner-out-users-folder",
        lambda c: runner.run("smoke", Path(c.users_folder)),
        outputs.OutputFolderError,
        "thesis.tex",
    ),
    Case("runner-profile", lambda c: cli_main.main(["run", "--profile", "fast"]), EXIT_2, "unknown profile 'fast'"),
    Case("runner-only-nothing", lambda c: runner.notebooks(["99_nothing"]), ValueError, "no notebook matches"),
    Case("runner-only-blank", lambda c: runner.notebooks([""]), ValueError, "names no notebook"),
    Case(
        "runner-unknown-parameter",
        lambda c: runner.check_parameters(runner.NOTEBOOKS / "03_rl_training.ipynb", {"stepz": 1}),
        ValueError,
        "no parameter(s) ['stepz']",
    ),
    Case(
        "runner-unknown-config-override",
        lambda c: runner.check_parameters(
            runner.NOTEBOOKS / "03_rl_training.ipynb", {"config_overrides": {"stepz": 1}}
        ),
        ValueError,
        "notebook 03_rl_training: config_overrides ['stepz'] is not an RLConfig field",
    ),
    Case(
        "rl-config-from-unknown",
        lambda c: config_from({"stepz": 1, "steps": 2}),
        ValueError,
        "['stepz'] is not an RLConfig field",
    ),
    # --- RLConfig: strings that must say something
    Case("rl-model-empty", lambda c: RLConfig(model=""), ValueError, "model must name something, got ''"),
    Case("rl-dataset-blank", lambda c: RLConfig(dataset="  "), ValueError, "dataset must name something, got '  '"),
    Case(
        "rl-url-no-scheme",
        lambda c: RLConfig(vllm_server_base_url="localhost:8000"),
        ValueError,
        "vllm_server_base_url must be an http:// or https:// URL, got 'localhost:8000'",
    ),
    Case(
        "rl-seed-huge",
        lambda c: RLConfig(seed=2**64),
        ValueError,
        "seed must be in [0, 4294967295], got 18446744073709551616",
    ),
    Case(
        "rl-overwrite-string-false",
        lambda c: RLConfig(overwrite="false"),
        TypeError,
        "overwrite must be True or False (a bool), got 'false'",
    ),
    Case(
        "rl-resume-string-no",
        lambda c: RLConfig(resume="no"),
        TypeError,
        "resume must be True or False (a bool), got 'no'",
    ),
    Case(
        "rl-lora-string-yes",
        lambda c: RLConfig(lora="yes"),
        TypeError,
        "lora must be True or False (a bool), got 'yes'",
    ),
    Case(
        "rl-router-replay-string",
        lambda c: RLConfig(router_replay="False"),
        TypeError,
        "router_replay must be True or False",
    ),
    Case("rl-output-dir-int", lambda c: RLConfig(output_dir=7), TypeError, "output_dir must be a string, got 7 (int)"),
    Case(
        "rl-timeout-nan",
        lambda c: RLConfig(vllm_server_timeout=float("nan")),
        ValueError,
        "vllm_server_timeout must be a finite number, got nan",
    ),
    Case("rl-beta-inf", lambda c: RLConfig(beta=float("inf")), ValueError, "beta must be a finite number, got inf"),
    # --- problem sources: every row, and the file named
    Case(
        "train-row-3-without-answer",
        lambda c: train(rl(c, dataset=c.f["row3_no_answer"])),
        ValueError,
        ("row3.jsonl", "row 3 has no column(s) ['answer']"),
    ),
    Case(
        "train-row-2-null-problem",
        lambda c: train(rl(c, dataset=c.f["row2_null_problem"])),
        ValueError,
        ("row2.jsonl", "row 2's 'problem' is None"),
    ),
    Case(
        "train-dataset-not-utf8",
        lambda c: train(rl(c, dataset=c.f["latin1"])),
        ValueError,
        ("latin1.jsonl", "not UTF-8 text (byte"),
    ),
    Case(
        "train-json-list-of-strings",
        lambda c: train(rl(c, dataset=c.f["strings_json"])),
        ValueError,
        ("strings.json", "item 1 of the list is a str"),
    ),
    Case(
        "task-row-3-without-answer",
        lambda c: tasks.make_task(source=c.f["row3_no_answer"]),
        ValueError,
        "row 3 has no column(s) ['answer']",
    ),
    # --- model folders that are not models
    Case(
        "model-folder-of-a-run-config",
        lambda c: models.resolve(c.f["not_model"]),
        ValueError,
        ("not_model", "config.json is not a transformers model config", "['lr', 'steps']"),
    ),
    Case(
        "model-folder-config-not-json",
        lambda c: models.resolve(c.f["text_model"]),
        ValueError,
        ("text_model", "config.json is not JSON"),
    ),
    Case(
        "train-model-folder-not-a-model",
        lambda c: train(rl(c, model=c.f["not_model"])),
        ValueError,
        "is not a transformers model config",
    ),
    Case(  # issue 55 item 11: no tokenizer files (transformers would build an empty vocabulary)
        "model-folder-without-tokenizer",
        lambda c: models.resolve(c.f["no_tokenizer"]),
        ValueError,
        ("no_tokenizer' has no tokenizer (none of tokenizer.json", "tokenizer.save_pretrained"),
    ),
    Case(  # issue 55 item 12: a weights file cut off half-way
        "model-folder-truncated-weights",
        lambda c: models.resolve(c.f["cut_weights"]),
        ValueError,
        ("cut_weights/model.safetensors' are unreadable", "truncated or corrupt"),
    ),
    Case(
        "model-folder-without-weights",
        lambda c: models.resolve(c.f["no_weights"]),
        ValueError,
        "no_weights' has no weights file",
    ),
    Case(
        "cli-doctor-model-without-tokenizer",
        nbkit(
            "doctor", "--model", lambda c: c.f["no_tokenizer"], "--engine", "hf", "--out", lambda c: str(c.tmp / "d")
        ),
        SystemExit,
        "no_tokenizer' has no tokenizer",
    ),
    Case(
        "cli-doctor-truncated-weights",
        nbkit("doctor", "--model", lambda c: c.f["cut_weights"], "--engine", "hf", "--out", lambda c: str(c.tmp / "d")),
        SystemExit,
        "cut_weights/model.safetensors' are unreadable",
    ),
    Case(
        "cli-train-model-without-tokenizer",
        nbkit(
            "train",
            "--model",
            lambda c: c.f["no_tokenizer"],
            "--dataset",
            lambda c: c.arith,
            "--train-dtype",
            "fp32",
            "--output-dir",
            lambda c: str(c.tmp / "runs" / "r"),
        ),
        EXIT_2,
        "no_tokenizer' has no tokenizer",
    ),
    Case(
        "cli-train-truncated-weights",
        nbkit(
            "train",
            "--model",
            lambda c: c.f["cut_weights"],
            "--dataset",
            lambda c: c.arith,
            "--train-dtype",
            "fp32",
            "--output-dir",
            lambda c: str(c.tmp / "runs" / "r"),
        ),
        EXIT_2,
        "cut_weights/model.safetensors' are unreadable",
    ),
    # --- folders of the user's named like the workbook's outputs: refused, never "overwrite"
    Case(
        "train-overwrite-user-config-json",
        lambda c: train(rl(c, output_dir=c.f["decoy-run"], overwrite=True)),
        outputs.OutputFolderError,
        ("README.md, config.json", "no .nbkit-output.json marker"),
    ),
    Case(
        "build-into-user-card-json",
        lambda c: build_into(c, c.f["decoy-dataset"]),
        outputs.OutputFolderError,
        ("README.md, card.json", "no .nbkit-output.json marker"),
    ),
    Case(
        "runner-into-user-index-html",
        lambda c: runner.run("smoke", Path(c.f["decoy-report"]), only=["00"]),
        outputs.OutputFolderError,
        ("about.html, index.html, mynotes.ipynb",),
    ),
    # --- nbkit plan
    Case("plan-port-zero", lambda c: plan.make_plan(port=0), ValueError, "--port must be in [1, 65535], got 0"),
    Case("plan-gpu-gib-zero", lambda c: plan.make_plan(gpu_gib=0), ValueError, "--gpu-gib must be in (0, 1024], got 0"),
    Case("plan-gpu-gib-negative", lambda c: plan.make_plan(gpu_gib=-80.0), ValueError, "got -80.0"),
    Case(
        "plan-gpu-gib-nan",
        lambda c: plan.make_plan(gpu_gib=float("nan")),
        ValueError,
        "--gpu-gib must be a finite number, got nan",
    ),
    Case("plan-gpu-gib-inf", lambda c: plan.make_plan(gpu_gib=float("inf")), ValueError, "got inf"),
    Case(
        "plan-gpu-gib-mib",
        lambda c: plan.make_plan(gpu_gib=81920),
        ValueError,
        "--gpu-gib must be in (0, 1024], got 81920",
    ),
    Case("plan-gpu-gib-string", lambda c: plan.make_plan(gpu_gib="80"), TypeError, "--gpu-gib must be a finite number"),
    Case("cli-plan-gpu-gib-mib", nbkit("plan", "--gpu-gib", "81920"), SystemExit, "--gpu-gib must be in (0, 1024]"),
    Case("cli-plan-gpu-gib-nan", nbkit("plan", "--gpu-gib", "nan"), SystemExit, "--gpu-gib must be a finite number"),
    Case("plan-port-huge", lambda c: plan.make_plan(port=70000), ValueError, "--port must be in [1, 65535], got 70000"),
    Case("plan-gpus-zero", lambda c: plan.make_plan(gpus=0), ValueError, "--gpus must be in [1, 64], got 0"),
    Case(
        "plan-gpus-absurd", lambda c: plan.make_plan(gpus=10**6), ValueError, "--gpus must be in [1, 64], got 1000000"
    ),
    Case("plan-gpus-string", lambda c: plan.make_plan(gpus="8"), TypeError, "--gpus must be an integer, got '8'"),
    Case(
        "plan-server-gpus-zero",
        lambda c: plan.make_plan(gpus=8, server_gpus=0),
        ValueError,
        "--server-gpus must be in [1, 64], got 0",
    ),
    Case(
        "plan-server-gpus-colocate",
        lambda c: plan.make_plan(gpus=8, mode="colocate", server_gpus=2),
        ValueError,
        "--server-gpus 2: only server mode has a vLLM server",
    ),
    Case("cli-plan-port", nbkit("plan", "--port", "0"), SystemExit, "--port must be in [1, 65535], got 0"),
    Case(
        "cli-plan-server-gpus-zero",
        nbkit("plan", "--server-gpus", "0"),
        SystemExit,
        "--server-gpus must be in [1, 64], got 0",
    ),
    # --- the command line: one line, status 2, the file and line named
    Case(
        "cli-config-invalid-yaml",
        nbkit("train", "--config", lambda c: c.f["invalid.yaml"]),
        SystemExit,
        ("invalid.yaml', line 2, column", "is not valid YAML"),
    ),
    Case(
        "cli-config-binary",
        nbkit("train", "--config", lambda c: c.f["binary.yaml"]),
        SystemExit,
        ("binary.yaml' is a binary file",),
    ),
    Case(
        "cli-config-not-utf8",
        nbkit("train", "--config", lambda c: c.f["latin1.yaml"]),
        SystemExit,
        ("latin1.yaml' is not UTF-8 text",),
    ),
    Case(
        "cli-config-a-list",
        nbkit("train", "--config", lambda c: c.f["list.yaml"]),
        SystemExit,
        ("list.yaml'", "got a list"),
    ),
    Case(
        "cli-config-seed",
        nbkit("train", "--config", lambda c: c.f["seed.yaml"]),
        SystemExit,
        ("seed.yaml', line 2: seed must be in [0, 4294967295], got -1",),
    ),
    Case(
        "cli-config-unknown-key",
        nbkit("train", "--config", lambda c: c.f["unknown.yaml"]),
        SystemExit,
        ("unknown.yaml', line 1: unknown key 'max_stepz'", "did you mean ['max_steps']"),
    ),
    Case(
        "cli-config-bool",
        nbkit("train", "--config", lambda c: c.f["bool.yaml"]),
        SystemExit,
        ("bool.yaml', line 1: lora: expects true or false, got 'maybe'",),
    ),
    Case(
        "cli-config-float-steps",
        nbkit("train", "--config", lambda c: c.f["float_steps.yaml"]),
        SystemExit,
        ("float_steps.yaml', line 1: max_steps: expects an integer, got 2.5",),
    ),
    Case(
        "cli-config-url-number",
        nbkit("train", "--config", lambda c: c.f["url.yaml"]),
        SystemExit,
        ("url.yaml', line 1: vllm_server_base_url: expects a string, got 8000",),
    ),
    Case(  # issue 55 item 10: YAML (and JSON) keep the last of two equal keys without a word
        "cli-config-key-twice",
        nbkit("train", "--config", lambda c: c.f["twice.yaml"]),
        SystemExit,
        ("twice.yaml', line 3: key 'train_dtype' is given twice (first on line 1); keep one of them",),
    ),
    Case(
        "cli-config-key-twice-other-spelling",
        nbkit("train", "--config", lambda c: c.f["twice_spelled.yaml"]),
        SystemExit,
        ("twice_spelled.yaml', line 2: key 'train_dtype' is given twice (first on line 1 (as 'train-dtype'))",),
    ),
    Case(
        "cli-config-nested-key-twice",
        nbkit("train", "--config", lambda c: c.f["twice_nested.yaml"]),
        SystemExit,
        ("twice_nested.yaml', line 3: key 'kv_cache_gib' is given twice (first on line 2)",),
    ),
    Case(
        "cli-config-json-key-twice",
        nbkit("train", "--config", lambda c: c.f["twice.json"]),
        SystemExit,
        ("twice.json', line 1: key 'steps' is given twice",),
    ),
    Case(
        "cli-doctor-config-key-twice",
        nbkit("doctor", "--config", lambda c: c.f["twice.yaml"]),
        SystemExit,
        ("twice.yaml', line 3: key 'train_dtype' is given twice",),
    ),
    Case(
        "cli-config-missing",
        nbkit("train", "--config", "/nonexistent/run.yaml"),
        SystemExit,
        "config file '/nonexistent/run.yaml' not found",
    ),
    Case(
        "cli-train-seed-flag",
        nbkit("train", "--seed", "-5", "--print-config"),
        SystemExit,
        "seed must be in [0, 4294967295], got -5",
    ),
    Case(
        "cli-train-bool-flag-value", nbkit("train", "--overwrite", "false"), SystemExit, "unrecognized arguments: false"
    ),
    Case(
        "cli-train-into-users-folder",
        nbkit(
            "train", "--dataset", lambda c: c.arith, "--train-dtype", "fp32", "--output-dir", lambda c: c.users_folder
        ),
        EXIT_2,
        "thesis.tex",
    ),
    Case(
        "cli-train-overwrite-user-run-names",
        nbkit(
            "train",
            "--dataset",
            lambda c: c.arith,
            "--train-dtype",
            "fp32",
            "--output-dir",
            lambda c: c.f["decoy-run"],
            "--overwrite",
        ),
        EXIT_2,
        ("README.md, config.json",),
    ),
    Case(
        "cli-train-missing-dataset",
        nbkit(
            "train",
            "--dataset",
            "/nonexistent/d.jsonl",
            "--train-dtype",
            "fp32",
            "--output-dir",
            lambda c: str(c.tmp / "runs" / "r"),
        ),
        EXIT_2,
        "/nonexistent/d.jsonl",
    ),
    Case(
        "cli-run-into-user-index",
        nbkit("run", "--profile", "smoke", "--only", "00", "--out", lambda c: c.f["decoy-report"]),
        EXIT_2,
        "index.html",
    ),
    Case(  # issue 55 item 13: a folder name of non-UTF-8 bytes (a traceback and an empty notebook before)
        "cli-run-out-not-utf8",
        nbkit("run", "--profile", "smoke", "--only", "00", "--out", lambda c: str(c.tmp / os.fsdecode(b"rep\xff"))),
        EXIT_2,
        ("report folder name", "rep\\xff' is not UTF-8", "choose a UTF-8 name"),
    ),
    Case(  # issue 55 item 15: "[Errno 17] File exists" before
        "cli-run-out-dangling-symlink",
        nbkit("run", "--profile", "smoke", "--only", "00", "--out", lambda c: c.f["dangling"]),
        EXIT_2,
        ("dangling' is a symlink to", "nowhere-at-all', which does not exist: create that folder first"),
    ),
    Case(
        "cli-doctor-out-dangling-symlink",
        nbkit("doctor", "--model", "tiny-arith", "--engine", "hf", "--out", lambda c: c.f["dangling"]),
        SystemExit,
        ("doctor folder", "dangling' is a symlink to", "which does not exist"),
    ),
    Case(
        "cli-run-unknown-notebook",
        nbkit("run", "--profile", "smoke", "--only", "99"),
        EXIT_2,
        "no notebook matches ['99']",
    ),
    Case(
        "cli-doctor-into-user-doctor-html",
        nbkit("doctor", "--model", "tiny-arith", "--engine", "hf", "--out", lambda c: c.f["decoy-doctor"]),
        EXIT_2,
        "doctor.html",
    ),
    Case(
        "cli-doctor-out-empty",
        nbkit("doctor", "--model", "tiny-arith", "--out", ""),
        SystemExit,
        "--out '': name the doctor's report folder",
    ),
    Case("cli-doctor-seed-negative", nbkit("doctor", "--seed", "-1"), SystemExit, "seed must be >= 0, got -1"),
    Case("cli-doctor-dtype", nbkit("doctor", "--dtypes", "fp8"), SystemExit, "unknown dtypes ['fp8']"),
    Case("cli-study-unknown", nbkit("study", "no_such_study"), SystemExit, "unknown study 'no_such_study'"),
    # --- issue 41: values read as values, ranges alike, options checked, folders checked before any work
    Case(
        "cli-train-negative-lr-is-a-value",
        nbkit("train", "--learning-rate", "-1e-4", "--print-config"),
        SystemExit,
        "learning_rate must be > 0, got -0.0001",
    ),
    Case(
        "cli-doctor-target-length-negative",
        nbkit("doctor", "--target-length", "-5"),
        SystemExit,
        "target_length must be >= 1, got -5",
    ),
    Case(
        "cli-doctor-target-length-zero",
        nbkit("doctor", "--target-length", "0"),
        SystemExit,
        "target_length must be >= 1, got 0",
    ),
    Case(
        "cli-study-unknown-option",
        nbkit("study", "ablation_tiny_arith", "run", "--set", "bogus_key=1"),
        EXIT_2,
        ("no grid option 'bogus_key'", "its options: algorithm, output_dir, overrides, pairs"),
    ),
    Case(
        "task-missing-column-names-the-file-columns",
        lambda c: tasks.make_task(source=c.arith, answer_key="result"),
        ValueError,
        "name them 'problem' and 'result' in the file",
    ),
    Case(
        "build-name-too-long-for-its-temporary-folder",
        lambda c: build_into(c, str(c.tmp / ("d" * 250))),
        outputs.OutputFolderError,
        ("is 250 bytes long", "'.<name>.<pid>-<random>.tmp'"),
    ),
    Case(
        "build-under-a-file",
        lambda c: build_into(c, str(Path(c.users_folder) / "thesis.tex" / "set")),
        outputs.OutputFolderError,
        "is not a folder",
    ),
    Case(
        "build-read-only-file-system",
        lambda c: build_into(c, "/proc/nbkit-no-such/set"),
        outputs.OutputFolderError,
        "is not writable",
    ),
    Case(
        "cli-doctor-out-read-only",
        nbkit("doctor", "--model", "tiny-arith", "--engine", "hf", "--out", "/proc/nbkit-no-such/doc"),
        EXIT_2,
        "is not writable",
    ),
    Case(
        "cli-train-output-under-a-file",
        nbkit(
            "train",
            "--dataset",
            lambda c: c.arith,
            "--train-dtype",
            "fp32",
            "--output-dir",
            lambda c: str(Path(c.users_folder) / "thesis.tex" / "r"),
        ),
        EXIT_2,
        "is not a folder",
    ),
    Case(
        "store-name-too-long",
        lambda c: outputs.check_replace(c.tmp / ("s" * 250), "results"),
        outputs.OutputFolderError,
        "is 250 bytes long",
    ),
]
# --- issue 73: interrupted work, edited pages, unusual files
CASES += [
    Case(
        "cli-train-trl-setting-nan",
        nbkit("train", "--trl", '{"adam_epsilon": NaN}'),
        SystemExit,
        "trl: 'adam_epsilon' = 'NaN': GRPOConfig's adam_epsilon is a number; give a finite one",
    ),
    Case(
        "cli-train-config-lr-nan-names-its-line",
        nbkit("train", "--config", lambda c: _text(c.tmp / "nan.yaml", "steps: 4\nlr: .nan\n")),
        SystemExit,
        "nan.yaml', line 2: learning_rate must be a finite number, got nan",
    ),
    Case(
        "cli-train-config-a-folder",
        nbkit("train", "--config", lambda c: c.users_folder),
        EXIT_2,
        "is a folder: name a YAML or JSON file in it",
    ),
    Case(
        "train-a-dict-of-fields",
        lambda c: train({"steps": 1}),
        TypeError,
        "train() takes an RLConfig, got a dict; pass RLConfig(**fields)",
    ),
    Case(
        "cli-study-set-a-list-option-to-one-value",
        nbkit("study", "ppo_tiny_arith", "run", "--set", "seeds=5"),
        EXIT_2,
        "--set seeds=5: ppo_tiny_arith's seeds is a list; write seeds=[5]",
    ),
    Case(
        "train-a-10-mb-problem",
        lambda c: train(
            rl(c, dataset=_jsonl(c.tmp / "huge.jsonl", [{"problem": "1" * 10**7 + "+1=", "answer": "2"}] * 2))
        ),
        ValueError,
        ("has 10000003 characters", "more than the model's whole context of 128 positions", "shorten it or drop it"),
    ),
    Case(
        "train-resume-a-run-whose-config-json-is-cut",
        lambda c: train(
            rl(c, resume=True, output_dir=stopped_run(c, "cut-config", '{"step": 1}\n', (1,), config='{"mod'))
        ),
        FileExistsError,
        ("whose config.json cannot be read", "overwrite=True"),
    ),
    Case(
        "notebook-papermill-parameter-it-does-not-have",
        lambda c: check_notebook_parameters("03_rl_training", {"In": ["", "# Parameters\nnosuchparam = 3\n"]}),
        ValueError,
        "notebook 03_rl_training has no parameter(s) ['nosuchparam']; its parameters: [",
    ),
    Case(
        "train-resume-log-ends-short-of-the-only-checkpoint",
        lambda c: train(
            rl(c, max_steps=4, resume=True, output_dir=stopped_run(c, "short-log", '{"step": 1}\n{"step": 2', (2,)))
        ),
        FileNotFoundError,
        ("metrics.jsonl ends at step 1, short of", "step(s) 2 without a metrics row"),
    ),
    Case(
        "cli-results-md-out-a-page-edited-since-it-was-written",
        nbkit("results-md", "--out", lambda c: edited_page(c)),
        EXIT_2,
        "is not a page this command wrote, or was edited since",
    ),
]
CASES += field_cases()


def test_the_table_is_large_and_its_ids_unique():
    assert len(CASES) >= 130 and len({c.id for c in CASES}) == len(CASES)


class ModelLoaded(BaseException):
    """Raised by any model load during a case: no ``except Exception`` (nor the CLI's guard) can swallow it."""


@pytest.fixture
def no_model_loads(monkeypatch):
    """Every way the workbook loads a model fails the case: transformers' ``from_pretrained`` (which the Auto
    classes call) and ``nbkit.models.models.load``; the list records what was attempted."""
    from transformers import PreTrainedModel

    attempts = []

    def refuse(*args, **kwargs):
        attempts.append((args, kwargs))
        raise ModelLoaded(f"a model was loaded: {args[:2]}")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(lambda cls, *a, **k: refuse(cls, *a, **k)))
    monkeypatch.setattr(models, "load", refuse)
    return attempts


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_fails_early_naming_the_value(case, ctx, capsys, no_model_loads):
    if case.error == EXIT_2:
        code = case.call(ctx)
        said = capsys.readouterr().err
        assert code == 2, f"exit status {code}: {said}"
        assert len(said.strip().splitlines()) == 1 and "Traceback" not in said, said  # one line, no traceback
    else:
        with pytest.raises(case.error) as err:
            case.call(ctx)
        said = str(err.value) + capsys.readouterr().err  # argparse reports on stderr
    assert "Traceback" not in said
    for fragment in (case.fragment,) if isinstance(case.fragment, str) else case.fragment:
        assert fragment in said, said
    assert no_model_loads == []  # refused before any model loaded
    assert not (ctx.tmp / "runs" / "r").exists()  # nothing was written for a refused run
    assert [p.name for p in Path(ctx.users_folder).iterdir()] == ["thesis.tex"]
