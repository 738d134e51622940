"""Run profiles: the parameters every notebook gets under each profile (papermill injects them).

- ``smoke``: what the tests run (every notebook, small parameters, minutes in total).
- ``cpu``: the default study on one CPU machine (the README's main job).
- ``cpu-full``: the ``cpu`` study plus every RL algorithm in both precisions (hours on a CPU).
- ``gpu``: the paper's own setting (R1-Distill-Qwen-1.5B, vLLM, the sanity set) for GPU machines.

Keys are notebook file stems; a notebook missing from a profile runs with its own defaults there, but every
notebook must have a ``smoke`` entry (a test enforces it) so that CI executes it.
"""

from __future__ import annotations

from nbkit.studies.dose_response import LADDER as DOSE_RESPONSE_FORMATS

PROFILES: dict[str, dict[str, dict]] = {
    "smoke": {
        "00_precision_primer": {"n_random": 20_000, "max_length": 512},
        "01_build_dataset": {  # 8 problems x 4 samples, window [0, 1] so something is kept; not the shipped set
            "pool_size": 8,
            "n_samples": 4,
            "lo": 0.0,
            "hi": 1.0,
            "batch_prompts": 4,
            "resume": False,
            "engine_kwargs": {"batch_size": 32, "progress": False},
            "name": "tiny_arith_smoke",
            "out_dir": ".cache/smoke/tiny_arith_smoke",
        },
        "02_mismatch_analysis": {  # tiny-arith only, HF engine, 8 prompts x 2 samples: well under a minute
            "models": ["tiny-arith"],
            "engine": "hf",
            "n_prompts": 8,
            "max_tokens": 40,
            "n_boot": 100,
            "model_overrides": {},
            "moe_n_prompts": 8,
            "moe_samples_per_prompt": 2,  # routing flips on tiny-moe-arith: a few seconds
            "lengthlaw_n_prompts": 4,  # length law: the stored run + seconds live (tiny-arith, HF, 40 tokens)
            "anatomy_engine": "hf",
            "anatomy_dtypes": ["fp16"],
            "anatomy_n_prompts": 2,  # the anatomy: seconds
            "anatomy_max_tokens": 16,
            "anatomy_sequences": 2,
            "anatomy_n_boot": 20,
        },
        "03_rl_training": {  # 2 steps of one FP16/BF16 pair on 2 prompts x 2 samples with the HF engine
            "algorithms": ["pg_seq_is"],
            "seeds": [0],
            "output_dir": ".cache/smoke/03_rl_training",
            "config_overrides": {
                "max_steps": 2,
                "prompts_per_step": 2,
                "num_generations": 2,
                "rollout_engine": "hf",
                "checkpoint_every": 0,
                "overwrite": True,
            },  # every smoke run replaces the last one
            "ppo_steps": 4,
            "ppo_output_dir": ".cache/smoke/03_ppo",  # PPO: one rollout batch (2 epochs x 2 minibatches)
        },
        "04_where_bf16_breaks": {  # the stored grid + one 1-step FP16/BF16 twin on tiny-long's short regime
            "live_lrs": [1e-4],
            "live_algorithms": ["grpo_mu_old"],
            "live_steps": 1,
            "live_prompts_per_step": 2,
            "live_samples_per_prompt": 2,
            "output_dir": ".cache/smoke/04_hunt",
        },
        "05_precision_ablation": {},  # the stored study only: seconds
        "06_dose_response": {  # a 2-format ladder on 4 x 2 answers + one 1-step run per format, judge off
            "ladder_formats": ["fp32", "mxfp4"],
            "ladder_n_prompts": 4,
            "ladder_samples_per_prompt": 2,
            "ladder_n_boot": 50,
            "live_formats": ["fp32", "mxfp4"],
            "live_corrections": ["icepop"],
            "live_steps": 1,
            "live_judge_every": 0,
            "output_dir": ".cache/smoke/06_dose_response",
            "config_overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8},
        },
    },
    "cpu": {
        "00_precision_primer": {},
        # the notebook's recipe (1,000 tiny-arith problems, N=40, [0.2, 0.8]) written under reports/, so the main job
        # leaves the shipped data/tiny_arith_sanity (which notebook 03 trains on) untouched; a rebuild reproduced it
        # (500 problems instead of 1,000 keeps the main job within its budget; the shipped set used the 1,000)
        "01_build_dataset": {"out_dir": "reports/datasets/tiny_arith_sanity", "pool_size": 500},
        # the notebook's defaults (smollm2-135m and tiny-arith, both through vLLM: HF generate would share the trainer's
        # recipe on fp32-accumulate CPUs, benchmarks/bench_grid_engine.py), SmolLM2 on 8 prompts x 2 instead of 12 x 2:
        # its nine teacher-forced π passes and three engine start-ups are most of the main job's offline time
        "02_mismatch_analysis": {"n_prompts": 8},
        # grpo FP16/BF16 on tiny-arith, 3 seeds each, 16x8, vLLM rollouts (the engine's own kernels: the mismatch is
        # the point): 50 steps, where the stored 100-step runs (data/results/ablation_tiny_arith) have risen from
        # ~0.65 to ~0.9-0.95, so the bar is 0.9 here (cpu-full: the notebook's 100 steps and 0.95); PPO 20 steps.
        # No gradient checkpointing: a 1 M model's activations are small, and the update skips one forward per layer
        # (the same numbers: tests/rl/test_rl_fields.py)
        "03_rl_training": {
            "config_overrides": {"max_steps": 50, "overwrite": True, "gradient_checkpointing": False},
            "target_accuracy": 0.9,
            "ppo_steps": 20,
        },
        # the stored hunt grid (data/results/hunt_tiny_long) + a live slice: short responses, lr 1e-3, grpo and
        # grpo_mu_old, FP16/BF16, one seed
        "04_where_bf16_breaks": {
            "live_steps": 8
        },  # the live slice's lesson (lr 1e-3 wrecks a run at once) needs 8 steps
        # the stored 4-pair grid (data/results/ablation_tiny_arith) + a live BF16-train/FP32-rollout slice
        "05_precision_ablation": {"live_pairs": [["bf16", "fp32"]]},
        # the stored dose-response study + the offline ladder and a live FP32 / e8m1 pair of 20 steps (a few minutes)
        "06_dose_response": {},
    },
    "gpu": {
        "03_rl_training": {  # the paper's sanity test: R1-Distill-Qwen-1.5B on its 1,460 MATH problems
            "algorithms": ["grpo", "pg_seq_is"],
            "torch_threads": 0,
            "seeds": [0],  # one seed per GPU-day; add seeds before comparing precisions
            "config_overrides": {
                "model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
                "dataset": "sanity_math_1460",
                "template": "r1_distill_qwen",
                "grader": "r1_distill",
                "max_steps": 1000,
                "prompts_per_step": 64,
                "learning_rate": 1e-6,
                "max_completion_length": 8192,
                "checkpoint_every": 50,
                # one GPU in the notebook's kernel, vLLM colocated (30 %): each run's micro-batches and vLLM sleep are
                # chosen from the memory estimate when it starts (nbkit.rl.sizing; the table: nbkit.workbook.gpu_budget)
            },
            # PPO with a critic in the paper's setting (vLLM rollouts), no stored CPU study next to it
            "ppo_steps": 1000,
            "ppo_rollout_engine": "vllm",
            "ppo_critic_lr": 1e-5,
            "ppo_stored": "",
            "ppo_output_dir": "runs/gpu/03_ppo",
            # the critic and its AdamW state add ~26 GiB (nbkit.rl.memory): vLLM gets 15 % (at 30 % not one
            # sequence fits an 80 GiB GPU); micro-batches and sleep sized at start-up (nbkit.rl.sizing)
            "ppo_overrides": {"vllm_gpu_memory_utilization": 0.15},
        },
        "04_where_bf16_breaks": {  # the hunt grid live with vLLM rollouts and longer runs (tiny-long on one GPU)
            "stored_study": "",
            "live_lengths": ["short", "medium", "long"],
            "live_lrs": [1e-4, 3e-4, 1e-3],
            "live_algorithms": ["grpo", "pg_seq_is", "grpo_mu_old"],
            "live_seeds": [0, 1, 2],
            "live_steps": 200,
            "live_prompts_per_step": 16,
            "live_samples_per_prompt": 8,
            "rollout_engine": "vllm",
            "output_dir": "runs/gpu/04_hunt",
        },
        "05_precision_ablation": {  # the paper's ablation grid on its sanity test, one seed per GPU-day
            "stored_study": "",
            "live_pairs": [["bf16", "bf16"], ["bf16", "fp32"], ["fp16", "fp16"], ["fp32", "fp32"]],
            "live_steps": 1000,
            "live_prompts_per_step": 64,  # one seed, 8 samples per prompt: the defaults
            "output_dir": "runs/gpu/05_precision_ablation",
            "config_overrides": {
                "model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
                "dataset": "sanity_math_1460",
                "template": "r1_distill_qwen",
                "grader": "r1_distill",
                "learning_rate": 1e-6,
                "max_completion_length": 8192,
                # micro-batches and vLLM sleep sized at start-up (nbkit.rl.sizing; the FP32
                # pair's activations are twice BF16's: nbkit.workbook.gpu_budget)
                "checkpoint_every": 50,
            },
        },
        "00_precision_primer": {},
        "01_build_dataset": {  # the paper's recipe: R1-Distill-Qwen-1.5B, 40 samples, [0.2, 0.8], on MATH-500
            "model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
            "engine": "vllm",
            "dtype": "bf16",
            "engine_kwargs": {"max_model_len": 10240, "gpu_memory_utilization": 0.85, "enforce_eager": False},
            "source": "eval/math",
            "template": "r1_distill_qwen",
            "pool_size": 0,  # N, window, sampling: defaults
            "max_tokens": 8192,
            "batch_prompts": 128,
            "name": "math500_r1_distill_sanity",
        },
        "02_mismatch_analysis": {  # the paper's Fig. 5 setting: R1-Distill-Qwen-1.5B, vLLM, MATH-500, long responses
            "models": ["deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"],
            "engine": "vllm",
            "prompt_source": "eval/math",
            "n_prompts": 128,
            "samples_per_prompt": 4,
            "max_tokens": 4096,
            "model_overrides": {},
            "device": "cuda",
            "shortest": False,
            "instruction": " Please reason step by step, and put your final answer within \\boxed{}.",
            "engine_kwargs": {"max_model_len": 6144, "gpu_memory_utilization": 0.5, "enforce_eager": False},
            # the length law in the paper's setting (Fig. 5): 8k-token responses, BF16/FP16/FP32 (cast and autocast π)
            "lengthlaw_stored": "",
            "lengthlaw_model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
            "lengthlaw_dtypes": ["bf16", "fp16", "fp32"],
            "lengthlaw_n_prompts": 64,
            "lengthlaw_samples_per_prompt": 4,
            "lengthlaw_max_tokens": 8192,
            "lengthlaw_engine": "vllm",
            "lengthlaw_engine_kwargs": {"max_model_len": 10240, "gpu_memory_utilization": 0.5, "enforce_eager": False},
        },
    },
}

