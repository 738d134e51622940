"""``PPOTrainer``: classic PPO with a critic on the workbook's GRPO machinery (``PrecisionGRPOTrainer``).

What PPO adds, and nothing else (TRL's clipped surrogate already takes per-token advantages):

1. a critic (``nbkit.rl.critic``): a value head on a copy of the policy, trained in the policy's precision with its
   own optimizer and, under FP16, its own live GradScaler, gradient-checkpointed when π is; its matmuls are audited
   like the policy's;
2. per-token advantages by GAE (``nbkit.rl.gae``) from the critic's values at rollout time and the outcome reward,
   replacing TRL's group advantages (they are whitened over the batch's tokens, as Oat does);
3. the clipped value loss and the critic's step in every minibatch; ``num_iterations`` (epochs) ×
   ``steps_per_generation`` (minibatches) updates per rollout batch, so π_old ≠ π after the first;
4. metrics under PPO names: ``ppo/approx_kl``, ``ppo/clip_fraction``, ``value/loss``, ``value/explained_variance``,
   ``value/mean``, ``value/grad_norm``, ``value/loss_scale``; the critic's weights, optimizer and scaler in every
   checkpoint.
"""

from __future__ import annotations

import os

import torch

import nbkit.rl.amp as amp
import nbkit.rl.gae as gae
from nbkit.records import schema
from nbkit.rl.critic import Critic, bin_means_ev, critic_step, make_scaler, running_min_logp
from nbkit.rl.trainer import PrecisionGRPOTrainer

CRITIC_FILE = "critic.pt"
"""The critic's state (weights, optimizer, scaler) inside each checkpoint folder."""
MIN_LOGP = "critic_min_logp"
"""Batch key of each state's running minimum of log π (``nbkit.rl.critic.running_min_logp``), set at rollout time
with ``critic_input`` ``hidden+min_logp``; it rides with its rows through TRL's shuffle and split."""


