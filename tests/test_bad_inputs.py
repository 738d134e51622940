"""Bad inputs across the public API and the CLI, as data: each fails early, with the stated error type and a
message that names the bad value (or what to do about it).

Every case runs in well under a second: the checks happen before any model is loaded or any sample is drawn.
A case is (id, call, expected exception type, fragment of the message); ``call`` gets the ``Ctx`` of files below.
"""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from nbkit import arith, dataset, engines, mismatch, models, outputs, runner, tasks
from nbkit.rl import RLConfig, train


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
    )


def rl(c: Ctx, **kw) -> RLConfig:
    """A cheap valid run config (tiny-arith, HF, fp32) changed by ``kw``."""
    base = dict(dataset=c.arith, train_dtype="fp32", steps=1, prompts_per_step=2, samples_per_prompt=2,
                output_dir=str(c.tmp / "runs" / "r"))
    return RLConfig(**{**base, **kw})


def build_into(c: Ctx, out: str):
    task = tasks.make_task(tasks.TaskConfig(source="arith", pool_size=4))
    return dataset.build(task, dataset.BuildConfig(out_dir=out, cache_dir=str(c.tmp / "cache")), progress=False)


@dataclass
class Case:
    id: str
    call: Callable[[Ctx], object]
    error: type
    fragment: str


LOGP = [np.array([-0.1, -0.2]), np.array([-0.3])]

