"""A real master under hostile input: a costly constraint is refused while the master
keeps answering, bad input is a clean 4xx, and its expression workers end with it; bodies
are checked from the headers before they are read and never held, a refused body gets its
reply and a closed connection, stalled connections are released, and a coordinator's
endless reply is not read past its cap."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from slots import JobSpec, Machine, MachinePolicy, Resources
from tests.harness import MasterProcess, costly_expression, wait_for
from tests.rawhttp import (
    MIB,
    check_stalled_connections_released,
    rss_mib,
    send_whole_body,
)

#: Some 3 s an ad on a quiet machine, 150 s over 50 ads, against the master's budget of 2 s.
RUNAWAY = costly_expression(6)


@pytest.fixture
def master(tmp_path: Path) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as m:
        yield m


def node_ad(name: str, *, group: str | None = None, now: float = 1_800_000_000.0) -> dict[str, Any]:
    """A node's ad with one job of 1 core (in job ``group`` when given), as of ``now``."""
    machine = Machine(
        host=name,
        ip="127.0.0.1",
        address="http://127.0.0.1:1",
        total=Resources(cpus=4),
        policy=MachinePolicy(),
        now=now,
    )
    machine.claim(now, resources=Resources(cpus=1), spec=JobSpec(group=group), started_at=now)
    return machine.ad(now)


def workers_of(master: MasterProcess) -> list[psutil.Process]:
    """The master's expression workers alive now."""
    assert master.proc is not None
    return [
        child
        for child in psutil.Process(master.proc.pid).children()
        if "nodeagent._expressions._worker" in child.cmdline()
    ]


def busy_worker(master: MasterProcess) -> psutil.Process | None:
    """A worker of the master that has been evaluating for a while."""
    for worker in workers_of(master):
        times = worker.cpu_times()
        if times.user + times.system > 0.3:
            return worker
    return None


def gone(process: psutil.Process) -> bool:
    try:
        return bool(process.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_a_costly_constraint_is_refused_while_the_master_answers(master: MasterProcess) -> None:
    for i in range(50):
        name = f"n{i:02}.test"
        with master.client(master.token("DAEMON", subject=f"agent@{name}", node=name)) as tcp:
            assert tcp.post("/v1/ads", json=node_ad(name)).status_code == 200
    replies: list[httpx.Response] = []
    costly = threading.Thread(
        target=lambda: replies.append(master.call("GET", "/v1/ads", params={"constraint": RUNAWAY}))
    )
    costly.start()
    try:
        worker = wait_for(lambda: busy_worker(master))
        # Mid-evaluation, the master answers over TCP and over its socket.
        health = httpx.get(f"{master.url}/healthz", timeout=30)
        listed = master.call("GET", "/v1/ads", params={"projection": "Name"})
        assert costly.is_alive()
    finally:
        costly.join(timeout=60)
    assert health.status_code == 200
    assert len(listed.json()["ads"]) == 50
    (reply,) = replies
    assert reply.status_code == 422
    assert reply.json()["error"]["code"] == "expression.too_costly"
    wait_for(lambda: gone(worker))
    # The next query has a new worker; a cheap constraint over the 50 ads answers.
    cheap = master.call("GET", "/v1/ads", params={"constraint": 'Name >= "n48"'})
    assert [ad["Name"] for ad in cheap.json()["ads"]] == ["n48.test", "n49.test"]
    workers = workers_of(master)
    assert len(workers) == 1
    master.stop()
    # An idle worker ends with the master (the end of its stdin).
    wait_for(lambda: all(gone(w) for w in workers))


def test_bad_input_is_a_clean_4xx_and_changes_nothing(master: MasterProcess) -> None:
    nul = master.call("GET", "/v1/ads", params={"constraint": "true\x00"})
    assert (nul.status_code, nul.json()["error"]["code"]) == (422, "request.invalid")
    with master.client(master.token("DAEMON", subject="agent@x", node="x.test")) as tcp:
        ad = node_ad("x.test")
        ad["slots"][-1]["DrainSuspendedJobs"] = []
        refused = tcp.post("/v1/ads", json=ad)
        deep = tcp.post("/v1/ads", content=b'{"machine": ' + b"[" * 50_000 + b"]" * 50_000)
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "request.invalid")
    assert (deep.status_code, deep.json()["error"]["code"]) == (422, "request.invalid")
    assert master.call("GET", "/v1/ads").json() == {"ads": []}
    schedule = {
        "windows": [
            {
                "machine_ids": [{"hostname": "a.test"}],
                "unavailability": {"start": {"nanoseconds": 2 * 10**18}},
            }
        ]
    }
    assert master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
    body = '{"windows": ' + "[" * 50_000 + "]" * 50_000 + "}"
    response = master.call("POST", "/maintenance/schedule", content=body)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text.startswith("syntax error at line 1 near: [[[")
    assert master.call("GET", "/maintenance/schedule").json() == schedule
    records = [
        json.loads(line) for line in (master.root / "state" / "audit.log").read_text().splitlines()
    ]
    assert [(r["action"], r["result"]) for r in records] == [
        ("maintenance.schedule", "ok"),
        ("maintenance.schedule", "maintenance.bad_json"),
    ]
    # The master is still whole.
    assert httpx.get(f"{master.url}/healthz", timeout=30).status_code == 200


