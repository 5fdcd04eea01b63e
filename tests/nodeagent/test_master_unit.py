"""The master's reconcile logic on virtual time, with an agent link that fails."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent._peer import AgentCallFailed
from nodeagent._store import DocumentStore
from nodeagent.agent._schemas import drain_json
from nodeagent.master._adstore import AdStore
from nodeagent.master._maintenance import MachineId, MaintenanceSchedule, Unavailability, Window
from nodeagent.master._master import Master
from nodeagent.master._plan import PlanPolicy
from slots import (
    Action,
    JobSpec,
    Machine,
    MachinePolicy,
    Resources,
    Schedule,
    SignalJob,
    SlotsError,
)

EPOCH = 1_800_000_000.0


class DownLink:
    """Every call fails as an unreachable agent would; calls are counted with their time."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def call(
        self, address: str, method: str, path: str, *, actor: str, body: Any = None
    ) -> dict[str, Any]:
        self.calls.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        raise AgentCallFailed("agent.unreachable", f"{address}: connection refused")


def node_ad(now: float) -> dict[str, Any]:
    machine = Machine(
        host="n1.test",
        ip="10.0.0.1",
        address="http://10.0.0.1:9621",
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=60),
        now=now,
    )
    machine.claim(now, resources=Resources(cpus=1), spec=JobSpec())
    return machine.ad(now)


def make_master(tmp_path: Path, link: DownLink) -> Master:
    clock = TrioClock(EPOCH)
    return Master(
        store=DocumentStore(tmp_path / "master.db"),
        link=link,
        clock=clock,
        ads=AdStore(lifetime=10_000),
        policy=PlanPolicy(drain_policy="immediate"),
        reconcile_interval=1.0,
    )


def schedule(start: float) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=(
            Window(
                machine_ids=(MachineId(hostname="n1.test", ip="10.0.0.1"),),
                unavailability=Unavailability(start_ns=int(start * 1e9), duration_ns=None),
            ),
        )
    )


