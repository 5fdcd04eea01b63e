"""The survivors of full collections frozen, and thawed every ``thaw_every`` seconds."""

from __future__ import annotations

import gc
import weakref

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


def test_a_full_collection_freezes_its_survivors_and_a_thaw_frees_the_cycles_left() -> None:
    clock = Clock()
    with SurvivorFreezer(thaw_every=600, clock=clock) as freezer:
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle, alive
        gone = weakref.ref(a)
        gc.collect()
        assert gc.get_freeze_count() > 0
        assert not any(o is a for o in gc.get_objects())  # frozen: not walked
        del a, b  # garbage now, but frozen: a full collection does not see it
        gc.collect()
        assert gone() is not None
        single = Node()  # frozen objects without a cycle are freed as always
        gc.collect()
        single_ref = weakref.ref(single)
        del single
        assert single_ref() is None
        clock.t = 599.0
        gc.collect()
        assert (gone() is not None, freezer.thaws) == (True, 0)
        clock.t = 600.0  # the first full collection after thaw_every walks everything
        gc.collect()
        assert (gone(), freezer.thaws) == (None, 1)
        assert gc.get_freeze_count() > 0  # and freezes its survivors again
    assert freezer not in gc.callbacks
    assert gc.get_freeze_count() == 0


def test_young_collections_neither_freeze_nor_thaw() -> None:
    clock = Clock()
    with SurvivorFreezer(thaw_every=0, clock=clock) as freezer:
        gc.collect(0)
        gc.collect(1)
        assert (gc.get_freeze_count(), freezer.thaws) == (0, 0)
