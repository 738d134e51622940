"""How much of tiny-arith's return can a PPO critic explain, and how much does it explain? (issue 36)

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ppo_critic_ceiling.py            # ~3 min on one core

On rollouts of the fixed tiny-arith policy (FP32 HF sampling, temperature 1, sanity set, 8 samples per prompt) it
prints the explained variance (EV, pooled over completion tokens as ``value/explained_variance`` is) of:

1. predictors of the correctness return, held out: the set's own pass rate of the prompt (what a critic that knew
   each prompt's difficulty could reach); E[R | the prefix still matches the reference solution, position] (a
   critic that checked each step); E[R | lowest log π of a sampled token so far] (the policy's own surprise); a
   ridge probe of the policy's last hidden state (what the value head reads on its first step);
2. ``nbkit.rl.critic.Critic`` trained alone with ``PPOTrainer``'s schedule (rollout batches of 128, EV measured on
   each before the critic trains on it, then 2 epochs × 2 minibatches of the clipped value loss, AdamW, gradient
   norm 1) for 25 batches (= 100 steps), on the correctness return and on a return fixed by a prompt token (the
   first operand's leading digit ≥ 5), at each ``--critic-lr``.
"""

from __future__ import annotations

import argparse
import time

import torch

from nbkit import tasks
from nbkit.models import models
from nbkit.rl import gae
from nbkit.rl.critic import Critic
from nbkit.rl.run import trl_prompt
from nbkit.runtime import paths

BATCH = 128
"""Sequences per rollout batch (the study's 16 prompts × 8 samples)."""


