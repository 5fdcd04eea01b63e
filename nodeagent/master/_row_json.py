"""A plan row as JSON text, from a template made once while the row's state holds.

A row of the plan (:func:`~nodeagent.master._plan.plan_row`) is some thirty values in
nine dicts, of which about twenty move with ``now``
(:class:`~nodeagent.master._plan.RowFigures`); the rest
(:class:`~nodeagent.master._plan.RowState`, the machine, its nodes' ads) holds
from one plan to the next. Making the dicts and encoding them for 10,000 machines was
most of the plan's reply, so the reply writes each row from a template: the row's JSON,
as orjson writes it, with ``%d`` or ``%s`` where a moving value goes. The template is made
by encoding :func:`~nodeagent.master._plan.row_dict` with a marker string in place of each
moving value, and is made again when the state, the machine or the nodes' ads change.

A marker is a string no row holds by itself (it starts and ends with NUL); the template is
used only if the markers appear exactly where the row places its moving values, once
each (``on_time`` and ``late_by`` twice), so a node that publishes a marker of its own
gets its rows encoded the slow way, never a wrong one. A test holds the text to what orjson
writes for the row.

**The fast way.** Most rows hold no cut (no job's promise is cut: no list of cuts to make):
for those, every integer the row shows (the six estimates, the completions and badput, every
blocker's moving values) is a line of the node's forecast piece (:class:`slots.PieceLines`),
so :meth:`RowJson.fast` keeps one template per piece with ``%d`` for each of them, brings
them all to ``now`` with one multiplication each, adds the few values that are not lines (the
ads' ages, the promise verdict, the planned drain start) and writes the row in one
formatting. Other rows (a cut, no node, a forecast that is not exact) go the way above.
"""

from __future__ import annotations

import functools
import math
import re
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from nodeagent.master._adstore import AdEntry, deflate, inflate
from nodeagent.master._plan import MachinePlan, RowFigures, RowState, ScheduledMachine, row_dict
from slots import PieceLines, late_by, line_pairs, moving_entries, packed_ints

__all__ = ["RowJson"]

_MARKER = re.compile(rb'"\\u0000(\d+)\\u0000"')
_TRUE, _FALSE, _NULL = b"true", b"false", b"null"

# The moving values in the order a row with a node shows them, after its nodes' ages:
# figures_age, the six expected values, on_time, late_by, promises (completion, on_time,
# late_by), as planned (completion, badput, will_escalate, cut_jobs, cut_core_seconds,
# cut_badput, cuts), planned_drain_start, blockers. "d": an integer, written by %d;
# "s": text, written by %s.
_AFTER_AGES = "sddddddssdssddsddds" + "ss"
#: Which marker each of those places is (on_time and late_by are placed twice).
_SLOTS_AFTER_AGES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19)


@functools.cache
def _markers(nodes: int) -> RowFigures:
    """:class:`RowFigures` holding the markers: the ages are 0 … nodes − 1, then on."""

    def marker(i: int) -> str:
        return f"\x00{i}\x00"

    n = nodes
    ages = tuple(marker(i) for i in range(n))
    expected = tuple(marker(n + 1 + i) for i in range(6))
    rest = [marker(n + 7 + i) for i in range(12)]
    return RowFigures._make([ages, marker(n), expected, *rest])


def _template(plan: MachinePlan, state: RowState) -> bytes | None:
    """The row's template, or ``None`` if the markers are not where they must be."""
    nodes = len(plan.nodes)
    text = orjson.dumps(row_dict(plan, state, _markers(nodes)))
    pieces = _MARKER.split(text.replace(b"%", b"%%"))
    slots = [*range(nodes), *(nodes - 1 + i for i in _SLOTS_AFTER_AGES)]
    kinds = "s" * nodes + _AFTER_AGES
    if not state.with_blockers:
        slots.pop()  # the blockers are written as []
        kinds = kinds[:-1]
    if pieces[1::2] != [str(i).encode() for i in slots]:
        return None
    pieces[1::2] = [b"%d" if kind == "d" else b"%s" for kind in kinds]
    return b"".join(pieces)


