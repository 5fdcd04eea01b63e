"""A push made ready for the store, here or through an ingest worker's frames, is taken as
the master takes the ad itself: the same entry, the same refusals; the frames between a
worker and the master carry what they say."""

from __future__ import annotations

import copy
import json
import struct
from array import array
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings

from nodeagent._moving_values import split_slots, static_digest
from nodeagent.master import _adstore, _ingest
from nodeagent.master._adstore import (
    AdStore,
    CheckedStatics,
    EntryFacts,
    MovedOnAd,
    NodeAd,
    PackedSlots,
    entry_facts,
)
from nodeagent.master._ingest import (
    ALIVE,
    FRAME,
    READY,
    AdReply,
    OtherAd,
    Prepared,
    Push,
    Refused,
    WorkerRefusal,
    decode_answer,
    decode_worker_frame,
    encode_answer,
    encode_push,
    encode_refusal,
    prepare_push,
    split_frames,
)
from slots import ACTIVE
from slots._ads import jobs_from_flat, machine_inputs
from slots._estimates import SuspendPolicy
from tests.nodeagent.master.test_adstore_moved_on import AD_PAIRS, T, machine


def body_of(ad: object) -> bytes:
    return orjson.dumps(ad)


def node_ad() -> dict[str, Any]:
    ad: dict[str, Any] = orjson.loads(orjson.dumps(machine().ad(T)))
    return ad


def through_frames(prepared: Prepared) -> Prepared | None:
    """``prepared`` as a worker's push frame gives it to the master (``None``: the body
    sent, for the master to make ready: the ad of another daemon)."""
    if isinstance(prepared, OtherAd):
        frame = encode_push(7, 0.25, "agent@n1", "n1", body=body_of(prepared.ad))
    else:
        frame = encode_push(7, 0.25, "agent@n1", "n1", prepared=prepared)
    (size,) = FRAME.unpack_from(frame)
    assert size == len(frame) - FRAME.size
    push = decode_worker_frame(frame[FRAME.size :])
    assert isinstance(push, Push)
    assert (push.number, push.seconds, push.subject, push.node) == (7, 0.25, "agent@n1", "n1")
    if push.prepared is None:
        assert push.body == body_of(prepared.ad)  # type: ignore[union-attr]
    return push.prepared


def error(prepared: Prepared | None) -> tuple[int, str]:
    assert isinstance(prepared, Refused)
    return prepared.status, json.loads(prepared.body)["error"]["code"]


def _set(path: tuple[str, ...], value: object) -> Callable[[dict[str, Any]], Any]:
    def change(ad: dict[str, Any]) -> dict[str, Any]:
        target: Any = ad
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return ad

    return change


