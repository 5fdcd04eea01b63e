"""The version a schedule preview is made from (:func:`nodeagent.master._preview.schedule_version`),
as a table of states: what changes it and what does not."""

from __future__ import annotations

import pytest

from nodeagent.master._maintenance import MaintenanceState
from nodeagent.master._plan import PlanPolicy
from nodeagent.master._preview import SchedulePreview, schedule_version
from tests.nodeagent.master.test_drains import EPOCH
from tests.nodeagent.master.test_preview import OTHER, N, at, inputs, pool, schedule


def _state(*steps: str) -> MaintenanceState:
    """A state after ``steps``: ``later`` (N in a window an hour ahead), ``sooner`` (N's
    window moved to a minute ahead), ``other`` (ghost.test added), ``down``, ``up``,
    ``empty`` (the schedule emptied)."""
    state = MaintenanceState()
    for step in steps:
        if step == "later":
            state.update_schedule(schedule(at(EPOCH + 3600)))
        elif step == "sooner":
            state.update_schedule(schedule(at(EPOCH + 60)))
        elif step == "other":
            state.update_schedule(schedule(at(EPOCH + 3600), at(EPOCH + 3600, 60, OTHER)))
        elif step == "down":
            state.down([N])
        elif step == "up":
            state.up([N])
        elif step == "empty":
            state.update_schedule(schedule())
    return state


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ((), (), True),
        ((), ("later", "empty"), True),  # back where it was: the same state, the same version
        (("later",), ("later",), True),
        (("later",), ("later", "later"), True),  # the same schedule set again
        ((), ("later",), False),
        (("later",), ("sooner",), False),  # a window moved
        (("later",), ("other",), False),  # a machine added
        (("later",), ("later", "down"), False),  # only a mode changed
        (("later", "down"), ("later", "down", "up"), False),  # UP: out of the schedule
    ],
)
def test_schedule_version(first: tuple[str, ...], second: tuple[str, ...], same: bool) -> None:
    assert (schedule_version(_state(*first)) == schedule_version(_state(*second))) is same


def test_the_preview_names_the_version_it_was_made_from() -> None:
    state = _state("later")
    preview = SchedulePreview(
        state, schedule(at(EPOCH + 60)), inputs(pool(), PlanPolicy(), EPOCH), EPOCH
    ).head
    assert preview["schedule_version"] == schedule_version(state)
    assert preview["schedule_version"] != schedule_version(_state("sooner"))