#: A marker of the fast template: ``L<i>`` the i-th line, ``S<name>`` a value that is not.
_FAST_MARKER = re.compile(rb'"\\u0000([LS][a-z_0-9]+)\\u0000"')


class _TemplatePacker:
    """The fast templates kept deflated: a master keeps one per scheduled machine, ≈ 3.4
    kB for a row with 8 blockers as text, ≈ 0.3 kB deflated with a row as the dictionary
    (rows differ mostly in their names and numbers). The dictionary is the first template
    of :data:`DICTIONARY_BYTES` or more that the process makes; a template keeps the one it
    was deflated with. Deflating one costs ≈ 20 µs when it is made, inflating ≈ 5–10 µs for
    each row written from it."""

    __slots__ = ("dictionary",)

    #: The size from which a template is taken as the dictionary.
    DICTIONARY_BYTES = 1024

    def __init__(self) -> None:
        self.dictionary = b""

    def pack(self, template: bytes) -> tuple[bytes, bytes]:
        """``template`` deflated, and the dictionary to inflate it with."""
        if not self.dictionary and len(template) >= self.DICTIONARY_BYTES:
            self.dictionary = template
        return deflate(template, self.dictionary, level=1), self.dictionary

    @staticmethod
    def unpack(packed: bytes, dictionary: bytes) -> bytes:
        return inflate(packed, dictionary)


_PACKER = _TemplatePacker()


def _fast_marker(name: str) -> str:
    return f"\x00{name}\x00"


class _Fast(NamedTuple):
    """A row's fast template for one forecast piece (see the module docstring): the
    values in the order written are the nodes' ages, when the figures are from and their
    age, the lines 0–5,
    on_time, late_by, line 6, on_time, late_by, lines 7 and 8, the planned drain start,
    then the other lines (the blockers')."""

    piece: object
    state: RowState
    machine: ScheduledMachine
    #: The :attr:`~nodeagent.master._adstore.AdEntry.basis` of each of the row's nodes
    #: (not the entries: a template kept would keep a node's replaced entries alive).
    bases: tuple[object, ...]
    #: The template, deflated with ``dictionary`` (:data:`_PACKER`).
    template: bytes
    dictionary: bytes
    #: The first 9 %d values, lines 0–8: the at and slope of each, one after the other.
    lines: Sequence[int]
    #: The other lines are the blockers' moving entries, in the order they are written:
    #: their values at the piece's base and slopes, one after the other (an array of
    #: 64-bit integers when they fit: a master keeps a template per machine).
    moving: Sequence[int]
    active: bool


def _same_bases(bases: tuple[object, ...], nodes: Sequence[AdEntry]) -> bool:
    """Whether a row written for nodes of ``bases`` holds for ``nodes``: the entries of the
    same ads, each the one before moved on in time (the same :attr:`AdEntry.basis`: what
    a row shows of them is the same, but their ages, which are filled in)."""
    return len(bases) == len(nodes) and all(
        basis is node.basis for basis, node in zip(bases, nodes, strict=True)
    )


def _lists_blockers(state: RowState) -> bool:
    """Whether a row of ``state`` lists its node's blockers (only then does its template
    need their frames: :meth:`~slots.DrainForecast.lines`)."""
    return state.with_blockers and not state.empty


