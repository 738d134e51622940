"""Held-out problem sets for the RL judge (``nbkit.rl.judge``): problems of a task its model never trained on.

``build_tiny_arith`` makes ``data/tiny_arith_heldout``, the judge set of the tiny-arith sanity test: additions
drawn with another seed than every problem the model has seen (its SFT problems, which the training pool
``tiny_arith_sanity`` was drawn from too), kept by the same rule as the training set (pass rate over 40 FP32
samples in [0.2, 0.8], ``nbkit.tasks.dataset.build``), so held-out accuracy measures the trained skill on problems of
the training set's difficulty, and none of them was ever trained on::

    python -m nbkit.tasks.heldout            # ~2-4 minutes on 2 CPU cores

``number_after_judge_problems`` picks the problems of ``data/smollm2_after_heldout``, SmolLM2-135M-Instruct's judge
set (issue 51): ``number_after`` problems of another seed outside the training set's reserve.
"""

from __future__ import annotations

from dataclasses import replace

from nbkit import tasks
from nbkit.models.toymodels import arith, number_after, tiny_arith
from nbkit.runtime import paths
from nbkit.tasks import dataset

JUDGE_SEED = 1
"""Seed of the held-out pool's generator and sampler (the model's SFT and the training pool use seed 0)."""
POOL_SIZE = 600
"""Additions drawn before the seen ones are removed and the pass-rate window is applied (~58 % are kept)."""


def seen_tiny_arith_problems(
    recipe: tiny_arith.TinyArithConfig = tiny_arith.TinyArithConfig(), train_pool: str = "data/tiny_arith_sanity"
) -> list[dict]:
    """Every problem tiny-arith has seen: its SFT problems (the shipped recipe's ``steps × batch_size`` additions
    of seed ``recipe.seed``) and every problem of the training set's pool (kept or not)."""
    import pyarrow.parquet as pq

    sft = arith.make_problems(recipe.steps * recipe.batch_size, arith.ArithConfig(recipe.digits), seed=recipe.seed)
    pool = pq.read_table(paths.ROOT / train_pool / "pool.parquet").to_pylist()
    return sft + pool


def unseen(problems: list[dict], seen: list[dict]) -> list[dict]:
    """``problems`` without those whose text appears in ``seen``."""
    texts = {p["problem"] for p in seen}
    return [p for p in problems if p["problem"] not in texts]


def build_tiny_arith(
    name: str = "tiny_arith_heldout",
    pool_size: int = POOL_SIZE,
    seed: int = JUDGE_SEED,
    train_set: str = "data/tiny_arith_sanity",
    progress: bool = True,
) -> dataset.BuildResult:
    """Build the tiny-arith judge set with the training set's own sampling settings (read from its card)."""
    card = dataset.load_card(paths.ROOT / train_set)
    task = tasks.make_task(
        tasks.TaskConfig(source="arith", pool_size=pool_size, seed=seed, template="raw", grader="arith")
    )
    task = replace(task, problems=unseen(task.problems, seen_tiny_arith_problems(train_pool=train_set)))
    cfg = dataset.BuildConfig(
        name=name,
        model=card["model"],
        engine=card["engine"],
        dtype=card["dtype"],
        n_samples=card["n_samples"],
        lo=card["window"][0],
        hi=card["window"][1],
        seed=seed,
        max_tokens=card["sampling"]["max_tokens"],
        temperature=card["sampling"]["temperature"],
        top_p=card["sampling"]["top_p"],
    )
    return dataset.build(task, cfg, progress=progress)


NUMBER_AFTER_RESERVE = 400
"""The first problems of the seed-0 ``number_after`` pool (``make_problems(NUMBER_AFTER_RESERVE, seed=0)``) kept for
SmolLM2's training set (``data/smollm2_after_sanity``, 256 of them built): never judged, so the training pool may
grow up to them without touching the judge set."""


def number_after_judge_problems(
    count: int,
    train_pool: list[dict],
    seed: int = JUDGE_SEED,
    reserve: int = NUMBER_AFTER_RESERVE,
    cfg: number_after.NumberAfterConfig = number_after.NumberAfterConfig(),
) -> list[dict]:
    """``count`` seeded ``number_after`` problems (with ``source_index``, their place in seed ``seed``'s draw of
    every number) outside the first ``reserve`` problems of seed 0; ValueError when a problem of ``train_pool`` lies
    outside that reserve (the judge set could then share it) or fewer than ``count`` problems are left."""
    reserved = number_after.make_problems(reserve, cfg, seed=0)
    outside = unseen(train_pool, reserved)
    if outside:
        raise ValueError(
            f"{len(outside)} training problems lie outside the judge's reserve of {reserve} "
            f"(e.g. {outside[0]['problem']!r}): raise reserve"
        )
    every = number_after.make_problems(len(cfg.numbers()), cfg, seed=seed)
    left = unseen([{**p, "source_index": i} for i, p in enumerate(every)], reserved)
    if count > len(left):
        raise ValueError(f"count must be at most {len(left)} (numbers of {cfg} outside the reserve), got {count!r}")
    return left[:count]


if __name__ == "__main__":
    result = build_tiny_arith()
    print(f"{result.path}: kept {len(result.kept)} of {len(result.records)} unseen problems")
