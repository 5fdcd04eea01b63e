"""Durations as operators write them: ``90``, ``1.5``, ``90s``, ``15m``, ``2h``, ``1h30m``;
and moments: ``2026-11-28T15:00Z``, ``+2h``, ``1795850102`` (:func:`parse_time`).

Standard library only: the command line's hot path imports it (``datetime`` only when a
moment is parsed).
"""

from __future__ import annotations

import math
import re

__all__ = ["EARLIEST_PLAUSIBLE", "PLAUSIBLE_YEARS", "parse_duration", "parse_time"]

EARLIEST_PLAUSIBLE = 946_684_800
"""2000-01-01T00:00:00Z: a moment before it was written in another unit (the schedule
preview's ``schedule.suspicious_time`` draws the same line)."""
PLAUSIBLE_YEARS = 10
"""How far ahead a moment may plausibly be."""
_YEAR = 365.25 * 86400
_SMALLER_UNITS = ((1e3, "milliseconds"), (1e6, "microseconds"), (1e9, "nanoseconds"))

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PLAIN_SECONDS = re.compile(_NUMBER)
_WITH_UNITS = re.compile(
    rf"(?:(?P<d>{_NUMBER})d)?(?:(?P<h>{_NUMBER})h)?(?:(?P<m>{_NUMBER})m)?(?:(?P<s>{_NUMBER})s)?"
)
_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Parse a duration into seconds.

    Accepted: a plain number of seconds (``"90"``, ``"1.5"``), or numbers with units
    ``d``, ``h``, ``m``, ``s``, each at most once and in that order (``"90s"``, ``"15m"``,
    ``"2h"``, ``"1h30m"``, ``"1.5h"``). Surrounding whitespace and letter case are ignored.
    Raises ValueError, with the accepted forms in the message, for anything else, including
    negative and empty durations.
    """
    s = text.strip().lower()
    if s.startswith("-"):
        raise ValueError(f"invalid duration {text!r}: durations cannot be negative")
    if _PLAIN_SECONDS.fullmatch(s):
        return float(s)
    m = _WITH_UNITS.fullmatch(s)
    if not s or m is None or not any(m.groupdict().values()):
        raise ValueError(
            f"invalid duration {text!r}: use seconds (90, 1.5) or units d, h, m, s "
            "in that order (90s, 15m, 2h, 1h30m)"
        )
    return sum(float(v) * _UNIT_SECONDS[unit] for unit, v in m.groupdict().items() if v)


def _iso(epoch: float) -> str:
    from nodeagent._when import iso_time  # noqa: PLC0415

    return iso_time(epoch)


def _from_now(seconds: float, now: float) -> str:
    from nodeagent._when import in_words  # noqa: PLC0415

    return f"{_iso(now + seconds)}, in {in_words(seconds)}"


def parse_time(text: str, now: float) -> float:
    """A moment as operators write it, in epoch seconds, judged at ``now``:

    * ISO 8601: ``2026-11-28T15:00:00Z``, ``2026-11-28T16:00+01:00``, ``2026-11-28 15:00``
      (without a zone: UTC, as the daemons write times);
    * ``+DURATION``: that long after ``now`` (``+2h``, ``+90m``, ``+3600``);
    * seconds since the epoch (``1795850102``, a fraction allowed), from 2000 to
      :data:`PLAUSIBLE_YEARS` years after ``now``.

    Raises ValueError saying what a hurried hand probably meant: a number too small to be
    a moment (``3600``: a duration? ``+3600`` is 1 h from now), or too large (a time in
    milliseconds, microseconds or nanoseconds since the epoch: which moment that is, and
    the seconds to write instead).
    """
    value = text.strip()
    if value.startswith("+"):
        try:
            return now + parse_duration(value[1:])
        except ValueError as exc:
            raise ValueError(f"{text!r}: after +, a duration: {exc}") from None
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is not None and math.isfinite(number):
        return _plausible_seconds(text, number, now)
    from datetime import UTC, datetime  # noqa: PLC0415

    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: write ISO 8601 (2026-11-28T15:00:00Z; no zone is UTC), "
            "+DURATION from now (+2h, +90m) or seconds since the epoch"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _plausible_seconds(text: str, number: float, now: float) -> float:
    """``number`` as seconds since the epoch when it is a plausible moment; else the
    ValueError of :func:`parse_time`."""
    latest = now + PLAUSIBLE_YEARS * _YEAR
    if EARLIEST_PLAUSIBLE <= number <= latest:
        return number
    forms = "seconds since the epoch, an ISO 8601 time or +DURATION from now"
    if 0 <= number < EARLIEST_PLAUSIBLE:
        hint = (
            f"; a duration? +{text.strip()} is {_from_now(number, now)}"
            if number <= PLAUSIBLE_YEARS * _YEAR
            else ""
        )
        raise ValueError(
            f"{text.strip()} read as seconds since the epoch is {_iso(number)}, before 2000"
            f"{hint}: give {forms}"
        )
    for factor, unit in _SMALLER_UNITS:
        if EARLIEST_PLAUSIBLE <= number / factor <= latest:
            seconds = number / factor
            raise ValueError(
                f"{text.strip()} read as seconds since the epoch is more than "
                f"{PLAUSIBLE_YEARS} years ahead; as {unit} it is {_iso(seconds)}: "
                f"write {seconds:.0f} (seconds), or another of {forms}"
            )
    raise ValueError(f"{text.strip()} is no plausible moment: give {forms}")
