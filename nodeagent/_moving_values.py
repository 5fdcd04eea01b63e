"""What moves with the clock in a node's slot ads, kept apart from the rest.

Between two pushes of a node whose claims did not change, its slot ads differ only in the
values of :data:`MOVING`. The master keeps a node's slot ads in two parts, the *static*
part (their JSON with each of those values null, each key where it was) and the moving
values; the agent, once a master holds its slot ads, pushes the moving values alone with
the digest of the static part they go with. Both split slot ads here
(:func:`split_slots`), so that both read the same parts in them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

__all__ = ["COMPLETIONS", "DIGEST", "MOVING", "MOVING_ORDER", "split_slots", "static_digest"]

#: The completions of a drain started now, as an agent's ads publish them.
COMPLETIONS = tuple(f"ExpectedMachine{s}DrainingCompletion" for s in ("Graceful", "Quick", "Fast"))

#: What moves with the clock in an agent's ad while nothing else changes: read by no
#: derived fact of the master's entry of a node (its forecast reads ``TotalJobRunTime``
#: and ``VacateTimeRemaining`` against ``MyCurrentTime``, which the master checks), so an
#: ad that differs from the previous one only in these (and in those checked) is the
#: previous one moved on in time. The usage samples change without the clock, and no
#: derived fact reads them either.
MOVING = frozenset(
    {
        "MyCurrentTime",
        "TotalJobRunTime",
        "VacateTimeRemaining",
        "RetirementTimeRemaining",
        "TotalJobSuspendTime",
        "ExpectedMachineGracefulDrainingBadput",
        "ExpectedMachineQuickDrainingBadput",
        "ExpectedMachineFastDrainingBadput",
        *COMPLETIONS,
        "CpuUsage",
        "MemoryUsage",
    }
)

#: The attributes of :data:`MOVING` in one fixed order: a slot's moving values are kept
#: and pushed in it.
MOVING_ORDER = tuple(sorted(MOVING))

#: The bytes of the digest of the static part: the first of its SHA-256.
DIGEST = 16


def split_slots(slots: Sequence[Mapping[str, Any]]) -> tuple[bytes, list[dict[str, Any]]]:
    """The static JSON of ``slots`` (their JSON with every value of :data:`MOVING` null,
    each key where it was) and their moving values (a dict per slot of those it has, in
    the order of :data:`MOVING_ORDER`). Raises :class:`orjson.JSONEncodeError` for a
    value orjson cannot write (an integer beyond 64 bits)."""
    static: list[Mapping[str, Any]] = []
    moving = []
    for slot in slots:
        values = {name: slot[name] for name in MOVING_ORDER if name in slot}
        moving.append(values)
        if values:
            held = dict(slot)
            for name in values:
                held[name] = None
            static.append(held)
        else:
            static.append(slot)
    return orjson.dumps(static), moving


def static_digest(static: bytes) -> bytes:
    """The digest of a static part (:func:`split_slots`)."""
    return hashlib.sha256(static).digest()[:DIGEST]