def _fast_template(plan: MachinePlan, state: RowState, read: PieceLines) -> _Fast | None:
    """The fast template of a row without cuts, or ``None`` where the markers are not
    where they must be."""
    nodes = len(plan.nodes)
    lines = packed_ints([*read.estimates, *read.verdicts[:6]])
    moving: list[int] = []
    blockers: list[dict[str, Any]] = []
    frames = (read.blockers or ()) if _lists_blockers(state) else ()
    for frame in frames:
        blocker = dict(frame.at_base)
        for key, at, slope in moving_entries(frame.moving):
            blocker[key] = _fast_marker(f"L{(len(lines) + len(moving)) // 2}")
            moving += (at, slope)
        blockers.append(blocker)
    marked = RowFigures._make(
        [
            tuple(_fast_marker(f"Sage{i}") for i in range(nodes)),
            _fast_marker("Sfigures_age"),
            tuple(_fast_marker(f"L{i}") for i in range(6)),
            _fast_marker("Son_time"),
            _fast_marker("Slate_by"),
            _fast_marker("L6"),
            _fast_marker("L7"),
            _fast_marker("L8"),
            False,  # will_escalate: no cut
            0,
            0,
            0,
            [],
            _fast_marker("Sdrain_start"),
            blockers,
        ]
    )
    text = orjson.dumps(row_dict(plan, state, marked))
    # When the figures are from is filled in too: the template serves the node's next
    # ads while they only move on in time (_same_bases).
    assert plan.node is not None
    figures_at = b'"figures_at":' + orjson.dumps(plan.node.received_at) + b","
    if text.count(figures_at) != 1:
        return None
    text = text.replace(figures_at, b'"figures_at":"\\u0000Sfigures_at\\u0000",')
    pieces = _FAST_MARKER.split(text.replace(b"%", b"%%"))
    names = [name.decode() for name in pieces[1::2]]
    expected_names = [
        *(f"Sage{i}" for i in range(nodes)),
        "Sfigures_at",
        "Sfigures_age",
        *(f"L{i}" for i in range(6)),
        "Son_time",
        "Slate_by",
        "L6",
        "Son_time",
        "Slate_by",
        "L7",
        "L8",
        "Sdrain_start",
        *(f"L{i}" for i in range(9, (len(lines) + len(moving)) // 2)),
    ]
    if names != expected_names:
        return None
    pieces[1::2] = [b"%d" if name[0] == "L" else b"%s" for name in names]
    template, dictionary = _PACKER.pack(b"".join(pieces))
    return _Fast(
        piece=read.piece,
        state=state,
        machine=plan.machine,
        bases=tuple(node.basis for node in plan.nodes),
        template=template,
        dictionary=dictionary,
        lines=lines,
        moving=packed_ints(moving),
        active=read.active,
    )


class RowJson:
    """One machine's plan row as JSON text; remembers its templates, one per state seen
    (with and without blockers, say), while the machine and its nodes' ads stay the
    same (compared by identity)."""

    __slots__ = ("_fast", "_machine", "_nodes", "_templates", "read_at")

    #: States remembered at most (a row has one or two in practice).
    STATES = 4

    def __init__(self) -> None:
        self._machine: ScheduledMachine | None = None
        # weakly: a template kept would keep a node's replaced entries alive
        self._nodes: tuple[weakref.ref[AdEntry], ...] = ()
        self._templates: dict[RowState, bytes | None] = {}
        self._fast: _Fast | None = None
        #: When a reply last wrote the row (a reconcile pass keeps the templates of the
        #: rows read lately current: :meth:`~nodeagent.master._plan_view.PlanView.prepare_row`).
        self.read_at = -math.inf

    def prepare(self, plan: MachinePlan, state: RowState) -> bytes | None:
        """The row's template for ``state``, made now if it is not made yet (a
        reconcile pass makes it ahead of the plans); ``None``: the row is written the
        slow way (no node, or a marker in the row's own values).

        Raises :class:`orjson.JSONEncodeError` for a value orjson cannot write.
        """
        if plan.node is None:
            return None
        nodes = plan.nodes
        # The same entries (not only the same ads moved on: these templates hold when the
        # figures are from, _template)
        if (
            plan.machine is not self._machine
            or len(nodes) != len(self._nodes)
            or any(ref() is not node for ref, node in zip(self._nodes, nodes, strict=True))
        ):
            self._machine, self._nodes = plan.machine, tuple(weakref.ref(n) for n in nodes)
            self._templates = {}
            self._fast = None
        templates = self._templates
        if state in templates:
            return templates[state]
        if len(templates) >= self.STATES:
            templates.clear()
        template = templates[state] = _template(plan, state)
        return template

    def text(self, plan: MachinePlan, state: RowState, figures: RowFigures) -> bytes:
        """The row of ``state`` and ``figures``, as ``orjson.dumps(row_dict(…))`` writes it.

        Raises :class:`orjson.JSONEncodeError` for a value orjson cannot write.
        """
        template = self.prepare(plan, state)
        if template is None:
            return orjson.dumps(row_dict(plan, state, figures))
        dumps = orjson.dumps
        on_time = _TRUE if figures.on_time else _FALSE
        late_by = dumps(figures.late_by)
        cuts = figures.cuts
        drain_start = figures.drain_start
        blockers: Any = (dumps(figures.blockers),) if state.with_blockers else ()
        return template % (
            *[dumps(age) for age in figures.ages],
            dumps(figures.figures_age),
            *(figures.expected or ()),
            on_time,
            late_by,
            figures.promise_completion,
            on_time,
            late_by,
            figures.planned_completion,
            figures.planned_badput,
            _TRUE if figures.will_escalate else _FALSE,
            figures.cut_jobs,
            figures.cut_core_seconds,
            figures.cut_badput,
            dumps(cuts) if cuts else b"[]",
            _NULL if drain_start is None else dumps(drain_start),
            *blockers,
        )

    def fast(
        self,
        plan: MachinePlan,
        state: RowState,
        now: float,
        *,
        unless_on_time: bool = False,
        write: bool = True,
    ) -> tuple[bytes, bool, int, int] | None:
        """The row at ``now`` written the fast way (the module docstring), with what the
        totals need of it: whether it is on time by its promises, its expected graceful
        and quick badput (with ``unless_on_time``, a row on time is not written: its text
        is empty; without ``write``, no row is: a reply that sends only some of the rows
        writes those after). ``None`` when the row must go the other way (a cut, no node, a
        forecast that is not exact, a marker in the row's own values).

        Raises :class:`orjson.JSONEncodeError` for a value orjson cannot write.
        """
        node = plan.node
        if node is None:
            return None
        window_start = plan.machine.window_start
        forecast = node.forecast
        blockers = _lists_blockers(state) and write  # a row not written needs no frames
        found = forecast.piece_at(
            now, window_start=window_start, escalation=state.applied, blockers=blockers
        )
        if found is None:
            return None
        piece, d = found
        fast = self._fast
        lines: Sequence[int]
        if (
            fast is None
            or fast.piece is not piece
            or (fast.state is not state and fast.state != state)
            or fast.machine is not plan.machine
            or not _same_bases(fast.bases, plan.nodes)
        ):
            read = forecast.lines(
                now, window_start=window_start, escalation=state.applied, blockers=blockers
            )
            if read is None or read.cut_jobs:
                return None
            d = read.d  # the piece that got its blockers may have a base of its own
            if write:
                fast = self._fast = _fast_template(plan, state, read)
                if fast is None:
                    return None
                lines, active = fast.lines, fast.active
            else:  # the totals alone: the piece's lines, no template made
                lines, active = [*read.estimates, *read.verdicts[:6]], read.active
        else:
            lines, active = fast.lines, fast.active
        v = [at + slope * d for at, slope in line_pairs(lines)]
        if state.empty:
            late: float = 0
        else:
            late = late_by(v[6], window_start=window_start, active=active)
        on_time = late == 0
        if not write or (on_time and unless_on_time):
            return b"", on_time, v[1], v[3]
        assert fast is not None  # made above when written
        dumps = orjson.dumps
        m = fast.moving
        start = plan.drain_start
        ot, lb = (_TRUE if on_time else _FALSE), dumps(late)
        age = dumps(round(node.age(now), 3))
        nodes = plan.nodes
        text = (
            _PACKER.unpack(fast.template, fast.dictionary)
            % (
                *(
                    (age,)  # the usual machine: one node, the row's
                    if len(nodes) == 1
                    else [dumps(round(n.age(now), 3)) for n in nodes]
                ),
                dumps(node.received_at),
                age,
                *v[:6],
                ot,
                lb,
                v[6],
                ot,
                lb,
                v[7],
                v[8],
                _NULL if start is None else dumps(start),
                *[at + slope * d for at, slope in zip(m[::2], m[1::2], strict=True)],
            )
        )
        return text, on_time, v[1], v[3]
