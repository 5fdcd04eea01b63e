"""Notices on a real master and a real agent running real jobs of two job groups: issued
for each group, listed, answered by the groups' owners (and refused for another group),
kept across a SIGKILL of the master, shown in /maintenance/status, on the event stream."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodeagent._auth import Scope, create_token, load_key
from tests.harness import AgentProcess, MasterProcess, job_script, wait_for
from tests.integration.test_master import window

pytestmark = pytest.mark.integration

SETTINGS = {"reconcile_interval": 0.2}


def owner(master: MasterProcess, *groups: str) -> dict[str, str]:
    token = create_token(
        load_key(master.key_file),
        subject="owner",
        scope=Scope.READ,
        lifetime_s=3600,
        now=time.time(),
        groups=groups,
    )
    return {"Authorization": f"Bearer {token}"}


def notices(master: MasterProcess, **params: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = master.call("GET", "/v1/notices", params=params).json()["notices"]
    return found


def test_notices_answered_and_kept_across_a_kill(tmp_path: Path) -> None:
    argv, _ = job_script(tmp_path, "job")
    root = tmp_path / "master"
    with (
        MasterProcess(root, settings=SETTINGS) as master,
        AgentProcess(
            tmp_path / "n1",
            hostname="n1.test",
            master=master.agent_settings(tmp_path / "n1", node="n1.test", update_interval=0.3),
        ) as n1,
    ):
        n1.claim(argv, group="web/prod/front", cpus=1)
        n1.claim(argv, group="web/prod/front", cpus=1)
        n1.claim(argv, group="batch/dev/etl", cpus=1)
        wait_for(lambda: master.call("GET", "/v1/ads").json()["ads"])
        start = time.time() + 86_400
        reply = master.call("POST", "/maintenance/schedule", json=window(["n1.test"], start))
        assert reply.status_code == 200, reply.text

        listed = wait_for(lambda: (n := notices(master)) and len(n) == 2 and n)
        assert [n["group"] for n in listed] == ["batch/dev/etl", "web/prod/front"]
        web = notices(master, group="web/prod/front")
        assert len(web) == 1
        assert len(web[0]["claims"]) == 2
        assert web[0]["window"]["start"] == pytest.approx(start, abs=1e-3)
        assert notices(master, machine="other.test") == []
        batch_id, web_id = listed[0]["id"], listed[1]["id"]

        with (
            master.client(token=None) as local,
            httpx.Client(base_url=master.url, timeout=30) as tcp,
        ):
            body = {"reason": "front ends drain by themselves"}
            ok = tcp.post(f"/v1/notices/{web_id}/accept", json=body, headers=owner(master, "web/*"))
            assert ok.status_code == 200, ok.text
            refused = tcp.post(
                f"/v1/notices/{batch_id}/accept", json=body, headers=owner(master, "web/*")
            )
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "auth.wrong_group"
            declined = local.post(
                f"/v1/notices/{batch_id}/decline",
                json={"reason": "month-end run", "expected_completion": start - 600},
            )
            assert declined.status_code == 200, declined.text

        master.stop(signal.SIGKILL)
        master.start()
        kept = {n["group"]: n["answer"] for n in notices(master)}
        assert kept["web/prod/front"]["verdict"] == "accept"
        assert kept["batch/dev/etl"]["verdict"] == "decline"
        assert kept["batch/dev/etl"]["reason"] == "month-end run"
        assert {n["id"] for n in notices(master)} == {batch_id, web_id}

        status = master.call("GET", "/maintenance/status").json()
        (machine,) = status["draining_machines"]
        assert machine["id"] == {"hostname": "n1.test", "ip": "127.0.0.1"}
        assert [(s["framework_id"]["value"], s["status"]) for s in machine["statuses"]] == [
            ("batch/dev/etl", "DECLINE"),
            ("web/prod/front", "ACCEPT"),
        ]
        assert all(isinstance(s["timestamp"]["nanoseconds"], int) for s in machine["statuses"])

        lines = master.call(
            "GET",
            "/v1/events",
            params={"type": "notice.*", "follow": "false", "format": "jsonl", "last": "50"},
        ).text.splitlines()
        events = [json.loads(line) for line in lines if line]
        assert sorted(e["type"] for e in events) == [
            "notice.answered",
            "notice.answered",
            "notice.issued",
            "notice.issued",
        ]
        only_web = master.call(
            "GET",
            "/v1/events",
            params={
                "group": "web/prod/front",
                "type": "notice.*",
                "follow": "false",
                "format": "jsonl",
                "last": "50",
            },
        ).text.splitlines()
        assert len([line for line in only_web if line]) == 2

        # the schedule cleared: the notices are rescinded
        master.call("POST", "/maintenance/schedule", json={})
        wait_for(lambda: notices(master) == [])
