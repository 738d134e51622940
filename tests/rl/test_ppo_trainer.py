"""The ``ppo`` preset end to end on the real tiny-arith model (it solves some problems, so rewards vary):
two models with live FP16 scalers, both audited; several updates per rollout batch; critic checkpoints; LoRA."""

import pytest
import torch

from nbkit.rl import ALGORITHMS, RLConfig, algorithms, train
from nbkit.rl.ppo_trainer import CRITIC_FILE, PPOTrainer
from nbkit.rl.trainer import PrecisionGRPOTrainer


def ppo(tmp_path, name="run", **kw) -> RLConfig:
    base = dict(
        algorithm="ppo",
        max_steps=4,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
        ppo_epochs=2,
        ppo_minibatches=2,
        output_dir=str(tmp_path / name),
    )
    return RLConfig(**{**base, **kw})


def test_fp16_ppo_has_live_scalers_for_both_models_and_audits_the_critics_matmuls(tmp_path):
    rows = train(ppo(tmp_path, train_dtype="fp16", max_steps=2), progress=False).rows
    for row in rows:
        assert row["audit/scaler_enabled"] and row["value/scaler_enabled"]  # the policy's and the critic's
        assert row["value/loss_scale"] > 1 and row["loss_scale"] > 1
        assert set(row["audit/critic_matmul_dtypes"]) == {"fp16"} and row["audit/critic_matmul_dtypes"]["fp16"] > 0
        for key in ("ppo/approx_kl", "ppo/clip_fraction", "value/loss", "value/grad_norm"):
            assert key in row
    assert "value/mean" in rows[0] and "value/explained_variance" in rows[0]
    assert "mismatch/kl_sample_train_v1" in rows[0]


def test_bf16_ppo_critic_runs_in_bf16_without_a_scaler(tmp_path):
    row = train(ppo(tmp_path, train_dtype="bf16", max_steps=1), progress=False).rows[0]
    assert set(row["audit/critic_matmul_dtypes"]) == {"bf16"} and not row["value/scaler_enabled"]
    assert row["value/loss_scale"] == 1.0


def test_after_the_first_minibatch_the_ratio_departs_from_one_and_the_clip_fraction_is_reported(tmp_path):
    rows = train(ppo(tmp_path, train_dtype="fp32", max_steps=4, learning_rate=5e-3), progress=False).rows
    assert rows[0]["ppo/approx_kl"] == 0 and rows[0]["ppo/clip_fraction"] == 0  # π = π_old before any update
    assert max(r["ppo/approx_kl"] for r in rows[1:]) > 0  # the same rollout batch, updated weights
    assert max(r["ppo/clip_fraction"] for r in rows[1:]) > 0
    assert "reward" in rows[0] and "reward" not in rows[1]  # one rollout per ppo_epochs × ppo_minibatches steps
    assert "reward" in rows[-1] or len(rows) == 4


def test_resume_restores_the_critic_and_continues_the_same_run(tmp_path):
    # checkpoints fall on rollout-batch boundaries (every ppo_epochs × ppo_minibatches = 4 steps)
    full = train(ppo(tmp_path, "full", train_dtype="fp32", max_steps=8), progress=False).rows
    train(ppo(tmp_path, "cut", train_dtype="fp32", max_steps=4, checkpoint_every=4), progress=False)
    state = torch.load(tmp_path / "cut" / "checkpoint-4" / CRITIC_FILE, weights_only=True)
    assert {"weights", "optimizer", "scaler"} <= set(state) and state["optimizer"]["state"]  # Adam moments kept
    resumed = train(
        ppo(tmp_path, "cut", train_dtype="fp32", max_steps=8, checkpoint_every=4, resume=True), progress=False
    ).rows
    assert len(resumed) == len(full) == 8
    for a, b in zip(full[4:], resumed[4:]):  # the critic's loss after the resume is the uninterrupted run's
        assert a["step"] == b["step"]
        assert b["value/loss"] == pytest.approx(a["value/loss"], rel=1e-4, abs=1e-6)


def test_lora_ppo_trains_only_adapters_and_the_value_head(tmp_path, monkeypatch):
    from nbkit.rl import ppo_trainer

    seen = {}
    close = ppo_trainer.PPOTrainer.close

    def spy(self):
        seen["critic"] = [n for n, p in self.critic.named_parameters() if p.requires_grad]
        seen["policy"] = [n for n, p in self.model.named_parameters() if p.requires_grad]
        close(self)

    monkeypatch.setattr(ppo_trainer.PPOTrainer, "close", spy)
    train(ppo(tmp_path, train_dtype="fp16", max_steps=1, lora=True), progress=False)
    assert seen["policy"] and all("lora_" in n for n in seen["policy"])
    assert any("value_head" in n for n in seen["critic"])
    assert all("lora_" in n or n.startswith("value_head") for n in seen["critic"])


def test_ppo_presets_are_registered_with_a_critic():
    assert ALGORITHMS["ppo"].critic and ALGORITHMS["ppo"].is_mode is None
    assert ALGORITHMS["ppo_token_tis"].critic and ALGORITHMS["ppo_token_tis"].is_mode == "token_truncate"
    assert all(a.critic == (a.trainer == "ppo") for a in ALGORITHMS.values())  # the trainer field, not the name
    assert algorithms.trainer_class(ALGORITHMS["ppo"]) is PPOTrainer
    assert algorithms.trainer_class(ALGORITHMS["grpo"]) is PrecisionGRPOTrainer


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("ppo_epochs", 0, "ppo_epochs must be >= 1, got 0"),
        ("ppo_lambda", 1.5, "ppo_lambda must be in [0, 1], got 1.5"),
        ("ppo_gamma", -0.1, "ppo_gamma must be in [0, 1], got -0.1"),
        ("ppo_value_clip", 0.0, "ppo_value_clip must be > 0, got 0.0"),
        ("critic_lr", -1e-4, "critic_lr must be > 0, got -0.0001"),
        ("ppo_minibatches", 3, "ppo_minibatches=3 must divide"),
        ("checkpoint_every", 3, "checkpoint_every=3 must be a multiple of ppo_epochs × ppo_minibatches = 4"),
    ],
)
def test_bad_ppo_settings_fail_naming_the_value_and_the_range(field, value, needle):
    with pytest.raises(ValueError, match=__import__("re").escape(needle)):
        RLConfig(algorithm="ppo", **{field: value})


