"""Table tests of the notices' pure model (nodeagent.master._notices)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.master._notices import (
    Answer,
    BadAnswer,
    Notice,
    NoticeClaim,
    NoticeWindow,
    Verdict,
    check_answer,
    claims_changed,
    claims_of_slots,
    group_claimed,
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
BAD_EC = "notice.bad_expected_completion"
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
    assert result.refreshed == (result.held[old.id],)  # saved again, no event


def test_a_kept_notice_is_saved_again_only_when_its_claims_changed() -> None:
    old = held("n1", "a", W)
    moved = (replace(A[0], promise_end=2_001.0),)  # the same job read from a newer ad
    same = reconcile_notices({old.id: old}, {"n1": W}, {"n1": {"a": moved}}, now=NOW)
    assert same.refreshed == ()
    assert same.held[old.id].claims == moved  # served the newest
    cut = (replace(A[0], promise_end=6_000.0, evict_at=5_000.0, cut_by=1_000.0),)
    verdict = reconcile_notices({old.id: old}, {"n1": W}, {"n1": {"a": cut}}, now=NOW)
    assert [n.claims for n in verdict.refreshed] == [cut]


def claim(kept: bool | None = None, *, job: str = "j1", **times: Any) -> NoticeClaim:
    cut = None if kept is None else 0.0 if kept else 1_000.0
    made = NoticeClaim(slot="s1", job_id=job, promise_end=6_000.0, evict_at=5_000.0, cut_by=cut)
    return replace(made, **times)


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        ((claim(True),), (claim(True),), False),
        ((claim(True),), (claim(True, promise_end=6_001.0, evict_at=5_900.0),), False),
        ((claim(False),), (claim(False, cut_by=1_001.0, promise_end=6_001.0),), False),
        ((claim(False),), (claim(False, evict_at=5_000.0 + 2.0),), False),
        ((claim(False),), (claim(False, evict_at=5_000.0 + 3.0),), True),
        ((claim(False),), (claim(False, cut_by=1_003.0),), True),
        ((claim(True),), (claim(False),), True),
        ((claim(False),), (claim(True),), True),
        ((claim(None),), (claim(True),), True),
        ((claim(True),), (claim(None),), True),
        ((claim(None),), (claim(None, promise_end=9_000.0),), False),
        ((claim(True),), (claim(True, job="j2"),), True),
        ((claim(True),), (claim(True), replace(claim(True), slot="s2")), True),
        ((claim(True), replace(claim(True), slot="s2")), (claim(True),), True),
        ((), (), False),
    ],
    ids=[
        "the same",
        "a kept claim's times moved",
        "a cut claim's times moved by a second",
        "a cut claim's eviction moved by the slack",
        "a cut claim's eviction moved past the slack",
        "a cut claim's cut moved past the slack",
        "kept, then cut",
        "cut, then kept",
        "a verdict known",
        "a verdict no longer known",
        "no verdict, its promise moved",
        "another job in the slot",
        "a claim came",
        "a claim went",
        "none",
    ],
)
def test_claims_changed(
    before: tuple[NoticeClaim, ...], after: tuple[NoticeClaim, ...], changed: bool
) -> None:
    assert claims_changed(before, after) is changed


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


#: A window of the schedule: now is 2027-01-15, it starts a day later, for an hour.
AT = 1_800_000_000.0
WINDOW = NoticeWindow(start=AT + 86_400, duration=3_600.0)
OPEN = NoticeWindow(start=AT + 86_400)


@pytest.mark.parametrize(
    ("body", "window", "code", "said"),
    [
        ([], WINDOW, "notice.bad_body", "JSON object"),
        ({"reason": "x", "other": 1}, WINDOW, "notice.bad_body", "other"),
        ({}, WINDOW, "notice.bad_reason", "required"),
        ({"reason": ""}, WINDOW, "notice.bad_reason", "required"),
        ({"reason": 3}, WINDOW, "notice.bad_reason", "required"),
        ({"reason": "a\nb"}, WINDOW, "notice.bad_reason", "control"),
        ({"reason": "x" * 1025}, WINDOW, "notice.bad_reason", "1024"),
        ({"reason": "x", "expected_completion": "soon"}, WINDOW, BAD_EC, "a number"),
        ({"reason": "x", "expected_completion": True}, WINDOW, BAD_EC, "a number"),
        ({"reason": "x", "expected_completion": math.inf}, WINDOW, BAD_EC, "finite"),
        ({"reason": "x", "expected_completion": math.nan}, WINDOW, BAD_EC, "finite"),
        # after the window ends: no use to anyone
        (
            {"reason": "x", "expected_completion": AT + 86_400 + 3_601},
            WINDOW,
            BAD_EC,
            "after the window ends (2027-01-16T09:00:00Z)",
        ),
        # a unit mistake, with a bounded window or an open-ended one
        (
            {"reason": "x", "expected_completion": (AT + 3_600) * 1e3},
            WINDOW,
            BAD_EC,
            "— milliseconds? (2027-01-15T09:00:00Z)",
        ),
        (
            {"reason": "x", "expected_completion": int((AT + 3_600) * 1e9)},
            OPEN,
            BAD_EC,
            "— nanoseconds? (2027-01-15T09:00:00Z)",
        ),
        (
            {"reason": "x", "expected_completion": (AT + 3_600) * 1e6},
            OPEN,
            BAD_EC,
            "1800003600000000.0 reads as year 57040642 — microseconds? (2027-01-15T09:00:00Z)",
        ),
        # nonsense in any unit
        ({"reason": "x", "expected_completion": 1e30}, OPEN, BAD_EC, "more than 10 years ahead"),
    ],
)
def test_check_answer_refuses(body: object, window: NoticeWindow, code: str, said: str) -> None:
    with pytest.raises(BadAnswer) as refused:
        check_answer(body, window=window, now=AT)
    assert refused.value.code == code
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("body", "window", "expected"),
    [
        ({"reason": "x" * 1024}, WINDOW, ("x" * 1024, None)),
        ({"reason": "ok", "expected_completion": AT + 60}, WINDOW, ("ok", AT + 60)),
        ({"reason": "ok", "expected_completion": None}, WINDOW, ("ok", None)),
        # at the window's end is still of use
        ({"reason": "ok", "expected_completion": AT + 90_000}, WINDOW, ("ok", AT + 90_000)),
        # an open-ended window sets no bound, short of a unit mistake
        (
            {"reason": "ok", "expected_completion": AT + 9 * 365 * 86_400},
            OPEN,
            ("ok", AT + 9 * 365 * 86_400),
        ),
        # an expected completion already past is the owner's word too
        ({"reason": "ok", "expected_completion": AT - 60}, WINDOW, ("ok", AT - 60)),
    ],
)
def test_check_answer_accepts(
    body: object, window: NoticeWindow, expected: tuple[str, float | None]
) -> None:
    assert check_answer(body, window=window, now=AT) == expected


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
    ("slots", "claimed"),
    [
        ([{"Name": "slot1_1@n1", "JobGroup": "a"}], True),
        ([{"Name": "slot1@n1"}, "junk", {"Name": "slot1_2@n1", "JobGroup": "b"}], True),
        ([{"Name": "slot1_1@n1", "JobGroup": ""}], False),
        ([{"Name": "slot1_1@n1", "JobGroup": 7}], False),
        ([{"Name": 1, "JobGroup": "a"}], False),
        ([{"JobGroup": "a"}], False),
        ([["JobGroup", "a"]], False),
        ([], False),
        ("JobGroup", False),
        (None, False),
    ],
)
def test_a_group_claimed_is_what_claims_of_slots_finds(slots: Any, claimed: bool) -> None:
    """A node's entry says whether its slot ads hold a group's claim, so that the notices
    read no slot ads back for a node without one: the answer is claims_of_slots' own."""
    assert group_claimed(slots) is claimed
    assert bool(claims_of_slots(slots, now=NOW)) is claimed


