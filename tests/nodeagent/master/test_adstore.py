"""The master's ad store: matching Mesos machine ids to nodes, as ads come and go."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.master._adstore import AdStore, _Index, project
from slots import InvalidRequest, JobSpec, Machine, MachinePolicy, Resources
from slots._classad import MAX_NESTING

NOW = 1_800_000_000.0


def ad(name: str, host: str, ip: str | None) -> dict[str, Any]:
    machine: dict[str, Any] = {"Name": name, "Machine": host}
    if ip is not None:
        machine["MachineIp"] = ip
    return {"machine": machine, "slots": []}


def names(store: AdStore, hostname: str | None, ip: str | None) -> list[str]:
    return [entry.name for entry in store.find(hostname, ip)]


def test_find_follows_every_ad_that_arrives_or_is_forgotten() -> None:
    store = AdStore(lifetime=60)
    store.update(ad("n1", "N1.test", "10.0.0.1"), NOW)
    store.update(ad("n2", "n2.test", "10.0.0.2"), NOW)
    # Asked once, so that a stale answer would be there to be returned.
    queries: list[tuple[str | None, str | None]] = [
        ("n1.test", None),
        ("N1.TEST", "10.0.0.1"),
        ("n1.test", "10.0.0.9"),
        (None, "10.0.0.1"),
        (None, "10.0.0.9"),
        ("n3.test", None),
    ]
    steps: list[tuple[str, Any, list[list[str]]]] = [
        ("start", None, [["n1"], ["n1"], [], ["n1"], [], []]),
        ("update", ad("n1", "n1.test", "10.0.0.9"), [["n1"], [], ["n1"], [], ["n1"], []]),
        ("update", ad("n1b", "N1.Test", None), [["n1", "n1b"], [], ["n1"], [], ["n1"], []]),
        ("update", ad("n3", "n3.test", "10.0.0.1"),
         [["n1", "n1b"], [], ["n1"], ["n3"], ["n1"], ["n3"]]),
        ("forget", "n1", [["n1b"], [], [], ["n3"], [], ["n3"]]),
    ]  # fmt: skip
    for kind, arg, expected in steps:
        if kind == "update":
            store.update(arg, NOW)
        elif kind == "forget":
            store.forget(arg)
        assert [names(store, h, i) for h, i in queries] == expected, (kind, arg)


def test_find_answers_with_the_latest_entry_of_a_node() -> None:
    store = AdStore(lifetime=60)
    store.update(ad("n1", "n1.test", "10.0.0.1"), NOW)
    first = store.find("n1.test", "10.0.0.1")[0]
    store.update(ad("n1", "n1.test", "10.0.0.1"), NOW + 5)
    latest = store.find("n1.test", "10.0.0.1")[0]
    assert latest is not first
    assert latest.received_at == NOW + 5


def test_a_watcher_is_told_of_every_ad_that_arrives_or_goes() -> None:
    store = AdStore(lifetime=60)
    store.update(ad("n1", "n1.test", "10.0.0.1"), NOW)
    watched = store.watch()
    assert watched == set()
    store.update(ad("n1", "N1.test", "10.0.0.9"), NOW + 1)  # its old name and its new
    store.update(ad("n2", "n2.test", None), NOW + 1)
    assert watched == {("n1.test", "10.0.0.1"), ("n1.test", "10.0.0.9"), ("n2.test", None)}
    watched.clear()
    store.forget("n2")
    store.forget("n3")  # none: nothing to tell
    other = store.watch()
    store.update(ad("n1", "n1.test", "10.0.0.9"), NOW + 2)
    assert watched == {("n2.test", None), ("n1.test", "10.0.0.9")}
    assert other == {("n1.test", "10.0.0.9")}


# ------------------------------------------------------------------ what an ad may hold


def node_ad(name: str = "n1") -> dict[str, Any]:
    """A real agent's ad: a machine with one running claim."""
    machine = Machine(
        host=name,
        ip="10.0.0.1",
        address="http://10.0.0.1:9621",
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=60),
        now=NOW,
    )
    machine.claim(NOW, resources=Resources(cpus=1), spec=JobSpec())
    return machine.ad(NOW)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("where", "attribute", "value", "message"),
    [
        ("slot", "DrainSuspendedJobs", [], "DrainSuspendedJobs must be a string"),
        ("machine", "DrainSuspendedJobs", {"a": 1}, "DrainSuspendedJobs must be a string"),
        ("slot", "DrainSuspendedJobs", None, "DrainSuspendedJobs must be absent rather than null"),
        ("slot", "State", [], "State must be a string"),
        ("slot", "Activity", {}, "Activity must be a string"),
        ("slot", "SlotType", 3, "SlotType must be a string"),
        ("slot", "Cpus", None, "Cpus must be absent rather than null"),
        ("slot", "TotalJobRunTime", None, "TotalJobRunTime must be absent rather than null"),
        ("machine", "MaxJobRetirementTime", None, "must be absent rather than null"),
        ("machine", "MachineMaxVacateTime", None, "must be absent rather than null"),
        ("machine", "TotalMachineDrainingBadput", [], "must be a finite number"),
        ("machine", "TotalMachineDrainingUnclaimedTime", "x", "must be a finite number"),
        ("machine", "Anything", nested(MAX_NESTING + 1), "Anything nests lists or records"),
        ("slot", "JobAd", {"a": nested(MAX_NESTING)}, "JobAd nests lists or records"),
        ("machine", "MyType", ["Machine"], "MyType must be a string"),
    ],
)
def test_an_ad_the_master_cannot_read_is_refused_and_the_previous_one_stays(
    where: str, attribute: str, value: Any, message: str
) -> None:
    store = AdStore(lifetime=60)
    kept = store.update(node_ad(), NOW)
    bad = node_ad()
    target = bad["machine"] if where == "machine" else bad["slots"][-1]
    target[attribute] = value
    with pytest.raises(InvalidRequest, match=message):
        store.update(bad, NOW + 1)
    assert store.get("n1") is kept
    assert store.received == 1
    # What the refused values would have broken reads the kept ad.
    assert kept.empty is False
    assert kept.drain_bound == 600.0
    assert kept.forecast is not None