async def test_a_failing_node_is_retried_with_backoff(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    link = DownLink()
    master = make_master(tmp_path, link)
    master.receive_ad(node_ad(EPOCH))
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    t0 = trio.current_time()
    with trio.move_on_after(40):
        await master.run()
    offsets = [round(t - t0) for t in link.calls]
    assert offsets == [0, 2, 6, 14, 30]  # not once a second
    assert master.counters.drain_failures == 5


async def test_other_daemons_ads_are_kept_out_of_the_nodes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    master = make_master(tmp_path, DownLink())
    reply = master.receive_ad(
        {"machine": {"MyType": "Defrag", "Name": "defrag-main", "DrainSuccesses": 3}, "slots": []}
    )
    assert reply == {"machine_id": None, "mode": None, "unavailability": None}
    master.receive_ad(node_ad(EPOCH))
    now = master.clock.now()
    assert [a["Name"] for a in master.ads.query(now)] == ["n1.test"]
    assert master.ads.query(now, my_type="Defrag")[0]["DrainSuccesses"] == 3
    assert master.plan()["totals"]["nodes"] == 1


async def test_an_ad_with_a_non_finite_number_is_refused(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from nodeagent._auth import Scope, create_token
    from nodeagent.master._api import Principals, push_ad

    master = make_master(tmp_path, DownLink())
    key = b"k" * 32
    token = create_token(
        key, subject="agent", scope=Scope.DAEMON, lifetime_s=60, now=master.clock.now()
    )
    body = b'{"machine": {"Name": "n1.test", "CpuUsage": NaN}, "slots": []}'
    reply = push_ad(master, Principals(master, key), f"Bearer {token}", body, unix=False)
    assert reply.status == 422
    assert master.ads.query(master.clock.now()) == []


def many_nodes_schedule(count: int, start: float) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=(
            Window(
                machine_ids=tuple(
                    MachineId(hostname=f"n{i}.test", ip=f"10.0.0.{i}") for i in range(count)
                ),
                unavailability=Unavailability(start_ns=int(start * 1e9), duration_ns=None),
            ),
        )
    )


async def test_reconcile_passes_make_forecasts_a_bounded_number_at_a_time(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    master = make_master(tmp_path, DownLink())
    master.forecasts_per_pass = 2
    master.policy = PlanPolicy()  # just in time: no drain is due an hour ahead
    template = node_ad(EPOCH)
    for i in range(5):
        machine = {**template["machine"], "Name": f"n{i}.test", "Machine": f"n{i}.test"}
        master.receive_ad(
            {"machine": {**machine, "MachineIp": f"10.0.0.{i}"}, "slots": template["slots"]}
        )
    master.set_schedule(many_nodes_schedule(5, EPOCH + 7 * 86400), actor="ops")
    entries = master.ads.entries()

    def made() -> int:
        return sum(e.forecast.ready(master.clock.now()) for e in entries)

    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        assert made() == 2
        master.reconcile(nursery)
        master.reconcile(nursery)
        assert made() == 5
    row = master.plan()["machines"][0]
    assert row["expected"]["graceful"]["completion"] == EPOCH + 600  # the vacate time


@pytest.mark.parametrize(
    ("where", "attribute", "value"),
    [
        ("slot", "TotalJobRunTime", "600"),
        ("slot", "MaxJobRetirementTime", True),
        ("slot", "Cpus", [1]),
        ("slot", "MyCurrentTime", float("inf")),
        ("machine", "MachineMaxVacateTime", {"s": 1}),
        ("machine", "DrainingDeadline", "tomorrow"),
        ("machine", "ExpectedMachineGracefulDrainingCompletion", "soon"),
        ("machine", "DrainSuspendedJobs", "ignore"),
    ],
)
async def test_an_ad_the_estimates_cannot_read_is_refused_and_changes_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, where: str, attribute: str, value: Any
) -> None:
    from nodeagent._auth import Scope, create_token
    from nodeagent.master._api import Principals, push_ad

    master = make_master(tmp_path, DownLink())
    master.receive_ad(node_ad(EPOCH))
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    before = master.ads.get("n1.test")
    bad = node_ad(EPOCH + 10)
    target = bad["machine"] if where == "machine" else bad["slots"][1]
    target[attribute] = value
    key = b"k" * 32
    token = create_token(
        key, subject="agent", scope=Scope.DAEMON, lifetime_s=60, now=master.clock.now()
    )
    # 1e400 reads as infinity: JSON's own Infinity is refused earlier, as not JSON
    body = json.dumps(bad).replace("Infinity", "1e400").encode()
    reply = push_ad(master, Principals(master, key), f"Bearer {token}", body, unix=False)
    assert reply.status == 422
    assert json.loads(reply.body)["error"]["code"] == "request.invalid"
    assert attribute in json.loads(reply.body)["error"]["message"]
    assert master.ads.get("n1.test") is before
    # the plan and a reconcile pass still work
    assert master.plan()["machines"][0]["expected"] is not None
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        nursery.cancel_scope.cancel()


async def test_the_plan_body_is_the_plan_even_with_integers_beyond_64_bits(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from nodeagent.master._api import plan_body

    master = make_master(tmp_path, DownLink())
    ad = node_ad(EPOCH)
    ad["machine"]["TotalMachineDrainingBadput"] = 2**70  # orjson refuses it; json does not
    master.receive_ad(ad)
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    body = json.loads(plan_body(master))
    assert body == master.plan()
    assert body["machines"][0]["statistics"]["TotalMachineDrainingBadput"] == 2**70
    master.receive_ad(node_ad(EPOCH))
    assert json.loads(plan_body(master, with_blockers=False)) == master.plan(with_blockers=False)


# ----------------------------------------------------------------------- escalation

ADDRESS = "http://10.0.0.1:9621"
#: A soft-killed job of the model node exits this long after its signal.
TERM_DELAY = 1.0


class ModelNode:
    """A node on virtual time: a :class:`slots.Machine` behind the agent's drain API.

    Replies are the agent's own bodies (``drain_json``) and refusals its error codes; the
    model's actions are carried out as the agent does (a soft-killed job exits
    ``TERM_DELAY`` later, a hard-killed one at once, timers at ``next_wakeup``); the ad
    goes to ``master`` (while one runs) at once after a change and every half second.
    Every call and every signal is logged with its offset from ``EPOCH``; ``refusals``
    holds calls (``"POST /v1/drain"``) to refuse once, as a node that fails would.
    """

    def __init__(self, clock: TrioClock, *, retirement: int, jobs: int) -> None:
        now = clock.now()
        self.clock = clock
        self.machine = Machine(
            host="n1.test",
            ip="10.0.0.1",
            address=ADDRESS,
            total=Resources(cpus=4),
            policy=MachinePolicy(max_job_retirement_time=retirement, machine_max_vacate_time=5),
            now=now,
        )
        for _ in range(jobs):
            self.machine.claim(now, resources=Resources(cpus=1), spec=JobSpec())
        self.master: Master | None = None
        self.calls: list[tuple[float, str]] = []
        self.signals: list[tuple[float, str]] = []
        self.refusals: set[str] = set()
        self._exits: dict[str, float] = {}
        self._dirty = True
        self._changed = trio.Event()

    async def call(
        self, address: str, method: str, path: str, *, actor: str, body: Any = None
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        assert address == ADDRESS
        now = self.clock.now()
        words = path.split("/")
        said = (
            f"start {body['schedule']}"
            + ("" if body.get("deadline") is None else f" deadline {body['deadline']:g}")
            if (method, path) == ("POST", "/v1/drain")
            else f"{words[-1]} {words[-2]}"
        )
        if f"{method} {path}" in self.refusals:
            self.refusals.discard(f"{method} {path}")
            self.calls.append((now - EPOCH, f"{said} refused"))
            raise AgentCallFailed("agent.error", "refused by the test", 503)
        self.calls.append((now - EPOCH, said))
        try:
            reply, actions = self._serve(now, method, words, body or {}, actor)
        except SlotsError as exc:
            raise AgentCallFailed(exc.code, exc.message, exc.http_status) from None
        self._carry_out(now, actions)
        return reply

    def _serve(
        self, now: float, method: str, words: list[str], body: dict[str, Any], actor: str
    ) -> tuple[dict[str, Any], list[Action]]:
        machine = self.machine
        if method == "POST" and words == ["", "v1", "drain"]:
            request, estimate, actions = machine.start_draining(
                now,
                schedule=Schedule(body["schedule"]),
                reason=body.get("reason", ""),
                deadline=body.get("deadline"),
                commit=body.get("commit", False),
                ttl=body.get("ttl"),
                requested_by=f"master:{actor}",
            )
            return drain_json(request, estimate, current=True), actions
        assert method == "POST"
        assert words[:3] == ["", "v1", "drain"]
        assert len(words) == 5
        if words[4] == "commit":
            request, estimate, actions = machine.commit_draining(now, words[3])
            return drain_json(request, estimate, current=True), actions
        assert words[4] == "cancel"
        actions = machine.cancel_draining(now, words[3])
        return drain_json(machine.last_request, None, current=False), actions

    def _carry_out(self, now: float, actions: list[Action]) -> None:
        for action in actions:
            self._dirty = True
            if isinstance(action, SignalJob):
                self.signals.append((now - EPOCH, action.signal))
                delay = 0.0 if action.signal == "SIGKILL" else TERM_DELAY
                self._exits[action.claim_id] = min(
                    self._exits.get(action.claim_id, math.inf), now + delay
                )
        if actions:
            self._changed.set()

    def attach(self, master: Master | None) -> None:
        """Push the ad to ``master`` from now on (``None``: to nobody)."""
        self.master = master
        self._dirty = True
        self._changed.set()

    async def run(self) -> None:
        next_push = self.clock.now()
        while True:
            now = self.clock.now()
            self._carry_out(now, self.machine.tick(now))
            for claim_id, at in sorted(self._exits.items()):
                if at <= now:
                    del self._exits[claim_id]
                    self._carry_out(now, self.machine.job_exited(now, claim_id))
            if self.master is not None and (self._dirty or now >= next_push):
                self.master.receive_ad(self.machine.ad(now))
                self._dirty, next_push = False, now + 0.5
            wake = self.machine.next_wakeup()
            wakeups = [*self._exits.values(), *([] if wake is None else [wake])]
            if self.master is not None:
                wakeups.append(next_push)
            wakeups.append(math.inf)
            self._changed = trio.Event()
            with trio.move_on_after(max(0.0, min(wakeups) - now)):
                await self._changed.wait()


def told(machine: Machine, window: float, escalation: str) -> bool:
    """Whether the node holds a committed drain that evicts what still runs at ``window``
    as ``escalation`` asks: what the plan's ``escalated`` must imply."""
    request = machine.request
    if request is None or request.committed_at is None:
        return False
    if request.schedule is Schedule.FAST:
        return True
    deadline = request.deadline_at
    return escalation == "quick" and (
        request.schedule is Schedule.QUICK or (deadline is not None and deadline <= window)
    )


@dataclass(frozen=True, kw_only=True)
class Story:
    """An order of events (offsets from ``EPOCH``) and what the node must have been told.

    Events: ``up`` the master (re)starts from its store; ``down`` it stops (a crash:
    nothing more is saved); ``schedule`` a window opening at ``arg`` is posted (to a
    master loaded from the store when none runs); ``escalation`` the policy is reloaded;
    ``refuse`` the node refuses its next ``arg`` call once.
    """

    events: tuple[tuple[float, str, Any], ...]
    escalation: str = "quick"
    jobs: int = 1
    calls: tuple[str, ...]
    #: The job's first signal: which, and the offsets it falls between (None: never).
    evicted: tuple[str, float, float] | None
    #: The offsets between which the plan first says escalated (None: never).
    escalated: tuple[float, float] | None
    end: float = 200.0


STORIES = {
    "a drain started before the window carries it as its deadline": Story(
        events=((0, "up", None), (1, "schedule", 100)),
        calls=("start graceful deadline 99", "commit 1"),
        evicted=("SIGTERM", 100, 100),
        escalated=(100, 101.5),
    ),
    "the master down across the window starts the drain quick at once": Story(
        events=((0, "schedule", 100), (150, "up", None)),
        calls=("start quick", "commit 1"),
        evicted=("SIGTERM", 150, 150.6),
        escalated=(150, 150.6),
    ),
    "a schedule posted after its window opened starts the drain quick at once": Story(
        events=((0, "up", None), (150, "schedule", 100)),
        calls=("start quick", "commit 1"),
        evicted=("SIGTERM", 150, 150),
        escalated=(150, 150.3),
    ),
    "a drain without a deadline is replaced by a quick one at the window": Story(
        events=((0, "up", None), (1, "schedule", 100), (50, "escalation", "quick")),
        escalation="none",
        calls=("start graceful", "commit 1", "cancel 1", "start quick", "commit 2"),
        evicted=("SIGTERM", 100, 101),
        escalated=(100, 101.3),
    ),
    "a window moved before the drain's deadline: replaced by a quick drain": Story(
        events=((0, "up", None), (1, "schedule", 200), (50, "schedule", 100)),
        calls=("start graceful deadline 199", "commit 1", "cancel 1", "start quick", "commit 2"),
        evicted=("SIGTERM", 100, 101),
        escalated=(100, 101.3),
    ),
    "a master restarted across the window finds the deadline did it": Story(
        events=((0, "up", None), (1, "schedule", 100), (50, "down", None), (150, "up", None)),
        calls=("start graceful deadline 99", "commit 1"),
        evicted=("SIGTERM", 100, 100),
        escalated=(150, 150.6),
    ),
    "the replacement refused after the cancel: a later pass starts it quick": Story(
        events=(
            (0, "up", None),
            (1, "schedule", 100),
            (50, "escalation", "quick"),
            (60, "refuse", "POST /v1/drain"),
        ),
        escalation="none",
        calls=(
            "start graceful",
            "commit 1",
            "cancel 1",
            "start quick refused",
            "start quick",
            "commit 2",
        ),
        evicted=("SIGTERM", 102, 103.5),
        escalated=(102, 103.5),
    ),
    "fast: the drain is replaced by a fast one at the window": Story(
        events=((0, "up", None), (1, "schedule", 100)),
        escalation="fast",
        calls=("start graceful", "commit 1", "cancel 1", "start fast", "commit 2"),
        evicted=("SIGKILL", 100, 101),
        escalated=(100, 101.3),
    ),
    "fast: the master down across the window starts the drain fast": Story(
        events=((0, "schedule", 100), (150, "up", None)),
        escalation="fast",
        calls=("start fast", "commit 1"),
        evicted=("SIGKILL", 150, 150.6),
        escalated=(150, 150.6),
    ),
    "none: the job keeps its whole promise": Story(
        events=((0, "up", None), (1, "schedule", 100)),
        escalation="none",
        calls=("start graceful", "commit 1"),
        evicted=("SIGTERM", 595, 595),  # retirement 600 − vacate 5
        escalated=None,
        end=620,
    ),
    "an empty node at an open window is drained, with nothing to escalate": Story(
        events=((0, "schedule", 100), (150, "up", None)),
        jobs=0,
        calls=("start quick", "commit 1"),
        evicted=None,
        escalated=None,
    ),
}


@pytest.mark.parametrize("story", STORIES.values(), ids=list(STORIES))
async def test_escalation_acts_on_the_node_whatever_the_order_of_events(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, story: Story
) -> None:
    clock = TrioClock(EPOCH)
    node = ModelNode(clock, retirement=600, jobs=story.jobs)
    policy = PlanPolicy(drain_margin=10, escalation=story.escalation)
    stores: list[DocumentStore] = []
    window = math.inf
    first_escalated: float | None = None

    def from_store() -> Master:
        stores.append(DocumentStore(tmp_path / "master.db"))
        master = Master(
            store=stores[-1],
            link=node,
            clock=clock,
            ads=AdStore(lifetime=60),
            policy=policy,
            reconcile_interval=1.0,
        )
        master.load()
        return master

    async def watch(master: Master) -> None:
        """The plan never says escalated before the node was told (checked every 0.1 s)."""
        nonlocal first_escalated
        while True:
            rows = master.plan()["machines"]
            if rows and rows[0]["escalated"]:
                assert told(node.machine, window, master.policy.escalation)
                if first_escalated is None:
                    first_escalated = clock.now() - EPOCH
            await trio.sleep(0.1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(node.run)
        running: tuple[Master, trio.CancelScope] | None = None
        for offset, what, arg in (*story.events, (story.end, "end", None)):
            await trio.sleep(EPOCH + offset - clock.now())
            if what == "up":
                master, scope = from_store(), trio.CancelScope()
                running = (master, scope)

                async def serve(master: Master = master, scope: trio.CancelScope = scope) -> None:
                    with scope:
                        async with trio.open_nursery() as inner:
                            inner.start_soon(master.run)
                            inner.start_soon(watch, master)

                nursery.start_soon(serve)
                node.attach(master)
            elif what in ("down", "end"):
                assert running is not None
                running[1].cancel()
                running = None
                node.attach(None)
            elif what == "schedule":
                window = EPOCH + arg
                master = running[0] if running is not None else from_store()
                master.set_schedule(schedule(window), actor="ops")
            elif what == "escalation":
                policy = PlanPolicy(drain_margin=10, escalation=arg)
                assert running is not None
                running[0].policy = policy
            else:
                assert what == "refuse"
                node.refusals.add(arg)
        nursery.cancel_scope.cancel()

    assert [said for _, said in node.calls] == list(story.calls)
    if story.evicted is None:
        assert node.signals == []
    else:
        signal, earliest, latest = story.evicted
        assert node.signals[0][1] == signal
        assert earliest <= node.signals[0][0] <= latest
    last = from_store()
    if story.escalated is None:
        assert first_escalated is None
        assert last.counters.drains_escalated == 0
    else:
        assert first_escalated is not None
        assert story.escalated[0] <= first_escalated <= story.escalated[1]
        assert node.signals[0][0] <= first_escalated  # told first, then said so
        assert last.counters.drains_escalated == 1
    for store in stores:
        store.close()
