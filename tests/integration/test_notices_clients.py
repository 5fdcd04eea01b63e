"""The notices as their owners' tools see them, against one real master and one real agent
running jobs of two job groups, shared by the tests of this file: ``nodeagent master
notices`` (listing, ``--follow``, ``accept``/``decline``) as a subprocess without a
terminal, and :meth:`nodeagent.client.MasterClient.notices` following them. Both follow
across a master killed (SIGKILL) and started again: each change once, none missed."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent._auth import Scope, create_token, load_key
from nodeagent.client import MasterClient, NoticeChange
from tests.harness import AgentProcess, MasterProcess, job_script, wait_for
from tests.integration.test_cli_master import cli
from tests.integration.test_events_clients import Lines, interrupted, restart, running
from tests.integration.test_master import window
from tests.integration.test_notices import SETTINGS, notices

pytestmark = pytest.mark.integration

WEB, BATCH = "web/prod/front", "batch/dev/etl"
NO_TERMINAL = {"CI": "true"}


def keep_port(master: MasterProcess) -> None:
    """Bind the port the master got again when it is started again, so that the agent,
    which pushes its ads to that URL, reaches the master after a restart."""
    port = master.url.rpartition(":")[2]
    config = master.config_path.read_text()
    master.config_path.write_text(config.replace('"127.0.0.1:0"', f'"127.0.0.1:{port}"'))


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    tmp = tmp_path_factory.mktemp("notices")
    argv, _ = job_script(tmp, "job")
    with (
        MasterProcess(tmp / "master", settings=SETTINGS) as m,
        AgentProcess(
            tmp / "n1",
            hostname="n1.test",
            master=m.agent_settings(tmp / "n1", node="n1.test", update_interval=0.3),
        ) as n1,
    ):
        n1.claim(argv, group=WEB, cpus=1)
        n1.claim(argv, group=BATCH, cpus=1)
        keep_port(m)
        wait_for(lambda: m.call("GET", "/v1/ads").json()["ads"])
        yield m


def owner_token(master: MasterProcess, tmp_path: Path, *groups: str) -> Path:
    token = create_token(
        load_key(master.key_file),
        subject="web-team",
        scope=Scope.READ,
        lifetime_s=3600,
        now=time.time(),
        groups=groups,
    )
    path = tmp_path / "owner.token"
    path.write_text(token)
    path.chmod(0o600)
    return path


def schedule(master: MasterProcess, start: float) -> dict[str, dict[str, Any]]:
    """n1.test's window at ``start``; the two groups' notices for it, by group."""
    reply = master.call("POST", "/maintenance/schedule", json=window(["n1.test"], start))
    assert reply.status_code == 200, reply.text

    def issued() -> dict[str, dict[str, Any]] | None:
        found = {n["group"]: n for n in notices(master) if n["window"]["start"] == start}
        return found if len(found) == 2 else None

    found: dict[str, dict[str, Any]] = wait_for(issued)
    return found


@contextlib.contextmanager
def scheduled(master: MasterProcess, start: float) -> Iterator[dict[str, dict[str, Any]]]:
    try:
        yield schedule(master, start)
    finally:
        master.call("POST", "/maintenance/schedule", json={})
        wait_for(lambda: notices(master) == [])


def answer(master: MasterProcess, notice_id: str, verb: str, reason: str) -> None:
    reply = master.call("POST", f"/v1/notices/{notice_id}/{verb}", json={"reason": reason})
    assert reply.status_code == 200, reply.text


def test_listing_and_answering_from_the_command_line(master: MasterProcess, tmp_path: Path) -> None:
    start = time.time() + 86_400
    with scheduled(master, start) as issued:
        web, batch = issued[WEB], issued[BATCH]
        listed = json.loads(cli(master, "notices", "--json").stdout)["notices"]
        assert [n["id"] for n in listed] == [batch["id"], web["id"]]
        only_web = json.loads(cli(master, "notices", "--json", "--group", WEB).stdout)
        assert [n["id"] for n in only_web["notices"]] == [web["id"]]
        table = cli(master, "notices", "--machine", "n1.test", env=NO_TERMINAL)
        assert table.returncode == 0, table.stderr
        rows = table.stdout.splitlines()
        assert rows[0].split() == ["ID", "MACHINE", "GROUP", "WINDOW", "CLAIMS", "ANSWER"]
        assert [row.split()[:3] for row in rows[1:]] == [
            [batch["id"], "n1.test", BATCH],
            [web["id"], "n1.test", WEB],
        ]
        assert all(row.rstrip().endswith("not answered") for row in rows[1:])
        assert "(in 23 h" in rows[1] or "(in 1 d" in rows[1]
        none = cli(master, "notices", "--machine", "other.test")
        assert none.stdout == "no notice in force\n"

        token = owner_token(master, tmp_path, "web/*")
        remote = ("--host", master.url, "--token", str(token))
        expected = start - 600
        accepted = cli(
            None, "notices", "accept", web["id"], "--reason", "front ends drain by themselves",
            "--expected-completion", str(int(expected)), *remote, env=NO_TERMINAL,
        )  # fmt: skip
        assert accepted.returncode == 0, accepted.stderr
        assert accepted.stdout.startswith(f"accepted notice {web['id']} (n1.test, {WEB}; ")
        now = {n["id"]: n for n in notices(master)}
        assert now[web["id"]]["answer"]["verdict"] == "accept"
        assert now[web["id"]]["answer"]["who"] == "web-team"
        assert now[web["id"]]["answer"]["reason"] == "front ends drain by themselves"
        assert now[web["id"]]["answer"]["expected_completion"] == int(expected)

        # another group's notice: 403, exit 4, and nothing changed
        wrong = cli(None, "notices", "decline", batch["id"], "--reason", "mine?", *remote,
                    env=NO_TERMINAL)  # fmt: skip
        assert wrong.returncode == 4
        assert wrong.stderr.startswith("auth.wrong_group: web-team may not answer for job group")
        # an id not in force: exit 1, nothing changed
        unknown = cli(master, "notices", "accept", "n-0000000000000000", "--reason", "x")
        assert unknown.returncode == 1
        assert unknown.stderr.startswith("notice.no_such_notice: ")
        # nanoseconds where seconds were meant: exit 2, said so, nothing sent
        ns = cli(master, "notices", "decline", batch["id"], "--reason", "x",
                 "--expected-completion", str(int(expected) * 1_000_000_000))  # fmt: skip
        assert ns.returncode == 2
        assert "as nanoseconds it is" in ns.stderr
        assert ns.stderr.startswith("cli.bad_time: --expected-completion: ")
        # a decline, as the operator (the socket), with a time in ISO 8601
        declined = cli(master, "notices", "decline", batch["id"], "--reason", "month-end run",
                       "--expected-completion", "+2h", "--json", env=NO_TERMINAL)  # fmt: skip
        assert declined.returncode == 0, declined.stderr
        assert json.loads(declined.stdout)["answer"]["verdict"] == "decline"
        after = {n["id"]: n["answer"] for n in notices(master)}
        assert after[batch["id"]]["reason"] == "month-end run"
        assert after[batch["id"]]["expected_completion"] == pytest.approx(
            time.time() + 7200, abs=600
        )
        assert after[web["id"]] == now[web["id"]]["answer"]  # untouched by the refusals


def kept_notice_events(master: MasterProcess, group: str) -> list[dict[str, Any]]:
    query = {"format": "jsonl", "follow": "false", "since": "0", "type": "notice.*"}
    reply = master.call("GET", "/v1/events", params={**query, "group": group})
    return [json.loads(line) for line in reply.text.splitlines() if line]


def test_following_from_the_command_line_across_a_kill(master: MasterProcess) -> None:
    """Without a terminal: listed, then answered, (kill, start) answered again, the window
    moved (rescinded, issued), answered, rescinded; each event once, none missed; Ctrl-C
    ends it with 0."""
    start = time.time() + 86_400
    with (
        scheduled(master, start) as issued,
        running(master, "notices", "--follow", "--json", "--group", WEB, env=NO_TERMINAL) as proc,
    ):
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        first = json.loads(lines.next())  # the listing: the stream is open
        a = issued[WEB]["id"]
        assert (first["kind"], first["notice"]["id"]) == ("listed", a)
        answer(master, a, "accept", "drains itself")
        printed = [json.loads(lines.next())]
        restart(master)
        answer(master, a, "decline", "changed our minds")  # while it reconnects
        printed.append(json.loads(lines.next()))
        moved = schedule(master, start + 3600)
        b = moved[WEB]["id"]
        printed += [json.loads(lines.next()), json.loads(lines.next())]
        answer(master, b, "accept", "fine")
        printed.append(json.loads(lines.next()))
        master.call("POST", "/maintenance/schedule", json={})
        printed.append(json.loads(lines.next()))
        interrupted(proc)
        assert proc.stderr is not None
        errors = proc.stderr.read()
    shown = [(c["kind"], c["notice"]["id"]) for c in printed]
    assert shown[:2] == [("answered", a), ("answered", a)]
    assert sorted(shown[2:4]) == [("issued", b), ("rescinded", a)]
    assert shown[4:] == [("answered", b), ("rescinded", b)]
    assert [c["notice"]["answer"]["verdict"] for c in printed[:2]] == ["accept", "decline"]
    ids = [c["event_id"] for c in printed]
    kept = [e["id"] for e in kept_notice_events(master, WEB) if ids[0] <= e["id"] <= ids[-1]]
    assert ids == kept  # every notice event of the group, once, in order
    assert "warning: " in errors
    assert "Traceback" not in errors


async def test_the_client_follows_across_a_kill(master: MasterProcess) -> None:
    """The Python client: listed, answered by itself, (kill, start) answered again by the
    socket, rescinded when the schedule is cleared; each change once."""
    start = time.time() + 86_400
    issued = schedule(master, start)
    a = issued[WEB]["id"]
    read: list[NoticeChange] = []
    try:
        async with (
            MasterClient(socket=master.socket) as client,
            contextlib.aclosing(client.notices(WEB, follow=True)) as changes,
        ):
            async for change in changes:
                read.append(change)
                if len(read) == 1:  # the listing: the stream is open
                    done = await client.accept(a, reason="drains itself")
                    assert done.answer is not None
                elif len(read) == 2:
                    restart(master)  # it breaks the connection under the iterator
                    answer(master, a, "decline", "changed our minds")
                elif len(read) == 3:
                    master.call("POST", "/maintenance/schedule", json={})
                else:
                    break
    finally:
        master.call("POST", "/maintenance/schedule", json={})
        wait_for(lambda: notices(master) == [])
    assert [(c.kind, c.notice.id) for c in read] == [
        ("listed", a),
        ("answered", a),
        ("answered", a),
        ("rescinded", a),
    ]
    verdicts = [c.notice.answer.verdict if c.notice.answer else None for c in read]
    assert verdicts == [None, "accept", "decline", "decline"]
    ids = [c.event_id for c in read[1:]]
    assert ids == [e["id"] for e in kept_notice_events(master, WEB) if ids[0] <= e["id"]]
