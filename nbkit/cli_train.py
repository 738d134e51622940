"""``nbkit train``: one RL run from the command line, a YAML file, or both (flags override the file).

    nbkit train --algorithm pg_seq_is --train-dtype fp16 --steps 40
    nbkit train --config run.yaml --steps 10               # the file, then the flags
    accelerate launch --num_processes 2 -m nbkit.cli_train --config run.yaml
    nbkit train --config run.yaml --print-config           # the resolved config as YAML, nothing loaded

Every ``RLConfig`` field is a flag (``--field-name``; booleans also as ``--no-field-name``) whose help text is the
docstring under the field in ``nbkit/rl/config.py``, read from the source: one place documents a field. A YAML
key is a field name (``train_dtype`` or ``train-dtype``). Unknown keys, values of the wrong type and values
``RLConfig`` rejects stop the command before any model or dataset loads, naming the key and the valid choices.
A run folder's ``config.json`` is itself a valid ``--config``.
"""
from __future__ import annotations

if __name__ == "__main__":  # run as a program (python -m, accelerate launch): caches in the project before HF loads
    from nbkit import paths as _paths

    _paths.setup_environment()

import argparse
import ast
import difflib
import inspect
import sys
import types
import typing
from dataclasses import MISSING, fields
from pathlib import Path

from nbkit import launch
from nbkit.rl.config import RLConfig


def field_docs(cls=RLConfig) -> dict[str, str]:
    """Field name → the string literal written right under it in the class body (the TRL-style field doc)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def field_types(cls=RLConfig) -> dict[str, tuple[type, bool]]:
    """Field name → (base type, None allowed) from the annotations (``str | None`` → (str, True))."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
        base = next((a for a in args if a is not type(None)), hint)
        out[f.name] = (base, type(None) in args)
    return out


def convert(name: str, value, base: type, optional: bool):
    """``value`` (from a flag's text or a YAML scalar) as the field's type; ValueError naming the key otherwise."""
    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "null", "")):
        if optional:
            return None
        raise ValueError(f"{name}: None is not allowed (expects {base.__name__})")
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ValueError(f"{name}: expects true or false, got {value!r}")
    if base is int and (isinstance(value, bool) or (isinstance(value, float) and not value.is_integer())):
        raise ValueError(f"{name}: expects an integer, got {value!r}")
    if base is str and not isinstance(value, str):
        raise ValueError(f"{name}: expects a string, got {value!r}")
    try:
        return base(float(value)) if base is int and isinstance(value, float) else base(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expects {'an integer' if base is int else 'a number'}, got {value!r}") from None


def read_config_file(path: str | Path) -> dict:
    """The fields set in a YAML (or JSON) file, type-checked; unknown keys are an error naming the close ones."""
    import yaml

    from nbkit.rl.runfolder import BOOKKEEPING

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {str(path)!r} not found")
    text = _config_text(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(f"config file {str(path)!r}{where} is not valid YAML "
                         f"({getattr(exc, 'problem', None) or exc}); give a mapping of RLConfig fields") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValueError(f"config file {str(path)!r}: expects a mapping of RLConfig fields (key: value lines), got "
                         f"a {type(data).__name__}")
    types_, lines = field_types(), key_lines(text)
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        where = f"config file {str(path)!r}" + (f", line {lines[str(key)]}" if str(key) in lines else "")
        if name not in types_:
            close = difflib.get_close_matches(name, list(types_), n=3)
            raise ValueError(f"{where}: unknown key {key!r}" + (f" (did you mean {close}?)" if close else "")
                             + f"; valid keys: {sorted(types_)}")
        try:
            value = convert(name, value, *types_[name])
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if name in BOOKKEEPING:  # how a run was invoked: never replayed from a file (runfolder.BOOKKEEPING)
            if value:
                print(f"[nbkit] {where}: {name}: true is ignored (a config file never replaces or continues a "
                      f"run); pass --{name} on the command line", file=sys.stderr)
            continue
        out[name] = value
    return out


def _config_text(path: Path) -> str:
    """The text of a config file; ValueError naming the file for a binary or non-UTF-8 one."""
    raw = path.read_bytes()
    if b"\0" in raw[:8192]:
        raise ValueError(f"config file {str(path)!r} is a binary file, not YAML or JSON text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"config file {str(path)!r} is not UTF-8 text (byte {exc.start}): give a YAML or JSON "
                         f"file of RLConfig fields") from None


def key_lines(text: str) -> dict[str, int]:
    """Top-level key → its 1-based line in a YAML/JSON mapping ({} for anything else)."""
    import yaml

    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(k.value): k.start_mark.line + 1 for k, _ in node.value}


def build_parser() -> argparse.ArgumentParser:
    """The ``nbkit train`` parser: ``--config``, ``--print-config`` and one flag per ``RLConfig`` field."""
    parser = argparse.ArgumentParser(
        prog="nbkit train", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--config", metavar="FILE", help="YAML (or JSON) file of RLConfig fields; flags override it")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved config as YAML and exit without loading anything")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    docs, types_ = field_docs(), field_types()
    group = parser.add_argument_group("RLConfig fields (nbkit/rl/config.py)")
    for f in fields(RLConfig):
        base, optional = types_[f.name]
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else None
        help_text = docs.get(f.name, "").replace("%", "%%")
        if base is bool:
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                               help=f"{help_text} (default: {default})")
        else:
            group.add_argument(flag, dest=f.name, metavar=base.__name__.upper(), default=argparse.SUPPRESS,
                               type=_flag_type(f.name, base, optional), help=f"{help_text} (default: {default})")
    return parser


def _flag_type(name: str, base: type, optional: bool):
    def parse(text: str):
        try:
            return convert(name, text, base, optional)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = base.__name__
    return parse


def resolve(argv: list[str] | None = None) -> tuple[RLConfig, argparse.Namespace]:
    """The ``RLConfig`` of a command line (file, then flags); argparse errors (exit 2) for anything invalid."""
    parser = build_parser()
    args = parser.parse_args(argv)
    options = {"config", "print_config", "quiet"}
    values, flags = {}, {k: v for k, v in vars(args).items() if k not in options}
    try:
        if args.config:
            values.update(read_config_file(args.config))
        values.update(flags)
        try:
            cfg = RLConfig(**values)
        except (ValueError, TypeError) as exc:  # a value from the file: name the file and line
            name = str(exc).split(" ", 1)[0].rstrip(":")
            if args.config and name in values and name not in flags:
                lines = key_lines(_config_text(Path(args.config)))
                line = lines.get(name, lines.get(name.replace("_", "-")))
                raise ValueError(f"config file {args.config!r}" + (f", line {line}" if line else "")
                                 + f": {exc}") from None
            raise
        if not args.print_config:
            launch.check_launch(cfg.train_dtype)  # an accelerate launch that does not fit the run
    except (ValueError, TypeError, FileNotFoundError) as exc:
        parser.error(str(exc))
    return cfg, args


def main(argv: list[str] | None = None) -> int:
    cfg, args = resolve(argv)
    if args.print_config:
        import yaml

        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        return 0
    from nbkit.rl import train

    result = train(cfg, progress=not args.quiet)
    from nbkit.rl.run import world

    if world()[0] == 0:
        print(f"[nbkit] {result.steps} steps in {result.seconds:.0f} s, final accuracy "
              f"{result.final_accuracy:.3f}; metrics: {result.out / 'metrics.jsonl'}", flush=True)
    return 0


if __name__ == "__main__":
    from nbkit.commands import guarded

    sys.exit(guarded(main, prog="nbkit train"))
