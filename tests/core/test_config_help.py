"""Config once (issue 22): every user-facing config dataclass declares a help text for every field in its metadata,
TRL's way (``field(default=..., metadata={"help": ...})``), and carries no field docstrings (a string literal under
a field), so the help lives in one place that ``dataclasses.fields``, ``HfArgumentParser`` and ``field_docs`` read."""

import ast
import dataclasses
import inspect
import pathlib
import textwrap

import pytest

from nbkit.cli import doctor as doctor_cli
from nbkit.engines import SamplingConfig
from nbkit.models.toymodels.arith import ArithConfig
from nbkit.models.toymodels.long_arith import LongArithConfig
from nbkit.models.toymodels.number_after import NumberAfterConfig
from nbkit.models.toymodels.word_arith import WordArithConfig
from nbkit.offline.analysis import GridConfig
from nbkit.offline.anatomy import AnatomyConfig
from nbkit.offline.doctor import DoctorConfig
from nbkit.offline.ladder import LadderConfig
from nbkit.offline.moe_analysis import MoeConfig
from nbkit.rl import RLConfig
from nbkit.studies.hunt import HuntConfig
from nbkit.tasks import TaskConfig
from nbkit.tasks.dataset import BuildConfig

USER_FACING = (
    RLConfig,
    TaskConfig,
    BuildConfig,
    ArithConfig,
    LongArithConfig,
    WordArithConfig,
    NumberAfterConfig,
    SamplingConfig,
    HuntConfig,
    AnatomyConfig,
    DoctorConfig,
    MoeConfig,
    LadderConfig,
    GridConfig,
)
"""The config dataclasses a user fills in (runs, tasks, datasets, sampling, studies, offline analyses)."""
MODEL_RECIPES = {"TinyArithConfig", "TinyLongConfig", "TinyMoeConfig"}
"""``nbkit.models.toymodels``' architecture + SFT recipes of the shipped checkpoints: not run settings, outside this rule."""


def field_docstrings(cls) -> list[str]:
    """Names of ``cls``'s fields written with a docstring: a string literal on the statement after the field."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    return [
        stmt.target.id
        for stmt, after in zip(body, body[1:])
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    ]


def help_problems(cls) -> list[str]:
    """What keeps ``cls`` from the rule: fields without a non-empty ``metadata["help"]``, and field docstrings."""
    problems = [
        f"{cls.__name__}.{f.name}: no metadata['help']"
        for f in dataclasses.fields(cls)
        if not isinstance(f.metadata.get("help"), str) or not f.metadata["help"].strip()
    ]
    return problems + [f"{cls.__name__}.{name}: a field docstring" for name in field_docstrings(cls)]


@pytest.mark.parametrize("cls", USER_FACING, ids=lambda c: c.__name__)
def test_every_field_of_a_user_facing_config_has_its_help_in_metadata_and_no_docstring(cls):
    assert dataclasses.is_dataclass(cls)
    assert help_problems(cls) == []


def test_every_config_dataclass_of_nbkit_is_covered_by_the_rule_or_named_as_outside_it():
    root = pathlib.Path(__file__).resolve().parents[2] / "nbkit"
    found = {
        node.name
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.ClassDef)
        and node.name.endswith("Config")
        and any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    }
    assert found - MODEL_RECIPES == {cls.__name__ for cls in USER_FACING}


@dataclasses.dataclass
class _DocstringStyle:
    """The old way: help as attribute docstrings."""

    steps: int = 3
    """Optimiser steps."""
    name: str = dataclasses.field(default="x", metadata={"help": "A name."})
    """A name, said twice."""


@dataclasses.dataclass
class _HalfDone:
    """Help in metadata for one field, missing or blank for the others."""

    steps: int = dataclasses.field(default=3, metadata={"help": "Optimiser steps."})
    seed: int = 0
    tag: str = dataclasses.field(default="", metadata={"help": "  "})


def test_the_rule_catches_a_field_docstring_and_a_missing_or_blank_help():
    assert help_problems(_DocstringStyle) == [
        "_DocstringStyle.steps: no metadata['help']",
        "_DocstringStyle.steps: a field docstring",
        "_DocstringStyle.name: a field docstring",
    ]
    assert help_problems(_HalfDone) == ["_HalfDone.seed: no metadata['help']", "_HalfDone.tag: no metadata['help']"]


def test_the_help_is_the_former_docstring_word_for_word():
    help_of = {cls: {f.name: f.metadata["help"] for f in dataclasses.fields(cls)} for cls in USER_FACING}
    assert help_of[TaskConfig]["answer_key"] == (
        "Column holding the reference answer (a MATH ``solution`` with its ``\\boxed{}`` works too)."
    )
    assert help_of[BuildConfig]["cache_dir"] == (
        'Root of the pass-rate caches; "" = ``.cache/pass_rates`` of the project.'
    )
    assert help_of[SamplingConfig]["top_p"] == "Nucleus sampling mass; 1.0 = off."
    assert help_of[DoctorConfig]["target_length"].startswith("Response length the training run will reach")


def test_nbkit_doctor_help_gives_each_config_flag_its_fields_own_help(capsys):
    """``nbkit doctor``'s flags for ``DoctorConfig`` fields show the field's help and default (not a hand-written
    line), and every field but the dict of engine arguments has one."""

    with pytest.raises(SystemExit):
        doctor_cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for f in dataclasses.fields(DoctorConfig):
        if f.name == "engine_kwargs":
            continue
        assert "--" + f.name.replace("_", "-") in text, f.name
        assert " ".join(f.metadata["help"].replace("``", "").split()[:6]) in text, f.name
    assert "(default: bf16 fp16)" in text and "(default: 12)" in text
