"""PPO's per-token math (nbkit.rl.gae) against hand-computed cases, and PPO's config checks."""

import pytest
import torch

from nbkit.rl import gae as G


def test_gae_matches_a_hand_computed_case_with_gamma_and_lambda_below_one():
    # one sequence of 3 tokens, values v = (0.5, 0.2, 0.4), outcome reward 1 on the last token, γ=0.9, λ=0.5
    v = torch.tensor([[0.5, 0.2, 0.4, 9.0]])  # the 4th position is padding: its value must be ignored
    mask = torch.tensor([[1, 1, 1, 0]])
    d2 = 1.0 - 0.4  # last token: r + γ·0 - v
    d1 = 0.9 * 0.4 - 0.2
    d0 = 0.9 * 0.2 - 0.5
    a2 = d2
    a1 = d1 + 0.9 * 0.5 * a2
    a0 = d0 + 0.9 * 0.5 * a1
    adv, ret = G.gae(v, torch.tensor([1.0]), mask, gamma=0.9, lam=0.5)
    assert adv[0].tolist() == pytest.approx([a0, a1, a2, 0.0])
    assert ret[0].tolist() == pytest.approx([a0 + 0.5, a1 + 0.2, a2 + 0.4, 0.0])


def test_gae_with_gamma_and_lambda_one_gives_the_outcome_minus_the_value():
    v = torch.tensor([[0.1, 0.3, 0.0], [0.7, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    adv, ret = G.gae(v, torch.tensor([2.0, -1.0]), mask)
    assert adv.flatten().tolist() == pytest.approx([1.9, 1.7, 2.0, -1.7, 0.0, 0.0])
    assert ret.flatten().tolist() == pytest.approx([2.0, 2.0, 2.0, -1.0, 0.0, 0.0])


def test_clipped_value_loss_takes_the_larger_error_and_falls_when_trained_in_fp32():
    old = torch.zeros(1, 2)
    returns = torch.tensor([[1.0, 1.0]])
    mask = torch.ones(1, 2)
    # v = 0.5 is outside old ± 0.2: the clipped value 0.2 has the larger error (0.8² vs 0.5²)
    assert G.value_loss(torch.full((1, 2), 0.5), old, returns, mask, clip=0.2).item() == pytest.approx(0.5 * 0.64)
    torch.manual_seed(0)
    head = torch.nn.Linear(4, 1)
    feats = torch.randn(8, 6, 4)
    mask = torch.ones(8, 6)
    adv_returns = torch.randn(8).unsqueeze(1).expand(8, 6)
    opt = torch.optim.Adam(head.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        values = head(feats).squeeze(-1)
        loss = G.value_loss(values, values.detach(), adv_returns, mask, clip=0.2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_kl_and_clip_fraction_are_zero_at_the_old_policy_and_count_tokens_outside_the_clip():
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.5]]))
    mask = torch.tensor([[1, 1, 1, 0]])
    assert G.approx_kl(old, old, mask).item() == 0.0 and G.clip_fraction(old, old, mask).item() == 0.0
    new = torch.log(torch.tensor([[0.5, 0.7, 0.3, 0.9]]))  # ratios 1, 1.4, 0.6, (1.8 off the mask)
    assert G.clip_fraction(new, old, mask, eps=0.2).item() == pytest.approx(2 / 3)
    r = torch.tensor([1.4, 0.6])
    assert G.approx_kl(new, old, mask).item() == pytest.approx(float(((r - 1) - r.log()).sum() / 3))


def test_explained_variance_is_one_for_a_perfect_critic_and_zero_for_the_mean():
    ret = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.ones(1, 3)
    assert G.explained_variance(ret, ret, mask).item() == pytest.approx(1.0)
    assert G.explained_variance(torch.full((1, 3), 2.0), ret, mask).item() == pytest.approx(0.0)


def test_gae_refuses_lambda_outside_the_unit_interval():
    with pytest.raises(ValueError, match=r"lambda must be in \[0, 1\], got 2"):
        G.gae(torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1), lam=2)


