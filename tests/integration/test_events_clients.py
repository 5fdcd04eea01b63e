"""The master's event stream as its clients read it, against one real master shared by
the tests of this file: ``nodeagent master events`` as a subprocess, and
:meth:`nodeagent.client.MasterClient.events`. Both resume by themselves across a master
killed (SIGKILL) and started again on the same state: no event twice, none missed.
"""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from nodeagent.client import InvalidRequest, MasterClient, Unauthorized, Unreachable
from tests.etcd import free_port
from tests.harness import MasterProcess
from tests.integration.test_cli_master import FAR, TIMEOUT, A, B, _env, cli, ok, window

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path_factory.mktemp("events") / "master") as m:
        yield m


def kept(master: MasterProcess, **params: str) -> list[dict[str, Any]]:
    """The events the master keeps (``follow=false``), as it sends them."""
    query = {"format": "jsonl", "follow": "false", "since": "0", **params}
    response = master.call("GET", "/v1/events", params=query)
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line]


def schedule(master: MasterProcess, *machines: dict[str, str]) -> None:
    """Replace the schedule: a ``schedule.changed`` event (and ``mode.changed``)."""
    response = master.call("POST", "/maintenance/schedule", json=window(list(machines), FAR))
    assert response.status_code == 200, response.text


def restart(master: MasterProcess) -> None:
    """SIGKILL the master, then start it again on the same state."""
    master.stop(signal.SIGKILL)
    master.start()


