"""An ad that is its node's previous one moved on in time keeps what was derived from it.

The ads come from :class:`slots.Machine`, the agent's own model, read at two instants:
between them only the clock moved (the jobs ran on), so the second ad is the first moved
on in time; any other change between them makes it a new ad.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable
from functools import cached_property
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from nodeagent._moving_values import COMPLETIONS
from nodeagent._moving_values import MOVING as _MOVING
from nodeagent.master._adstore import (
    AdEntry,
    AdStore,
    PackedSlots,
    moved_on,
    prepare_node_ad,
    shared_values,
)
from nodeagent.master._notices import claims_of_slots
from slots import (
    ACTIVE,
    DrainForecast,
    Escalation,
    JobSpec,
    Machine,
    MachinePolicy,
    Resources,
    Schedule,
)
from slots._ads import machine_inputs

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


def every_claim_released(node: Machine) -> dict[str, Any]:
    for claim in node.claims(T + 30):
        node.release(T + 30, claim.claim_id)
    return node.ad(T + 60)


def draining_by_a_deadline(node: Machine, deadline: float = T + 900) -> dict[str, Any]:
    node.start_draining(T + 30, schedule=Schedule.GRACEFUL, commit=True)
    ad = node.ad(T + 60)
    for slot in ad["slots"]:
        if "MachineMaxVacateTime" in slot:
            slot["DrainingDeadline"] = deadline
    return ad


def a_claim_of_a_group(node: Machine) -> dict[str, Any]:
    ad = node.ad(T + 60)
    claims = [slot for slot in ad["slots"] if slot.get("SlotType") == "Dynamic"]
    claims[1]["JobGroup"] = "analysis"
    claims[2]["JobGroup"] = ""  # not a group: no claim of one
    return ad


def evicting_suspended_jobs(node: Machine) -> dict[str, Any]:
    ad = suspended(node)
    for slot in ad["slots"]:
        if "MachineMaxVacateTime" in slot:
            slot["DrainSuspendedJobs"] = "evict"
            slot["MachineMaxVacateTime"] = 45
    return ad


@pytest.mark.parametrize(
    "ad_of",
    [
        lambda node: node.ad(T),
        every_claim_released,
        draining_by_a_deadline,
        lambda node: draining_by_a_deadline(node, T + 900.5),
        evicting_suspended_jobs,
        a_claim_of_a_group,
    ],
    ids=[
        "jobs running",
        "every claim released",
        "a deadline",
        "a deadline not a whole second",
        "suspended jobs evicted",
        "a claim of a group",
    ],
)
def test_an_entry_has_what_it_reads_of_its_slot_ads_from_where_they_were_parsed(
    ad_of: Callable[[Machine], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ad's slot ads are parsed when it is taken: what the entry reads of them for its
    plan (``empty``, whether a group's claim is there, the machine's inputs to the
    forecast) is made then, as reading them back would make it, and its forecast reads as
    one made of the slot ads."""
    ad = ad_of(machine())
    entry = AdStore(lifetime=300).update(copy.deepcopy(ad), T + 60)
    assert {"empty", "grouped", "machine_inputs"} <= entry.__dict__.keys()  # not read back
    slots = ad["slots"]
    # the notices find a group's claims exactly when the entry says there is one
    assert entry.grouped is bool(claims_of_slots(slots, now=T + 60))
    active = {(str(state), str(activity)) for state, activity in ACTIVE}
    assert entry.empty is not any(
        (s.get("State"), s.get("Activity")) in active
        for s in slots
        if s.get("SlotType") == "Dynamic"
    )
    assert entry.machine_inputs == machine_inputs(slots)
    # and its forecast has its jobs' inputs: its pieces read no slot ads back
    assert "forecast" in entry.__dict__
    unpacked = PackedSlots.unpacked
    reads: list[None] = []

    def counted(packed: PackedSlots) -> list[dict[str, Any]]:
        reads.append(None)
        return unpacked(packed)

    monkeypatch.setattr(PackedSlots, "unpacked", counted)
    previous = {name: ad["machine"].get(name) for name in COMPLETIONS}
    for now in (T + 60, T + 600, T + 5000):
        assert entry.forecast.estimates(now) == DrainForecast(slots, previous).estimates(now)
        assert entry.forecast.verdicts(
            now, window_start=T + 3600, escalation=Escalation.QUICK
        ) == DrainForecast(slots, previous).verdicts(
            now, window_start=T + 3600, escalation=Escalation.QUICK
        )
    assert not reads or not entry.forecast.exact  # else every read is the ads' own
    assert entry.forecast.blockers(T + 60) == DrainForecast(slots, previous).blockers(T + 60)


