"""The agent API's edges, in process: authentication before the body, the body cap, bad
input as clean 4xx, every refusal audited, a failed write as 503, the OpenAPI document.

The app runs over ``httpx.ASGITransport`` with fake jobs and a store that fails on demand;
what needs real sockets (a body refused before it is read) is in
``tests/integration/test_agent_hardening.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from nodeagent._audit import AuditLog
from nodeagent._auth import Scope, create_token
from nodeagent._clock import TrioClock
from nodeagent._expressions._evaluator import Evaluator
from nodeagent._serving._http import trusted
from nodeagent._store import StoreError
from nodeagent.agent._agent import Agent
from nodeagent.agent._api import BODY_LIMIT, agent_openapi, build_app
from nodeagent.agent._metrics import AgentMetrics
from nodeagent.agent._processes import LaunchSpec
from nodeagent.agent._store import ProcessRecord, Store
from nodeagent.testing import FakeBehaviour, FakeRunner
from slots import Machine, MachinePolicy, Resources

EPOCH = 1_800_000_000.0
KEY = b"k" * 32


class FailingStore:
    """The store seam's fake: a real store that refuses to write while ``failing``."""

    def __init__(self, path: Path) -> None:
        self.store = Store(path)
        self.failing = False

    def save(self, machine: dict[str, Any], processes: Mapping[str, ProcessRecord]) -> None:
        if self.failing:
            raise StoreError("database or disk is full")
        self.store.save(machine, processes)


@dataclass
class Api:
    agent: Agent
    runner: FakeRunner
    store: FailingStore
    audit_path: Path
    local: httpx.AsyncClient  # as over the Unix socket: ADMINISTRATOR
    tcp: httpx.AsyncClient  # as over TCP: tokens needed

    def token(self, scope: Scope, subject: str = "tester") -> dict[str, str]:
        token = create_token(KEY, subject=subject, scope=scope, lifetime_s=3600, now=EPOCH)
        return {"Authorization": f"Bearer {token}"}

    def audited(self) -> list[tuple[str, str, str, str | None]]:
        lines = self.audit_path.read_text().splitlines()
        return [
            (r["subject"], r["action"], r["result"], r["request_id"])
            for r in map(json.loads, lines)
        ]


def _behaviour(spec: LaunchSpec) -> FakeBehaviour:
    if spec.argv[0] == "fault":
        raise RuntimeError("a fault in the agent")
    return FakeBehaviour()


@asynccontextmanager
async def api(
    tmp_path: Path, *, body_limit: int = BODY_LIMIT, evaluator: Evaluator | None = None
) -> AsyncIterator[Api]:
    clock = TrioClock(EPOCH)
    runner = FakeRunner(_behaviour, clock=clock)
    machine = Machine(
        host="vnode", total=Resources(cpus=8, memory=16384), policy=MachinePolicy(), now=EPOCH
    )
    store = FailingStore(tmp_path / "agent.db")
    agent = Agent(
        machine=machine,
        store=store,
        runner=runner,
        clock=clock,
        execute_dir=tmp_path / "execute",
        usage_interval=0,
        evaluator=evaluator,
    )
    audit_path = tmp_path / "audit.log"
    with AuditLog(audit_path) as audit:
        app = build_app(
            agent, key=KEY, audit=audit, metrics=AgentMetrics(agent.ad), body_limit=body_limit
        )
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=trusted(app)), base_url="http://unix"
            ) as local,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app, client=("192.0.2.7", 40000)),
                base_url="http://tcp",
            ) as tcp,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(runner.run)
            await nursery.start(agent.run)
            yield Api(
                agent=agent,
                runner=runner,
                store=store,
                audit_path=audit_path,
                local=local,
                tcp=tcp,
            )
            nursery.cancel_scope.cancel()
    store.store.close()


def code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


# ------------------------------------------------------------------ authentication first


