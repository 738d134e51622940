"""``nbkit train``: one RL run from the command line, a YAML file, or both (flags override the file).

    nbkit train --algorithm pg_seq_is --train-dtype fp16 --max-steps 40
    nbkit train --config run.yaml --max-steps 10               # the file, then the flags
    accelerate launch --num_processes 2 -m nbkit.cli.train --config run.yaml
    nbkit train --config run.yaml --print-config           # the resolved config as YAML, nothing loaded

Every ``RLConfig`` field is a flag (``--field-name`` or ``--field_name``; booleans also as ``--no-field-name``)
made by ``transformers.HfArgumentParser`` from the dataclass, its help the field's ``metadata["help"]`` in
``nbkit/rl/config.py``: one place documents a field. The file's values become the parser's defaults (as TRL's
``TrlParser`` does), so flags override them. A YAML key is a field name (``train_dtype`` or ``train-dtype``).
Unknown keys, a key given twice (YAML would keep the last), values of the wrong type and values ``RLConfig``
rejects stop the command before any model or dataset loads, naming the key and the valid choices. A run
folder's ``config.json`` is itself a valid ``--config``. A field's old name (``nbkit.rl.config.RENAMED``: ``steps``
for ``max_steps``, ...) is read as its new one, as a key and as a flag; both names for one field are refused.
On the command line ``null`` (or ``None``) sets an optional field to None; ``none`` stays the string (a choice of
``correction``).
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a program (python -m, accelerate launch): caches in the project before HF loads
    from nbkit.runtime import gcfreeze as _gcfreeze
    from nbkit.runtime import paths as _paths

    _paths.setup_environment()
    _gcfreeze.suspend()  # no automatic collection while the imports below load torch and transformers

import argparse
import copy
import difflib
import sys
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType

from transformers import HfArgumentParser

import nbkit.rl as rl
from nbkit.cli.commands import INTERRUPTED, Parser
from nbkit.rl import launch, runfolder
from nbkit.rl.config import RENAMED, RLConfig, renamed
from nbkit.rl.run import check_trl, world
from nbkit.rl.runfolder import BOOKKEEPING
from nbkit.runtime.fieldcheck import spec

NONE_TEXTS = ("null", "None", "")
"""A flag's text that sets an optional field to None (``none`` is not one: it is a ``correction``)."""


def field_docs(cls=RLConfig) -> dict[str, str]:
    """Field name → its help, ``metadata["help"]`` where the field is declared (whitespace collapsed)."""
    return {f.name: " ".join(f.metadata["help"].split()) for f in fields(cls) if "help" in f.metadata}


def field_types(cls=RLConfig) -> dict[str, tuple[type, bool]]:
    """Field name → (base type, None allowed) from the annotations (``str | None`` → (str, True))."""
    return {name: (base, optional) for name, (base, optional, _) in spec(cls).items()}


