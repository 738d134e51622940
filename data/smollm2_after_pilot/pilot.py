"""Issue 51's pilot (not a study run): does SmolLM2-135M-Instruct learn ``number_after`` under FP32 GRPO within 50
steps? FP32 trainer, FP32 vLLM rollouts, 8 prompts x 8 samples, <= 16 tokens, the held-out judge (500 problems x 1
FP32 sample) at step 0, every 10 steps and the last. Seeds 100+ (the study's are 0-4). Run from the project root:

    /work/hrun python data/smollm2_after_pilot/pilot.py LABEL SEED '{"lora": true, "lr": 5e-4}'

writes ``data/smollm2_after_pilot/trained/LABEL`` (the run folder: config.json, metrics.jsonl, summary.json);
``pilot.py report`` prints the README's table from the stored runs."""

import json
import statistics
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


def report() -> str:
    """Per stored run: its settings, the judge's accuracy at each judged step, training reward over the first and
    last 5 steps, and median step / update / rollout seconds (CPU named by the caller's note)."""
    lines = [
        "| run | lora | lr | steps | judge accuracy by step | reward, steps 1-5 | reward, last 5 | median step s "
        "| update s | rollout s |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for run in sorted((HERE / "trained").glob("*/metrics.jsonl")):
        cfg = json.loads((run.parent / "config.json").read_text())
        rows = [json.loads(line) for line in run.read_text().splitlines() if line.strip()]
        steps = [r for r in rows if r.get("step", 0) > 0 and "reward" in r]
        judged = ", ".join(f"{r['step']}: {r['judge/accuracy']:.3f}" for r in rows if "judge/accuracy" in r)
        med = {k: statistics.median(r[k] for r in steps) for k in ("time/step", "time/update", "time/rollout")}
        lines.append(
            f"| {run.parent.name} | {cfg['lora']} | {cfg['lr']:g} | {len(steps)} | {judged} "
            f"| {statistics.fmean(r['reward'] for r in steps[:5]):.3f} "
            f"| {statistics.fmean(r['reward'] for r in steps[-5:]):.3f} "
            f"| {med['time/step']:.1f} | {med['time/update']:.1f} | {med['time/rollout']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1] == "report":
        print(report())
        return
    label, seed, overrides = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    train(RLConfig(**{**BASE, **overrides, "seed": seed, "output_dir": str(HERE / "trained" / label)}))


if __name__ == "__main__":
    main()