async def test_an_anonymous_write_is_401_before_its_body_is_looked_at(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        for body in (b"{not json", json.dumps({"schedule": "slow"}).encode(), b"\xff" * 10):
            response = await a.tcp.post("/v1/drain", content=body)
            assert code(response) == (401, "auth.unauthenticated")
            assert response.headers["WWW-Authenticate"] == "Bearer"
        # Over the cap too: the size is not looked at before the caller is known.
        big = await a.tcp.post("/v1/claims", content=b"x" * (BODY_LIMIT + 1))
        assert code(big) == (401, "auth.unauthenticated")
        read = await a.tcp.post("/v1/drain", content=b"{", headers=a.token(Scope.READ))
        assert code(read) == (403, "auth.forbidden")
        assert a.agent.machine.request is None


async def test_a_token_bound_to_another_node_is_refused_and_one_for_this_node_is_taken(
    tmp_path: Path,
) -> None:
    """A token a daemon minted for one node (``aud``) works there only: another agent
    refuses it (401 ``auth.wrong_audience``), whatever its scope; this agent takes its own
    with the scope it carries (a READ one does not drain); operators' tokens (no ``aud``)
    work as before."""
    async with api(tmp_path) as a:

        def bound(scope: Scope, audience: str) -> dict[str, str]:
            token = create_token(
                KEY, subject="master:master", scope=scope, lifetime_s=60, now=EPOCH,
                audience=audience,
            )  # fmt: skip
            return {"Authorization": f"Bearer {token}"}

        elsewhere = bound(Scope.ADMINISTRATOR, "other.node")
        for method, path in (("GET", "/v1/ad"), ("POST", "/v1/drain"), ("POST", "/v1/claims")):
            refused = await a.tcp.request(method, path, json={}, headers=elsewhere)
            assert code(refused) == (401, "auth.wrong_audience"), path
            assert refused.headers["WWW-Authenticate"] == "Bearer"
        read_here = bound(Scope.READ, "vnode")
        assert (await a.tcp.get("/v1/ad", headers=read_here)).status_code == 200
        write = await a.tcp.post("/v1/drain", json={"schedule": "fast"}, headers=read_here)
        assert code(write) == (403, "auth.forbidden")
        assert a.agent.machine.request is None
        admin_here = bound(Scope.ADMINISTRATOR, "vnode")
        drained = await a.tcp.post("/v1/drain", json={"schedule": "fast"}, headers=admin_here)
        assert drained.status_code == 201, drained.text
        assert (await a.tcp.get("/v1/ad", headers=a.token(Scope.READ))).status_code == 200


async def test_only_healthz_is_anonymous_on_tcp(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        assert (await a.tcp.get("/healthz")).status_code == 200
        for path in ("/v1/openapi.json", "/v1/ad", "/metrics", "/no/such/path"):
            assert code(await a.tcp.get(path)) == (401, "auth.unauthenticated"), path
        assert code(await a.tcp.put("/v1/drain")) == (401, "auth.unauthenticated")
        read = a.token(Scope.READ)
        assert (await a.tcp.get("/v1/openapi.json", headers=read)).json() == agent_openapi()
        assert code(await a.tcp.get("/no/such/path", headers=read)) == (404, "http.not_found")
        assert (await a.local.get("/v1/openapi.json")).status_code == 200


async def test_405_names_the_allowed_methods(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        for path, allowed in [
            ("/v1/drain", "DELETE, GET, POST"),
            ("/v1/claims/7", "DELETE, GET"),
            ("/v1/drain/1/commit", "POST"),
        ]:
            response = await a.local.put(path)
            assert code(response) == (405, "http.method_not_allowed")
            assert response.headers["Allow"] == allowed


# ------------------------------------------------------------------ bodies


async def test_a_body_over_the_cap_is_413(tmp_path: Path) -> None:
    async with api(tmp_path, body_limit=1000) as a:
        text = json.dumps({"schedule": "graceful", "reason": "r"})
        exact = (text[:-1] + " " * (1000 - len(text)) + "}").encode()
        over = exact[:-1] + b" }"
        assert (len(exact), len(over)) == (1000, 1001)
        as_json = {"content-type": "application/json"}
        response = await a.local.post("/v1/drain", content=over, headers=as_json)
        assert code(response) == (413, "request.too_large")
        admin = a.token(Scope.ADMINISTRATOR)
        response = await a.tcp.post("/v1/drain", content=over, headers=as_json | admin)
        assert code(response) == (413, "request.too_large")
        assert a.agent.machine.request is None
        response = await a.local.post("/v1/drain", content=exact, headers=as_json)
        assert response.status_code == 201


async def test_a_chunked_body_is_refused_once_past_the_cap(tmp_path: Path) -> None:
    async with api(tmp_path, body_limit=1000) as a:
        app = build_app(
            a.agent, key=KEY, audit=None, metrics=AgentMetrics(a.agent.ad), body_limit=1000
        )
        chunks = [b'{"reason": "', *([b"a" * 300] * 100), b'"}']
        read: list[int] = []
        sent: list[dict[str, Any]] = []
        read_when_sent: list[int] = []

        async def receive() -> dict[str, Any]:
            read.append(len(read))
            more = len(read) < len(chunks)
            return {"type": "http.request", "body": chunks[len(read) - 1], "more_body": more}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))
            read_when_sent.append(len(read))

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "path": "/v1/drain",
            "raw_path": b"/v1/drain",
            "root_path": "",
            "scheme": "http",
            "query_string": b"",
            "headers": [(b"transfer-encoding", b"chunked")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
            "nodeagent.unix": True,
        }
        await app(scope, receive, send)
        assert sent[0]["status"] == 413
        assert (b"connection", b"close") in sent[0]["headers"]
        assert json.loads(sent[1]["body"])["error"]["code"] == "request.too_large"
        # 12 + 3 * 300 bytes fit; the fifth chunk passes the cap, and the refusal leaves
        assert read_when_sent[:2] == [5, 5]
        # The reply ends once the rest is read and dropped (the server then closes).
        assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
        assert len(read) == len(chunks) == read_when_sent[-1]


async def test_a_client_gone_before_its_body_is_audited_as_abandoned(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        audit = AuditLog(tmp_path / "raw.log")
        app = build_app(a.agent, key=KEY, audit=audit, metrics=AgentMetrics(a.agent.ad))
        messages: list[dict[str, Any]] = [
            {"type": "http.request", "body": b'{"reason": ', "more_body": True},
            {"type": "http.disconnect"},
        ]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "path": "/v1/drain",
            "raw_path": b"/v1/drain",
            "root_path": "",
            "scheme": "http",
            "query_string": b"",
            "headers": [],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
            "nodeagent.unix": True,
        }
        await app(scope, receive, send)
        audit.close()
        assert sent == []
        assert a.agent.machine.request is None
        (line,) = (tmp_path / "raw.log").read_text().splitlines()
        assert json.loads(line)["result"] == "request.abandoned"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"reason": "\xff\xfe"}', id="invalid-utf8"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="deep"),
        pytest.param(b'{"reason": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001, id="deep-object"),
        pytest.param(b"{not json", id="not-json"),
    ],
)
async def test_unreadable_bodies_are_422(tmp_path: Path, body: bytes) -> None:
    async with api(tmp_path) as a:
        response = await a.local.post("/v1/drain", content=body)
        assert code(response) == (422, "request.invalid")
        assert a.agent.machine.request is None


