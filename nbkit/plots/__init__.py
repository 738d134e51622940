"""Plotly figures of the workbook, one submodule per topic, and ``show`` to display them in a report.

``show(fig)`` embeds the figure as HTML with plotly.js inlined the first time in a kernel, so executed notebooks
converted to HTML display their figures offline (no CDN, no renderer configuration).
"""

from __future__ import annotations

from nbkit.plots import precision

_plotlyjs_sent = False


def show(fig) -> None:
    """Display ``fig`` as self-contained HTML (plotly.js included once per kernel, later figures reuse it)."""
    global _plotlyjs_sent
    from IPython.display import HTML, display

    display(HTML(fig.to_html(full_html=False, include_plotlyjs=not _plotlyjs_sent)))
    _plotlyjs_sent = True


def plotlyjs_sent() -> bool:
    """True once ``show`` has put plotly.js into this kernel's output (later HTML figures can rely on it)."""
    return _plotlyjs_sent


__all__ = ["plotlyjs_sent", "precision", "show"]
