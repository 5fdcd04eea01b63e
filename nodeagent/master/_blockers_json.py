"""A node's blockers as JSON text, their fixed parts encoded once per forecast piece.

The plan of 10,000 machines carries some 80,000 blockers, each a dict of fifteen
entries of which two or three move with ``now`` (a job's run time, its retirement left).
Making those dicts and encoding them was most of the plan's reply. A forecast piece
(:meth:`slots.DrainForecast.blocker_frames`) is read many times before it is replaced,
so each blocker's JSON is made once per piece as a template, with ``%d`` where a moving
integer goes; a reply fills in the moving values and hands the text to orjson as a
:class:`orjson.Fragment`. The text is what ``orjson.dumps`` writes for the blockers of
:meth:`slots.DrainForecast.blockers`, byte for byte (a test holds it to that).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from slots import BlockerFrame, DrainForecast, Escalation

__all__ = ["BlockersJson"]


def _template(frame: BlockerFrame) -> tuple[bytes, list[tuple[int, int]]]:
    """The blocker's JSON with ``%d`` for each moving value (a ``%`` of its own doubled),
    and those values' lines, in order.

    Encoded once, with a marker string in place of each moving value, then cut at the
    markers. Raises :class:`orjson.JSONEncodeError` for a value orjson cannot write (an
    integer beyond 64 bits).
    """
    if not frame.moving:
        return orjson.dumps(frame.at_base).replace(b"%", b"%%"), []
    marked = dict(frame.at_base)
    for i, (key, _, _) in enumerate(frame.moving):
        marked[key] = _MARKS[i]
    pieces = _MARK.split(orjson.dumps(marked).replace(b"%", b"%%"))
    if pieces[1::2] != _ORDER[: len(frame.moving)]:
        # A value of the blocker's own reads as a marker: one entry at a time instead.
        return _template_by_entry(frame)
    pieces[1::2] = [b"%d"] * len(frame.moving)
    return b"".join(pieces), [(at, slope) for _, at, slope in frame.moving]


#: Marker strings for the moving values (a blocker has two or three), as orjson writes
#: them: a string that begins and ends with NUL.
_MARKS = [f"\x00{i}\x00" for i in range(16)]
_MARK = re.compile(rb'"\\u0000(\d+)\\u0000"')
_ORDER = [str(i).encode() for i in range(16)]


def _template_by_entry(frame: BlockerFrame) -> tuple[bytes, list[tuple[int, int]]]:
    """:func:`_template`, encoding the fixed entries between two moving ones together."""
    moving = {key: (at, slope) for key, at, slope in frame.moving}
    parts = []
    lines = []
    fixed: dict[str, Any] = {}
    for key, value in frame.at_base.items():
        line = moving.get(key)
        if line is None:
            fixed[key] = value
            continue
        if fixed:
            parts.append(orjson.dumps(fixed)[1:-1].replace(b"%", b"%%"))
            fixed = {}
        name = _names.get(key)
        if name is None:
            name = _names[key] = orjson.dumps(key).replace(b"%", b"%%") + b":%d"
        parts.append(name)
        lines.append(line)
    if fixed:
        parts.append(orjson.dumps(fixed)[1:-1].replace(b"%", b"%%"))
    return b"{" + b",".join(parts) + b"}", lines


#: A moving entry's key as the template writes it, by key (a blocker has a few).
_names: dict[str, bytes] = {}


class BlockersJson:
    """One node's blockers as JSON; remembers the template of the last piece read: the
    whole array's text with ``%d`` for every moving value, and their lines.

    Kept with the node's ad entry (a newer ad replaces both). Not thread-safe, like the
    forecast it reads.
    """

    __slots__ = ("_frames", "_lines", "_text", "_written")

    def __init__(self) -> None:
        self._frames: Sequence[BlockerFrame] | None = None
        self._text: bytes | None = None  # None: orjson cannot write these blockers
        self._lines: tuple[tuple[int, int], ...] = ()
        self._written: tuple[int, bytes] | None = None  # the last d, its text

    def fragment(
        self,
        forecast: DrainForecast,
        now: float,
        *,
        window_start: float | None = None,
        escalation: Escalation = Escalation.NONE,
    ) -> orjson.Fragment | None:
        """:meth:`text` as an :class:`orjson.Fragment`."""
        text = self.text(forecast, now, window_start=window_start, escalation=escalation)
        return None if text is None else orjson.Fragment(text)

    def text(
        self,
        forecast: DrainForecast,
        now: float,
        *,
        window_start: float | None = None,
        escalation: Escalation = Escalation.NONE,
    ) -> bytes | None:
        """The JSON array of ``forecast.blockers(now, …)``; ``None`` when the forecast is
        not exact or a value cannot be written by orjson (the caller then encodes the
        blockers themselves)."""
        read = forecast.blocker_frames(now, window_start=window_start, escalation=escalation)
        if read is None:
            return None
        frames, d = read
        if frames is not self._frames:
            self._frames, self._written = frames, None
            try:
                made = [_template(frame) for frame in frames]
            except orjson.JSONEncodeError:
                self._text, self._lines = None, ()
                return None
            self._text = b"[" + b",".join(text for text, _ in made) + b"]"
            self._lines = tuple(line for _, lines in made for line in lines)
            if not self._lines:
                self._written = (d, self._text % ())
        if self._text is None:
            return None
        written = self._written
        if written is not None and (written[0] == d or not self._lines):
            return written[1]
        text = self._text % tuple([at + slope * d for at, slope in self._lines])
        self._written = (d, text)
        return text
