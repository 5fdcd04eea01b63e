"""Admission before a maintenance window: no claim whose retirement promise would end
after the machine's window starts, unless the policy says so.

The master tells the agent its machine's window (``Unavailability``: ``{"Start"}`` in
epoch seconds and, when it has one, ``"Duration"`` in seconds). A claim's promise ends
at ``now + R``, ``R`` its retirement remaining (``max(0, MJRT_i − run)``, ``MJRT_i`` the
lower of the machine's and the job's ``MaxJobRetirementTime``: DESIGN §3.1). When that
end lies after the window's start, :class:`BeforeWindow` decides:

* ``refuse``: :class:`~slots.WindowAhead` (409 ``machine.window_ahead``), naming the
  window's start and the longest promise the machine can still accept now;
* ``shorten``: admitted, its promise cut to end at the window's start;
* ``admit``: admitted as it asked (the promise is then kept only if the window waits).

A promise of 0 always fits. No window, or a window that has started (the machine is
then DRAINING or DOWN and drained by the master's drain), changes nothing.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from enum import StrEnum

from slots._errors import WindowAhead

__all__ = ["BeforeWindow", "admit_before_window", "window_start"]


class BeforeWindow(StrEnum):
    """What a claim whose promise would outlive the window's start gets."""

    REFUSE = "refuse"
    SHORTEN = "shorten"
    ADMIT = "admit"


def window_start(unavailability: Mapping[str, int] | None) -> int | None:
    """The window's start (epoch seconds) from the ad's ``Unavailability``; ``None``: none."""
    if unavailability is None:
        return None
    start = unavailability.get("Start")
    return start if isinstance(start, int) and not isinstance(start, bool) else None


def admit_before_window(
    now: float, *, remaining: float, start: int | None, policy: BeforeWindow
) -> int | None:
    """Whether a claim whose promise has ``remaining`` seconds to run from ``now`` may be
    admitted before a window that starts at ``start`` (``None``: no window).

    Returns ``None`` when it is admitted as it asked, or the whole seconds its promise
    must be cut to (``shorten``: at most ``start − now``). Raises
    :class:`~slots.WindowAhead` (``refuse``); nothing is changed either way.
    """
    if start is None or start <= now or now + remaining <= start:
        return None
    longest = max(0, math.floor(start - now))
    if policy is BeforeWindow.ADMIT:
        return None
    if policy is BeforeWindow.SHORTEN:
        return longest
    raise WindowAhead(
        f"the machine's maintenance window starts at {_iso(start)}: a retirement promise of "
        f"{math.ceil(remaining)} s would end after it; the longest it can accept now is "
        f"{longest} s",
        window_start=start,
        longest=longest,
    )


def _iso(epoch: int) -> str:
    """ISO 8601 in UTC, as the daemons write times (``nodeagent._when.iso_time``)."""
    try:
        return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{epoch} (epoch seconds)"
