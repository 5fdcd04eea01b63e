"""Which machines' owners have all accepted their notices (nodeagent.master._notices):
what ``[master] on_all_accepted = "drain_now"`` reads."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.master._notices import (
    Answer,
    Notice,
    NoticeWindow,
    Verdict,
    accepted_machines,
    every_claim_grouped,
)

W = NoticeWindow(start=5_000.0)


def answer(verdict: Verdict, at: float = 900.0) -> Answer:
    return Answer(verdict=verdict, reason="fine", who="alice", at=at)


YES, NO = answer(Verdict.ACCEPT), answer(Verdict.DECLINE)


def notice(
    machine: str, group: str, given: Answer | None, *, rescinded: float | None = None
) -> Notice:
    return Notice(
        id=f"n-{machine}-{group}",
        machine=machine,
        group=group,
        window=W,
        claims=(),
        issued=500.0,
        rescinded=rescinded,
        answer=given,
    )


ACCEPTED: dict[str, tuple[list[Notice], set[str]]] = {
    "no notice: no machine": ([], set()),
    "every group accepted": ([notice("n1", "a", YES), notice("n1", "b", YES)], {"n1"}),
    "one group has not answered": ([notice("n1", "a", YES), notice("n1", "b", None)], set()),
    "one group declined": ([notice("n1", "a", YES), notice("n1", "b", NO)], set()),
    "a decline answered again with an accept": (
        [notice("n1", "a", YES), notice("n1", "b", answer(Verdict.ACCEPT, at=950.0))],
        {"n1"},
    ),
    "a rescinded decline does not count": (
        [notice("n1", "a", YES), notice("n1", "b", NO, rescinded=990.0)],
        {"n1"},
    ),
    "each machine on its own": (
        [notice("n1", "a", YES), notice("n2", "a", NO), notice("n3", "a", YES)],
        {"n1", "n3"},
    ),
}


@pytest.mark.parametrize(("notices", "expected"), ACCEPTED.values(), ids=list(ACCEPTED))
def test_accepted_machines(notices: list[Notice], expected: set[str]) -> None:
    assert accepted_machines(notices) == expected


PARTITIONABLE = {"Name": "slot1@n1", "SlotType": "Partitionable"}
GROUPED: dict[str, tuple[Any, bool]] = {
    "no claim": ([PARTITIONABLE], True),
    "every claim names its group": (
        [
            PARTITIONABLE,
            {"SlotType": "Dynamic", "JobGroup": "a"},
            {"SlotType": "Dynamic", "JobGroup": "b"},
        ],
        True,
    ),
    "a claim without a group": (
        [PARTITIONABLE, {"SlotType": "Dynamic", "JobGroup": "a"}, {"SlotType": "Dynamic"}],
        False,
    ),
    "an empty group": ([{"SlotType": "Dynamic", "JobGroup": ""}], False),
    "not a list of slots": ("slots", False),
}


@pytest.mark.parametrize(("slots", "expected"), GROUPED.values(), ids=list(GROUPED))
def test_every_claim_grouped(slots: Any, expected: bool) -> None:
    assert every_claim_grouped(slots) is expected
