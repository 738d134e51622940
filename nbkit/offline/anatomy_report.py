"""The anatomy of π − μ told in prose: a few printed lines per result (``summary``) and this run's reading of its
anatomies as markdown generated from the numbers (``compare``). The measurement is ``nbkit.offline.anatomy``."""

from __future__ import annotations

from nbkit.offline.anatomy import DELTA, PATHS, UNATTRIBUTED, AnatomyResult
from nbkit.records import schema


def _delta(entry: dict) -> str:
    ci = entry["CI"]
    return f"{entry[DELTA]:+.2g}" + (f" [{ci[0]:+.2g}, {ci[1]:+.2g}]" if ci else "")


def summary(res: AnatomyResult) -> str:
    """A few printed lines: each group's steps, unattributed remainder and total (signed Δ log p per token)."""
    lines = [
        f"anatomy of π − μ: {res.config.model}, {res.engine} engine, {res.config.dtype}, GEMM "
        f"{res.gemm_policy} ({DELTA}, 95 % CI over sequences; steps + unattributed = total)"
    ]
    for group in PATHS:
        parts = ", ".join(f"{f} {_delta(res.split[group][f])}" for f in res.factors(group))
        lines.append(
            f"  {group}: {parts}; unattributed {_delta(res.split[group][UNATTRIBUTED])}; "
            f"total {_delta(res.split[group]['total'])}"
        )
    token = schema.METRIC_TOKEN_ABS_LOGP_DIFF
    lines.append(
        "  mean |Δ log p| from FP32: " + ", ".join(f"{side} {m[token]:.3g}" for side, m in res.from_fp32.items())
    )
    lines.append(
        "  LM head in FP32 (mean |Δ log p|): " + ", ".join(f"{c} {m[token]:.3g}" for c, m in res.heads.items())
    )
    return "\n".join(lines)


def compare(results: dict[str, AnatomyResult], metric: str = schema.METRIC_TOKEN_ABS_LOGP_DIFF) -> str:
    """This run's reading of its anatomies, as markdown generated from the numbers (``dtype → result``): each
    format's π − μ (``metric``) with its CI, the largest implementation step and the format's unattributed share,
    and whether FP16 sits further from π than BF16 (an order is called only when the CIs are apart)."""

    def value(m: dict) -> str:
        ci = m.get(f"{metric} CI")
        return f"{m[metric]:.2g}" + (f" (95 % CI {ci[0]:.2g}–{ci[1]:.2g})" if ci else "")

    if not results:
        return "_no anatomy in this run_"
    first = next(iter(results.values()))
    name = "mean |log π − log μ| per token" if metric == schema.METRIC_TOKEN_ABS_LOGP_DIFF else metric
    lines = [
        f"**This run** ({first.config.model}, {first.engine} engine, GEMM {first.gemm_policy}; {name}, "
        f"CIs by bootstrap over sequences):"
    ]
    for dtype, res in results.items():
        total = res.metrics[("implementation", "total")]
        big = res.largest("implementation")
        fmt = res.split["format"]
        share = fmt[UNATTRIBUTED][DELTA] / fmt["total"][DELTA] if fmt["total"][DELTA] else float("nan")
        lines.append(
            f"- {dtype}: π − μ {value(total)}; largest implementation step `{big}` "
            f"{_delta(res.split['implementation'][big])} of {_delta(res.split['implementation']['total'])} "
            f"(signed Δ log p per token); format path unattributed {share:.0%} of its total."
        )
    if {"bf16", "fp16"} <= set(results):
        bf, fp = (results[d].metrics[("implementation", "total")] for d in ("bf16", "fp16"))
        cb, cf = bf.get(f"{metric} CI"), fp.get(f"{metric} CI")
        if cb and cf and cf[0] > cb[1]:
            verdict = "FP16's μ is further from π than BF16's (CIs apart), against the paper's order, on this CPU"
        elif cb and cf and cb[0] > cf[1]:
            verdict = "BF16's μ is further from π than FP16's (CIs apart), as in the paper"
        else:
            verdict = "the two cannot be told apart at this size (CIs overlap or were not computed)"
        lines.append(f"- BF16 against FP16: {verdict}.")
    return "\n".join(lines)
