"""Two defrag daemons of one name on one real etcd: one leads, the other takes over.

Only the leader runs cycles and pushes the Defrag ad; killed (SIGKILL), the other leads
within the lease's TTL and a second and goes on draining, from the pacing its predecessor
wrote in etcd.
"""

from __future__ import annotations

import base64
import signal
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.etcd import EtcdServer, etcd_server
from tests.harness import MasterProcess, wait_for
from tests.integration.test_defrag import DefragProcess, agents_for, claim, drain_of, pslots

__all__ = ["etcd_server"]

pytestmark = pytest.mark.integration


def defrag_daemon(root: Path, master: MasterProcess, etcd: EtcdServer) -> DefragProcess:
    (root / "state").mkdir(parents=True)
    key = root / "state" / "pool.key"
    key.write_bytes(master.key_file.read_bytes())
    key.chmod(0o600)
    token = root / "daemon.token"
    token.write_text(master.token("DAEMON", subject=f"defrag@{root.name}"))
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


def pacing_in_etcd(etcd: EtcdServer) -> bool:
    key = base64.b64encode(b"/nodeagent/defrag/live/docs/pacing").decode()
    reply = httpx.post(f"{etcd.url}/v3/kv/range", json={"key": key}).json()
    return bool(reply.get("kvs"))


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
        assert first.stats()["DrainSuccesses"] == 1
        assert other.stats()["DrainSuccesses"] == 0  # a follower runs no cycle
        wait_for(lambda: pacing_in_etcd(etcd_server))
        killed = time.time()
        first.stop(signal.SIGKILL)
        wait_for(lambda: other.stats().get("DefragIsLeader"), timeout=10)
        assert time.time() - killed <= 2 + 1
        claim(two, tmp_path, cpus=2, retirement=1)
        wait_for(lambda: (drain_of(two).get("last") or {}).get("state") == "completed")
        assert drain_of(two)["last"]["reason"] == "Defrag live"
        wait_for(
            lambda: (
                master.call("GET", "/v1/ads/defrag-live", params={"type": "Defrag"})
                .json()["machine"]
                .get("MyAddress")
                == other.url
            )
        )
        # frag1 was drained once (its first and only drain request), by the first leader
        assert drain_of(one)["last"]["id"] == "1"
