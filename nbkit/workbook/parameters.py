"""A notebook's parameters checked before any work, by the same typed checks the command lines use.

Papermill injects parameters as given (``papermill ... -p seeds 0`` makes ``seeds`` an int, ``-p target_accuracy
high`` a string), so each notebook checks them in the cell right after its parameters cell, in one line::

    from nbkit.workbook.parameters import check_notebook_parameters

    check_notebook_parameters("03_rl_training", globals())

``nbkit run`` calls the same ``check_values`` on a profile's parameters before any notebook starts
(``nbkit.workbook.runner.check_parameters``). What is checked, each with ``nbkit.runtime.fieldcheck.check_value`` (what
every
config's ``__post_init__`` runs) or the check of the library that takes the value:

- the type of the notebook's own default (its ``parameters`` cell, read with ``ast``): an int stays an integer (no
  bool, no float), a float a finite number, a string a string, a list a list (of the default's element type), a
  dict a dict; a default of None takes anything;
- ranges (``RANGES``): seeds are 32-bit, shares and probabilities lie in [0, 1], counts are >= 1, other ints >= 0;
- names (``CHOICES``): dtypes, engines, GEMM policies, RL presets, corrections, rollout formats, tiny-long regimes;
  ``config_overrides`` / ``ppo_overrides`` keys are ``RLConfig`` fields; ``lo <= hi``.

A name the notebook has no parameter of is refused too (``check_names``): ``nbkit run`` checks a profile's names,
the check cell the names papermill injected (``papermill ... -p nosuchparam 3`` would otherwise run the whole default
study). A refusal is one ``ParameterError`` line naming the notebook, the parameter, the value and what it must be (in a
notebook its traceback is that line: nothing of the checker's internals).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nbkit.runtime.fieldcheck import SEED, FieldRangeError, FieldTypeError, Range, at_least, check_value, positive, unit
from nbkit.runtime.paths import ROOT

NOTEBOOKS = ROOT / "notebooks"


class ParameterError(ValueError):
    """A notebook parameter of the wrong type, range or name; its message is the whole report."""

    def _render_traceback_(self) -> list[str]:
        """IPython shows this instead of a traceback: the one line."""
        return [f"ParameterError: {self}"]


COUNTS = (
    "n_prompts",
    "samples_per_prompt",
    "max_tokens",
    "steps",
    "prompts_per_step",
    "n_samples",
    "n_random",
    "max_length",
    "batch_prompts",
    "smooth",
    "arith_digits",
)
"""Name endings of parameters that count something that must exist (>= 1); other integers are >= 0."""

RANGES: dict[str, Range] = {
    "seed": SEED,
    "seeds": SEED,
    "target_accuracy": unit(lo_open=True),
    "lo": unit(),
    "hi": unit(),
    "top_p": unit(lo_open=True),
    "temperature": positive(),
    "mean_nll": positive(),
    "loss_scale": positive(),
    "init_scale": positive(),
    "lrs": positive(),
    "critic_lr": positive(),
}
"""Name (or name ending, after ``_``) → the range of the value, or of each element of a list."""


def _rl(name: str) -> Callable[[object], object]:
    def check(value):
        import nbkit.rl.algorithms as algorithms

        table = algorithms.ALGORITHMS if name == "algorithms" else algorithms.CORRECTIONS
        if value not in table:
            raise ValueError(f"unknown {name[:-1]} {value!r}; choose one of {sorted(table)}")

    return check


def _one_of(kind: str, choices: Callable[[], tuple | list | dict]) -> Callable[[object], object]:
    def check(value):
        known = choices()
        if value not in known:
            raise ValueError(f"unknown {kind} {value!r}; choose one of {sorted(known)}")

    return check


def _dtypes():
    from nbkit.models.models import DTYPES

    return DTYPES


def _engines():
    from nbkit.engines import ENGINE_KINDS

    return (*ENGINE_KINDS, "auto")


def _gemm(value):
    from nbkit.precision import gemm

    gemm.validate(value)


def _format(value):
    import nbkit.precision.dial  # noqa: F401 - registers the dial's points with nbkit.precision.formats
    from nbkit.precision import formats

    formats.get(value)  # a ValueError naming the formats (the dial's points included)


def _lengths():
    from nbkit.models.toymodels.long_arith import REGIMES

    return REGIMES


def _pair(value):
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"expects a [train, rollout] pair of dtypes, got {value!r}")
    for dt in value:
        _one_of("dtype", _dtypes)(dt)


def _overrides(value):
    from nbkit.rl.config import check_field_names

    check_field_names(value)


CHOICES: dict[str, Callable[[object], object]] = {
    "dtype": _one_of("dtype", _dtypes),
    "dtypes": _one_of("dtype", _dtypes),
    "engine": _one_of("engine", _engines),
    "gemm": _gemm,
    "algorithms": _rl("algorithms"),
    "corrections": _rl("corrections"),
    "formats": _format,
    "format": _format,
    "lengths": _one_of("tiny-long regime", _lengths),
    "pairs": _pair,
}
"""Name (or name ending, after ``_``) → the check of a value (of each element of a list) against its choices."""

WHOLE: dict[str, Callable[[object], object]] = {"config_overrides": _overrides, "ppo_overrides": _overrides}
"""Name → a check of the whole value (a dict of ``RLConfig`` fields)."""


def _lookup(table: dict, name: str):
    """The entry of ``name`` or of its longest ``_``-separated ending (``live_seeds`` → ``seeds``)."""
    parts = name.split("_")
    for i in range(len(parts)):
        key = "_".join(parts[i:])
        if key in table:
            return table[key]
    return None


def _range(name: str, base) -> Range | None:
    found = _lookup(RANGES, name)
    if found is None and base is int and any(name == c or name.endswith("_" + c) for c in COUNTS):
        return at_least(1)
    return found


def _parameter_assignments(path: Path) -> list[tuple[str, object]]:
    """``(name, value expression)`` of each assignment in the notebook's ``parameters`` cell (read with ``ast``:
    papermill's own inspection misreads lines whose comment holds an ``=``)."""
    import ast

    import nbformat

    cells = [c for c in nbformat.read(path, as_version=4).cells if "parameters" in c.metadata.get("tags", [])]
    if not cells:
        return []
    return [
        (target.id, node.value)
        for node in ast.parse(cells[0].source).body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    ]


