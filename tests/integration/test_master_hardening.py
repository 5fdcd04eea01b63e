"""A real master under hostile input: a costly constraint is refused while the master
keeps answering, bad input is a clean 4xx, and its expression workers end with it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from slots import JobSpec, Machine, MachinePolicy, Resources
from tests.harness import MasterProcess, wait_for

#: ≈ 0.2 s per ad (up to the regex library's match limit): ≈ 10 s over 50 ads.
RUNAWAY = 'regexp("^(a+)+$", "' + "a" * 40 + '!")'


@pytest.fixture
def master(tmp_path: Path) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as m:
        yield m


def node_ad(name: str) -> dict[str, Any]:
    now = 1_800_000_000.0
    machine = Machine(
        host=name,
        ip="127.0.0.1",
        address="http://127.0.0.1:1",
        total=Resources(cpus=4),
        policy=MachinePolicy(),
        now=now,
    )
    machine.claim(now, resources=Resources(cpus=1), spec=JobSpec())
    return machine.ad(now)


def workers_of(master: MasterProcess) -> list[psutil.Process]:
    """The master's expression workers alive now."""
    assert master.proc is not None
    return [
        child
        for child in psutil.Process(master.proc.pid).children()
        if "nodeagent._expression_worker" in child.cmdline()
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
    with master.client(master.token("DAEMON", subject="agent@many")) as tcp:
        for i in range(50):
            assert tcp.post("/v1/ads", json=node_ad(f"n{i:02}.test")).status_code == 200
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
    with master.client(master.token("DAEMON", subject="agent@x")) as tcp:
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
    settings = {"reconcile_interval": 0.2, "ad_lifetime": 1}
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
