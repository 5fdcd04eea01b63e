"""The defrag daemon's two-phase drain (:meth:`DefragService._drain`), one cycle against a
scripted agent: what each answer of the agent makes of the outcome, the requests sent and
the machine's record — a cancel the agent took ends the record (the previous one, if any,
is the machine's again); one it did not take leaves the record until an ad says what
became of the drain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._agent_calls import AgentCalls
from nodeagent._clock import TrioClock
from nodeagent._peer import PeerCallFailed
from nodeagent._store import StoreError
from nodeagent.defrag._policy import DefragPolicy
from nodeagent.defrag._records import DrainRecord
from nodeagent.defrag._service import CycleReport, DefragService

EPOCH = 1_800_000_000.0
PHASE1 = {"id": "8", "state": "pending", "created_at": EPOCH - 1, "estimate": {"badput": 100}}
COMMITTED = {"id": "8", "state": "draining", "committed_at": EPOCH + 1}
GONE = PeerCallFailed("drain.no_such_request", "no request 8", 404)
LOST = PeerCallFailed("agent.timeout", "no reply")
DOWN = PeerCallFailed("agent.unreachable", "connection refused")
#: The machine's previous drain, over: its ad (made at EPOCH) knows it.
PREVIOUS = DrainRecord(machine="n1", request_id="3", committed=True, at=EPOCH - 100)
PENDING = DrainRecord(machine="n1", request_id="8", committed=False, at=EPOCH - 1)


def ad(**extra: Any) -> dict[str, Any]:
    """n1's partitionable slot: half its cores claimed, a graceful drain costs 100."""
    return {
        "Name": "slot1@n1",
        "Machine": "n1",
        "MyAddress": "http://n1:9621",
        "PartitionableSlot": True,
        "Cpus": 4,
        "TotalCpus": 8,
        "ExpectedMachineGracefulDrainingBadput": 100,
        "ExpectedMachineGracefulDrainingCompletion": int(EPOCH) + 60,
        "DrainState": "none",
        "MyCurrentTime": int(EPOCH),
        "Lost": False,
        **extra,
    }