def test_the_machine_inputs_of_nodes_without_a_deadline_are_one_tuple() -> None:
    store = AdStore(lifetime=300)
    first = store.update(machine().ad(T), T)
    other = machine().ad(T)
    other["machine"]["Name"] = other["machine"]["Machine"] = "n2.test"
    second = store.update(other, T)
    assert first.machine_inputs is second.machine_inputs
    drained = store.update(draining_by_a_deadline(machine()), T + 60)
    assert drained.machine_inputs[2] == T + 900


def test_an_entry_taken_without_its_facts_reads_them_back() -> None:
    ad = machine().ad(T)
    store = AdStore(lifetime=300)
    made = prepare_node_ad(copy.deepcopy(ad["machine"]), copy.deepcopy(ad["slots"]))
    entry = store.take(dataclasses.replace(made, facts=None), T)
    assert not {"empty", "grouped", "machine_inputs", "forecast"} & entry.__dict__.keys()
    assert (entry.empty, entry.grouped, entry.machine_inputs) == (
        False,
        False,
        machine_inputs(ad["slots"]),
    )


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
    # (a forecast keeps its blockers packed: no string of theirs is kept to be shared)
    assert owners[0] == owners[1] == ["alice"] * 4
    # A newer ad of one node changes nothing of the other's entry.
    changed = copy.deepcopy(one)
    changed["machine"][shared[0]] = "changed"
    assert store.update(changed, T + 1).machine[shared[0]] == "changed"
    assert store.get("n2.test") is second
    assert second.machine == two["machine"]
    # The shared values are the ad's: a copy per entry, equal to it.
    assert shared_values(one["machine"]) == one["machine"]
    assert shared_values(one["machine"]) is not shared_values(one["machine"])


# ------------------------------------------ the packed slot ads: static part and moving values


