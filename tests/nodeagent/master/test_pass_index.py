"""A reconcile pass that looks only at the machines that changed or came due
(:mod:`nodeagent.master._pass_index`) does what a pass over every machine does."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._maintenance import (
    MachineId,
    MaintenanceSchedule,
    MaintenanceState,
    Unavailability,
    Window,
)
from nodeagent.master._master import Master
from nodeagent.master._pass_index import (
    HostIndex,
    PassIndex,
    changed_machines,
    next_due,
    same_ids,
)
from nodeagent.master._plan import (
    MachinePlan,
    PlanPolicy,
    ScheduledMachine,
    machine_key,
    machine_plan,
    planned_escalation,
)
from slots import BeforeWindow, JobSpec, Machine, MachinePolicy, Resources

EPOCH = 1_800_000_000.0
#: The ads' lifetime and reboot grace an index's due instants read.
AGES = {"lifetime": 900.0, "reboot_grace": 50.0}
NODES = 24


def host(i: int) -> tuple[str, str]:
    return f"n{i}.test", f"10.0.0.{i}"


def agent_ad(i: int, now: float, *, jobs: int) -> dict[str, Any]:
    name, ip = host(i)
    machine = Machine(
        host=name,
        ip=ip,
        address=f"http://{name}:9621",
        total=Resources(cpus=8),
        # admits any promise: its drain is due its retirement time before its window
        policy=MachinePolicy(
            max_job_retirement_time=120 + 30 * i, before_window=BeforeWindow.ADMIT
        ),
        now=EPOCH - 3600,
    )
    for _ in range(jobs):
        machine.claim(EPOCH - 3600, resources=Resources(cpus=1), spec=JobSpec())
    return machine.ad(now)


class Agents:
    """Nodes that take the master's drains: phase 1 gives an id, the commit makes the
    node's ads show the drain; ``GET /v1/ad`` answers the node's ad now. Every call is
    kept as (time, node, method, path)."""

    def __init__(self, clock: TrioClock) -> None:
        self.clock = clock
        self.jobs = {i: i % 4 for i in range(NODES)}
        self.drains: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[float, str, str, str]] = []
        self._ids: dict[str, int] = {}

    def ad(self, i: int) -> dict[str, Any]:
        ad = agent_ad(i, self.clock.now(), jobs=self.jobs[i])
        drain = self.drains.get(host(i)[0])
        if drain is not None:
            ad["machine"].update(drain)
        return ad

    async def call(
        self, address: str, method: str, path: str, *, node: str, actor: str, body: Any = None
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        self.calls.append((self.clock.now(), node, method, path))
        if method == "GET" and path == "/v1/ad":
            return self.ad(int(node[1:].split(".", maxsplit=1)[0]))
        if method == "POST" and path == "/v1/drain":
            self._ids[node] = self._ids.get(node, 0) + 1
            now = self.clock.now()
            return {"id": str(self._ids[node]), "estimate": {"completion": now, "badput": 0}}
        if method == "POST" and path.endswith("/commit"):
            request_id = path.split("/")[3]
            self.drains[node] = {
                "DrainState": "draining",
                "DrainingRequestId": request_id,
                "DrainSchedule": "graceful",
            }
            return {"state": "draining", "committed_at": math.floor(self.clock.now())}
        if method == "DELETE" or path.endswith("/cancel"):
            self.drains.pop(node, None)
            return {}
        raise AssertionError(f"unexpected call {method} {path}")


def windows(now: float, moved: dict[int, float] | None = None) -> MaintenanceSchedule:
    """Windows a few minutes apart, so that drains come due while the test runs; the
    nodes of ``moved`` each in a window of its own, starting that many seconds after
    ``now``."""
    moved = moved or {}
    return MaintenanceSchedule(
        windows=tuple(
            Window(
                machine_ids=tuple(
                    MachineId(hostname=host(i)[0], ip=host(i)[1])
                    for i in range(w, NODES, 4)
                    if i not in moved
                ),
                unavailability=Unavailability(
                    start_ns=int((now + 400 + 150 * w) * 1e9), duration_ns=int(600 * 1e9)
                ),
            )
            for w in range(4)
        )
        + tuple(
            Window(
                machine_ids=(MachineId(hostname=host(i)[0], ip=host(i)[1]),),
                unavailability=Unavailability(
                    start_ns=int((now + start) * 1e9), duration_ns=int(600 * 1e9)
                ),
            )
            for i, start in sorted(moved.items())
        )
    )


def make_master(tmp_path: Path, name: str, clock: TrioClock, link: Agents) -> Master:
    return Master(
        store=DocumentStore(tmp_path / f"{name}.db"),
        link=link,
        clock=clock,
        ads=AdStore(lifetime=90, reboot_grace=60),
        policy=PlanPolicy(escalation="quick"),
        reconcile_interval=1.0,
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_pass_of_what_changed_acts_as_a_pass_over_every_machine(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, seed: int
) -> None:
    """Two masters take the same ads at the same times: one keeps its pass index (or
    carries it over a new schedule), the other makes it anew before every pass (every
    machine looked at). Their calls to the nodes, drain records and plans stay the same
    while drains come due, windows open, nodes stop pushing (lost) and come back, jobs
    end, and new schedules move machines."""
    clock = TrioClock(EPOCH)
    links = Agents(clock), Agents(clock)
    kept, remade = (
        make_master(tmp_path, n, clock, link) for n, link in zip("ab", links, strict=True)
    )
    rng = random.Random(seed)
    silent: set[int] = set()
    for master, link in zip((kept, remade), links, strict=True):
        for i in range(NODES):
            master.receive_ad(link.ad(i))
        master.set_schedule(windows(EPOCH), actor="ops")
    async with trio.open_nursery() as nursery:
        for step in range(120):
            await trio.sleep(rng.choice((1, 3, 7, 20)))
            if step % 10 == 0:
                silent = set(rng.sample(range(NODES), 3))  # these stop pushing a while
            pushing = [i for i in range(NODES) if i not in silent and rng.random() < 0.3]
            ended = [i for i in range(NODES) if rng.random() < 0.02]
            if step % 15 == 7:  # a new schedule: a few machines moved
                picked = rng.sample(range(NODES), 3)
                moving = {i: clock.now() - EPOCH + rng.choice((60, 500, 2000)) for i in picked}
                for master, link in zip((kept, remade), links, strict=True):
                    master.set_schedule(windows(EPOCH, moving), actor="ops")
                    for i in picked:  # their ads as new as the change: none is fetched
                        master.receive_ad(link.ad(i))
            for master, link in zip((kept, remade), links, strict=True):
                for i in ended:
                    link.jobs[i] = max(0, link.jobs[i] - 1)
                for i in pushing:
                    master.receive_ad(link.ad(i))
            remade._pass_index = None
            for master in (kept, remade):
                master.reconcile(nursery)
            # every plan the index holds is the one a pass would make now
            now = clock.now()
            index = kept._pass_index
            assert index is not None
            # (a machine with a drain record is looked at by every pass: its record may
            # change during one)
            fresh = [p for p in kept.plans(now) if p.key not in kept.drains]
            assert [facts(index.plans[p.key]) for p in fresh] == [facts(p) for p in fresh]
            await trio.testing.wait_all_tasks_blocked()
            # (the tasks of one pass run in any order)
            assert sorted(links[0].calls) == sorted(links[1].calls)
            assert {k: r.to_json() for k, r in kept.drains.items()} == {
                k: r.to_json() for k, r in remade.drains.items()
            }
        nursery.cancel_scope.cancel()
    # the run covered drains started, and escalated at their window (replaced)
    kinds = {path.split("/")[-1] for _, _, _, path in links[0].calls}
    assert {"drain", "commit", "cancel"} <= kinds
    assert any(record.escalated for record in kept.drains.values())
    # most pushes were the node's ad before moved on in time, which wakes no pass
    assert kept.ads.moved_on_ads > kept.ads.received / 2


def facts(plan: MachinePlan) -> tuple[Any, ...]:
    """What a pass reads of a plan: its nodes' ads as what is derived from them (shared
    by a node's ads moved on in time, of which a pass is not told until the ad before
    would have turned the node lost)."""
    return (
        plan.machine,
        [(node.name, node.basis) for node in plan.nodes],
        None if plan.node is None else plan.node.basis,
        plan.lost,
        plan.drain_start,
        plan.drain_record,
        plan.closing,
    )


def plan_of(ad: dict[str, Any], *, start: float, received: float, lifetime: float) -> Any:
    store = AdStore(lifetime=lifetime, reboot_grace=50)
    store.update(ad, received)
    status_window = Window(
        machine_ids=(MachineId(hostname="n1.test", ip="10.0.0.1"),),
        unavailability=Unavailability(start_ns=int(start * 1e9), duration_ns=int(100 * 1e9)),
    )
    state = MaintenanceState()
    state.update_schedule(MaintenanceSchedule(windows=(status_window,)))
    machine = ScheduledMachine.of(state.machines()[0])
    assert machine is not None
    return machine, store


def plan_at(machine: ScheduledMachine, store: AdStore, now: float) -> MachinePlan:
    """Node n1's machine's plan at ``now``, its drain due its vacate time before its window."""
    return machine_plan(
        machine,
        store.find("n1.test", "10.0.0.1"),
        is_lost=store.lost_at(now),
        now=now,
        policy=PlanPolicy(drain_margin=0),
        drain_record=None,
    )


@pytest.mark.parametrize(
    ("now", "received", "due"),
    [
        # the drain start: the window (EPOCH + 1000) less the vacate time (600)
        (EPOCH, EPOCH, EPOCH + 400),
        (EPOCH + 400, EPOCH, EPOCH + 400),  # equal: due again (a comparison flips after)
        (EPOCH + 401, EPOCH, EPOCH + 900),  # the ad turns old (lifetime 900)
        (EPOCH + 401, EPOCH + 300, EPOCH + 1000),  # a newer ad: the window's start
        (EPOCH + 1001, EPOCH + 300, EPOCH + 1100),  # the window's end
        (EPOCH + 1101, EPOCH + 300, EPOCH + 1200),  # the ad turns old
        (EPOCH + 1201, EPOCH + 300, EPOCH + 1250),  # old, and the reboot grace run out
        (EPOCH + 1251, EPOCH + 300, math.inf),
    ],
)
def test_next_due_is_the_first_instant_a_plan_compares_with(
    now: float, received: float, due: float
) -> None:
    ad = agent_ad(1, received, jobs=1)
    machine, store = plan_of(ad, start=EPOCH + 1000, received=received, lifetime=900)
    plan = plan_at(machine, store, now)
    assert plan.drain_start is not None
    assert next_due(plan, now, lifetime=900, reboot_grace=50) == due


@pytest.mark.parametrize(
    ("start", "moved_at", "due"),
    [
        (EPOCH + 1000, EPOCH + 100, EPOCH + 400),  # the drain's start still comes first
        (EPOCH + 1000, EPOCH + 500, EPOCH + 1000),  # the window's start, not the first ad's age
        (EPOCH + 5000, EPOCH + 600, EPOCH + 600 + 900),  # the newer ad's age
    ],
)
def test_a_plan_swapped_for_a_newer_ad_moved_on_is_due_at_the_newer_ads_instants(
    start: float, moved_at: float, due: float
) -> None:
    """A pass not told of a node's ad moved on in time keeps the machine's plan with the
    newer ad in it, due at the instants the newer ad is read at: the first ad's age (at
    ``EPOCH + 900``) would have every machine whose first ads came together looked at
    together, however recent their ads."""
    machine, store = plan_of(agent_ad(1, EPOCH, jobs=1), start=start, received=EPOCH, lifetime=900)
    now = moved_at - 1  # the last pass before the newer ad
    plan = plan_at(machine, store, now)
    index = PassIndex(world=(), machines=(machine,))
    index.keep(plan, next_due(plan, now, lifetime=900, reboot_grace=50))
    moved = store.moved_on_ads
    store.update(agent_ad(1, moved_at, jobs=1), moved_at)
    assert store.moved_on_ads == moved + 1
    assert index.moved_on(machine.key, store.get)
    assert index.plans[machine.key].node is store.get("n1.test")
    for at in (moved_at, due - 1):  # passes: only the newer ad's instants count
        assert index.due(at, lifetime=900, reboot_grace=50) == set()
    assert index.due(due, lifetime=900, reboot_grace=50) == {machine.key}


def test_an_index_keeps_one_due_instant_a_machine_and_names_the_machines_an_ad_may_change() -> None:
    ad = agent_ad(1, EPOCH, jobs=1)
    machine, store = plan_of(ad, start=EPOCH + 1000, received=EPOCH, lifetime=900)
    plan = machine_plan(
        machine,
        store.find("n1.test", "10.0.0.1"),
        is_lost=store.lost_at(EPOCH),
        now=EPOCH,
        policy=PlanPolicy(),
        drain_record=None,
    )
    index = PassIndex(world=(), machines=(machine,))
    assert index.unplanned() == [machine.key]
    assert index.matching("N1.TEST", "10.9.9.9") == [machine.key]  # by hostname, any ip
    assert index.matching("other", "10.0.0.1") == []  # scheduled by hostname
    for due in (EPOCH + 10, EPOCH + 5, EPOCH + 20):
        index.keep(plan, due)
    assert index.due(EPOCH + 19, **AGES) == set()  # only the last instant kept counts
    assert index.due(EPOCH + 20, **AGES) == {machine.key}
    assert index.due(EPOCH + 30, **AGES) == set()  # each once
    index.keep(plan, math.inf)
    assert index.due(math.inf, **AGES) == set()
    assert index.holds(())
    assert not index.holds((object(),))


async def test_a_follower_makes_the_forecasts_ahead_and_decides_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = TrioClock(EPOCH)
    agents = Agents(clock)
    master = make_master(tmp_path, "follower", clock, agents)
    for i in range(NODES):
        master.receive_ad(agents.ad(i))
    master.set_schedule(windows(EPOCH - 1000), actor="ops")  # every drain due, windows open
    master.prepare_ahead()
    now = clock.now()
    assert master.forecasts_made_ahead == NODES
    for plan in master.plans(now):
        assert plan.node is not None
        assert plan.node.forecast.ready(
            now, window_start=plan.window_start, escalation=planned_escalation(plan, "quick")
        )
    assert (agents.calls, master.drains) == ([], {})
    # a leader's pass, on the same master, acts on every machine: its term starts anew
    # (take_over, as the daemon's does), not from the follower's index
    master.take_over()
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert len(master.drains) == NODES


def grouped_ad(
    i: int, now: float, groups: tuple[str, ...] = ("www/prod/web", "batch/dev/etl")
) -> dict[str, Any]:
    name, ip = host(i)
    machine = Machine(
        host=name,
        ip=ip,
        address=f"http://{name}:9621",
        total=Resources(cpus=8),
        policy=MachinePolicy(max_job_retirement_time=3600),
        now=EPOCH - 3600,
    )
    for group in groups:
        machine.claim(EPOCH - 3600, resources=Resources(cpus=1), spec=JobSpec(group=group))
    return machine.ad(now)


async def test_the_notices_read_again_only_the_claims_of_the_machines_that_changed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Made anew (a new schedule, every machine looked at) or not, the notices' pass keeps
    the claims it read of a machine whose window, escalation and ad are the same — an ad
    that is its previous one moved on in time is the same — until the piece of the
    forecast they were read from ends."""
    clock = TrioClock(EPOCH)
    master = make_master(tmp_path, "notices", clock, Agents(clock))
    for i in range(NODES):
        master.receive_ad(grouped_ad(i, EPOCH))
    master.set_schedule(windows(EPOCH + 3000), actor="ops")
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        read = dict(master._notice_claims)
        assert len(read) == NODES
        assert len(master.notices) == 2 * NODES
        changed = grouped_ad(0, EPOCH + 1, groups=("www/prod/web", "batch/dev/etl", "ml/x"))
        master.receive_ad(changed)  # a claim more: read again
        master.receive_ad(grouped_ad(1, EPOCH + 1))  # moved on in time: kept
        assert master.ads.moved_on_ads == 1
        master._pass_index = None  # every machine looked at, the notices made whole
        master.reconcile(nursery)
        kept = [k for k in read if master._notice_claims[k] is read[k]]
        assert sorted(kept) == sorted(k for k in read if not k.startswith("n0.test|"))
        # each kept read holds until its piece's last second; the pass after it reads again
        n1 = next(k for k in read if k.startswith("n1.test|"))
        until = master._notice_claims[n1][2]
        assert EPOCH + 1 <= until < math.inf
        autojump_clock.jump(until + 1 - clock.now())
        master.receive_ad(grouped_ad(1, until + 1))
        assert master.ads.moved_on_ads == 2
        master.reconcile(nursery)
        assert master._notice_claims[n1] is not read[n1]
        assert master._notice_claims[n1][2] > until
        nursery.cancel_scope.cancel()


