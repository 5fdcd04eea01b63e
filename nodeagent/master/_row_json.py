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
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import orjson

from nodeagent.master._adstore import AdEntry
from nodeagent.master._plan import MachinePlan, RowFigures, RowState, ScheduledMachine, row_dict

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
    text = orjson.dumps(row_dict(plan, state, _markers(nodes), encoded=True))
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


class RowJson:
    """One machine's plan row as JSON text; remembers its templates, one per state seen
    (with and without blockers, say), while the machine and its nodes' ads stay the
    same (compared by identity)."""

    __slots__ = ("_machine", "_nodes", "_templates")

    #: States remembered at most (a row has one or two in practice).
    STATES = 4

    def __init__(self) -> None:
        self._machine: ScheduledMachine | None = None
        self._nodes: Sequence[AdEntry] = ()
        self._templates: dict[RowState, bytes | None] = {}

    def prepare(self, plan: MachinePlan, state: RowState) -> bytes | None:
        """The row's template for ``state``, made now if it is not made yet (a
        reconcile pass makes it ahead of the plans); ``None``: the row is written the
        slow way (no node, or a marker in the row's own values).

        Raises :class:`orjson.JSONEncodeError` for a value orjson cannot write.
        """
        if plan.node is None:
            return None
        nodes = plan.nodes
        if plan.machine is not self._machine or (
            nodes is not self._nodes  # the ad store hands out the same list until it changes
            and (
                len(nodes) != len(self._nodes)
                or any(a is not b for a, b in zip(nodes, self._nodes, strict=True))
            )
        ):
            self._machine, self._nodes = plan.machine, nodes
            self._templates = {}
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
            return orjson.dumps(row_dict(plan, state, figures, encoded=True))
        dumps = orjson.dumps
        on_time = _TRUE if figures.on_time else _FALSE
        late_by = dumps(figures.late_by)
        cuts = figures.cuts
        drain_start = figures.drain_start
        blockers: Any = ()
        if state.with_blockers:
            listed = figures.blockers
            blockers = (listed if type(listed) is bytes else dumps(listed),)
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
