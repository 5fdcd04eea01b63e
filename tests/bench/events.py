"""The master's event stream: throughput to 1 and to many subscribers, the lag from a
drain's commit on an agent to its event on a subscriber, the memory of idle subscribers,
and ad ingest with and without stalled subscribers.

A real master (``python -m nodeagent master run``, SQLite) and one real agent run as
subprocesses in a temporary directory. Subscribers are plain Unix-socket connections
(``GET /v1/events?format=jsonl``) read by one selector loop in this process.

* ``idle``: the master's RSS before and after ``--subscribers`` connections that wait.
* ``throughput``: schedule changes are posted as fast as the master takes them for
  ``--seconds``; each writes three events (``schedule.changed`` and two
  ``mode.changed``). Reported: events written per second, and events delivered per
  second to each subscriber (the slowest), with 1 and with ``--subscribers`` of them;
  the master's CPU over the run.
* ``lag``: ``--lags`` times, a quick drain is committed on the idle agent
  (``drain_now``); the lag is from the commit's reply to the ``drain.started`` event
  (seen by the master in the agent's ad) on a subscriber; the drain is then cancelled.
* ``stalled``: ad pushes over TCP for ``--seconds`` alone, then while schedule changes
  write events (one every 10 ms), then the same with 100 subscribers that read nothing
  (their socket buffers full): the last two compared.

Prints one JSON document. Usage:
``python tests/bench/events.py [--subscribers 1000] [--seconds 5] [--lags 30]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import selectors
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._benchlib import summary_ms
from tests.harness import AgentProcess, MasterProcess, wait_for

NS = 1_000_000_000


class Subscribers:
    """``count`` subscribers on the master's socket, read by :meth:`pump`."""

    def __init__(
        self, master: MasterProcess, count: int, *, read: bool = True, tcp: bool = False
    ) -> None:
        self.selector = selectors.DefaultSelector()
        self.socks: list[socket.socket] = []
        self.last: dict[int, int] = {}
        self.counts: dict[int, int] = {}
        self._pending: dict[int, bytes] = {}
        request = b"GET /v1/events?format=jsonl HTTP/1.1\r\nHost: m\r\n"
        if tcp:
            token = master.token("READ", subject="bench")
            request += f"Authorization: Bearer {token}\r\n".encode()
        host, _, port = master.url.removeprefix("http://").rpartition(":")
        for _ in range(count):
            sock = socket.socket(socket.AF_INET if tcp else socket.AF_UNIX)
            if not read:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)) if tcp else str(master.socket))
            sock.sendall(request + b"\r\n")
            sock.setblocking(False)
            self.socks.append(sock)
            if read:
                self.selector.register(sock, selectors.EVENT_READ)
                self.counts[sock.fileno()] = 0
                self.last[sock.fileno()] = 0

    def pump(self, until: float) -> None:
        """Read whatever has come until ``until`` (monotonic)."""
        while (left := until - time.monotonic()) > 0:
            for key, _ in self.selector.select(min(left, 0.1)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                fd = sock.fileno()
                try:
                    data = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    self.selector.unregister(sock)
                    continue
                data = self._pending.pop(fd, b"") + data
                lines = data.split(b"\n")
                self._pending[fd] = lines.pop()
                for line in lines:
                    if line.startswith(b'{"id":'):
                        self.counts[fd] += 1
                        self.last[fd] = int(line[6 : line.index(b",")])

    def all_have(self, event_id: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(last >= event_id for last in self.last.values()):
                return True
            self.pump(min(deadline, time.monotonic() + 0.2))
        return False

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.selector.close()


def subscribers_now(master: MasterProcess) -> int:
    for line in master.call("GET", "/metrics").text.splitlines():
        if line.startswith("nodeagent_master_event_subscribers "):
            return int(float(line.split()[1]))
    return 0


def last_id(master: MasterProcess) -> int:
    reply = master.call(
        "GET", "/v1/events", params={"follow": "false", "last": "1", "format": "jsonl"}
    )
    lines = [line for line in reply.text.splitlines() if line]
    return int(json.loads(lines[-1])["id"]) if lines else 0


def schedule(n: int) -> dict[str, Any]:
    start = int((time.time() + 86400) * NS)
    return {
        "windows": [
            {
                "machine_ids": [{"hostname": f"bench{n}.test"}],
                "unavailability": {"start": {"nanoseconds": start}},
            }
        ]
    }


class Poster:
    """Schedule changes posted in a thread of their own, ``pause`` apart, until stopped."""

    def __init__(self, master: MasterProcess, *, pause: float = 0.0) -> None:
        self.master = master
        self.pause = pause
        self.posted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._post)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _post(self) -> None:
        with self.master.client() as client:
            while not self._stop.is_set():
                client.post("/maintenance/schedule", json=schedule(self.posted + 1))
                self.posted += 1
                if self.pause:
                    time.sleep(self.pause)


def rss_mib(pid: int) -> float:
    rss: int = psutil.Process(pid).memory_info().rss
    return round(rss / 2**20, 1)


def idle(master: MasterProcess, count: int) -> dict[str, Any]:
    assert master.proc is not None
    before = rss_mib(master.proc.pid)
    subs = Subscribers(master, count)
    try:
        wait_for(lambda: subscribers_now(master) >= count, timeout=120)
        time.sleep(1)
        after = rss_mib(master.proc.pid)
        cpu = psutil.Process(master.proc.pid).cpu_times()
        time.sleep(5)
        cpu_after = psutil.Process(master.proc.pid).cpu_times()
    finally:
        subs.close()
    used = (cpu_after.user + cpu_after.system) - (cpu.user + cpu.system)
    return {
        "subscribers": count,
        "rss_mib_before": before,
        "rss_mib_with_subscribers": after,
        "kib_per_subscriber": round((after - before) * 1024 / count, 1),
        "cpu_percent_while_idle": round(100 * used / 5, 2),
    }


def throughput(
    master: MasterProcess, count: int, seconds: float, *, tcp: bool = False
) -> dict[str, Any]:
    assert master.proc is not None
    subs = Subscribers(master, count, tcp=tcp)
    poster = Poster(master)

    try:
        wait_for(lambda: subscribers_now(master) >= count, timeout=120)
        first = last_id(master)
        process = psutil.Process(master.proc.pid)
        cpu = process.cpu_times()
        started = time.monotonic()
        poster.start()
        subs.pump(started + seconds)
        poster.stop()
        written_at = time.monotonic()
        last = last_id(master)
        delivered = subs.all_have(last, timeout=120)
        ended = time.monotonic()
        cpu_after = process.cpu_times()
    finally:
        subs.close()
    events = last - first
    return {
        "subscribers": count,
        "over": "tcp" if tcp else "unix socket",
        "schedule_changes": poster.posted,
        "events_written_per_s": round(events / (written_at - started), 1),
        "all_delivered": delivered,
        "delivered_per_s_slowest_subscriber": round(
            min(subs.counts.values()) / (ended - started), 1
        ),
        "lines_sent_per_s": round(sum(subs.counts.values()) / (ended - started), 1),
        "drain_after_writes_s": round(ended - written_at, 3),
        "master_cpu_percent": round(
            100
            * ((cpu_after.user + cpu_after.system) - (cpu.user + cpu.system))
            / (ended - started),
            1,
        ),
    }


def lag(master: MasterProcess, agent: AgentProcess, runs: int) -> dict[str, Any]:
    from nodeagent.client import SyncAgentClient

    seen: dict[str, float] = {}
    ended: set[str] = set()
    stop = threading.Event()

    def read() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the master ends first
            follow()

    def follow() -> None:
        params = {"format": "jsonl", "type": "drain.started,drain.ended"}
        with (
            master.client() as client,
            client.stream("GET", "/v1/events", params=params, timeout=None) as reply,
        ):
            for line in reply.iter_lines():
                if stop.is_set():
                    return
                if not line:
                    continue
                event = json.loads(line)
                request = str(event["facts"].get("request_id"))
                if event["type"] == "drain.started":
                    seen[request] = time.monotonic()
                else:
                    ended.add(request)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.5)
    lags = []
    client = SyncAgentClient(socket=agent.socket)
    for _ in range(runs):
        request = client.drain_now("quick", reason="bench")
        committed = time.monotonic()
        request_id = str(request.id)
        wait_for(lambda r=request_id: r in seen, timeout=30)
        lags.append(seen[request_id] - committed)
        client.cancel_draining(request_id)
        wait_for(lambda r=request_id: r in ended, timeout=30)
    stop.set()
    return {"runs": runs, "commit_to_event_ms": summary_ms(lags)}