def _scheduled(hostname: str | None, ip: str | None) -> ScheduledMachine:
    machine_id = MachineId(hostname=hostname, ip=ip)
    return ScheduledMachine(
        key=machine_key(machine_id), id=machine_id, mode="DRAINING", window_start=EPOCH,
        window_seconds=None,
    )  # fmt: skip


HOSTS = [
    _scheduled("a.test", "10.0.0.1"),
    _scheduled("A.test", "10.0.0.2"),  # the same host, another ip
    _scheduled("b.test", None),
    _scheduled(None, "10.0.0.9"),  # by ip alone
    _scheduled(None, "10.0.0.9"),
    _scheduled(None, "10.0.0.8"),
]


@pytest.mark.parametrize(
    ("hostname", "ip", "keys"),
    [
        ("a.test", None, ["a.test|10.0.0.1", "a.test|10.0.0.2"]),
        ("A.TEST", "10.0.0.1", ["a.test|10.0.0.1", "a.test|10.0.0.2"]),  # hostname: any ip
        ("b.test", "10.0.0.8", ["b.test|", "|10.0.0.8"]),
        ("c.test", "10.0.0.9", ["|10.0.0.9", "|10.0.0.9"]),
        (None, "10.0.0.8", ["|10.0.0.8"]),
        (None, "10.0.0.1", []),  # scheduled by hostname
        ("c.test", None, []),
        (None, None, []),
    ],
)
def test_a_host_index_names_each_machine_an_ad_may_be_one_of(
    hostname: str | None, ip: str | None, keys: list[str]
) -> None:
    index = HostIndex(HOSTS)
    assert index.matching(hostname, ip) == keys
    assert index.matching(hostname, ip) == keys  # asking changes nothing


