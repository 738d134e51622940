"""Routing flips in the offline mismatch analysis of a mixture-of-experts model (notebook 02's MoE section).

For each dtype d the HF engine samples in d (μ, with its top-k choice per token and layer), and the trainer
recomputes π of the same tokens by a teacher-forced forward in d (with its own top-k choice), and once in FP32
(the reference routing). Per layer, over the positions that predict a response token:

- ``engine_vs_trainer``: the share of tokens whose top-k set differs between the engine and the trainer in d
  (the flips that make π and μ disagree in RL);
- ``trainer_vs_fp32`` / ``engine_vs_fp32``: the same against the FP32 trainer's routing (what rounding alone
  does to routing in d).

And the π–μ mismatch split by flip: a response token is *flipped* when the position predicting it was routed
differently by engine and trainer in any layer; ``flipped_share_of_mismatch`` is the share of Σ|log π − log μ|
those tokens carry, next to their share of tokens (``upstream_*``: a flip at that position *or any earlier one*,
which reaches the token through attention). vLLM is not used here: its CPU build's routing is not read
by the workbook (see README).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from nbkit.engines import HFEngine, SamplingConfig
from nbkit.mismatch import mismatch
from nbkit.models import models, routing
from nbkit.offline import analysis
from nbkit.offline.anatomy_surgery import right_padded
from nbkit.precision import gemm


@dataclass
class MoeConfig:
    """What the routing-flip analysis samples."""

    model: str = field(
        default="tiny-moe-arith",
        metadata={"help": "A mixture-of-experts model ref for ``nbkit.models.models.load``."},
    )
    dtypes: tuple = field(
        default=("fp32", "bf16", "fp16"),
        metadata={"help": "Engine = trainer dtypes compared (FP32 is also the reference routing)."},
    )
    n_prompts: int = field(
        default=32, metadata={"help": "tiny-arith problems (``nbkit.offline.analysis.load_prompts('arith', ...)``)."}
    )
    samples_per_prompt: int = field(default=4, metadata={"help": "Responses per prompt."})
    max_tokens: int = field(default=40, metadata={"help": "Longest response."})
    seed: int = field(default=0, metadata={"help": "Prompt choice and sampler seed."})
    gemm: str = field(default="auto", metadata={"help": "Half GEMM kernel of both sides (``nbkit.precision.gemm``)."})

    def __post_init__(self) -> None:
        for d in self.dtypes:
            models.torch_dtype(d)
        for name in ("n_prompts", "samples_per_prompt", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")


@dataclass
class MoeResult:
    """Per dtype: flip rates per layer, the mismatch split by flip, and the raw per-token arrays."""

    config: MoeConfig
    flips: dict = field(default_factory=dict)
    """``flips[dtype][comparison]`` → list of per-layer flip rates."""
    split: dict = field(default_factory=dict)
    """``split[dtype]`` → token counts and mean |Δ log p| with and without a flip, share of mismatch carried."""
    seconds: float = 0.0
    gemm: str = ""
    """The GEMM recipe the HF engine's half dtypes ran (``native`` or ``fp32-accumulate``)."""

    def setting(self) -> str:
        """The engine and its recipe; where it is the trainer's own ``fp32-accumulate`` one the engine-vs-trainer
        comparisons hold no engine of its own (``nbkit.offline.analysis.GridResult.shares_trainer_recipe``)."""
        cfg = self.config
        text = f"hf engine (GEMM {self.gemm or 'n/a'}), {cfg.n_prompts} prompts × {cfg.samples_per_prompt} samples"
        if self.gemm in gemm.ROUTED:
            text += (
                "; the HF engine ran the trainer's own fp32-accumulate recipe, so engine-vs-trainer flips and "
                "mismatch are that recipe's floor, not an engine's; trainer-vs-FP32 flips are the format's"
            )
        return text

    def table(self) -> list[dict]:
        """One row per dtype × comparison: mean and per-layer flip rates."""
        rows = []
        for d, comps in self.flips.items():
            for comp, rates in comps.items():
                rows.append(
                    {
                        "dtype": d,
                        "comparison": comp,
                        "mean": round(float(np.mean(rates)), 5),
                        **{f"layer {i}": round(r, 5) for i, r in enumerate(rates)},
                    }
                )
        return rows

    def headline(self) -> dict:
        """Scalars for the findings page."""
        out = {"MoE setting": self.setting()}
        for d, comps in self.flips.items():
            out[f"MoE flip rate engine vs trainer ({d})"] = round(float(np.mean(comps["engine_vs_trainer"])), 5)
            out[f"MoE flip rate trainer vs FP32 ({d})"] = round(float(np.mean(comps["trainer_vs_fp32"])), 5)
            s = self.split[d]
            out[f"MoE share of |Δ log p| on flipped tokens ({d})"] = s["flipped_share_of_mismatch"]
            out[f"MoE share of tokens flipped ({d})"] = s["flipped_share_of_tokens"]
            out[f"MoE share of |Δ log p| on upstream-flipped tokens ({d})"] = s["upstream_flipped_share_of_mismatch"]
            out[f"MoE share of tokens upstream-flipped ({d})"] = s["upstream_flipped_share_of_tokens"]
        return out


