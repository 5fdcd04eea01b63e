"""Times and durations as the daemons' logs write them for people to read.

``iso_time(1795850102)`` is ``2026-11-28T07:15:02Z`` (ISO 8601, UTC, whole seconds);
``in_words(80)`` is ``1 min 20 s``: the two largest units, rounded to the second. Pure and
standard library only; :mod:`nodeagent._durations` parses what operators type.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

__all__ = ["in_words", "iso_time"]

_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
_YEAR = 365.25 * 86400


def iso_time(epoch: float | None) -> str:
    """An epoch in seconds as ISO 8601 in UTC (``2026-11-28T07:15:02Z``), rounded down to
    the second; ``none`` for None, ``never`` for a value that is not finite, and the year
    alone (``year 58880``) for one beyond what a calendar date shows."""
    if epoch is None:
        return "none"
    if not math.isfinite(epoch):
        return "never"
    try:
        return datetime.fromtimestamp(math.floor(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"year {1970 + epoch / _YEAR:.0f}"


def in_words(seconds: float) -> str:
    """A duration in its two largest units: ``45 s``, ``1 min 20 s``, ``3 h 5 min``,
    ``2 d 1 h``, ``0 s``. Rounded to the nearest second; a unit at zero after the largest is
    left out (``1 h``, not ``1 h 0 min``); negative durations get a minus sign; a duration that
    is not finite is ``forever``."""
    if not math.isfinite(seconds):
        return "forever"
    total = round(abs(seconds))
    sign = "-" if seconds < 0 and total else ""
    parts: list[tuple[int, str]] = []
    for name, size in _UNITS:
        count, total = divmod(total, size)
        if count or parts:
            parts.append((count, name))
        if len(parts) == 2:
            break
    words = " ".join(f"{count} {name}" for count, name in parts if count) or "0 s"
    return sign + words
