"""The cyclic garbage collector of a master that holds a large pool.

A master of 100,000 nodes holds some two million objects the collector tracks (its
entries, plans, forecasts, row templates: about twenty a machine), nearly all of them
free of cycles and freed by reference counting when a newer ad or plan replaces them. A
full collection walks every one of them (≈ 1 s at 30,000 machines, ≈ 2 s at 100,000),
holding the event loop, and finds almost nothing; the interpreter runs one each time the
objects that survived younger collections reach a quarter of the old ones, a few times a
minute while the ads come in.

:class:`SurvivorFreezer` moves what survives a collection of the middle generation or a
full one to the permanent generation (:func:`gc.freeze`), where no collection walks it. A
frozen object that is no longer referenced is still freed at once (reference counting
does not look at generations); only a cycle that becomes garbage while frozen waits. Such
cycles can only add to the frozen objects, so the freezer thaws everything
(:func:`gc.unfreeze`) once the frozen objects have grown by ``growth`` (a quarter, the
interpreter's own ratio) over what the last whole collection left, and no sooner than
``at_most_every`` seconds after it, and freezes nothing more until a full collection has
walked everything: a pool that grows is walked whole a few times as it grows, and a pool
that holds its size, whose ads replace objects without making cycles, is not walked whole
again. As :func:`gc.freeze` sets the generations' counts back to zero, the interpreter
makes no full collection of its own while the freezer freezes: the whole walks are the
only ones, but for those a caller asks for (:func:`gc.collect`).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SurvivorFreezer"]


class SurvivorFreezer:
    """A :data:`gc.callbacks` entry that freezes what survives each collection of the
    middle generation and each full one, and thaws everything once the frozen objects
    have grown by ``growth`` over what the last whole collection left, ``at_most_every``
    seconds (on ``clock``) after it at the soonest, until the next full collection has
    walked everything. After a collection of the middle generation it counts the frozen
    objects (≈ 20 ms for two million) once every ``look_every`` seconds at most; a full
    collection looks at once. The first full collection after :meth:`install` walks
    everything. :meth:`install` and :meth:`uninstall` (which thaws) it; a context manager
    does both."""

    def __init__(
        self,
        *,
        growth: float = 0.25,
        at_most_every: float = 600.0,
        look_every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.growth = growth
        self.at_most_every = at_most_every
        self.look_every = look_every
        self._clock = clock
        self._whole_at = clock()
        self._looked_at = -math.inf
        #: Objects frozen after the last whole collection (none yet: the first is whole).
        self.left_whole = 0
        #: Everything thawed, until a full collection has walked it.
        self.thawed = False
        self._walking_whole = False
        #: Thaws made, a metric for the curious.
        self.thaws = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        generation = info.get("generation")
        if generation == 1 and phase == "stop":
            if not self.thawed:
                gc.freeze()
                now = self._clock()
                if now - self._looked_at >= self.look_every:
                    self._looked_at = now
                    self._thaw_if_due(now)
        elif generation == 2 and phase == "start":
            if not self.thawed:
                self._thaw_if_due(self._clock())
            self._walking_whole = gc.get_freeze_count() == 0
        elif generation == 2 and phase == "stop":
            gc.freeze()
            if self._walking_whole:
                self._walking_whole = self.thawed = False
                self.left_whole = gc.get_freeze_count()
                self._whole_at = self._clock()

    def _thaw_if_due(self, now: float) -> None:
        """Thaw everything if a whole collection is due (nothing frozen: nothing to do)."""
        if self.left_whole and now - self._whole_at < self.at_most_every:
            return
        frozen = gc.get_freeze_count()
        if frozen and (not self.left_whole or frozen > self.left_whole * (1 + self.growth)):
            gc.unfreeze()
            self.thawed = True
            self.thaws += 1

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