class PPOTrainer(PrecisionGRPOTrainer):
    """PPO with a critic initialised from the policy, under the workbook's precision policy and audit."""

    def __init__(self, *args, run, **kwargs):
        super().__init__(*args, run=run, **kwargs)
        if self.accelerator.num_processes > 1:  # the critic is not wrapped in DDP: its replicas would drift apart
            raise NotImplementedError(
                f"the {run.algorithm!r} preset trains its critic in one process only; got "
                f"{self.accelerator.num_processes} processes (launch it without --multi_gpu)"
            )
        device = self.accelerator.device
        checkpointing = (self.args.gradient_checkpointing_kwargs or {}) if self.args.gradient_checkpointing else None
        policy = self.accelerator.unwrap_model(self.model)
        self.critic = Critic(policy, run.critic_input, checkpointing).to(device).train()  # checkpointed like π
        table = {id(p) for p in self.critic.feature_parameters()}
        groups = [{"params": [p for p in self.critic.parameters() if p.requires_grad and id(p) not in table]}]
        if table:  # the running-min table learns at its own rate (RLConfig.critic_feature_lr)
            groups.append({"params": self.critic.feature_parameters(), "lr": run.critic_feature_lr})
        self.critic_optimizer = torch.optim.AdamW(groups, lr=run.critic_lr, weight_decay=0.0)
        self.critic_scaler = make_scaler(
            device, run.train_dtype, init_scale=run.loss_scale_init, growth_interval=run.loss_scale_growth_interval
        )
        self.critic_audit = amp.PrecisionAudit(self.critic)
        self.param_counts[schema.PARAMS_CRITIC_TRAINABLE] = sum(
            p.numel() for p in self.critic.parameters() if p.requires_grad
        )
        self._rewards = None

    def _autocast(self):
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.run.train_dtype)
        return torch.autocast(self.accelerator.device.type, dtype=dtype, enabled=dtype is not None)

    def _values(self, batch: dict, rows: int | None = None) -> torch.Tensor:
        """The critic's value of the state before each completion token (B, T), FP32, from forwards of at most
        ``rows`` sequences each (all at once when None): at rollout time the batch is the process's whole generation
        batch (512 sequences of ≈ 8 k tokens in the gpu profile), which one forward could never hold, so it goes
        through the critic a micro-batch at a time, as the policy's own scoring does. With ``critic_input``
        ``hidden+min_logp`` each value adds the table's value of the batch's ``MIN_LOGP`` (set at rollout time)."""
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        width = batch["completion_ids"].size(1)
        rows = rows or ids.size(0)
        parts = []
        for lo in range(0, ids.size(0), rows):
            with self._autocast():
                values = self.critic(ids[lo : lo + rows], attn[lo : lo + rows])
            values = values[:, -width - 1 : -1]
            if self.critic.feature_parameters():
                values = values + self.critic.feature_values(batch[MIN_LOGP][lo : lo + rows])
            parts.append(values)
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    # -- rollout: values and GAE advantages ----------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rewards = per_func  # every process's rows (TRL gathers them); sliced below
        return per_func

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        n = out["completion_ids"].size(0)
        rank = self.accelerator.process_index
        weights = self.reward_weights.to(self._rewards.device).unsqueeze(0)
        rewards = (self._rewards * weights).nansum(dim=1)[rank * n : (rank + 1) * n].float()
        mask = out["completion_mask"].float()
        if self.critic.feature_parameters():  # π_old's log-probs of the sampled tokens (TRL's, else a forward)
            logps = out.get("old_per_token_logps")
            out[MIN_LOGP] = running_min_logp(self._training_logps(out) if logps is None else logps, mask)
        with torch.no_grad():
            values = self._values(out, rows=self.args.per_device_train_batch_size) * mask
        advantages, returns = gae.gae(values.cpu(), rewards.cpu(), mask.cpu(), self.run.ppo_gamma, self.run.ppo_lambda)
        advantages, returns = advantages.to(mask.device), returns.to(mask.device)
        m = mask.bool()
        if m.sum() > 1:  # whiten over the batch's tokens (Oat / OpenRLHF)
            a = advantages[m]
            advantages = ((advantages - a.mean()) / (a.std() + 1e-8)) * mask
        out["advantages"], out["old_values"], out["returns"] = advantages, values, returns
        metrics = self._metrics["train"]
        metrics[schema.VALUE_MEAN].append(float(gae.masked_mean(values, mask)))
        ev = float(gae.explained_variance(values, returns, mask))
        if ev == ev:  # NaN when every return is equal (nothing to explain)
            metrics[schema.VALUE_EXPLAINED_VARIANCE].append(ev)
            if MIN_LOGP in out:  # what the table could explain on this batch at best (its in-sample bin means)
                metrics[schema.VALUE_MIN_LOGP_CEILING].append(bin_means_ev(out[MIN_LOGP], returns, mask))
        return out

    # -- loss: TRL's clipped surrogate on per-token advantages + the critic's step ---------------------------
    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        mask = inputs["completion_mask"].float()
        metrics = self._metrics["train"]
        old = inputs.get("old_per_token_logps")
        if self._loss_logps is not None and old is not None:
            metrics[schema.PPO_APPROX_KL].append(float(gae.approx_kl(self._loss_logps.float(), old.float(), mask)))
            metrics[schema.PPO_CLIP_FRACTION].append(
                float(gae.clip_fraction(self._loss_logps.float(), old.float(), mask, self.epsilon_low))
            )
        values = self._values(inputs)
        vloss = gae.value_loss(values, inputs["old_values"], inputs["returns"], mask, clip=self.run.ppo_value_clip)
        step = critic_step(self.critic, self.critic_optimizer, self.critic_scaler, vloss, self.args.max_grad_norm)
        metrics[schema.VALUE_LOSS].append(float(vloss.detach()))
        for key, value in step.items():
            metrics[key].append(value)
        return loss

    # -- audit of both models ------------------------------------------------------------------------------
    def end_step(self) -> dict:
        record = super().end_step()
        counts = self.critic_audit.take()
        if counts:  # a step without a loss forward (none today) has nothing to audit
            # the GEMM routing counts are shared by policy and critic and were checked by the policy's audit
            critic = self.critic_audit.check(self.run.train_dtype, counts, self.critic_scaler)
            record[schema.AUDIT_CRITIC_MATMUL_DTYPES] = critic[schema.AUDIT_MATMUL_DTYPES]
        record[schema.VALUE_SCALER_ENABLED] = self.critic_scaler.is_enabled()
        return record

    def close(self) -> None:
        self.critic_audit.remove()
        super().close()

    # -- checkpoints carry the critic ----------------------------------------------------------------------
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.accelerator.is_main_process:
            folder = os.path.join(self.args.output_dir, f"checkpoint-{self.state.global_step}")
            torch.save(self.critic_state(), os.path.join(folder, CRITIC_FILE))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            path = os.path.join(checkpoint, CRITIC_FILE)
            if not os.path.exists(path):
                raise FileNotFoundError(f"PPO checkpoint {checkpoint} has no {CRITIC_FILE}: the critic cannot resume")
            device = self.accelerator.device  # torch.load refuses "cpu:0", which accelerate can report on CPU
            self.load_critic_state(
                torch.load(path, map_location="cpu" if device.type == "cpu" else device, weights_only=True)
            )

    def critic_state(self) -> dict:
        """Weights, optimizer and scaler of the critic (what a checkpoint keeps)."""
        return {
            "weights": self.critic.state_dict(),
            "optimizer": self.critic_optimizer.state_dict(),
            "scaler": self.critic_scaler.state_dict(),
        }

    def load_critic_state(self, state: dict) -> None:
        self.critic.load_state_dict(state["weights"])
        self.critic_optimizer.load_state_dict(state["optimizer"])
        if state["scaler"]:
            self.critic_scaler.load_state_dict(state["scaler"])