def test_equal_machine_keys_are_one_object() -> None:
    made = [machine_key(MachineId(hostname=f"N{n}.test", ip="10.0.0.1")) for n in (1, 1)]
    assert made[0] == "n1.test|10.0.0.1"
    assert made[0] is made[1]


def _machines(*starts: float) -> tuple[ScheduledMachine, ...]:
    """Scheduled machines ``n0``, ``n1``, … with windows at these starts."""
    out = []
    for i, start in enumerate(starts):
        machine = ScheduledMachine(
            key=machine_key(MachineId(hostname=host(i)[0], ip=host(i)[1])),
            id=MachineId(hostname=host(i)[0], ip=host(i)[1]),
            mode="DRAINING",
            window_start=start,
        )
        out.append(machine)
    return tuple(out)


_BEFORE = _machines(100.0, 200.0, 300.0)
_POLICY = PlanPolicy()
_SINCE = {m.key: 10.0 for m in _BEFORE}


def _world(
    machines: tuple[ScheduledMachine, ...] = _BEFORE,
    policy: PlanPolicy = _POLICY,
    since: dict[str, float] = _SINCE,
    accepted: frozenset[str] = frozenset(),
) -> tuple[Any, ...]:
    return (machines, policy, since, accepted)


@pytest.mark.parametrize(
    ("after", "changed"),
    [
        (_world(), set()),
        (_world(_BEFORE[:2] + _machines(100.0, 200.0, 300.0)[2:]), {"n2.test|10.0.0.2"}),
        (_world(_BEFORE[:2]), set()),  # n2 no longer scheduled: named by nothing
        (
            _world(_machines(100.0, 200.0, 300.0, 400.0)),
            {f"n{i}.test|10.0.0.{i}" for i in range(4)},
        ),
        (_world(_BEFORE + _machines(0, 0, 0, 400.0)[3:]), {"n3.test|10.0.0.3"}),
        (_world(since={**_SINCE, "n1.test|10.0.0.1": 20.0}), {"n1.test|10.0.0.1"}),
        (_world(since={"n1.test|10.0.0.1": 10.0}), {"n0.test|10.0.0.0", "n2.test|10.0.0.2"}),
        (_world(accepted=frozenset({"n1.test"})), {"n1.test|10.0.0.1"}),
        (_world(policy=PlanPolicy()), None),  # a plan-wide input: every machine
        ((_BEFORE, _POLICY), None),
    ],
    ids=[
        "nothing",
        "one machine a new object",
        "one machine dropped",
        "every machine a new object",
        "one machine added",
        "one machine's entry in its window",
        "two entries gone",
        "one machine's name accepted",
        "the policy",
        "another shape",
    ],
)
def test_the_machines_changed_between_two_sets_of_inputs(
    after: tuple[Any, ...], changed: set[str] | None
) -> None:
    assert changed_machines(_world(), after, by_machine=(2,), by_name=(3,)) == changed


