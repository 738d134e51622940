"""``PrecisionGRPOTrainer``: TRL's ``GRPOTrainer`` subclassed narrowly for the paper's experiment.

What it adds, and nothing else:

1. real precision: FP16 autocast + GradScaler on CPU too (``amp.enable_cpu_fp16``), the half-precision GEMM
   policy of ``nbkit.precision.gemm`` over forward and backward, both audited every step;
2. μ from a workbook engine in an explicit dtype (``rollout.EngineGeneration``), so TRL's IS correction and its
   sampling metrics run for the HF engine as well as for vLLM;
3. the π–μ mismatch metrics of ``nbkit.mismatch.mismatch`` on every batch, the IS ratio's clipped/masked fractions,
   loss scale and skipped steps, step time split into rollout / mismatch / update, all appended to
   ``metrics.jsonl`` by ``StepLogger``; NaN/inf stop the run with the step and tensor named;
4. π comparable with μ under top-p/top-k sampling (``PrecisionGRPOTrainer._log_kept_mass``).

Over ~400 lines: the TRL overrides the experiment needs; its MoE replay and IS logging are the next seams to split.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch
from accelerate.utils import DistributedDataParallelKwargs, gather_object
from transformers import TrainerCallback
from trl import GRPOTrainer

import nbkit.rl.amp as amp
import nbkit.rl.fsdp as fsdp
import nbkit.rl.memory as memory
import nbkit.rl.opsm as opsm
import nbkit.rl.shared_prefix as shared_prefix
from nbkit.mismatch import mismatch, sampling_filter
from nbkit.models import routing
from nbkit.precision import gemm, lm_head
from nbkit.records import metrics as metric_registry
from nbkit.records import schema
from nbkit.records.runlog import MetricsLog
from nbkit.rl.bins import StepBins
from nbkit.rl.monitor import CollapseAlarm, NonFiniteError, first_non_finite
from nbkit.rl.rollout import EngineGeneration
from nbkit.rl.scaling import loss_scaler, step_was_skipped
from nbkit.rl.server import ServerGeneration

MISMATCH_KEYS = metric_registry.logged()
"""Mismatch metrics logged per step (prefixed ``mismatch/``; names as in Oat / verl): the registry ``nbkit.records.metrics``."""


class PrecisionGRPOTrainer(GRPOTrainer):
    """GRPO family with the workbook's precision policy, rollout engine and mismatch monitoring."""

    def __init__(self, *args, run, **kwargs):
        self.run = run
        super().__init__(*args, **kwargs)
        # Rollouts come from the workbook's engine; flipping ``use_vllm`` turns on TRL's own IS correction
        # and sampling metrics, which read the engine's log-probs whatever the engine is.
        self.gemm_policy = gemm.resolve(run.gemm, self.accelerator.device)
        self.gemm_mode = gemm.mode(self.gemm_policy)  # None where native
        self.vllm_generation = (ServerGeneration if run.vllm_mode == "server" else EngineGeneration)(
            engine=run.rollout_engine,
            gemm_policy=self.gemm_policy,
            model_ref=run.model,
            dtype=run.rollout,
            seed=run.seed,
            kv_cache_gib=run.vllm_kv_cache_gib,
            model=self.model,
            accelerator=self.accelerator,
            hf_batch_size=run.hf_engine_batch_size,
            max_num_batched_tokens=run.vllm_max_num_batched_tokens,
            block_size=run.vllm_block_size,
            **(
                {"server_base_url": run.vllm_server_base_url, "server_timeout": run.vllm_server_timeout}
                if run.vllm_mode == "server"
                else {}
            ),
            processing_class=self.processing_class,
            gpu_memory_utilization=self.args.vllm_gpu_memory_utilization,
            max_model_length=self.args.vllm_max_model_length,
            enable_sleep_mode=run.vllm_enable_sleep_mode,
            max_num_seqs=self.args.per_device_train_batch_size * self.args.steps_per_generation,  # a whole rollout
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k or 0,
            max_completion_length=self.max_completion_length,
            logprobs=0,
            **({"rollout_format": run.rollout_format} if run.rollout_format is not None else {}),
            **({"fp32_lm_head": True} if lm_head.sides(run.fp32_lm_head)[1] else {}),
        )
        self.use_vllm, self._last_loaded_step = True, -1
        routing.autocast_experts(self.model)  # MoE: experts under autocast (grouped_mm would stay in fp32)
        if run.router_replay:  # a checkpointed layer re-runs its forward in backward, outside the replay: it
            self.args.gradient_checkpointing = False  # would route again (the Trainer enables it at train())
            if getattr(self.model, "is_gradient_checkpointing", False):
                self.model.gradient_checkpointing_disable()
        self.audit = amp.PrecisionAudit(self.model)
        self._routing = None  # MoE: the rollout's routing of the batch being scored / trained on
        self.param_counts = {  # fixed once TRL has wrapped the model (peft freezes all but the adapters)
            schema.PARAMS_TRAINABLE: sum(p.numel() for p in self.model.parameters() if p.requires_grad),
            schema.PARAMS_TOTAL: sum(p.numel() for p in self.model.parameters()),
        }
        self._mismatch_seconds = 0.0
        self._score_seconds = 0.0
        self._needs_pi = False  # a batch whose π is still to come (from the loss forward)
        self._loss_logps = None
        self._phantom_pending = False  # a fresh batch whose first loss minibatch has π = π_old exactly
        self.pi_filter = {"top_k": self.top_k or 0, "top_p": 1.0 if self.top_p is None else self.top_p}
        """The engine's top-k/top-p, replayed on π for the IS ratio and the mismatch metrics (``_log_kept_mass``)."""
        self._filter_pending = False  # a batch whose π is still to be put on the filter's support
        self.step_bins, self._loss_entropies = StepBins(), None  # per-step token bins (``nbkit.rl.bins``)

    def _build_accelerator_args(self, **kwargs) -> dict:
        """transformers' accelerator arguments + the run's FP16 loss scaling (``GradScalerKwargs``), which
        accelerate's own scaler (one GPU, DDP, FSDP2) would otherwise build with torch's defaults, and DDP's
        ``gradient_as_bucket_view`` (``nbkit.rl.memory.BUCKET_VIEW``: 4 bytes per parameter less)."""
        args = super()._build_accelerator_args(**kwargs)
        for handler in args.get("kwargs_handlers", []):  # DDP: the gradients are views of its buckets, no 2nd copy
            if isinstance(handler, DistributedDataParallelKwargs):
                handler.gradient_as_bucket_view = memory.BUCKET_VIEW  # what nbkit.rl.memory budgets
        args["kwargs_handlers"] = [
            *args.get("kwargs_handlers", []),
            amp.scaler_kwargs(self.run.loss_scale_init, self.run.loss_scale_growth_interval),
        ]
        return args

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        if plugin is not None:  # DeepSpeed's own scaler: the run's settings into its config, before prepare()
            amp.deepspeed_loss_scaling(
                plugin.deepspeed_config, self.run.loss_scale_init, self.run.loss_scale_growth_interval
            )
        amp.enable_cpu_fp16(
            self.accelerator, growth_interval=self.run.loss_scale_growth_interval, init_scale=self.run.loss_scale_init
        )
        fsdp.fp32_reduce_and_outputs(self.accelerator)  # FSDP2: π (TRL's fused-head log_probs) never cast to half

    def training_step(self, *args, **kwargs):
        """One forward + backward (and TRL's rollout + scoring) under the run's GEMM policy; vLLM suspends it."""
        with self.gemm_mode if self.gemm_mode is not None else contextlib.nullcontext():
            return super().training_step(*args, **kwargs)

    # -- μ vs π on every batch -----------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        start = time.perf_counter()
        self._routing = "engine"  # the scoring forwards read the engine's routing of this generation
        self._filter_pending = sampling_filter.is_filtered(**self.pi_filter)
        self._pi_log_kept_mass = self._raw_old_logps = None
        self._filter_seconds = 0.0
        try:
            out = super()._generate_and_score_completions(inputs)
            if self._filter_pending:  # TRL scored no π_old (no IS correction): the kept mass from a forward of ours
                self._filter_pending = False
                ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
                attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
                self._pi_log_kept_mass = self._log_kept_mass(
                    self.model,
                    ids,
                    attn,
                    out["completion_ids"].size(1),
                    batch_size=self.args.per_device_train_batch_size,
                )
        finally:
            self._routing, self._filter_pending = None, False
        if getattr(self.vllm_generation, "last_routing", None) is not None:
            out["routing"] = self._engine_routing(out["prompt_ids"].size(1), out["completion_ids"].size(1))
        if self._pi_log_kept_mass is not None:  # rides with its rows through TRL's shuffle and split
            out["pi_log_kept_mass"] = self._pi_log_kept_mass
            self._metrics["train"][schema.PI_KEPT_MASS].append(self._mean_kept_mass(out))
        if self._raw_old_logps is not None:  # π_old of the clip stays TRL's own (unfiltered, like the loss's π)
            out["old_per_token_logps"] = self._raw_old_logps
        self._score_seconds += time.perf_counter() - start - self._filter_seconds
        self._phantom_pending = True
        if out.get("old_per_token_logps") is not None:  # TRL's IS correction already computed π: use it
            self._log_mismatch(self._on_filter_support(out["old_per_token_logps"], out), out)
        else:
            self._needs_pi = True
        return self._off_policy_mask(out) if self.run.algo.off_policy_mask else out

    def _off_policy_mask(self, out: dict) -> dict:
        """DeepSeek-V3.2's OPSM on a fresh batch (``nbkit.rl.opsm``): π of the weights that sampled it (TRL's π_old
        if it scored one, else a no-grad forward), on the sampling filter's support; logs the share dropped."""
        logps = out.get("old_per_token_logps")
        if logps is None:
            start = time.perf_counter()
            logps = self._training_logps(out)
            self._mismatch_seconds += time.perf_counter() - start
        out, dropped = opsm.apply(out, self._on_filter_support(logps, out), self.run.opsm_delta)
        counts = self.accelerator.reduce(
            torch.tensor([float(dropped), float(len(out["advantages"]))], device=self.accelerator.device), "sum"
        )
        self._metrics["train"][schema.OPSM_MASKED_FRACTION].append(float(counts[0] / counts[1]))
        return out

    @torch.no_grad()
    def _log_kept_mass(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, **_) -> torch.Tensor:
        """log of the probability mass π's own top-k/top-p filter keeps at each completion position (≤ 0, ``(B, T)``).

        Under top-p/top-k the engine's μ is ``processed_logprobs``: renormalised over the kept tokens. TRL's π (its
        fused LM head, in the loss and as π_old) is the full-vocabulary log-softmax of logits / T, so π/μ would
        carry the kept mass (a public report: IS-ratio mean 0.896 for a kept mass of 0.895), not a precision gap.
        The workbook compares like with like: for TRL's IS ratio and its ``sampling/*`` metrics and for the mismatch
        metrics, π is log π − this, π's log-softmax renormalised over its kept tokens
        (``nbkit.mismatch.sampling_filter``:
        the HF engine's warpers; the sampled token always counts), as the offline
        ``mismatch.teacher_forced_logprobs(top_p=, top_k=)`` does; μ as π_old (``mu_old``) is moved the other way,
        μ + this, onto the loss's full-vocabulary support.

        The policy-gradient log-probs (the loss's π and π_old in the clip) stay unfiltered, as in TRL 1.16 and
        verl, whose trainers never filter π: the gradient of the renormalised log π would add a term on the kept
        set's mass (−∇ log K) and change the objective. (NeMo-RL, prime-rl and DeepSeek-V3.2's "keep sampling
        mask" filter the loss too; the workbook changes one thing only, the comparison.) The cost: one more no-grad
        forward of the batch (``batch_size`` rows at a time, their logits ``sampling_filter.HEAD_CHUNK`` positions at a
        time: ``sampling_filter.KeptMassHead``), only when top_p < 1 or top_k > 0.
        The kept set is π's own (the engine does not report its own), so when π ≠ μ a borderline token may be
        kept on one side only; with π = μ the ratio is 1 up to kernel noise."""
        start = time.perf_counter()
        tokens = input_ids[:, -logits_to_keep:]
        rows = batch_size or input_ids.size(0)
        parts = []
        head = self.accelerator.unwrap_model(model).get_output_embeddings()
        with self._replay(model, input_ids, logits_to_keep):
            for lo in range(0, input_ids.size(0), rows):
                # the head computes the kept mass a chunk of positions at a time, never the rows' full logits
                kept = sampling_filter.KeptMassHead(head, tokens[lo : lo + rows], self.temperature, **self.pi_filter)
                with self.accelerator.autocast(), kept:
                    model(
                        input_ids=input_ids[lo : lo + rows],
                        attention_mask=attention_mask[lo : lo + rows],
                        logits_to_keep=logits_to_keep + 1,
                    )
                parts.append(kept.value)
        elapsed = time.perf_counter() - start
        self._filter_seconds += elapsed
        self._mismatch_seconds += elapsed
        return torch.cat(parts).to(torch.float32)

    @staticmethod
    def _on_filter_support(logp_pi: torch.Tensor, batch: dict) -> torch.Tensor:
        """π renormalised over the sampling filter's kept tokens (``_log_kept_mass``); as is without a filter."""
        kept = batch.get("pi_log_kept_mass")
        return logp_pi if kept is None else logp_pi - kept.to(logp_pi.dtype)

    def _mean_kept_mass(self, batch: dict) -> float:
        """Mean kept mass over the batch's completion tokens, all processes: what the unfiltered π/μ would average."""
        mask = batch["completion_mask"].bool()
        kept = torch.exp(batch["pi_log_kept_mass"].float())[mask]
        total = self.accelerator.reduce(
            torch.stack([kept.sum(), torch.tensor(float(kept.numel()), device=kept.device)]), "sum"
        )
        return float(total[0] / total[1]) if total[1] > 0 else float("nan")

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        if self._routing is not None and routing.is_moe(model):
            result = self._routed_logps(model, *args, **kwargs)
        else:
            with fp32_logits(
                model
            ):  # π in FP32 from the model's (half) logits, whatever the wrapper casts its output to
                result = (
                    shared_prefix.logps(model, *args, autocast=self.accelerator.autocast, **kwargs)
                    if self.run.shared_prefix
                    else super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
                )
            if torch.is_grad_enabled():  # the loss forward: π of the weights that produced this batch
                self._loss_logps = result[0].detach()
        if self._filter_pending and model is self.model and not torch.is_grad_enabled():
            # TRL's first scoring forward is π_old, from which it builds the IS ratio right away: hand it π on the
            # sampling filter's support (``_log_kept_mass``); the raw π_old goes back into the batch afterwards
            self._filter_pending = False
            self._raw_old_logps = result[0]
            self._pi_log_kept_mass = self._log_kept_mass(model, *args, **kwargs)
            result = (result[0] - self._pi_log_kept_mass.to(result[0].dtype), *result[1:])
        if torch.is_grad_enabled():  # the loss forward's entropies, for the step's token bins
            self._loss_entropies = result[1].detach() if result[1] is not None else None
        return result

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        self._loss_logps = None
        self._routing = inputs.get("routing")
        try:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            self._routing = None
        if self._needs_pi:
            # No IS correction: π comes free from the loss forward (one update per batch, so it is π_old),
            # on exactly the rows of ``inputs`` (TRL shuffles a generation batch before the loss sees it).
            logps = self._loss_logps
            if logps is None or logps.shape != inputs["completion_mask"].shape:
                start = time.perf_counter()
                logps = self._training_logps(inputs)
                self._mismatch_seconds += time.perf_counter() - start
            self._log_mismatch(self._on_filter_support(logps, inputs), inputs)
        return loss

    # -- μ as π_old and phantom clipping -------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        """TRL's loss; a ``mu_as_old`` preset puts the engine's μ in place of π_old first. Then logs
        ``clip/phantom_fraction`` at the first minibatch after a rollout, where π = π_old in exact arithmetic."""
        if self.run.algo.mu_as_old:  # the preset's or the run's ``correction``
            mu, kept = inputs["sampling_per_token_logps"], inputs.get("pi_log_kept_mass")
            # under top-p/top-k, μ moved onto the loss's unfiltered support (+ log kept mass, ``_log_kept_mass``)
            inputs = {**inputs, "old_per_token_logps": mu if kept is None else mu + kept.to(mu.dtype)}
        self._loss_logps = None
        loss = super()._compute_loss(model, inputs)
        if self._loss_logps is not None and self._loss_entropies is not None:
            self.step_bins.add(
                self._on_filter_support(self._loss_logps, inputs),
                self._loss_entropies,
                inputs["sampling_per_token_logps"],
                inputs["completion_mask"],
            )
            self._loss_entropies = None
        if self._phantom_pending and self._loss_logps is not None:
            self._phantom_pending = False
            self._log_phantom_fraction(self._loss_logps, inputs)
        return loss

    def _log_phantom_fraction(self, logp_pi: torch.Tensor, batch: dict) -> None:
        """Fraction of tokens whose clip is active (TRL's rule: ratio below 1 − ε with A < 0 or above 1 + ε with
        A > 0) on a minibatch no update has touched yet: any such token is clipped by rounding alone."""
        old = batch.get("old_per_token_logps")
        mask = batch["completion_mask"].bool()
        log_ratio = logp_pi - (logp_pi if old is None else old.detach())
        if self.importance_sampling_level == "sequence":
            log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1).expand_as(log_ratio)
        ratio = torch.exp(log_ratio.float())
        adv = batch["advantages"]
        adv = adv.unsqueeze(-1) if adv.dim() == 1 else adv
        clipped = ((ratio < 1 - self.epsilon_low) & (adv < 0)) | ((ratio > 1 + self.epsilon_high) & (adv > 0))
        counts = self.accelerator.reduce(torch.stack([(clipped & mask).sum().float(), mask.sum().float()]), "sum")
        if counts[1] > 0:
            self._metrics["train"][schema.PHANTOM_FRACTION].append(float(counts[0] / counts[1]))

    def _log_mismatch(self, logp_pi: torch.Tensor, batch: dict) -> None:
        """Mismatch metrics of ``batch`` (its μ and mask) against the trainer's π (``nbkit.mismatch.mismatch``)."""
        start = time.perf_counter()
        self._needs_pi = False
        mask = batch["completion_mask"].bool().cpu()
        pi, mu = logp_pi.float().cpu(), batch["sampling_per_token_logps"].float().cpu()
        # every process's sequences, so the metrics are those of the whole step's batch (one process: as is)
        pis = gather_object([pi[i][mask[i]].double().numpy() for i in range(len(mask))])
        mus = gather_object([mu[i][mask[i]].double().numpy() for i in range(len(mask))])
        metrics = mismatch.mismatch_metrics(pis, mus)
        for key in metric_registry.logged():
            if key in metrics and np.isfinite(metrics[key]):
                self._metrics["train"][schema.mismatch_key(key)].append(float(metrics[key]))
        if batch.get("importance_sampling_ratio") is not None:
            self._log_is_fractions(batch["importance_sampling_ratio"], mask)
        self._mismatch_seconds += time.perf_counter() - start

    # -- mixture of experts: routing flips and router replay (nbkit.models.routing) ---------------------------------
    def _engine_routing(self, prompt_width: int, completion_width: int) -> torch.Tensor:
        """The rollout engine's routing of the last generation laid out like TRL's prompt + completion batch."""
        gen = self.vllm_generation
        return routing.batch_layout(gen.last_routing, gen.last_prompt_lens, prompt_width, completion_width)

    def _chosen_experts(self, input_ids: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        """The engine's expert choices for the rows being scored (the whole generation inside TRL's scoring)."""
        chosen = self._routing
        if isinstance(chosen, str):  # scoring inside TRL's generation step: the batch is the whole generation
            chosen = self._engine_routing(input_ids.size(1) - logits_to_keep, logits_to_keep)
        return chosen.to(torch.long)

    def _replay(self, model, input_ids: torch.Tensor, logits_to_keep: int):
        """Router replay over a forward of these rows when the run asks for it and routing is known, else nothing."""
        if not (self.run.router_replay and self._routing is not None and routing.is_moe(model)):
            return contextlib.nullcontext()
        return routing.replay(model, self._chosen_experts(input_ids, logits_to_keep))

    def _routed_logps(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """π of a MoE batch: logs ``moe/flip_rate`` (trainer's own top-k vs the engine's, per layer, over the
        batch's real tokens) once per batch, and replays the engine's routing when ``router_replay`` is on."""
        chosen = self._chosen_experts(input_ids, logits_to_keep)
        replay = routing.replay(model, chosen) if self.run.router_replay else contextlib.nullcontext()
        with (
            routing.capture(model) as rec,
            replay,
            fp32_logits(model),
        ):  # capture first: it sees the trainer's own choice
            result = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        if torch.is_grad_enabled():
            own = rec.choices(along="batch")
            rates = routing.flip_rates(own, chosen, attention_mask.bool().cpu())
            self._metrics["train"][schema.MOE_FLIP_RATE].append(float(np.mean(rates)))
            for layer, rate in enumerate(rates):
                self._metrics["train"][schema.moe_flip_rate_key(layer)].append(rate)
            self._loss_logps = result[0].detach()
        return result

    @torch.no_grad()
    def _training_logps(self, out) -> torch.Tensor:
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.model, ids, attn, out["completion_ids"].size(1), batch_size=self.args.per_device_train_batch_size
        )
        return logps

    def _log_is_fractions(self, ratio: torch.Tensor, mask: torch.Tensor) -> None:
        """Shares of the IS weights TRL applied that masked (weight 0) or truncated (at a clip bound, ``*_truncate``
        modes only) their unit: per token or per sequence as the mode works (``is/*_fraction``), and per
        completion token whatever the mode (``is/*_token_fraction``, comparable across token and sequence modes)."""
        full = ratio.float().cpu()
        full = full.expand(mask.shape) if full.shape != mask.shape else full  # a sequence weight on its tokens
        lo, hi = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        truncating = self.vllm_importance_sampling_mode.endswith("truncate")

        def shares(r):
            cut = (r >= hi) | (r <= lo) if lo is not None else r >= hi
            return [float((r == 0).sum()), float(cut.sum()) if truncating else 0.0, float(r.numel())]

        unit = ratio.float().cpu()
        unit = unit[mask] if unit.shape == mask.shape else unit.flatten()
        counts = self.accelerator.reduce(
            torch.tensor(shares(unit) + shares(full[mask]), device=self.accelerator.device), "sum"
        ).cpu()
        metrics = self._metrics["train"]
        if counts[2] > 0:  # all ranks' counts: the fractions of the whole step's batch
            metrics[schema.IS_MASKED_FRACTION].append(float(counts[0] / counts[2]))
            metrics[schema.IS_TRUNCATED_FRACTION].append(float(counts[1] / counts[2]))
        if counts[5] > 0:
            metrics[schema.IS_MASKED_TOKEN_FRACTION].append(float(counts[3] / counts[5]))
            metrics[schema.IS_TRUNCATED_TOKEN_FRACTION].append(float(counts[4] / counts[5]))

    # -- precision and step bookkeeping ---------------------------------------------------------------------
    def loss_scale(self) -> float | None:
        """The loss scaler's current scale (torch's GradScaler or DeepSpeed's; None without FP16 loss scaling)."""
        scaler = loss_scaler(self.accelerator)
        return float(scaler.get_scale()) if scaler is not None else None

    def end_step(self) -> dict:
        """Audit, scaler state, timings and non-finite checks of the step that just ended."""
        scaler = loss_scaler(self.accelerator)
        record = self.audit.check(
            self.run.train_dtype,
            self.audit.take(),
            scaler,
            gemm_policy=self.gemm_policy,
            gemm_counts=self.gemm_mode.take() if self.gemm_mode is not None else None,
        )
        # π's head: TRL's fused LM head reads lm_head.weight directly (no module to hook); what TRL was told to run
        record[schema.AUDIT_TRL_FP32_HEAD] = bool(self.args.cast_lm_head_to_fp32)
        if record[schema.AUDIT_TRL_FP32_HEAD] != lm_head.sides(self.run.fp32_lm_head)[0]:
            raise amp.PrecisionError(
                f"fp32_lm_head={self.run.fp32_lm_head!r} but TRL's cast_lm_head_to_fp32 is "
                f"{self.args.cast_lm_head_to_fp32}"
            )
        record[schema.AUDIT_ENGINE_HEAD_DTYPE] = self.vllm_generation.engine_head_dtype()
        if lm_head.sides(self.run.fp32_lm_head)[1] and record[schema.AUDIT_ENGINE_HEAD_DTYPE] != "fp32":
            raise amp.PrecisionError(
                f"requested an FP32 LM head in the engine but it produced "
                f"{record[schema.AUDIT_ENGINE_HEAD_DTYPE]} logits"
            )
        record.update(self.param_counts)
        record[schema.AUDIT_ROLLOUT_GEMM] = self.vllm_generation.engine_gemm()
        record[schema.AUDIT_ROLLOUT_DTYPE] = self.vllm_generation.engine_dtype()
        if record[schema.AUDIT_ROLLOUT_DTYPE] != self.run.rollout:
            raise amp.PrecisionError(
                f"requested a {self.run.rollout} rollout but the engine holds "
                f"{record[schema.AUDIT_ROLLOUT_DTYPE]} weights"
            )
        if self.run.rollout_format is not None:  # the format's GEMMs ran this step, or the run stops here
            record.update(self.vllm_generation.format_audit())
        record["loss_scale"] = self.loss_scale()
        record.update(self.step_bins.take(self.accelerator))
        capped, answers = self.accelerator.reduce(
            torch.tensor(self.vllm_generation.take_length_hits(), dtype=torch.float64, device=self.accelerator.device),
            "sum",
        ).tolist()
        record[schema.LENGTH_CAPPED] = int(
            capped
        )  # ended at max_completion_length: no closing tag, reward 0 for a grader
        record[schema.LENGTH_CAPPED_FRACTION] = capped / answers if answers else 0.0
        seconds = self.vllm_generation.take_seconds()
        record.update(
            {
                schema.TIME_ROLLOUT: seconds["generate"],
                schema.TIME_SYNC: seconds["sync"],
                schema.TIME_MISMATCH: self._mismatch_seconds,
                schema.TIME_SCORE: self._score_seconds - seconds["generate"] - seconds["sync"],
            }
        )
        if self._needs_pi:
            raise RuntimeError(f"step {self.state.global_step}: a batch ended without its mismatch metrics")
        self._mismatch_seconds = self._score_seconds = 0.0
        bad = next((b for b in gather_object([first_non_finite(self.model)]) if b), None)  # any rank's shard
        if bad is not None:
            raise NonFiniteError(f"step {self.state.global_step}: parameter {bad!r} holds NaN/inf")
        return record

    def close(self) -> None:
        self.audit.remove()
        self.vllm_generation.close()


@contextlib.contextmanager
def fp32_logits(model: torch.nn.Module):
    """While active, ``model``'s forward returns its logits in float32, so TRL's log-softmax (π) runs in FP32.

    FSDP2's ``MixedPrecisionPolicy(output_dtype=...)`` (accelerate sets it to the half format) casts the root
    module's outputs in a forward hook registered when the model was wrapped; this hook is registered later, so it
    runs after that cast and the log-probs are never rounded to BF16/FP16 (a BF16 log p ≈ −3 is off by up to
    0.016). Under autocast the logits are the half ``lm_head`` output either way; only the log-softmax changes.
    It reaches ``.logits`` only (the kept-mass forward); TRL's fused head returns ``log_probs``, which FSDP2 would
    already have rounded: that path is kept in FP32 by FSDP2's policy itself (``nbkit.rl.fsdp``)."""

    def upcast(module, inputs, output):
        logits = getattr(output, "logits", None)
        if isinstance(logits, torch.Tensor) and logits.dtype in (torch.float16, torch.bfloat16):
            output.logits = logits.float()
        return output

    handle = model.register_forward_hook(upcast)
    try:
        yield
    finally:
        handle.remove()


class StepLogger(TrainerCallback):
    """Appends one row per optimiser step to ``metrics.jsonl`` and watches for collapse and overflow."""

    def __init__(
        self,
        trainer: PrecisionGRPOTrainer,
        log: MetricsLog,
        alarm: CollapseAlarm,
        max_skips: int,
        reward_tally: list | None = None,
        rank_log: MetricsLog | None = None,
        accuracy: bool = True,
    ):
        self.trainer, self.log, self.alarm, self.max_skips = trainer, log, alarm, max_skips
        self.accuracy = accuracy  # the reward is 0/1 correctness: log it as ``accuracy`` too
        self.reward_tally, self.rank_log = reward_tally, rank_log  # this process's (sum, count) per reward call
        self.pending: dict = {}
        self.skips_in_row = 0
        self.skipped_total = 0
        self.step_start = time.perf_counter()
        self.scale_before = None
        self.alarms: list[tuple[int, str]] = []

    def on_step_begin(self, args, state, control, **kw):
        self.step_start = time.perf_counter()
        self.scale_before = self.trainer.loss_scale()

    def on_step_end(self, args, state, control, **kw):
        rec = self.trainer.end_step()
        rec["skipped_step"] = step_was_skipped(self.trainer.accelerator, self.scale_before, rec["loss_scale"])
        rec[schema.TIME_STEP] = time.perf_counter() - self.step_start
        rec[schema.TIME_UPDATE] = (
            rec[schema.TIME_STEP]
            - rec[schema.TIME_ROLLOUT]
            - rec[schema.TIME_SYNC]
            - rec[schema.TIME_MISMATCH]
            - rec[schema.TIME_SCORE]
        )
        self.skips_in_row = self.skips_in_row + 1 if rec["skipped_step"] else 0
        self.skipped_total += rec["skipped_step"]
        rec["skipped_steps_total"] = self.skipped_total
        rec.update(self._per_rank(state.global_step, rec))
        self.pending = rec
        if self.skips_in_row >= self.max_skips:
            raise NonFiniteError(
                f"step {state.global_step}: {self.skips_in_row} FP16 steps in a row overflowed "
                f"(gradients inf/NaN; loss scale now {rec['loss_scale']})"
            )

    def on_log(self, args, state, control, logs=None, **kw):
        if not self.pending:  # the trainer's end-of-run summary, not a step
            return
        reported = logs  # the very dict the callbacks after this one get: the trackers (``report_to``), if any
        logs = dict(logs or {})
        if "loss" in logs and not np.isfinite(logs["loss"]) and self.trainer.loss_scale() is None:
            raise NonFiniteError(f"step {state.global_step}: the loss is {logs['loss']}")
        row = {"step": state.global_step, **logs, **self.pending}
        if "reward" in row and self.accuracy:
            row["accuracy"] = row["reward"]  # rewards are 0/1 correctness
        message = self.alarm.update(row)
        if message:
            row["alarm"] = message
            self.alarms.append((state.global_step, message))
            if state.is_world_process_zero:
                print(f"[nbkit] collapse alarm at step {state.global_step}: {message}", flush=True)
        if state.is_world_process_zero:  # one metrics.jsonl per run, whatever the number of processes
            self.log.append(row)
        if args.report_to and reported is not None:  # the workbook's own keys join TRL's in the user's tracker
            reported.update({k: v for k, v in row.items() if k not in reported and k != "step"})
        self.pending = {}

    def _per_rank(self, step: int, rec: dict) -> dict:
        """Every process's own audit and reward sum of this step, gathered (the row shows all ranks were
        audited, and the gathered reward can be checked against the per-rank sums); also in ``rank_log``."""
        acc = self.trainer.accelerator
        calls = list(self.reward_tally or ())
        if self.reward_tally is not None:
            self.reward_tally.clear()
        own = {
            "rank": acc.process_index,
            schema.AUDIT_MATMUL_DTYPES: rec[schema.AUDIT_MATMUL_DTYPES],
            "reward_sum": sum(c[0] for c in calls),
            "reward_count": sum(c[1] for c in calls),
        }
        if self.rank_log is not None:
            self.rank_log.append({"step": step, **own})
        ranks = gather_object([own])
        return {
            schema.RANKS_AUDIT_MATMUL_DTYPES: [r[schema.AUDIT_MATMUL_DTYPES] for r in ranks],
            schema.RANKS_REWARD_SUM: [r["reward_sum"] for r in ranks],
            schema.RANKS_REWARD_COUNT: [r["reward_count"] for r in ranks],
        }
