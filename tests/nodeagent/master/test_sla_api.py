"""The master's SLA endpoints in process: policies (scopes, store, audit), the probe by
hosts, by constraint and by grouping, and coordinators on loopback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nodeagent._auth import Scope
from nodeagent.master._coordinators import ask_coordinators, coordinator_client
from nodeagent.master._sla import Question
from slots import JobSpec, Machine, MachinePolicy, Resources, check_site_attributes
from tests.nodeagent.master.test_master_api import (
    EPOCH,
    HOOKS,
    FailingStore,
    api,
    error_code,
)

WEB = "www-data/prod/web"


def grouped_ad(name: str, rack: str, *ages: float, group: str = WEB) -> dict[str, Any]:
    """A node's ad with one instance of ``group`` per age (seconds up at EPOCH)."""
    machine = Machine(
        host=name,
        address=f"http://{name}:9621",
        total=Resources(cpus=8),
        policy=MachinePolicy(attributes=check_site_attributes({"Rack": rack}), hooks=HOOKS),
        now=EPOCH,
    )
    for age in ages:
        spec = JobSpec(group=group)
        machine.claim(EPOCH, resources=Resources(cpus=1), spec=spec, started_at=EPOCH - age)
    return machine.ad(EPOCH)


POLICY = {"kind": "count", "count": 4, "duration": 100}


