"""The SLA arithmetic (nodeagent.master._sla), table by table, with Aurora's own example."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeagent.master._sla import (
    Answer,
    SlaKind,
    SlaPolicy,
    group_hosts,
    instances,
    policy_from_json,
    policy_json,
    probe,
    questions,
)
from slots import InvalidRequest

NOW = 1_700_000_000.0
MIN = 60.0


@dataclass
class Node:
    """A node's ads as the master holds them (name, machine, slots)."""

    name: str
    machine: dict[str, Any] = field(default_factory=dict)
    slots: list[dict[str, Any]] = field(default_factory=list)


def slot(group: str | None, up_for: float, **extra: Any) -> dict[str, Any]:
    ad: dict[str, Any] = {
        "Name": "slot1_1@x",
        "SlotType": "Dynamic",
        "State": "Claimed",
        "Activity": "Busy",
        "MyCurrentTime": int(NOW),
        "TotalJobRunTime": up_for,
    }
    if group is not None:
        ad["JobGroup"] = group
    ad.update(extra)
    return ad


def node(name: str, *slots: dict[str, Any], **machine: Any) -> Node:
    pslot = {"Name": f"slot1@{name}", "SlotType": "Partitionable", "State": "Unclaimed"}
    return Node(name=name, machine={"Machine": name, **machine}, slots=[pslot, *slots])


def fleet(ages: list[float], group: str = "www-data/prod/hello") -> list[Node]:
    """One instance per node, ``node0`` … with the given ages (seconds up)."""
    return [node(f"node{i}", slot(group, age)) for i, age in enumerate(ages)]


def percentage(p: float, d: float, size: int | None = None) -> dict[str, SlaPolicy]:
    group = "www-data/prod/hello"
    policy = SlaPolicy(group=group, kind=SlaKind.PERCENTAGE, percentage=p, duration=d, size=size)
    return {group: policy}


def count(n: int, d: float, size: int | None = None) -> dict[str, SlaPolicy]:
    group = "www-data/prod/hello"
    return {group: SlaPolicy(group=group, kind=SlaKind.COUNT, count=n, duration=d, size=size)}


# ------------------------------------------------------------------ Aurora's example (seed 004)


def test_aurora_100_instances_95_percent_over_30_minutes() -> None:
    """100 instances, all up for more than 30 minutes: any one host may go (99 %). Five
    taken down and restarted elsewhere (up 1 to 5 minutes): 95 % still up for 30 minutes,
    so no further host with an old instance may go until a restarted one has been up for
    30 minutes: the youngest old one is not needed, the oldest young one is."""
    policies = percentage(95, 30 * MIN)
    everyone_old = fleet([31 * MIN] * 100)
    one = probe(everyone_old, policies, {"node0"}, NOW)
    assert one.safe
    assert one.wait == 0
    (verdict,) = one.groups
    assert (verdict.size, verdict.down, verdict.up, verdict.needed) == (100, 1, 99, 95)

    five = probe(everyone_old, policies, {f"node{i}" for i in range(5)}, NOW)
    assert five.safe  # exactly 95 %
    six = probe(everyone_old, policies, {f"node{i}" for i in range(6)}, NOW)
    assert not six.safe
    assert six.wait is None

    restarted = fleet([1 * MIN, 2 * MIN, 3 * MIN, 4 * MIN, 5 * MIN] + [31 * MIN] * 95)
    assert probe(restarted, policies, {"node5"}, NOW).safe is False
    later = probe(restarted, policies, {"node5"}, NOW)
    (verdict,) = later.broken
    assert (verdict.up, verdict.needed) == (94, 95)
    assert later.wait == pytest.approx(25 * MIN)  # the 5-minute one reaches 30 minutes
    # If nothing changes, the probe 25 minutes on says yes.
    assert probe(restarted, policies, {"node5"}, NOW + 25 * MIN).safe
    assert not probe(restarted, policies, {"node5"}, NOW + 25 * MIN - 1).safe
    # Taking a restarted instance's host costs nothing already counted.
    assert probe(restarted, policies, {"node0"}, NOW).safe


