"""The notices as a follower sees them (:class:`nodeagent._notice_feed.NoticeFeed`): a
listing, then the ``notice.*`` events, each change once, none missed; table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent._notice_feed import NoticeFeed


def notice(
    notice_id: str,
    *,
    group: str = "web/prod/front",
    machine: str = "n1.test",
    answer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": notice_id,
        "machine": machine,
        "group": group,
        "window": {"start": 1000.0, "duration": None},
        "claims": [],
        "issued": 1.0,
        "rescinded": None,
        "answer": answer,
    }


def answer(at: float, verdict: str = "accept") -> dict[str, Any]:
    return {"verdict": verdict, "reason": "r", "expected_completion": None, "who": "o", "at": at}


def issued(n: dict[str, Any]) -> dict[str, Any]:
    return {"id": 1, "time": 5.0, "type": "notice.issued", "facts": {"notice": n}}


def rescinded(notice_id: str, time: float = 7.0) -> dict[str, Any]:
    return {"id": 2, "time": time, "type": "notice.rescinded", "facts": {"id": notice_id}}


def answered(notice_id: str, a: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": 3,
        "time": 6.0,
        "type": "notice.answered",
        "facts": {"id": notice_id, "answer": a},
    }


CASES: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[tuple[str, str]]]] = [
    ("issued after the listing", [notice("a")], [issued(notice("b"))], [("issued", "b")]),
    ("issued already listed", [notice("a")], [issued(notice("a"))], []),
    ("issued of another group", [], [issued(notice("b", group="x/y/z"))], []),
    (
        "issued of a machine matched by its first label only",
        [],
        [issued(notice("b", machine="n1"))],
        [],
    ),
    ("answered", [notice("a")], [answered("a", answer(10))], [("answered", "a")]),
    (
        "answered, already in the listing",
        [notice("a", answer=answer(10))],
        [answered("a", answer(10))],
        [],
    ),
    (
        "an older answer after a newer listed",
        [notice("a", answer=answer(10))],
        [answered("a", answer(9))],
        [],
    ),
    (
        "answered twice",
        [notice("a")],
        [answered("a", answer(10)), answered("a", answer(11))],
        [("answered", "a"), ("answered", "a")],
    ),
    ("answered, never known", [], [answered("a", answer(10))], []),
    ("rescinded", [notice("a")], [rescinded("a")], [("rescinded", "a")]),
    ("rescinded, never known", [], [rescinded("a")], []),
    ("rescinded twice", [notice("a")], [rescinded("a"), rescinded("a")], [("rescinded", "a")]),
    (
        "issued, answered, rescinded",
        [],
        [issued(notice("b")), answered("b", answer(10)), rescinded("b")],
        [("issued", "b"), ("answered", "b"), ("rescinded", "b")],
    ),
    ("another event", [notice("a")], [{"id": 9, "type": "drain.started", "facts": {}}], []),
]


@pytest.mark.parametrize(
    ("listing", "events", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_events_after_a_listing(
    listing: list[dict[str, Any]], events: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    feed = NoticeFeed(groups=["web/prod/front"], machines=["n1.test"])
    assert [kind for kind, _ in feed.listed(listing)] == ["listed"] * len(listing)
    changes = [c for e in events if (c := feed.event(e)) is not None]
    assert [(kind, n["id"]) for kind, n in changes] == expected


def test_a_change_carries_the_notice_after_it() -> None:
    feed = NoticeFeed()
    feed.listed([notice("a")])
    kind, after = feed.event(answered("a", answer(10, "decline"))) or ("", {})
    assert (kind, after["answer"]["verdict"]) == ("answered", "decline")
    kind, gone = feed.event(rescinded("a", time=42.0)) or ("", {})
    assert (kind, gone["rescinded"], gone["answer"]["verdict"]) == ("rescinded", 42.0, "decline")
    assert feed.known == {}


def test_a_listing_again_says_what_differs() -> None:
    feed = NoticeFeed()
    feed.listed([notice("a"), notice("b"), notice("c")])
    changes = feed.listed([notice("a"), notice("c", answer=answer(3)), notice("d")])
    assert [(kind, n["id"], n["rescinded"]) for kind, n in changes] == [
        ("answered", "c", None),
        ("listed", "d", None),
        ("rescinded", "b", None),
    ]
    assert sorted(feed.known) == ["a", "c", "d"]