async def test_policies_put_get_delete_with_scopes_audit_and_store(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        admin, read = a.token(Scope.ADMINISTRATOR, "alice"), a.token(Scope.READ, "bob")
        assert (await a.tcp.put(f"/v1/sla/policies/{WEB}", json=POLICY)).status_code == 401
        denied = await a.tcp.put(f"/v1/sla/policies/{WEB}", json=POLICY, headers=read)
        assert denied.status_code == 403
        put = await a.tcp.put(f"/v1/sla/policies/{WEB}", json=POLICY, headers=admin)
        assert put.status_code == 200, put.text
        assert put.json() == {"group": WEB, "source": "api", **POLICY}
        listed = await a.tcp.get("/v1/sla/policies", headers=read)
        assert listed.json() == {"policies": [put.json()]}
        assert (await a.tcp.get(f"/v1/sla/policies/{WEB}", headers=read)).json() == put.json()
        assert a.master.store.load("sla_policies") == {WEB: POLICY}
        bad = await a.tcp.put(f"/v1/sla/policies/{WEB}", json={"kind": "count"}, headers=admin)
        assert error_code(bad) == (422, "sla.invalid_policy")
        garbled = await a.tcp.put(f"/v1/sla/policies/{WEB}", content=b"{", headers=admin)
        assert error_code(garbled) == (422, "sla.invalid_policy")
        badgroup = await a.tcp.put("/v1/sla/policies/a//b", json=POLICY, headers=admin)
        assert error_code(badgroup) == (422, "sla.invalid_policy")
        assert isinstance(a.master.store, FailingStore)
        a.master.store.failing = True
        other = {"kind": "percentage", "percentage": 50, "duration": 0}
        full = await a.tcp.put(f"/v1/sla/policies/{WEB}", json=other, headers=admin)
        assert error_code(full) == (503, "store.error")
        gone = await a.tcp.delete(f"/v1/sla/policies/{WEB}", headers=admin)
        assert error_code(gone) == (503, "store.error")
        assert (await a.local.get(f"/v1/sla/policies/{WEB}")).json() == put.json()
        assert a.master.store.load("sla_policies") == {WEB: POLICY}
        a.master.store.failing = False
        deleted = await a.tcp.delete(f"/v1/sla/policies/{WEB}", headers=admin)
        assert deleted.json() == {"group": WEB, "in_force": None}
        missing = await a.tcp.get(f"/v1/sla/policies/{WEB}", headers=read)
        assert error_code(missing) == (404, "sla.no_such_policy")
        again = await a.tcp.delete(f"/v1/sla/policies/{WEB}", headers=admin)
        assert error_code(again) == (404, "sla.no_such_policy")
        assert a.audited() == [
            ("anonymous", "sla.policy.put", "auth.unauthenticated"),
            ("bob", "sla.policy.put", "auth.forbidden"),
            ("alice", "sla.policy.put", "ok"),
            ("alice", "sla.policy.put", "sla.invalid_policy"),
            ("alice", "sla.policy.put", "sla.invalid_policy"),
            ("alice", "sla.policy.put", "sla.invalid_policy"),
            ("alice", "sla.policy.put", "store.error"),
            ("alice", "sla.policy.delete", "store.error"),
            ("alice", "sla.policy.delete", "ok"),
            ("alice", "sla.policy.delete", "sla.no_such_policy"),
        ]


async def six_nodes(a: Any) -> None:
    """Six nodes in three racks, one instance each; node2's restarted 30 s ago."""
    for i, rack in enumerate(["r1", "r1", "r2", "r2", "r3", "r3"], start=1):
        age = 30.0 if i == 2 else 500.0
        assert (await a.push(grouped_ad(f"node{i}", rack, age))).status_code == 200


async def test_the_probe_by_hosts_constraint_and_grouping(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        await six_nodes(a)
        await a.local.put(f"/v1/sla/policies/{WEB}", json=POLICY)
        read = a.token(Scope.READ)
        one = (await a.tcp.get("/v1/sla/probe", params={"hosts": "node3"}, headers=read)).json()
        assert one["safe"] is True
        (group,) = one["host_groups"]
        assert (group["key"], group["hosts"], group["wait"]) == ("*", ["node3"], 0)
        assert group["groups"][0]["up"] == 4  # node2's instance is too young
        pair = await a.tcp.get("/v1/sla/probe", params={"hosts": "node3,node4"}, headers=read)
        (group,) = pair.json()["host_groups"]
        assert pair.json()["safe"] is False
        assert group["broken"] == [WEB]
        assert 60 < group["wait"] <= 70  # node2 reaches 100 s (the master's clock runs on)
        (verdict,) = group["groups"]
        assert (verdict["up"], verdict["needed"], verdict["down"]) == (3, 4, 2)
        racks = await a.tcp.get(
            "/v1/sla/probe",
            params={"constraint": "TotalCpus >= 8", "grouping": "Rack"},
            headers=read,
        )
        by_rack = {g["key"]: (g["hosts"], g["safe"]) for g in racks.json()["host_groups"]}
        assert by_rack == {
            "r1": (["node1", "node2"], True),  # node2 is not up long enough anyway
            "r2": (["node3", "node4"], False),
            "r3": (["node5", "node6"], False),
        }
        # node2 reaches 100 s in 70 s less the time the test has taken so far
        waits = {g["key"]: g["wait"] for g in racks.json()["host_groups"]}
        assert waits["r1"] == 0
        assert all(60 < waits[rack] <= 70 for rack in ("r2", "r3"))
        hosts = await a.tcp.get(
            "/v1/sla/probe", params={"hosts": "node1,node3,ghost", "grouping": "host"}, headers=read
        )
        keys = [(g["key"], g["unknown"], g["safe"]) for g in hosts.json()["host_groups"]]
        assert keys == [("ghost", ["ghost"], True), ("node1", [], True), ("node3", [], True)]


async def test_an_instance_on_a_node_shutting_down_counts_as_down(tmp_path: Path) -> None:
    """Its agent drains it for its machine's shutdown (and it reboots next): the probe
    counts it down, as it does a lost node's."""
    async with api(tmp_path) as a:
        await six_nodes(a)
        await a.local.put(f"/v1/sla/policies/{WEB}", json=POLICY)
        read = a.token(Scope.READ)
        probed = await a.tcp.get("/v1/sla/probe", params={"hosts": "node3"}, headers=read)
        assert probed.json()["safe"] is True
        going = grouped_ad("node4", "r2", 500.0)
        going["machine"]["ShuttingDown"] = True
        assert (await a.push(going)).status_code == 200
        probed = await a.tcp.get("/v1/sla/probe", params={"hosts": "node3"}, headers=read)
        (group,) = probed.json()["host_groups"]
        assert probed.json()["safe"] is False
        (verdict,) = group["groups"]
        assert (verdict["up"], verdict["down"]) == (3, 2)  # node3's and node4's


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"hosts": "a", "constraint": "true"},
        {"hosts": " , "},
        {"hosts": "a", "grouping": "Rack == 1"},
        {"hosts": "a", "grouping": "R" * 65},  # an attribute name is at most 64
        {"hosts": "a", "grouping": "Räck"},
    ],
)
async def test_a_bad_probe_is_422(tmp_path: Path, params: dict[str, str]) -> None:
    async with api(tmp_path) as a:
        reply = await a.tcp.get("/v1/sla/probe", params=params, headers=a.token(Scope.READ))
        assert error_code(reply) == (422, "request.invalid")


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,  # nested past the decoder's recursion limit
        b'{"kind": "count", "count": 4, "duration": NaN}',
        b'{"kind": "percentage", "percentage": Infinity}',
        b'{"kind": "count", "count": 4, "duration": 1}\xff',
    ],
)
async def test_a_body_that_is_no_json_policy_is_422_and_changes_nothing(
    tmp_path: Path, body: bytes
) -> None:
    async with api(tmp_path) as a:
        admin = a.token(Scope.ADMINISTRATOR, "alice")
        reply = await a.tcp.put(f"/v1/sla/policies/{WEB}", content=body, headers=admin)
        assert error_code(reply) == (422, "sla.invalid_policy")
        assert a.master.store.load("sla_policies") in (None, {})
        assert a.audited() == [("alice", "sla.policy.put", "sla.invalid_policy")]