@dataclass
class Agent:
    """n1's agent: answers each request by its last path segment (``drain``, ``commit``,
    ``cancel``) with the reply or the exception ``answers`` holds."""

    answers: dict[str, Any]
    sent: list[str] = field(default_factory=list)

    async def __call__(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        self.sent.append(f"{method} {path}")
        answer = self.answers[path.rpartition("/")[2]]
        if isinstance(answer, BaseException):
            raise answer
        return dict(answer)


@dataclass
class Pool:
    """The master holds n1's ad; reading n1's jobs waits for ``jobs`` when it is given."""

    agent_: Agent
    jobs: trio.Event | None = None
    jobs_read: trio.Event = field(default_factory=trio.Event)

    async def slot_ads(self) -> list[dict[str, Any]]:
        return [ad()]

    async def machine_ads(self, machine: str) -> list[dict[str, Any]]:
        self.jobs_read.set()
        if self.jobs is not None:
            await self.jobs.wait()
        return [ad()]

    async def publish(self, ad: dict[str, Any]) -> None:
        pass

    def agent(self, address: str, *, node: str) -> AgentCalls:
        assert (address, node) == ("http://n1:9621", "n1")
        return AgentCalls(self.agent_)


@dataclass
class Store:
    """Documents in memory; the saves from the ``fail_from``-th on raise StoreError."""

    fail_from: int | None = None
    saves: int = 0
    collections: frozenset[str] = frozenset()
    where: str = "memory"

    def load(self, name: str) -> Any:
        return None

    def load_after(self, name: str, member: str) -> dict[str, Any]:
        return {}

    def save(self, **documents: Any) -> None:
        self.saves += 1
        if self.fail_from is not None and self.saves >= self.fail_from:
            raise StoreError("disk full")

    def close(self) -> None:
        pass


def service(pool: Pool, previous: DrainRecord | None, store: Store | None = None) -> DefragService:
    drains = {} if previous is None else {"n1": previous}
    return DefragService(
        policy=DefragPolicy(name="t", draining_machines_per_hour=6.0),
        link=pool,
        clock=TrioClock(EPOCH),
        store=store,
        drains=drains,
    )


def outcome(report: CycleReport) -> str:
    (machine, result), *others = [
        (m, name) for name in ("started", "skipped", "failed") for m in getattr(report, name)
    ]
    assert (machine, others) == ("n1", [])
    return result


ESTIMATE_HIGH = {**PHASE1, "estimate": {"badput": 1000}}
DRAIN, COMMIT, CANCEL = "POST /v1/drain", "POST /v1/drain/8/commit", "POST /v1/drain/8/cancel"


@pytest.mark.parametrize("previous", [None, PREVIOUS], ids=["first drain", "drained before"])
@pytest.mark.parametrize(
    ("answers", "result", "sent", "kept"),
    [
        # committed: the record is the committed drain's
        ({"drain": PHASE1, "commit": COMMITTED}, "started", [DRAIN, COMMIT], "committed"),
        # a commit without a reply: cancelled, and the cancel taken: the drain never was
        ({"drain": PHASE1, "commit": LOST, "cancel": {}}, "failed", [DRAIN, COMMIT, CANCEL],
         "previous"),
        # ... the cancel not taken (no reply, or the request gone): the pending record stays
        ({"drain": PHASE1, "commit": LOST, "cancel": DOWN}, "failed", [DRAIN, COMMIT, CANCEL],
         "pending"),
        ({"drain": PHASE1, "commit": GONE, "cancel": GONE}, "failed", [DRAIN, COMMIT, CANCEL],
         "pending"),
        # the fresh estimate passes the ad's promise: skipped, cancelled, no commit
        ({"drain": ESTIMATE_HIGH, "cancel": {}}, "skipped", [DRAIN, CANCEL], "previous"),
        ({"drain": ESTIMATE_HIGH, "cancel": DOWN}, "skipped", [DRAIN, CANCEL], "pending"),
        # phase 1 refused, or without a request id: nothing to cancel, nothing recorded
        ({"drain": DOWN}, "failed", [DRAIN], "previous"),
        ({"drain": {"estimate": {}}}, "failed", [DRAIN], "previous"),
    ],
)  # fmt: skip
async def test_each_answer_of_the_agent(
    answers: dict[str, Any],
    result: str,
    sent: list[str],
    kept: str,
    previous: DrainRecord | None,
) -> None:
    agent = Agent(answers)
    defrag = service(Pool(agent), previous)
    assert outcome(await defrag.cycle()) == result
    assert agent.sent == sent
    expected = {
        "committed": DrainRecord(machine="n1", request_id="8", committed=True, at=EPOCH + 1),
        "pending": PENDING,
        "previous": previous,
    }[kept]
    assert defrag.drains.get("n1") == expected


@pytest.mark.parametrize("previous", [None, PREVIOUS], ids=["first drain", "drained before"])
async def test_a_record_that_cannot_be_saved_is_never_committed(
    previous: DrainRecord | None,
) -> None:
    """The cycle's own save goes through; the one before the commit fails: the pending
    request is cancelled and the store's error raised."""
    agent = Agent({"drain": PHASE1, "commit": COMMITTED, "cancel": {}})
    defrag = service(Pool(agent), previous, Store(fail_from=2))
    with pytest.raises(StoreError):
        await defrag.cycle()
    assert agent.sent == [DRAIN, CANCEL]
    assert defrag.drains.get("n1") == previous


async def test_a_transaction_cut_short_is_cancelled() -> None:
    """The daemon stops (its leadership lost, say) while it reads a candidate's jobs
    between phase 1 and the commit: the pending request is cancelled on the way out."""
    agent = Agent({"drain": ESTIMATE_HIGH, "commit": COMMITTED, "cancel": {}})
    pool = Pool(agent, jobs=trio.Event())
    defrag = service(pool, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(defrag.cycle)
        await pool.jobs_read.wait()
        nursery.cancel_scope.cancel()
    assert agent.sent == [DRAIN, CANCEL]
