"""What time it is: the wall clock, or trio's (virtual in tests)."""

from __future__ import annotations

import time
from typing import Protocol

import trio

__all__ = ["Clock", "TrioClock", "WallClock"]


class Clock(Protocol):
    """Wall-clock time in epoch seconds: the ``now`` the model is given."""

    def now(self) -> float: ...


class WallClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()


class TrioClock:
    """Epoch time that follows trio's clock, so virtual-time tests drive the agent."""

    def __init__(self, epoch: float) -> None:
        self._offset = epoch - trio.current_time()

    def now(self) -> float:
        return self._offset + trio.current_time()
