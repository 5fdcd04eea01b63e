"""``nodeagent master notices``: its command lines (the listing, and accept|decline ID), the
refusals of a command line that mixes them, the time ``--expected-completion`` takes, its
lines and table, and a follow against a scripted master whose streams break and send a gap.
Against a real master: tests/integration/test_notices_clients.py."""

from __future__ import annotations

import json
import re
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from nodeagent._durations import parse_time
from nodeagent.cli import _events, _notices
from nodeagent.cli._draw import draw
from nodeagent.cli._errors import Unauthorized, UsageError
from nodeagent.cli._fast import parse
from nodeagent.cli._http import Target
from tests.nodeagent.cli.test_transport import chunked, reply, serving

NOW = 1795850102.0  # 2026-11-28T07:15:02Z


def notice(notice_id: str, answer: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": notice_id,
        "machine": "n1.test",
        "group": "web/prod/front",
        "window": {"start": NOW + 4800, "duration": 3600.0},
        "claims": [{"slot": "slot1_1@n1.test", "job_id": "j1", "promise_end": NOW + 60}] * 2,
        "issued": NOW - 60,
        "rescinded": None,
        "answer": answer,
    }


DECLINE = {
    "verdict": "decline",
    "reason": "month-end run\nFAKE",
    "expected_completion": NOW + 3600,
    "who": "web-team",
    "at": NOW - 300,
}

COMMON: dict[str, Any] = {"json_output": False, "host": None, "token": None, "socket_path": None}


def test_the_command_lines_are_plain() -> None:
    listing = parse(["master", "notices", "--group", "a/b/c,d/e/f", "-f", "--json"], {})
    assert listing is not None
    assert listing.params == {
        "action": None,
        "group": ["a/b/c,d/e/f"],
        "machine": None,
        "follow": True,
        "reason": None,
        "expected_completion": None,
        **COMMON,
        "json_output": True,
    }
    argv = ["master", "notices", "decline", "n-1", "--reason", "month-end",
            "--expected-completion", "+2h"]  # fmt: skip
    answer = parse(argv, {})
    assert answer is not None
    assert answer.params["action"] == ["decline", "n-1"]
    assert (answer.params["reason"], answer.params["expected_completion"]) == ("month-end", "+2h")