PROFILES["cpu-full"] = {
    **PROFILES["cpu"],
    "02_mismatch_analysis": {  # + the long length law live (what python -m nbkit.offline.lengthlaw stores): 1,024 tokens
        "lengthlaw_model": "smollm2-135m",
        "lengthlaw_engine": "auto",
        "lengthlaw_prompt_source": "eval/math",
        "lengthlaw_dtypes": ["bf16", "fp16", "fp32"],
        "lengthlaw_n_prompts": 12,
        "lengthlaw_max_tokens": 1024,
    },
    "03_rl_training": {  # every algorithm in both precisions, 3 seeds each, same budget per run as the cpu pair
        "algorithms": ["grpo", "dr_grpo", "grpo_token_tis", "grpo_seq_mis", "gspo", "pg_seq_is"],
        "output_dir": "reports/runs/03_rl_training_full",
        "ppo_seeds": [0, 1, 2],
        "ppo_steps": 100,
        "ppo_output_dir": "reports/runs/03_ppo_full",  # the stored study live
    },
    "04_where_bf16_breaks": {  # the whole hunt grid trained live (what `nbkit study hunt_tiny_long` stores): ~1 h here
        "stored_study": "",
        "live_lengths": ["short", "medium", "long"],
        "live_lrs": [1e-4, 1e-3],
        "live_algorithms": ["grpo", "pg_seq_is", "grpo_mu_old"],
        "live_seeds": [0, 1, 2],
        "output_dir": "reports/runs/04_hunt",
    },
    "06_dose_response": {  # the whole dose-response grid trained live (what `nbkit study dose_response_tiny_arith` stores)
        "stored_study": "",
        "live_formats": list(DOSE_RESPONSE_FORMATS),
        "live_seeds": [0, 1, 2, 3, 4],
        "live_steps": 50,
        "live_corrections": ["token_tis", "seq_mis", "icepop", "mu_old"],
        "output_dir": "reports/runs/06_dose_response",
    },
    "05_precision_ablation": {  # the full grid trained live (what `nbkit study ablation_tiny_arith` stores), 3 seeds each
        "stored_study": "",
        "live_pairs": [["bf16", "bf16"], ["bf16", "fp32"], ["fp16", "fp16"], ["fp32", "fp32"]],
        "live_steps": 100,
        "live_seeds": [0, 1, 2],
        "output_dir": "reports/runs/05_precision_ablation",
    },
}