def _teacher_forced_routing(model, rollouts, batch: int = 32) -> list[torch.Tensor]:
    """The model's top-k choice per position of prompt + response of each rollout (right-padded batches)."""
    out = []
    for lo in range(0, len(rollouts), batch):
        ids, mask = right_padded(rollouts[lo : lo + batch])
        with torch.no_grad(), routing.capture(model) as rec:
            model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device))
        chosen = rec.choices()
        out += [chosen[i, :n] for i, n in enumerate(mask.sum(1).tolist())]
    return out


def _response_positions(choice: torch.Tensor, prompt_len: int, n: int) -> torch.Tensor:
    """Rows of the positions that predict the ``n`` response tokens (``prompt_len - 1`` …)."""
    return choice[prompt_len - 1 : prompt_len - 1 + n]


def _rates(a: list, b: list, rollouts) -> list[float]:
    pa = torch.cat([_response_positions(x, len(r.prompt_ids), len(r)) for x, r in zip(a, rollouts)])[None]
    pb = torch.cat([_response_positions(x, len(r.prompt_ids), len(r)) for x, r in zip(b, rollouts)])[None]
    return routing.flip_rates(pa, pb, torch.ones(pa.shape[:2], dtype=torch.bool))


def run(cfg: MoeConfig = MoeConfig(), progress: bool = False) -> MoeResult:
    """Sample with the HF engine in each dtype and compare its routing and μ with the trainer's (see module doc)."""
    start = time.time()
    base, tok = models.load(cfg.model)
    if not routing.is_moe(base):
        raise ValueError(f"model {cfg.model!r} has no mixture-of-experts layer; routing flips need a MoE model")
    prompts = analysis.load_prompts("arith", cfg.n_prompts, seed=cfg.seed)
    sampling = SamplingConfig(max_tokens=cfg.max_tokens, n=cfg.samples_per_prompt, seed=cfg.seed)
    res = MoeResult(cfg)
    for d in cfg.dtypes:
        engine = HFEngine(base, d, tokenizer=tok, progress=progress, gemm=cfg.gemm)
        if d != "fp32":
            res.gemm = engine.gemm
        rollouts = [r for r in engine.generate(prompts, sampling) if len(r)]
        trainer = engine.model  # the same cast weights, full teacher-forced forward (as the trainer runs it)

        with gemm.policy(gemm.resolve(cfg.gemm, trainer.device) if d != "fp32" else "native"):
            own = _teacher_forced_routing(trainer, rollouts)
        ref = _teacher_forced_routing(base, rollouts)
        eng = [r.routing for r in rollouts]
        res.flips[d] = {
            "engine_vs_trainer": _rates(eng, own, rollouts),
            "trainer_vs_fp32": _rates(own, ref, rollouts),
            "engine_vs_fp32": _rates(eng, ref, rollouts),
        }
        pi = mismatch.teacher_forced_logprobs(trainer, rollouts, gemm=cfg.gemm, progress=False)
        diff = np.concatenate([np.abs(p - np.asarray(r.logprobs)) for p, r in zip(pi, rollouts)])
        flipped, upstream = [], []
        for e, o, r in zip(eng, own, rollouts):
            f = routing.flips(e[None], o[None]).any(-1)[0]  # per position: routed differently in any layer
            at = slice(len(r.prompt_ids) - 1, len(r.prompt_ids) - 1 + len(r))  # the positions predicting the response
            flipped.append(f[at].numpy())
            upstream.append(f.cummax(0).values[at].numpy())  # or any earlier one (reaches it via attention)
        flipped, upstream = np.concatenate(flipped), np.concatenate(upstream)
        total = float(diff.sum())
        res.split[d] = {
            "tokens": int(diff.size),
            "flipped_tokens": int(flipped.sum()),
            "mean_abs_dlogp_flipped": float(diff[flipped].mean()) if flipped.any() else float("nan"),
            "mean_abs_dlogp_unflipped": float(diff[~flipped].mean()) if (~flipped).any() else float("nan"),
            "flipped_share_of_tokens": round(float(flipped.mean()), 5),
            "flipped_share_of_mismatch": round(float(diff[flipped].sum()) / total, 5) if total > 0 else 0.0,
            "upstream_flipped_share_of_tokens": round(float(upstream.mean()), 5),
            "upstream_flipped_share_of_mismatch": round(float(diff[upstream].sum()) / total, 5) if total > 0 else 0.0,
            "mean_abs_dlogp_upstream_flipped": float(diff[upstream].mean()) if upstream.any() else float("nan"),
        }
    res.seconds = time.time() - start
    return res


def figure(res: MoeResult):
    """Grouped bars: flip rate per layer, one panel per comparison, one colour per dtype."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    comps = ("engine_vs_trainer", "trainer_vs_fp32", "engine_vs_fp32")
    fig = make_subplots(rows=1, cols=len(comps), subplot_titles=[c.replace("_", " ") for c in comps], shared_yaxes=True)
    for d, by in res.flips.items():
        for col, comp in enumerate(comps, start=1):
            rates = by[comp]
            fig.add_trace(
                go.Bar(
                    name=d, x=[f"layer {i}" for i in range(len(rates))], y=rates, legendgroup=d, showlegend=col == 1
                ),
                row=1,
                col=col,
            )
    fig.update_layout(
        title=f"{res.config.model}: routing flip rate per layer (share of response tokens)",
        barmode="group",
        yaxis_title="flip rate",
    )
    return fig


def split_table(res: MoeResult) -> list[dict]:
    """Per dtype: tokens, flipped tokens and the mismatch they carry (see the module doc)."""
    return [{"dtype": d, **s} for d, s in res.split.items()]