# ------------------------------------------------------------------ percentage and count tables


@pytest.mark.parametrize(
    ("ages", "policies", "hosts", "safe", "wait", "up", "needed"),
    [
        # exactly at D counts as up
        ([30 * MIN] * 4, percentage(75, 30 * MIN), {"node0"}, True, 0.0, 3, 3),
        ([30 * MIN - 1] + [40 * MIN] * 3, percentage(75, 30 * MIN), {"node1"}, False, 1.0, 2, 3),
        # exactly P %: 3 of 4 is 75 %
        ([40 * MIN] * 4, percentage(75, 30 * MIN), {"node0"}, True, 0.0, 3, 3),
        ([40 * MIN] * 4, percentage(75.01, 30 * MIN), {"node0"}, False, None, 3, 4),
        # decimals are exact: 99.9 % of 1000 is 999
        ([40 * MIN] * 1000, percentage(99.9, 30 * MIN), {"node0"}, True, 0.0, 999, 999),
        ([40 * MIN] * 1000, percentage(99.9, 30 * MIN), {"node0", "node1"}, False, None, 998, 999),
        # the declared size, not the instances seen, is the denominator
        ([40 * MIN] * 8, percentage(80, 30 * MIN, size=10), {"node0"}, False, None, 7, 8),
        ([40 * MIN] * 8, percentage(70, 30 * MIN, size=10), {"node0"}, True, 0.0, 7, 7),
        # count policies
        ([10.0] * 6, count(4, 2), {"node0", "node1"}, True, 0.0, 4, 4),
        ([10.0] * 6, count(4, 2), {"node0", "node1", "node2"}, False, None, 3, 4),
        ([1.0, 1.5, 10.0, 10.0, 10.0, 10.0], count(4, 2), {"node2"}, False, 0.5, 3, 4),
        ([2.0, 10.0, 10.0, 10.0, 10.0], count(4, 2), {"node1"}, True, 0.0, 4, 4),
        # duration 0: every running instance is up long enough
        ([0.0] * 3, count(2, 0), {"node0"}, True, 0.0, 2, 2),
    ],
)
def test_the_table(
    ages: list[float],
    policies: dict[str, SlaPolicy],
    hosts: set[str],
    safe: bool,
    wait: float | None,
    up: int,
    needed: int,
) -> None:
    result = probe(fleet(ages), policies, hosts, NOW)
    (verdict,) = result.groups
    assert (result.safe, verdict.up, verdict.needed) == (safe, up, needed), verdict.reason
    assert result.wait == (None if wait is None else pytest.approx(wait))
    assert verdict.wait == result.wait
    assert verdict.down == len(hosts)


def test_only_groups_with_instances_on_the_hosts_are_affected() -> None:
    nodes = [
        node("a", slot("web", 100), slot("db", 100)),
        node("b", slot("web", 100)),
        node("c", slot("db", 1)),
        node("d", slot(None, 100)),
    ]
    policies = {
        "web": SlaPolicy(group="web", kind=SlaKind.COUNT, count=1, duration=10),
        "db": SlaPolicy(group="db", kind=SlaKind.COUNT, count=1, duration=10),
    }
    assert [g.group for g in probe(nodes, policies, {"b"}, NOW).groups] == ["web"]
    assert probe(nodes, policies, {"d"}, NOW).groups == ()
    both = probe(nodes, policies, {"a"}, NOW)
    assert [(g.group, g.safe) for g in both.groups] == [("db", False), ("web", True)]
    assert [g.group for g in both.broken] == ["db"]
    assert both.wait == pytest.approx(9)


def test_a_group_without_policy_is_affected_and_safe() -> None:
    result = probe(fleet([5.0, 5.0]), {}, {"node0"}, NOW)
    (verdict,) = result.groups
    assert (result.safe, verdict.kind, verdict.reason) == (True, None, "no SLA policy")


