"""``nbkit.runtime.gcfreeze.walk_only_new``: inside the block the collector walks only what the block made, garbage is
found
whether it was made inside or before, and at the end the process's collector is as it was."""

from __future__ import annotations

import gc
import weakref

import pytest

from nbkit.runtime import gcfreeze


class Node:
    """An object the test links into a reference cycle, so only the cyclic collector can free it."""


def cycle() -> weakref.ref:
    """A self-referencing object already dropped by its maker: garbage that only a cyclic collection frees."""
    node = Node()
    node.me, node.payload = node, bytearray(10**5)
    return weakref.ref(node)


pytestmark = pytest.mark.usefixtures("outside_the_suites_freeze")  # these tests need a process with no block open


@pytest.fixture
def collector_off():
    """Only explicit collections run (what they find is what the test reads); the collector's state is restored."""
    was = gc.isenabled()
    gc.disable()
    yield
    if was:
        gc.enable()


def test_inside_the_block_a_collection_walks_only_what_the_block_made(collector_off):
    older = Node()
    before = len(gc.get_objects())
    with gcfreeze.walk_only_new() as froze:
        made = [Node() for _ in range(100)]
        walked = gc.get_objects()
        frozen = gc.get_freeze_count()
    assert froze and frozen > 0.9 * before > 10_000  # the suite's process: torch and the rest frozen
    assert len(walked) < 1_000 and all(any(n is o for o in walked) for n in made[:3])
    assert not any(o is older for o in walked)
    assert gc.get_freeze_count() == 0 and any(o is older for o in gc.get_objects())  # walked again after the block


def test_garbage_made_inside_is_collected_inside_and_older_garbage_right_after(collector_off):
    older = Node()
    older.me = older
    older_ref = weakref.ref(older)
    with gcfreeze.walk_only_new():
        del older  # becomes garbage while frozen: not freed by a collection inside ...
        inside = cycle()
        gc.collect()
        assert inside() is None
        assert older_ref() is not None
    gc.collect()  # ... but by the first one after: nothing is leaked
    assert older_ref() is None


def test_a_block_inside_a_block_freezes_what_was_made_since_and_the_outer_one_unfreezes(collector_off):
    with gcfreeze.walk_only_new():
        made = Node()
        with gcfreeze.walk_only_new() as froze:
            walked = gc.get_objects()
        assert froze and not any(o is made for o in walked)
        assert gc.get_freeze_count() > 0  # still inside the outer block
    assert gc.get_freeze_count() == 0


def test_the_block_ends_the_freeze_however_it_ends():
    with pytest.raises(KeyboardInterrupt), gcfreeze.walk_only_new():
        raise KeyboardInterrupt
    assert gc.get_freeze_count() == 0


def test_nbkit_gc_freeze_0_leaves_the_collector_alone(monkeypatch):
    monkeypatch.setenv(gcfreeze.ENV, "0")
    with gcfreeze.walk_only_new() as froze:
        assert (froze, gc.get_freeze_count()) == (False, 0)