# ------------------------------------------------------------------ bad values


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/v1/claims", {"pid": 3453422734}, id="pid-beyond-linux"),
        pytest.param("/v1/claims", {"pid": 2**70}, id="pid-beyond-int64"),
        pytest.param("/v1/claims", {"command": ["true"], "env": {"A": "b\x00"}}, id="env-nul"),
        pytest.param("/v1/claims", {"command": ["true"], "env": {"A=B": "x"}}, id="env-equals"),
        pytest.param("/v1/claims", {"command": ["true"], "env": {"": "x"}}, id="env-empty-name"),
        pytest.param("/v1/claims", {"command": ["true"], "cwd": "a\x00"}, id="cwd-nul"),
        pytest.param("/v1/claims", {"command": ["true"], "cwd": "/etc"}, id="cwd-absolute"),
        pytest.param("/v1/claims", {"command": ["true"], "cwd": "../.."}, id="cwd-escapes"),
        pytest.param("/v1/claims", {"command": ["true"], "cwd": "a/../../b"}, id="cwd-escapes-2"),
        pytest.param("/v1/claims", {"command": ["true"], "user": "root\x00"}, id="user-nul"),
        pytest.param("/v1/claims", {"command": ["tr\x00ue"]}, id="argv-nul"),
        pytest.param("/v1/claims", {"command": ["true"], "owner": "eve\x85"}, id="owner-c1"),
        pytest.param("/v1/claims", {"command": ["true"], "owner": "eve\u2028"}, id="owner-ls"),
        pytest.param("/v1/claims", {"command": ["true"], "job_id": "j\u2029"}, id="job-id-ps"),
        pytest.param("/v1/claims", {"pid": 1234, "env": {}}, id="pid-with-env"),
        pytest.param("/v1/drain", {"reason": "a\u2028b"}, id="reason-ls"),
        pytest.param("/v1/drain", {"reason": "a\x9bb"}, id="reason-c1"),
        pytest.param("/v1/drain", {"reason": "a\u200bb"}, id="reason-zero-width"),
        pytest.param("/v1/drain", {"check": "true\x00", "commit": True}, id="check-nul"),
        pytest.param("/v1/drain", {"start": "Cpus > 1\x00"}, id="start-nul"),
        pytest.param(
            "/v1/drain", {"check": "1" + "+1" * 600 + " > 0", "commit": True}, id="check-deep"
        ),
        pytest.param(
            "/v1/drain", {"start": "Cpus" + " && Cpus" * 450}, id="start-over-the-library"
        ),
    ],
)
async def test_bad_values_are_422_audited_and_change_nothing(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    async with api(tmp_path) as a:
        before = a.agent.machine.snapshot()
        response = await a.local.post(path, json=body)
        assert code(response) == (422, "request.invalid"), response.text
        assert a.agent.machine.snapshot() == before
        assert a.runner.launched == []
        action = "claim.create" if path == "/v1/claims" else "drain.start"
        assert a.audited() == [("local", action, "request.invalid", None)]


async def test_a_deep_but_accepted_expression_evaluates(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        check = "true" + " && true" * 100
        response = await a.local.post("/v1/drain", json={"check": check, "commit": True})
        assert response.status_code == 201, response.text


# ------------------------------------------------------------------ audit


async def test_every_refused_write_is_audited_with_its_code(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        admin = a.token(Scope.ADMINISTRATOR, subject="alice")
        await a.tcp.post("/v1/drain", json={})  # anonymous
        await a.tcp.delete("/v1/drain", headers=a.token(Scope.READ, subject="bob"))
        created = await a.tcp.post("/v1/drain", json={"reason": "r"}, headers=admin)
        await a.tcp.post("/v1/drain", json={}, headers=admin)  # a second one
        await a.tcp.post("/v1/drain/99/commit", headers=admin)
        await a.tcp.post(f"/v1/drain/{created.json()['id']}/cancel", headers=admin)
        await a.tcp.post("/v1/claims/5/suspend", headers=admin)
        await a.tcp.post("/v1/claims", json={"pid": 1}, headers=admin)
        assert a.audited() == [
            ("anonymous", "drain.start", "auth.unauthenticated", None),
            ("bob", "drain.cancel", "auth.forbidden", None),
            ("alice", "drain.start", "ok", "1"),
            ("alice", "drain.start", "drain.in_progress", None),
            ("alice", "drain.commit", "drain.no_such_request", "99"),
            ("alice", "drain.cancel", "ok", "1"),
            ("alice", "claim.suspend", "claim.no_such_claim", "5"),
            ("alice", "claim.create", "request.invalid", None),
        ]
        peers = {json.loads(line)["peer"] for line in a.audit_path.read_text().splitlines()}
        assert peers == {"192.0.2.7:40000"}


# ------------------------------------------------------------------ a failed write


async def test_a_failed_write_is_503_store_error_and_changes_nothing(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        claim = await a.local.post("/v1/claims", json={"command": ["job"]})
        claim_id = claim.json()["id"]
        drain = await a.local.post("/v1/drain", json={"ttl": 100})
        a.store.failing = True
        refused = [
            await a.local.post(f"/v1/drain/{drain.json()['id']}/commit"),
            await a.local.post(f"/v1/drain/{drain.json()['id']}/cancel"),
            await a.local.delete("/v1/drain"),
        ]
        a.store.failing = False
        await a.local.delete("/v1/drain")
        a.store.failing = True
        refused += [
            await a.local.post("/v1/claims", json={"command": ["job"]}),
            await a.local.post("/v1/drain", json={}),
            await a.local.post(f"/v1/claims/{claim_id}/suspend"),
            await a.local.delete(f"/v1/claims/{claim_id}"),
        ]
        for response in refused:
            assert code(response) == (503, "store.error"), response.text
        listed = (await a.local.get("/v1/claims")).json()["claims"]
        assert [(c["id"], c["activity"]) for c in listed] == [(claim_id, "Busy")]
        assert (await a.local.get("/v1/drain")).json()["state"] == "none"
        second = list(a.runner.processes.values())[1]
        assert not second.started
        assert second.exited()
        assert [r[1:3] for r in a.audited()][2:] == [
            ("drain.commit", "store.error"),
            ("drain.cancel", "store.error"),
            ("drain.cancel", "store.error"),
            ("drain.cancel", "ok"),
            ("claim.create", "store.error"),
            ("drain.start", "store.error"),
            ("claim.suspend", "store.error"),
            ("claim.release", "store.error"),
        ]


async def test_a_fault_is_a_clean_audited_500(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        response = await a.local.post("/v1/claims", json={"command": ["fault"]})
        assert code(response) == (500, "internal.error")
        assert "fault in the agent" not in response.text  # the details stay in the log
        assert a.audited() == [("local", "claim.create", "internal.error", None)]
        assert (await a.local.get("/healthz")).status_code == 200


# ------------------------------------------------------------------ callers' expressions

#: Some 2 s of evaluation on a quiet machine (40 backtracking regexps, each false after about
#: 0.05 s), against budgets of 0.3 s, inside the size caps.
COSTLY = " || ".join(['regexp("^(a+)+$", "' + "a" * 21 + '!")'] * 40)


async def test_a_costly_check_is_422_audited_and_changes_nothing(tmp_path: Path) -> None:
    evaluator = Evaluator(budget=0.3)
    async with api(tmp_path, evaluator=evaluator) as a:
        before = a.agent.machine.snapshot()
        response = await a.local.post("/v1/drain", json={"check": COSTLY, "commit": True})
        assert code(response) == (422, "expression.too_costly"), response.text
        assert a.agent.machine.snapshot() == before
        assert a.agent.machine.request is None
        assert a.audited() == [("local", "drain.start", "expression.too_costly", None)]
        assert evaluator.killed == 1
        # the next check starts a new worker
        response = await a.local.post("/v1/drain", json={"check": "TotalCpus == 8", "commit": True})
        assert response.status_code == 201, response.text
    assert evaluator.pids() == []


async def test_a_cheap_check_is_evaluated_by_the_workers(tmp_path: Path) -> None:
    evaluator = Evaluator()
    async with api(tmp_path, evaluator=evaluator) as a:
        for check in ("TotalCpus == 7", "NoSuchAttribute == 1", "Start =?= false"):
            response = await a.local.post("/v1/drain", json={"check": check, "commit": True})
            assert code(response) == (412, "drain.check_failed"), check
        assert a.agent.machine.request is None
        response = await a.local.post(
            "/v1/drain", json={"check": "TotalCpus == 8 && Start", "commit": True}
        )
        assert response.status_code == 201, response.text
        assert response.json()["state"] == "drained"
        assert evaluator.started == 1
        assert len(evaluator.pids()) == 1
    assert evaluator.pids() == []


async def test_the_literal_checks_need_no_worker(tmp_path: Path) -> None:
    evaluator = Evaluator()
    async with api(tmp_path, evaluator=evaluator) as a:
        response = await a.local.post("/v1/drain", json={"check": "false", "commit": True})
        assert code(response) == (412, "drain.check_failed")
        response = await a.local.post("/v1/drain", json={"check": " TRUE ", "commit": True})
        assert response.status_code == 201, response.text
        assert evaluator.started == 0


class RecordingEvaluator(Evaluator):
    """Records what it was asked; optionally runs ``meanwhile`` during the first request."""

    def __init__(self) -> None:
        super().__init__(budget=5)
        self.asked: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        self.meanwhile: Any = None

    async def is_true(
        self,
        text: str,
        my: Mapping[str, Any],
        target: Mapping[str, Any] | None = None,
    ) -> bool:
        self.asked.append((text, dict(my), None if target is None else dict(target)))
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return await super().is_true(text, my, target)


async def _graceful_drain_with_start(a: Api, start: str) -> None:
    a.agent.reload_policy(MachinePolicy(max_job_retirement_time=3600))
    original = {"command": ["job"], "cpus": 2, "max_job_retirement_time": 3600}
    response = await a.local.post("/v1/claims", json=original)
    assert response.status_code == 201, response.text
    response = await a.local.post(
        "/v1/drain", json={"schedule": "graceful", "start": start, "commit": True}
    )
    assert response.status_code == 201, response.text
    assert response.json()["state"] == "draining"


async def test_a_drains_start_admits_and_refuses_claims_through_the_workers(
    tmp_path: Path,
) -> None:
    evaluator = RecordingEvaluator()
    async with api(tmp_path, evaluator=evaluator) as a:
        await _graceful_drain_with_start(a, "TARGET.RequestCpus <= 2 && MY.Cpus >= 2")
        small = {"command": ["job"], "cpus": 1, "job_id": "small"}
        response = await a.local.post("/v1/claims", json=small)
        assert response.status_code == 201, response.text
        assert response.json()["accepted_while_draining"] is True
        response = await a.local.post("/v1/claims", json={"command": ["job"], "cpus": 3})
        assert code(response) == (409, "machine.not_accepting")
        response = await a.local.post("/v1/claims", json={"command": ["job"], "cpus": 1})
        assert response.status_code == 201, response.text
        # each evaluation saw the slot's scope and the job's ad the model used then
        (text, my, target), *_ = evaluator.asked
        assert text == "TARGET.RequestCpus <= 2 && MY.Cpus >= 2"
        assert (my["Cpus"], my["TotalCpus"], target) == (
            6,
            8,
            {
                "Owner": "local",
                "JobId": "small",
                "RequestCpus": 1,
                "RequestMemory": 0,
                "RequestDisk": 0,
                "RequestGPUs": 0,
                "MaxJobRetirementTime": None,
                "JobMaxVacateTime": None,
            },
        )
        assert len(a.runner.launched) == 3  # the refused job was never launched
    assert evaluator.pids() == []


async def test_a_start_is_evaluated_again_when_the_machine_changed_meanwhile(
    tmp_path: Path,
) -> None:
    evaluator = RecordingEvaluator()
    async with api(tmp_path, evaluator=evaluator) as a:
        await _graceful_drain_with_start(a, "MY.Cpus >= 6")
        first = await a.local.post("/v1/claims", json={"command": ["job"], "cpus": 1})
        assert first.status_code == 201
        claim_id = first.json()["id"]

        async def release_the_latecomer() -> None:
            response = await a.local.delete(f"/v1/claims/{claim_id}")
            assert response.status_code == 200, response.text
            await trio.sleep(1)  # its job ends on SIGTERM: the slot gets its cpu back

        evaluator.meanwhile = release_the_latecomer
        response = await a.local.post("/v1/claims", json={"command": ["job"], "cpus": 1})
        assert response.status_code == 201, response.text
        # asked with 5 cpus free (false), then again with 6 once the slot came back (true)
        assert [my["Cpus"] for _, my, _ in evaluator.asked[1:]] == [5, 6]


async def test_a_costly_start_refuses_the_claim_and_launches_nothing(tmp_path: Path) -> None:
    evaluator = Evaluator(budget=0.3)
    async with api(tmp_path, evaluator=evaluator) as a:
        await _graceful_drain_with_start(a, COSTLY)
        before = a.agent.machine.snapshot()
        response = await a.local.post("/v1/claims", json={"command": ["job"], "cpus": 1})
        assert code(response) == (422, "expression.too_costly"), response.text
        assert a.agent.machine.snapshot() == before
        assert len(a.runner.launched) == 1
        assert a.audited()[-1] == ("local", "claim.create", "expression.too_costly", None)
    assert evaluator.pids() == []


async def test_a_claims_audit_details_name_its_environment_never_its_values(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        body = {"command": ["sleep"], "cpus": 2, "env": {"TOKEN": "s3cret", "A": "1"}}
        created = await a.local.post("/v1/claims", json=body)
        assert created.status_code == 201, created.text
        (record,) = map(json.loads, a.audit_path.read_text().splitlines())
    assert record["action"] == "claim.create"
    assert record["details"]["command"] == ["sleep"]
    assert record["details"]["cpus"] == 2
    assert record["details"]["env"] == ["A", "TOKEN"]
    assert "s3cret" not in a.audit_path.read_text()
