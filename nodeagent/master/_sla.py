"""Job groups' SLAs and the probe (Aurora's SLA-aware maintenance, seed 004): pure.

No trio, no I/O, no clock: every function takes ``now`` (epoch seconds) and the node ads
(the master's :class:`~nodeagent.master._adstore.AdEntry`, or anything with ``name``,
``machine`` and ``slots``).

**Instances.** A job group's *instance* is a running claim whose slot ad names the group
(``JobGroup``): a dynamic slot ``Claimed`` and ``Busy`` or ``Retiring`` (a suspended job, or
one being evicted, is not up). It is *up since* ``MyCurrentTime - TotalJobRunTime`` of its
ad (the job's unsuspended run time: a job that was suspended counts from later than its
start). An instance on a node the caller says is lost counts as down (and in the size).

**Policies** (:class:`SlaPolicy`), one per group, as Aurora has them:

* ``percentage``: at least ``percentage`` % of the group's instances up for at least
  ``duration`` seconds;
* ``count``: at least ``count`` instances up for at least ``duration`` seconds;
* ``coordinator``: the service's own HTTP endpoint ``url`` is asked whether the hosts may go
  (:mod:`nodeagent.master._coordinators`); it says yes or no with a reason.

The group's size is its declared ``size``, else the instances seen in the ads. An instance
is up *long enough* when ``now - up_since >= duration`` (exactly ``duration`` counts); a
percentage policy holds when ``up * 100 >= percentage * size`` (exactly P % holds; the
arithmetic is exact: the percentage is read as the decimal it is written as).

**Taking hosts down** (:func:`probe`): the groups *affected* are those with an instance on
one of the hosts. For each, the instances on the hosts count as down, and the policy is
checked on the others; the **wait time to SLA** is how long until enough of the others
will have been up long enough if nothing changes (``0`` when safe now; ``None`` when never
without new instances, or for a coordinator's no). A group with instances on the hosts but
no policy is reported as affected and safe.

**For the operations engine** (stable signatures)::

    probe(entries, policies, hosts, now, *, lost=(), answers=None, found=None) -> Probe
    questions(entries, policies, hosts, now, *, lost=(), found=None) -> list[Question]
    async ask_coordinators(questions, *, client, within) -> dict[str, Answer]
        (in nodeagent.master._coordinators: by group; never raises for a coordinator)

(``SlaBook.check`` in nodeagent.master._sla_policies does these three with the policies in
force.) A batch's check is: ``qs = questions(...)``; ``answers = await
ask_coordinators(qs, ...)``;
``verdict = probe(..., answers=answers)``; ``verdict.safe`` says whether the batch may go,
``verdict.wait`` how long until it may (``None``: not by waiting), ``verdict.broken`` the
groups it would break and why. Without ``answers`` a coordinator group is unsafe ("not
asked"). :func:`group_hosts` splits hosts into host groups (by host, or by an ad attribute
such as ``Rack``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any, Protocol
from urllib.parse import urlsplit

from slots import InvalidRequest, check_group_name

__all__ = [
    "Answer",
    "GroupVerdict",
    "Instance",
    "NodeAds",
    "Probe",
    "Question",
    "SlaKind",
    "SlaPolicy",
    "group_hosts",
    "instances",
    "policy_from_json",
    "policy_json",
    "probe",
    "questions",
    "verdict_json",
]

_UP_ACTIVITIES = frozenset({"Busy", "Retiring"})
_MAX_DURATION = 10 * 365 * 86400
_MAX_SIZE = 1_000_000


class NodeAds(Protocol):
    """What the SLA arithmetic reads of a node's ads (the master's ``AdEntry`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def machine(self) -> dict[str, Any]: ...

    @property
    def slots(self) -> Sequence[dict[str, Any]]: ...


class SlaKind(StrEnum):
    """How a group's SLA is stated."""

    PERCENTAGE = "percentage"
    COUNT = "count"
    COORDINATOR = "coordinator"


@dataclass(frozen=True, kw_only=True, slots=True)
class SlaPolicy:
    """A job group's SLA. ``percentage`` (0 < P ≤ 100) with a percentage policy, ``count``
    (≥ 1) with a count policy, ``duration`` (seconds ≥ 0) with either; ``url`` (http or
    https) with a coordinator policy; ``size``: the group's declared size (else the
    instances seen count). Build from JSON with :func:`policy_from_json`."""

    group: str
    kind: SlaKind
    percentage: float | None = None
    count: int | None = None
    duration: float = 0.0
    url: str | None = None
    size: int | None = None

    def __post_init__(self) -> None:
        check_group_name(self.group)
        kind = self.kind
        if kind is SlaKind.PERCENTAGE:
            if self.percentage is None or not 0 < self.percentage <= 100:
                raise InvalidRequest("a percentage policy needs 0 < percentage <= 100")
        elif self.percentage is not None:
            raise InvalidRequest(f"a {kind} policy has no percentage")
        if kind is SlaKind.COUNT:
            if self.count is None or not 1 <= self.count <= _MAX_SIZE:
                raise InvalidRequest(f"a count policy needs 1 <= count <= {_MAX_SIZE}")
        elif self.count is not None:
            raise InvalidRequest(f"a {kind} policy has no count")
        if not (math.isfinite(self.duration) and 0 <= self.duration <= _MAX_DURATION):
            raise InvalidRequest(f"duration must be 0 to {_MAX_DURATION} seconds")
        if kind is SlaKind.COORDINATOR:
            if self.url is None or not _http_url(self.url):
                raise InvalidRequest("a coordinator policy needs an http:// or https:// url")
            if self.duration:
                raise InvalidRequest("a coordinator policy has no duration")
        elif self.url is not None:
            raise InvalidRequest(f"a {kind} policy has no url")
        if self.size is not None and not 1 <= self.size <= _MAX_SIZE:
            raise InvalidRequest(f"size must be 1 to {_MAX_SIZE}")

    def needed(self, size: int) -> int:
        """Instances that must be up long enough in a group of ``size`` (0: coordinator)."""
        if self.kind is SlaKind.COUNT:
            assert self.count is not None
            return self.count
        if self.kind is SlaKind.PERCENTAGE:
            assert self.percentage is not None
            return math.ceil(Fraction(str(self.percentage)) * size / 100)
        return 0


def _http_url(url: str) -> bool:
    if len(url) > 2048 or not url.isprintable() or any(c.isspace() for c in url):
        return False
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


@dataclass(frozen=True, kw_only=True, slots=True)
class Instance:
    """One instance of a job group: where it runs and since when it has been up."""

    group: str
    node: str
    slot: str
    up_since: float

    def up_for(self, now: float) -> float:
        return now - self.up_since


@dataclass(frozen=True, kw_only=True, slots=True)
class Question:
    """What a coordinator is asked: may ``hosts`` go, taking ``instances`` of ``group``?"""

    group: str
    url: str
    hosts: tuple[str, ...]
    instances: tuple[Instance, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """A coordinator's answer (``allow``) and its reason; a coordinator that could not be
    asked is a no whose reason says why."""

    allow: bool
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupVerdict:
    """One affected group's SLA if the hosts go now.

    ``size``: the group's size (declared or seen); ``instances``: seen in the ads;
    ``down``: of them on the hosts (or lost); ``up``: the others up long enough now;
    ``needed``: how many must be (0 for a coordinator or no policy); ``wait``: seconds to
    SLA (0 when safe; ``None``: never without new instances, or a coordinator's no).
    """

    group: str
    kind: SlaKind | None
    safe: bool
    size: int
    instances: int
    down: int
    up: int
    needed: int
    duration: float
    wait: float | None
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Probe:
    """Whether ``hosts`` may go now: every affected group's verdict, sorted by group."""

    hosts: tuple[str, ...]
    unknown: tuple[str, ...]
    groups: tuple[GroupVerdict, ...]

    @property
    def safe(self) -> bool:
        return all(g.safe for g in self.groups)

    @property
    def broken(self) -> tuple[GroupVerdict, ...]:
        """The groups taking the hosts down now would break."""
        return tuple(g for g in self.groups if not g.safe)

    @property
    def wait(self) -> float | None:
        """Seconds until every affected group's SLA allows it (``None``: not by waiting)."""
        waits = [g.wait for g in self.broken]
        if any(w is None for w in waits):
            return None
        return max((w for w in waits if w is not None), default=0.0)


def instances(entries: Iterable[NodeAds]) -> list[Instance]:
    """Every instance of every job group in ``entries``."""
    found = []
    for entry in entries:
        for ad in entry.slots:
            group = ad.get("JobGroup")
            if not isinstance(group, str) or ad.get("SlotType") != "Dynamic":
                continue
            if ad.get("State") != "Claimed" or ad.get("Activity") not in _UP_ACTIVITIES:
                continue
            now, run = _number(ad.get("MyCurrentTime")), _number(ad.get("TotalJobRunTime", 0))
            if now is None or run is None:
                continue
            found.append(
                Instance(
                    group=group,
                    node=entry.name,
                    slot=str(ad.get("Name", "")),
                    up_since=now - max(0.0, run),
                )
            )
    return found


def _number(value: object) -> float | None:
    """``value`` as a finite float, or ``None`` if it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _matches(entry: NodeAds, hosts: Collection[str]) -> bool:
    return entry.name in hosts or entry.machine.get("Machine") in hosts


def _on_hosts(
    entries: Sequence[NodeAds], hosts: Collection[str]
) -> tuple[frozenset[str], tuple[str, ...]]:
    """The node names ``hosts`` designates (by ``Name`` or ``Machine``), and the hosts no
    node answers to."""
    hosts = frozenset(hosts)
    nodes = frozenset(e.name for e in entries if _matches(e, hosts))
    known = {e.name for e in entries} | {str(e.machine.get("Machine")) for e in entries}
    return nodes, tuple(sorted(h for h in set(hosts) if h not in known))


def questions(
    entries: Sequence[NodeAds],
    policies: Mapping[str, SlaPolicy],
    hosts: Collection[str],
    now: float,
    *,
    lost: Collection[str] = (),
    found: Sequence[Instance] | None = None,
) -> list[Question]:
    """What each affected group's coordinator must be asked before ``hosts`` go
    (``found``: :func:`instances` of ``entries``, when the caller has them already)."""
    del now  # the question does not depend on it; the signature matches probe()'s
    nodes, _ = _on_hosts(entries, hosts)
    found = [i for i in (instances(entries) if found is None else found) if i.node not in lost]
    asked = []
    for group in sorted({i.group for i in found if i.node in nodes}):
        policy = policies.get(group)
        if policy is None or policy.kind is not SlaKind.COORDINATOR:
            continue
        assert policy.url is not None
        asked.append(
            Question(
                group=group,
                url=policy.url,
                hosts=tuple(sorted(hosts)),
                instances=tuple(i for i in found if i.group == group and i.node in nodes),
            )
        )
    return asked


def probe(
    entries: Sequence[NodeAds],
    policies: Mapping[str, SlaPolicy],
    hosts: Collection[str],
    now: float,
    *,
    lost: Collection[str] = (),
    answers: Mapping[str, Answer] | None = None,
    found: Sequence[Instance] | None = None,
) -> Probe:
    """Whether taking ``hosts`` down at ``now`` keeps every affected group's SLA.

    ``hosts`` name nodes by ``Name`` or ``Machine``; those no ad answers to are listed in
    ``unknown``. ``lost``: names of nodes whose instances count as down already (they
    count in the group's size; they never make a group affected).
    ``answers``: the coordinators' answers by group (see :func:`questions`). ``found``:
    :func:`instances` of ``entries``, when the caller has them already (probing many
    host groups of the same ads).
    """
    nodes, unknown = _on_hosts(entries, hosts)
    gone = nodes | frozenset(lost)
    by_group: dict[str, list[Instance]] = {}
    for one in instances(entries) if found is None else found:
        by_group.setdefault(one.group, []).append(one)
    verdicts = [
        _verdict(
            group,
            policies.get(group),
            members,
            gone,
            now,
            answer=None if answers is None else answers.get(group),
        )
        for group, members in sorted(by_group.items())
        if any(i.node in nodes for i in members)
    ]
    return Probe(hosts=tuple(sorted(hosts)), unknown=unknown, groups=tuple(verdicts))


def _verdict(
    group: str,
    policy: SlaPolicy | None,
    members: list[Instance],
    gone: frozenset[str],
    now: float,
    *,
    answer: Answer | None,
) -> GroupVerdict:
    staying = [i for i in members if i.node not in gone]
    down = len(members) - len(staying)
    seen = len(members)
    common: dict[str, Any] = {"group": group, "instances": seen, "down": down}
    if policy is None:
        return GroupVerdict(
            kind=None, safe=True, size=seen, up=len(staying), needed=0, duration=0.0,
            wait=0.0, reason="no SLA policy", **common,
        )  # fmt: skip
    size = policy.size if policy.size is not None else seen
    if policy.kind is SlaKind.COORDINATOR:
        if answer is None:
            answer = Answer(allow=False, reason="the coordinator was not asked")
        return GroupVerdict(
            kind=policy.kind, safe=answer.allow, size=size, up=len(staying), needed=0,
            duration=0.0, wait=0.0 if answer.allow else None,
            reason=f"coordinator {policy.url}: {'yes' if answer.allow else 'no'}: {answer.reason}",
            **common,
        )  # fmt: skip
    needed = policy.needed(size)
    ages = sorted((i.up_for(now) for i in staying), reverse=True)
    up = sum(1 for age in ages if age >= policy.duration)
    safe = up >= needed
    wait: float | None
    if safe:
        wait = 0.0
    elif len(ages) < needed:
        wait = None
    else:
        wait = max(0.0, policy.duration - ages[needed - 1])
    want = (
        f"{policy.percentage:g} % of {size} ({needed})"
        if policy.kind is SlaKind.PERCENTAGE
        else f"{needed}"
    )
    if safe:
        reason = f"{up} of {size} would stay up for {policy.duration:g} s; {want} needed"
    elif wait is None:
        reason = (
            f"{up} of {size} would stay up for {policy.duration:g} s; {want} needed, "
            f"and only {len(ages)} would be left running"
        )
    else:
        reason = (
            f"{up} of {size} would stay up for {policy.duration:g} s; {want} needed "
            f"(in {math.ceil(wait)} s)"
        )
    return GroupVerdict(
        kind=policy.kind, safe=safe, size=size, up=up, needed=needed,
        duration=policy.duration, wait=wait, reason=reason, **common,
    )  # fmt: skip


def group_hosts(
    entries: Sequence[NodeAds], hosts: Collection[str], grouping: str | None
) -> list[tuple[str, tuple[str, ...]]]:
    """``hosts`` split into host groups, each ``(key, hosts)``, sorted by key.

    ``grouping``: ``None``: one group of all of them (key ``"*"``); ``"host"``: one group
    per host (Aurora's default, key the host); an attribute name (``Rack``): by its value
    in each node's machine ad (key the value as text; ``"undefined"`` without one). Hosts
    no ad answers to go in their own group each.
    """
    if grouping is None:
        return [("*", tuple(sorted(set(hosts))))] if hosts else []
    if grouping == "host":
        return [(h, (h,)) for h in sorted(set(hosts))]
    by_host: dict[str, NodeAds] = {}
    for e in entries:
        by_host.setdefault(str(e.machine.get("Machine", e.name)), e)
    by_host.update((e.name, e) for e in entries)
    groups: dict[str, set[str]] = {}
    for host in set(hosts):
        entry = by_host.get(host)
        if entry is None:
            key = host
        else:
            value = _attribute(entry.machine, grouping)
            key = "undefined" if value is None else _text(value)
        groups.setdefault(key, set()).add(host)
    return [(k, tuple(sorted(v))) for k, v in sorted(groups.items())]


def _attribute(ad: Mapping[str, Any], name: str) -> Any:
    folded = name.casefold()
    return next((v for k, v in ad.items() if k.casefold() == folded), None)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- JSON


_FIELDS = frozenset({"kind", "percentage", "count", "duration", "url", "size"})


def policy_from_json(group: str, doc: object) -> SlaPolicy:
    """A policy from its JSON document (``{"kind": "percentage", "percentage": 95,
    "duration": 1800, "size": 100}``); raises :class:`InvalidRequest` naming the defect."""
    if not isinstance(doc, Mapping):
        raise InvalidRequest("a policy is a JSON object")
    extra = sorted(set(doc) - _FIELDS)
    if extra:
        raise InvalidRequest(f"unknown field(s): {', '.join(map(str, extra))}")
    try:
        kind = SlaKind(str(doc.get("kind")))
    except ValueError:
        raise InvalidRequest("kind must be percentage, count or coordinator") from None

    def number(name: str, *, whole: bool) -> Any:
        value = doc.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidRequest(f"{name} must be a number")
        if whole and (not isinstance(value, int) and not float(value).is_integer()):
            raise InvalidRequest(f"{name} must be a whole number")
        return int(value) if whole else float(value)

    url = doc.get("url")
    if url is not None and not isinstance(url, str):
        raise InvalidRequest("url must be a string")
    duration = number("duration", whole=False)
    return SlaPolicy(
        group=group,
        kind=kind,
        percentage=number("percentage", whole=False),
        count=number("count", whole=True),
        duration=0.0 if duration is None else duration,
        url=url,
        size=number("size", whole=True),
    )


def policy_json(policy: SlaPolicy) -> dict[str, Any]:
    """A policy's JSON document (fields that do not apply are left out)."""
    doc: dict[str, Any] = {"group": policy.group, "kind": str(policy.kind)}
    if policy.percentage is not None:
        doc["percentage"] = policy.percentage
    if policy.count is not None:
        doc["count"] = policy.count
    if policy.kind is not SlaKind.COORDINATOR:
        doc["duration"] = policy.duration
    if policy.url is not None:
        doc["url"] = policy.url
    if policy.size is not None:
        doc["size"] = policy.size
    return doc


def verdict_json(verdict: GroupVerdict) -> dict[str, Any]:
    """One group's verdict as the API returns it (``wait`` rounded up to 0.001 s)."""
    return {
        "group": verdict.group,
        "kind": None if verdict.kind is None else str(verdict.kind),
        "safe": verdict.safe,
        "size": verdict.size,
        "instances": verdict.instances,
        "down": verdict.down,
        "up": verdict.up,
        "needed": verdict.needed,
        "duration": verdict.duration,
        "wait": None if verdict.wait is None else math.ceil(verdict.wait * 1000) / 1000,
        "reason": verdict.reason,
    }
