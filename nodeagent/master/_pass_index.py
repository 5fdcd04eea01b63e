"""Which scheduled machines a reconcile pass looks at: those whose inputs changed, or
whose time came.

A pass of :class:`~nodeagent.master._master.Master` decides for each scheduled machine
from its plan (:func:`~nodeagent.master._plan.machine_plan`), its drain record, the policy,
the notices accepted and the time. A machine's plan and decision stay what they were
until one of their inputs changes — an ad of one of its nodes (:meth:`PassIndex.matching`
says which machines an ad can change), its drain record, its window or mode, the notices
accepted, the policy — or until the next instant they read (:func:`next_due`: the
drain start, the window's start and end, the end of what sets the drain start
(:attr:`~nodeagent.master._plan.Closing.until`), a node turning lost or rebooting).
:class:`PassIndex` keeps each machine's plan and that instant, in a heap, so a pass makes
the plans of the machines that changed or came due, not of the pool. Everything else
(the schedule's order, which keys a change names) is made once per schedule; a new
schedule, a mode, a machine's entry in its window or the notices accepted carry the index
over (:meth:`PassIndex.carried`, :func:`changed_machines`: what the others' plans read is
kept), the policy and the ads' lifetime make a new one.
"""

from __future__ import annotations

import heapq
import itertools
import math
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import InitVar, dataclass, field
from typing import Any

from nodeagent.master._adstore import AdEntry
from nodeagent.master._plan import MachinePlan, ScheduledMachine, moved_on_plan

__all__ = ["DueTimes", "HostIndex", "PassIndex", "changed_machines", "next_due", "same_ids"]


def next_due(plan: MachinePlan, now: float, *, lifetime: float, reboot_grace: float) -> float:
    """The first instant at or after ``now`` at which the plan of the machine, or what a
    pass decides for it, may change with its inputs unchanged (``inf``: never).

    The instants a pass compares ``now`` with (:func:`~nodeagent.master._drains.decide`):
    the drain start, the window's start and end; the end of the plan's
    :class:`~nodeagent.master._plan.Closing`; and for each node the instants its ad turns
    old enough to be rebooting or lost (``lifetime``, ``lifetime + reboot_grace`` after it
    came; :meth:`~nodeagent.master._adstore.AdStore.lost`). An instant equal to ``now`` is
    due again at the next pass, since a comparison may flip just after it.
    """
    times = [plan.window_start, plan.window_end, plan.drain_start]
    if plan.closing is not None:
        times.append(plan.closing.until)
    for node in plan.nodes:
        times += (node.received_at + lifetime, node.received_at + lifetime + reboot_grace)
    return min((t for t in times if t is not None and t >= now), default=math.inf)


def changed_machines(
    before: Sequence[Any],
    after: Sequence[Any],
    *,
    machines: int = 0,
    by_machine: Collection[int] = (),
    by_name: Collection[int] = (),
) -> set[str] | None:
    """The keys of the machines whose inputs differ between two sets of inputs
    (``before`` and ``after``, tuples of the same shape, each member compared by identity
    first), or ``None`` when one that is not a machine's own differs (every machine then
    changed). Member ``machines`` is the scheduled machines (a machine changed when
    ``after`` holds another object for its key, or one ``before`` did not have); each
    member of ``by_machine`` is a mapping or a set by machine key (a machine changed when
    its entry, or its being in the set, differs); each of ``by_name`` a set of machine
    names (:attr:`~nodeagent.master._plan.ScheduledMachine.name`: a machine changed when
    its name's being in it differs). A machine no longer scheduled is not named: whoever
    keeps something of it lets it go."""
    if len(before) != len(after):
        return None
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        if old is not new and i != machines and i not in by_machine and i not in by_name:
            return None
    changed: set[str] = set()
    if before[machines] is not after[machines]:
        held = {machine.key: machine for machine in before[machines]}
        changed.update(m.key for m in after[machines] if held.get(m.key) is not m)
    for i in by_machine:
        old, new = before[i], after[i]
        if old is new:
            continue
        if isinstance(old, AbstractSet) and isinstance(new, AbstractSet):
            changed |= old ^ new
        elif isinstance(old, Mapping) and isinstance(new, Mapping):
            changed.update(k for k, v in new.items() if k not in old or old[k] != v)
            changed.update(old.keys() - new.keys())
        else:
            return None
    names: set[str] = set()
    for i in by_name:
        old, new = before[i], after[i]
        if old is not new:
            names |= old ^ new
    if names:
        changed.update(m.key for m in after[machines] if m.name in names)
    return changed


