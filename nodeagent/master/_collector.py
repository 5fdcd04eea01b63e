"""The cyclic garbage collector of a master that holds a large pool.

A master of 100,000 nodes holds some two million objects the collector tracks (its
entries, plans, forecasts, row templates: about twenty a machine), nearly all of them
free of cycles and freed by reference counting when a newer ad or plan replaces them. A
full collection walks every one of them (≈ 1 s at 30,000 machines, ≈ 2 s at 100,000),
holding the event loop, and finds almost nothing; the interpreter runs one each time the
objects that survived younger collections reach a quarter of the old ones, a few times a
minute while the ads come in.

:class:`SurvivorFreezer` moves what survives a full collection to the permanent
generation (:func:`gc.freeze`): the next full collections walk only what was made since.
A frozen object that is no longer referenced is still freed at once (reference counting
does not look at generations); only a cycle that becomes garbage while frozen waits. Such
cycles can only add to the frozen objects, so a full collection is made whole again
(:func:`gc.unfreeze` before it) once the frozen objects have grown by ``growth`` (a
quarter, the interpreter's own ratio) over what the last whole collection left, and no
sooner than ``at_most_every`` seconds after it: a pool that grows is walked whole a few
times as it grows, and a pool that holds its size, whose ads replace objects without
making cycles, is never walked whole again.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SurvivorFreezer"]


class SurvivorFreezer:
    """A :data:`gc.callbacks` entry that freezes what survives each full collection, and
    thaws everything before a full collection once the frozen objects have grown by
    ``growth`` over what the last whole one left, ``at_most_every`` seconds (on
    ``clock``) after it at the soonest. :meth:`install` and :meth:`uninstall` (which
    thaws) it; a context manager does both. The first full collection after
    :meth:`install` walks everything (nothing is frozen yet)."""

    def __init__(
        self,
        *,
        growth: float = 0.25,
        at_most_every: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.growth = growth
        self.at_most_every = at_most_every
        self._clock = clock
        self._whole_at = clock()
        #: Objects frozen after the last whole collection (none yet: the first is whole).
        self.left_whole = 0
        self._walking_whole = False
        #: Full collections made whole after a thaw, a metric for the curious.
        self.thaws = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            frozen = gc.get_freeze_count()
            if frozen == 0:
                self._walking_whole = True
            elif (
                frozen > self.left_whole * (1 + self.growth)
                and self._clock() - self._whole_at >= self.at_most_every
            ):
                gc.unfreeze()  # this collection walks everything again
                self._walking_whole = True
                self.thaws += 1
        elif phase == "stop":
            gc.freeze()
            if self._walking_whole:
                self._walking_whole = False
                self.left_whole = gc.get_freeze_count()
                self._whole_at = self._clock()

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
        gc.unfreeze()

    def __enter__(self) -> SurvivorFreezer:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
