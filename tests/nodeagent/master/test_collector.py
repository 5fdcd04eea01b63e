"""The survivors of the middle generation's collections and of full ones frozen, and
everything thawed until a full collection has walked it, once the frozen objects have
grown by ``growth``, ``at_most_every`` seconds after the last whole walk at the soonest."""

from __future__ import annotations

import gc
import weakref

import pytest
import trio

from nodeagent.master import _ingest_worker
from nodeagent.master._collector import SurvivorFreezer


class Node:
    """An object the collector tracks, with room for a cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _is_frozen(o: object) -> bool:
    return not any(x is o for x in gc.get_objects())


def _frozen_cycle() -> weakref.ref[Node]:
    """A cycle that survives a full collection (frozen), then becomes garbage."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    gc.collect()
    assert _is_frozen(a)
    return gone


def _growth_past(freezer: SurvivorFreezer) -> list[Node]:
    """Live objects enough to grow the frozen ones past ``growth`` once frozen."""
    return [Node() for _ in range(int(freezer.left_whole * freezer.growth) + 1000)]


@pytest.mark.parametrize("middle_first", [False, True])
def test_the_first_full_collection_walks_everything_and_freezes_its_survivors(
    middle_first: bool,
) -> None:
    with SurvivorFreezer(clock=Clock()) as freezer:
        assert freezer.left_whole == 0
        if middle_first:  # frozen, then thawed at once: no whole walk was made yet
            gc.collect(1)
            assert (freezer.thawed, freezer.thaws, gc.get_freeze_count()) == (True, 1, 0)
        gone = _frozen_cycle()
        assert (freezer.thawed, freezer.thaws) == (False, int(middle_first))
        # what the collection left, frozen (a few have been freed since)
        assert freezer.left_whole >= gc.get_freeze_count() > freezer.left_whole - 100 > 0
        assert gone() is not None
    assert freezer not in gc.callbacks
    assert gc.get_freeze_count() == 0


def test_frozen_objects_without_a_cycle_are_freed_as_always() -> None:
    with SurvivorFreezer(clock=Clock()):
        single = Node()
        gc.collect()
        assert _is_frozen(single)
        single_ref = weakref.ref(single)
        del single
        assert single_ref() is None


def test_what_survives_the_middle_generation_is_frozen() -> None:
    with SurvivorFreezer(clock=Clock()) as freezer:
        gc.collect()
        a = Node()
        gc.collect(0)
        assert not _is_frozen(a)  # the youngest generation's survivors are not
        gc.collect(1)
        assert _is_frozen(a)
        assert (freezer.thawed, freezer.thaws) == (False, 0)


@pytest.mark.parametrize(
    ("grown", "seconds", "walked_whole"),
    [
        (False, 0.0, False),
        (False, 600.0, False),  # a pool that holds its size is never walked whole again
        (False, 86_400.0, False),
        (True, 599.0, False),  # grown, but too soon after the last whole walk
        (True, 600.0, True),
        (True, 3_600.0, True),
    ],
)
def test_a_full_collection_walks_whole_once_the_frozen_objects_grew_and_the_time_came(
    grown: bool, seconds: float, walked_whole: bool
) -> None:
    clock = Clock()
    with SurvivorFreezer(clock=clock) as freezer:
        gc.collect()  # whole (nothing frozen yet)
        left = freezer.left_whole
        gone = _frozen_cycle()
        kept = _growth_past(freezer) if grown else []
        gc.collect()  # the new objects frozen, the cycle still waits
        assert gone() is not None
        clock.t = seconds
        gc.collect()
        assert (gone() is None, freezer.thaws) == (walked_whole, int(walked_whole))
        if walked_whole:
            # the new measure to grow from: past the old one's growth (the whole walk has
            # freed the cycle, and whatever other garbage the process had frozen)
            assert freezer.left_whole > left * (1 + freezer.growth)
        else:
            assert freezer.left_whole == left
        del kept  # alive, and frozen, until here
    assert gc.get_freeze_count() == 0


def test_the_middle_generation_thaws_and_nothing_is_frozen_until_a_full_collection() -> None:
    clock = Clock()
    with SurvivorFreezer(clock=clock) as freezer:
        gc.collect()
        gone = _frozen_cycle()
        kept = _growth_past(freezer)
        gc.collect(1)  # frozen: grown, but the time has not come
        assert (freezer.thawed, gone() is not None) == (False, True)
        clock.t = 600.0
        gc.collect(1)  # the time has come: everything thawed
        assert (freezer.thawed, freezer.thaws, gc.get_freeze_count()) == (True, 1, 0)
        young = Node()
        gc.collect(1)  # thawed: what survives waits for the full collection
        assert (freezer.thawed, _is_frozen(young), gone() is not None) == (True, False, True)
        gc.collect()  # walks everything: the cycle freed, all frozen again
        assert (freezer.thawed, _is_frozen(young), gone()) == (False, True, None)
        assert freezer.left_whole > len(kept)
        del kept


def test_the_middle_generation_counts_the_frozen_objects_once_every_look_every() -> None:
    clock = Clock()
    with SurvivorFreezer(clock=clock, look_every=60.0) as freezer:
        gc.collect()
        clock.t = 600.0
        gc.collect(1)  # looked: not grown
        kept = _growth_past(freezer)
        gc.collect(1)
        clock.t = 659.0
        gc.collect(1)  # grown, but looked 59 s ago
        assert (freezer.thawed, freezer.thaws) == (False, 0)
        clock.t = 660.0
        gc.collect(1)
        assert (freezer.thawed, freezer.thaws) == (True, 1)
        del kept


def test_the_next_whole_walk_grows_from_what_the_last_left() -> None:
    clock = Clock()
    with SurvivorFreezer(clock=clock) as freezer:
        gc.collect()
        kept = _growth_past(freezer)
        clock.t = 600.0
        gc.collect()  # frozen
        gc.collect()  # grown: walked whole
        assert freezer.thaws == 1
        gone = _frozen_cycle()
        clock.t = 1_800.0
        gc.collect()  # the time has come, but not the growth
        assert (gone() is not None, freezer.thaws) == (True, 1)
        kept += _growth_past(freezer)
        gc.collect()
        gc.collect()
        assert (gone(), freezer.thaws) == (None, 2)
        del kept


def test_the_youngest_generation_s_collections_neither_freeze_nor_thaw() -> None:
    with SurvivorFreezer(at_most_every=0, clock=Clock()) as freezer:
        gc.collect(0)
        assert (gc.get_freeze_count(), freezer.thaws, freezer.left_whole) == (0, 0, 0)


def test_an_ingest_worker_serves_with_its_survivors_frozen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's loop runs under a freezer (its tokens and digests, one of each a node,
    are not walked by every full collection), which is gone, everything thawed, after."""
    seen: list[bool] = []

    def served(*_args: object) -> None:
        seen.append(any(isinstance(c, SurvivorFreezer) for c in gc.callbacks))
        gc.collect()
        seen.append(gc.get_freeze_count() > 0)

    monkeypatch.setattr(trio, "run", served)
    settings = _ingest_worker.WorkerSettings(
        listeners=(), link=-1, relay="relay.sock", key=None, tls=None, read_timeout=1.0
    )
    _ingest_worker.run(settings)
    assert seen == [True, True]
    assert not any(isinstance(c, SurvivorFreezer) for c in gc.callbacks)
    assert gc.get_freeze_count() == 0