@pytest.mark.parametrize(
    ("extra", "counted"),
    [
        ({}, True),
        ({"Activity": "Retiring"}, True),
        ({"Activity": "Suspended"}, False),
        ({"State": "Preempting", "Activity": "Vacating"}, False),
        ({"SlotType": "Partitionable"}, False),
        ({"TotalJobRunTime": None}, False),
        ({"MyCurrentTime": "now"}, False),
        ({"TotalJobRunTime": True}, False),
    ],
)
def test_what_counts_as_an_instance(extra: dict[str, Any], counted: bool) -> None:
    found = instances([node("a", slot("web", 100, **extra))])
    assert len(found) == int(counted)
    if counted:
        assert found[0].up_since == NOW - 100


def test_an_instance_on_a_lost_node_counts_as_down() -> None:
    nodes = fleet([100.0] * 4)
    policies = count(3, 10)
    assert probe(nodes, policies, {"node0"}, NOW).safe
    lost = probe(nodes, policies, {"node0"}, NOW, lost={"node1"})
    (verdict,) = lost.groups
    assert (lost.safe, verdict.size, verdict.down, verdict.up) == (False, 4, 2, 2)
    assert lost.wait is None
    # A lost node alone does not make its group affected.
    assert probe(nodes, policies, {"nodeX"}, NOW, lost={"node1"}).groups == ()


def test_hosts_by_name_or_machine_and_unknown_ones() -> None:
    nodes = [node("n1", slot("web", 100), Machine="n1.example.org")]
    policies = count(1, 10)
    result = probe(nodes, policies, {"n1.example.org", "ghost"}, NOW)
    assert result.unknown == ("ghost",)
    assert [g.down for g in result.groups] == [1]


# ------------------------------------------------------------------ coordinators


def coordinated() -> tuple[list[Node], dict[str, SlaPolicy]]:
    nodes = [node("a", slot("cache", 100)), node("b", slot("cache", 100))]
    policy = SlaPolicy(group="cache", kind=SlaKind.COORDINATOR, url="http://127.0.0.1:9/may")
    return nodes, {"cache": policy}


def test_a_coordinator_group_is_unsafe_until_asked_and_says_what_it_answered() -> None:
    nodes, policies = coordinated()
    (question,) = questions(nodes, policies, {"a"}, NOW)
    assert (question.group, question.url, question.hosts) == (
        "cache",
        "http://127.0.0.1:9/may",
        ("a",),
    )
    assert [i.node for i in question.instances] == ["a"]
    unasked = probe(nodes, policies, {"a"}, NOW)
    assert not unasked.safe
    assert unasked.wait is None
    assert "not asked" in unasked.groups[0].reason
    yes = probe(nodes, policies, {"a"}, NOW, answers={"cache": Answer(allow=True, reason="ok")})
    assert yes.safe
    assert yes.wait == 0
    no = probe(nodes, policies, {"a"}, NOW, answers={"cache": Answer(allow=False, reason="busy")})
    assert not no.safe
    assert no.wait is None
    assert no.groups[0].reason == "coordinator http://127.0.0.1:9/may: no: busy"
    assert questions(nodes, policies, {"zzz"}, NOW) == []


# ------------------------------------------------------------------ host groups


def test_host_groups() -> None:
    nodes = [
        node("a", Rack="r1"),
        node("b", Rack="r2"),
        node("c", Rack="r1"),
        node("d"),
        node("e", Ssd=True),
    ]
    hosts = {"a", "b", "c", "d", "ghost"}
    assert group_hosts(nodes, hosts, None) == [("*", ("a", "b", "c", "d", "ghost"))]
    assert group_hosts(nodes, {"b", "a"}, "host") == [("a", ("a",)), ("b", ("b",))]
    assert group_hosts(nodes, hosts, "Rack") == [
        ("ghost", ("ghost",)),
        ("r1", ("a", "c")),
        ("r2", ("b",)),
        ("undefined", ("d",)),
    ]
    assert group_hosts(nodes, hosts, "rack") == group_hosts(nodes, hosts, "Rack")
    assert group_hosts(nodes, {"e"}, "Ssd") == [("true", ("e",))]
    assert group_hosts(nodes, set(), None) == []