def test_a_process_that_froze_objects_itself_keeps_its_freeze():
    owners = Node()  # frozen by the process itself, not by a block
    gc.freeze()
    try:
        with gcfreeze.walk_only_new() as froze:
            pass
        # still frozen: not unfrozen under its owner (the count itself moves when another thread frees a frozen object)
        assert not froze and gc.get_freeze_count() > 10_000 and not any(o is owners for o in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(o is owners for o in gc.get_objects())


def test_no_automatic_collection_while_importing_and_the_collector_as_it_was_after():
    assert gc.isenabled()
    with gcfreeze.importing():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gcfreeze.importing():
            pass
        assert not gc.isenabled()  # a collector the caller switched off stays off
    finally:
        gc.enable()
    with pytest.raises(ImportError), gcfreeze.importing():
        import nbkit_no_such_module  # noqa: F401
    assert gc.isenabled()


def test_what_an_import_inside_a_block_loaded_is_frozen_with_the_block_and_outside_one_nothing_is(collector_off):
    with gcfreeze.importing():
        outside = [Node() for _ in range(1_000)]  # stands for a library's objects
    assert gc.get_freeze_count() == 0 and any(o is outside[0] for o in gc.get_objects())
    with gcfreeze.walk_only_new():
        frozen = gc.get_freeze_count()
        with gcfreeze.importing():
            loaded = [Node() for _ in range(1_000)]
        assert gc.get_freeze_count() > frozen + 0.9 * len(loaded)
        assert not any(o is loaded[0] for o in gc.get_objects())  # a collection in the block skips them
    assert gc.get_freeze_count() == 0 and any(o is loaded[0] for o in gc.get_objects())


def test_after_an_engine_s_release_what_survived_is_frozen_again_inside_a_block_and_nothing_outside(collector_off):
    from nbkit.engines.base import release_memory

    with gcfreeze.walk_only_new():
        gc.unfreeze()  # as a vLLM engine's shutdown does to the whole process
        dropped = cycle()
        release_memory()
        assert dropped() is None  # the release collected what the engine dropped ...
        assert gc.get_freeze_count() > 10_000  # ... and froze the rest again, until the block ends
    assert gc.get_freeze_count() == 0
    release_memory()
    assert gc.get_freeze_count() == 0


def test_a_program_suspends_collections_until_it_resumes_and_leaves_a_collector_it_found_off_alone(monkeypatch):
    monkeypatch.setattr(gcfreeze, "_suspended", False)
    assert gc.isenabled()
    gcfreeze.suspend()
    try:
        assert not gc.isenabled()
    finally:
        gcfreeze.resume()
    assert gc.isenabled()
    gcfreeze.resume()  # a second resume does nothing
    assert gc.isenabled()
    gc.disable()
    try:
        gcfreeze.suspend()
        gcfreeze.resume()
        assert not gc.isenabled()  # off before the program's suspend: still off
    finally:
        gc.enable()
    for value in ("0", "yes"):  # off; a bad value is refused where the work begins (enabled()), not at start-up
        monkeypatch.setenv(gcfreeze.ENV, value)
        gcfreeze.suspend()
        assert gc.isenabled()


def test_a_pool_job_walks_only_what_it_makes_and_loads_its_module_with_the_collector_off(monkeypatch):
    from nbkit.runtime import pool

    assert pool._run_job("gc:get_freeze_count", {}) > 10_000  # as a worker runs each job: the process's objects frozen
    assert gc.get_freeze_count() == 0
    states = []
    monkeypatch.setattr(pool.importlib, "import_module", lambda name: states.append(gc.isenabled()) or gc)
    assert pool.call("gc:isenabled", {}) is True and states == [False]


@pytest.mark.parametrize("bad", ["yes", "2", ""])
def test_a_bad_setting_is_refused_naming_the_value_and_the_choices(monkeypatch, bad):
    monkeypatch.setenv(gcfreeze.ENV, bad)
    with pytest.raises(ValueError, match=rf"NBKIT_GC_FREEZE={bad!r}: expected 0 \(off\) or 1"):
        gcfreeze.enabled()


def test_a_training_run_walks_only_its_own_objects_and_leaves_the_collector_as_it_was(
    tiny_random_model, arith_jsonl, tmp_path
):
    from nbkit.rl import train
    from tests.rl.test_rl import smoke

    seen = []

    def watch(phase, info):
        if phase == "start" and info["generation"] == 2:
            seen.append(gc.get_freeze_count())

    cfg = smoke(tmp_path, tiny_random_model, arith_jsonl, max_steps=1, max_completion_length=8, rollout_engine="hf")
    gc.callbacks.append(watch)
    try:
        train(cfg, progress=False)
    finally:
        gc.callbacks.remove(watch)
    in_run = [n for n in seen if n > 100_000]  # full collections that skipped the libraries' objects
    assert len(in_run) >= 2 and seen[-1] in in_run  # the engine's release and accelerate's, the run's last included
    assert gc.get_freeze_count() == 0