CASES = [
    # --- RLConfig: every field checked when the config is made
    Case("rl-algorithm", lambda c: RLConfig(algorithm="ppo_magic"), ValueError, "'ppo_magic'; choose one of"),
    Case("rl-train-dtype", lambda c: RLConfig(train_dtype="fp8"), ValueError, "unknown train_dtype 'fp8'"),
    Case("rl-rollout-dtype", lambda c: RLConfig(rollout_dtype="float16"), ValueError, "rollout_dtype 'float16'"),
    Case("rl-engine", lambda c: RLConfig(rollout_engine="sglang"), ValueError, "rollout_engine 'sglang'"),
    Case("rl-gemm", lambda c: RLConfig(gemm="fast"), ValueError, "gemm policy 'fast'"),
    Case("rl-reward", lambda c: RLConfig(reward="length"), ValueError,
         "unknown reward 'length'; choose one of ('correctness', 'brevity')"),
    Case("rl-group-of-one", lambda c: RLConfig(samples_per_prompt=1), ValueError, "samples_per_prompt must be >= 2"),
    Case("rl-steps-fraction", lambda c: RLConfig(steps=2.5), TypeError, "steps must be an integer, got 2.5"),
    Case("rl-steps-string", lambda c: RLConfig(steps="10"), TypeError, "steps must be an integer, got '10'"),
    Case("rl-steps-zero", lambda c: RLConfig(steps=0), ValueError, "steps must be >= 1, got 0"),
    Case("rl-prompts-float", lambda c: RLConfig(prompts_per_step=16.0), TypeError, "prompts_per_step must be an integer"),
    Case("rl-max-tokens-zero", lambda c: RLConfig(max_tokens=0), ValueError, "max_tokens must be >= 1"),
    Case("rl-lr-zero", lambda c: RLConfig(lr=0), ValueError, "lr must be > 0, got 0"),
    Case("rl-lr-nan", lambda c: RLConfig(lr=float("nan")), ValueError, "lr must be a finite number, got nan"),
    Case("rl-is-cap-inf", lambda c: RLConfig(is_cap=float("inf")), ValueError, "is_cap must be a finite number"),
    Case("rl-loss-scale-zero", lambda c: RLConfig(loss_scale_init=0), ValueError, "loss_scale_init must be > 0"),
    Case("rl-loss-scale-negative", lambda c: RLConfig(loss_scale_init=-1.0), ValueError, "got -1.0"),
    Case("rl-ppo-epochs-zero", lambda c: RLConfig(algorithm="ppo", ppo_epochs=0), ValueError, "must be >= 1, got 0"),
    Case("rl-ppo-lambda", lambda c: RLConfig(algorithm="ppo", ppo_lambda=1.2), ValueError, "ppo_lambda must be in [0, 1], got 1.2"),
    Case("rl-ppo-gamma", lambda c: RLConfig(algorithm="ppo", ppo_gamma=-0.5), ValueError, "ppo_gamma must be in [0, 1], got -0.5"),
    Case("rl-ppo-value-clip", lambda c: RLConfig(algorithm="ppo", ppo_value_clip=0), ValueError, "ppo_value_clip must be > 0, got 0"),
    Case("rl-critic-lr", lambda c: RLConfig(algorithm="ppo", critic_lr=-1.0), ValueError, "critic_lr must be > 0, got -1.0"),
    Case("rl-alarm-drop-negative", lambda c: RLConfig(collapse_reward_drop=-0.1), ValueError,
         "collapse_reward_drop must be > 0"),
    Case("rl-alarm-factor-zero", lambda c: RLConfig(collapse_mismatch_factor=0), ValueError,
         "collapse_mismatch_factor must be > 0"),
    Case("rl-checkpoint-negative", lambda c: RLConfig(checkpoint_every=-1), ValueError, "checkpoint_every must be >= 0"),
    Case("rl-output-dir-empty", lambda c: RLConfig(output_dir=""), ValueError, "output_dir must name a folder"),
    Case("rl-resume-and-overwrite", lambda c: RLConfig(resume=True, overwrite=True), ValueError, "contradict"),
    # --- train(): data, prompts and the run folder, before any model is loaded
    Case("train-missing-dataset", lambda c: train(rl(c, dataset=str(c.tmp / "nowhere.jsonl"))), FileNotFoundError,
         "nowhere.jsonl"),
    Case("train-unreadable-answers", lambda c: train(rl(c, dataset=c.no_answers)), ValueError,
         "no problem with a checkable answer"),
    Case("train-dataset-smaller-than-a-step", lambda c: train(rl(c, dataset=c.tiny, prompts_per_step=2)), ValueError,
         "1 usable problems, fewer than one step's prompts_per_step=2"),
    Case("train-math-with-arith-grader", lambda c: train(rl(c, dataset="sanity_math_1460", grader="arith")),
         ValueError, "grader 'arith' cannot read 8 of the first 32 reference answers"),
    Case("train-prompt-tokenizes-to-nothing", lambda c: train(rl(c, dataset=c.letters)), ValueError,
         "turns prompt 'what is two plus two' into no tokens"),
    Case("train-prompt-outside-vocabulary", lambda c: train(rl(c, dataset=c.accents)), ValueError,
         "cannot represent prompt '12+3=é'"),
    Case("train-prompt-longer-than-context", lambda c: train(rl(c, dataset=c.long)), ValueError,
         "exceeds model 'tiny-arith''s context of 128 positions"),
    Case("train-malformed-jsonl", lambda c: train(rl(c, dataset=c.malformed)), ValueError,
         "malformed.jsonl: line 2 is not valid JSON"),
    Case("train-jsonl-line-not-an-object", lambda c: train(rl(c, dataset=c.not_rows)), ValueError,
         "line 1 is a list, not an object"),
    Case("train-unknown-model", lambda c: train(rl(c, model="no-such-model")), ValueError, "unknown model 'no-such-model'"),
    Case("train-into-users-folder", lambda c: train(rl(c, output_dir=c.users_folder)), outputs.OutputFolderError,
         "thesis.tex"),
    Case("train-into-project-root", lambda c: train(rl(c, output_dir=".")), outputs.OutputFolderError, "project root"),
    Case("train-resume-nothing", lambda c: train(rl(c, output_dir=str(c.tmp / "empty-run"), resume=True)),
         FileNotFoundError, "no run to continue"),
    # --- tasks
    Case("task-template", lambda c: tasks.TaskConfig(template="chatml"), ValueError, "unknown template 'chatml'"),
    Case("task-grader", lambda c: tasks.TaskConfig(grader="exact"), ValueError, "unknown grader 'exact'"),
    Case("task-arith-without-count", lambda c: tasks.TaskConfig(source="arith"), ValueError, "give pool_size > 0"),
    Case("task-missing-column", lambda c: tasks.make_task(source=c.arith, answer_key="result"), ValueError,
         "no column(s) ['result']"),
    Case("task-unknown-suffix", lambda c: tasks.make_task(source=str(Path(c.users_folder) / "thesis.tex")),
         ValueError, "expected a save_to_disk folder, .parquet, .jsonl or .json"),
    # --- dataset builds
    Case("build-window-reversed", lambda c: dataset.BuildConfig(lo=0.9, hi=0.1), ValueError, "lo=0.9, hi=0.1"),
    Case("build-no-samples", lambda c: dataset.BuildConfig(n_samples=0), ValueError, "n_samples must be >= 1"),
    Case("build-samples-string", lambda c: dataset.BuildConfig(n_samples="40"), TypeError,
         "n_samples must be an integer, got '40'"),
    Case("build-dtype", lambda c: dataset.BuildConfig(dtype="fp64"), ValueError, "unknown dtype 'fp64'"),
    Case("build-name-path", lambda c: dataset.BuildConfig(name="../x"), ValueError, "plain folder name, got '../x'"),
    Case("build-into-users-folder", lambda c: build_into(c, c.users_folder), outputs.OutputFolderError, "thesis.tex"),
    Case("build-into-project-root", lambda c: build_into(c, "."), outputs.OutputFolderError, "project root"),
    # --- engines and models
    Case("sampling-temperature", lambda c: engines.SamplingConfig(temperature=0), ValueError, "temperature must be > 0"),
    Case("sampling-top-p", lambda c: engines.SamplingConfig(top_p=1.5), ValueError, "top_p must be in (0, 1]"),
    Case("sampling-n-float", lambda c: engines.SamplingConfig(n=2.0), TypeError, "n must be an integer, got 2.0"),
    Case("sampling-logprobs-mode", lambda c: engines.SamplingConfig(logprobs_mode="logits"), ValueError,
         "unknown logprobs_mode 'logits'"),
    Case("engine-kind", lambda c: engines.make_engine("sglang", "tiny-arith"), ValueError, "unknown engine 'sglang'"),
    Case("model-dtype", lambda c: models.torch_dtype("fp8"), ValueError, "unknown dtype 'fp8'"),
    # --- mismatch metrics
    Case("mismatch-padded-2d", lambda c: mismatch.mismatch_metrics(np.zeros((2, 3)) - 0.1, np.zeros((2, 3)) - 0.1),
         ValueError, "one 1-D array per sequence"),
    Case("mismatch-positive-logp", lambda c: mismatch.mismatch_metrics([np.array([0.5])], [np.array([-0.5])]),
         ValueError, "holds 0.5 > 0, not a log-probability"),
    Case("mismatch-lengths", lambda c: mismatch.mismatch_metrics(LOGP, [np.array([-0.1]), np.array([-0.3])]),
         ValueError, "sequence 0: log π has 2 tokens but log μ has 1"),
    Case("mismatch-nan", lambda c: mismatch.mismatch_metrics([np.array([np.nan])], [np.array([-0.1])]), ValueError,
         "non-finite"),
    Case("mismatch-count", lambda c: mismatch.mismatch_metrics(LOGP, LOGP[:1]), ValueError,
         "log π has 2 sequences but log μ has 1"),
    # --- the runner and its CLI
    Case("cli-only-without-value", lambda c: runner.main(["run", "--only"]), SystemExit, "expected at least one argument"),
    Case("cli-out-empty", lambda c: runner.main(["run", "--profile", "smoke", "--out", ""]), ValueError,
         "the report folder must be named"),
    Case("runner-out-users-folder", lambda c: runner.run("smoke", Path(c.users_folder)), outputs.OutputFolderError,
         "thesis.tex"),
    Case("runner-profile", lambda c: runner.main(["run", "--profile", "fast"]), ValueError, "unknown profile 'fast'"),
    Case("runner-only-nothing", lambda c: runner.notebooks(["99_nothing"]), ValueError, "no notebook matches"),
    Case("runner-only-blank", lambda c: runner.notebooks([""]), ValueError, "names no notebook"),
    Case("runner-unknown-parameter",
         lambda c: runner.check_parameters(runner.NOTEBOOKS / "03_rl_training.ipynb", {"stepz": 1}), ValueError,
         "no parameter(s) ['stepz']"),
]


def test_the_table_is_large_and_its_ids_unique():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_fails_early_naming_the_value(case, ctx, capsys):
    with pytest.raises(case.error) as err:
        case.call(ctx)
    said = str(err.value) + capsys.readouterr().err  # argparse reports on stderr
    assert case.fragment in said, said
    assert not (ctx.tmp / "runs" / "r").exists()  # nothing was written for a refused run
    assert [p.name for p in Path(ctx.users_folder).iterdir()] == ["thesis.tex"]