def test_claims_of_slots_take_the_plans_verdicts() -> None:
    slots = [
        {"Name": "slot1_1@n1", "JobGroup": "a", "JobId": "j1", "RetirementTimeRemaining": 60},
        {"Name": "slot1_2@n1", "JobGroup": "a", "JobId": "j2", "RetirementTimeRemaining": 9000},
        {"Name": "slot1_3@n1", "JobGroup": "b", "RetirementTimeRemaining": 30},
    ]
    planned = [
        # the plan's blockers: latest first, with what the claims carry and more
        {"slot": "slot1_2@n1", "promise_end": 10_010, "evict_at": 5_000, "cut_by": 5_010},
        {"slot": "slot1_1@n1", "promise_end": 1_070, "evict_at": 1_060, "cut_by": 0, "run": 5},
    ]
    assert claims_of_slots(slots, now=NOW, planned=planned) == {
        "a": (
            NoticeClaim(
                slot="slot1_1@n1", job_id="j1", promise_end=1_070, evict_at=1_060, cut_by=0
            ),
            NoticeClaim(
                slot="slot1_2@n1", job_id="j2", promise_end=10_010, evict_at=5_000, cut_by=5_010
            ),
        ),
        # a slot the plan does not list (not active): its promise from the ad, no verdict
        "b": (NoticeClaim(slot="slot1_3@n1", promise_end=NOW + 30),),
    }
    (kept, cut) = claims_of_slots(slots, now=NOW, planned=planned)["a"]
    assert (kept.kept, cut.kept) == (True, False)
    assert NoticeClaim(slot="s").kept is None


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
            claims=A + B + (NoticeClaim(slot="s"), claim(False), replace(claim(True), slot="s2")),
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


