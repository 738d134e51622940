"""Issue 51's pilot (not a study run): does SmolLM2-135M-Instruct learn ``number_after`` under FP32 GRPO within 50
steps? FP32 trainer, FP32 vLLM rollouts, 8 prompts x 8 samples, <= 16 tokens, the held-out judge (500 problems x 1
FP32 sample) at step 0, every 10 steps and the last. Seeds 100+ (the study's are 0-4). Run from the project root:

    /work/hrun python data/smollm2_after_pilot/pilot.py LABEL SEED '{"lora": true, "lr": 5e-4}'

writes ``data/smollm2_after_pilot/runs/LABEL`` (the run folder: config.json, metrics.jsonl, summary.json)."""

import json
import sys
from pathlib import Path

from nbkit.rl import RLConfig
from nbkit.rl.run import train

HERE = Path(__file__).parent
BASE = dict(
    model="smollm2-135m",
    dataset="data/smollm2_after_sanity",
    template="smol_after",
    grader="first_int",
    algorithm="grpo_mu_old",
    train_dtype="fp32",
    rollout_dtype="fp32",
    rollout_engine="vllm",
    steps=50,
    prompts_per_step=8,
    samples_per_prompt=8,
    max_tokens=16,
    judge_every=10,
    judge_set="data/smollm2_after_heldout",
    checkpoint_every=0,
    shared_prefix=True,
    gradient_checkpointing=False,
    vllm_block_size=32,
)


def main() -> None:
    label, seed, overrides = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    train(RLConfig(**{**BASE, **overrides, "seed": seed, "output_dir": str(HERE / "runs" / label)}))


if __name__ == "__main__":
    main()