def same_ids(
    before: Sequence[ScheduledMachine],
    position: Mapping[str, int],
    after: Sequence[ScheduledMachine],
) -> bool:
    """Whether ``after`` are the machines ``before`` (``position``: where each key is in
    it), each by the same id object, in any order: what is indexed by their names and
    hosts holds for both."""
    if len(before) != len(after):
        return False
    for machine in after:
        at = position.get(machine.key)
        if at is None or before[at].id is not machine.id:
            return False
    return True


class HostIndex:
    """Which scheduled machines an ad's hostname and ip can change (:meth:`matching`).

    A host or ip of one machine (most) maps to its key alone, of several to a list of
    them; hostnames are lower-cased and interned (one object in every index of a pool)."""

    def __init__(self, machines: Iterable[ScheduledMachine]) -> None:
        self._by_host: dict[str, str | list[str]] = {}
        self._by_ip: dict[str, str | list[str]] = {}
        for machine in machines:
            hostname, ip = machine.id.hostname, machine.id.ip
            if hostname is not None:
                _add(self._by_host, sys.intern(hostname.lower()), machine.key)
            elif ip is not None:
                _add(self._by_ip, ip, machine.key)

    def matching(self, hostname: str | None, ip: str | None) -> list[str]:
        """The machines whose nodes an ad of ``hostname`` at ``ip`` can be one of: those
        scheduled by that hostname (any ip), and those scheduled by that ip alone
        (:meth:`~nodeagent.master._adstore.AdStore.find`)."""
        keys: list[str] = []
        if hostname is not None:
            _extend(keys, self._by_host.get(hostname.lower()))
        if ip is not None:
            _extend(keys, self._by_ip.get(ip))
        return keys


def _add(index: dict[str, str | list[str]], name: str, key: str) -> None:
    held = index.get(name)
    if held is None:
        index[name] = key
    elif isinstance(held, str):
        index[name] = [held, key]
    else:
        held.append(key)


def _extend(keys: list[str], held: str | list[str] | None) -> None:
    if held is None:
        return
    if isinstance(held, str):
        keys.append(held)
    else:
        keys += held