@pytest.mark.parametrize(
    ("words", "options", "message"),
    [
        (["approve", "n-1"], {"reason": "x"}, "unexpected 'approve n-1'"),
        (["accept"], {"reason": "x"}, "unexpected 'accept'"),
        (["accept", "n-1", "n-2"], {"reason": "x"}, "unexpected"),
        (["accept", ".."], {"reason": "x"}, "no notice's id"),
        (["accept", "n-1"], {}, "accept needs --reason TEXT"),
        (["decline", "n-1"], {"reason": "x", "follow": True}, "are the listing's"),
        (["decline", "n-1"], {"reason": "x", "group": ["a/b/c"]}, "are the listing's"),
        ([], {"reason": "x"}, "answer a notice"),
        ([], {"expected_completion": "+1h"}, "answer a notice"),
    ],
)
def test_a_command_line_that_mixes_the_two_forms_is_refused(
    words: list[str], options: dict[str, Any], message: str
) -> None:
    given: dict[str, Any] = {
        "action": words,
        "group": None,
        "machine": None,
        "follow": False,
        "reason": None,
        "expected_completion": None,
        **COMMON,
        **options,
    }
    with pytest.raises(UsageError, match=message) as raised:
        _notices.notices(**given)
    assert (raised.value.code, raised.value.exit_status) == ("cli.usage", 2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-28T15:00:00Z", 1795878000.0),
        ("2026-11-28T16:00+01:00", 1795878000.0),
        ("2026-11-28 15:00", 1795878000.0),  # no zone: UTC
        ("+2h", NOW + 7200),
        ("+3600", NOW + 3600),
        ("1795860000", 1795860000.0),
        (" 1795860000.5 ", 1795860000.5),
    ],
)
def test_a_moment_as_written(text: str, expected: float) -> None:
    assert parse_time(text, NOW) == expected


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("3600", "3600 read as seconds since the epoch is 1970-01-01T01:00:00Z, before 2000; "
                 "a duration? +3600 is 2026-11-28T08:15:02Z, in 1 h"),
        ("1795850102000", "as milliseconds it is 2026-11-28T07:15:02Z: write 1795850102"),
        ("1795850102000000", "as microseconds it is 2026-11-28T07:15:02Z"),
        ("1795850102000000000", "as nanoseconds it is 2026-11-28T07:15:02Z: write 1795850102"),
        ("99999999999999999999999", "no plausible moment"),
        ("tomorrow", "'tomorrow' is not a time: write ISO 8601"),
        ("nan", "is not a time"),
        ("+soon", "after +, a duration"),
    ],
)  # fmt: skip
def test_a_moment_in_the_wrong_unit_says_what_was_meant(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        parse_time(text, NOW)


def test_a_bad_expected_completion_is_a_usage_error_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    with pytest.raises(UsageError, match="as nanoseconds it is") as raised:
        _notices.notices(
            action=["accept", "n-1"],
            group=None,
            machine=None,
            follow=False,
            reason="fine",
            expected_completion="1795850102000000000",
            json_output=False,
            host=None,
            token=None,
            socket_path=str(tmp_path / "none.sock"),
        )
    assert (raised.value.code, raised.value.exit_status) == ("cli.bad_time", 2)


def test_the_table() -> None:
    table = _notices.notices_table([notice("n-1"), notice("n-2", DECLINE)], NOW)
    text = draw(table, 200)
    assert text is not None
    lines = text.splitlines()
    assert lines[0].split() == ["ID", "MACHINE", "GROUP", "WINDOW", "CLAIMS", "ANSWER"]
    assert "2026-11-28T08:35:02Z (in 1 h 20 min) for 1 h  2       not answered" in lines[1]
    assert lines[2].endswith(
        "decline by web-team 5 min ago: month-end run\\nFAKE (expects to be gone by "
        "2026-11-28T08:15:02Z (in 1 h))"
    )


@pytest.mark.parametrize(
    ("kind", "doc", "line"),
    [
        ("issued", notice("n-1"), "2026-11-28T07:15:02Z  issued     n-1  n1.test  web/prod/front"
         "  window 2026-11-28T08:35:02Z (in 1 h 20 min) for 1 h, 2 claims, not answered"),
        ("answered", notice("n-1", DECLINE), "2026-11-28T07:15:02Z  answered   n-1  n1.test  "
         "web/prod/front  decline by web-team 5 min ago: month-end run\\nFAKE (expects to be "
         "gone by 2026-11-28T08:15:02Z (in 1 h))"),
        ("rescinded", notice("n-1"), "2026-11-28T07:15:02Z  rescinded  n-1  n1.test  "
         "web/prod/front"),
    ],
)  # fmt: skip
def test_a_change_as_a_line(kind: str, doc: dict[str, Any], line: str) -> None:
    assert _notices.change_line(kind, doc, NOW, NOW) == line


def event(event_id: int, kind: str, facts: dict[str, Any]) -> bytes:
    return json.dumps({"id": event_id, "time": NOW, "type": kind, "facts": facts}).encode() + b"\n"


def test_following_lists_once_resumes_and_lists_again_after_a_gap(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A scripted master: the first stream, then the listing made once it is open; a
    second stream (after the last event read) that sends a gap, then the listing again; a
    refusal ends it."""
    head = {"Transfer-Encoding": "chunked", "Content-Type": "application/x-ndjson"}

    def listing(*notices: dict[str, Any]) -> bytes:
        body = json.dumps({"notices": list(notices)}).encode()
        return reply("200 OK", {"Content-Type": "application/json",
                                "Content-Length": str(len(body))}, body)  # fmt: skip

    gap = {"type": "gap", "after": 13, "resume": 20, "missed": 7}
    answers = [
        reply("200 OK", {**head, "X-Nodeagent-Last-Event-Id": "10"}, chunked(
            event(11, "notice.issued", {"notice": notice("n-1")}),  # listed already
            event(12, "notice.issued", {"notice": notice("n-2")}),
            event(13, "notice.answered", {"id": "n-1", "answer": DECLINE}))[:-5]),
        listing(notice("n-1")),
        reply("200 OK", head, chunked(
            event(13, "notice.answered", {"id": "n-1", "answer": DECLINE}),  # again
            event(14, "notice.rescinded", {"id": "n-2"}),
            json.dumps(gap).encode() + b"\n")[:-5]),
        listing(notice("n-1", DECLINE), notice("n-3")),
        reply("401 Unauthorized", {"Content-Type": "application/json", "Content-Length": "61"},
              b'{"error":{"code":"auth.unauthenticated","message":"expired"}}'),
    ]  # fmt: skip

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(answers.pop(0))

    with serving(respond, unix=tmp_path / "master.sock") as (server, endpoint):
        target = Target(unix=Path(str(endpoint.unix)), peer="master")
        follower = _notices._NoticeFollower("web/prod/front", "", json_output=False)
        wanted = {"types": "notice.*", "machines": "", "groups": "web/prod/front"}
        with pytest.raises(Unauthorized, match="expired"):
            _events._follow(target, follower, last=0, wanted=wanted)
    asked = [request.split(b"\r\n")[0].decode() for request in server.requests]
    stream = "GET /v1/events?format=jsonl&follow=true&{}&type=notice.%2A&group=web%2Fprod%2Ffront"
    listing_asked = "GET /v1/notices?group=web%2Fprod%2Ffront HTTP/1.1"
    assert asked == [
        stream.format("last=0") + " HTTP/1.1",
        listing_asked,
        stream.format("since=13") + " HTTP/1.1",
        listing_asked,
        stream.format("since=20") + " HTTP/1.1",
    ]
    out, err = capsys.readouterr()
    assert [tuple(line.split()[1:3]) for line in out.splitlines()] == [
        ("listed", "n-1"),
        ("issued", "n-2"),
        ("answered", "n-1"),
        ("rescinded", "n-2"),
        ("listed", "n-3"),
    ]
    assert "warning: 7 events missed" in err
    assert "listing the notices again" in err


def test_following_with_json_prints_each_change_as_a_document(
    capsys: pytest.CaptureFixture[str],
) -> None:
    follower = _notices._NoticeFollower("", "", json_output=True)
    follower.feed.listed([notice("n-1")])
    follower.take(event(5, "notice.answered", {"id": "n-1", "answer": DECLINE}), Target())
    (line,) = capsys.readouterr().out.splitlines()
    change = json.loads(line)
    assert (change["kind"], change["event_id"], change["time"]) == ("answered", 5, NOW)
    assert change["notice"] == notice("n-1", DECLINE)


def test_a_listing_that_fails_is_made_again_on_the_next_connection(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    head = {"Transfer-Encoding": "chunked", "Content-Type": "application/x-ndjson"}
    failed = b'{"error":{"code":"store.error","message":"busy"}}'
    listed = json.dumps({"notices": [notice("n-1")]}).encode()
    answers = [
        reply("200 OK", {**head, "X-Nodeagent-Last-Event-Id": "10"}, chunked()[:-5]),
        reply("503 Service Unavailable", {"Content-Type": "application/json",
                                          "Content-Length": str(len(failed))}, failed),
        reply("200 OK", head, chunked(
            event(11, "notice.answered", {"id": "n-1", "answer": DECLINE}))[:-5]),
        reply("200 OK", {"Content-Type": "application/json",
                         "Content-Length": str(len(listed))}, listed),
        reply("401 Unauthorized", {"Content-Type": "application/json", "Content-Length": "61"},
              b'{"error":{"code":"auth.unauthenticated","message":"expired"}}'),
    ]  # fmt: skip

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(answers.pop(0))

    with serving(respond, unix=tmp_path / "master.sock") as (server, endpoint):
        target = Target(unix=Path(str(endpoint.unix)), peer="master")
        follower = _notices._NoticeFollower("", "", json_output=False)
        wanted = {"types": "notice.*", "machines": "", "groups": ""}
        with pytest.raises(Unauthorized, match="expired"):
            _events._follow(target, follower, last=0, wanted=wanted)
    asked = [
        request.split(b"\r\n")[0].decode().split()[1].split("?")[0] for request in server.requests
    ]
    assert asked == ["/v1/events", "/v1/notices", "/v1/events", "/v1/notices",
                     "/v1/events"]  # fmt: skip
    out, err = capsys.readouterr()
    assert [tuple(line.split()[1:3]) for line in out.splitlines()] == [
        ("listed", "n-1"),
        ("answered", "n-1"),
    ]
    assert "busy" in err
