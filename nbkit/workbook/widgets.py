"""Live ipywidgets of the precision primer (JupyterLab): bits, grids, probability ratios, loss scales.

Each explorer is a small class: ``.widget`` is what to display (the object displays itself too), and its
callbacks are plain methods (``on_value_change``, ``flip_bit``, ...) that update the state and the output
widgets, so tests call them directly. Headless (papermill) they render as static widget views; the primer
shows the same content as static figures next to them.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence

import ipywidgets as W
import numpy as np

from nbkit import plots
from nbkit.offline.ladder import LadderConfig, run_ladder
from nbkit.plots import mismatch as PM
from nbkit.plots import precision as PP
from nbkit.precision import formats
from nbkit.precision import number_formats as P
from nbkit.records import schema
from nbkit.runtime.paths import report_target

FIELD_STYLES = {"sign": "danger", "exponent": "success", "mantissa": "info"}
"""Button style of each bit field: sign red, exponent green, mantissa blue."""


def _table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A small HTML table (cells escaped)."""
    head = "".join(f"<th style='padding:2px 8px'>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td style='padding:2px 8px'>{html.escape(str(c))}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _static(w: W.Widget) -> str:
    """Static HTML of a widget tree: boxes as rows/columns, HTML as is, controls as "name: value", plotly
    figures of Output widgets drawn with plotly.js (loaded once per page by ``nbkit.plots.show``)."""
    import plotly.io as pio

    if isinstance(w, W.Box):
        direction = "row" if isinstance(w, W.HBox) else "column"
        inner = "".join(_static(c) for c in w.children)
        return f"<div style='display:flex;flex-direction:{direction};gap:2px 10px;flex-wrap:wrap'>{inner}</div>"
    if isinstance(w, W.HTML):
        return f"<div>{w.value}</div>"
    if isinstance(w, W.Label):
        return f"<span style='min-width:90px'>{html.escape(w.value)}</span>"
    if isinstance(w, W.ToggleButton):
        return f"<code>{html.escape(w.description)}</code>"
    if isinstance(w, W.Output):
        figs = [
            o["data"]["application/vnd.plotly.v1+json"]
            for o in w.outputs
            if "application/vnd.plotly.v1+json" in o.get("data", {})
        ]
        return "".join(
            pio.to_html(
                {"data": f["data"], "layout": f["layout"]}, full_html=False, include_plotlyjs=not plots.plotlyjs_sent()
            )
            for f in figs
        )
    if hasattr(w, "value"):
        value = ", ".join(map(str, w.value)) if isinstance(w.value, tuple) else w.value
        return f"<span><b>{html.escape(getattr(w, 'description', ''))}</b> {html.escape(str(value))}</span>"
    return ""


class _Explorer:
    """Shared display plumbing: the explorer displays as its ``widget``."""

    widget: W.Widget

    def _repr_mimebundle_(self, **kwargs):
        """The live widget view, plus a static fallback (``text/html``) that a report without a kernel shows: one
        line saying how to get the live version and the widget's current (default) state, figures included."""
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = f"{type(self).__name__}: a live widget; run the notebook in JupyterLab to use it."
        bundle["text/html"] = self.static_html()
        return bundle

    def static_html(self) -> str:
        """How to get the live widget, then its current state as static HTML (controls as text, figures drawn)."""
        where = report_target()
        notebook = f"notebooks/{where[1]}.ipynb" if where else "this notebook"
        return (
            f"<p class='nbkit-live-hint'><b>Live widget</b> ({type(self).__name__}): run <code>make lab</code> "
            f"and open <code>{notebook}</code> to move its controls; below, its default state.</p>"
            f"<div class='nbkit-static-widget'>{_static(self.widget)}</div>"
        )

    @staticmethod
    def _render(out: W.Output, fig) -> None:
        """Show ``fig`` in ``out`` as plotly's mimetype (JupyterLab's plotly extension draws it) by setting the
        Output widget's ``outputs`` directly. Not ``with out: display(...)``: under papermill that capture makes
        nbclient answer on the shell channel, which intermittently hangs execution (jupyter/nbclient#312)."""
        spec = json.loads(fig.to_json())
        bundle = {
            "application/vnd.plotly.v1+json": {"data": spec["data"], "layout": spec.get("layout", {}), "config": {}},
            "text/plain": "plotly figure",
        }
        out.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)