class DueTimes:
    """One instant per key, and the keys whose instant has come (:meth:`due`): a heap with
    the entries of instants set again left in it (skipped, and dropped when they outnumber
    the live ones), so that setting and taking are O(log n)."""

    def __init__(self) -> None:
        self._at: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._at)

    def get(self, key: str) -> float | None:
        return self._at.get(key)

    def set(self, key: str, at: float) -> None:
        """Make ``at`` the key's instant (``inf``: none)."""
        if self._at.get(key) == at:
            return
        if math.isinf(at):
            self._at.pop(key, None)
            return
        self._at[key] = at
        heapq.heappush(self._heap, (at, key))
        if len(self._heap) > 2 * len(self._at) + 1024:  # stale entries: rebuilt
            self._heap = [(t, k) for k, t in self._at.items()]
            heapq.heapify(self._heap)

    def due(self, now: float) -> list[str]:
        """The keys whose instant is ``now`` or before, earliest first, each taken once
        (:meth:`set` gives a key its next)."""
        return [key for _, key in self.due_at(now)]

    def due_at(self, now: float) -> list[tuple[float, str]]:
        """:meth:`due`, each key with its instant."""
        found: list[tuple[float, str]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, key = heapq.heappop(heap)
            if self._at.get(key) == at:
                del self._at[key]
                found.append((at, key))
        return found

    def clear(self) -> None:
        self._at.clear()
        self._heap.clear()


@dataclass(eq=False)
class PassIndex:
    """A schedule's machines as the reconcile passes read them (see the module docstring).

    Made for one schedule and one set of pass-wide inputs (``world``: compared by
    identity, :meth:`holds`); a pass that finds them changed makes a new one, which has
    every machine due, or carries this one over to them (:meth:`carried`) when only the
    machines' own inputs changed.
    """

    #: The pass-wide inputs it was made for (each compared by identity).
    world: tuple[Any, ...]
    #: The scheduled machines, in schedule order.
    machines: tuple[ScheduledMachine, ...]
    by_key: dict[str, ScheduledMachine] = field(init=False)
    #: Whether no two machines have the same name (then the notices are kept by machine).
    names_unique: bool = field(init=False)
    #: The plan each machine had at its last pass, by key.
    plans: dict[str, MachinePlan] = field(default_factory=dict)
    _order: dict[str, int] = field(init=False)
    _hosts: HostIndex = field(init=False)
    #: Each machine's next due instant.
    _due: DueTimes = field(default_factory=DueTimes)
    #: The machines whose plan's ads moved on in time since it was kept (:meth:`moved_on`).
    _swapped: set[str] = field(default_factory=set)
    #: An index of the same machines by the same ids, whose names and hosts are taken.
    like: InitVar[PassIndex | None] = None

    def __post_init__(self, like: PassIndex | None) -> None:
        self.by_key = {m.key: m for m in self.machines}
        self._order = {m.key: i for i, m in enumerate(self.machines)}
        if like is not None:
            self.names_unique, self._hosts = like.names_unique, like._hosts
            return
        self.names_unique = len({m.name for m in self.machines}) == len(self.machines)
        self._hosts = HostIndex(self.machines)

    def holds(self, world: tuple[Any, ...]) -> bool:
        """Whether it was made for ``world`` (the same objects, in order)."""
        return len(world) == len(self.world) and all(
            a is b for a, b in zip(world, self.world, strict=True)
        )

    def carried(
        self,
        world: tuple[Any, ...],
        machines: tuple[ScheduledMachine, ...],
        changed: Collection[str],
    ) -> tuple[PassIndex, set[str]]:
        """The index of ``world`` and ``machines``, made of this one, which is not to be
        used again: the plans held and due instants of the machines still scheduled and
        not ``changed`` (:func:`changed_machines`) are kept; and the machines a pass must
        look at for the change (those changed and those new to the schedule)."""
        like = self if same_ids(self.machines, self._order, machines) else None
        index = PassIndex(
            world=world,
            machines=machines,
            plans=self.plans,
            _due=self._due,
            _swapped=self._swapped,
            like=like,
        )
        order = index._order
        for key in itertools.chain(changed, self._order.keys() - order.keys()):
            index.plans.pop(key, None)
            index._due.set(key, math.inf)
            index._swapped.discard(key)
        fresh = {key for key in changed if key in order}
        fresh.update(order.keys() - self._order.keys())
        return index, fresh

    def matching(self, hostname: str | None, ip: str | None) -> list[str]:
        """:meth:`HostIndex.matching`."""
        return self._hosts.matching(hostname, ip)

    def keep(self, plan: MachinePlan, due: float) -> None:
        """Hold the machine's plan, due again at ``due`` (``inf``: only when changed)."""
        self.plans[plan.key] = plan
        self._due.set(plan.key, due)
        self._swapped.discard(plan.key)

    def moved_on(self, key: str, latest: Callable[[str], AdEntry | None]) -> bool:
        """Swap the ads of the machine's plan held for their nodes' latest, each the one
        before moved on in time (:func:`~nodeagent.master._plan.moved_on_plan`: nothing
        a pass reads of them changed but their ages, which :meth:`due` reads again when
        the machine's instant comes); whether it could (else the machine is to be looked
        at; one without a plan held will be)."""
        plan = self.plans.get(key)
        if plan is None:
            return True
        moved = moved_on_plan(plan, latest)
        if moved is None:
            return False
        if moved is not plan:
            self.plans[key] = moved
            self._swapped.add(key)
        return True

    def due(self, now: float, *, lifetime: float, reboot_grace: float) -> set[str]:
        """The machines whose due instant has come (each once: :meth:`keep` sets the next).
        A machine whose plan's ads moved on in time since it was kept (:meth:`moved_on`)
        is due at the instants the newer ads are read at instead, the ads' ``lifetime``
        and ``reboot_grace`` after they came (:func:`next_due` from its instant): a pool's
        plans kept at one instant are not all due again one ``lifetime`` later, however
        recent their ads."""
        found: set[str] = set()
        swapped = self._swapped
        for at, key in self._due.due_at(now):
            if key in swapped:
                swapped.discard(key)
                later = next_due(self.plans[key], at, lifetime=lifetime, reboot_grace=reboot_grace)
                if later > now:
                    self._due.set(key, later)
                    continue
            found.add(key)
        return found

    def unplanned(self) -> list[str]:
        """The machines without a plan held (all of them in a new index)."""
        return [m.key for m in self.machines if m.key not in self.plans]

    def in_order(self, keys: Iterable[str]) -> list[ScheduledMachine]:
        """The machines of ``keys`` that are scheduled, in schedule order."""
        order = self._order
        known = sorted(order[k] for k in set(keys) if k in order)
        return [self.machines[i] for i in known]
