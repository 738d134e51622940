"""The toy task of the public report on μ as π_old: reward = −response length, on SmolLM2-135M with vLLM rollouts.

The report (Qwen3-0.6B, FP32 trainer, BF16 vLLM engine, the engine's log-probs as π_old) found that a task which
should converge in a handful of steps (say less) did not. Here the same task runs on SmolLM2-135M-Instruct (LoRA)
for the (train, rollout) pairs FP16/FP16, BF16/BF16 and FP32/FP32 (the report's FP32/BF16 on request), with ``grpo_mu_old``
(μ is π_old in the clipped ratio) and 3 seeds; each run logs the reward (−tokens / max_tokens), the mean
response length, the mismatch and the phantom-clip fraction.

    nbkit study brevity_smollm2 run [--set steps=10 --set 'seeds=[0,1,2]']   # trains into runs/brevity
    nbkit study brevity_smollm2 store                                        # -> data/results/brevity_smollm2

A finished run (all its steps logged) is not trained again, so a cut-off study resumes. A run's pair and seed are
read from its config.
"""

from __future__ import annotations

from pathlib import Path

from nbkit.records import schema
from nbkit.records.runlog import pair_tag
from nbkit.studies import prose
from nbkit.studies.base import GridStudy

PAIRS: list[tuple[str, str]] = [("fp16", "fp16"), ("bf16", "bf16"), ("fp32", "fp32")]
"""(train dtype, rollout dtype): both precisions and the FP32 reference (``--pairs fp32/bf16`` adds the report's)."""
STUDY = "brevity_smollm2"
"""The stored study's folder under ``data/results``."""
SHORT = 0.1
"""A run has converged once its 3-step mean response is at most this share of ``max_completion_length``."""


def config(
    train_dtype: str, rollout_dtype: str, seed: int, out: Path, steps: int = 10, engine: str = "vllm", **overrides
):
    """One run: SmolLM2-135M-Instruct, LoRA, MATH prompts (ChatML), brevity reward, grpo_mu_old, 4 × 4 per step."""
    from nbkit.rl import RLConfig

    kw = dict(
        model="smollm2-135m",
        dataset="eval/math",
        template="qwen_math",
        grader="math_verify",
        reward="brevity",
        algorithm="grpo_mu_old",
        train_dtype=train_dtype,
        rollout_dtype=rollout_dtype,
        rollout_engine=engine,
        lora=True,
        learning_rate=5e-4,
        max_steps=steps,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=128,
        seed=seed,
        checkpoint_every=0,
        output_dir=str(out / label(train_dtype, rollout_dtype, seed)),
    )
    kw.update(overrides)
    return RLConfig(**kw)


def label(train_dtype: str, rollout_dtype: str, seed: int) -> str:
    """``brevity-<train>-<rollout>r-s<seed>`` (``brevity-fp16-s0`` when both sides agree)."""
    return f"brevity-{pair_tag(train_dtype, rollout_dtype)}-s{seed}"


def table(runs: dict[str, list[dict]], meta: dict[str, dict], max_tokens: int = 128) -> list[dict]:
    """Per (train, rollout) pair over seeds: mean response length at the first and the last 3 steps, the step at
    which the 3-step mean length first fell to ``SHORT`` × ``max_completion_length`` (per seed), the mismatch and the
    phantom-clip fraction."""
    groups: dict[tuple[str, str], list[list[dict]]] = {}
    for name, rows in runs.items():
        groups.setdefault((meta[name]["train"], meta[name]["rollout"]), []).append(rows)
    order = {p: i for i, p in enumerate(PAIRS)}
    out = []
    for pair, seeds in sorted(groups.items(), key=lambda kv: order.get(kv[0], 99)):

        def mean(key, rows_of=lambda rows: rows, seeds=seeds):
            return prose.mean3(
                [r[key] for rows in seeds for r in rows_of(rows) if isinstance(r.get(key), (int, float))]
            )

        def converged(rows):
            lengths = [r["completions/mean_length"] for r in rows]
            for i in range(3, len(lengths) + 1):
                if sum(lengths[i - 3 : i]) / 3 <= SHORT * max_tokens:
                    return rows[i - 1][schema.STEP]
            return None

        steps = [converged(rows) for rows in seeds]
        out.append(
            {
                "train": pair[0],
                "rollout": pair[1],
                "seeds": len(seeds),
                "first": mean("completions/mean_length", lambda rows: rows[:1]),
                "last": mean("completions/mean_length", lambda rows: rows[-3:]),
                "converged": ", ".join("—" if s is None else str(s) for s in steps),
                "mismatch": mean(schema.TOKEN_ABS_LOGP_DIFF),
                "phantom": mean(schema.PHANTOM_FRACTION),
                "s_step": mean(schema.TIME_STEP),
            }
        )
    return prose.display(out, COLUMNS)


COLUMNS = {
    "train": "train",
    "rollout": "rollout",
    "seeds": "seeds",
    "first": "length, first step",
    "last": "length, last 3 steps",
    "converged": f"converged (≤ {SHORT:.0%} of max) at step",
    "mismatch": "mean |Δ log p|",
    "phantom": "phantom-clip fraction",
    "s_step": "s/step",
}
"""A table row's named fields → the headers ``table`` shows them under."""
ANECDOTE = "One seed per pair: an anecdote, not evidence of a difference between the pairs."
NEVER = "No run of {pairs} reached {short:.0%} of max_tokens within its steps."
PAIR = "{train}/{rollout}"


class BrevityStudy(GridStudy):
    """The stored toy task: options ``pairs`` ([train, rollout] lists), ``seeds``, ``steps``, ``engine``,
    ``output_dir`` and ``RLConfig`` fields in ``overrides``."""

    name = STUDY
    title = "A toy task: reward = −length on SmolLM2"
    question = "Does an FP32 trainer with a BF16 rollout fail to learn to say less, as a public report found?"
    statistic = "mean response length at the first step and over the last 3 steps; seeds as the table says."
    notebook = "04_where_bf16_breaks"
    output_dir = "runs/brevity"
    toy = {
        "pairs": [["fp32", "fp32"]],
        "seeds": [0],
        "steps": 1,
        "engine": "hf",
        "overrides": {"prompts_per_step": 1, "num_generations": 2, "max_completion_length": 8},
    }

    def defaults(self) -> dict:
        return {"pairs": [list(p) for p in PAIRS], "seeds": [0, 1, 2], "steps": 10, "engine": "vllm"}

    def grid(
        self,
        pairs=None,
        seeds=(0, 1, 2),
        steps: int = 10,
        engine: str = "vllm",
        output_dir: str | None = None,
        overrides: dict | None = None,
    ) -> dict:
        out = Path(output_dir or self.output_dir)
        return {
            label(t, r, s): config(t, r, s, out, steps, engine, **(overrides or {}))
            for s in seeds
            for t, r in (pairs or PAIRS)
        }

    def table(self, runs, meta):
        return table(runs, meta)

    def findings(self, runs, meta, rows):
        rows = prose.named(rows, COLUMNS)
        out = [ANECDOTE] if sorted({r["seeds"] for r in rows}) == [1] else []
        never = [PAIR.format_map(r) for r in rows if set(r["converged"].split(", ")) == {"—"}]
        if never:
            out.append(NEVER.format(pairs=", ".join(never), short=SHORT))
        return out

    def figure(self, runs, meta):
        from nbkit.plots import hunt as hunt_plots

        return hunt_plots.brevity_curves(runs, meta)
