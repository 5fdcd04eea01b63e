"""The master's event stream and webhooks, end to end: a real master, real agents and a
real job through a maintenance window; subscribers over the Unix socket and TCP; a
SIGKILL of the master; a webhook receiver on loopback that is down, then up.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.server
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import AgentProcess, MasterProcess, job_script, wait_for
from tests.integration.test_master import window

pytestmark = pytest.mark.integration

SETTINGS = {"reconcile_interval": 0.2, "drain_margin": 1, "drain_policy": "immediate"}


class Subscriber:
    """A stream read in a thread of its own, its events (and gaps) kept in order. It reads
    with a short timeout and, as a client does, connects again after the last id it has
    (``since``), so that :meth:`close` ends it within a second."""

    def __init__(self, client: httpx.Client, params: dict[str, str], **headers: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.frames: list[str] = []
        self.status: int | None = None
        self._stop = threading.Event()
        self._client = client
        self._thread = threading.Thread(target=self._read, args=(params, headers), daemon=True)
        self._thread.start()
        wait_for(lambda: self.status is not None)

    def _read(self, params: dict[str, str], headers: dict[str, str]) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                self._stream(params, headers)
            if self.status != 200 or params.get("follow") == "false":
                return
            if self.events:
                params = {
                    **params,
                    "since": str(self.events[-1].get("id", self.events[-1].get("resume"))),
                }
                params.pop("last", None)
                headers = {}

    def _stream(self, params: dict[str, str], headers: dict[str, str]) -> None:
        timeout = httpx.Timeout(10, read=1)
        with self._client.stream(
            "GET", "/v1/events", params=params, headers=headers, timeout=timeout
        ) as reply:
            self.status = reply.status_code
            for line in reply.iter_lines():
                self.frames.append(line)
                if line.startswith("{"):
                    self.events.append(json.loads(line))
                elif line.startswith("data: "):
                    self.events.append(json.loads(line.removeprefix("data: ")))
                if self._stop.is_set():
                    return

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._client.close()


def kept(master: MasterProcess, **params: str) -> list[dict[str, Any]]:
    reply = master.call(
        "GET", "/v1/events", params={"format": "jsonl", "follow": "false", **params}
    )
    assert reply.status_code == 200, reply.text
    return [json.loads(line) for line in reply.text.splitlines() if line]


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MasterProcess, AgentProcess]]:
    tmp = tmp_path_factory.mktemp("events")
    with MasterProcess(tmp / "master", settings=SETTINGS) as master:
        node = AgentProcess(
            tmp / "n1",
            hostname="n1.test",
            policy={"max_job_retirement_time": 2, "machine_max_vacate_time": 1},
            master=master.agent_settings(tmp / "n1", node="n1.test", update_interval=0.5),
        )
        with node:
            wait_for(lambda: master.call("GET", "/v1/ads").json().get("ads"))
            yield master, node


def test_a_window_arrives_in_order_and_a_subscriber_resumes_exactly(
    pool: tuple[MasterProcess, AgentProcess], tmp_path: Path
) -> None:
    master, node = pool
    start = kept(master)[-1]["id"]
    token = master.token("READ")
    watcher = Subscriber(
        httpx.Client(base_url=master.url, headers={"Authorization": f"Bearer {token}"}),
        {"since": str(start)},
    )
    drains = Subscriber(master.client(), {"format": "jsonl", "type": "drain.*", "machine": "n1"})
    try:
        assert watcher.status == 200
        argv, _ = job_script(tmp_path, "short")
        node.claim(argv, cpus=1, max_job_retirement_time=1, job_id="9", owner="alice")
        reply = master.call(
            "POST", "/maintenance/schedule", json=window(["n1.test"], time.time() + 60)
        )
        assert reply.status_code == 200, reply.text
        wanted = ["drain.recorded", "drain.committed", "drain.started", "drain.completed"]
        wait_for(lambda: all(t in watcher.types() for t in wanted), timeout=60)
        types = watcher.types()
        assert types[:2] == ["schedule.changed", "mode.changed"]
        assert [t for t in types if t in wanted][:4] == wanted
        ids = [e["id"] for e in watcher.events]
        assert ids == list(range(start + 1, start + 1 + len(ids)))  # in order, no hole
        assert all(
            e["machines"] == ["n1.test"] for e in watcher.events if e["type"].startswith("drain.")
        )
        # The second stream is its own connection: wait for it to catch up, then compare.
        drain_types = [t for t in types if t.startswith("drain.")]
        wait_for(lambda: len(drains.events) >= len(drain_types))
        assert [e["type"] for e in drains.events][: len(drain_types)] == drain_types
        committed = next(e for e in watcher.events if e["type"] == "drain.committed")
        started = next(e for e in watcher.events if e["type"] == "drain.started")
        assert committed["facts"]["request_id"] == started["facts"]["request_id"]
        assert started["facts"]["reason"] == "maintenance"
        assert "graceful drain for maintenance" in committed["text"]
        assert any(frame.startswith("id: ") for frame in watcher.frames)  # SSE framing

        # Resume after the third: exactly what followed it, by Last-Event-ID or since.
        third = ids[2]
        again = Subscriber(
            master.client(), {"format": "jsonl", "follow": "false"}, **{"Last-Event-ID": str(third)}
        )
        wait_for(lambda: len(again.events) >= len(ids) - 3)
        assert [e["id"] for e in again.events][: len(ids) - 3] == ids[3:]
        again.close()
        assert [e["id"] for e in kept(master, since=str(third))][: len(ids) - 3] == ids[3:]
    finally:
        watcher.close()
        drains.close()
        master.call("POST", "/maintenance/schedule", json={"windows": []})


def test_refusals(pool: tuple[MasterProcess, AgentProcess]) -> None:
    master, _ = pool
    anonymous = httpx.get(f"{master.url}/v1/events", timeout=10)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    expired = master.token("READ", lifetime=60, age=120)
    refused = httpx.get(
        f"{master.url}/v1/events", headers={"Authorization": f"Bearer {expired}"}, timeout=10
    )
    assert refused.status_code == 401
    for params, message in [
        ({"type": "drains.*"}, "no event type 'drains.*'"),
        ({"since": "-1"}, "is not an event id"),
        ({"format": "xml"}, "format 'xml'"),
        ({"sinse": "3"}, "unknown parameter 'sinse'"),
    ]:
        reply = master.call("GET", "/v1/events", params=params)
        assert reply.status_code == 422, params
        assert reply.json()["error"]["code"] == "request.invalid"
        assert message in reply.json()["error"]["message"]
    assert master.call("POST", "/v1/events").status_code == 405


def test_stalled_subscribers_do_not_hold_up_the_master(
    pool: tuple[MasterProcess, AgentProcess],
) -> None:
    """100 subscribers that read nothing while events flow: ads are still taken, and a
    subscriber that reads gets every event."""
    master, node = pool
    stalled = []
    try:
        for _ in range(100):
            sock = socket.socket(socket.AF_UNIX)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(str(master.socket))
            sock.sendall(b"GET /v1/events?since=0 HTTP/1.1\r\nHost: m\r\n\r\n")
            stalled.append(sock)
        start = kept(master)[-1]["id"]
        reader = Subscriber(master.client(), {"format": "jsonl", "since": str(start)})
        token = master.token("DAEMON", subject="agent@n1.test", node="n1.test")
        ad = node.call("GET", "/v1/ad").json()
        with httpx.Client(base_url=master.url, headers={"Authorization": f"Bearer {token}"}) as c:
            for n in range(40):  # each schedule change writes events the stalled do not read
                hosts = [f"h{n}-{i}.test" for i in range(50)]
                assert (
                    master.call(
                        "POST", "/maintenance/schedule", json=window(hosts, time.time() + 3600)
                    ).status_code
                    == 200
                )
                assert c.post("/v1/ads", json=ad, timeout=10).status_code == 200
        wait_for(lambda: len(reader.events) >= 80, timeout=60)
        assert [e["id"] for e in reader.events][:80] == list(range(start + 1, start + 81))
        wait_for(lambda: metric(master, "nodeagent_master_event_subscribers") >= 101)
        reader.close()
    finally:
        for sock in stalled:
            sock.close()
        master.call("POST", "/maintenance/schedule", json={"windows": []})


class Receiver:
    """A webhook receiver on loopback: every POST kept (body, headers)."""

    def __init__(self, port: int, secret: bytes) -> None:
        self.posts: list[tuple[dict[str, Any], dict[str, str], bool]] = []
        received = self.posts

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
                valid = hmac.compare_digest(expected, self.headers["X-Nodeagent-Signature"])
                received.append((json.loads(body), dict(self.headers), valid))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_webhook_down_then_up_gets_every_event_in_order_across_a_sigkill(tmp_path: Path) -> None:
    port = free_port()
    secret = b"0123456789abcdef0123456789abcdef"
    (tmp_path / "hook.secret").write_bytes(secret + b"\n")
    master = MasterProcess(tmp_path / "master", settings=SETTINGS)
    with master.config_path.open("a") as config:
        config.write(
            f'[[notify]]\nurl = "http://127.0.0.1:{port}/hook"\n'
            f'types = ["schedule.*", "mode.*", "leader.*"]\n'
            f'secret_file = "{tmp_path / "hook.secret"}"\ntimeout = "2s"\n'
        )
    receiver = None
    try:
        with master:
            # leader.elected: written before the webhook (within the flush delay of the start)
            wait_for(lambda: kept(master) != [])
            first = kept(master)[-1]["id"]
            for n in range(3):
                hosts = [f"a{n}.test"]
                assert (
                    master.call(
                        "POST", "/maintenance/schedule", json=window(hosts, time.time() + 3600)
                    ).status_code
                    == 200
                )
            url = f"http://127.0.0.1:{port}/hook"
            failures = f'nodeagent_master_webhook_failures_total{{url="{url}"}}'
            wait_for(lambda: metric(master, failures) >= 2, timeout=30)
            assert metric(master, f'nodeagent_master_webhook_lag_events{{url="{url}"}}') >= 3
            elected = [e["id"] for e in kept(master) if e["type"] == "leader.elected"]
            master.stop(signal.SIGKILL)  # its cursor says nothing was taken
            master.start()
            receiver = Receiver(port, secret)
            # the new term's leader.elected is written within the flush delay of the start
            wait_for(
                lambda: [e["id"] for e in kept(master) if e["type"] == "leader.elected"] != elected
            )
            last = kept(master)[-1]["id"]
            wait_for(lambda: receiver.posts and receiver.posts[-1][0]["id"] == last, timeout=60)
            assert (
                master.call("POST", "/maintenance/schedule", json={"windows": []}).status_code
                == 200
            )
            last = kept(master)[-1]["id"]
            wait_for(lambda: receiver.posts[-1][0]["id"] == last, timeout=60)
        ids = [body["id"] for body, _, _ in receiver.posts]
        assert all(valid for _, _, valid in receiver.posts)
        assert ids == sorted(ids)  # in order (at least once: none skipped below)
        assert set(range(first + 1, last + 1)) <= set(ids)
        types = {body["type"] for body, _, _ in receiver.posts}
        assert types <= {"schedule.changed", "mode.changed", "leader.elected"}
        _, headers, _ = receiver.posts[0]
        assert headers["X-Nodeagent-Event-Id"] == str(receiver.posts[0][0]["id"])
        assert headers["Content-Type"] == "application/json"
    finally:
        if receiver is not None:
            receiver.close()


def metric(master: MasterProcess, sample: str) -> float:
    """The value of one sample of the master's /metrics (0 when absent)."""
    for line in master.call("GET", "/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_sigkilled_master_resumes_its_stream_without_a_hole_or_a_repeat(tmp_path: Path) -> None:
    with MasterProcess(tmp_path / "master", settings=SETTINGS) as master:
        for n in range(3):
            assert (
                master.call(
                    "POST", "/maintenance/schedule", json=window([f"b{n}.test"], time.time() + 3600)
                ).status_code
                == 200
            )
        before = kept(master)
        master.stop(signal.SIGKILL)
        master.start()
        # leader.elected is written within the flush delay of the start: wait for it
        after = wait_for(lambda: kept(master, since=str(before[-1]["id"])) or None)
        assert after[0]["id"] == before[-1]["id"] + 1
        assert after[0]["type"] == "leader.elected"
        whole = kept(master, since="0")
        assert [e["id"] for e in whole] == list(range(1, len(whole) + 1))
