"""Can PPO's critic learn tiny-arith's return when it is given what predicts it? (issue 50, item 4)

Every stored PPO run (``nbkit.studies.ppo``) has a critic whose explained variance stays ≈ 0: its value head reads
only the last hidden state, which a linear probe finds explains < 1 % of the correctness return
(``benchmarks/ppo_critic_ceiling.py``). The same benchmark finds E[R | the lowest log π of a sampled token so far]
explains 0.268 on held-out rollouts of the initial policy. This study gives the critic that feature
(``RLConfig.critic_input`` ``hidden+min_logp``: a learned value per bin of the running minimum, ``nbkit.rl.critic``)
in real PPO runs and reads whether its explained variance clears 0.2 at the end of the run.

The rule (``RULE_TEXT``), fixed in this module and committed before any of its runs trained:

- **Runs**: the stored PPO study's FP16 run (``ppo.base_config``: tiny-arith sanity set, HF rollouts, 16 prompts × 8
  samples, 2 epochs × 2 minibatches, lr 2e-4, 100 steps) with the stored study's ``critic_lr`` 1e-3, and
  ``critic_input`` ``hidden+min_logp`` with ``critic_feature_lr`` 3e-2; seeds 0, 1, 2; one worker.
- **Outcome per seed**: the mean of ``value/explained_variance`` over the rollout batches logged in the run's last 20
  optimiser steps (steps 81–100: 5 batches, each measured before the critic trains on it; ``TAIL``).
- **Verdict**: the critic *learns* iff the outcome is > 0.2 in all 3 seeds; otherwise it *does not*; fewer than 3
  seeds stored: no verdict.
- **Why (descriptive, stated first)**: per seed, the bins' in-batch ceiling (``value/min_logp_ceiling_ev``: the EV
  of each batch's returns by their own per-bin means) over the same steps. A seed at or below 0.2 reads "the feature
  stopped predicting" when its ceiling is at or below 0.2 too, else "the critic did not fit the feature". The stored
  hidden-only run of the same seed (``ppo_tiny_arith``, trained on another CPU) is shown beside, not contrasted.
- **Stopping**: read once, after the third seed.
"""

from __future__ import annotations

from nbkit import results
from nbkit.records import runlog, schema
from nbkit.studies import prereg
from nbkit.studies.base import add_run
from nbkit.studies.ppo_recipe import STUDY as PPO_STUDY
from nbkit.studies.ppo_recipe import TAIL, base_config

STUDY = "ppo_critic_tiny_arith"
"""The stored study's folder name under ``data/results``."""
OUTPUT_DIR = f"runs/{STUDY}"
"""Where the study's run folders go."""
SEEDS = (0, 1, 2)
DTYPE = "fp16"
STEPS = 100
CRITIC = {"critic_lr": 1e-3, "critic_input": "hidden+min_logp", "critic_feature_lr": 3e-2}
"""The critic's settings: the stored PPO study's learning rate and the running-minimum table with its own rate."""
THRESHOLD = 0.2
"""The explained variance every seed must exceed over the last ``TAIL`` steps for the critic to *learn*."""
LABEL = "ppo-fp16-min_logp-s{seed}"

RULE_TEXT = (
    "runs: ppo_tiny_arith's stored FP16 run (ppo.base_config, 100 steps, critic_lr 1e-3) with critic_input "
    "hidden+min_logp and critic_feature_lr 3e-2, seeds 0, 1, 2, one worker; outcome per seed: mean "
    "value/explained_variance over the rollout batches logged in the last 20 optimiser steps (steps 81-100); the "
    "critic learns iff the outcome is > 0.2 in all 3 seeds, else it does not (fewer than 3 seeds: no verdict); "
    "descriptive: per seed the bins' in-batch ceiling (value/min_logp_ceiling_ev) over the same steps, a seed at or "
    "below 0.2 reading 'the feature stopped predicting' when its ceiling is at or below 0.2 too, else 'the critic did "
    "not fit the feature', and the stored hidden-only run of the same seed beside; read once after the third seed"
)
RULE_RECORD = {"commit": "ce55d973eab37082529f72b7e9f20eecdafaf6b1", "time": "2026-11-27T21:17:31+00:00"}
"""The commit that fixed ``RULE_TEXT`` and its time, before any run of the study."""


def tail_mean(rows: list[dict], key: str, window: int = TAIL) -> float | None:
    """Mean of ``key`` over the rows logged in the run's last ``window`` optimiser steps (step > last − window);
    None when none logged it (NaN values skipped)."""
    last = max((r.get(schema.STEP, 0) for r in rows), default=0)
    xs = [
        r[key]
        for r in rows
        if r.get(schema.STEP, 0) > last - window and isinstance(r.get(key), (int, float)) and r[key] == r[key]
    ]
    return sum(xs) / len(xs) if xs else None


def reading(ev: float | None, ceiling: float | None) -> str:
    """The rule's per-seed reading of the outcome and the bins' ceiling."""
    if ev is None:
        return "no explained variance logged"
    if ev > THRESHOLD:
        return f"above {THRESHOLD}"
    if ceiling is not None and ceiling <= THRESHOLD:
        return "the feature stopped predicting"
    return "the critic did not fit the feature"


def verdict(outcomes: dict[int, float | None]) -> str:
    """``learns``, ``does not learn`` or ``no verdict`` (fewer than ``len(SEEDS)`` seeds with an outcome)."""
    got = [v for s, v in outcomes.items() if s in SEEDS and v is not None]
    if len(got) < len(SEEDS):
        return "no verdict"
    return "learns" if all(v > THRESHOLD for v in got) else "does not learn"


