"""RESULTS.md is generated from the stored studies, and a test fails the moment the two disagree."""

from __future__ import annotations

import pytest

from nbkit import results
from nbkit.cli import results_md as results_md_command
from nbkit.studies import hunt, markdown_table, results_md
from nbkit.studies.catalog import STUDIES


def test_results_md_is_up_to_date():
    """Regenerate with `python -m nbkit.studies.results_md` when this fails."""
    assert results_md.PATH.read_text(encoding="utf-8") == results_md.render(), (
        "RESULTS.md is out of date: run `python -m nbkit.studies.results_md`"
    )


def test_every_stored_study_is_read_and_every_registered_study_is_stored_unless_planned():
    from nbkit.studies.catalog import PLANNED

    stored = {
        p.name for p in results.RESULTS.iterdir() if (p / results.CARD).is_file() and results.REPLACED not in p.name
    }  # a replaced study kept beside (store --replace) is no study
    assert stored <= set(STUDIES)
    assert set(STUDIES) - stored <= set(PLANNED), "a registered study is neither stored nor planned"
    for name in set(STUDIES) - stored:  # its page says there is no result yet
        assert "**Not stored yet**" in results_md.section(STUDIES[name])


def test_the_page_follows_the_stored_data(monkeypatch):
    """Drop one seed of the hunt: the page's hunt table changes, so a stale RESULTS.md cannot pass the check."""
    before = results_md.section(STUDIES["hunt_tiny_long"])
    real = results.load

    def fewer_seeds(study, *a, **k):
        runs = real(study, *a, **k)
        return {label: rows for label, rows in runs.items() if not label.endswith("-s2")}

    monkeypatch.setattr(results, "load", fewer_seeds)
    after = results_md.section(STUDIES["hunt_tiny_long"])
    assert after != before and "2 seeds each" in after and "3 seeds each" in before


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "RESULTS.md"
    stale.write_text(results_md.render().replace("0.", "1.", 1), encoding="utf-8")
    assert results_md_command.main(["--check", "--out", str(stale)]) == 1
    assert "OUT OF DATE" in capsys.readouterr().out
    assert results_md_command.main(["--out", str(stale)]) == 0
    assert results_md_command.main(["--check", "--out", str(stale)]) == 0


def test_each_section_states_question_and_statistic_before_its_table():
    text = results_md.render()
    for study in STUDIES.values():
        sec = text[text.index(f"## {study.title}") :]
        sec = sec[: sec.find("\n## ")] if "\n## " in sec else sec
        if "**Not stored yet**" in sec:  # a planned study: its statistic stated, and no table of results
            assert sec.index("**Question.**") < sec.index("**Statistic.**") and "|---" not in sec
            continue
        assert sec.index("**Question.**") < sec.index("**Statistic.**") < sec.index("|---")


def test_markdown_table_names_a_missing_column():
    with pytest.raises(KeyError, match="'nope'"):
        markdown_table([{"a": 1}], ["a", "nope"])
    assert markdown_table([{"a": 0.00012, "b": None, "c": "x|y"}]).splitlines()[2] == "| 0.00012 | — | x\\|y |"


@pytest.mark.parametrize("n_seeds", [1, 2, 3])
def test_false_flag_rate_without_margin_is_the_chance_that_every_seed_is_negative(n_seeds):
    assert hunt.false_flag_rate(0.05, n_seeds, margin=0.0) == pytest.approx(0.5**n_seeds, abs=0.004)


def test_false_flag_rate_falls_as_the_margin_grows_against_the_noise():
    rates = [hunt.false_flag_rate(0.05, 3, margin=m) for m in (0.0, 0.02, 0.05, 0.1)]
    assert rates == sorted(rates, reverse=True) and rates[-1] < 0.01
    with pytest.raises(ValueError, match="sd must be > 0"):
        hunt.false_flag_rate(0.0, 3)


def test_the_hunts_seeds_needed_use_the_paired_t_tests_own_quantiles():
    # the normal formula, (1.96 + 0.8416)^2 * (0.06 / 0.05)^2 = 11.3 -> 12 seeds, is short of what the t-test it names
    # needs: (t(0.975, 13) + 0.8416) * 0.06 / sqrt(14) = 0.0481 <= 0.05, while 13 seeds give 0.0503
    from nbkit.stats import detectable_gap, seeds_needed

    assert seeds_needed(0.06, 0.05) == 14
    assert detectable_gap(0.06, 14) <= 0.05 < detectable_gap(0.06, 13)
    assert seeds_needed(0.01, 0.05) == 3  # two seeds leave one degree of freedom: t(0.975, 1) = 12.7