class BitExplorer(_Explorer):
    """Type a value, see its bits in each format; flip any bit and see the value it encodes and the error."""

    def __init__(self, value: str = "0.1", formats: Sequence = ("fp32", "bf16", "fp16", "fp8_e4m3fn", "fp8_e5m2")):
        self.formats = [P.get_format(f) for f in formats]
        self.target = math.nan
        """The typed value (float64)."""
        self.bits: dict[str, int] = {}
        """Current bit pattern per format (starts as the typed value rounded, then follows the flips)."""
        self._syncing = False
        self.value_input = W.Text(value=str(value), description="value", continuous_update=False)
        self.message = W.HTML()
        self.buttons: dict[str, list[W.ToggleButton]] = {}
        self.labels: dict[str, W.HTML] = {}
        rows = []
        for f in self.formats:
            buttons = []
            for i in range(f.bits):
                field = "sign" if i == 0 else "exponent" if i <= f.exponent_bits else "mantissa"
                b = W.ToggleButton(
                    description="0",
                    button_style=FIELD_STYLES[field],
                    tooltip=f"{field} bit",
                    layout=W.Layout(width="26px", padding="0"),
                )
                b.observe(lambda change, name=f.name, i=i: self._on_toggle(name, i, change["new"]), names="value")
                buttons.append(b)
            self.buttons[f.name] = buttons
            self.labels[f.name] = W.HTML()
            rows.append(
                W.VBox([W.HBox([W.Label(f.name, layout=W.Layout(width="90px")), *buttons]), self.labels[f.name]])
            )
        self.value_input.observe(self.on_value_change, names="value")
        legend = W.HTML("<b>sign</b> red, <b>exponent</b> green, <b>mantissa</b> blue; click a bit to flip it")
        self.widget = W.VBox([W.HBox([self.value_input, self.message]), legend, *rows])
        self.on_value_change({"new": self.value_input.value})

    def on_value_change(self, change: dict) -> None:
        """Parse the typed value and show it rounded to every format (an unparsable value leaves the state)."""
        text = str(change["new"]).strip()
        try:
            self.target = float(text)
        except ValueError:
            self.message.value = f"<span style='color:red'>cannot read {html.escape(text)!r} as a number</span>"
            return
        self.message.value = ""
        for f in self.formats:
            self.bits[f.name] = P.to_bits(self.target, f)
            self._sync(f.name)

    def flip_bit(self, fmt, i: int) -> None:
        """Flip bit ``i`` (0 = sign, counted from the left as displayed) of ``fmt``'s pattern."""
        f = P.get_format(fmt)
        if not 0 <= i < f.bits:
            raise ValueError(f"bit index {i!r} is outside {f.name}; valid indices are 0..{f.bits - 1}")
        self.bits[f.name] ^= 1 << (f.bits - 1 - i)
        self._sync(f.name)

    def decomposition(self, fmt) -> P.Decomposition:
        """The fields of ``fmt``'s current pattern."""
        name = P.get_format(fmt).name
        return P.decompose_bits(self.bits[name], name, value=self.target)

    def _on_toggle(self, name: str, i: int, pressed: bool) -> None:
        if not self._syncing and pressed != (self.decomposition(name).bit_string[i] == "1"):
            self.flip_bit(name, i)

    def _sync(self, name: str) -> None:
        """Show ``name``'s pattern on its buttons and its value and error in its label."""
        d = self.decomposition(name)
        self._syncing = True
        try:
            for b, c in zip(self.buttons[name], d.bit_string):
                b.value, b.description = c == "1", c
        finally:
            self._syncing = False
        err = abs(d.rounded - self.target)
        rel = err / abs(self.target) if self.target != 0 and math.isfinite(self.target) else math.nan
        self.labels[name].value = (
            f"<code>{d.bit_string[0]} {d.exponent_bits} {d.mantissa_bits}</code> = <b>{d.rounded:.10g}</b> "
            f"({d.kind}{'' if d.unbiased_exponent is None else f', 2^{d.unbiased_exponent}'}) &nbsp; error vs typed: {err:.3g} (relative {rel:.3g})"
        )


