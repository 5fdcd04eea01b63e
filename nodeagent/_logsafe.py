"""Log lines that no logged value can forge: one record, one line.

The daemons log what callers send them (a node's ``Name``, a drain's reason, a request
path), and a newline in one of those would start a line of its own that reads as a
record the daemon never wrote. :class:`SafeFormatter` escapes, in the whole formatted
record — message, arguments, exception and stack text alike — every character that can
break or disguise a line:

* C0 controls (``\\n``, ``\\r`` and ``\\t`` by name, the others as ``\\xNN``), DEL and the C1
  controls (NEL, U+0085, included) as ``\\xNN``;
* the Unicode line and paragraph separators U+2028 and U+2029, and the bidirectional
  formatting controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), which
  reorder what a terminal shows, as ``\\uNNNN``.

Everything else, backslashes included, is written as it is, so an escape in the output
may also be a caller's literal backslash: the output is unambiguous about where records
start, not about every character. A traceback is written on its record's line, its line
breaks escaped: under systemd each line on stderr is a journal entry of its own, so this
also keeps a traceback in one entry.

:func:`install` puts the formatter on every handler of a logger (the root logger by
default), keeping each handler's format; a daemon calls it once, after configuring its
handlers.
"""

from __future__ import annotations

import logging
import re
from typing import Literal

__all__ = ["SafeFormatter", "escape_controls", "install"]

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with every character that can break or disguise a line escaped (see the
    module docstring); the result holds none of them."""
    return _UNSAFE.sub(_escape, text)


class SafeFormatter(logging.Formatter):
    """A formatter whose every record is one line (:func:`escape_controls` applied to
    the whole formatted record).

    ``inner`` formats the record first (a handler's own formatter, see :func:`install`);
    without one, this formatter formats it with ``fmt``, ``datefmt`` and ``style`` as
    :class:`logging.Formatter` does. The record itself is left unchanged, so that other
    handlers see it as it was logged.
    """

    def __init__(
        self,
        fmt: str | None = None,
        datefmt: str | None = None,
        style: Literal["%", "{", "$"] = "%",
        *,
        inner: logging.Formatter | None = None,
    ) -> None:
        super().__init__(fmt, datefmt, style)
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        text = self.inner.format(record) if self.inner is not None else super().format(record)
        return escape_controls(text)


def install(logger: logging.Logger | None = None) -> None:
    """Make every handler of ``logger`` (default: the root logger) write through a
    :class:`SafeFormatter` wrapping the formatter it had; calling it again changes
    nothing. Handlers added later are not covered."""
    target = logging.getLogger() if logger is None else logger
    for handler in target.handlers:
        if not isinstance(handler.formatter, SafeFormatter):
            handler.setFormatter(SafeFormatter(inner=handler.formatter or logging.Formatter()))