async def test_a_pass_after_a_new_schedule_looks_at_the_machines_it_changed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A schedule that moves one machine, the same schedule again, a machine brought
    down: the next pass carries its index over and plans those machines alone (windows
    far ahead: nothing else is due); a new policy makes it plan every one."""
    clock = TrioClock(EPOCH)
    link = Agents(clock)
    master = make_master(tmp_path, "a", clock, link)
    for i in range(NODES):
        master.receive_ad(link.ad(i))
    far = 20_000.0
    master.set_schedule(windows(EPOCH + far), actor="ops")
    assert len(_looked_at(master)) == NODES  # the first pass: every machine
    assert _looked_at(master) == set()
    master.set_schedule(windows(EPOCH + far, {5: far + 900}), actor="ops")
    assert _looked_at(master) == {machine_key(MachineId(hostname="n5.test", ip="10.0.0.5"))}
    master.set_schedule(windows(EPOCH + far, {5: far + 900}), actor="ops")  # again
    assert _looked_at(master) == set()
    master.machines_down((MachineId(hostname="n7.test", ip="10.0.0.7"),), actor="ops")
    assert _looked_at(master) == {machine_key(MachineId(hostname="n7.test", ip="10.0.0.7"))}
    master.policy = PlanPolicy(escalation="none")
    assert len(_looked_at(master)) == NODES


def _looked_at(master: Master) -> set[str]:
    """The machines the next pass plans (its index then holds their plans)."""
    now = master.clock.now()
    index, plans = master._plans_to_look_at(master.plan_inputs(now), now)
    for plan in plans:
        index.keep(plan, next_due(plan, now, lifetime=90, reboot_grace=60))
    return {plan.key for plan in plans}


def _moved(machine: ScheduledMachine, start: float) -> ScheduledMachine:
    return ScheduledMachine(key=machine.key, id=machine.id, mode=machine.mode, window_start=start)


@pytest.mark.parametrize(
    ("after", "same"),
    [
        (_BEFORE, True),
        ((_BEFORE[2], _BEFORE[0], _BEFORE[1]), True),  # in another order
        ((_BEFORE[0], _BEFORE[1], _moved(_BEFORE[2], 900.0)), True),  # one moved, its id kept
        (_BEFORE[:2], False),  # one dropped
        (_BEFORE + _machines(0, 0, 0, 400.0)[3:], False),  # one added
        ((_BEFORE[0], _BEFORE[1], _machines(0, 0, 0)[2]), False),  # another id object
        ((_BEFORE[0], _BEFORE[1], _machines(0, 0, 0, 400.0)[3]), False),  # another machine
    ],
    ids=[
        "the same",
        "reordered",
        "one moved",
        "one dropped",
        "one added",
        "an id anew",
        "replaced",
    ],
)
def test_machines_by_the_same_ids_share_their_indexes(
    after: tuple[ScheduledMachine, ...], same: bool
) -> None:
    position = {m.key: i for i, m in enumerate(_BEFORE)}
    assert same_ids(_BEFORE, position, after) is same


class PushingAgents(Agents):
    """Nodes whose ad, pushed as soon as a drain is committed, reaches the master before
    the commit's reply does (as it may on a loaded master)."""

    master: Master | None = None

    async def call(
        self, address: str, method: str, path: str, *, node: str, actor: str, body: Any = None
    ) -> dict[str, Any]:
        reply = await super().call(address, method, path, node=node, actor=actor, body=body)
        if method == "POST" and path.endswith("/commit") and self.master is not None:
            self.master.receive_ad(self.ad(int(node[1:].split(".", maxsplit=1)[0])))
        return reply


async def test_a_drain_is_committed_before_the_node_says_it_began(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The node's ad that shows a drain begun, taken while the master waits for the
    commit's reply: the stream says ``drain.committed`` (the master's) before
    ``drain.started`` (the node's), once each."""
    clock = TrioClock(EPOCH)
    link = PushingAgents(clock)
    master = make_master(tmp_path, "a", clock, link)
    link.master = master
    master.events.recording = True  # as while it leads
    for i in range(NODES):
        master.receive_ad(link.ad(i))
    master.set_schedule(windows(EPOCH - 300), actor="ops")  # drains due at once
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    master.write_staged_events()
    events = [json.loads(e.data) for e in master.events.log.after(0)[1]]
    drained = {node for _, node, _, path in link.calls if path.endswith("/commit")}
    assert drained
    for node in drained:
        kinds = [e["type"] for e in events if e["type"].startswith("drain.") and node in str(e)]
        assert kinds == ["drain.recorded", "drain.committed", "drain.started"], node
    assert master._committing == {}