def _tiny_batch():
    from nbkit.models import models

    policy, tok = models.load("tiny-arith", "fp32")
    ids = tok(["1+2=", "3+4="], return_tensors="pt", padding=True)
    return policy, ids


def test_the_critic_starts_from_the_policy_and_its_updates_leave_the_policy_alone():
    from nbkit.rl.critic import Critic, critic_step, make_scaler

    policy, ids = _tiny_batch()
    critic = Critic(policy).train()
    name, p = next(iter(policy.get_decoder().named_parameters()))
    assert torch.equal(dict(critic.backbone.named_parameters())[name], p)
    values = critic(ids["input_ids"], ids["attention_mask"])
    assert values.shape == ids["input_ids"].shape and torch.all(values == 0)  # zero-initialised head
    before = p.detach().clone()
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    mask = ids["attention_mask"].float()
    returns = torch.ones_like(mask)
    old = values.detach()  # the values at rollout time, as in PPO
    losses = []
    for _ in range(5):  # FP32: the value loss falls on a fixed batch
        v = critic(ids["input_ids"], ids["attention_mask"])
        loss = G.value_loss(v, old, returns, mask, clip=0.2)
        critic_step(critic, opt, make_scaler("cpu", "fp32"), loss, max_grad_norm=1.0)
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert torch.equal(p, before)


def test_fp16_critic_has_a_live_scaler_of_its_own_bf16_none_and_the_audit_sees_its_matmuls():
    from nbkit.rl.amp import PrecisionAudit, PrecisionError
    from nbkit.rl.critic import Critic, critic_step, make_scaler

    assert not make_scaler("cpu", "bf16").is_enabled()
    policy, ids = _tiny_batch()
    critic = Critic(policy).train()
    scaler = make_scaler("cpu", "fp16", init_scale=2.0**10)
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    audit = PrecisionAudit(critic)  # watches the copied backbone's linears and the value head
    with torch.autocast("cpu", dtype=torch.float16):
        v = critic(ids["input_ids"], ids["attention_mask"])
    counts = audit.take()
    assert audit.check("fp16", counts, scaler=scaler)["audit/matmul_dtypes"] == {"fp16": sum(counts.values())}
    with pytest.raises(PrecisionError, match="no live GradScaler"):
        audit.check("fp16", counts, scaler=make_scaler("cpu", "bf16"))
    with pytest.raises(PrecisionError, match="requested bf16 training but linear layers ran in"):
        audit.check("bf16", counts)
    loss = G.value_loss(v, v.detach(), torch.ones_like(v), ids["attention_mask"].float())
    out = critic_step(critic, opt, scaler, loss, max_grad_norm=1.0)
    assert scaler.is_enabled() and out["value/loss_scale"] in (2.0**10, 2.0**9)
    assert out["value/grad_norm"] > 0


def test_after_the_first_minibatch_the_ratio_to_the_old_policy_departs_from_one_and_clips_are_counted():
    policy, ids = _tiny_batch()
    policy.train()
    x, m = ids["input_ids"], ids["attention_mask"]
    mask = m[:, 1:].float()

    def logp():
        logits = policy(input_ids=x, attention_mask=m).logits[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, x[:, 1:, None]).squeeze(-1)

    with torch.no_grad():
        old = logp()  # π_old: the policy that produced the batch
    adv = torch.tensor([[1.0], [-1.0]]).expand_as(mask)
    opt = torch.optim.SGD(policy.parameters(), lr=5.0)
    seen = []
    for _ in range(2):  # two minibatch updates on the same rollout batch
        new = logp()
        seen.append((G.approx_kl(new.detach(), old, mask).item(), G.clip_fraction(new.detach(), old, mask).item()))
        loss = -G.masked_mean((new - old).exp() * adv, mask)  # the ratio surrogate: π moves away from π_old
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert seen[0] == (0.0, 0.0)  # first minibatch: π = π_old
    kl, clipped = seen[1]
    assert kl > 0 and 0 < clipped <= 1
