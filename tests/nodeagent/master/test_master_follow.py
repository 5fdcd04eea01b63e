"""A master that follows takes what the leader wrote, document by document.

Two masters on one store (a SQLite file here: the follower's part does not depend on the
store): the leader writes, the follower takes the documents named, keeps the drain records
that did not change as they were (so that its plan cache holds), and remembers when it
learnt of each window.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from nodeagent._clock import TrioClock
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._drains import DrainPhase, DrainRecord
from nodeagent.master._master import Master
from nodeagent.master._plan import PlanPolicy
from tests.nodeagent.master.test_master_unit import EPOCH, DownLink, schedule


def two_masters(tmp_path: Path) -> tuple[Master, Master]:
    def one() -> Master:
        return Master(
            store=DocumentStore(tmp_path / "master.db"),
            link=DownLink(),
            clock=TrioClock(EPOCH),
            ads=AdStore(lifetime=10_000),
            policy=PlanPolicy(),
        )

    return one(), one()


async def test_a_follower_takes_the_documents_the_leader_changed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    leader, follower = two_masters(tmp_path)
    leader.set_schedule(schedule(EPOCH + 3600), actor="alice")
    leader.drains = {
        "a": DrainRecord(phase=DrainPhase.PENDING, request_id="1"),
        "b": DrainRecord(phase=DrainPhase.COMMITTED),
    }
    leader.counters.drains_started = 2
    leader.save()
    await trio.sleep(5)
    follower.follow()
    assert follower.state.schedule == leader.state.schedule
    assert follower.actors == leader.actors
    assert follower.drains == leader.drains
    assert follower.counters.drains_started == 2
    assert follower.window_since == dict.fromkeys(leader.window_since, EPOCH + 5)
    kept = follower.drains["b"]

    leader.drains["a"] = DrainRecord(phase=DrainPhase.COMMITTED, request_id="1")
    leader.counters.drains_started = 3
    leader.save()
    await trio.sleep(5)
    follower.follow({"drains"})
    assert follower.drains["a"].phase == "committed"
    assert follower.drains["b"] is kept  # unchanged: the same record, plans stay cached
    assert follower.counters.drains_started == 2  # not named: not read
    assert follower.window_since == dict.fromkeys(leader.window_since, EPOCH + 5)

    leader.set_schedule(schedule(EPOCH + 7200), actor="alice")  # the window moves
    await trio.sleep(5)
    follower.follow({"maintenance", "counters"})
    assert follower.counters.drains_started == 3
    assert follower.window_since == dict.fromkeys(leader.window_since, EPOCH + 15)


async def test_a_new_leader_asks_the_node_whose_ad_predates_the_drain_record(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The follower holds the node's ad from before its predecessor's drain (pushes lag):
    taking over, it asks the node for its ad before it judges the drain by it (the same
    as a restarted master, which holds none)."""
    from tests.nodeagent.master.test_master_unit import node_ad

    leader, follower = two_masters(tmp_path)
    follower.receive_ad(node_ad(EPOCH))  # made before the drain
    leader.set_schedule(schedule(EPOCH + 3600), actor="alice")
    key = next(iter(leader.window_since))
    leader.drains = {
        key: DrainRecord(
            node="n1.test",
            address="http://10.0.0.1:9621",
            request_id="1",
            phase=DrainPhase.COMMITTED,
            committed_at=EPOCH + 10,
            recorded_at=EPOCH + 10,
        )
    }
    leader.save()
    await trio.sleep(20)
    follower.follow({"maintenance", "actors", "drains"})  # as its watch tells it
    follower._unseen = set()  # long ago: what a follower knows of the records is moot
    follower.take_over()  # then a new term, nothing changed meanwhile
    async with trio.open_nursery() as nursery:
        follower.reconcile(nursery)
    looked_up = "n1.test: ad not fetched (its next push will do)"
    assert caplog.text.count(looked_up) == 1  # the record's node asked for its ad, once
    assert key not in follower._unseen
    # A record whose node's ad knows it is not asked for.
    caplog.clear()
    follower._unseen = {key}
    follower.receive_ad(node_ad(EPOCH + 25))
    async with trio.open_nursery() as nursery:
        follower.reconcile(nursery)
    assert looked_up not in caplog.text
    assert key not in follower._unseen
