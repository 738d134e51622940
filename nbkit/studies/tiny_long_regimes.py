"""tiny-long's perfectible sets, its FP16/BF16 sanity test and the cost of an RL step per length regime.

    build_set(regime)       # data/tiny_long_<regime>: the notebook 01 recipe per regime (short, medium, long)
    timing(regimes)         # seconds per RL step per regime (HF engine; engine="vllm")
    sanity(regime)          # GRPO FP16 vs BF16 at one regime, returned (not stored)

Each set is built by ``nbkit.tasks.dataset.build`` (sample N times per problem with tiny-long in fp32, keep the problems
solved in [lo, hi]) on ``long_arith`` problems of one regime; its rows carry a ``steps`` column (the length knob).
"""

from __future__ import annotations

import tempfile
import time
from typing import TYPE_CHECKING

from nbkit.models.toymodels import long_arith
from nbkit.models.toymodels.long_arith import LongArithConfig
from nbkit.records import schema

if TYPE_CHECKING:
    from nbkit.tasks import dataset

# nbkit.rl, nbkit.tasks and nbkit.tasks.dataset (torch) are imported where a set is built or a run trains: the
# catalog reads this module's names (``set_name``, ``max_tokens``) on torch-free paths (RESULTS.md, ``nbkit list``).

MODEL = "tiny-long"
TOKEN_MARGIN = 24
"""Extra response tokens allowed beyond the reference length (a slipped step still ends)."""
POOL_SIZES = {"mid": 400}
"""Problems sampled for a regime's set where not 100: ``mid`` is the harm-transfer study's (``nbkit.studies.
harm_transfer``), whose 50 steps × 16 prompts want more than the ~40 problems a pool of 100 leaves."""


def set_name(regime: str) -> str:
    """Folder name under ``data/`` of a regime's perfectible set."""
    LongArithConfig.regime(regime)  # validates the name
    return f"tiny_long_{regime}"


def max_tokens(regime: str) -> int:
    """Response budget of a regime: the reference length plus ``TOKEN_MARGIN``."""
    return LongArithConfig.regime(regime).response_tokens + TOKEN_MARGIN


def regime_pool(regime: str) -> int:
    """Problems sampled for a regime's perfectible set (``POOL_SIZES``, else 100)."""
    return POOL_SIZES.get(regime, 100)


def build_set(
    regime: str,
    pool_size: int | None = None,
    n_samples: int = 16,
    lo: float = 0.2,
    hi: float = 0.8,
    batch_prompts: int = 8,
    engine: str = "hf",
    seed: int = 0,
    task=None,
    name: str | None = None,
) -> dataset.BuildResult:
    """The perfectible set of one regime, ``data/tiny_long_<regime>`` (notebook 01's recipe, resumable cache) on
    ``pool_size`` problems (None: the regime's own, ``regime_pool``); ``task`` and ``name``: the recipe on another
    pool of the regime's problems, as a set of that name (the harm-transfer study's judge set)."""
    from nbkit import tasks
    from nbkit.tasks import dataset

    n = regime_pool(regime) if pool_size is None else pool_size
    if task is None:
        task = tasks.make_task(source="long_arith", pool_size=n, seed=seed, long_arith=LongArithConfig.regime(regime))
    cfg = dataset.BuildConfig(
        name=name or set_name(regime),
        model=MODEL,
        engine=engine,
        dtype="fp32",
        n_samples=n_samples,
        lo=lo,
        hi=hi,
        seed=seed,
        max_tokens=max_tokens(regime),
        batch_prompts=batch_prompts,
    )
    return dataset.build(task, cfg)


def rl_config(
    regime: str,
    dtype: str = "fp16",
    seed: int = 0,
    steps: int = 30,
    engine: str = "hf",
    output_dir: str = "runs/tiny_long",
    **overrides,
):
    """An RL run on a regime's perfectible set (GRPO by default, trainer and engine in ``dtype``)."""
    from nbkit.rl import RLConfig

    kw = dict(
        model=MODEL,
        dataset=f"data/{set_name(regime)}",
        template="raw",
        grader="arith",
        algorithm="grpo",
        train_dtype=dtype,
        rollout_engine=engine,
        max_steps=steps,
        prompts_per_step=8,
        num_generations=8,
        learning_rate=1e-4,
        max_completion_length=max_tokens(regime),
        seed=seed,
        output_dir=output_dir,
        overwrite=True,
    )
    kw.update(overrides)
    return RLConfig(**kw)


def timing(regimes=tuple(long_arith.REGIMES), engine: str = "hf", steps: int = 3, dtype: str = "fp16") -> dict:
    """Seconds per RL step per regime (mean over ``steps`` steps after the first, which also warms up)."""
    from nbkit import rl

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for regime in regimes:
            cfg = rl_config(regime, dtype, steps=steps + 1, engine=engine, output_dir=f"{tmp}/{regime}")
            t0 = time.perf_counter()
            rows = rl.train(cfg, progress=False).rows
            wall = time.perf_counter() - t0
            secs = [r[schema.TIME_STEP] for r in rows[1:] if schema.TIME_STEP in r]
            out[regime] = {
                "engine": engine,
                "dtype": dtype,
                "prompts_per_step": cfg.prompts_per_step,
                "samples_per_prompt": cfg.num_generations,
                "max_tokens": cfg.max_completion_length,
                "seconds_per_step": round(sum(secs) / len(secs), 2) if secs else None,
                "wall_seconds": round(wall, 1),
                "mean_response_tokens": round(sum(r.get("completions/mean_length", 0) for r in rows) / len(rows), 1),
            }
    return out


def sanity(regime: str = "short", seeds=(0,), steps: int = 30, engine: str = "hf") -> dict:
    """GRPO FP16 vs BF16 on a regime's set (trainer and engine in the same dtype): ``label → rows``, a check before
    a study, not stored (the stored tiny-long study is the hunt, ``nbkit.studies.hunt``)."""
    from nbkit import rl

    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for dtype in ("fp16", "bf16"):
                label = f"{regime}-grpo-{dtype}-s{seed}"
                cfg = rl_config(regime, dtype, seed, steps, engine, output_dir=f"{tmp}/{label}")
                runs[label] = rl.train(cfg, progress=False).rows
    return runs