def test_values_within_the_nesting_bound_are_kept() -> None:
    store = AdStore(lifetime=60)
    ad = node_ad()
    ad["slots"][-1]["JobAd"] = {"Args": nested(MAX_NESTING - 1)}
    assert store.update(ad, NOW).slots[-1]["JobAd"] == {"Args": nested(MAX_NESTING - 1)}


def test_an_other_daemons_ad_is_checked_for_nesting_too() -> None:
    store = AdStore(lifetime=60)
    with pytest.raises(InvalidRequest, match="Stats nests"):
        store.update(
            {"machine": {"Name": "d", "MyType": "Defrag", "Stats": nested(100)}, "slots": []}, NOW
        )
    assert store.query(NOW, my_type="Defrag") == []


@pytest.mark.parametrize("ad", [[], "x", None, {"machine": [], "slots": []}])
def test_what_is_not_an_ad_is_refused(ad: Any) -> None:
    with pytest.raises(InvalidRequest, match="an ad is"):
        AdStore(lifetime=60).update(ad, NOW)


def test_query_serves_every_ad_and_project_keeps_the_named_attributes() -> None:
    store = AdStore(lifetime=60)
    store.update(node_ad("n2"), NOW)
    store.update(node_ad("n1"), NOW + 1)
    machines = store.query(NOW + 100)
    assert [(a["Name"], a["LastHeardFrom"], a["Lost"]) for a in machines] == [
        ("n1", int(NOW + 1), True),
        ("n2", int(NOW), True),
    ]
    slot_ads = store.query(NOW + 2, slots=True)
    assert len(slot_ads) == 4
    assert all(s["Lost"] is False for s in slot_ads)
    assert project(machines, ["Name", "Nope"]) == [{"Name": "n1"}, {"Name": "n2"}]
    assert project(machines, None) == machines


def shutting_down_ad(name: str = "n1") -> dict[str, Any]:
    """A real agent's ad, edited as its agent publishes it while the machine shuts down:
    ``ShuttingDown`` and the agent's own drain, reason ``shutdown``."""
    ad = node_ad(name)
    ad["machine"] |= {
        "ShuttingDown": True,
        "DrainState": "draining",
        "DrainingRequestId": "9",
        "DrainReason": "shutdown",
        "DrainSchedule": "quick",
        "Start": False,
    }
    return ad


# The ad's age at the instant asked (lifetime 60 s, reboot grace 600 s), and whether its
# node is then lost, rebooting, and newly lost for the sweep.
@pytest.mark.parametrize(
    ("shutting_down", "age", "lost", "rebooting"),
    [
        (False, 0, False, False),
        (False, 60, False, False),
        (False, 61, True, False),
        (True, 0, False, False),
        (True, 60, False, False),
        (True, 61, False, True),
        (True, 660, False, True),
        (True, 661, True, False),
    ],
)
def test_a_node_shutting_down_is_rebooting_not_lost_for_its_grace(
    shutting_down: bool, age: float, lost: bool, rebooting: bool
) -> None:
    store = AdStore(lifetime=60, reboot_grace=600)
    entry = store.update(shutting_down_ad() if shutting_down else node_ad(), NOW)
    now = NOW + age
    assert entry.shutting_down is shutting_down
    assert (store.lost(entry, now), store.rebooting(entry, now)) == (lost, rebooting)
    assert (store.lost_at(now)(entry), store.rebooting_at(now)(entry)) == (lost, rebooting)
    served = store.query(now)[0]
    assert (served["Lost"], served["Rebooting"], served.get("ShuttingDown")) == (
        lost,
        rebooting,
        True if shutting_down else None,
    )
    assert store.sweep(now) == (["n1"] if lost else [])
    assert store.expired == int(lost)