def _old_ad_moved_on(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """The rule as it was when every slot ad was read back to be compared (the oracle)."""
    if before.keys() != after.keys():
        return False
    for name, value in after.items():
        if name not in _MOVING and before[name] != value:
            return False
    was, now = before.get("MyCurrentTime"), after.get("MyCurrentTime")
    if type(was) is not int or type(now) is not int or now < was:
        return was is None and now is None and before == after
    d = now - was
    run, ran = after.get("TotalJobRunTime", 0), before.get("TotalJobRunTime", 0)
    if type(run) is not int or type(ran) is not int:
        return False
    if run != (ran + d if after.get("Activity") in ("Busy", "Retiring") else ran):
        return False
    left, had = after.get("VacateTimeRemaining"), before.get("VacateTimeRemaining")
    if after.get("Activity") == "Vacating" and type(left) is int and type(had) is int:
        return left == max(0, had - d)
    return left == had


def old_moved_on(
    machine_before: dict[str, Any],
    slots_before: list[dict[str, Any]],
    machine: dict[str, Any],
    slots: list[dict[str, Any]],
) -> bool:
    """:func:`moved_on` as it was, on the previous ad's slot ads read back (the oracle)."""
    if len(slots) != len(slots_before) or not _old_ad_moved_on(machine_before, machine):
        return False
    if not all(_old_ad_moved_on(a, b) for a, b in zip(slots_before, slots, strict=True)):
        return False
    active = {("Claimed", "Busy"), ("Claimed", "Retiring"), ("Claimed", "Suspended")}
    active |= {("Preempting", "Vacating"), ("Preempting", "Killing")}
    return any((s.get("State"), s.get("Activity")) in active for s in slots) or all(
        machine_before.get(n) == machine.get(n)
        for n in (
            "ExpectedMachineGracefulDrainingCompletion",
            "ExpectedMachineQuickDrainingCompletion",
            "ExpectedMachineFastDrainingCompletion",
        )
    )


def _reordered(ad: dict[str, Any]) -> None:
    slot = dynamic(ad)
    first = next(iter(slot))
    slot[first] = slot.pop(first)  # the same keys and values, the first one moved last


def _as_float(ad: dict[str, Any]) -> None:
    dynamic(ad)["Cpus"] = float(dynamic(ad)["Cpus"])  # equal in Python, not in JSON


def _as_true(ad: dict[str, Any]) -> None:
    slot = dynamic(ad)
    slot["SlotID"] = slot["SlotID"] == 1 or slot["SlotID"]  # 1 is True in Python


def _static_changed(ad: dict[str, Any]) -> None:
    dynamic(ad)["JobId"] = "9.9"


def _moving_off_clock(ad: dict[str, Any]) -> None:
    dynamic(ad)["TotalJobRunTime"] += 1


def _moving_free(ad: dict[str, Any]) -> None:
    dynamic(ad)["CpuUsage"] = 0.5  # the usage samples change without the clock


def _moving_completion(ad: dict[str, Any]) -> None:
    ad["machine"]["ExpectedMachineQuickDrainingCompletion"] += 7


def _slot_added(ad: dict[str, Any]) -> None:
    ad["slots"].append(copy.deepcopy(dynamic(ad)))


def _slot_dropped(ad: dict[str, Any]) -> None:
    # the last slot (a dynamic one), while another is left for the edits that follow
    if sum(s["SlotType"] == "Dynamic" for s in ad["slots"]) > 1:
        ad["slots"].pop()


def _clock_gone(ad: dict[str, Any]) -> None:
    for each in ad["slots"]:
        each["MyCurrentTime"] = None


def _vacating(ad: dict[str, Any]) -> None:
    slot = dynamic(ad)
    slot["Activity"], slot["State"], slot["VacateTimeRemaining"] = "Vacating", "Preempting", 100


EDITS: list[Callable[[dict[str, Any]], None]] = [
    _reordered,
    _as_float,
    _as_true,
    _static_changed,
    _moving_off_clock,
    _moving_free,
    _moving_completion,
    _slot_added,
    _slot_dropped,
    _clock_gone,
    _vacating,
]


def ad_pair(
    d: int,
    before_edits: list[Callable[[dict[str, Any]], None]],
    after_edits: list[Callable[[dict[str, Any]], None]],
    vacated: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A node's ad and its ad ``d`` s later, both read from JSON as the master gets them,
    each with ``before_edits`` made, the later one with ``after_edits`` too."""
    node = machine()
    first: dict[str, Any] = orjson.loads(orjson.dumps(node.ad(T)))
    for edit in before_edits:
        edit(first)
    later: dict[str, Any] = orjson.loads(orjson.dumps(node.ad(T + d)))
    for edit in before_edits:
        edit(later)
    if _vacating in before_edits and d >= 0:
        dynamic(later)["VacateTimeRemaining"] = max(0, 100 - min(d, vacated))
    for edit in after_edits:
        edit(later)
    return first, later


#: Pairs of a node's ads (:func:`ad_pair`): equal, moved on, a static value changed, keys
#: in another order, a value equal in Python but not in JSON, a moving value off the clock,
#: a slot added or gone.
AD_PAIRS = st.builds(
    ad_pair,
    d=st.sampled_from([0, 1, 60, 3600, -60]),
    before_edits=st.lists(st.sampled_from(EDITS), max_size=2),
    after_edits=st.lists(st.sampled_from(EDITS), max_size=3),
    vacated=st.integers(min_value=0, max_value=200),
)


@settings(max_examples=150, deadline=None)
@given(pair=AD_PAIRS)
def test_packed_slots_decide_moved_on_as_reading_every_slot_back_does(
    pair: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """Random pairs of a node's ads (equal, moved on, a static value changed, keys in
    another order, a value equal in Python but not in JSON, a moving value off the clock, a
    slot added or gone): the store decides as the rule did on the slot ads read back, keeps
    the previous static part only when the static JSON is the same, and reads back the new
    ad, its keys in order."""
    first, later = pair
    store = AdStore(lifetime=300)
    before = store.update(copy.deepcopy(first), T)
    kept = before.slots
    assert isinstance(kept, PackedSlots)
    expected = old_moved_on(before.machine, list(kept), later["machine"], later["slots"])
    packed = PackedSlots(later["slots"], after=kept)
    assert moved_on(before, later["machine"], later["slots"], packed=packed) is expected
    assert moved_on(before, later["machine"], later["slots"]) is expected
    event(f"moved on: {expected}, static shared: {packed.shares_static(kept)}")
    static = [{k: None if k in _MOVING else v for k, v in s.items()} for s in later["slots"]]
    was = [{k: None if k in _MOVING else v for k, v in s.items()} for s in first["slots"]]
    assert packed.shares_static(kept) is (orjson.dumps(static) == orjson.dumps(was))
    entry = store.update(copy.deepcopy(later), T + 60)
    assert store.moved_on_ads == int(expected)
    assert (entry.basis is before.basis) is expected
    assert orjson.dumps(list(entry.slots)) == orjson.dumps(later["slots"])


def test_a_moved_on_ads_entry_shares_the_static_part_and_keeps_its_own_moving_values() -> None:
    store = AdStore(lifetime=300)
    node = machine()
    first = store.update(node.ad(T), T)
    moved = store.update(node.ad(T + 60), T + 60)
    assert isinstance(first.slots, PackedSlots)
    assert isinstance(moved.slots, PackedSlots)
    assert moved.slots.shares_static(first.slots)
    assert list(first.slots) == node.ad(T)["slots"]
    assert list(moved.slots) == node.ad(T + 60)["slots"]
    assert moved.slots != first.slots
    claimed(node)
    changed = store.update(node.ad(T + 90), T + 90)
    assert isinstance(changed.slots, PackedSlots)
    assert not changed.slots.shares_static(moved.slots)
    assert list(changed.slots) == node.ad(T + 90)["slots"]


@pytest.mark.parametrize(
    ("one", "two", "equal"),
    [
        ([{"A": 1, "MyCurrentTime": 5}], [{"A": 1, "MyCurrentTime": 5}], True),
        ([{"A": 1, "MyCurrentTime": 5}], [{"A": 1, "MyCurrentTime": 6}], False),
        ([{"A": 1, "MyCurrentTime": 5}], [{"A": 2, "MyCurrentTime": 5}], False),
        ([{"A": 1, "MyCurrentTime": 5}], [{"MyCurrentTime": 5, "A": 1}], True),
        ([{"A": 1, "MyCurrentTime": 5}], [{"A": 1.0, "MyCurrentTime": 5.0}], True),
        ([{"A": 1}], [{"A": 1}, {"A": 1}], False),
        ([{"A": None, "MyCurrentTime": 5}], [{"A": 5, "MyCurrentTime": None}], False),
        ([], [], True),
    ],
)
def test_packed_slot_ads_compare_as_their_contents_do(
    one: list[dict[str, Any]], two: list[dict[str, Any]], equal: bool
) -> None:
    assert (one == two) is equal  # the table says what Python says
    assert (PackedSlots(one) == PackedSlots(two)) is equal
    assert (PackedSlots(one) == two) is equal
    assert (PackedSlots(two, after=PackedSlots(one)) == PackedSlots(one)) is equal
    assert orjson.dumps(list(PackedSlots(two, after=PackedSlots(one)))) == orjson.dumps(two)
