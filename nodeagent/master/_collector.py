"""The cyclic garbage collector of a master that holds a large pool.

A master of 100,000 nodes holds some four million objects the collector tracks (its
entries, plans, forecasts, row templates: about forty a machine), nearly all of them
free of cycles and freed by reference counting when a newer ad or plan replaces them. A
full collection walks every one of them (≈ 0.5 s at 30,000 machines, ≈ 1.7 s at 100,000),
holding the event loop, and finds almost nothing; the interpreter runs one each time the
objects that survived younger collections reach a quarter of the old ones, a few times a
minute while the ads come in.

:class:`SurvivorFreezer` moves what survives a full collection to the permanent
generation (:func:`gc.freeze`): the next full collections walk only what was made since.
A frozen object that is no longer referenced is still freed at once (reference counting
does not look at generations); only a cycle that becomes garbage while frozen waits, so
every ``thaw_every`` seconds a full collection is made whole again (:func:`gc.unfreeze`
before it), which frees such cycles.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SurvivorFreezer"]


class SurvivorFreezer:
    """A :data:`gc.callbacks` entry that freezes what survives each full collection and
    thaws everything before the first full collection ``thaw_every`` seconds (on
    ``clock``) after the last thaw. :meth:`install` and :meth:`uninstall` (which thaws)
    it; a context manager does both."""

    def __init__(
        self, *, thaw_every: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.thaw_every = thaw_every
        self._clock = clock
        self._thawed_at = clock()
        #: Full collections made whole (after a thaw), a metric for the curious.
        self.thaws = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            now = self._clock()
            if now - self._thawed_at >= self.thaw_every:
                gc.unfreeze()  # this collection walks everything again
                self._thawed_at = now
                self.thaws += 1
        elif phase == "stop":
            gc.freeze()

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
