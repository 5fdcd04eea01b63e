"""The event log, its filters and its wire forms, as tables (nodeagent.master._events)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from nodeagent.master._events import (
    Draft,
    Event,
    EventFilter,
    EventLog,
    Gap,
    member_key,
)
from slots import InvalidRequest

NOW = 1_800_000_000.0


def draft(
    kind: str = "drain.started", *, machine: str = "n1.example.org", group: str = ""
) -> Draft:
    return Draft(
        type=kind,
        text=f"{machine}: {kind}",
        machines=(machine,),
        groups=(group,) if group else (),
        facts={"node": machine},
    )


def written(log: EventLog, *drafts: Draft) -> list[Event]:
    events = log.assign(drafts, NOW)
    log.commit(events)
    return events


def test_ids_follow_each_other_and_nothing_is_kept_before_commit() -> None:
    log = EventLog(keep=100)
    made = log.assign([draft(), draft()], NOW)
    assert [e.id for e in made] == [1, 2]
    assert len(log) == 0
    assert log.last_id == 0
    assert [e.id for e in log.assign([draft()], NOW)] == [1]
    log.commit(made)
    assert log.last_id == 2
    assert log.oldest_id == 1
    with pytest.raises(ValueError, match="not the next one"):
        log.commit(made)


@pytest.mark.parametrize(
    ("keep", "written_", "since", "gap", "ids"),
    [
        (10, 5, 0, None, [1, 2, 3, 4, 5]),
        (10, 5, 3, None, [4, 5]),
        (10, 5, 5, None, []),
        (10, 5, 9, None, []),  # ahead of the log (another pool's id): nothing yet
        (3, 5, 0, (0, 2), [3, 4, 5]),  # 1 and 2 are gone
        (3, 5, 1, (1, 2), [3, 4, 5]),
        (3, 5, 2, None, [3, 4, 5]),
        (3, 25, 0, (0, 22), [23, 24, 25]),  # the dead prefix was cut on the way
    ],
)
def test_after_says_what_was_missed(
    keep: int, written_: int, since: int, gap: tuple[int, int] | None, ids: list[int]
) -> None:
    log = EventLog(keep=keep)
    for _ in range(written_):
        written(log, draft())
    found_gap, events = log.after(since)
    assert [e.id for e in events] == ids
    assert (None if found_gap is None else (found_gap.after, found_gap.resume)) == gap
    if found_gap is not None:
        assert found_gap.missed == found_gap.resume - since


def test_members_push_out_the_oldest_beyond_keep() -> None:
    log = EventLog(keep=3)
    written(log, draft(), draft())
    made = log.assign([draft(), draft()], NOW)
    put, gone = log.members(made)
    assert sorted(put) == [member_key(3), member_key(4)]
    assert gone == (member_key(1),)
    assert member_key(12) == "0000000000000012"
    assert member_key(9) < member_key(10)


def test_load_takes_the_last_kept_and_goes_on_after_them() -> None:
    log = EventLog(keep=100)
    stored = {member_key(e.id): e.to_json() for e in written(log, draft(), draft(), draft())}
    again = EventLog(keep=2)
    again.load(stored)
    assert [e.id for e in again.after(0)[1]] == [2, 3]
    assert again.next_id == 4
    with pytest.raises(ValueError, match="not one"):
        again.load({"x": {"type": "drain.started"}})


def test_extend_takes_the_leaders_events_in_order_and_stops_at_a_hole() -> None:
    leader = EventLog()
    events = written(leader, draft(), draft(), draft(), draft())
    follower = EventLog()
    follower.load({member_key(1): events[0].to_json()})
    taken = follower.extend([events[3].to_json(), events[1].to_json()])  # 3 not seen yet
    assert [e.id for e in taken] == [2]
    assert [e.id for e in follower.extend(e.to_json() for e in events)] == [3, 4]
    assert follower.extend([events[0].to_json()]) == []  # known already


@pytest.mark.parametrize(
    ("query", "event", "matches"),
    [
        ({}, draft(), True),
        ({"types": "drain.*"}, draft("drain.completed"), True),
        ({"types": "drain.*,mode.*"}, draft("mode.changed"), True),
        ({"types": "drain.*"}, draft("node.lost"), False),
        ({"types": "node.lost"}, draft("node.lost"), True),
        ({"types": "*"}, draft("leader.elected"), True),
        ({"machines": "N1.example.org"}, draft(), True),
        ({"machines": "n1"}, draft(), True),  # the short name a hurried admin types
        ({"machines": "n1.other"}, draft(), False),
        ({"machines": "n2,n1"}, draft(), True),
        ({"groups": "www/prod/web"}, draft(group="www/prod/web"), True),
        ({"groups": "www/prod/web"}, draft(group="www/prod/api"), False),
        ({"types": "drain.*", "machines": "n2"}, draft(), False),
    ],
)
@pytest.mark.parametrize("others", [0, 5000], ids=["one machine", "and 5000 others"])
def test_filters(query: dict[str, str], event: Draft, matches: bool, others: int) -> None:
    """The same answers for an event of one machine and for one of thousands (a schedule's
    ``mode.changed``), matched against the set of its names."""
    if others:
        extra = tuple(f"m{i}.example.org" for i in range(others))
        event = dataclasses.replace(event, machines=(*extra[:2500], *event.machines, *extra[2500:]))
    log = EventLog()
    (made,) = log.assign([event], NOW)
    wanted = EventFilter.parse(**query)
    assert wanted.matches(made) is matches
    assert wanted.matches(made) is matches  # its names made once, then read
    if others and wanted.machines:
        assert made.names() is made.names()
        assert {"m7.example.org", "m7"} <= made.names()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"types": "drains.*"}, "no event type"),
        ({"types": "drain"}, "no event type 'drain': did you mean drain.\\*\\?"),
        ({"types": "drain.begun"}, "no event type 'drain.begun': did you mean drain.\\*\\?"),
        ({"types": "drain.commited"}, "did you mean drain.committed\\?"),
        ({"types": "drain.started;rm"}, "not an event type"),
        ({"types": "Drain.*"}, "not an event type"),
        ({"groups": "web"}, "not ROLE/ENV/NAME"),
    ],
)
def test_bad_filters_are_refused(query: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        EventFilter.parse(**query)


def test_wire_forms() -> None:
    (event,) = EventLog().assign([draft("drain.completed", group="a/b/c")], NOW)
    frame = event.sse().decode()
    assert frame.startswith("id: 1\nevent: drain.completed\ndata: {")
    assert frame.endswith("}\n\n")
    assert frame.count("\n") == 4
    value = json.loads(event.jsonl())
    assert value == {
        "id": 1,
        "time": NOW,
        "type": "drain.completed",
        "machines": ["n1.example.org"],
        "groups": ["a/b/c"],
        "text": "n1.example.org: drain.completed",
        "facts": {"node": "n1.example.org"},
    }
    assert Event.from_json(value).data == event.data
    gap = Gap(after=4, resume=10)
    assert gap.sse().startswith(b"id: 10\nevent: gap\n")
    assert json.loads(gap.jsonl())["missed"] == 6


def test_last_finds_the_latest_matching() -> None:
    log = EventLog()
    written(log, draft("mode.changed"), draft(), draft("mode.changed"), draft())
    assert [e.id for e in log.last(1, EventFilter.parse(types="mode.*"))] == [3]
    assert [e.id for e in log.last(10, EventFilter())] == [1, 2, 3, 4]
