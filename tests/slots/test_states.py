"""The one table of legal (state, activity) moves."""

from __future__ import annotations

import itertools

import pytest

from slots import MOVES, Activity, IllegalTransition, State, check_move

PAIRS = [
    (State.OWNER, Activity.IDLE),
    (State.UNCLAIMED, Activity.IDLE),
    (State.CLAIMED, Activity.BUSY),
    (State.CLAIMED, Activity.SUSPENDED),
    (State.CLAIMED, Activity.RETIRING),
    (State.PREEMPTING, Activity.VACATING),
    (State.PREEMPTING, Activity.KILLING),
    (State.DRAINED, Activity.RETIRING),
    (State.DRAINED, Activity.IDLE),
]

LEGAL = {
    ("Owner/Idle", "Unclaimed/Idle"),
    ("Unclaimed/Idle", "Owner/Idle"),
    ("Owner/Idle", "Drained/Retiring"),
    ("Owner/Idle", "Drained/Idle"),
    ("Unclaimed/Idle", "Drained/Retiring"),
    ("Unclaimed/Idle", "Drained/Idle"),
    ("Drained/Retiring", "Drained/Idle"),
    ("Drained/Idle", "Drained/Retiring"),
    ("Drained/Retiring", "Unclaimed/Idle"),
    ("Drained/Retiring", "Owner/Idle"),
    ("Drained/Idle", "Unclaimed/Idle"),
    ("Drained/Idle", "Owner/Idle"),
    ("Claimed/Busy", "Claimed/Suspended"),
    ("Claimed/Busy", "Claimed/Retiring"),
    ("Claimed/Busy", "Preempting/Vacating"),
    ("Claimed/Busy", "Preempting/Killing"),
    ("Claimed/Suspended", "Claimed/Busy"),
    ("Claimed/Suspended", "Claimed/Retiring"),
    ("Claimed/Suspended", "Preempting/Vacating"),
    ("Claimed/Suspended", "Preempting/Killing"),
    ("Claimed/Retiring", "Claimed/Busy"),
    ("Claimed/Retiring", "Claimed/Suspended"),
    ("Claimed/Retiring", "Preempting/Vacating"),
    ("Claimed/Retiring", "Preempting/Killing"),
    ("Preempting/Vacating", "Preempting/Killing"),
}


def _name(pair: tuple[State, Activity]) -> str:
    return f"{pair[0]}/{pair[1]}"


def test_table_is_exactly_the_documented_moves() -> None:
    assert {(_name(a), _name(b)) for a, b in MOVES} == LEGAL


@pytest.mark.parametrize(("current", "new"), list(itertools.product(PAIRS, PAIRS)))
def test_every_pair(current: tuple[State, Activity], new: tuple[State, Activity]) -> None:
    legal = current == new or (_name(current), _name(new)) in LEGAL
    if legal:
        check_move(current, new, slot="slot1@h")
    else:
        with pytest.raises(IllegalTransition, match="cannot move") as caught:
            check_move(current, new, slot="slot1@h")
        assert caught.value.code == "slot.illegal_transition"
        assert caught.value.http_status == 409
