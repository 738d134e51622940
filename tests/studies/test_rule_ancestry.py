"""Pre-registration by git ancestry: each pre-registered study's rule commit is an ancestor of (or equal to) the
commit its first run trained, read from its card (``rule.commit``, ``training_started.commit``). Clock times can be
set by hand; the commit graph cannot be without rewriting main's history, which is never done."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nbkit import results


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def rule_preceded_training(card: dict, repo: Path) -> str:
    """Empty when the card's rule commit is an ancestor of its first training commit, else what is wrong."""
    rule, started = (card.get("rule") or {}).get("commit"), (card.get("training_started") or {}).get("commit")
    if not rule or not started:
        return f"the card names no {'rule' if not rule else 'first training'} commit"
    for c in (rule, started):
        if git(repo, "cat-file", "-e", f"{c}^{{commit}}").returncode:
            return f"commit {c[:10]} is not in this repository's history"
    if git(repo, "merge-base", "--is-ancestor", rule, started).returncode:
        return f"the rule's commit {rule[:10]} is not an ancestor of the first training commit {started[:10]}"
    return ""


PREREGISTERED = sorted(
    p.parent.name for p in results.RESULTS.glob(f"*/{results.CARD}") if "rule" in json.loads(p.read_text())
)


def _history() -> bool:
    shallow = git(results.ROOT, "rev-parse", "--is-shallow-repository")
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


def test_the_nine_studies_stored_with_a_rule_are_the_preregistered_ones():
    assert PREREGISTERED == [
        "corrections_tiny_arith",
        "dose_response_tiny_arith",
        "harm_threshold_tiny_arith",
        "harm_transfer_tiny_long",
        "mechanism_tiny_arith",
        "opsm_tiny_arith",
        "ppo_critic_tiny_arith",
        "predictors_tiny",
        "smollm2_after",
    ]


@pytest.mark.parametrize("name", PREREGISTERED)
def test_each_preregistered_rule_was_committed_before_its_first_run_trained(name):
    if not _history():
        pytest.skip("no full git history in this checkout")
    assert rule_preceded_training(results.card(name), results.ROOT) == ""


def test_a_planted_study_whose_rule_came_after_its_first_training_commit_fails(tmp_path):
    assert git(tmp_path, "init", "-q").returncode == 0
    commits = []
    for i in range(2):
        (tmp_path / "f").write_text(str(i))
        git(tmp_path, "add", "f")
        git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", str(i))
        commits.append(git(tmp_path, "rev-parse", "HEAD").stdout.strip())
    first, second = commits
    assert rule_preceded_training({"rule": {"commit": first}, "training_started": {"commit": second}}, tmp_path) == ""
    planted = {"rule": {"commit": second}, "training_started": {"commit": first}}
    assert "is not an ancestor" in rule_preceded_training(planted, tmp_path)
    assert "not in this repository" in rule_preceded_training(
        {"rule": {"commit": "f" * 40}, "training_started": {"commit": first}}, tmp_path
    )
    assert "no first training commit" in rule_preceded_training({"rule": {"commit": first}}, tmp_path)
