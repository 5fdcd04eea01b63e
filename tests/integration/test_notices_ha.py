"""Notices and their answers across a change of leader: two real masters on one real etcd
and a real agent, reporting to both, running jobs of two job groups.

An answer written on the leader is served by the follower; the leader is killed
(SIGKILL): the new leader holds the same notices with the same answer (``GET /v1/notices``,
``GET /maintenance/status``), takes a new answer and keeps it; no answer is lost or
repeated, and no notice is issued again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.etcd import EtcdServer, etcd_server
from tests.ha import masters_on
from tests.harness import MasterProcess, job_script, wait_for
from tests.integration.test_master import window
from tests.integration.test_notices import notices, owner

__all__ = ["etcd_server"]

pytestmark = pytest.mark.integration


def notice_events(master: MasterProcess) -> list[dict[str, Any]]:
    reply = master.call(
        "GET",
        "/v1/events",
        params={"type": "notice.*", "follow": "false", "format": "jsonl", "last": "50"},
    )
    assert reply.status_code == 200, reply.text
    return [json.loads(line) for line in reply.text.splitlines() if line]


def statuses(master: MasterProcess) -> list[tuple[str, str]]:
    status = master.call("GET", "/maintenance/status").json()
    return [
        (s["framework_id"]["value"], s["status"])
        for machine in status.get("draining_machines", [])
        for s in machine.get("statuses", [])
    ]


def test_answers_survive_a_change_of_leader(tmp_path: Path, etcd_server: EtcdServer) -> None:
    argv, _ = job_script(tmp_path, "job")
    with (
        masters_on(tmp_path / "masters", etcd_server, count=2, reconcile_interval=0.2) as masters,
        masters.agent(tmp_path, "n1.test") as n1,
    ):
        leader = masters.leader()
        (follower,) = masters.followers()
        n1.claim(argv, group="web/prod/front", cpus=1)
        n1.claim(argv, group="batch/dev/etl", cpus=1)
        wait_for(lambda: len(leader.call("GET", "/v1/ads").json()["ads"]) == 1)
        start = time.time() + 86_400
        reply = leader.call("POST", "/maintenance/schedule", json=window(["n1.test"], start))
        assert reply.status_code == 200, reply.text
        listed = wait_for(lambda: (n := notices(leader)) and len(n) == 2 and n)
        batch_id, web_id = listed[0]["id"], listed[1]["id"]

        accepted = leader.call(
            "POST", f"/v1/notices/{web_id}/accept", json={"reason": "front ends move by themselves"}
        )
        assert accepted.status_code == 200, accepted.text
        answer = accepted.json()["answer"]
        # the follower serves the answer the leader wrote (from etcd's watch)
        wait_for(lambda: {n["id"]: n["answer"] for n in notices(follower)}.get(web_id) == answer)
        assert statuses(follower) == [("batch/dev/etl", "UNKNOWN"), ("web/prod/front", "ACCEPT")]

        masters.kill(leader)
        new = masters.leader(timeout=15)
        assert new is follower
        held = {n["id"]: n for n in notices(new)}
        assert set(held) == {batch_id, web_id}
        assert held[web_id]["answer"] == answer
        assert held[batch_id]["answer"] is None
        assert statuses(new) == [("batch/dev/etl", "UNKNOWN"), ("web/prod/front", "ACCEPT")]

        # a new answer on the new leader, from the group's owner, is kept
        with httpx.Client(base_url=new.url, timeout=30) as tcp:
            declined = tcp.post(
                f"/v1/notices/{batch_id}/decline",
                json={"reason": "month-end run", "expected_completion": start - 600},
                headers=owner(new, "batch/*"),
            )
        assert declined.status_code == 200, declined.text
        answers = {n["group"]: n["answer"] for n in notices(new)}
        assert answers["web/prod/front"] == answer
        assert answers["batch/dev/etl"]["reason"] == "month-end run"
        assert statuses(new) == [("batch/dev/etl", "DECLINE"), ("web/prod/front", "ACCEPT")]

        # no answer lost or repeated, no notice issued again (the claims' pass of the new
        # leader found them in force); each event once
        events = notice_events(new)
        assert [
            (e["type"], e["facts"].get("id")) for e in events if e["type"] != "notice.issued"
        ] == [
            ("notice.answered", web_id),
            ("notice.answered", batch_id),
        ]
        assert sorted(
            e["facts"]["notice"]["id"] for e in events if e["type"] == "notice.issued"
        ) == sorted([batch_id, web_id])
        assert len({e["id"] for e in events}) == len(events) == 4
