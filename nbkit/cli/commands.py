"""The ``nbkit`` subcommands besides ``run`` and ``list`` (``nbkit.cli.main``): name → (module with ``main(argv)``, help),
and how every command line reports a refusal: one line naming the value, exit status 2, no traceback unless
``--debug``."""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import os
import re
import sys

from nbkit.runtime import gcfreeze
from nbkit.runtime.locks import FolderLockedError
from nbkit.runtime.pool import JobFailed

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("nbkit.cli.train", "one RL run from flags and/or a YAML file (every RLConfig field is a flag)"),
    "doctor": ("nbkit.cli.doctor", "measure a model's π–μ mismatch per dtype and say whether to train it in FP16"),
    "plan": ("nbkit.cli.plan", "print the exact vLLM-server and trainer commands for a GPU node"),
    "study": ("nbkit.cli.study", "run, store or show a study (a grid of runs stored under data/results)"),
    "results-md": ("nbkit.cli.results_md", "write RESULTS.md from the stored studies (--check: only compare)"),
    "gpu-budget": ("nbkit.cli.gpu_budget", "the memory estimate of every RL run of the gpu profile's notebooks"),
    "gpu-check": ("nbkit.cli.gpu_check", "a five-minute self-check of a GPU node (one pass/fail line per item)"),
    "lengthlaw": ("nbkit.cli.lengthlaw", "measure the length law's long version and store it under data/results"),
}
"""Every subcommand but ``run`` and ``list``: its module under ``nbkit/cli`` (imported only when it runs) and help."""


def dispatch(name: str, argv: list[str]) -> int:
    """Run subcommand ``name`` with the rest of the command line."""
    with gcfreeze.importing():  # the command's libraries load with no automatic collection (nbkit.runtime.gcfreeze)
        module = importlib.import_module(COMMANDS[name][0])
    return module.main(argv)


DEBUG_FLAG = "--debug"
"""Anywhere on a command line (or ``NBKIT_DEBUG=1``): a refusal shows its traceback too."""

INTERRUPTED = 130
"""Exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)."""

_debug = [os.environ.get("NBKIT_DEBUG") == "1"]
"""Whether this command line asked for ``--debug`` (set by ``guarded``; read by ``Parser.error``)."""


def refusals() -> tuple[type, ...]:
    """The errors a command line reports as a refusal of its input: bad values, files and folders, a busy run."""
    return (ValueError, TypeError, LookupError, OSError, FolderLockedError)


def guarded(main, argv: list[str] | None = None, prog: str = "nbkit") -> int:
    """``main(argv)`` with refusals printed as one line ``prog: error: ...`` on stderr and exit status 2 (argparse's
    status for bad usage); ``--debug`` (removed from ``argv``) or ``NBKIT_DEBUG=1`` re-raises with the traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in argv or os.environ.get("NBKIT_DEBUG") == "1"
    argv = [a for a in argv if a != DEBUG_FLAG]
    previous, _debug[0] = _debug[0], debug
    try:
        return main(argv)
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for SIGINT, no traceback
        if debug:
            raise
        print(f"\n{prog}: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        return INTERRUPTED
    except refusals() as exc:
        if debug:
            raise
        text = " ".join(describe(exc).split()) or type(exc).__name__
        print(f"{prog}: error: {text} (--debug shows the traceback)", file=sys.stderr, flush=True)
        return 2
    except JobFailed as exc:  # a job of a pool failed: its message names it and why (the job's own traceback)
        if debug:
            raise
        print(f"{prog}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        _debug[0] = previous


OS_ADVICE = {
    errno.EEXIST: "something already has that name (a file, or a symlink to nowhere): remove it or choose another",
    errno.EFBIG: "a file-size limit stopped the write (`ulimit -f`): raise it (`ulimit -f unlimited`) and run again",
    errno.ENOSPC: "the disk is full: free space and run again",
    errno.EACCES: "no permission: choose a path you can write, or change its permissions",
    errno.EPERM: "not permitted: choose a path you can write",
    errno.EROFS: "the file system is read-only: choose another path",
    errno.EISDIR: "it is a folder: give a file name",
    errno.ENOTDIR: "a part of the path is a file, not a folder: choose another path",
    errno.ENAMETOOLONG: "the name is too long: choose a shorter one",
}
"""What to do about an operating-system error a command line reports, by errno."""


def describe(exc: BaseException) -> str:
    """A refusal's text: its message, or for a raw ``OSError`` (``[Errno 27] File too large``, naming nothing) what
    failed, on which file and what to do (``OS_ADVICE``). An ``OSError`` the workbook worded itself is left as is."""
    if (
        type(exc)
        not in (OSError, FileExistsError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
        or exc.errno is None
    ):
        return str(exc)
    files = " -> ".join(repr(str(f)) for f in (exc.filename, exc.filename2) if f is not None)
    advice = OS_ADVICE.get(exc.errno, "")
    return (
        f"{exc.strerror}"
        + (f": {files}" if files else " (no file named by the system)")
        + (f"; {advice}" if advice else "")
    )


NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
"""A token that is a negative number (``-1e-4``, ``-0.5``, ``-3``): always a flag's value, never a flag (argparse's
own pattern misses exponents, so ``--lr -1e-4`` failed with "expected one argument")."""


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose error for an unknown flag names the close ones (``--dtype fp16`` → "did you
    mean --train_dtype?"), as a config file's unknown key already does; argparse's own message names none. The flags
    of a chosen subcommand count too. A refusal is one line (``prog: error: ...``) without argparse's usage block
    (``--help`` shows it; ``--debug`` prints it with the error), and a negative number is a value (``--lr -1e-4``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message):
        if _debug[0]:
            self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())}\n")

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(unknown_arguments(extras, self._known_flags(namespace)))
        return namespace

    def _known_flags(self, namespace) -> dict[str, str]:
        """Every long flag this parser (and the subcommand chosen in ``namespace``) takes → its first spelling."""
        parsers = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += [
                    action.choices[name] for name in [getattr(namespace, action.dest, None)] if name in action.choices
                ]
        return {
            flag: next(f for f in action.option_strings if f.startswith("--"))
            for parser in parsers
            for flag, action in parser._option_string_actions.items()
            if flag.startswith("--") and flag != "--help"
        }


def unknown_arguments(extras: list[str], flags: dict[str, str]) -> str:
    """argparse's "unrecognized arguments" text, with the close flags for each unknown ``--flag`` (``flags``: every
    spelling → the one to suggest)."""
    hints = []
    for token in extras:
        if token.startswith("--"):
            close = difflib.get_close_matches(token.split("=", 1)[0], list(flags), n=4, cutoff=0.6)
            named = list(dict.fromkeys(flags[c] for c in close))
            if named:
                hints.append(f"for {token.split('=', 1)[0]} did you mean {' or '.join(named)}?")
    return f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")
