"""RESULTS.md is generated from the stored studies, and a test fails the moment the two disagree."""

from __future__ import annotations

import pytest

from nbkit import results
from nbkit.cli import main as cli_main
from nbkit.cli import results_md as results_md_command
from nbkit.runtime import outputs
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
    study = STUDIES["hunt_tiny_long"]
    before = results_md.section(study)
    real = study.load

    def fewer_seeds(*a, **k):
        runs = real(*a, **k)
        return {label: rows for label, rows in runs.items() if not label.endswith("-s2")}

    monkeypatch.setattr(study, "load", fewer_seeds)  # the study's reading (its files still pass their check)
    after = results_md.section(study)
    assert after != before and "2 seeds each" in after and "3 seeds each" in before


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "RESULTS.md"  # a page written from other data (a number differs), sealed as written
    body = results_md.render().removesuffix("\n").rpartition("\n")[0] + "\n"
    stale.write_text(outputs.sealed(body.replace("0.", "1.", 1)), encoding="utf-8")
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
    from nbkit.stats.stats import detectable_gap, seeds_needed

    assert seeds_needed(0.06, 0.05) == 14
    assert detectable_gap(0.06, 14) <= 0.05 < detectable_gap(0.06, 13)
    assert seeds_needed(0.01, 0.05) == 3  # two seeds leave one degree of freedom: t(0.975, 1) = 12.7


# --- issue 55, 3 and 15: --out writes only its own page ---------------------------------------------------------------


