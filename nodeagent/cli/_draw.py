"""The pieces the human views are built of, drawn without rich where the text is certain.

Importing rich costs a command ≈ 15 ms, with ``typing``, ``dataclasses`` and ``inspect``
(≈ 10 ms more): as much as the rest of a command together. Yet off a terminal (a pipe,
a file, a script reading the output) rich draws these views as plain text, the same
characters every time. So the views (:mod:`nodeagent.cli._render`) build :class:`Text`,
:class:`Table` and :class:`Group` (the parts of rich's classes of those names they use,
same arguments), and :class:`Screen`, the console every plain command prints on, draws
them itself when it knows rich's text to the character:

* off a terminal (rich's test: ``TTY_COMPATIBLE``, ``FORCE_COLOR``, then ``isatty``), in
  a UTF-8 encoding, as wide as :func:`nodeagent.cli._render.make_console` makes it
  (``COLUMNS``, else 200 columns);
* every character one column wide (printable ASCII and the few drawing characters the
  views use), no line longer than the width (rich would wrap it), no table wider than it
  (rich would shrink a column), and only the options written out here (a table
  ``box=None`` without edge padding, or the default heavy-headed box, with a title
  that fits).

Anything else is printed by a rich console (:func:`nodeagent.cli._render.make_console`)
on the same stream: each of these classes converts itself (``__rich__``) to rich's, so a
rich console prints them as it printed rich's own (colour on a terminal, wrapping, the
terminal's width). Nothing here imports rich but that conversion, nor ``typing``.
"""

from __future__ import annotations

import os

