"""The agent API and completion hooks, in process: a request names a hook, never a command;
an unknown hook is refused and changes nothing; replies say whether the node is back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from nodeagent._audit import AuditLog
from nodeagent._clock import TrioClock
from nodeagent._serving._http import trusted
from nodeagent.agent._agent import Agent
from nodeagent.agent._api import build_app
from nodeagent.agent._hooks import HealthSpec, HookSpec
from nodeagent.agent._metrics import AgentMetrics
from nodeagent.agent._store import Store
from slots import HealthPolicy, Machine, MachinePolicy, Resources
from tests.nodeagent.agent.test_hooks_agent import Runner

EPOCH = 1_800_000_000.0

HOOKS = {
    "reboot": HookSpec(name="reboot", command=("hook-reboot",), timeout=60, reboots=True),
    "broken": HookSpec(name="broken", command=("hook-broken",), timeout=60),
}


@dataclass
class Api:
    agent: Agent
    runner: Runner
    client: httpx.AsyncClient
    audit_path: Path

    def audited(self) -> list[tuple[str, str, str | None]]:
        lines = self.audit_path.read_text().splitlines()
        return [(r["action"], r["result"], r["request_id"]) for r in map(json.loads, lines)]


@asynccontextmanager
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    clock = TrioClock(EPOCH)
    runner = Runner(clock)
    runner.programs["hook-reboot"] = (0.3, 0, False)
    runner.programs["hook-broken"] = (0.01, 4, False)
    runner.programs["health"] = (0.01, 1, False)
    health = HealthSpec(command=("health",), timeout=5, interval=0.05, passes=1)
    machine = Machine(
        host="vnode",
        total=Resources(cpus=2, memory=1024),
        policy=MachinePolicy(
            hooks=frozenset(HOOKS), health=HealthPolicy(passes=1, interval=health.interval)
        ),
        now=clock.now(),
    )
    audit_path = tmp_path / "audit.log"
    with Store(tmp_path / "agent.db") as store, AuditLog(audit_path) as audit:
        agent = Agent(
            machine=machine,
            store=store,
            runner=runner,
            clock=clock,
            execute_dir=tmp_path / "execute",
            usage_interval=0,
            hooks=HOOKS,
            health=health,
            hook_dir=tmp_path / "hooks",
            audit=audit,
        )
        app = build_app(agent, key=None, audit=audit, metrics=AgentMetrics(agent.ad))
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=trusted(app)), base_url="http://unix"
            ) as client,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(runner.run)
            await nursery.start(agent.run)
            yield Api(agent=agent, runner=runner, client=client, audit_path=audit_path)
            nursery.cancel_scope.cancel()


async def until(a: Api, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first ``GET /v1/drain`` reply that is ``ok``, read after each published change."""
    with trio.fail_after(5):
        while True:
            body: dict[str, Any] = (await a.client.get("/v1/drain")).json()
            if ok(body):
                return body
            changed = trio.Event()
            a.agent.listeners.append(changed.set)
            await changed.wait()


def error(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def test_a_drain_naming_an_unknown_hook_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        before = a.agent.machine.snapshot()
        response = await a.client.post(
            "/v1/drain", json={"on_completion": "hook:reimage", "commit": True}
        )
        assert error(response) == (422, "drain.no_such_hook")
        assert "no hook named 'reimage'" in response.json()["error"]["message"]
        assert a.agent.machine.snapshot() == before
        assert a.runner.launches == []
        assert a.audited() == [("drain.start", "drain.no_such_hook", None)]
        assert (await a.client.get("/v1/drain")).json()["state"] == "none"


@pytest.mark.parametrize(
    "body",
    [
        {"on_completion": "hook:reboot", "command": ["/bin/rm", "-rf", "/"]},
        {"on_completion": "hook:reboot", "hook": {"command": ["/bin/sh"]}},
        {"on_completion": "hook:reboot", "hooks": {"reboot": {"command": ["/bin/sh"]}}},
        {"on_completion": {"hook": "reboot", "command": ["/bin/sh"]}},
        {"on_completion": ["hook:reboot", "/bin/sh"]},
        {"on_completion": "hook:/bin/sh -c reboot"},
        {"on_completion": "hook:reboot; /bin/sh"},
        {"on_completion": "hook:"},
        {"on_completion": "hook"},
        {"on_completion": "run:/bin/sh"},
        {"on_completion": "/bin/sh"},
    ],
)
async def test_a_command_can_never_be_supplied_over_the_api(
    tmp_path: Path, body: dict[str, Any]
) -> None:
    async with api(tmp_path) as a:
        before = a.agent.machine.snapshot()
        response = await a.client.post("/v1/drain", json={**body, "commit": True})
        assert error(response) == (422, "request.invalid")
        assert a.agent.machine.snapshot() == before
        await trio.sleep(0.05)
        assert a.runner.launches == []


async def test_a_hook_drain_shows_its_hook_and_whether_the_node_is_back(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        response = await a.client.post(
            "/v1/drain", json={"on_completion": "hook:reboot", "commit": True, "reason": "fw"}
        )
        assert response.status_code == 201
        body = response.json()
        assert body["on_completion"] == "hook:reboot"
        assert body["state"] == "hook_pending"
        assert body["hook"]["state"] == "pending"
        assert body["accepting"] is False
        assert body["health"]["state"] == "passing"
        await trio.sleep(0.1)
        running = (await a.client.get("/v1/drain")).json()
        assert running["state"] == "hook_running"
        assert running["hook"]["pid"] == a.runner.launches[0].identity.pid
        refused = await a.client.delete("/v1/drain")
        assert error(refused) == (409, "drain.hook_running")
        ended = await until(a, lambda body: body["state"] == "none")
        assert ended["last"]["state"] == "completed"
        assert ended["last"]["hook"]["state"] == "succeeded"
        # The health check fails: the node stays closed and says so.
        failing = await until(a, lambda body: body["health"]["failures"] >= 1)
        assert failing["accepting"] is False
        assert failing["health"]["state"] == "failing"
        assert failing["health"]["reason"] == "drain request 1 completed (hook:reboot)"
        assert failing["health"]["message"] == "exit status 1"
        a.runner.programs["health"] = (0.01, 0, False)
        await until(a, lambda body: body["accepting"])
        assert {(action, result) for action, result, _ in a.audited()} == {
            ("drain.start", "ok"),
            ("hook.start", "ok"),
            ("drain.cancel", "drain.hook_running"),
            ("hook.end", "ok"),
            ("health.failing", "health.failing"),
            ("health.passing", "ok"),
        }


async def test_a_cancel_reply_says_the_node_stays_closed_until_healthy(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        await a.client.post("/v1/drain", json={"on_completion": "hook:broken", "commit": True})
        failed = await until(a, lambda body: body["state"] == "hook_failed")
        assert failed["hook"]["message"] == "exit status 4"
        response = await a.client.post("/v1/drain/1/cancel")
        assert response.status_code == 200
        body = response.json()
        assert body["state"] == "none"
        assert body["last"]["state"] == "cancelled"
        assert body["accepting"] is False
        assert body["health"]["state"] in ("pending", "failing")
        assert body["health"]["reason"] == "drain request 1 cancelled"