def _sha(path):
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", ["NOTES.md", "README.md"])
def test_out_refuses_an_existing_file_it_did_not_write_in_one_line(tmp_path, capsys, name):
    from nbkit.cli import main as cli_main

    mine = tmp_path / name
    mine.write_text("# my notes\n\nnot a page of the workbook\n")
    before = _sha(mine)
    assert cli_main.main(["results-md", "--out", str(mine)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(mine) in err[0] and "is not a page this command wrote" in err[0], err
    assert _sha(mine) == before


def test_out_a_folder_or_a_dangling_symlink_is_one_clear_line(tmp_path, capsys):
    from nbkit.cli import main as cli_main

    folder = tmp_path / "pages"
    folder.mkdir()
    assert cli_main.main(["results-md", "--out", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a folder: name a file" in err[0] and "Errno" not in err[0], err
    link = tmp_path / "RESULTS.md"
    link.symlink_to(tmp_path / "gone" / "R.md")
    assert cli_main.main(["results-md", "--out", str(link)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a symlink to" in err[0] and "does not exist" in err[0] and "Errno" not in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RESULTS.md", "pages"] and not any(folder.iterdir())


def _pages(monkeypatch, *bodies):
    """``results_md.page`` gives the sealed ``bodies`` in turn (the stored data changing between runs)."""
    texts = iter(outputs.sealed(results_md.HEADER + body) for body in bodies)
    monkeypatch.setattr(results_md, "page", lambda *a, **k: (next(texts), []))


def test_out_replaces_a_page_it_wrote(tmp_path, monkeypatch):
    page = tmp_path / "R.md"
    _pages(monkeypatch, "\nan older page\n", "\n## a study\n")
    assert results_md_command.main(["--out", str(page)]) == 0
    assert results_md_command.main(["--out", str(page)]) == 0
    assert page.read_text() == outputs.sealed(results_md.HEADER + "\n## a study\n")


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text + "my note, added under the page\n",
        lambda text: text.replace("## a study", "## a study (see my notes)"),
        lambda text: results_md.HEADER + "\nmy own page, under the page's heading\n",
    ],
    ids=["a line appended", "a line changed", "a user's file with the page's heading"],
)
def test_out_refuses_a_page_edited_since_it_was_written(tmp_path, monkeypatch, capsys, edit):
    """Issue 73, 3: what counts is the text that was written (its seal), never the first lines."""
    page = tmp_path / "R.md"
    _pages(monkeypatch, "\n## a study\n", "\n## the study, newer\n")
    assert results_md_command.main(["--out", str(page)]) == 0
    page.write_text(edit(page.read_text()))
    before = _sha(page)
    capsys.readouterr()
    assert cli_main.main(["results-md", "--out", str(page)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a page this command wrote, or was edited since" in err[0], err
    assert _sha(page) == before


# --- issue 55, 7 and 8: a stored study that is not what was stored, or makes no table --------------------------------


def _stored_ppo(root):
    """A copy of the stored ppo_tiny_arith under ``root``, stored anew (so its card carries a seal)."""
    name = "ppo_tiny_arith"
    card = results.card(name)
    results.store(
        name,
        results.load(name),
        command=card["command"],
        wall_seconds=card["wall_seconds"],
        configs=card["configs"],
        notes=card["notes"],
        root=root,
    )
    return root / name / results.CARD


@pytest.mark.parametrize(
    "edit",
    [
        lambda c: c.update(rows=c["rows"] - 1),
        lambda c: next(iter(c["configs"]["runs"].values())).update(lr=1.0),
        lambda c: c.update(wall_seconds=c["wall_seconds"] * 2),
    ],
    ids=["rows", "a run's lr", "wall_seconds"],
)
def test_a_hand_edited_card_fails_the_check_and_regenerating_does_not_bless_it(tmp_path, monkeypatch, capsys, edit):
    import json

    root = tmp_path / "results"
    card_path = _stored_ppo(root)
    monkeypatch.setattr(results, "RESULTS", root)
    studies = {"ppo_tiny_arith": STUDIES["ppo_tiny_arith"]}
    monkeypatch.setattr(results_md, "page", lambda s=studies, r=None, real=results_md.page: real(s, r))
    out = tmp_path / "RESULTS.md"
    assert results_md_command.main(["--out", str(out)]) == 0
    assert results_md_command.main(["--check", "--out", str(out)]) == 0
    capsys.readouterr()
    card = json.loads(card_path.read_text())
    edit(card)
    card_path.write_text(json.dumps(card, indent=1))
    assert results_md_command.main(["--check", "--out", str(out)]) == 1
    said = capsys.readouterr()
    assert "study ppo_tiny_arith" in said.err and "git checkout -- " in said.err, said
    assert "run python -m nbkit.studies.results_md" not in said.out + said.err
    assert results_md_command.main(["--out", str(out)]) == 1  # written, without the edited study's numbers
    assert "**Not shown.** study ppo_tiny_arith" in out.read_text() and "|---" not in out.read_text()
    assert results_md_command.main(["--check", "--out", str(out)]) == 1  # and still failing: not blessed


def test_a_grid_stored_with_replace_that_makes_no_table_is_named_and_the_rest_of_the_page_stays(tmp_path, capsys):
    """Issue 55, 7: after `store --replace` with another grid, `study show` and `results-md --check` failed with an
    anonymous "reference pair ('bf16', 'bf16') is not in the table", and RESULTS.md could not be made at all."""
    from tests.rl.test_replace_safely import finished_runs

    study = STUDIES["ablation_tiny_arith"]
    root = tmp_path / "results"
    _stored_ppo(root)
    full = {**study.toy, "pairs": [["bf16", "bf16"], ["fp32", "fp32"]], "output_dir": str(tmp_path / "a")}
    finished_runs(study, full)
    study.store(wall_seconds=1.0, command="x", root=root, **full)
    assert "**Not shown.**" not in results_md.section(study, root)
    other = {**study.toy, "output_dir": str(tmp_path / "b")}  # no (bf16, bf16): the table's reference
    finished_runs(study, other)
    study.store(wall_seconds=1.0, command="x", root=root, replace=True, **other)
    studies = {s: STUDIES[s] for s in ("ablation_tiny_arith", "ppo_tiny_arith")}
    text, troubles = results_md.page(studies, root)
    assert len(troubles) == 1 and troubles[0].startswith("study ablation_tiny_arith ("), troubles
    assert "reference pair ('bf16', 'bf16') is not in the table" in troubles[0]
    assert f"{study.name}.replaced-" in troubles[0] and "store --replace" in troubles[0]
    assert results_md.section(STUDIES["ppo_tiny_arith"], root) in text  # the rest of the page is made as ever


def test_each_sitting_names_its_own_cpu_flags_and_kernel_caps():
    """A study stored over sittings on several CPUs says, per sitting, which CPU and which kernels ran it."""
    avx2 = {"cpu": "AMD EPYC", "cores": 2, "cpu_flags": ["avx2"]}
    emulated = {**avx2, "cpu_flags": ["avx2", "avx512f", "avx512_bf16"], "kernel_caps": {"ATEN_CPU_CAPABILITY": "avx2"}}
    card = {
        "runs": ["a", "b"],
        "command": "nbkit study x run",
        "machine": emulated,
        "parts": [
            {"commit": "1" * 40, "machine": avx2, "date": "2026-11-28", "wall_seconds": 60, "runs": ["a"]},
            {"commit": "2" * 40, "machine": emulated, "date": "2026-12-02", "wall_seconds": 60, "runs": ["b"]},
            {"commit": "3" * 40, "date": "2026-12-02", "wall_seconds": 60, "runs": []},
        ],
    }
    line = results_md.provenance(STUDIES["smollm2_after"], card)
    # smollm2_after names the training commit where the card records one (none here), the stored-at one beside
    assert (
        "1 run at a training commit not on the card (stored at `1111111111`), AMD EPYC (2 cores; avx2), 2026-11-28"
        in line
    )
    assert (
        "AMD EPYC (2 cores; avx2, avx512f, avx512_bf16; kernels capped: ATEN_CPU_CAPABILITY=avx2), 2026-12-02" in line
    )
    assert "0 runs at a training commit not on the card (stored at `3333333333`), machine not recorded" in line