async def test_a_probe_needs_read(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        assert (await a.tcp.get("/v1/sla/probe", params={"hosts": "a"})).status_code == 401
        assert (await a.tcp.get("/v1/sla/policies")).status_code == 401


async def test_a_costly_constraint_is_refused(tmp_path: Path) -> None:
    from tests.nodeagent.master.test_master_api import RUNAWAY

    async with api(tmp_path, budget=0.05) as a:
        await six_nodes(a)
        reply = await a.local.get("/v1/sla/probe", params={"constraint": RUNAWAY})
        assert error_code(reply) == (422, "expression.too_costly")


# ------------------------------------------------------------------ coordinators on loopback


@contextmanager
def coordinator(answer: Any, *, delay: float = 0.0, status: int = 200) -> Iterator[Any]:
    """A coordinator on 127.0.0.1 answering ``answer`` (JSON) after ``delay`` seconds; its
    ``asked`` list holds the bodies it received."""
    asked: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            asked.append(json.loads(self.rfile.read(length)))
            time.sleep(delay)
            body = json.dumps(answer).encode()
            # a master that gave up waiting (the tests of a slow coordinator) has gone
            with suppress(BrokenPipeError, ConnectionResetError):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.asked = asked  # type: ignore[attr-defined]
    server.url = f"http://127.0.0.1:{server.server_address[1]}/may"  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def question(url: str) -> Question:
    return Question(group="cache", url=url, hosts=("a",), instances=())


@pytest.mark.parametrize(
    ("answer", "status", "allow", "reason"),
    [
        ({"allow": True, "reason": "fine"}, 200, True, "fine"),
        ({"allow": False, "reason": "rebalancing"}, 200, False, "rebalancing"),
        ({"allow": True}, 200, True, "yes"),
        ({"allow": "yes"}, 200, False, 'the reply is not {"allow": true|false, ...}'),
        ([], 200, False, 'the reply is not {"allow": true|false, ...}'),
        ({"allow": True}, 500, False, "coordinator.error: HTTP 500"),
    ],
)
async def test_a_coordinators_answer(answer: Any, status: int, allow: bool, reason: str) -> None:
    with coordinator(answer, status=status) as server:
        answers = await ask_coordinators(
            [question(server.url)], client=coordinator_client(2.0), within=2.0
        )
    assert answers["cache"].allow is allow
    assert answers["cache"].reason.startswith(reason)


async def test_a_slow_or_absent_coordinator_is_a_no_within_the_timeout() -> None:
    with coordinator({"allow": True}, delay=1.5) as server:
        started = time.monotonic()
        answers = await ask_coordinators(
            [
                question(server.url),
                Question(group="gone", url="http://127.0.0.1:9/", hosts=(), instances=()),
            ],
            client=coordinator_client(0.3),
            within=0.3,
        )
        assert time.monotonic() - started < 1.2
    assert answers["cache"].allow is False
    assert "timeout" in answers["cache"].reason
    assert answers["gone"].allow is False
    assert answers["gone"].reason.startswith("coordinator.unreachable")


async def test_the_probe_asks_the_groups_coordinator(tmp_path: Path) -> None:
    with coordinator({"allow": False, "reason": "resharding"}) as server:
        async with api(tmp_path) as a:
            await six_nodes(a)
            policy = {"kind": "coordinator", "url": server.url}
            assert (await a.local.put(f"/v1/sla/policies/{WEB}", json=policy)).is_success
            reply = (await a.local.get("/v1/sla/probe", params={"hosts": "node5"})).json()
        (asked,) = server.asked
    assert asked["group"] == WEB
    assert asked["hosts"] == ["node5"]
    assert [i["node"] for i in asked["instances"]] == ["node5"]
    (group,) = reply["host_groups"]
    assert (group["safe"], group["wait"], group["broken"]) == (False, None, [WEB])
    assert group["groups"][0]["reason"] == f"coordinator {server.url}: no: resharding"
