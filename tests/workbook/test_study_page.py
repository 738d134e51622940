"""A notebook shows a stored study with one call: its page, and its figure when stored; its plan when not."""

from __future__ import annotations

import pytest

from nbkit.workbook import study_page


def _capture(monkeypatch):
    shown = []
    import IPython.display

    import nbkit.plots

    monkeypatch.setattr(IPython.display, "display", lambda *xs: shown.extend(xs))
    monkeypatch.setattr(nbkit.plots, "show", lambda fig: shown.append(fig))
    return shown


def test_a_stored_study_shows_its_page_and_its_figure(monkeypatch):
    shown = _capture(monkeypatch)
    assert study_page.show_study("dose_response_tiny_arith") is True
    text = shown[0].data
    assert "**Question.**" in text and "**Findings**" in text
    assert any(hasattr(x, "data") and hasattr(x, "layout") and len(x.data) for x in shown[1:]), "its figure is shown"


def test_a_study_not_stored_shows_its_committed_plan_and_no_result(monkeypatch, tmp_path):
    shown = _capture(monkeypatch)
    monkeypatch.setattr(study_page.results, "RESULTS", tmp_path)
    monkeypatch.setattr("nbkit.studies.results_md.results.RESULTS", tmp_path)
    assert study_page.show_study("corrections_tiny_arith") is False
    assert "**Not stored yet**" in shown[0].data and "committed at" in shown[0].data and len(shown) == 1


def test_an_unknown_study_is_refused_naming_the_registered_ones():
    with pytest.raises(ValueError, match="harm_threshold_tiny_arith"):
        study_page.show_study("no_such_study")