def test_ppo_token_tis_weights_the_loss_by_the_engines_mu_on_the_same_batch(tmp_path):
    rows = {}
    for algorithm in ("ppo", "ppo_token_tis"):  # same seed and weights: the same rollouts
        rows[algorithm] = train(
            ppo(
                tmp_path,
                algorithm,
                algorithm=algorithm,
                train_dtype="fp32",
                rollout_dtype="bf16",
                max_steps=1,
                is_cap=1.002,
                seed=3,
            ),
            progress=False,
        ).rows[0]
    plain, tis = rows["ppo"], rows["ppo_token_tis"]
    assert tis["reward"] == plain["reward"] and tis["value/loss"] == plain["value/loss"]  # the same batch, same critic
    assert "is/truncated_fraction" not in plain and tis["is/truncated_fraction"] > 0  # π_old/μ reached C = 1.002
    assert tis["loss"] != plain["loss"]  # μ entered the policy loss


def test_resume_works_where_accelerate_names_the_cpu_cpu_0(tmp_path, monkeypatch):
    """Distributed CPU runs (accelerate's MULTI_CPU) put the process on device ``cpu:0``, a location torch.load's
    ``map_location`` refuses; the critic's checkpoint still loads."""
    from accelerate.state import AcceleratorState

    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cpu:0")
    AcceleratorState._reset_state(True)  # accelerate reads the device once per process
    try:
        train(ppo(tmp_path, "cut", train_dtype="fp32", max_steps=4, checkpoint_every=4), progress=False)
        from accelerate import PartialState

        assert str(PartialState().device) == "cpu:0"
        resumed = train(
            ppo(tmp_path, "cut", train_dtype="fp32", max_steps=8, checkpoint_every=4, resume=True), progress=False
        ).rows
        assert [r["step"] for r in resumed] == list(range(1, 9))
    finally:
        monkeypatch.delenv("ACCELERATE_TORCH_DEVICE")
        AcceleratorState._reset_state(True)


def _tiny_qwen2(layers=2, hidden=64, intermediate=256, vocab=128):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    return Qwen2ForCausalLM(config).eval()


def _peak_bytes(fn) -> int:
    """Peak bytes of tensors alive at once while ``fn`` runs (torch's own ``MemTracker``, on any device)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class Root(torch.nn.Module):  # one root call: the critic inside it may run several times (one per chunk)
        def forward(self):
            fn()

    tracker = MemTracker()
    with tracker:
        Root()()
    return sum(v["Total"] for v in tracker.get_tracker_snapshot("peak").values())


def test_the_critics_rollout_values_are_computed_a_micro_batch_at_a_time(monkeypatch):
    """Issue 54, item 2: at rollout time the critic scored the process's whole generation batch in one forward (512
    sequences of ≈ 8 k tokens in the gpu profile). Chunked by the micro-batch, the values are the same and the peak
    memory is that of one micro-batch's forward, not the batch's."""
    from types import SimpleNamespace

    from nbkit.rl.critic import Critic

    trainer = PPOTrainer.__new__(PPOTrainer)
    trainer.critic = Critic(_tiny_qwen2())
    nn = torch.nn
    nn.init.normal_(trainer.critic.value_head.weight)  # a nonzero head, so equal values mean equal hidden states
    trainer.run = SimpleNamespace(train_dtype="fp32")
    trainer.accelerator = SimpleNamespace(device=torch.device("cpu"))
    g = torch.Generator().manual_seed(1)
    batch_rows, micro, prompt, completion = 16, 2, 24, 104
    batch = {
        "prompt_ids": torch.randint(0, 128, (batch_rows, prompt), generator=g),
        "completion_ids": torch.randint(0, 128, (batch_rows, completion), generator=g),
        "prompt_mask": torch.ones(batch_rows, prompt, dtype=torch.long),
        "completion_mask": torch.ones(batch_rows, completion, dtype=torch.long),
    }
    batch["prompt_mask"][::3, :5] = 0  # left padding on some rows
    calls = []
    forward = trainer.critic.forward
    monkeypatch.setattr(trainer.critic, "forward", lambda ids, attn=None: calls.append(len(ids)) or forward(ids, attn))
    with torch.no_grad():
        whole = trainer._values(batch)
        calls.clear()
        chunked = trainer._values(batch, rows=micro)
        assert calls == [micro] * (batch_rows // micro)
        torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-5)
        one = {k: v[:micro] for k, v in batch.items()}
        single = _peak_bytes(lambda: trainer._values(one))
        peak = _peak_bytes(lambda: trainer._values(batch, rows=micro))
        unchunked = _peak_bytes(lambda: trainer._values(batch))
    values_bytes = batch_rows * completion * 4 * 2  # the parts and their concatenation
    assert peak <= 1.25 * single + values_bytes, (peak, single)
    assert unchunked > 4 * peak  # what the one forward over the batch held (the defect)


def test_the_rollout_scores_the_critic_with_the_trainers_micro_batch():
    import inspect

    source = inspect.getsource(PPOTrainer._generate_and_score_completions)
    assert "self._values(out, rows=self.args.per_device_train_batch_size)" in source