REFUSALS: list[tuple[str, bytes, str | None, int, str]] = [
    ("not JSON", b"{", None, 422, "request.invalid"),
    ("NaN", b'{"machine": NaN}', None, 422, "request.invalid"),
    ("a lone surrogate", b'{"machine": "\\ud800"}', None, 422, "request.invalid"),
    ("nested too deep", b"[" * 100_000 + b"]" * 100_000, None, 422, "request.invalid"),
    ("an array", b"[]", None, 422, "request.invalid"),
    ("no machine ad", b'{"slots": []}', None, 422, "request.invalid"),
    ("another node's ad", body_of(node_ad()), "n2.test", 403, "auth.wrong_node"),
    (
        "a State that is not a string",
        body_of(_set(("machine", "State"), 3)(node_ad())),
        "n1.test",
        422,
        "request.invalid",
    ),
    (
        "moved on with a value that is not a number",
        body_of(
            _set(("moved_on",), {"slots_digest": "0" * 32, "moving": [{"CpuUsage": "x"}]})(
                {"machine": node_ad()["machine"]}
            )
        ),
        "n1.test",
        422,
        "request.invalid",
    ),
    (
        "a control character",
        body_of(_set(("machine", "OpSys"), "LINUX\n")(node_ad())),
        "n1.test",
        422,
        "request.invalid",
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "node", "status", "code"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
def test_a_refused_push_is_refused_the_same_here_and_through_a_worker(
    case: str, body: bytes, node: str | None, status: int, code: str
) -> None:
    here = prepare_push(body, node)
    assert error(here) == (status, code), case
    assert through_frames(here) == here


def test_a_nodes_ad_comes_back_whole_through_the_frames() -> None:
    ad = node_ad()
    prepared = prepare_push(body_of(ad), "n1.test")
    assert isinstance(prepared, NodeAd)
    back = through_frames(prepared)
    assert isinstance(back, NodeAd)
    assert back.machine == ad["machine"]
    assert list(back.machine) == list(ad["machine"])  # in its order
    assert list(back.slots) == ad["slots"]
    assert (back.clocks, back.active) == (prepared.clocks, prepared.active)
    assert back.active is True
    # what the entry reads of its slot ads, made in the worker, as reading them makes it
    assert back.facts == prepared.facts == entry_facts(ad["slots"])
    assert back.facts is not None
    assert back.facts.empty is False
    assert all("Activity" in c and "MyCurrentTime" in c for c in back.clocks)


@pytest.mark.parametrize("deflated", [True, False], ids=["packed here", "as a worker packs"])
def test_a_nodes_ad_comes_back_whole_through_the_frames_either_way(deflated: bool) -> None:
    ad = node_ad()
    prepared = prepare_push(body_of(ad), "n1.test", deflated=deflated)
    assert isinstance(prepared, NodeAd)
    back = through_frames(prepared)
    assert isinstance(back, NodeAd)
    assert list(back.slots) == ad["slots"]
    assert back.slots == prepared.slots


def test_a_workers_ads_moved_on_are_compressed_once_and_kept_compressed() -> None:
    """A worker leaves the static part of the slot ads unsettled (its JSON, not
    compressed): the master compresses a node's first ad's, shares it with the ads moved
    on after it, and compresses it again only for an ad whose static part changed."""
    store = AdStore(lifetime=300)
    first = node_ad()
    later = copy.deepcopy(first)
    for ad in (later["machine"], *later["slots"]):
        ad["MyCurrentTime"] += 60
        if ad.get("Activity") == "Busy":
            ad["TotalJobRunTime"] += 60
    changed = copy.deepcopy(later)
    changed["slots"][0]["Rank"] = 7.0
    entries = []
    for at, ad in ((T, first), (T + 60, later), (T + 120, changed)):
        prepared = through_frames(prepare_push(body_of(ad), "n1.test", deflated=False))
        assert isinstance(prepared, NodeAd)
        unsettled, _, _, deflated = prepared.slots.parts()
        assert not deflated
        static = orjson.loads(unsettled[16:])  # after the digest: the JSON itself
        assert [list(s) for s in static] == [list(s) for s in ad["slots"]]
        assert {s["MyCurrentTime"] for s in static} == {None}  # moving values apart
        entry = store.take(prepared, at)
        kept, _, _, deflated = entry.slots.parts()  # type: ignore[attr-defined]
        assert deflated
        assert len(kept) < len(unsettled) / 4  # compressed as kept, never as pushed
        assert list(entry.slots) == ad["slots"]
        entries.append(entry.slots)
    assert store.moved_on_ads == 1
    assert entries[1].shares_static(entries[0])  # type: ignore[attr-defined]
    assert not entries[2].shares_static(entries[1])  # type: ignore[attr-defined]


def _moved_on(ad: dict[str, Any]) -> dict[str, Any]:
    """``ad`` a minute later: its claims moved on in time."""
    later = copy.deepcopy(ad)
    for part in (later["machine"], *later["slots"]):
        part["MyCurrentTime"] += 60
        if part.get("Activity") == "Busy":
            part["TotalJobRunTime"] += 60
    return later


def _slot(name: str, value: object) -> Callable[[dict[str, Any]], Any]:
    """Set ``name`` of the ad's second slot ad (a claim's) to ``value``."""

    def change(ad: dict[str, Any]) -> dict[str, Any]:
        ad["slots"][1][name] = value
        return ad

    return change


#: A node's next ad after one that passed; ``True``: its slot ads' static part is the one
#: that passed (only its moving values, the machine ad and the addresses to check).
NEXT_ADS: list[tuple[str, Callable[[dict[str, Any]], Any], bool]] = [
    ("moved on", lambda ad: ad, True),
    ("a run time null", _slot("TotalJobRunTime", None), False),
    ("a run time as text", _slot("TotalJobRunTime", "560"), False),
    ("a run time true", _slot("TotalJobRunTime", True), False),
    ("a run time a list", _slot("TotalJobRunTime", [560]), False),
    ("a clock beyond a float's range", _slot("MyCurrentTime", 10**400), False),
    ("a usage as text, which the checks let be", _slot("CpuUsage", "busy"), False),
    ("a usage holding a newline", _slot("CpuUsage", "busy\n"), False),
    (
        "a usage nested too deep",
        _slot("CpuUsage", json.loads("[" * 80 + "]" * 80)),
        False,
    ),
    ("the machine's State not a string", _set(("machine", "State"), 3), True),
    ("the machine's address not an origin", _set(("machine", "MyAddress"), "ftp://x"), True),
    ("the machine's address another origin", _set(("machine", "MyAddress"), "http://x:1"), True),
    ("the machine's badput huge", _set(("machine", "TotalMachineDrainingBadput"), 10**400), True),
    ("a slot's State not a string", _slot("State", 3), False),
    ("a slot's address not an origin", _slot("MyAddress", "http://x/path"), False),
    ("a slot's Cpus null", _slot("Cpus", None), False),
]


@pytest.mark.parametrize(
    ("case", "edit", "static_kept"), NEXT_ADS, ids=[case for case, _, _ in NEXT_ADS]
)
@pytest.mark.parametrize("holder", ["worker", "master"])
def test_a_nodes_next_ad_is_judged_as_a_full_check_judges_it(
    case: str,
    edit: Callable[[dict[str, Any]], Any],
    static_kept: bool,
    holder: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a node's ad that passed, its next one — its slot ads' static part the same or
    not, its moving values numbers or not — is made ready or refused exactly as a push
    checked whole is, whether the slot ads that passed are known by their digests (a
    worker's :class:`CheckedStatics`) or by the node's previous ad (the master's); the
    slot ads are checked again only when their static part or a moving value is new."""
    first = node_ad()
    checked = CheckedStatics()
    before = prepare_push(body_of(first), "n1.test", deflated=False, checked=checked)
    assert isinstance(before, NodeAd)
    assert len(checked) == 1
    body = json.dumps(edit(_moved_on(first))).encode()  # integers of any size
    whole = prepare_push(body, "n1.test", deflated=False)
    slots_checked = []
    check = _adstore.check_node_ad

    def spied(*args: Any, **kwargs: Any) -> None:
        slots_checked.append(not args[1])  # the machine ad alone
        check(*args, **kwargs)

    monkeypatch.setattr(_adstore, "check_node_ad", spied)
    if holder == "worker":
        made = prepare_push(body, "n1.test", deflated=False, checked=checked)
    else:
        made = prepare_push(body, "n1.test", deflated=False, after=lambda _: before.slots)
    assert made == whole, case
    assert isinstance(whole, NodeAd) is (case in PASSING), case
    assert slots_checked == [static_kept], case


PASSING = {
    "moved on",
    "a usage as text, which the checks let be",
    "the machine's address another origin",
}


def test_the_checked_digests_keep_the_newest_and_those_found_again() -> None:
    checked = CheckedStatics(size=3)
    for digest in (b"a", b"b", b"c"):  # the third begins a new generation
        checked.add(digest)
    assert b"a" in checked  # found among the older: kept with the newer
    checked.add(b"d")
    checked.add(b"e")  # a, d, e: the newer full; b and c are dropped
    assert [d in checked for d in (b"a", b"b", b"c", b"d", b"e")] == [
        True,
        False,
        False,
        True,
        True,
    ]
    assert len(checked) == 3


def _pushed_moved_on(ad: dict[str, Any]) -> dict[str, Any]:
    """``ad`` as pushed with its slot ads' moving values alone."""
    static, moving = split_slots(ad["slots"])
    digest = static_digest(static).hex()
    return {"machine": ad["machine"], "moved_on": {"slots_digest": digest, "moving": moving}}


def test_an_ad_moved_on_through_a_worker_makes_the_entry_of_the_whole_ad() -> None:
    """A node's next ad pushed with its moving values alone, made ready by a worker and
    carried by its frames, makes the entry the whole ad makes: the same machine ad, slot
    ads and moved-on verdict, the forecast's basis kept, the static part shared."""
    first = node_ad()
    later = _moved_on(first)
    prepared = prepare_push(body_of(_pushed_moved_on(later)), "n1.test", deflated=False)
    assert isinstance(prepared, MovedOnAd)
    assert through_frames(prepared) == prepared
    itself, worker = AdStore(lifetime=300), AdStore(lifetime=300)
    own_first = itself.update(copy.deepcopy(first), T)
    own_later = itself.update(copy.deepcopy(later), T + 60)
    made = prepare_push(body_of(first), "n1.test", deflated=False)
    assert isinstance(made, NodeAd)
    taken_first = worker.take(made, T)
    taken_later = worker.take_moved_on(prepared, T + 60)
    assert taken_later.machine == own_later.machine
    assert orjson.dumps(list(taken_later.slots)) == orjson.dumps(list(own_later.slots))
    assert worker.moved_on_ads == itself.moved_on_ads == 1
    assert taken_later.basis is taken_first.basis
    assert own_later.basis is own_first.basis
    assert isinstance(taken_later.slots, PackedSlots)
    assert isinstance(taken_first.slots, PackedSlots)
    assert taken_later.slots.shares_static(taken_first.slots)


def test_moving_values_pushed_in_any_order_are_kept_in_one() -> None:
    """A slot's moving values are kept in the order of their names whatever the push's
    (the same packed bytes), the first time their names come in that order and after; a
    name that is not a moving value is refused whatever came before it."""
    pushed = _pushed_moved_on(_moved_on(node_ad()))
    in_order = prepare_push(body_of(pushed), "n1.test")
    assert isinstance(in_order, MovedOnAd)
    assert all(list(values) == sorted(values) for values in in_order.moving)
    turned = copy.deepcopy(pushed)
    turned["moved_on"]["moving"] = [
        dict(reversed(values.items())) for values in pushed["moved_on"]["moving"]
    ]
    assert any(len(values) > 1 for values in turned["moved_on"]["moving"])
    for _ in range(2):
        again = prepare_push(body_of(turned), "n1.test")
        assert isinstance(again, MovedOnAd)
        assert [list(v) for v in again.moving] == [list(v) for v in in_order.moving]
        assert again.moving == in_order.moving
        assert again.packed == in_order.packed
    for values in (pushed, turned):
        bad = copy.deepcopy(values)
        bad["moved_on"]["moving"][1]["Name"] = 1
        assert error(prepare_push(body_of(bad), "n1.test")) == (422, "request.invalid")


def test_an_ad_of_another_daemon_is_made_in_the_master() -> None:  # its body sent
    ad = {"machine": {"Name": "defrag@x", "MyType": "Defrag"}, "slots": []}
    prepared = prepare_push(body_of(ad), None)
    assert prepared == OtherAd(ad)
    assert through_frames(prepared) is None


@pytest.mark.parametrize(
    "frame",
    [
        b"",  # empty
        b"\x09",  # an unknown kind
        b"\x01\x00",  # READY with more
        b"\x03\x00\x00\x00\x01",  # a push cut short
        b"\x03\x00\x00\x00\x01" + b"\x00" * 8 + b"\x00\x09ab",  # its token cut short
        b"\x03\x00\x00\x00\x01" + b"\x00" * 8 + b"\x00\x00\x09",  # made ready: unknown
        b"\x03\x00\x00\x00\x01"
        + b"\x00" * 8
        + b"\x00\x00\x01"
        + b"\x00\x00\x00\x02" * 3
        + b"{}",  # parts not its length
        b"\x03\x00\x00\x00\x01"
        + b"\x00" * 8
        + b"\x00\x00\x01"
        + b"\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x01[]xy",  # not an object
    ],
)
def test_a_frame_no_worker_writes_is_refused(frame: bytes) -> None:
    with pytest.raises(ValueError, match=r"."):
        decode_worker_frame(frame)


@pytest.mark.parametrize(
    "facts",
    [
        [1, False, 600, "keep", None, None],  # empty not a boolean
        [False, 0, 600, "keep", None, None],  # grouped not a boolean
        [False, False, "600", "keep", None, None],
        [False, False, 600, "never", None, None],  # no such policy
        [False, False, 600, "keep", "soon", None],
        [False, 600, "keep", None, None],  # a fact left out
        [False, False, 600, "keep", None, "jobs"],
        [False, False, 600, "keep", None, [0, 0, 1, 60, 0, 0, 0]],  # 7 of a job's 8
        [False, False, 600, "keep", None, [5, 0, 1, 60, 0, 0, 0, 0]],  # no such activity
        [False, False, 600, "keep", None, [0, 8, 1, 60, 0, 0, 0, 0]],  # no such flag
        [False, False, 600, "keep", None, [0, 0, True, 60, 0, 0, 0, 0]],
        [False, False, 600, "keep", None, [0, 0, 1, 2**64, 0, 0, 0, 0]],
        [False, False, 600, "keep", None, [0, 0, 1, 60.5, 0, 0, 0, 0]],
        {"empty": False},
    ],
)
def test_a_nodes_ad_made_ready_with_facts_no_worker_writes_is_refused(facts: object) -> None:
    """The facts a ``PUSH`` frame carries (``[empty, grouped, vacate, policy, deadline]``)
    are read as they are written or refused, as the rest of the frame is."""
    with pytest.raises(ValueError, match="facts"):
        _ingest.read_facts(facts)
    assert _ingest.read_facts(None) is None
    read = _ingest.read_facts([True, False, 600, "evict", 1_800_000_900.5, None])
    assert read == EntryFacts(
        empty=True, grouped=False, machine_inputs=(600, SuspendPolicy.EVICT, 1_800_000_900.5)
    )
    job = [0, 7, 2, 60, 0, 3600, 0, 0]  # Busy, no time of its own, no vacate time, accepted
    read = _ingest.read_facts([False, True, 600, "keep", None, job])
    assert read == EntryFacts(
        empty=False,
        grouped=True,
        machine_inputs=(600, SuspendPolicy.KEEP, None),
        jobs=array("q", job),
    )
    assert read is not None
    assert read.jobs is not None
    (busy,) = jobs_from_flat(read.jobs)
    assert (busy.activity, busy.as_of, busy.job_max_vacate_time) == ("Busy", None, None)
    assert busy.accepted_while_draining is True


@pytest.mark.parametrize(
    ("change", "carried"),
    [
        ({}, True),
        ({"DrainState": "draining", "DrainingDeadline": 1_800_000_900}, True),
        ({"DrainState": "draining", "DrainingDeadline": 1_800_000_900.5}, True),
        ({"MachineMaxVacateTime": 1e30}, False),  # a vacate time past 64 bits
        ({"DrainState": "draining", "DrainingDeadline": True}, False),
        ({"DrainState": "draining", "DrainingDeadline": 2**70}, False),
        ({"DrainSuspendedJobs": "never"}, False),  # the forecast refuses it
    ],
)
def test_the_facts_made_where_slot_ads_are_parsed_are_those_a_frame_carries(
    change: dict[str, Any], carried: bool
) -> None:
    """Slot ads whose machine inputs a frame would not carry give no facts (the entry
    reads them back, as before), so that a worker never writes a frame the master
    refuses."""
    slots = [{**node_ad()["slots"][0], **change}]
    facts = entry_facts(slots)
    assert (facts is not None) is carried
    if facts is not None:
        assert facts.machine_inputs == machine_inputs(slots)
        vacate, policy, deadline = facts.machine_inputs
        jobs = None if facts.jobs is None else list(facts.jobs)
        written = [facts.empty, facts.grouped, vacate, str(policy), deadline, jobs]
        assert _ingest.read_facts(written) == facts


def test_a_push_frame_carries_its_number_seconds_pusher_and_body() -> None:
    for subject, node in (("agent@n1", "n1"), ("pool", None), ("agent@é", "é\x00")):
        frame = encode_push(42, 1.5, subject, node, body=b"{}")
        push = decode_worker_frame(frame[FRAME.size :])
        assert push == Push(42, 1.5, subject, node, body=b"{}")


@pytest.mark.parametrize(
    "who",
    [b"", b"[]", b'["a"]', b'[1, "n"]', b'["a", 2]', b'{"a": "n"}', b'["a","n","x"]', b"\xff"],
)
def test_a_push_frame_whose_pusher_is_not_a_subject_and_a_node_is_refused(who: bytes) -> None:
    frame = encode_push(42, 1.5, "a", "n", body=b"{}")[FRAME.size :]
    head = 1 + 4 + 8  # kind, number, seconds
    (length,) = struct.unpack_from(">H", frame, head)
    bad = frame[:head] + struct.pack(">H", len(who)) + who + frame[head + 2 + length :]
    with pytest.raises(ValueError, match="pusher"):
        decode_worker_frame(bad)


def test_the_other_frames_say_what_they_say() -> None:
    assert decode_worker_frame(READY[FRAME.size :]) is True
    assert decode_worker_frame(ALIVE[FRAME.size :]) is False
    refusal = encode_refusal(413, 0.125)
    assert decode_worker_frame(refusal[FRAME.size :]) == WorkerRefusal(413, 0.125)
    for reply in (AdReply(200, b'{"mode":"UP"}'), AdReply(401, b"{}", www_authenticate=True)):
        assert decode_answer(encode_answer(9, reply)[FRAME.size :]) == (9, reply)
    with pytest.raises(ValueError, match="not an answer"):
        decode_answer(READY[FRAME.size :])


def test_frames_are_split_whole_and_what_is_cut_short_stays() -> None:
    frames = encode_push(1, 0.0, "a", None, body=b"{}") + READY + ALIVE
    buffer = bytearray(frames + ALIVE[:3])
    whole = split_frames(buffer)
    assert [decode_worker_frame(f) for f in whole][1:] == [True, False]
    assert buffer == ALIVE[:3]
    assert split_frames(buffer) == []
    buffer += ALIVE[3:]
    assert [decode_worker_frame(f) for f in split_frames(buffer)] == [False]
    assert buffer == b""


@settings(max_examples=120, deadline=None)
@given(pair=AD_PAIRS)
def test_ads_taken_through_a_worker_make_the_entries_the_master_makes_itself(
    pair: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """A node's two ads (equal, moved on, a static value changed, keys in another order, a
    value off the clock, a slot added or gone): taken whole by the store, or prepared and
    carried by a worker's frames, they give the same entries, the same moved-on verdict and
    the same shared static part (the worker keeps the digests of the slot ads it found
    sound, as one does)."""
    first, later = pair
    itself, worker = AdStore(lifetime=300), AdStore(lifetime=300)
    checked = CheckedStatics()
    entries = []
    for at, ad in ((T, first), (T + 60, later)):
        own = itself.update(copy.deepcopy(ad), at)
        made = prepare_push(body_of(ad), "n1.test", deflated=False, checked=checked)
        prepared = through_frames(made)
        assert isinstance(prepared, NodeAd)
        taken = worker.take(prepared, at)
        assert taken.machine == own.machine
        # what a push of the moving values alone will take of the slot ads, known without
        # reading them back, is what reading them back says
        slots = list(taken.slots)
        active = {(str(state), str(activity)) for state, activity in ACTIVE}
        assert taken.slot_activities == (
            tuple(slot.get("Activity") for slot in slots),
            any((s.get("State"), s.get("Activity")) in active for s in slots),
        )
        assert orjson.dumps(list(taken.slots)) == orjson.dumps(list(own.slots))
        # and what it reads of them for its plan, carried, is what reading them says
        assert prepared.facts is not None
        assert (taken.empty, taken.machine_inputs) == (own.empty, own.machine_inputs)
        assert taken.machine_inputs == machine_inputs(slots)
        entries.append((own, taken))
    (own_first, taken_first), (own_later, taken_later) = entries
    moved = itself.moved_on_ads == 1
    event(f"moved on: {moved}")
    assert worker.moved_on_ads == itself.moved_on_ads
    assert (taken_later.basis is taken_first.basis) is moved
    assert isinstance(own_later.slots, PackedSlots)
    assert isinstance(taken_later.slots, PackedSlots)
    assert isinstance(own_first.slots, PackedSlots)
    assert isinstance(taken_first.slots, PackedSlots)
    assert taken_later.slots.shares_static(taken_first.slots) is (
        own_later.slots.shares_static(own_first.slots)
    )