__all__ = ["Group", "Screen", "Span", "Table", "Text", "draw"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from rich.console import Console
    from rich.console import Group as RichGroup
    from rich.table import Table as RichTable
    from rich.text import Text as RichText

_ONE_COLUMN = frozenset(" ·━█▷◆»…─├┼┤")
"""Characters rich draws one column wide, besides printable ASCII: the plan's axis and
legend, and the separators of the views' lines."""


def _narrow(text: str) -> bool:
    """Whether rich draws ``text`` as it is, one column a character (no tab to expand, no
    control character to drop, no wide or zero-width character)."""
    if text.isascii():
        return text.isprintable()
    return all(" " <= c <= "~" or c in _ONE_COLUMN for c in text)


class Span:
    """A style over ``plain[start:end]``."""

    __slots__ = ("end", "start", "style")

    def __init__(self, start: int, end: int, style: str) -> None:
        self.start = start
        self.end = end
        self.style = style

    def __repr__(self) -> str:
        return f"Span({self.start}, {self.end}, {self.style!r})"


class Text:
    """A line of text: a base ``style`` and styled parts (rich's ``Text``, as the views use
    it: ``Text(text, style)`` and :meth:`append`)."""

    __slots__ = ("_parts", "spans", "style")

    def __init__(self, text: str = "", style: str = "") -> None:
        self.style = style
        self._parts = [text]
        self.spans: list[Span] = []

    @property
    def plain(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0]

    def append(self, text: str, style: str = "") -> Text:
        start = len(self.plain)
        self._parts.append(text)
        if style and text:
            self.spans.append(Span(start, start + len(text), style))
        return self

    def __str__(self) -> str:
        return self.plain

    def __rich__(self) -> RichText:
        from rich.text import Span as RichSpan  # noqa: PLC0415
        from rich.text import Text as RichText  # noqa: PLC0415

        spans = [RichSpan(s.start, s.end, s.style) for s in self.spans]
        return RichText(self.plain, style=self.style, spans=spans)


_TABLE_OPTIONS = {"box": None, "pad_edge": False, "header_style": "bold"}
"""A table's options :func:`draw` draws without a box (the views' listings)."""
_BOXED_OPTIONS = frozenset({"title", "title_justify"})
"""A table's options :func:`draw` draws in rich's default box (the title left)."""
_COLUMN_OPTIONS = frozenset({"justify", "no_wrap"})


class Table:
    """Columns and rows (rich's ``Table``: the same options, columns and cells)."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.columns: list[tuple[str, dict[str, Any]]] = []
        self.rows: list[tuple[str | Text, ...]] = []

    def add_column(self, header: str = "", **options: Any) -> None:
        self.columns.append((header, options))

    def add_row(self, *cells: str | Text) -> None:
        self.rows.append(cells)

    def __rich__(self) -> RichTable:
        from rich.table import Table as RichTable  # noqa: PLC0415

        table = RichTable(**self.options)
        for header, options in self.columns:
            table.add_column(header, **options)
        for cells in self.rows:
            table.add_row(*(c.__rich__() if isinstance(c, Text) else c for c in cells))
        return table


class Group:
    """Renderables one after the other (rich's ``Group``)."""

    def __init__(self, *renderables: str | Text | Table | Group) -> None:
        self.renderables = list(renderables)

    def __rich__(self) -> RichGroup:
        from rich.console import Group as RichGroup  # noqa: PLC0415

        return RichGroup(*(r if isinstance(r, str) else r.__rich__() for r in self.renderables))


# --- drawing ------------------------------------------------------------------------------


class _Unsure(Exception):
    """rich might draw this otherwise: let it."""


def _line(text: str, width: int) -> str:
    if len(text) > width or not _narrow(text):
        raise _Unsure
    return text


def _cell(value: str | Text) -> str:
    text = value.plain if isinstance(value, Text) else value
    if not _narrow(text):
        raise _Unsure
    return text


def _table(table: Table, width: int) -> list[str]:
    options = table.options
    boxed = options.keys() <= _BOXED_OPTIONS and options.get("title_justify", "left") == "left"
    if not boxed and options != _TABLE_OPTIONS:
        raise _Unsure
    if not table.columns or any(o.keys() - _COLUMN_OPTIONS for _, o in table.columns):
        raise _Unsure
    right = [o.get("justify", "left") == "right" for _, o in table.columns]
    if any(o.get("justify", "left") not in ("left", "right") for _, o in table.columns):
        raise _Unsure
    grid = [[_cell(h) for h, _ in table.columns]]
    for given in table.rows:
        row = [_cell(c) for c in given]
        if len(row) > len(table.columns):
            raise _Unsure
        grid.append(row + [""] * (len(table.columns) - len(row)))
    widths = [max(len(row[i]) for row in grid) for i in range(len(table.columns))]
    if 0 in widths:  # rich gives an empty column a width of its own
        raise _Unsure

    def cells(row: list[str]) -> list[str]:
        return [
            text.rstrip().rjust(w) if r else text.ljust(w)  # rich's right justification
            for text, w, r in zip(row, widths, right, strict=True)
        ]

    if not boxed:
        total = sum(widths) + 2 * (len(widths) - 1)
        if total > width:
            raise _Unsure
        return ["  ".join(cells(row)) for row in grid]
    total = sum(widths) + 3 * len(widths) + 1
    title = options.get("title") or ""  # rich shows no empty title
    if total > width or len(_cell(title)) > total:
        raise _Unsure

    def rule(left: str, fill: str, middle: str, end: str) -> str:
        return left + middle.join(fill * (w + 2) for w in widths) + end

    lines = [title.ljust(total)] if title else []
    lines.append(rule("┏", "━", "┳", "┓"))
    lines.append("┃ " + " ┃ ".join(cells(grid[0])) + " ┃")
    lines.append(rule("┡", "━", "╇", "┩"))
    lines.extend("│ " + " │ ".join(cells(row)) + " │" for row in grid[1:])
    lines.append(rule("└", "─", "┴", "┘"))
    return lines


def _lines(renderable: str | Text | Table | Group, width: int) -> list[str]:
    if isinstance(renderable, str):
        return [_line(renderable, width)]
    if isinstance(renderable, Text):
        return [_line(renderable.plain, width)]
    if isinstance(renderable, Table):
        return _table(renderable, width)
    if isinstance(renderable, Group):
        return [line for part in renderable.renderables for line in _lines(part, width)]
    raise _Unsure


def draw(renderable: object, width: int) -> str | None:
    """``renderable`` as rich prints it without colour at ``width`` columns (each line
    ending in a newline); ``None`` when rich might print it otherwise."""
    if not isinstance(renderable, str | Text | Table | Group):
        return None
    try:
        return "".join(line + "\n" for line in _lines(renderable, width))
    except _Unsure:
        return None


class Screen:
    """The console a plain command prints its view on: drawn here off a terminal when
    :func:`draw` is sure of the text, else by a rich console on the same stream.

    ``environ`` stands in for :data:`os.environ` (the variables rich reads)."""

    def __init__(self, stream: TextIO, environ: Any = None) -> None:
        self.stream = stream
        self._environ = os.environ if environ is None else environ
        self._console: Console | None = None
        self._width = self._plain_width()

    def _plain_width(self) -> int | None:
        """The width to draw at, ``None`` where rich must draw (a terminal, or a width or
        encoding this module does not compute as rich does)."""
        environ = self._environ
        if (getattr(self.stream, "encoding", None) or "utf-8").lower().replace("_", "-") not in (
            "utf-8",
            "utf8",
        ):
            return None
        compatible = environ.get("TTY_COMPATIBLE", "")
        force = environ.get("FORCE_COLOR")
        if compatible == "1" or (compatible != "0" and force):
            return None
        if compatible != "0" and force is None:
            try:
                if self.stream.isatty():
                    return None
            except ValueError:
                pass
        columns = environ.get("COLUMNS")
        if columns is None:
            return 200
        return int(columns) if columns.isdigit() else None

    @property
    def console(self) -> Console:
        """The rich console on the same stream (made, and rich imported, when first needed)."""
        if self._console is None:
            from nodeagent.cli._render import make_console  # noqa: PLC0415

            self._console = make_console(self.stream)
        return self._console

    @property
    def is_terminal(self) -> bool:
        return False if self._width is not None else self.console.is_terminal

    @property
    def width(self) -> int:
        return self._width if self._width is not None else self.console.width

    def print(self, renderable: object = "", *, style: str = "") -> None:
        """Print ``renderable`` (``style`` over it, as rich's ``Console.print``)."""
        if self._width is not None:
            text = draw(renderable, self._width)
            if text is not None:
                self.stream.write(text)
                return
        self.console.print(renderable, style=style or None)