def hidden_only(root=results.RESULTS) -> dict[int, float]:
    """``seed → outcome`` of the stored hidden-only FP16 PPO runs (``ppo_tiny_arith``); {} when not stored."""
    if not (results.study_dir(PPO_STUDY, root) / results.CARD).is_file():
        return {}
    configs = results.card(PPO_STUDY, root)["configs"]["runs"]
    out = {}
    for label, rows in results.load(PPO_STUDY, root).items():
        coords = runlog.coords(configs[label])
        if coords["dtype"] == DTYPE and (v := tail_mean(rows, schema.VALUE_EXPLAINED_VARIANCE)) is not None:
            out[coords["seed"]] = v
    return out


PANELS = (
    (schema.VALUE_EXPLAINED_VARIANCE, "critic's explained variance (before each batch's update)", False),
    (schema.VALUE_MIN_LOGP_CEILING, "the bins' in-batch ceiling of explained variance", False),
    (schema.VALUE_LOSS, "critic's clipped value loss", True),
    ("accuracy", "training accuracy", False),
)


class PPOCriticStudy(prereg.PreRegistered):
    """The pre-registered critic study: ``seeds``, ``steps``, ``output_dir`` and ``overrides`` (``RLConfig``
    fields) as options."""

    name = STUDY
    rule_text = RULE_TEXT
    rule_record = RULE_RECORD
    title = "A PPO critic given the running minimum of log π: does it learn?"
    question = (
        "Given the feature the ceiling benchmark finds predicts tiny-arith's return (the lowest log π of the "
        "completion's tokens so far: EV 0.268 on held-out rollouts in benchmarks/ppo_critic_ceiling.py), does FP16 PPO's critic reach an explained variance > 0.2 over "
        "the last 20 steps in all 3 seeds?"
    )
    statistic = (
        "per seed: mean of value/explained_variance over the rollout batches of steps 81–100 (each measured before "
        "the critic trains on it), and of the bins' in-batch ceiling value/min_logp_ceiling_ev over the same batches."
    )
    notebook = "03_rl_training"
    output_dir = OUTPUT_DIR
    toy = {
        "seeds": [0],
        "steps": 4,
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8},
    }

    def defaults(self) -> dict:
        return {"seeds": list(SEEDS), "steps": STEPS}

    def grid(self, seeds=SEEDS, steps: int = STEPS, output_dir: str | None = None, overrides: dict | None = None):
        base = base_config(
            max_steps=steps,
            output_dir=output_dir or self.output_dir,
            train_dtype=DTYPE,
            **{**CRITIC, **(overrides or {})},
        )
        out = {}
        for s in seeds:
            add_run(out, base, LABEL.format(seed=s), seed=s)
        return out

    def coords(self, config: dict) -> dict:
        return {**runlog.coords(config), "critic_input": config.get("critic_input", "hidden")}

    def outcomes(self, runs, meta) -> dict[int, dict]:
        """``seed → {"ev", "ceiling"}`` over the last ``TAIL`` steps of each run."""
        return {
            int(meta[label]["seed"]): {
                "ev": tail_mean(rows, schema.VALUE_EXPLAINED_VARIANCE),
                "ceiling": tail_mean(rows, schema.VALUE_MIN_LOGP_CEILING),
            }
            for label, rows in runs.items()
        }

    def table(self, runs, meta):
        beside = hidden_only()
        out = []
        for seed, o in sorted(self.outcomes(runs, meta).items()):
            label = next(k for k in runs if int(meta[k]["seed"]) == seed)
            ev = [r[schema.VALUE_EXPLAINED_VARIANCE] for r in runs[label] if schema.VALUE_EXPLAINED_VARIANCE in r]
            out.append(
                {
                    "seed": seed,
                    "steps": schema.optimiser_steps(runs[label]),
                    f"EV, last {TAIL} steps": _num(o["ev"]),
                    f"bins' ceiling, last {TAIL} steps": _num(o["ceiling"]),
                    "reading": reading(o["ev"], o["ceiling"]),
                    "EV per rollout batch (first, middle, last)": [_num(ev[i]) for i in (0, len(ev) // 2, -1)]
                    if ev
                    else [],
                    f"hidden-only stored run, EV last {TAIL} steps": _num(beside.get(seed)),
                }
            )
        return out

    def findings(self, runs, meta, rows):
        return [sentence(self.outcomes(runs, meta))]

    def figure(self, runs, meta):
        from nbkit.plots import training

        fig = training.training_curves(runs, panels=PANELS)
        fig.update_layout(title="PPO critic with the running minimum of log π (FP16, tiny-arith)")
        return fig


def _num(x):
    return None if x is None else float(f"{x:.3g}")


def sentence(outcomes: dict[int, dict]) -> str:
    """The rule's verdict in one sentence with each seed's outcome, ceiling and reading."""
    v = verdict({s: o["ev"] for s, o in outcomes.items()})
    each = "; ".join(
        f"seed {s}: EV {_fmt(o['ev'])} (bins' ceiling {_fmt(o['ceiling'])}: {reading(o['ev'], o['ceiling'])})"
        for s, o in sorted(outcomes.items())
    )
    head = {
        "learns": f"The critic learns: its explained variance over the last {TAIL} steps is > {THRESHOLD} in all "
        f"{len(SEEDS)} seeds",
        "does not learn": f"The critic does not learn by the rule (EV > {THRESHOLD} over the last {TAIL} steps in "
        f"all {len(SEEDS)} seeds)",
        "no verdict": f"No verdict: {len(outcomes)} of {len(SEEDS)} seeds stored",
    }[v]
    return f"{head}: {each}."


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"
