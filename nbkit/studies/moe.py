"""The sanity test on ``tiny-moe-arith``, FP16 vs BF16, with and without router replay, next to the dense tiny-arith.

Every run uses notebook 03's recipe (grpo, 16 prompts × 8 samples, lr 2e-4, ≤ 40 tokens, rollouts in the training
dtype) with the HF rollout engine (the engine whose routing the trainer can replay) on each model's own
perfectible set. Variants, one folder each under ``out``:

- ``dense``: tiny-arith on ``data/tiny_arith_sanity``;
- ``moe``: tiny-moe-arith on ``data/tiny_moe_arith_sanity`` (``moe/flip_rate`` logged every step);
- ``moe_replay``: the same with ``router_replay=True``.

Run labels are ``<variant>.grpo-<dtype>-s<seed>``; a run's variant, dtype and seed are read from its config
(``MoEStudy.coords``). Pieces are resumable (a finished run is never re-run), then stored::

    nbkit study moe_tiny_arith run --set 'variants=["moe"]'      # also: dense, moe_replay
    nbkit study moe_tiny_arith store
"""

from __future__ import annotations

from pathlib import Path

from nbkit.records import runlog, schema
from nbkit.studies import prose
from nbkit.studies.base import GridStudy

VARIANTS = {
    "dense": {"model": "tiny-arith", "dataset": "data/tiny_arith_sanity", "router_replay": False},
    "moe": {"model": "tiny-moe-arith", "dataset": "data/tiny_moe_arith_sanity", "router_replay": False},
    "moe_replay": {"model": "tiny-moe-arith", "dataset": "data/tiny_moe_arith_sanity", "router_replay": True},
}
"""What differs between the study's variants."""

STUDY = "moe_tiny_arith"
"""Name under ``data/results``."""


def base_config(variant: str, steps: int, out: Path):
    """Notebook 03's sanity run (``SANITY_RUN``) for ``variant`` (HF rollouts), into ``out/<variant>``."""
    from nbkit.rl.config import config_from

    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {tuple(VARIANTS)}")
    return config_from(
        {
            **VARIANTS[variant],
            "rollout_engine": "hf",
            "max_steps": steps,
            "checkpoint_every": 0,
            "output_dir": str(out / variant),
            "overwrite": True,
        }
    )


def summary(runs: dict[str, list[dict]], meta: dict[str, dict]) -> list[dict]:
    """Per variant × dtype over seeds (``nbkit.records.runlog.seed_summary``; the group reads ``<variant>.<algorithm>``)
    plus the mean ``moe/flip_rate``; ``meta`` holds each run's coordinates (``MoEStudy.coords``)."""
    groups = {k: {**m, "algorithm": f"{m['variant']}.{m['algorithm']}"} for k, m in meta.items()}
    table = runlog.seed_summary(runlog.summary_table(runs, target=0.95), groups)
    for row in table:
        flips = [
            r[schema.MOE_FLIP_RATE]
            for label, rows in runs.items()
            for r in rows
            if schema.MOE_FLIP_RATE in r
            and (groups[label]["algorithm"], groups[label]["dtype"]) == (row["algorithm"], row["dtype"])
        ]
        row[COLUMNS["flip_rate"]] = round(sum(flips) / len(flips), 5) if flips else None
    return table


COLUMNS = {
    "algorithm": "algorithm",
    "dtype": "dtype",
    "seeds": "seeds",
    "reached": "reached 95%",
    "final": "final accuracy (mean)",
    "final_range": "final accuracy [min, max]",
    "mismatch": "mean |Δ log p| last 5 (mean)",
    "flip_rate": "moe/flip_rate (mean over steps and seeds)",
}
"""The study table's named fields → the headers ``summary`` (``nbkit.records.runlog.seed_summary``) gives them."""
FINDING = (
    "{variant}: BF16's mismatch over the last 5 steps is {ratio:.1f}× FP16's; final accuracy {bf16} (BF16) vs "
    "{fp16} (FP16), ranges {bf16_range} and {fp16_range}."
)
"""A variant's sentence, over the named fields of its BF16 and FP16 rows."""


class MoEStudy(GridStudy):
    """The stored MoE study: options ``variants``, ``dtypes``, ``seeds`` (a list, or ``{variant: list}``),
    ``steps``, ``output_dir`` and ``RLConfig`` fields in ``overrides``."""

    name = STUDY
    title = "Mixture of experts: routing and router replay"
    question = "Does a mixture-of-experts model widen the BF16 gap, and does router replay close it?"
    statistic = (
        "final accuracy = last 5-step mean, mean and [min, max] over seeds; mismatch = mean |Δ log p| of the "
        "last 5 steps, mean over seeds; flip rate = mean over steps and seeds."
    )
    notebook = "02_mismatch_analysis"
    output_dir = "runs/moe_tiny_arith"
    twins = 2
    toy = {
        "variants": ["moe"],
        "dtypes": ["fp32"],
        "seeds": [0],
        "steps": 1,
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8},
    }

    def defaults(self) -> dict:
        return {"variants": list(VARIANTS), "dtypes": ["fp16", "bf16"], "seeds": [0, 1, 2], "steps": 40}

    def grid(
        self,
        variants=tuple(VARIANTS),
        dtypes=("fp16", "bf16"),
        seeds=(0, 1, 2),
        steps: int = 40,
        output_dir: str | None = None,
        overrides: dict | None = None,
    ) -> dict:
        from dataclasses import replace

        out = {}
        for variant in variants:
            base = base_config(variant, steps, Path(output_dir or self.output_dir))
            for seed in seeds.get(variant, []) if isinstance(seeds, dict) else seeds:
                for dtype in dtypes:
                    run = runlog.run_label("grpo", dtype, seed)
                    out[f"{variant}.{run}"] = replace(
                        base, train_dtype=dtype, seed=seed, output_dir=str(base.out / run), **(overrides or {})
                    )
        return out

    def coords(self, config: dict) -> dict:
        variant = next(
            (
                v
                for v, fields in VARIANTS.items()
                if fields["model"] == config["model"] and fields["router_replay"] == config["router_replay"]
            ),
            None,
        )
        if variant is None:
            raise ValueError(
                f"model {config['model']!r} with router_replay={config['router_replay']} is not a "
                f"variant of this study ({sorted(VARIANTS)})"
            )
        return {**runlog.coords(config), "variant": variant}

    def table(self, runs, meta):
        return [{h: r[h] for h in COLUMNS.values()} for r in summary(runs, meta)]

    def findings(self, runs, meta, rows):
        by = {(r["algorithm"], r["dtype"]): r for r in prose.named(rows, COLUMNS)}
        out = []
        for variant in ("moe.grpo", "moe_replay.grpo"):
            a, b = by.get((variant, "bf16")), by.get((variant, "fp16"))
            if a and b and a["mismatch"] and b["mismatch"]:
                out.append(
                    FINDING.format(
                        variant=variant.split(".")[0],
                        ratio=a["mismatch"] / b["mismatch"],
                        bf16=a["final"],
                        fp16=b["final"],
                        bf16_range=a["final_range"],
                        fp16_range=b["final_range"],
                    )
                )
        return out
