"""Two defrag daemons of one name on one real etcd: one leads, the other takes over.

Only the leader runs cycles and pushes the Defrag ad; killed (SIGKILL), the other leads
within the lease's TTL and a second and goes on draining, from the pacing and the records
of the drains its predecessor wrote in etcd.

A cycle every 0.3 s reads ads the agents push a quarter of a second after a change (and
the job leaves at once, its retirement long past): the cycle after a drain often reads the
node's ad from before it. Each daemon is checked once a cycle has seen the node whole:
its one drain counted, and no second one tried from the late ad.
"""

from __future__ import annotations

import base64
import json
import signal
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.etcd import EtcdServer, etcd_server
from tests.harness import TLS_CONTEXT, MasterProcess, wait_for
from tests.integration.test_defrag import DefragProcess, agents_for, claim, drain_of, pslots

__all__ = ["etcd_server"]

pytestmark = pytest.mark.integration


def defrag_daemon(root: Path, master: MasterProcess, etcd: EtcdServer) -> DefragProcess:
    (root / "state").mkdir(parents=True)
    key = root / "state" / "pool.key"
    key.write_bytes(master.key_file.read_bytes())
    key.chmod(0o600)
    token = root / "daemon.token"
    token.write_text(master.token("DAEMON", subject=f"defrag@{root.name}", node="defrag-live"))
    settings: dict[str, Any] = {
        "name": "live",
        "interval": 0.3,
        "draining_machines_per_hour": 12000,
        "max_concurrent_draining": 1,
        "update_interval": 0.5,
        "master_url": master.url,
        "token_file": str(token),
        "store": "etcd",
        "etcd_endpoints": [etcd.url],
        "leader_ttl": 2,
        "etcd_timeout": 1,
    }
    return DefragProcess(root, settings)


def in_etcd(etcd: EtcdServer, document: str) -> Any:
    """A document of the daemons named ``live`` as etcd holds it (``None``: not there)."""
    key = base64.b64encode(f"/nodeagent/defrag/live/docs/{document}".encode()).decode()
    kvs = (
        httpx.post(f"{etcd.url}/v3/kv/range", json={"key": key}, verify=TLS_CONTEXT)
        .json()
        .get("kvs")
    )
    return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None


def drained_once(daemon: DefragProcess, machine: str) -> None:
    """Once ``daemon`` has drained ``machine`` and a later cycle has seen both nodes whole
    (the one that drained it saw it fragmented): that one drain, and nothing tried again
    from an ad that was late."""

    def seen_whole_after_its_drain() -> dict[str, Any] | None:
        stats = daemon.stats()
        drained = any(d["who"] == machine for d in stats["RecentDrainsList"])
        return stats if drained and stats["WholeMachines"] == 2 else None

    stats = wait_for(seen_whole_after_its_drain)
    log = daemon.log_path.read_text(errors="replace")[-4000:]  # what it decided, if not this
    assert (stats["DrainSuccesses"], stats["DrainFailures"], stats["DrainSkips"]) == (1, 0, 0), log
    assert [(d["who"], d["result"]) for d in stats["RecentDrainsList"]] == [(machine, "success")]


def test_two_defrag_daemons_one_leads_and_the_other_takes_over(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    with (
        MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as master,
        agents_for(master, tmp_path, ["frag1.test", "frag2.test"]) as (one, two),
        ExitStack() as stack,
    ):
        claim(one, tmp_path, cpus=2, retirement=1)
        wait_for(lambda: pslots(master).get("frag1.test", {}).get("Cpus") == 6)
        daemons = [
            stack.enter_context(defrag_daemon(tmp_path / f"defrag{i}", master, etcd_server))
            for i in range(2)
        ]

        def leader() -> DefragProcess | None:
            return next((d for d in daemons if d.stats().get("DefragIsLeader")), None)

        first = wait_for(leader)
        other = next(d for d in daemons if d is not first)
        wait_for(lambda: other.stats().get("DefragLeader") == first.url)
        assert other.stats()["DefragIsLeader"] is False
        wait_for(lambda: (drain_of(one).get("last") or {}).get("state") == "completed")
        assert drain_of(one)["last"]["reason"] == "Defrag live"
        drained_once(first, "frag1.test")
        assert other.stats()["DrainSuccesses"] == 0  # a follower runs no cycle
        wait_for(lambda: in_etcd(etcd_server, "pacing") is not None)
        assert in_etcd(etcd_server, "drains")["frag1.test"]["request_id"] == "1"
        killed = time.time()
        first.stop(signal.SIGKILL)
        wait_for(lambda: other.stats().get("DefragIsLeader"), timeout=10)
        assert time.time() - killed <= 2 + 1
        claim(two, tmp_path, cpus=2, retirement=1)
        wait_for(lambda: (drain_of(two).get("last") or {}).get("state") == "completed")
        assert drain_of(two)["last"]["reason"] == "Defrag live"
        drained_once(other, "frag2.test")
        wait_for(
            lambda: (
                master.call("GET", "/v1/ads/defrag-live", params={"type": "Defrag"})
                .json()["machine"]
                .get("MyAddress")
                == other.url
            )
        )
        # each node was drained once (its first and only drain request)
        assert drain_of(one)["last"]["id"] == "1"
        assert drain_of(two)["last"]["id"] == "1"
