"""A small stored study of phantom clipping on ``tiny-arith``: FP16 vs BF16 (trainer and HF rollout engine in the
same dtype), three algorithms, three seeds, a few steps each; ``python -m nbkit.phantom_probe`` re-runs and stores it
as ``data/results/phantom_probe``. One response length (≤ 40 tokens) and one learning rate: a probe, not the hunt."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from nbkit import results
from nbkit.rl import RLConfig, train

ALGORITHMS = ("grpo", "pg_seq_is", "grpo_mu_old")
DTYPES = ("fp16", "bf16")
SEEDS = (0, 1, 2)
COMMAND = "python -m nbkit.phantom_probe"


def config(algorithm: str, dtype: str, seed: int, out: Path) -> RLConfig:
    """One cell's run: tiny-arith sanity set, 4 prompts × 4 samples, 8 steps, HF engine in the training dtype."""
    return RLConfig(dataset="data/tiny_arith_sanity", algorithm=algorithm, train_dtype=dtype, rollout_engine="hf",
                    steps=8, prompts_per_step=4, samples_per_prompt=4, max_tokens=40, seed=seed,
                    output_dir=str(out / f"{algorithm}-{dtype}-s{seed}"))


def main() -> Path:
    start, runs, configs = time.perf_counter(), {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in ALGORITHMS:
            for dtype in DTYPES:
                for seed in SEEDS:
                    cfg = config(algorithm, dtype, seed, Path(tmp))
                    label = Path(cfg.output_dir).name
                    runs[label], configs[label] = train(cfg, progress=False).rows, cfg.to_dict()
    return results.store("phantom_probe", runs, command=COMMAND, wall_seconds=time.perf_counter() - start,
                         configs=configs)


if __name__ == "__main__":
    print(main())