def test_the_sweep_counts_a_rebooting_node_lost_once_its_grace_has_run_out() -> None:
    store = AdStore(lifetime=60, reboot_grace=600)
    store.update(shutting_down_ad("n1"), NOW)
    store.update(node_ad("n2"), NOW)
    assert [store.sweep(NOW + t) for t in (30, 61, 600, 661, 700)] == [
        [],
        ["n2"],
        [],
        ["n1"],
        [],
    ]
    store.reboot_grace = 1200  # reloaded: a longer grace makes it rebooting again
    entry = store.get("n1")
    assert entry is not None
    assert store.rebooting(entry, NOW + 700)
    assert not store.lost(entry, NOW + 700)
    # Back after the reboot: live, and its next silence is an ordinary one.
    back = store.update(node_ad("n1"), NOW + 800)
    assert not back.shutting_down
    assert store.sweep(NOW + 861) == ["n1"]


def test_the_sweep_reads_the_ads_whose_time_came_as_reading_every_ad_would() -> None:
    """Ads replaced, forgotten, shutting down, a lifetime reloaded shorter: each sweep
    marks the nodes that reading every ad finds newly lost."""
    store = AdStore(lifetime=60, reboot_grace=600)
    marked: set[str] = set()
    story: list[tuple[float, Any]] = [
        (0, [node_ad(f"n{i}") for i in range(5)] + [shutting_down_ad("s")]),
        (30, [node_ad("n1")]),
        (59, ["n2"]),
        (61, []),
        (89, []),
        (91, [node_ad("n0")]),
        (190, [node_ad("n3")]),
        (200, "lifetime 20"),
        (205, []),
        (211, []),
        (700, []),
    ]
    for later, what in story:
        now = NOW + later
        if what == "lifetime 20":
            store.lifetime = 20
            continue
        for each in what:
            if isinstance(each, str):
                store.forget(each)
                marked.discard(each)
            else:
                store.update(each, now)
                marked.discard(each["machine"]["Name"])
        expected = sorted(
            e.name for e in store.entries() if store.lost(e, now) and e.name not in marked
        )
        assert store.sweep(now) == expected, later
        marked.update(expected)
    assert marked == {"n0", "n1", "n3", "n4", "s"}


@pytest.mark.parametrize(
    ("steps", "held", "expected"),
    [
        ([("add", "h", "a")], "a", {"h": ("a",)}),
        ([("add", "h", "a"), ("add", "h", "a")], "a", {"h": ("a",)}),
        ([("add", "h", "a"), ("add", "h", "b")], {"a", "b"}, {"h": ("a", "b")}),
        ([("add", "h", "a"), ("add", "h", "b"), ("discard", "h", "a")], "b", {"h": ("b",)}),
        ([("add", "h", "a"), ("discard", "h", "a")], None, {"h": ()}),
        ([("add", "h", "a"), ("discard", "h", "b")], "a", {"h": ("a",)}),
        ([("discard", "h", "a")], None, {"h": ()}),
        ([("add", "h", "a"), ("add", "g", "a"), ("pop", "h", "")], None, {"h": (), "g": ("a",)}),
        (
            [("add", "h", "a"), ("add", "h", "b"), ("add", "h", "c"), ("discard", "h", "b")],
            {"a", "c"},
            {"h": ("a", "c")},
        ),
    ],
)
def test_an_index_holds_a_lone_value_bare_and_drops_an_empty_key(
    steps: list[tuple[str, str, str]], held: object, expected: dict[str, tuple[str, ...]]
) -> None:
    """The ad store's indexes (host → names, ip → names): a key with one value holds it
    bare (no set of one per node), a key whose last value goes is dropped."""
    index: _Index[str] = _Index()
    for op, key, value in steps:
        if op == "pop":
            index.pop(key)
        else:
            getattr(index, op)(key, value)
    assert index._values.get("h") == held
    assert {key: tuple(sorted(index.get(key))) for key in expected} == expected
