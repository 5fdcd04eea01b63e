"""The operations' endpoints, in process: start by hosts or by constraint, stable 422 codes
that change nothing, 503 on a store that cannot be written, pause/resume/cancel audited,
the progress document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeagent._auth import Scope
from tests.nodeagent.master.test_master_api import api, error_code, node_ad

PATH = "/v1/maintenance/operations"


def racked(name: str, rack: str) -> dict[str, Any]:
    ad = node_ad(name)
    ad["machine"]["Rack"] = rack
    return ad


async def test_start_list_show_and_change(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        for name, rack in (("n1", "r1"), ("n2", "r1"), ("n3", "r2")):
            assert (await a.push(racked(name, rack))).status_code == 200
        reply = await a.local.post(
            PATH,
            json={"hosts": ["n1", "n2", "n3"], "grouping": "Rack", "hook": "reboot", "budget": 5},
        )
        assert reply.status_code == 201, reply.text
        doc = reply.json()
        assert doc["id"] == "1"
        assert doc["state"] == "running"
        assert [(b["name"], [n["name"] for n in b["nodes"]]) for b in doc["batches"]] == [
            ("r1", ["n1", "n2"]),
            ("r2", ["n3"]),
        ]
        assert doc["spec"]["budget"] == 5
        assert doc["counts"]["batches"] == 2
        # by constraint: the matching nodes, now
        reply = await a.local.post(PATH, json={"constraint": 'Rack == "r9"', "hook": "reboot"})
        assert error_code(reply) == (422, "operation.no_hosts")
        listed = await a.tcp.get(PATH, headers=a.token(Scope.READ))
        assert [op["id"] for op in listed.json()["operations"]] == ["1"]
        shown = await a.tcp.get(f"{PATH}/1", headers=a.token(Scope.READ))
        assert shown.json()["batches"][0]["state"] == "waiting"
        assert error_code(await a.tcp.get(f"{PATH}/9", headers=a.token(Scope.READ))) == (
            404,
            "operation.no_such_operation",
        )
        admin = a.token(Scope.ADMINISTRATOR, subject="ops")
        paused = await a.tcp.post(f"{PATH}/1/pause", headers=admin)
        assert (paused.status_code, paused.json()["state"]) == (200, "paused")
        assert error_code(await a.tcp.post(f"{PATH}/1/pause", headers=admin)) == (
            409,
            "operation.not_running",
        )
        resumed = await a.tcp.post(f"{PATH}/1/resume", headers=admin)
        assert resumed.json()["state"] == "running"
        cancelled = await a.tcp.post(f"{PATH}/1/cancel", headers=admin)
        assert cancelled.json()["state"] == "cancelled"
        assert {n["phase"] for b in cancelled.json()["batches"] for n in b["nodes"]} == {
            "cancelled"
        }
        assert a.master.state.machines() == ()  # the untouched hosts left as they were
        refused = await a.tcp.post(f"{PATH}/1/cancel", headers=admin)
        assert error_code(refused) == (409, "operation.finished")
        # a second operation may take the hosts again once the first is finished
        again = await a.local.post(PATH, json={"constraint": 'Rack == "r2"', "hook": "fw"})
        assert again.status_code == 201
        assert again.json()["spec"]["hosts"] == ["n3"]
        assert again.json()["spec"]["constraint"] == 'Rack == "r2"'
        audited = a.audited()
        assert ("local", "operation.start 1", "ok") in audited
        assert ("ops", "operation.pause 1", "ok") in audited
        assert ("ops", "operation.pause 1", "operation.not_running") in audited
        assert ("ops", "operation.cancel 1", "ok") in audited


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"hook": "reboot"}, "request.invalid"),  # neither hosts nor constraint
        ({"hosts": ["n1"], "constraint": "true", "hook": "reboot"}, "request.invalid"),
        ({"hosts": ["n1"]}, "request.invalid"),  # no hook
        ({"hosts": ["n1"], "hook": "reboot", "batches": 0}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "budget": -1}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "command": "rm"}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "schedule": "slow"}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "a b"}, "request.invalid"),
        ({"hosts": [], "hook": "reboot"}, "request.invalid"),
        # A hook's name by the agents' rule; strict, bounded numbers, lists and strings.
        ({"hosts": ["n1"], "hook": "../../../bin/sh"}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot\u0000"}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "\u001b[31mreboot"}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot\n"}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "r" * (1 << 20)}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "h:x"}, "request.invalid"),
        ({"hosts": ["n1"], "hook": 7}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "batches": 2**70}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "batches": 10_001}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "batches": True}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "batches": 2.0}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "batches": "2"}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "budget": True}, "request.invalid"),
        ('{"hosts": ["n1"], "hook": "reboot", "budget": NaN}', "request.invalid"),
        ('{"hosts": ["n1"], "hook": "reboot", "sla_wait": Infinity}', "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "sla_wait": 1e12}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "grouping": "../Rack"}, "request.invalid"),
        ({"hosts": ["n1"], "hook": "reboot", "grouping": "R" * 65}, "request.invalid"),
        ({"hosts": ["n1\u001b[2J"], "hook": "reboot"}, "request.invalid"),
        ({"hosts": ["n" * 256], "hook": "reboot"}, "request.invalid"),
        ({"hosts": [f"n{i}" for i in range(10_001)], "hook": "reboot"}, "request.invalid"),
        ({"hosts": "n1", "hook": "reboot"}, "request.invalid"),
        ({"hosts": ["n1", "n1"], "hook": "reboot"}, "operation.duplicate_host"),
        ({"hosts": ["zz"], "hook": "reboot"}, "operation.unknown_host"),
        (
            {"hosts": ["n1"], "hook": "reboot", "grouping": "Zone"},
            "operation.no_grouping_attribute",
        ),
    ],
)
async def test_bad_input_is_422_and_changes_nothing(
    tmp_path: Path, body: dict[str, Any] | str, code: str
) -> None:
    async with api(tmp_path) as a:
        await a.push(racked("n1", "r1"))
        if isinstance(body, str):  # JSON that json.dumps would not write
            reply = await a.local.post(PATH, content=body.encode())
        else:
            reply = await a.local.post(PATH, json=body)
        assert error_code(reply) == (422, code)
        assert a.master.operations == {}
        assert (await a.local.get(PATH)).json() == {"operations": []}
        assert ("local", "operation.start", code) in a.audited()


async def test_a_busy_host_and_scopes(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        await a.push(racked("n1", "r1"))
        assert (await a.local.post(PATH, json={"hosts": ["n1"], "hook": "x"})).status_code == 201
        busy = await a.local.post(PATH, json={"hosts": ["n1"], "hook": "x"})
        assert error_code(busy) == (422, "operation.host_busy")
        read = a.token(Scope.READ, subject="reader")
        assert (
            await a.tcp.post(PATH, json={"hosts": ["n1"], "hook": "x"}, headers=read)
        ).status_code == 403
        assert (await a.tcp.post(f"{PATH}/1/cancel", headers=read)).status_code == 403
        assert (await a.tcp.get(PATH)).status_code == 401
        assert a.audited()[-2:] == [
            ("reader", "operation.start", "auth.forbidden"),
            ("reader", "operation.cancel 1", "auth.forbidden"),
        ]


async def test_a_store_that_cannot_be_written_is_503_and_changes_nothing(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        await a.push(racked("n1", "r1"))
        a.master.store.failing = True  # type: ignore[attr-defined]
        reply = await a.local.post(PATH, json={"hosts": ["n1"], "hook": "reboot"})
        assert error_code(reply) == (503, "store.error")
        assert a.master.operations == {}
        assert (await a.local.get(PATH)).json() == {"operations": []}
        a.master.store.failing = False  # type: ignore[attr-defined]
        assert (await a.local.post(PATH, json={"hosts": ["n1"], "hook": "r"})).status_code == 201
        a.master.store.failing = True  # type: ignore[attr-defined]
        refused = await a.local.post(f"{PATH}/1/pause")
        assert error_code(refused) == (503, "store.error")
        assert (await a.local.get(f"{PATH}/1")).json()["state"] == "running"
        assert a.master.operations["1"]["state"] == "running"
