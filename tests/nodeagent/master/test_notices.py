"""Table tests of the notices' pure model (nodeagent.master._notices)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from nodeagent.master._notices import (
    Answer,
    BadAnswer,
    Notice,
    NoticeClaim,
    NoticeWindow,
    Verdict,
    check_answer,
    claims_of_slots,
    mesos_statuses,
    notice_from_json,
    notice_id,
    reconcile_notices,
)

NOW = 1_000.0
W = NoticeWindow(start=5_000.0, duration=3_600.0)
MOVED = NoticeWindow(start=6_000.0, duration=3_600.0)
A = (NoticeClaim(slot="slot1_1@n1", job_id="j1", promise_end=2_000.0),)
B = (NoticeClaim(slot="slot1_2@n1", job_id="j2", promise_end=3_000.0),)
ANSWER = Answer(verdict=Verdict.DECLINE, reason="batch ends at 6", who="alice", at=900.0)


def held(machine: str, group: str, window: NoticeWindow, *, answer: Answer | None = None) -> Notice:
    return Notice(
        id=notice_id(machine, group, window, 500.0),
        machine=machine,
        group=group,
        window=window,
        claims=A,
        issued=500.0,
        answer=answer,
    )


def keys(notices: Any) -> list[tuple[str, str]]:
    return sorted((n.machine, n.group) for n in notices)


CASES = [
    # (name, held, windows, claims, issued, rescinded, in force after)
    (
        "issued for each group with instances",
        [],
        {"n1": W},
        {"n1": {"a": A, "b": B}},
        [("n1", "a"), ("n1", "b")],
        [],
        [("n1", "a"), ("n1", "b")],
    ),
    (
        "none for a group without instances",
        [],
        {"n1": W},
        {"n1": {"a": A, "b": ()}},
        [("n1", "a")],
        [],
        [("n1", "a")],
    ),
    ("none for a machine outside the schedule", [], {}, {"n1": {"a": A}}, [], [], []),
    (
        "kept when nothing changed",
        [held("n1", "a", W)],
        {"n1": W},
        {"n1": {"a": A}},
        [],
        [],
        [("n1", "a")],
    ),
    (
        "reissued when the window moves",
        [held("n1", "a", W)],
        {"n1": MOVED},
        {"n1": {"a": A}},
        [("n1", "a")],
        [("n1", "a")],
        [("n1", "a")],
    ),
    (
        "rescinded when the machine leaves the schedule",
        [held("n1", "a", W)],
        {},
        {"n1": {"a": A}},
        [],
        [("n1", "a")],
        [],
    ),
    (
        "rescinded when the group's last instance leaves",
        [held("n1", "a", W)],
        {"n1": W},
        {"n1": {"b": B}},
        [("n1", "b")],
        [("n1", "a")],
        [("n1", "b")],
    ),
    (
        "kept while the machine's ad is unknown",
        [held("n1", "a", W)],
        {"n1": W},
        {},
        [],
        [],
        [("n1", "a")],
    ),
    (
        "reissued when the window moves while the machine's ad is unknown",
        [held("n1", "a", W)],
        {"n1": MOVED},
        {},
        [("n1", "a")],
        [("n1", "a")],
        [("n1", "a")],
    ),
]


@pytest.mark.parametrize(
    ("notices", "windows", "claims", "issued", "rescinded", "after"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_reconcile_notices(
    notices: list[Notice],
    windows: dict[str, NoticeWindow],
    claims: dict[str, dict[str, tuple[NoticeClaim, ...]]],
    issued: list[tuple[str, str]],
    rescinded: list[tuple[str, str]],
    after: list[tuple[str, str]],
) -> None:
    result = reconcile_notices({n.id: n for n in notices}, windows, claims, now=NOW)
    assert keys(result.issued) == issued
    assert keys(result.rescinded) == rescinded
    assert keys(result.held.values()) == after
    assert result.changed == bool(issued or rescinded)
    assert all(n.rescinded == NOW for n in result.rescinded)
    assert all(n.issued == NOW and n.answer is None for n in result.issued)
    assert set(result.held) == {n.id for n in result.held.values()}


def test_a_reissued_notice_has_a_new_id_and_no_answer() -> None:
    old = held("n1", "a", W, answer=ANSWER)
    result = reconcile_notices({old.id: old}, {"n1": MOVED}, {"n1": {"a": A}}, now=NOW)
    (new,) = result.held.values()
    assert new.id != old.id
    assert new.window == MOVED
    assert new.answer is None
    assert result.rescinded[0].id == old.id


def test_answers_of_notices_in_force_are_kept_and_claims_refreshed() -> None:
    old = held("n1", "a", W, answer=ANSWER)
    result = reconcile_notices({old.id: old}, {"n1": W}, {"n1": {"a": A + B}}, now=NOW)
    assert result.held[old.id].answer == ANSWER
    assert result.held[old.id].claims == A + B
    assert not result.changed


def test_an_answer_from_a_group_that_left_goes_with_its_notice() -> None:
    old = held("n1", "a", W, answer=ANSWER)
    result = reconcile_notices({old.id: old}, {"n1": W}, {"n1": {}}, now=NOW)
    assert result.held == {}
    assert result.rescinded[0].answer == ANSWER


def test_a_group_back_later_gets_a_new_notice() -> None:
    first = reconcile_notices({}, {"n1": W}, {"n1": {"a": A}}, now=NOW)
    gone = reconcile_notices(first.held, {"n1": W}, {"n1": {}}, now=NOW + 1)
    back = reconcile_notices(gone.held, {"n1": W}, {"n1": {"a": A}}, now=NOW + 2)
    assert set(back.held).isdisjoint(first.held)


def test_only_the_latest_answer_counts() -> None:
    notice = held("n1", "a", W).answered(ANSWER)
    later = Answer(verdict=Verdict.ACCEPT, reason="done", who="bob", at=950.0)
    assert notice.answered(later).answer == later


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ([], "notice.bad_body"),
        ({"reason": "x", "other": 1}, "notice.bad_body"),
        ({}, "notice.bad_reason"),
        ({"reason": ""}, "notice.bad_reason"),
        ({"reason": 3}, "notice.bad_reason"),
        ({"reason": "a\nb"}, "notice.bad_reason"),
        ({"reason": "x" * 1025}, "notice.bad_reason"),
        ({"reason": "x", "expected_completion": "soon"}, "notice.bad_expected_completion"),
        ({"reason": "x", "expected_completion": True}, "notice.bad_expected_completion"),
        ({"reason": "x", "expected_completion": math.inf}, "notice.bad_expected_completion"),
        ({"reason": "x", "expected_completion": math.nan}, "notice.bad_expected_completion"),
    ],
)
def test_check_answer_refuses(body: object, code: str) -> None:
    with pytest.raises(BadAnswer) as refused:
        check_answer(body)
    assert refused.value.code == code


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"reason": "x" * 1024}, ("x" * 1024, None)),
        ({"reason": "ok", "expected_completion": 7}, ("ok", 7.0)),
        ({"reason": "ok", "expected_completion": None}, ("ok", None)),
    ],
)
def test_check_answer_accepts(body: object, expected: tuple[str, float | None]) -> None:
    assert check_answer(body) == expected


def test_claims_of_slots() -> None:
    slots = [
        {"Name": "slot1@n1", "SlotType": "Partitionable"},
        {"Name": "slot1_2@n1", "JobGroup": "a", "JobId": "j2", "RetirementTimeRemaining": 60},
        {"Name": "slot1_1@n1", "JobGroup": "a", "JobId": "j1"},
        {"Name": "slot1_3@n1", "JobGroup": "b", "RetirementTimeRemaining": True},
        "junk",
    ]
    assert claims_of_slots(slots, now=NOW) == {
        "a": (
            NoticeClaim(slot="slot1_1@n1", job_id="j1", promise_end=None),
            NoticeClaim(slot="slot1_2@n1", job_id="j2", promise_end=NOW + 60),
        ),
        "b": (NoticeClaim(slot="slot1_3@n1"),),
    }
    assert claims_of_slots(None, now=NOW) == {}


@pytest.mark.parametrize(
    "notice",
    [
        held("n1", "a", W),
        held("n1", "a", NoticeWindow(start=5_000.0), answer=ANSWER),
        Notice(
            id="n-x",
            machine="n2",
            group="b",
            window=W,
            claims=A + B + (NoticeClaim(slot="s"),),
            issued=1.0,
            rescinded=2.0,
            answer=Answer(
                verdict=Verdict.ACCEPT, reason="ok", who="bob", at=3.0, expected_completion=4.5
            ),
        ),
    ],
)
def test_a_notice_round_trips_through_json(notice: Notice) -> None:
    assert notice_from_json(json.loads(json.dumps(notice.to_json()))) == notice


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"id": "n", "machine": "m", "group": "g", "window": {"start": "x"}, "issued": 1},
        {
            "id": "n",
            "machine": "m",
            "group": "g",
            "window": {"start": 1},
            "issued": 1,
            "answer": {"verdict": "maybe", "reason": "r", "who": "w", "at": 1},
        },
    ],
)
def test_notice_from_json_refuses_what_to_json_did_not_write(doc: dict[str, Any]) -> None:
    with pytest.raises((KeyError, TypeError, ValueError)):
        notice_from_json(doc)


def test_mesos_statuses() -> None:
    answered = held("n1", "b", W, answer=ANSWER)
    silent = held("n1", "a", W)
    elsewhere = held("n2", "c", W)
    assert mesos_statuses([answered, silent, elsewhere], ("n1", None)) == [
        {
            "status": "UNKNOWN",
            "framework_id": {"value": "a"},
            "timestamp": {"nanoseconds": 500 * 10**9},
        },
        {
            "status": "DECLINE",
            "framework_id": {"value": "b"},
            "timestamp": {"nanoseconds": 900 * 10**9},
        },
    ]
    assert mesos_statuses([answered], ("n3", "10.0.0.3")) == []