def ads_per_second(master: MasterProcess, agent: AgentProcess, seconds: float) -> float:
    token = master.token("DAEMON", subject=f"agent@{agent.hostname}", node=agent.hostname)
    ad = agent.call("GET", "/v1/ad").json()
    body = json.dumps(ad).encode()
    count = 0
    with httpx.Client(base_url=master.url, headers={"Authorization": f"Bearer {token}"}) as c:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            reply = c.post("/v1/ads", content=body, headers={"Content-Type": "application/json"})
            assert reply.status_code == 200, reply.text
            count += 1
    return round(count / seconds, 1)


def stalled(master: MasterProcess, agent: AgentProcess, seconds: float) -> dict[str, Any]:
    """Ad ingest alone; while events flow (a schedule change every 10 ms); and while
    events flow to 100 subscribers that read nothing."""
    alone = ads_per_second(master, agent, seconds)
    poster = Poster(master, pause=0.01)
    poster.start()
    subs = None
    try:
        flowing = ads_per_second(master, agent, seconds)
        subs = Subscribers(master, 100, read=False)
        time.sleep(2)  # their buffers fill
        with_stalled = ads_per_second(master, agent, seconds)
    finally:
        poster.stop()
        if subs is not None:
            subs.close()
    return {
        "ads_per_s_alone": alone,
        "ads_per_s_events_flowing": flowing,
        "ads_per_s_events_flowing_100_stalled": with_stalled,
        "ratio_stalled_to_flowing": round(with_stalled / flowing, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--lags", type=int, default=30)
    args = parser.parse_args()
    settings = {"reconcile_interval": 1, "metrics_require_auth": False}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with MasterProcess(root / "master", settings=settings) as master:
            agent = AgentProcess(
                root / "agent",
                hostname="agent1.test",
                master=master.agent_settings(
                    root / "agent", node="agent1.test", update_interval=30
                ),
            )
            with agent:
                wait_for(lambda: master.call("GET", "/v1/ads").json().get("ads"))
                result = {
                    "idle": idle(master, args.subscribers),
                    "throughput": [
                        throughput(master, 1, args.seconds),
                        throughput(master, args.subscribers, args.seconds),
                        throughput(master, 1, args.seconds, tcp=True),
                        throughput(master, args.subscribers, args.seconds, tcp=True),
                    ],
                    "lag": lag(master, agent, args.lags),
                    "stalled": stalled(master, agent, args.seconds),
                }
                with contextlib.suppress(Exception):
                    master.call("POST", "/maintenance/schedule", json={"windows": []})
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