def notebook_parameters(path: Path) -> set[str]:
    """The names the notebook's ``parameters`` cell assigns."""
    return {name for name, _ in _parameter_assignments(path)}


def notebook_defaults(path: Path) -> dict:
    """The notebook's ``parameters`` cell as ``name → default value``; a value that is no literal is refused
    (a profile is compared with these values: ``nbkit.workbook.profiles`` holds only what differs)."""
    import ast

    out = {}
    for name, value in _parameter_assignments(path):
        try:
            out[name] = ast.literal_eval(value)
        except ValueError:
            raise ValueError(
                f"notebook {path.stem}: parameter {name} = {ast.unparse(value)} is not a literal; write its value"
            ) from None
    return out


def defaults(stem: str) -> dict:
    """Notebook ``stem``'s parameters cell as ``name → default value`` (``notebook_defaults``)."""
    return notebook_defaults(notebook_path(stem))


def notebook_path(stem: str) -> Path:
    path = NOTEBOOKS / f"{stem}.ipynb"
    if not path.is_file():
        known = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
        raise ParameterError(f"no notebook {stem!r}; notebooks: {known}")
    return path


def check_value_like(stem: str, name: str, value, default) -> None:
    """``value`` of parameter ``name`` checked against its default's type and the name's range and choices."""
    where = f"notebook {stem}: parameter {name}"
    try:
        if default is not None:
            base = type(default)
            check_value(name, value, base, False, _range(name, base) if base in (int, float) else None)
            if isinstance(default, list) and default:
                kinds = {type(d) for d in default}
                element = kinds.pop() if len(kinds) == 1 else None
                for i, item in enumerate(value):
                    if element in (bool, int, float, str):
                        check_value(f"{name}[{i}]", item, element, False, _range(name, element))
        choice = _lookup(CHOICES, name)
        if choice is not None and value is not None:
            for item in value if isinstance(value, (list, tuple)) and name.endswith("s") else [value]:
                choice(item)
    except (FieldTypeError, FieldRangeError, ValueError, TypeError) as exc:
        raise ParameterError(f"{where} = {value!r}: {exc}") from None
    if name in WHOLE:
        try:
            WHOLE[name](value)
        except ValueError as exc:
            raise ParameterError(f"notebook {stem}: {name} {exc}") from None


def check_values(stem: str, values: dict, known: dict | None = None) -> None:
    """Check the parameters ``values`` of notebook ``stem`` (only those it has; ``known``: its defaults, read from
    the notebook when not given); the first bad one raises ``ParameterError``."""
    known = defaults(stem) if known is None else known
    for name, value in values.items():
        if name in known:
            check_value_like(stem, name, value, known[name])
    lo, hi = values.get("lo", known.get("lo")), values.get("hi", known.get("hi"))
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi:
        raise ParameterError(f"notebook {stem}: lo = {lo!r} is above hi = {hi!r}; the kept window is [lo, hi]")


def check_names(stem: str, names, known: dict) -> None:
    """``ParameterError`` naming every one of ``names`` that notebook ``stem`` has no parameter of (papermill would
    only warn, then run the notebook with its own values), and its parameters."""
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ParameterError(f"notebook {stem} has no parameter(s) {unknown}; its parameters: {sorted(known)}")


INJECTED = "# Parameters\n"
"""How papermill's injected cell begins (``papermill.translators.PythonTranslator.codify``)."""


def injected_names(namespace: dict) -> list[str]:
    """The names papermill's injected cell assigned, read from the kernel's input history (IPython's ``In``, in the
    notebook's ``globals()``); [] outside papermill."""
    import ast

    names = []
    for source in namespace.get("In") or []:
        if isinstance(source, str) and source.startswith(INJECTED):
            try:
                body = ast.parse(source).body
            except SyntaxError:
                continue
            names += [
                t.id for node in body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
            ]
    return names


def check_notebook_parameters(stem: str, namespace: dict) -> None:
    """Check every parameter of notebook ``stem`` as it is in ``namespace`` (the notebook's ``globals()``, after
    papermill's injected cell) before any work: a name papermill injected that the notebook has no parameter of
    (``-p nosuchparam 3``), then each value; raises one ``ParameterError`` line for the first bad one."""
    known = defaults(stem)
    check_names(stem, injected_names(namespace), known)
    check_values(stem, {name: namespace[name] for name in known if name in namespace}, known)
