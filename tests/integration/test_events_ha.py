"""The event stream across a change of leader: two real masters on one real etcd.

A subscriber reads the stream of the follower, then of the leader; the leader is killed
(SIGKILL): the new leader's first event (``leader.elected``, with the pool's new term)
follows the old one's last without a hole, every master serves the same events with the
same ids, and a subscriber resuming with ``Last-Event-ID`` on another master gets exactly
what it had not seen.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.etcd import EtcdServer, etcd_server
from tests.ha import masters_on
from tests.harness import MasterProcess, wait_for
from tests.integration.test_master import window

__all__ = ["etcd_server"]

pytestmark = pytest.mark.integration


def kept(master: MasterProcess, since: int = 0) -> list[dict[str, Any]]:
    reply = master.call(
        "GET", "/v1/events", params={"format": "jsonl", "follow": "false", "since": str(since)}
    )
    assert reply.status_code == 200, reply.text
    return [json.loads(line) for line in reply.text.splitlines() if line]


def test_the_stream_goes_on_across_a_change_of_leader(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    with masters_on(tmp_path / "masters", etcd_server, count=2, reconcile_interval=0.2) as masters:
        leader = masters.leader()
        follower = next(m for m in masters.all if m is not leader)
        for n in range(3):
            schedule = window([f"a{n}.test"], time.time() + 3600)
            assert leader.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
        before = kept(leader)
        assert [e["id"] for e in before] == list(range(1, len(before) + 1))
        # The follower serves the same events (from etcd's watch), the same ids.
        wait_for(lambda: kept(follower) == before)
        seen = before[-2]["id"]  # a subscriber had read up to here on the leader

        masters.kill(leader)
        new = masters.leader(timeout=15)
        assert new is follower
        schedule = window(["b.test"], time.time() + 3600)
        assert new.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
        after = wait_for(lambda: (e := kept(new)) and e[-1]["type"] == "mode.changed" and e)
        ids = [e["id"] for e in after]
        assert ids == list(range(1, len(after) + 1))  # no hole, no repeat
        assert after[: len(before)] == before  # the old leader's, as they were
        elected = after[len(before)]
        assert elected["type"] == "leader.elected"
        assert elected["facts"]["url"] == new.url
        assert elected["facts"]["term"] > before[0]["facts"]["term"]

        # Resuming on the new leader with the id last seen on the old one.
        reply = new.call(
            "GET",
            "/v1/events",
            params={"format": "jsonl", "follow": "false"},
            headers={"Last-Event-ID": str(seen)},
        )
        resumed = [json.loads(line)["id"] for line in reply.text.splitlines() if line]
        assert resumed == ids[seen:]
