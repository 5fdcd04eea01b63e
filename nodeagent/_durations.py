"""Durations as operators write them: ``90``, ``1.5``, ``90s``, ``15m``, ``2h``, ``1h30m``.

Standard library only: the command line's hot path imports it.
"""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

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
