"""RL fine-tuning in FP16 / BF16 / FP32 with TRL, μ from a workbook engine, mismatch logged every step.

    from nbkit.rl import RLConfig, train
    result = train(RLConfig(algorithm="pg_seq_is", train_dtype="fp16", max_steps=40))

Modules: ``algorithms`` (presets), ``config`` (``RLConfig``), ``amp`` (precision policy and audit),
``scaling`` (the FP16 loss scaler, torch's or DeepSpeed's), ``rollout`` (engine behind TRL), ``server`` (a vLLM
server instead, dtype-checked), ``trainer`` (the narrow ``GRPOTrainer`` subclass), ``monitor`` (JSONL, alarm),
``run`` (the entry point; ``nbkit train`` is its command line).
"""

from nbkit.rl.algorithms import ALGORITHMS
from nbkit.rl.config import SANITY_RUN, RLConfig, config_from, runnable_here
from nbkit.rl.run import RunResult, train

__all__ = ["ALGORITHMS", "SANITY_RUN", "RLConfig", "RunResult", "config_from", "runnable_here", "train"]
