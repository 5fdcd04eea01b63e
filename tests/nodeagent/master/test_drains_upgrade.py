"""A store written by the master before DrainRecord is read by this one: the drains in
force are adopted (fixtures/drains-v1.json, made by fixtures/make_drains_v1.py with that
master: a quick master's graceful drain ``1`` of n1.test, its deadline the window start
600 s after the schedule, and the node's ad a few seconds after the commit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._master import Master
from nodeagent.master._plan import PlanPolicy

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "drains-v1.json").read_text())
KEY = "n1.test|10.0.0.1"
STORED = FIXTURE["documents"]["drains"][KEY]
WINDOW = STORED["window_start"]


class Node:
    """The node of the fixture: its ad as it was when that master stopped, its drain
    ``1`` in force; every call but the ad's is logged, and a drain gets id ``2``."""

    def __init__(self, clock: TrioClock) -> None:
        self.clock = clock
        self.calls: list[str] = []

    async def call(
        self, address: str, method: str, path: str, *, node: str, actor: str, body: Any = None
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        assert (address, node) == (STORED["address"], "n1.test")
        if (method, path) == ("GET", "/v1/ad"):
            return FIXTURE["ad"]  # type: ignore[no-any-return]
        said = f"{method} {path}" + ("" if body is None else f" {body['schedule']}")
        self.calls.append(said)
        if path == "/v1/drain" and method == "POST":
            return {"id": "2", "state": "pending", "estimate": {}}
        if path == "/v1/drain/2/commit":
            return {"id": "2", "state": "draining", "committed_at": self.clock.now()}
        return {}


def stored_master(tmp_path: Path, node: Node, clock: TrioClock, escalation: str) -> Master:
    store = DocumentStore(tmp_path / "master.db")
    store.save(**FIXTURE["documents"])
    master = Master(
        store=store,
        link=node,
        clock=clock,
        ads=AdStore(lifetime=100_000),
        policy=PlanPolicy(drain_policy="immediate", escalation=escalation),
    )
    master.load()
    return master


def on_disk(master: Master) -> str:
    return json.dumps(master.store.load("drains"))


@pytest.mark.parametrize(
    ("escalation", "at_the_window", "request_id"),
    [
        ("quick", [], "1"),  # its deadline is the window: the agent evicts by itself
        (
            "fast",
            ["POST /v1/drain/1/cancel", "POST /v1/drain fast", "POST /v1/drain/2/commit"],
            "2",
        ),
    ],
    ids=["quick", "fast"],
)
async def test_the_drains_in_force_of_a_store_written_before_are_adopted(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    escalation: str,
    at_the_window: list[str],
    request_id: str,
) -> None:
    clock = TrioClock(STORED["committed_at"] + 10)
    node = Node(clock)
    master = stored_master(tmp_path, node, clock, escalation)
    record = master.drains[KEY]
    assert (record.request_id, record.phase, record.late) == ("1", "committed", True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(master.run)
        await trio.sleep(WINDOW - clock.now() - 5)
        # Before the window: the record is the master's, its node asked for its ad once;
        # no drain started again, and the record is written back as it was read.
        assert node.calls == []
        master.save()
        assert on_disk(master) == json.dumps(FIXTURE["documents"]["drains"])
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    # At the window: the escalation acts on the adopted record, drain 1.
    assert node.calls == at_the_window
    record = master.drains[KEY]
    assert (record.request_id, record.phase, record.escalated) == (request_id, "committed", True)
    assert (
        master.counters.drains_escalated == FIXTURE["documents"]["counters"]["drains_escalated"] + 1
    )
    assert json.loads(on_disk(master))[KEY]["escalated"] is True
    master.store.close()