# ------------------------------------------------------------------ policies from JSON


@pytest.mark.parametrize(
    "doc",
    [
        {"kind": "percentage", "percentage": 95, "duration": 1800},
        {"kind": "percentage", "percentage": 99.5, "duration": 0, "size": 100},
        {"kind": "count", "count": 4, "duration": 2},
        {"kind": "count", "count": 1, "duration": 2.5, "size": 6},
        {"kind": "coordinator", "url": "http://127.0.0.1:8080/sla"},
        {"kind": "coordinator", "url": "https://coord.example.org/may?x=1", "size": 3},
    ],
)
def test_good_policies_round_trip(doc: dict[str, Any]) -> None:
    policy = policy_from_json("www-data/prod/web", doc)
    again = policy_json(policy)
    assert again.pop("group") == "www-data/prod/web"
    assert policy_from_json("www-data/prod/web", again) == policy


@pytest.mark.parametrize(
    ("group", "doc", "problem"),
    [
        ("web", [], "a JSON object"),
        ("web", {"kind": "percent"}, "kind must be"),
        ("web", {"kind": None}, "kind must be"),
        ("web", {"kind": "percentage", "duration": 5}, "0 < percentage <= 100"),
        ("web", {"kind": "percentage", "percentage": 0}, "0 < percentage <= 100"),
        ("web", {"kind": "percentage", "percentage": 100.5}, "0 < percentage <= 100"),
        ("web", {"kind": "percentage", "percentage": "95"}, "percentage must be a number"),
        ("web", {"kind": "percentage", "percentage": True}, "percentage must be a number"),
        ("web", {"kind": "percentage", "percentage": 95, "count": 3}, "has no count"),
        ("web", {"kind": "count", "count": 0}, "1 <= count"),
        ("web", {"kind": "count", "count": 2.5}, "count must be a whole number"),
        ("web", {"kind": "count", "count": 2, "duration": -1}, "duration must be"),
        ("web", {"kind": "count", "count": 2, "duration": float("inf")}, "duration must be"),
        ("web", {"kind": "count", "count": 2, "url": "http://x/"}, "has no url"),
        ("web", {"kind": "count", "count": 2, "size": 0}, "size must be"),
        ("web", {"kind": "coordinator"}, "needs an http"),
        ("web", {"kind": "coordinator", "url": "ftp://x/"}, "needs an http"),
        ("web", {"kind": "coordinator", "url": "http:///path"}, "needs an http"),
        ("web", {"kind": "coordinator", "url": "http://x/ y"}, "needs an http"),
        ("web", {"kind": "coordinator", "url": 7}, "url must be a string"),
        ("web", {"kind": "coordinator", "url": "http://x/", "duration": 5}, "has no duration"),
        ("web", {"kind": "count", "count": 2, "extra": 1}, "unknown field"),
        ("a//b", {"kind": "count", "count": 2}, "is not a job group"),
    ],
)
def test_bad_policies_are_refused(group: str, doc: Any, problem: str) -> None:
    with pytest.raises(InvalidRequest, match=problem):
        policy_from_json(group, doc)


def test_instances_found_once_give_the_same_probes() -> None:
    nodes = fleet([1 * MIN, 40 * MIN, 40 * MIN, 40 * MIN])
    policies = percentage(75, 30 * MIN)
    found = instances(nodes)
    for key, hosts in group_hosts(nodes, [n.name for n in nodes], "host"):
        assert probe(nodes, policies, hosts, NOW, found=found) == probe(
            nodes, policies, hosts, NOW
        ), key
        assert questions(nodes, policies, hosts, NOW, found=found) == []