def test_a_name_holding_a_newline_cannot_forge_a_line_of_the_masters_log(
    tmp_path: Path,
) -> None:
    """An ad whose text holds control characters is refused (422, nothing stored): no name of
    a node can put a line of its own in the log, or an escape sequence on a terminal; what
    the master does log of the refusal is escaped."""
    forged = "evil\n2030-01-01 00:00:00,000 WARNING nodeagent.master: n1 is DOWN\u2028x\x1b[2J"
    # A pool-wide token (no node claim), so that the forged name reaches the ad's checks.
    settings = {"reconcile_interval": 0.2, "ad_lifetime": 1, "allow_pool_daemon_tokens": True}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        ad = node_ad("evil.test")
        ad["machine"]["Name"] = forged
        with master.client(master.token("DAEMON", subject="agent@evil")) as tcp:
            refused = tcp.post("/v1/ads", json=ad)
            assert refused.status_code == 422
            assert refused.json()["error"]["code"] == "request.invalid"
            assert "control character" in refused.json()["error"]["message"]
            assert tcp.get("/v1/ads").json()["ads"] == []
            ad["machine"]["Name"] = "evil.test"
            assert tcp.post("/v1/ads", json=ad).status_code == 200  # the same, printable
    log = master.log_path.read_text()
    assert not any(line.startswith("2030-01-01") for line in log.splitlines())
    assert "\x1b" not in log
    assert "\u2028" not in log


# --------------------------------------------------------------------------------------------
# Bounded reads: bodies checked from the headers first, refused bodies closed, stalled
# connections released, coordinators' replies capped.


@pytest.fixture(scope="module")
def shared_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    root = tmp_path_factory.mktemp("shared") / "master"
    with MasterProcess(root, settings={"reconcile_interval": 0.5}) as m:
        yield m


class PeakRss:
    """The largest RSS of ``pid`` seen while the block runs (sampled in a thread)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_mib(pid)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, rss_mib(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib(self.pid))


def in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` for ``i`` in range(count), all at once; their results (or errors raised)."""
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        try:
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_anonymous_bodies_are_refused_from_the_headers_and_never_held(
    shared_master: MasterProcess,
) -> None:
    """16 anonymous 30 MB schedules at once: each is answered 401 and closed, and the
    master holds none of them (they were read whole before the token was checked)."""
    assert shared_master.proc is not None
    before = rss_mib(shared_master.proc.pid)
    with PeakRss(shared_master.proc.pid) as rss:
        replies = in_threads(
            16,
            lambda i: send_whole_body(shared_master.url, "/maintenance/schedule", 30_000_000, None),
        )
    for reply in replies:
        assert not isinstance(reply, Exception), reply
        status, _, body = reply
        assert (status, json.loads(body)["error"]["code"]) == (401, "auth.unauthenticated")
    assert rss.peak - before < 100
    assert shared_master.call("GET", "/maintenance/schedule").json() == {}


