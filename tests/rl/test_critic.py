"""The critic's inputs (issue 50, item 4): by default a value head on the last hidden state, exactly as before; with
``critic_input="hidden+min_logp"`` also a learned value per bin of the running minimum of π_old's log-probs of the
completion's tokens before each state (the feature ``benchmarks/ppo_critic_ceiling.py`` finds predicts the return)."""

import pytest
import torch

from nbkit.records import schema
from nbkit.rl import RLConfig, train
from nbkit.rl.critic import INPUTS, MIN_LOGP_EDGES, Critic, bin_means_ev, running_min_logp
from nbkit.rl.ppo_trainer import MIN_LOGP, PPOTrainer


def _tiny_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return Qwen2ForCausalLM(config).eval()


def test_running_min_is_the_lowest_log_prob_of_the_tokens_before_each_state_by_hand():
    logps = torch.tensor([[-0.1, -2.5, -0.3, -4.0], [-0.01, -0.02, -9.0, -9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])  # row 1 ended after two tokens: its padding is not read
    low = running_min_logp(logps, mask)
    expected = torch.tensor([[0.0, -0.1, -2.5, -2.5], [0.0, -0.01, -0.02, -0.02]])
    torch.testing.assert_close(low, expected, rtol=0, atol=0)
    assert low.dtype == torch.float32 and not low.requires_grad  # a feature of the state, not a path for gradients


def test_the_table_gives_each_state_the_value_of_its_bin():
    critic = Critic(_tiny_qwen2(), "hidden+min_logp")
    assert len(critic.min_logp_values) == len(MIN_LOGP_EDGES) + 1 == 8
    assert float(critic.min_logp_values.detach().abs().sum()) == 0  # zero at the start: the first values are still 0
    with torch.no_grad():
        critic.min_logp_values.copy_(torch.arange(8.0))
    low = torch.tensor([[0.0, -0.1, -2.5, -2.5], [0.0, -0.01, -0.05, -7.0]])
    # bins: (-0.05, 0] = 7, (-0.2, -0.05] = 6, (-3, -2] = 2, below -5 = 0
    torch.testing.assert_close(critic.feature_values(low), torch.tensor([[7.0, 6.0, 2.0, 2.0], [7.0, 7.0, 6.0, 0.0]]))
    assert critic.feature_parameters() == [critic.min_logp_values]


def test_the_bins_ceiling_is_the_explained_variance_of_the_returns_by_their_own_bin_means_by_hand():
    # two sequences of 2 tokens; tokens in bins 7, 7 | 7, 2: bin 7 holds returns 1, 1, 0 (mean 2/3), bin 2 holds 0
    low = torch.tensor([[0.0, -0.01], [0.0, -2.5], [0.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0], [0.0, 0.0], [5.0, 5.0]])
    mask = torch.tensor([[1, 1], [1, 1], [0, 0]])  # the third row is off the mask: not counted
    r = torch.tensor([1.0, 1.0, 0.0, 0.0])
    pred = torch.tensor([2 / 3, 2 / 3, 2 / 3, 0.0])
    expected = 1 - (r - pred).var(unbiased=False) / r.var(unbiased=False)  # = 1 - (2/9 · 3/4) / (1/4) = 1/3
    assert bin_means_ev(low, returns, mask) == pytest.approx(float(expected)) == pytest.approx(1 / 3)
    assert bin_means_ev(torch.zeros(2, 2), returns[:2], mask[:2]) == pytest.approx(0.0)  # one bin: nothing explained


def test_the_default_critic_reads_the_hidden_state_only_with_the_same_parameters_as_before():
    policy = _tiny_qwen2()
    critic = Critic(policy)
    assert critic.inputs == "hidden" and critic.feature_parameters() == []
    assert {k.split(".")[0] for k in critic.state_dict()} == {"backbone", "value_head"}  # checkpoints unchanged
    assert RLConfig().critic_input == "hidden"


def test_an_unknown_critic_input_is_refused_naming_it_and_the_choices():
    with pytest.raises(ValueError, match="critic_input") as err:
        RLConfig(algorithm="ppo", critic_input="hidden+entropy")
    assert "hidden+entropy" in str(err.value) and all(c in str(err.value) for c in INPUTS)
    with pytest.raises(ValueError, match="'hidden\\+entropy' is not one of hidden, hidden\\+min_logp"):
        Critic(_tiny_qwen2(), "hidden+entropy")


def _ppo(tmp_path, **kw) -> RLConfig:
    base = dict(
        algorithm="ppo",
        train_dtype="fp32",
        max_steps=8,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
    )
    return RLConfig(**{**base, "output_dir": str(tmp_path / "run"), **kw})


def test_default_ppo_trains_one_critic_parameter_group_at_the_critic_lr(tmp_path, monkeypatch):
    seen = _spy(monkeypatch)
    rows = train(_ppo(tmp_path, max_steps=4, critic_lr=3e-4), progress=False).rows
    assert [g["lr"] for g in seen["groups"]] == [3e-4]
    assert MIN_LOGP not in seen["batch"]
    assert not any(schema.VALUE_MIN_LOGP_CEILING in r for r in rows)


def test_min_logp_critic_reads_pi_olds_running_minimum_and_its_table_learns_at_its_own_rate(tmp_path, monkeypatch):
    seen = _spy(monkeypatch)
    rows = train(_ppo(tmp_path, critic_input="hidden+min_logp", critic_feature_lr=0.05), progress=False).rows
    groups = seen["groups"]
    assert [g["lr"] for g in groups] == [1e-4, 0.05] and groups[1]["params"] == [seen["table"]]
    batch = seen["batch"]  # the rollout batch: the feature is π_old's own log-probs, run through running_min_logp
    torch.testing.assert_close(
        batch[MIN_LOGP], running_min_logp(batch["old_per_token_logps"], batch["completion_mask"]), rtol=0, atol=0
    )
    assert any(0 < r["reward"] < 1 for r in rows if "reward" in r)  # returns vary: something to learn
    assert float(seen["table"].detach().abs().sum()) > 0  # the table moved from 0
    ev = [r for r in rows if schema.VALUE_EXPLAINED_VARIANCE in r]
    assert len(ev) == 2  # EV still logged once per rollout batch, each with the bins' ceiling on that batch
    assert all(-1e-6 <= r[schema.VALUE_MIN_LOGP_CEILING] <= 1 for r in ev)


def _spy(monkeypatch) -> dict:
    """Keeps the critic's optimizer groups and table, and the first rollout batch, when the trainer closes."""
    seen = {}
    close, score = PPOTrainer.close, PPOTrainer._generate_and_score_completions

    def on_close(self):
        seen["groups"] = [dict(g) for g in self.critic_optimizer.param_groups]
        seen["table"] = self.critic.feature_parameters()[0] if self.critic.feature_parameters() else None
        close(self)

    def on_score(self, inputs):
        out = score(self, inputs)
        seen.setdefault("batch", {k: v for k, v in out.items() if isinstance(v, torch.Tensor)})
        return out

    monkeypatch.setattr(PPOTrainer, "close", on_close)
    monkeypatch.setattr(PPOTrainer, "_generate_and_score_completions", on_score)
    return seen


def test_the_critic_is_gradient_checkpointed_like_the_policy(tmp_path, monkeypatch):
    """Issue 72, item 4: the Trainer checkpoints π when ``train()`` starts, after the critic's copy is made, so the
    critic kept every layer's activations for its loss-time backward. Checkpointed, what its forward holds for
    backward is a fraction of that; the PPO trainer builds it so whenever the run checkpoints π."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    ids = torch.randint(0, 128, (2, 512), generator=torch.Generator().manual_seed(0))

    def held(checkpointing) -> int:
        """Bytes the critic's forward saves for its backward."""
        torch.manual_seed(0)
        critic = Critic(Qwen2ForCausalLM(config), checkpointing=checkpointing).train()
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x.nbytes) or x, lambda x: x):
            loss = critic(ids).pow(2).mean()
        loss.backward()
        return sum(saved)

    whole, checkpointed = held(None), held({})
    assert checkpointed < 0.1 * whole, (checkpointed, whole)
    seen = {}
    close = PPOTrainer.close

    def on_close(self):
        seen["critic"] = self.critic.backbone.is_gradient_checkpointing
        seen["policy"] = self.accelerator.unwrap_model(self.model).is_gradient_checkpointing
        close(self)

    monkeypatch.setattr(PPOTrainer, "close", on_close)
    train(_ppo(tmp_path, max_steps=1, ppo_epochs=1, ppo_minibatches=1), progress=False)
    assert seen == {"critic": True, "policy": True}