class GridExplorer(_Explorer):
    """The representable values of chosen formats around a chosen center."""

    def __init__(self, center: float = 1.0, rel_width: float = 0.03, formats: Sequence[str] = ("fp16", "bf16")):
        self.center = W.FloatLogSlider(
            value=center, base=10, min=-8, max=4, step=0.05, description="center", continuous_update=False
        )
        self.rel_width = W.FloatLogSlider(
            value=rel_width, base=10, min=-3, max=-0.5, step=0.1, description="± rel. width", continuous_update=False
        )
        self.formats = W.SelectMultiple(
            options=list(P.NUMBER_FORMATS), value=tuple(formats), description="formats", rows=5
        )
        self.summary = W.HTML()
        self.out = W.Output()
        self.figure = None
        """The last figure drawn."""
        self.counts: dict[str, int] = {}
        """Representable values per format in the current window."""
        for w in (self.center, self.rel_width, self.formats):
            w.observe(self.on_change, names="value")
        self.widget = W.VBox([W.HBox([W.VBox([self.center, self.rel_width]), self.formats]), self.summary, self.out])
        self.on_change()

    def on_change(self, change: dict | None = None) -> None:
        """Recount and redraw the grid for the current center, width and formats."""
        c, w, fmts = self.center.value, self.rel_width.value, list(self.formats.value)
        try:
            self.counts = {f: len(P.representable_grid(c * (1 - w), c * (1 + w), f)) for f in fmts}
        except ValueError as e:
            self.summary.value = f"<span style='color:red'>{html.escape(str(e))}</span>"
            return
        self.summary.value = _table(
            ["format", f"values in {c:.4g} ± {w:.2%}", "ulp at center"],
            [(f, n, f"{P.ulp(c, f):.4g}") for f, n in self.counts.items()],
        )
        self.figure = PP.grid_figure([c], fmts, rel_width=w)
        self._render(self.out, self.figure)


class RatioExplorer(_Explorer):
    """Two close probabilities π, μ rounded in each format: the ratio, PPO's clip and the KL terms."""

    def __init__(self, pi: float = 0.9002, mu: float = 0.9001, clip: float = 0.2):
        self.pi = W.FloatText(value=pi, description="π (trainer)", step=1e-4)
        self.mu = W.FloatText(value=mu, description="μ (rollout)", step=1e-4)
        self.clip = W.FloatSlider(value=clip, min=0.05, max=0.5, step=0.05, description="PPO clip ε")
        self.table = W.HTML()
        self.rows: list[P.RatioRow] = []
        """The rows currently shown."""
        for w in (self.pi, self.mu, self.clip):
            w.observe(self.on_change, names="value")
        self.widget = W.VBox([W.HBox([self.pi, self.mu, self.clip]), self.table])
        self.on_change()

    def on_change(self, change: dict | None = None) -> None:
        """Recompute the rows for the current π, μ and clip (bad input shows the error instead)."""
        try:
            self.rows = P.probability_ratios(self.pi.value, self.mu.value, clip=self.clip.value)
        except ValueError as e:
            self.rows = []
            self.table.value = f"<span style='color:red'>{html.escape(str(e))}</span>"
            return
        self.table.value = _table(
            ["format", "π stored", "μ stored", "π/μ", "log π/μ", "clipped?", "k1", "k3", "tokens to leave clip"],
            [
                (
                    r.format,
                    f"{r.pi:.8g}",
                    f"{r.mu:.8g}",
                    f"{r.ratio:.8f}",
                    f"{r.log_ratio:.3e}",
                    "yes" if r.clipped else "no",
                    f"{r.k1:.3e}",
                    f"{r.k3:.3e}",
                    f"{r.tokens_to_clip:.4g}",
                )
                for r in self.rows
            ],
        )