def test_a_refused_body_gets_its_reply_and_a_closed_connection(
    shared_master: MasterProcess,
) -> None:
    """Sent whole, then answered, then closed, 20 times in a row: an anonymous 8 MiB body,
    and an ADMINISTRATOR's over its endpoint's cap (1 MiB for an SLA policy)."""
    administrator = shared_master.token("ADMINISTRATOR")
    for _ in range(20):
        status, headers, body = send_whole_body(shared_master.url, "/machine/down", 8 * MIB, None)
        assert (status, headers["connection"]) == (401, "close"), body
        status, _, body = send_whole_body(
            shared_master.url, "/v1/sla/policies/web", 8 * MIB, administrator, method="PUT"
        )
        assert (status, json.loads(body)["error"]["code"]) == (413, "request.too_large")
    assert shared_master.call("GET", "/v1/sla/policies").json()["policies"] == []
    records = [
        json.loads(line)
        for line in (shared_master.root / "state" / "audit.log").read_text().splitlines()
    ]
    assert ("machine.down", "anonymous", "auth.unauthenticated") in {
        (r["action"], r["subject"], r["result"]) for r in records
    }


class EndlessCoordinator:
    """A coordinator that answers 200 with a chunked JSON body that never ends."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/may"
        self.asked = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            with contextlib.suppress(OSError):
                conn.recv(65536)  # the question (its reply does not depend on it)
                self.asked += 1
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                chunk = b"a" * 65536
                conn.sendall(b'1b\r\n{"allow": true, "reason": "\r\n')
                while True:
                    conn.sendall(b"10000\r\n" + chunk + b"\r\n")

    def __enter__(self) -> EndlessCoordinator:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()
        self.thread.join(timeout=10)


def test_a_coordinator_streaming_forever_is_a_no_that_says_why(
    shared_master: MasterProcess,
) -> None:
    """Three probes at once against a coordinator whose reply never ends: each says why
    the group is not safe, and the master's memory stays where it was."""
    assert shared_master.proc is not None
    with EndlessCoordinator() as coordinator:
        with shared_master.client(
            shared_master.token("DAEMON", subject="agent@c1", node="c1.test")
        ) as tcp:
            assert (
                tcp.post(
                    "/v1/ads", json=node_ad("c1.test", group="svc", now=time.time())
                ).status_code
                == 200
            )
        policy = {"kind": "coordinator", "url": coordinator.url}
        assert shared_master.call("PUT", "/v1/sla/policies/svc", json=policy).is_success
        before = rss_mib(shared_master.proc.pid)
        with PeakRss(shared_master.proc.pid) as rss:
            probes = in_threads(
                3,
                lambda i: shared_master.call(
                    "GET", "/v1/sla/probe", params={"hosts": "c1.test"}
                ).json(),
            )
        shared_master.call("DELETE", "/v1/sla/policies/svc")
    for probe in probes:
        assert not isinstance(probe, Exception), probe
        (group,) = probe["host_groups"][0]["groups"]
        assert group["reason"].startswith(f"coordinator {coordinator.url}: no: ")
        assert "coordinator.bad_reply" in group["reason"]
        assert "too large" in group["reason"]
    assert coordinator.asked == 3
    assert rss.peak - before < 100


def test_stalled_connections_are_released_by_the_read_timeout(tmp_path: Path) -> None:
    """300 anonymous connections that declare a body and stall: each is closed after
    ``read_timeout``, its descriptor with it."""
    settings = {"read_timeout": "1s"}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        assert master.proc is not None
        check_stalled_connections_released(master.url, master.proc.pid, "/maintenance/schedule")
        assert httpx.get(f"{master.url}/healthz", timeout=30).status_code == 200


def test_a_preview_takes_a_body_as_large_as_its_write(shared_master: MasterProcess) -> None:
    """A preview takes what its write takes (16 MiB: the schedule of a large pool), not
    the 1 MiB of the other endpoints; beyond that it is refused before it is read whole."""
    empty = b'{"windows": []}'
    with shared_master.client(shared_master.token("READ")) as c:
        padding = b" " * (2 * MIB)
        json_type = {"Content-Type": "application/json"}
        reply = c.post(
            "/v1/maintenance/schedule/preview", content=empty + padding, headers=json_type
        )
        assert reply.status_code == 200, reply.text[:300]
        assert reply.json()["totals"]["machines"] == 0
        # read whole and parsed: the list's own rule answers, not the cap
        reply = c.post("/v1/maintenance/down/preview", content=b"[]" + padding, headers=json_type)
        assert (reply.status_code, reply.text) == (400, "List of machines is empty")
        big = c.post(
            "/v1/maintenance/schedule/preview",
            content=empty + b" " * (17 * MIB),
            headers={"Content-Type": "application/json"},
        )
        assert (big.status_code, big.json()["error"]["code"]) == (413, "request.too_large")
