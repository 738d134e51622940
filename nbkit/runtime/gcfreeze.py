"""Keep the cyclic garbage collector to what a run makes, while it runs.

torch, transformers, TRL and vLLM leave ~700 k objects tracked by Python's cyclic garbage collector once imported,
and a long process (a notebook kernel, a study, the test suite) adds its own data to them; every full collection
walks all of it. A training run asks for ~3 (its engine's ``release_memory``, accelerate's ``free_memory`` when
TRL's trainer ends) besides the automatic ones, so a toy run of one step spent more time in ``gc.collect`` than in
training (``benchmarks/bench_gc.py`` prints the ratios on the machine at hand).

``with walk_only_new():`` moves every object alive at its start into the collector's permanent generation
(``gc.freeze``) and moves them back when it ends (``gc.unfreeze``), however it ends. Inside, a collection walks only
what was made since: a dropped engine or model of the run is found as before. Nothing leaks: an older object that
became garbage in a reference cycle meanwhile is collected by the first full collection after the block. Objects
freed by reference counting (most of them) are freed at once, inside or not.

``with importing():`` switches automatic collections off while a block loads libraries: an import makes objects that
live as long as the process, and each automatic full collection during it walks everything loaded so far (a
measurable share of a training process's start-up: ``benchmarks/bench_gc.py`` prints it on the machine at hand).
Inside a ``walk_only_new`` block, everything alive when the import ends is frozen too, until the block ends: a
library loaded by a run (or a test) is not the run's to walk. vLLM, for one, calls ``gc.collect()`` a dozen times
while an engine starts and stops, and each call would otherwise walk the whole of vLLM the block had just imported.
vLLM also unfreezes the whole process when an engine shuts down; ``refreeze()`` (called by the engines'
``release_memory``) freezes what survived the engine's collection again, until the block ends.

A program nbkit starts (``python -m nbkit``, ``python -m nbkit.cli.train`` under ``accelerate launch``, the dry run)
calls ``suspend()`` before its module-level imports and ``resume()`` once they are done: its start-up loads torch and
transformers with no automatic collection in between, as ``importing()`` does for a block. A pool worker loads
torch and each job's module under ``importing()`` and runs each job in a block of its own.

A block inside another one (a run inside a test of the suite, or inside a pool job) freezes what was made since the
outer one began, and the outermost one unfreezes everything when it ends: what a run left behind inside an outer
block (its trainer and model, once ``train`` returns) is freed when that block ends, not before. ``NBKIT_GC_FREEZE=0`` turns both off. A process that froze
objects itself (``gc.get_freeze_count() > 0`` outside any block, e.g. a server that forks) is left alone:
unfreezing at the end would undo its freeze.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

_depth = 0
"""How many ``walk_only_new`` blocks are open in this process: the outermost one unfreezes."""

_suspended = False
"""Whether ``suspend()`` switched automatic collections off and ``resume()`` has yet to switch them back on."""

ENV = "NBKIT_GC_FREEZE"
"""``0`` turns it off (each collection of a run then walks every object of the process)."""


def _setting() -> str:
    """``NBKIT_GC_FREEZE`` as set, ``1`` when unset (not checked: ``enabled()`` refuses a bad value)."""
    return os.environ.get(ENV, "1")


def enabled() -> bool:
    """Whether ``walk_only_new`` freezes (``NBKIT_GC_FREEZE`` unset or ``1``); any other value is refused."""
    value = _setting()
    if value not in ("0", "1"):
        raise ValueError(f"{ENV}={value!r}: expected 0 (off) or 1 (on, the default)")
    return value == "1"


@contextlib.contextmanager
def importing() -> Iterator[None]:
    """No automatic collection while the block runs (see the module's docstring); the collector's state before the
    block is restored after it, however it ends (a collector the caller had switched off stays off)."""
    if not enabled():
        yield
        return
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _depth:  # the open block froze what was alive at its start: what was just loaded joins it
            gc.freeze()
        if was:
            gc.enable()


def refreeze() -> None:
    """Right after a full collection inside a ``walk_only_new`` block: freeze what survived it, until the block
    ends (nothing outside a block). vLLM freezes the process when an engine starts and unfreezes all of it when the
    engine shuts down (``gc.unfreeze`` in its engine core and worker), the block's freeze included; every
    collection after that, until the block ends, would walk every object of the process again."""
    if _depth:
        gc.freeze()


def suspend() -> None:
    """A program's start: no automatic collection until ``resume()`` (the module's docstring). Call it before the
    program's own imports; a collector already off stays off. Only ``NBKIT_GC_FREEZE=1`` (or unset) suspends; a bad
    value is not refused here, before the program's error handling exists, but where its work begins
    (``enabled()``, e.g. in ``nbkit.rl.run``), as one line naming the value and the choices."""
    global _suspended
    if _setting() == "1" and gc.isenabled():
        gc.disable()
        _suspended = True


def resume() -> None:
    """End what ``suspend()`` began (nothing if it did not switch the collector off)."""
    global _suspended
    if _suspended:
        _suspended = False
        gc.enable()


@contextlib.contextmanager
def walk_only_new() -> Iterator[bool]:
    """Inside the block, collections walk only objects made in it (see the module's docstring); yields whether it
    froze (False when turned off, or when this process had frozen objects already)."""
    global _depth
    if not enabled() or (gc.get_freeze_count() and not _depth):
        yield False
        return
    gc.freeze()  # nested in another block: what was made since it began is frozen too, until the outer one ends
    _depth += 1
    try:
        yield True
    finally:
        _depth -= 1
        if not _depth:
            gc.unfreeze()
