"""MasterClient.admissions against a real master with two real agents: one machine in a
window 10 minutes ahead (drained at once: its promises reach past the window), one not
scheduled."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.client import MasterClient
from tests.harness import AgentProcess, MasterProcess, wait_for
from tests.integration.test_master import window

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    tmp = tmp_path_factory.mktemp("admissions")
    with MasterProcess(tmp / "master", settings={"reconcile_interval": 0.2}) as master:
        nodes = [
            AgentProcess(
                tmp / name,
                hostname=name,
                policy={"max_job_retirement_time": 3600},
                master=master.agent_settings(tmp / name, node=name, update_interval=0.5),
            )
            for name in ("a.test", "b.test")
        ]
        with nodes[0], nodes[1]:
            wait_for(lambda: len(master.call("GET", "/v1/ads").json()["ads"]) == 2)
            yield master


async def test_every_node_at_once(pool: MasterProcess) -> None:
    master = pool
    start = time.time() + 600
    assert (
        master.call("POST", "/maintenance/schedule", json=window(["A.TEST"], start)).status_code
        == 200
    )
    # a.test's promises (3600 s) reach past its window: the master drains it at once, and
    # its next ad says it takes no new work; wait for that state before asking
    wait_for(lambda: master.call("GET", "/v1/ads/a.test").json()["machine"]["Start"] is False)
    try:
        async with MasterClient(socket=master.socket) as client:
            found = {a.node: a for a in await client.admissions(1200)}
            assert set(found) == {"a.test", "b.test"}
            assert not found["a.test"].admits
            assert found["a.test"].window_start == pytest.approx(start, abs=0.001)
            assert 590 <= (found["a.test"].longest_promise or 0) <= 600
            assert found["b.test"].admits  # not scheduled: any promise
            assert found["b.test"].longest_promise is None
            short = {a.node: a for a in await client.admissions(120)}
            assert short["b.test"].admits
            # 120 s would end before the window, but the drain closed the node to new work
            assert not short["a.test"].admits
            assert (short["a.test"].why or "").startswith("closed: it takes no new work")
            with pytest.raises(ValueError, match="a promise is seconds"):
                await client.admissions(-1)
    finally:
        master.call("POST", "/maintenance/schedule", json={"windows": []})


def test_the_sync_client_has_it_too(pool: MasterProcess, tmp_path: Path) -> None:
    from nodeagent.client import SyncMasterClient

    client = SyncMasterClient(socket=pool.socket)
    assert {a.node for a in client.admissions(60)} == {"a.test", "b.test"}