def rollouts(model, tok, task, prompts: int, seed: int) -> dict:
    """``prompts`` distinct sanity-set problems × 8 samples of the fixed policy, graded."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    picked = [task.problems[i] for i in torch.randperm(len(task.problems), generator=gen)[:prompts].tolist()]
    rows = [p for p in picked for _ in range(8)]
    enc = tok([trl_prompt(tok, task.prompt(p)) for p in rows], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=40,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    comp = out[:, enc.input_ids.size(1) :]
    eos = comp == tok.eos_token_id
    end = torch.where(eos.any(1), eos.float().argmax(1), torch.full((comp.size(0),), comp.size(1) - 1))
    mask = (torch.arange(comp.size(1))[None] <= end[:, None]).long()
    texts = tok.batch_decode(comp * mask + tok.pad_token_id * (1 - mask), skip_special_tokens=True)
    return {
        "prompt_ids": enc.input_ids,
        "prompt_mask": enc.attention_mask,
        "completion_ids": comp,
        "completion_mask": mask,
        "correctness": torch.tensor([task.reward(t, p["answer"]) for t, p in zip(texts, rows)]),
        "leading_digit": torch.tensor([float(p["problem"][0] >= "5") for p in rows]),
        "pass_rate": torch.tensor([p["pass_rate"] for p in rows]),
        "solution": [p["solution"] for p in rows],
    }


def per_token(x: torch.Tensor, b: dict) -> torch.Tensor:
    return x[:, None].expand_as(b["completion_mask"]).float()


def ev(pred: torch.Tensor, b: dict, key: str = "correctness") -> float:
    return float(gae.explained_variance(pred, per_token(b[key], b), b["completion_mask"]))


def lookup(feature_tr, feature_te, tr, te) -> torch.Tensor:
    """E[R | feature] from the training rollouts, read off for the held-out ones (the overall mean where unseen)."""
    m, R = tr["completion_mask"].bool(), per_token(tr["correctness"], tr)
    table = {}
    for k in feature_tr[m].unique().tolist():
        sel = m & (feature_tr == k)
        table[k] = float(R[sel].mean()) if sel.sum() >= 20 else float(tr["correctness"].mean())
    return torch.tensor([[table.get(k, float(tr["correctness"].mean())) for k in row] for row in feature_te.tolist()])


def on_reference(b: dict, tok) -> torch.Tensor:
    """(B, T): 1 while the completion's tokens before t equal the reference solution's, else 0, by position."""
    C = b["completion_ids"]
    out = torch.zeros(C.shape)
    for i, sol in enumerate(b["solution"]):
        ref = tok(sol)["input_ids"] + [tok.eos_token_id]
        good = True
        for t in range(C.size(1)):
            out[i, t] = float(good)
            good = good and t < len(ref) and int(C[i, t]) == ref[t]
    return out * 100 + torch.arange(C.size(1))[None]  # one key per (on the reference?, position)


def forward(model, b: dict):
    ids = torch.cat([b["prompt_ids"], b["completion_ids"]], 1)
    att = torch.cat([b["prompt_mask"], b["completion_mask"]], 1)
    w = b["completion_ids"].size(1)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=att, output_hidden_states=True)
    logp = out.logits[:, -w - 1 : -1].log_softmax(-1).gather(-1, b["completion_ids"][..., None])[..., 0]
    logp = logp * b["completion_mask"]
    lowest = torch.cat([torch.zeros(len(logp), 1), logp.cummin(1).values[:, :-1]], 1)  # over tokens before t
    edges = torch.tensor([-5.0, -3, -2, -1, -0.5, -0.2, -0.05])
    return out.hidden_states[-1][:, -w - 1 : -1], torch.bucketize(lowest, edges)


def ridge(x_tr, y_tr, x_te, lam=1.0) -> torch.Tensor:
    mu, sd = x_tr.mean(0), x_tr.std(0) + 1e-6
    a = torch.cat([(x_tr - mu) / sd, torch.ones(len(x_tr), 1)], 1).double()
    b = torch.cat([(x_te - mu) / sd, torch.ones(len(x_te), 1)], 1).double()
    w = torch.linalg.solve(a.T @ a + lam * torch.eye(a.size(1), dtype=a.dtype), a.T @ y_tr.double())
    return (b @ w).float()


def critic_alone(policy, tr: dict, key: str, lr: float, batches: int = 25, clip: float = 0.2) -> list[float]:
    """EV on each rollout batch before the critic trains on it, ``PPOTrainer``'s schedule, the policy fixed."""
    torch.manual_seed(0)
    critic = Critic(policy).train()
    opt = torch.optim.AdamW(critic.parameters(), lr=lr, weight_decay=0.0)
    n = tr["completion_ids"].size(0) // BATCH
    w = tr["completion_ids"].size(1)

    def values(rows):
        ids = torch.cat([tr["prompt_ids"][rows], tr["completion_ids"][rows]], 1)
        att = torch.cat([tr["prompt_mask"][rows], tr["completion_mask"][rows]], 1)
        return critic(ids, att)[:, -w - 1 : -1]

    evs = []
    for k in range(batches):
        rows = torch.arange((k % n) * BATCH, (k % n + 1) * BATCH)
        mask = tr["completion_mask"][rows].float()
        with torch.no_grad():
            old = values(rows) * mask
        _, returns = gae.gae(old, tr[key][rows], mask)
        evs.append(float(gae.explained_variance(old, returns, mask)))
        for _ in range(2):  # epochs
            perm = torch.randperm(BATCH)
            for half in perm.chunk(2):  # minibatches
                loss = gae.value_loss(values(rows[half]), old[half], returns[half], mask[half], clip=clip)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(critic.parameters(), 1.0)
                opt.step()
    return evs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--critic-lr", type=float, nargs="+", default=[2e-4, 1e-3])
    parser.add_argument("--prompts", type=int, default=256, help="training prompts (× 8 samples); held out: 1/4")
    args = parser.parse_args()
    paths.setup_environment()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.time()
    path = models.resolve("tiny-arith")
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    policy = AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()
    task = tasks.make_task(tasks.TaskConfig(source="data/tiny_arith_sanity", template="raw", grader="arith"))
    tr, te = rollouts(policy, tok, task, args.prompts, 1), rollouts(policy, tok, task, args.prompts // 4, 2)
    R = te["correctness"]
    print(f"held-out rollouts: {len(R)}, mean return {float(R.mean()):.3f}, Var {float(R.var(unbiased=False)):.3f}")
    print("1. held-out EV of predictors of the correctness return")
    pass_rate = ev(per_token(te["pass_rate"], te), te)
    print(f"   the prompt's pass rate (sanity set's 40-sample estimate)    {pass_rate:.3f}")
    print(
        f"   E[R | prefix still on the reference solution, position]    "
        f"{ev(lookup(on_reference(tr, tok), on_reference(te, tok), tr, te), te):.3f}"
    )
    h_tr, low_tr = forward(policy, tr)
    h_te, low_te = forward(policy, te)
    print(f"   E[R | lowest log π of a sampled token so far]              {ev(lookup(low_tr, low_te, tr, te), te):.3f}")
    m_tr, m_te = tr["completion_mask"].bool(), te["completion_mask"].bool()
    probe = torch.zeros(m_te.shape)
    probe[m_te] = ridge(h_tr[m_tr], per_token(tr["correctness"], tr)[m_tr], h_te[m_te])
    print(f"   ridge probe of the policy's last hidden state              {ev(probe, te):.3f}")
    print(
        f"2. the critic alone, {BATCH}-sequence rollout batches: EV before each batch's update "
        f"(every 5th batch; mean of the last 5 = the last 20 steps)"
    )
    for key in ("correctness", "leading_digit"):
        for lr in args.critic_lr:
            evs = critic_alone(policy, tr, key, lr)
            shown = [round(x, 3) for x in evs[::5]]
            print(f"   {key:13s} critic_lr {lr:g}: {shown} last 5: {sum(evs[-5:]) / 5:.3f}", flush=True)
    print(f"({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