def test_a_notice_written_before_claims_had_verdicts_reads_without_them() -> None:
    doc = held("n1", "a", W).to_json()
    for c in doc["claims"]:
        del c["evict_at"], c["cut_by"]
    assert notice_from_json(doc) == held("n1", "a", W)


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


_MACHINES = ("n1", "n2", "n3", "n4")
_WINDOWS = st.dictionaries(st.sampled_from(_MACHINES), st.sampled_from((W, MOVED)))
_CLAIMS = st.dictionaries(
    st.sampled_from(_MACHINES),
    st.dictionaries(st.sampled_from(("a", "b", "c")), st.sampled_from((A, B, ()))),
)


@settings(max_examples=200, deadline=None)
@given(
    before=st.tuples(_WINDOWS, _CLAIMS),
    after=st.tuples(_WINDOWS, _CLAIMS),
    extra=st.sets(st.sampled_from(_MACHINES)),
)
def test_reconciling_the_machines_that_changed_decides_what_reconciling_all_does(
    before: tuple[dict[str, NoticeWindow], dict[str, dict[str, Any]]],
    after: tuple[dict[str, NoticeWindow], dict[str, dict[str, Any]]],
    extra: set[str],
) -> None:
    """Notices reconciled once with the pool as it was; then some machines' windows and
    claims change: reconciling those machines (and any others, ``extra``) decides exactly
    what reconciling every machine does."""
    first = reconcile_notices({}, before[0], before[1], now=NOW)
    windows, claims = after
    changed = {
        m
        for m in _MACHINES
        if before[0].get(m) != windows.get(m) or before[1].get(m) != claims.get(m)
    }
    whole = reconcile_notices(first.held, windows, claims, now=NOW + 1)
    part = reconcile_notices(first.held, windows, claims, now=NOW + 1, machines=changed | extra)
    assert (part.issued, part.rescinded, part.refreshed) == (
        whole.issued,
        whole.rescinded,
        whole.refreshed,
    )
    assert part.held == whole.held
