"""An ad that is its node's previous one moved on in time keeps what was derived from it.

The ads come from :class:`slots.Machine`, the agent's own model, read at two instants:
between them only the clock moved (the jobs ran on), so the second ad is the first moved
on in time; any other change between them makes it a new ad.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from functools import cached_property
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.master._adstore import _MOVING, AdEntry, AdStore, moved_on, shared_values
from slots import DrainForecast, Escalation, JobSpec, Machine, MachinePolicy, Resources, Schedule

T = 1_800_000_000
POLICY = MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=300)


def machine(now: float = T) -> Machine:
    """A node with four running claims of different ages and promises."""
    node = Machine(
        host="n1.test",
        total=Resources(cpus=16, memory=65536, disk=1_000_000),
        policy=POLICY,
        now=now - 86400,
        address="http://n1.test:9621",
        ip="10.0.0.1",
    )
    for c in range(4):
        node.claim(
            now - 500 * (c + 1),
            resources=Resources(cpus=1 + c, memory=1024, disk=1000),
            spec=JobSpec(
                job_id=f"7.{c}",
                owner="alice",
                max_job_retirement_time=None if c % 2 else 600 * (c + 1),
            ),
        )
    return node


def entry_of(ad: dict[str, Any], at: float) -> AdEntry:
    return AdEntry(
        name="n1.test", machine=ad["machine"], slots=ad["slots"], received_at=at, updates=1
    )


def edited(change: Callable[[dict[str, Any]], None]) -> Callable[[Machine], dict[str, Any]]:
    """The ad 60 s on with ``change`` made to it by hand."""

    def make(node: Machine) -> dict[str, Any]:
        ad = copy.deepcopy(node.ad(T + 60))
        change(ad)
        return ad

    return make


def dynamic(ad: dict[str, Any]) -> dict[str, Any]:
    slot: dict[str, Any] = next(s for s in ad["slots"] if s["SlotType"] == "Dynamic")
    return slot


def claimed(node: Machine) -> dict[str, Any]:
    node.claim(T + 30, resources=Resources(cpus=1, memory=1024, disk=1000), spec=JobSpec())
    return node.ad(T + 60)


def released(node: Machine) -> dict[str, Any]:
    node.release(T + 30, node.claims(T + 30)[0].claim_id)
    return node.ad(T + 60)


def drained(node: Machine) -> dict[str, Any]:
    node.start_draining(T + 30, schedule=Schedule.GRACEFUL, commit=True)
    return node.ad(T + 60)


def shorter_retirement(node: Machine) -> dict[str, Any]:
    node.set_policy(T + 30, MachinePolicy(max_job_retirement_time=1800))
    return node.ad(T + 60)


def suspended(node: Machine) -> dict[str, Any]:
    node.suspend(T + 30, node.claims(T + 30)[0].claim_id)
    return node.ad(T + 60)


def clock_back(ad: dict[str, Any]) -> None:
    for each in (ad["machine"], *ad["slots"]):
        each["MyCurrentTime"] -= 120
        if each.get("Activity") in ("Busy", "Retiring"):
            each["TotalJobRunTime"] -= 120


def run_not_following(ad: dict[str, Any]) -> None:
    dynamic(ad)["TotalJobRunTime"] += 5


def usage(ad: dict[str, Any]) -> None:
    dynamic(ad)["CpuUsage"] = 0.25
    dynamic(ad)["MemoryUsage"] = 999


def new_attribute(ad: dict[str, Any]) -> None:
    ad["machine"]["Rack"] = "r7"


def renamed_owner(ad: dict[str, Any]) -> None:
    dynamic(ad)["RemoteOwner"] = "bob"


CASES: list[tuple[str, Callable[[Machine], dict[str, Any]], bool]] = [
    ("the same claims a minute on", lambda node: node.ad(T + 60), True),
    ("the same second again", lambda node: node.ad(T), True),
    ("only the usage samples changed", edited(usage), True),
    ("a claim started", claimed, False),
    ("a claim ended", released, False),
    ("a graceful drain started", drained, False),
    ("the retirement time changed", shorter_retirement, False),
    ("a job was suspended", suspended, False),
    ("the clock went back", edited(clock_back), False),
    ("a run time that did not follow the clock", edited(run_not_following), False),
    ("an attribute added", edited(new_attribute), False),
    ("a job's owner changed", edited(renamed_owner), False),
]


@pytest.mark.parametrize(("change", "later", "expected"), CASES, ids=[case[0] for case in CASES])
def test_what_counts_as_moved_on(
    change: str, later: Callable[[Machine], dict[str, Any]], expected: bool
) -> None:
    node = machine()
    before = entry_of(node.ad(T), T)
    after = later(node)
    assert moved_on(before, after["machine"], after["slots"]) is expected, change


def test_a_moved_on_ad_keeps_its_forecast_and_facts_and_serves_the_new_values() -> None:
    store = AdStore(lifetime=300)
    node = machine()
    first = store.update(node.ad(T), T)
    forecast = first.forecast
    facts = (first.tally, first.service, first.drain, first.empty)
    moved = store.update(node.ad(T + 60), T + 60)
    assert moved is not first
    assert moved.basis is first.basis
    assert moved.forecast is forecast
    assert (moved.tally, moved.service, moved.drain, moved.empty) == facts
    assert moved.machine["MyCurrentTime"] == T + 60  # what is served is the new ad
    assert (moved.received_at, moved.updates, store.moved_on_ads) == (T + 60, 2, 1)
    assert store.find("n1.test", None) == [moved]
    claimed(node)
    changed = store.update(node.ad(T + 90), T + 90)
    assert changed.basis is not first.basis
    assert changed.forecast is not forecast
    assert store.moved_on_ads == 1


def test_no_fact_kept_but_the_forecast_reads_a_moving_value() -> None:
    """Every cached fact of an entry is kept for an ad that only moved on: none but the
    forecast (which brings them to the time read) may read a value that moves."""
    for name, value in vars(AdEntry).items():
        if not isinstance(value, cached_property) or name == "forecast":
            continue
        source = inspect.getsource(value.func)
        assert not [m for m in _MOVING if m in source], name


@settings(max_examples=60, deadline=None)
@given(
    d=st.integers(min_value=0, max_value=7200),
    reads=st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=6),
    window=st.integers(min_value=0, max_value=20_000),
    escalation=st.sampled_from(list(Escalation)),
)
def test_the_kept_forecast_equals_one_made_from_the_moved_on_ad(
    d: int, reads: list[int], window: int, escalation: Escalation
) -> None:
    """Second by second from the new ad's time on: the same estimates, verdicts and
    blockers as a forecast made from the new ad."""
    node = machine()
    first, later = node.ad(T), node.ad(T + d)
    assert moved_on(entry_of(first, T), later["machine"], later["slots"])
    kept = entry_of(first, T).forecast
    fresh = entry_of(later, T + d).forecast
    assert isinstance(kept, DrainForecast)
    start = T + d + window
    for k in sorted(reads):
        now = T + d + k
        assert kept.values(now) == fresh.values(now)
        assert kept.read(now, window_start=start, escalation=escalation) == fresh.read(
            now, window_start=start, escalation=escalation
        )
        assert kept.blockers(now, window_start=start, escalation=escalation) == fresh.blockers(
            now, window_start=start, escalation=escalation
        )


def test_an_idle_node_a_minute_on_is_moved_on_and_its_completions_must_stay() -> None:
    node = machine()
    for claim in node.claims(T):
        node.release(T, claim.claim_id)
        node.job_exited(T + 1, claim.claim_id)
    before = entry_of(node.ad(T + 10), T + 10)
    later = node.ad(T + 70)
    assert moved_on(before, later["machine"], later["slots"])
    later["machine"]["ExpectedMachineQuickDrainingCompletion"] += 60
    assert not moved_on(before, later["machine"], later["slots"])


def test_a_nodes_slot_ads_are_kept_packed_and_read_back_whole() -> None:
    from nodeagent.master._adstore import PackedSlots
    from nodeagent.master._notices import claims_of_slots, every_claim_grouped

    ad = machine().ad(T)
    packed = PackedSlots(ad["slots"])
    assert len(packed) == len(ad["slots"])
    assert packed == ad["slots"]
    assert list(packed) == ad["slots"]
    assert packed[1] == ad["slots"][1]
    assert packed[1:] == ad["slots"][1:]
    first, again = next(iter(packed)), next(iter(packed))
    assert first == again
    assert first is not again  # fresh dicts: a reader cannot change what is kept
    store = AdStore(lifetime=300)
    entry = store.update(ad, T)
    assert isinstance(entry.slots, PackedSlots)
    assert entry.slots == ad["slots"]
    assert claims_of_slots(entry.slots, now=T) == claims_of_slots(ad["slots"], now=T)
    assert every_claim_grouped(entry.slots) == every_claim_grouped(ad["slots"])


def node_named(host: str, ip: str, at: float = T) -> dict[str, Any]:
    """:func:`machine`'s ad as node ``host``, parsed from its JSON as the API parses it
    (every string its own object)."""
    text = orjson.dumps(machine().ad(at)).replace(b"n1.test", host.encode())
    ad: dict[str, Any] = orjson.loads(text.replace(b"10.0.0.1", ip.encode()))
    return ad


def test_equal_values_of_nodes_of_one_shape_are_shared_and_stay_independent() -> None:
    store = AdStore(lifetime=300)
    one, two = node_named("n1.test", "10.0.0.1"), node_named("n2.test", "10.0.0.2")
    first, second = store.update(copy.deepcopy(one), T), store.update(copy.deepcopy(two), T)
    assert first.machine == one["machine"]
    assert second.machine == two["machine"]
    assert first.machine is not second.machine
    shared = [k for k, v in one["machine"].items() if isinstance(v, str) and v == two["machine"][k]]
    assert "OpSys" in shared or len(shared) > 3
    for key in shared:
        assert first.machine[key] is second.machine[key], key
    owners = [[b["owner"] for b in e.forecast.blockers(T)] for e in (first, second)]
    assert owners[0] == owners[1] == ["alice"] * 4
    assert all(a is b for a, b in zip(*owners, strict=True))
    # A newer ad of one node changes nothing of the other's entry.
    changed = copy.deepcopy(one)
    changed["machine"][shared[0]] = "changed"
    assert store.update(changed, T + 1).machine[shared[0]] == "changed"
    assert store.get("n2.test") is second
    assert second.machine == two["machine"]
    # The shared values are the ad's: a copy per entry, equal to it.
    assert shared_values(one["machine"]) == one["machine"]
    assert shared_values(one["machine"]) is not shared_values(one["machine"])
