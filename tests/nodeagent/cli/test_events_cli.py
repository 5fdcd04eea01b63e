"""``nodeagent master events``: its command line, its lines, and what it does with each
line of the stream (events, heartbeats, gaps, an event sent again). Against a real
master: tests/integration/test_events_clients.py."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from nodeagent.cli import _events
from nodeagent.cli._errors import AgentFailed, Unauthorized
from nodeagent.cli._fast import parse
from nodeagent.cli._http import Target
from tests.nodeagent.cli.test_transport import chunked, reply, serving

EVENT = {
    "id": 42,
    "time": 1795821114.9,
    "type": "drain.committed",
    "machines": ["node1.example.org"],
    "text": "node1.example.org: graceful drain 7 committed",
}
MASTER = Target(unix=None, host="m1.test", port=9622, peer="master")


def test_the_command_line_is_plain() -> None:
    argv = ["master", "events", "-f", "--type", "drain.*", "--type", "mode.changed,node.*",
            "--machine", "n1", "--since", "7", "--json"]  # fmt: skip
    plain = parse(argv, {})
    assert plain is not None
    assert plain.params == {
        "follow": True,
        "since": 7,
        "last": None,
        "types": ["drain.*", "mode.changed,node.*"],
        "machines": ["n1"],
        "groups": None,
        "json_output": True,
        "host": None,
        "token": None,
        "socket_path": None,
    }
    assert parse(["master", "events", "--last", "-1"], {}) is None  # left to typer: exit 2


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (EVENT, "2026-11-27T23:11:54Z      42  drain.committed          node1.example.org: "
         "graceful drain 7 committed"),
        ({**EVENT, "type": "operation.batch_skipped", "id": 1234567},
         "2026-11-27T23:11:54Z  1234567  operation.batch_skipped  node1.example.org: "
         "graceful drain 7 committed"),
        ({**EVENT, "text": "n1\nFAKE drain.ended\u202e"},
         "2026-11-27T23:11:54Z      42  drain.committed          n1\\nFAKE drain.ended\\u202e"),
        ({"id": 3}, "-       3                           "),
    ],
    ids=["an event", "the longest type", "controls escaped", "fields missing"],
)  # fmt: skip
def test_an_event_as_a_line(event: dict[str, Any], line: str) -> None:
    assert _events.event_line(event) == line


def test_the_query() -> None:
    assert _events._path(
        follow=True, since=None, last=20, types="drain.*,mode.*", machines="", groups="a/b/c"
    ) == ("/v1/events?format=jsonl&follow=true&last=20&type=drain.%2A%2Cmode.%2A&group=a%2Fb%2Fc")
    assert (
        _events._path(follow=False, since=5, last=20, types="", machines="n1", groups="")
        == "/v1/events?format=jsonl&follow=false&since=5&machine=n1"
    )
    assert _events._joined(["drain.*", " mode.*, ", "node.lost,,"]) == "drain.*,mode.*,node.lost"
    assert _events._joined(None) == ""


def test_the_masters_asked_in_turn() -> None:
    masters = (("https", "m1.test", 9622), ("https", "m2.test", 9622), ("http", "m3.test", 80))
    first = Target(scheme="https", host="m1.test", port=9622, token="t", masters=masters)
    found = _events._targets(first)
    assert [t.describe() for t in found] == [
        "https://m1.test:9622",
        "https://m2.test:9622",
        "http://m3.test:80",
    ]
    assert {t.token for t in found} == {"t"}


def lines(*items: Any) -> list[bytes]:
    return [json.dumps(item).encode() if not isinstance(item, bytes) else item for item in items]


@pytest.mark.parametrize("json_output", [False, True])
def test_each_line_of_the_stream(capsys: pytest.CaptureFixture[str], json_output: bool) -> None:
    """Heartbeats print nothing, an event sent again is not printed twice, a gap is a
    warning on stderr (with --json, its line on stdout) and is resumed from."""
    gap = {"type": "gap", "after": 3, "resume": 40, "missed": 37, "text": "…"}
    stream = lines(
        gap, {**EVENT, "id": 41}, b"", EVENT, {**EVENT, "id": 41}, b"  ", {**EVENT, "id": 43}
    )
    follower = _events._Follower(3, json_output=json_output)
    for line in stream:
        follower.take(line, MASTER)
    assert (follower.printed, follower.resume) == (43, 43)
    out, err = capsys.readouterr()
    if json_output:
        assert out.splitlines() == [stream[0].decode(), *(s.decode() for s in stream[1:4:2]),
                                    stream[-1].decode()]  # fmt: skip
        assert err == ""
    else:
        assert [line.split()[1] for line in out.splitlines()] == ["41", "42", "43"]
        assert err == (
            "warning: 37 events missed: no longer kept by the master (it keeps its last "
            "events only); going on after event 40\n"
        )


def test_a_line_that_is_no_event_is_the_masters_bad_reply() -> None:
    follower = _events._Follower(None, json_output=False)
    with pytest.raises(AgentFailed) as raised:
        follower.take(b"<html>", MASTER)
    assert (raised.value.code, raised.value.exit_status) == ("master.bad_reply", 5)


def body(*items: Any) -> list[bytes]:
    """Stream lines, each a chunk of its own, ending in its newline."""
    return [line + b"\n" for line in lines(*items)]


def test_following_asks_again_after_the_last_event_printed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A scripted master whose streams break: each new connection asks for the events
    after the last one printed; a refusal ends it."""
    head = {"Transfer-Encoding": "chunked", "Content-Type": "application/x-ndjson"}
    answers = [
        reply("200 OK", {**head, "X-Nodeagent-Last-Event-Id": "3"}, chunked(*body(
            {**EVENT, "id": 2}, {**EVENT, "id": 3}))[:-5]),  # cut before its last chunk
        reply("200 OK", head, chunked(*body({**EVENT, "id": 3}, b"", {**EVENT, "id": 4}))[:-5]),
        reply("401 Unauthorized", {"Content-Type": "application/json", "Content-Length": "61"},
              b'{"error":{"code":"auth.unauthenticated","message":"expired"}}'),
    ]  # fmt: skip

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(answers.pop(0))

    with serving(respond, unix=tmp_path / "master.sock") as (server, endpoint):
        target = Target(unix=Path(str(endpoint.unix)), peer="master")
        follower = _events._Follower(None, json_output=False)
        wanted = {"types": "drain.*", "machines": "", "groups": ""}
        with pytest.raises(Unauthorized, match="expired"):
            _events._follow(target, follower, last=20, wanted=wanted)
    asked = [request.split(b"\r\n")[0].decode() for request in server.requests]
    assert asked == [
        "GET /v1/events?format=jsonl&follow=true&last=20&type=drain.%2A HTTP/1.1",
        "GET /v1/events?format=jsonl&follow=true&since=3&type=drain.%2A HTTP/1.1",
        "GET /v1/events?format=jsonl&follow=true&since=4&type=drain.%2A HTTP/1.1",
    ]
    out, err = capsys.readouterr()
    assert [line.split()[1] for line in out.splitlines()] == ["2", "3", "4"]
    warned = err.splitlines()
    assert [line.rpartition(" ")[2] for line in warned[::2]] == ["3", "4"]
    assert all(line.startswith("warning: cannot reach the master at unix:") for line in warned[::2])
    assert warned[1].startswith(f"reconnected to the master at unix:{tmp_path}/master.sock after ")