@contextlib.contextmanager
def running(
    master: MasterProcess, *args: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """``nodeagent master ARGS`` running against ``master``'s socket, its output through
    pipes (no terminal); killed at the end if it is still running."""
    argv = [sys.executable, "-m", "nodeagent", "master", *args]
    env = _env({"NODEAGENT_MASTER_SOCKET": str(master.socket), **(env or {})})
    with subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    ) as proc:  # fmt: skip
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def interrupted(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C: the command ends with status 0."""
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=TIMEOUT) == 0


def fields(line: str) -> tuple[str, int, str, str]:
    """A human line: its time, id, type and text."""
    when, event_id, kind, text = line.rstrip("\n").split(maxsplit=3)
    return when, int(event_id), kind, text


class Lines:
    """A pipe read line by line in a thread: :meth:`next` waits for the next line (at
    most :data:`TIMEOUT` seconds), never for a time."""

    def __init__(self, pipe: IO[str]) -> None:
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._lines.put(line)
        self._lines.put(None)

    def next(self) -> str:
        line = self._lines.get(timeout=TIMEOUT)
        assert line is not None, "the stream ended"
        return line

    def until(self, kind: str, after: int) -> list[str]:
        """The lines up to the first event of type ``kind`` with an id above ``after``."""
        read = []
        while True:
            read.append(self.next())
            _, event_id, shown, _ = fields(read[-1])
            if shown == kind and event_id > after:
                return read


# --- the command line ---------------------------------------------------------------------


def test_the_last_events_each_on_a_line(master: MasterProcess) -> None:
    schedule(master, A)
    schedule(master, A, B)
    every = kept(master)
    printed = ok(cli(master, "events")).splitlines()
    assert [fields(line)[1:] for line in printed] == [
        (e["id"], e["type"], e["text"]) for e in every[-20:]
    ]
    assert all(fields(line)[0].endswith("Z") for line in printed)  # UTC, as the logs
    two = ok(cli(master, "events", "--last", "2")).splitlines()
    assert two == printed[-2:]
    after = every[-3]["id"]
    assert [fields(line)[1] for line in ok(cli(master, "events", "--since", str(after)))
            .splitlines()] == [e["id"] for e in every if e["id"] > after]  # fmt: skip


def test_filters_and_json(master: MasterProcess) -> None:
    schedule(master, B)
    modes = ok(cli(master, "events", "--type", "mode.*")).splitlines()
    assert modes
    assert {fields(line)[2] for line in modes} == {"mode.changed"}
    both = ok(cli(master, "events", "--type", "mode.changed", "--type", "schedule.changed"))
    assert {fields(line)[2] for line in both.splitlines()} == {"mode.changed", "schedule.changed"}
    of_b = ok(cli(master, "events", "--machine", "b", "--last", "100")).splitlines()
    assert of_b
    assert [fields(line)[1] for line in of_b] == [
        e["id"] for e in kept(master) if "b.test" in e["machines"]
    ]
    # --json: each line exactly as the master sends it
    printed = ok(cli(master, "events", "--json", "--last", "5"))
    response = master.call(
        "GET", "/v1/events", params={"format": "jsonl", "follow": "false", "last": "5"}
    )
    assert printed == response.text
    assert [json.loads(line)["id"] for line in printed.splitlines()] == [
        e["id"] for e in kept(master)[-5:]
    ]


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (("--type", "bogus"), 1, "request.invalid: no event type 'bogus': the types are "),
        (("--type", "drain.*", "--group", "web"), 1, "request.invalid: group 'web' is not "),
        (("-f", "--type", "drain.commited"), 1, "request.invalid: no event type "),
        (("--since", "3", "--last", "2"), 2, "cli.usage: give --since ID or --last N, not both"),
        (("--since", "-1"), 2, ""),
    ],
    ids=["type", "group", "type, following", "since and last", "since negative"],
)
def test_a_bad_filter_exits_with_the_masters_message(
    master: MasterProcess, args: tuple[str, ...], status: int, says: str
) -> None:
    refused = cli(master, "events", *args)
    assert (refused.returncode, refused.stdout) == (status, "")
    assert refused.stderr.startswith(says), refused.stderr


def test_a_time_given_for_an_event_id_is_said_so(master: MasterProcess) -> None:
    """``--since`` with a time (seconds or nanoseconds) rather than an id: nothing to
    print, and stderr says why; past 18 digits the master refuses it; following, the
    warning comes first and the stream waits, until Ctrl-C."""
    last = kept(master)[-1]["id"]
    seconds = cli(master, "events", "--since", "1795995891")
    assert (seconds.returncode, seconds.stdout) == (0, "")
    assert seconds.stderr == (
        f"warning: --since 1795995891 is past the master's last event, {last}: nothing to "
        "print (--since takes an event id as printed, not a time; --last N shows the last N)\n"
    )
    nanoseconds = cli(master, "events", "--since", "1795995891000000000")
    assert (nanoseconds.returncode, nanoseconds.stdout) == (1, "")
    assert nanoseconds.stderr.startswith(
        "request.invalid: since '1795995891000000000' is not an event id: 18 digits at most, "
        "counted from 1 (a time is not an event id)"
    ), nanoseconds.stderr
    assert cli(master, "events", "--since", str(last)).stderr == ""  # up to date: no warning
    with running(master, "events", "-f", "--since", "1795995891") as proc:
        assert proc.stderr is not None
        warned = Lines(proc.stderr).next()
        assert warned.startswith(
            f"warning: --since 1795995891 is past the master's last event, {last}: "
            "waiting for event 1795995892 (--since takes an event id"
        ), warned
        interrupted(proc)
        assert proc.stdout is not None
        assert proc.stdout.read() == ""


def test_a_master_unreachable_or_a_token_refused(master: MasterProcess, tmp_path: Path) -> None:
    for args in ((), ("-f",)):
        gone = cli(None, "events", *args, "--socket", str(tmp_path / "none.sock"))
        assert gone.returncode == 3
        assert gone.stderr.startswith(
            f"master.unreachable: cannot reach the master at unix:{tmp_path / 'none.sock'}: "
        )
    anonymous = cli(None, "events", "--host", master.url)
    assert (anonymous.returncode, anonymous.stderr) == (
        4,
        "auth.unauthenticated: a bearer token is required\n",
    )
    read = tmp_path / "read.token"
    read.write_text(master.token("READ"))
    remote = ok(cli(None, "events", "--last", "1", "--host", master.url, "--token", str(read)))
    assert fields(remote)[1] == kept(master)[-1]["id"]


def test_follow_prints_each_event_as_it_comes_across_a_restart(master: MasterProcess) -> None:
    """Without a terminal (a pipe), each line as it comes; a master killed and started
    again is reconnected, without an id twice or one missed; Ctrl-C ends it with 0."""
    with running(master, "events", "--follow", "--last", "1") as proc:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        printed = [lines.next()]  # the last kept event: the stream is open
        first = fields(printed[0])[1]
        assert first == kept(master)[-1]["id"]
        schedule(master, A)
        printed += lines.until("schedule.changed", first)
        restart(master)
        printed += lines.until("leader.elected", first)  # the restarted master's first
        schedule(master, B)
        printed += lines.until("schedule.changed", fields(printed[-1])[1])
        interrupted(proc)
        assert proc.stderr is not None
        errors = proc.stderr.read()
    ids = [fields(line)[1] for line in printed]
    assert ids == [e["id"] for e in kept(master) if first <= e["id"] <= ids[-1]]
    assert ids == list(range(first, ids[-1] + 1))  # every event, once, in order
    warned = errors.splitlines()
    assert len(warned) == 2, errors  # once per outage, and when it is back
    assert warned[0].startswith("warning: ")
    # from the last event printed before the kill: one of the schedule's change
    # (the restarted master's leader.elected: the first line may be an earlier one)
    restarted = next(f[1] for f in map(fields, printed[1:]) if f[2] == "leader.elected")
    assert int(warned[0].rpartition(" ")[2]) in range(ids[1], restarted), warned[0]
    assert "; reconnecting, from event " in warned[0]
    assert warned[1].startswith(f"reconnected to the master at unix:{master.socket} after ")
    assert "Traceback" not in errors


# --- the Python client --------------------------------------------------------------------


async def test_the_client_reads_the_kept_events_and_ends(master: MasterProcess) -> None:
    every = kept(master)
    async with MasterClient(socket=master.socket) as client:
        read = [e async for e in client.events(follow=False)]
        assert read == every
        after = every[-3]["id"]
        read = [e async for e in client.events(since=after, follow=False)]
        assert read == every[-2:]
        modes = [e async for e in client.events(types="mode.*", follow=False, last=100)]
        assert modes == [e for e in every if e["type"] == "mode.changed"]
        with pytest.raises(InvalidRequest, match=r"no event type 'drain\.commited'"):
            async for _ in client.events(types=["drain.commited"]):
                pass
    async with MasterClient(url=master.url) as client:
        with pytest.raises(Unauthorized):
            async for _ in client.events():
                pass
    dead = f"http://127.0.0.1:{free_port()}"
    async with MasterClient(urls=[dead], token=master.token("READ")) as client:
        with pytest.raises(Unreachable):
            async for _ in client.events():
                pass
    # A master that cannot be reached is passed over.
    async with MasterClient(urls=[dead, master.url], token=master.token("READ")) as client:
        read = [e async for e in client.events(follow=False, last=2)]
    assert read == every[-2:]


async def test_the_client_resumes_across_a_restart(master: MasterProcess) -> None:
    first = kept(master)[-1]["id"]
    read: list[dict[str, Any]] = []
    async with (
        MasterClient(socket=master.socket) as client,
        contextlib.aclosing(client.events(last=1)) as events,
    ):
        async for event in events:
            read.append(event)
            if len(read) == 1:  # the last kept event: the stream is open
                schedule(master, A)
            elif event["type"] == "schedule.changed" and len(read) <= 3:
                restart(master)  # it breaks the connection under the iterator
            elif event["type"] == "leader.elected":
                schedule(master, B)
            elif event["type"] == "schedule.changed":
                break
    ids = [e["id"] for e in read]
    assert ids[0] == first
    assert ids == list(range(first, ids[-1] + 1))  # no event twice, none missed
    assert read == [e for e in kept(master) if first <= e["id"] <= ids[-1]]
    assert read[-1]["facts"]["added"] == ["b.test"]