class LossScaleExplorer(_Explorer):
    """Gradients from 1e-9 to 1e-2 stored in fp16 under a chosen loss scale: what survives."""

    def __init__(self, log2_scale: int = 16):
        self.log2_scale = W.IntSlider(
            value=log2_scale, min=0, max=30, description="log2 scale", continuous_update=False
        )
        self.table = W.HTML()
        self.out = W.Output()
        self.demo: P.LossScalingDemo | None = None
        """The demo currently shown."""
        self.figure = None
        """The last figure drawn."""
        self.log2_scale.observe(self.on_scale_change, names="value")
        self.widget = W.VBox([self.log2_scale, self.table, self.out])
        self.on_scale_change()

    def on_scale_change(self, change: dict | None = None) -> None:
        """Redo the cast for the current scale and redraw."""
        self.demo = P.loss_scaling_demo(scale=2.0**self.log2_scale.value)
        counts = self.demo.counts()
        lost = {
            k: int(np.sum(e > P.NUMBER_FORMATS["fp16"].unit_roundoff))
            for k, e in (("without scale", self.demo.rel_error_unscaled), ("with scale", self.demo.rel_error_scaled))
        }
        self.table.value = _table(
            ["fp16 storage", "flushed to 0", "subnormal", "normal", "overflow to inf", "error > eps/2"],
            [(k, c["zero"], c["subnormal"], c["normal"], c["inf"], lost[k]) for k, c in counts.items()],
        )
        self.figure = PP.loss_scaling_figure(self.demo)
        self._render(self.out, self.figure)


class FormatExplorer(_Explorer):
    """Pick a rollout format (``nbkit.precision.formats``): the HF engine samples tiny-arith in it now and an FP32
    trainer
    scores the same tokens; see μ against π per token and each sequence's Σ log(π/μ) against its length."""

    def __init__(
        self,
        model: str = "tiny-arith",
        choices: Sequence[str] | None = None,
        value: str = "mxfp4",
        n_prompts: int = 8,
        samples_per_prompt: int = 2,
        seed: int = 0,
    ):
        self.model, self.n_prompts, self.samples, self.seed = model, n_prompts, samples_per_prompt, seed
        choices = list(choices or formats.FORMATS)
        self.picker = W.Dropdown(options=choices, value=formats.validate(value), description="format")
        self.picker.observe(lambda change: self.on_format(change["new"]), names="value")
        self.summary = W.HTML()
        self.scatter, self.drift = W.Output(), W.Output()
        self.result = None
        """The last ``nbkit.offline.ladder.LadderResult`` (one format)."""
        self.widget = W.VBox([self.picker, self.summary, W.HBox([self.scatter, self.drift])])
        self.on_format(self.picker.value)

    def on_format(self, name: str) -> None:
        """Sample in ``name``, score with FP32 π, redraw (seconds on tiny-arith)."""
        self.result = run_ladder(
            LadderConfig(
                model=self.model,
                formats=(name,),
                n_prompts=self.n_prompts,
                samples_per_prompt=self.samples,
                n_boot=0,
                seed=self.seed,
            )
        )
        m = self.result.metrics[name]
        self.summary.value = _table(
            ["format", "tokens", "mean |Δ log p| per token", "k1 per token", "sequence KL", "quantized GEMMs"],
            [
                (
                    name,
                    int(m["n_tokens"]),
                    f"{m[schema.METRIC_TOKEN_ABS_LOGP_DIFF]:.3g}",
                    f"{m['kl_k1']:.3g}",
                    f"{m['seq_kl']:.3g}",
                    self.result.audits[name][schema.AUDIT_ROLLOUT_FORMAT_GEMMS],
                )
            ],
        )
        pairs = self.result.pairs()
        self._render(
            self.scatter,
            PM.token_scatter(pairs).update_layout(
                title=f"{self.model}: π (FP32) vs μ ({name}) per token", width=520, height=420
            ),
        )
        self._render(
            self.drift,
            PM.seq_log_ratio_vs_length(pairs).update_layout(
                title=f"Σ log(π/μ) per sequence vs length ({name})", width=520, height=420
            ),
        )