def convert(name: str, value, base: type, optional: bool):
    """``value`` (from a flag's text or a YAML scalar) as the field's type; ValueError naming the key otherwise."""
    if value is None or (optional and isinstance(value, str) and value in NONE_TEXTS):
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
    if base is dict:
        return _mapping(name, value)
    try:
        return base(float(value)) if base is int and isinstance(value, float) else base(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expects {'an integer' if base is int else 'a number'}, got {value!r}") from None


def _mapping(name: str, value) -> dict:
    """A mapping field's value: a YAML mapping, or a flag's YAML/JSON text of one."""
    import yaml

    if isinstance(value, str):
        try:
            value = yaml.safe_load(value) if value.strip() else {}
        except yaml.YAMLError:
            raise ValueError(f"{name}: expects a mapping (YAML or JSON), got {value!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name}: expects a mapping of names to values, got {value!r}")
    return value


def read_config_file(path: str | Path) -> dict:
    """The fields set in a YAML (or JSON) file, type-checked; unknown keys are an error naming the close ones."""
    import yaml

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"config file {str(path)!r} is a folder: name a YAML or JSON file in it")
    if not path.is_file():
        raise FileNotFoundError(f"config file {str(path)!r} not found")
    text = _config_text(path)
    try:
        check_unique_keys(text, path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(
            f"config file {str(path)!r}{where} is not valid YAML "
            f"({getattr(exc, 'problem', None) or exc}); give a mapping of RLConfig fields"
        ) from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValueError(
            f"config file {str(path)!r}: expects a mapping of RLConfig fields (key: value lines), got "
            f"a {type(data).__name__}"
        )
    types_, lines = field_types(), key_lines(text)
    try:
        renamed(dict.fromkeys(str(key).replace("-", "_") for key in data))
    except ValueError as exc:
        raise ValueError(f"config file {str(path)!r}: {exc}") from None
    out = {}
    for key, value in data.items():
        name = RENAMED.get(str(key).replace("-", "_"), str(key).replace("-", "_"))
        where = f"config file {str(path)!r}" + (f", line {lines[str(key)]}" if str(key) in lines else "")
        if name not in types_:
            close = difflib.get_close_matches(name, list(types_), n=3)
            raise ValueError(
                f"{where}: unknown key {key!r}"
                + (f" (did you mean {close}?)" if close else "")
                + f"; valid keys: {sorted(types_)}"
            )
        try:
            value = convert(name, value, *types_[name])
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if name in BOOKKEEPING:  # how a run was invoked: never replayed from a file (runfolder.BOOKKEEPING)
            if value:
                print(
                    f"[nbkit] {where}: {name}: true is ignored (a config file never replaces or continues a "
                    f"run); pass --{name} on the command line",
                    file=sys.stderr,
                )
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
        raise ValueError(
            f"config file {str(path)!r} is not UTF-8 text (byte {exc.start}): give a YAML or JSON "
            f"file of RLConfig fields"
        ) from None


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


def check_unique_keys(text: str, path: str | Path) -> None:
    """ValueError naming the key and both lines when a mapping of the file (at any depth) gives one key twice:
    PyYAML (and ``json``) silently keep the last, so ``train_dtype: fp16`` ... ``train_dtype: bf16`` would train
    in BF16. A file that is not valid YAML is left to the parser's own error."""
    import yaml

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        if not isinstance(node, yaml.MappingNode):
            continue
        first: dict[str, tuple[str, int]] = {}
        for key, value in node.value:
            name, line = str(key.value), key.start_mark.line + 1
            field = name.replace("-", "_") if node is root else name  # train-dtype is train_dtype at the top
            if field in first:
                spelled, earlier = first[field]
                also = f" (as {spelled!r})" if spelled != name else ""
                raise ValueError(
                    f"config file {str(path)!r}, line {line}: key {name!r} is given twice (first on line "
                    f"{earlier}{also}); keep one of them"
                )
            first[field] = (name, line)
            stack.append(value)


class RLConfigParser(Parser, HfArgumentParser):
    """``transformers.HfArgumentParser`` over a config dataclass, with two narrow changes HF's own flags lack:

    - a bool field is an ``argparse.BooleanOptionalAction`` (``--lora`` / ``--no-lora``, and ``--overwrite false``
      is refused): HF adds ``--no-x`` only when the default is True, and reads ``--x false`` as a value;
    - every other flag's text goes through ``convert`` (an error names the field and the value; ``null`` is None
      for an optional field) instead of HF's bare ``int`` / ``float`` / ``str``.

    HF sets each dataclass field's ``type`` to the resolved hint while it builds the flags; they are put back, so
    building a parser leaves the dataclass as declared. TRL's ``TrlParser`` is not used: its ``--config`` takes the
    file's values unchecked (no types, no line numbers, no close match) and exports an ``env`` block.
    """

    def __init__(self, cls=RLConfig, **kwargs):
        self._field_types = field_types(cls)  # read by _parse_dataclass_field during HF's __init__
        declared = {f.name: f.type for f in fields(cls)}
        try:
            super().__init__(cls, **kwargs)
        finally:
            for f in fields(cls):
                f.type = declared[f.name]

    def _parse_dataclass_field(self, parser, field):
        base, optional = self._field_types[field.name]
        field = copy.copy(field)  # argparse takes HF's metadata as keywords: the help only (the config checks the rest)
        old = list(dict.fromkeys(f"--{o}" for n in OLD_NAMES.get(field.name, ()) for o in (n, n.replace("_", "-"))))
        field.metadata = MappingProxyType({k: v for k, v in field.metadata.items() if k == "help"} | {"aliases": old})
        if base is bool:
            parser.add_argument(
                *dict.fromkeys([f"--{field.name}", f"--{field.name.replace('_', '-')}", *old]),
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=field.default,
                help=field.metadata.get("help"),
            )
        else:
            HfArgumentParser._parse_dataclass_field(parser, field)
            parser._actions[-1].type = _flag_type(field.name, base, optional)
        action = parser._actions[-1]
        action.help = action.help and action.help.replace("%", "%%")  # argparse %-formats help texts


OLD_NAMES = {new: (old,) for old, new in RENAMED.items()}
"""Field → its old names, read as flags too (``--steps`` is ``--max-steps``)."""


def check_renamed_flags(argv: list[str]) -> None:
    """ValueError naming both flags where ``argv`` gives one field under its old and its new name (argparse would
    keep the last)."""
    given = {a.split("=", 1)[0][2:].removeprefix("no-").replace("-", "_") for a in argv if a.startswith("--")}
    for old, new in RENAMED.items():
        if old in given and new in given:
            raise ValueError(f"--{old} and --{new} are one field, {new} (--{old} is its old name): give it once")


def build_parser() -> RLConfigParser:
    """The ``nbkit train`` parser: ``--config``, ``--print-config``, ``--quiet`` and one flag per ``RLConfig`` field."""
    parser = RLConfigParser(prog="nbkit train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", metavar="FILE", help="YAML (or JSON) file of RLConfig fields; flags override it")
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config as YAML and exit without loading anything",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
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
    pre = argparse.ArgumentParser(add_help=False, prog=parser.prog)
    pre.add_argument("--config")
    path = pre.parse_known_args(argv)[0].config
    try:
        from_file = read_config_file(path) if path else {}
    except (ValueError, FileNotFoundError) as exc:
        parser.error(str(exc))
    parser.set_defaults(**from_file)  # the file's values as defaults: flags override them (TrlParser's way)
    try:
        check_renamed_flags(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        parser.error(str(exc))
    args = parser.parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in fields(RLConfig)}
    try:
        try:
            cfg = RLConfig(**values)
        except (ValueError, TypeError) as exc:  # a value from the file: name the file and line
            name = str(exc).split(" ", 1)[0].rstrip(":")
            if name in from_file and (values[name] is from_file[name] or values[name] == from_file[name]):  # nan
                lines = key_lines(_config_text(Path(path)))
                spelled = (name, name.replace("_", "-"), *OLD_NAMES.get(name, ()))  # as the file may spell it
                line = next((lines[k] for k in spelled if k in lines), None)
                raise ValueError(f"config file {path!r}" + (f", line {line}" if line else "") + f": {exc}") from None
            raise
        check_trl(cfg)  # a TRL setting the workbook makes from its own fields
        if not args.print_config:
            launch.check_launch(cfg.train_dtype)  # an accelerate launch that does not fit the run
            launch.check_lora(cfg.lora, cfg.train_dtype)  # LoRA under half-precision ZeRO: refused, with the reason
    except (ValueError, TypeError, FileNotFoundError) as exc:
        parser.error(str(exc))
    return cfg, args


def interrupted(cfg: RLConfig) -> str:
    """The one line a Ctrl-C leaves: the step reached, the last complete checkpoint and how to continue."""
    done = runfolder.last_logged_step(cfg.out)
    complete = runfolder.checkpoints(cfg.out)[0]
    if complete:
        return (
            f"\nnbkit train: interrupted at step {done}; last checkpoint {complete[-1].name}; resume with "
            f"`nbkit train ... --resume` (the same flags, --resume instead of --overwrite)"
        )
    return (
        f"\nnbkit train: interrupted at step {done}; no checkpoint to resume from (checkpoint_every="
        f"{cfg.checkpoint_every}): start it again with --overwrite, or set --checkpoint-every K to make it "
        f"resumable"
    )


def main(argv: list[str] | None = None) -> int:
    cfg, args = resolve(argv)
    if args.print_config:
        import yaml

        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        return 0
    try:
        result = rl.train(cfg, progress=not args.quiet)  # (looked up when called: a test replaces it)
    except KeyboardInterrupt:
        print(interrupted(cfg), file=sys.stderr, flush=True)
        return INTERRUPTED
    if world()[0] == 0:
        print(
            f"[nbkit] {result.steps} steps in {result.seconds:.0f} s, final accuracy "
            f"{result.final_accuracy:.3f}; metrics: {result.out / 'metrics.jsonl'}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    from nbkit.cli.commands import guarded

    _gcfreeze.resume()
    sys.exit(guarded(main, prog="nbkit train"))
