"""A stored study shown in a notebook: its RESULTS.md section (question, provenance, rule on the record, tables,
findings; or its committed plan while nothing is stored) and its figure, so a notebook section is one call.

    from nbkit.workbook.study_page import show_study
    show_study("harm_threshold_tiny_arith")
"""

from __future__ import annotations

from nbkit import results
from nbkit.studies.catalog import STUDIES
from nbkit.studies.results_md import section


def show_study(name: str) -> bool:
    """Display study ``name``'s page and, when it is stored, its figure; True when it is stored. ValueError naming
    the registered studies for an unknown name (before anything is read)."""
    from IPython.display import Markdown, display

    from nbkit.plots import show

    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; choose from {sorted(STUDIES)}")
    study = STUDIES[name]
    stored = (results.RESULTS / study.name).is_dir()
    display(Markdown(section(study).replace(f"## {study.title}\n", "", 1)))
    if stored:
        fig = study.figure(study.load(), study.stored_meta())
        if fig is not None:
            show(fig)
    return stored
