"""A push made ready for the store, here or through an ingest worker's frames, is taken as
the master takes the ad itself: the same entry, the same refusals."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings

from nodeagent.master._adstore import AdStore, NodeAd, PackedSlots
from nodeagent.master._ingest import (
    FRAME,
    OtherAd,
    Prepared,
    Refused,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    prepare_push,
)
from nodeagent.master._ingest_worker import serve
from tests.nodeagent.master.test_adstore_moved_on import AD_PAIRS, T, machine


def body_of(ad: object) -> bytes:
    return orjson.dumps(ad)


def node_ad() -> dict[str, Any]:
    ad: dict[str, Any] = orjson.loads(orjson.dumps(machine().ad(T)))
    return ad


def through_frames(prepared: Prepared) -> Prepared | None:
    """``prepared`` as a worker's reply frame gives it to the master."""
    frame = encode_reply(7, prepared)
    (size,) = FRAME.unpack_from(frame)
    assert size == len(frame) - FRAME.size
    number, back = decode_reply(frame[FRAME.size :])
    assert number == 7
    return back


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
    assert all("Activity" in c and "MyCurrentTime" in c for c in back.clocks)


def test_an_ad_of_another_daemon_is_made_in_the_master() -> None:
    ad = {"machine": {"Name": "defrag@x", "MyType": "Defrag"}, "slots": []}
    prepared = prepare_push(body_of(ad), None)
    assert prepared == OtherAd(ad)
    assert through_frames(prepared) is None


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x00\x00\x07\x09",  # an unknown kind
        b"\x00\x00\x00\x07\x01" + b"\x00\x00\x00\x02" * 3 + b"{}",  # parts not its length
        b"\x00\x00\x00\x07\x01\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x01[]xy",  # no dict
    ],
)
def test_a_reply_no_worker_writes_is_refused(frame: bytes) -> None:
    with pytest.raises(ValueError, match=r"."):
        decode_reply(frame)


def test_a_request_frame_carries_its_number_node_and_body() -> None:
    for node in ("n1.test", None, "nœud.test"):
        frame = encode_request(42, node, b"{}")
        assert decode_request(frame[FRAME.size :]) == (42, node, b"{}")


def test_the_worker_answers_each_request_in_order_then_ends_at_its_input_end() -> None:
    ad = node_ad()
    requests = encode_request(1, "n1.test", body_of(ad)) + encode_request(2, None, b"[]")
    out = io.BytesIO()
    serve(io.BytesIO(requests), out)
    data = out.getvalue()
    replies = []
    while data:
        (size,) = FRAME.unpack_from(data)
        replies.append(decode_reply(data[FRAME.size : FRAME.size + size]))
        data = data[FRAME.size + size :]
    assert [number for number, _ in replies] == [0, 1, 2]  # ready, then each in order
    assert replies[0][1] is None
    first = replies[1][1]
    assert isinstance(first, NodeAd)
    assert list(first.slots) == ad["slots"]
    assert error(replies[2][1]) == (422, "request.invalid")


def test_the_worker_stops_at_a_frame_cut_short() -> None:
    out = io.BytesIO()
    serve(io.BytesIO(encode_request(1, None, b"{}")[:-1]), out)
    assert decode_reply(out.getvalue()[FRAME.size :]) == (0, None)


@settings(max_examples=120, deadline=None)
@given(pair=AD_PAIRS)
def test_ads_taken_through_a_worker_make_the_entries_the_master_makes_itself(
    pair: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """A node's two ads (equal, moved on, a static value changed, keys in another order, a
    value off the clock, a slot added or gone): taken whole by the store, or prepared and
    carried by a worker's frames, they give the same entries, the same moved-on verdict and
    the same shared static part."""
    first, later = pair
    itself, worker = AdStore(lifetime=300), AdStore(lifetime=300)
    entries = []
    for at, ad in ((T, first), (T + 60, later)):
        own = itself.update(copy.deepcopy(ad), at)
        prepared = through_frames(prepare_push(body_of(ad), "n1.test"))
        assert isinstance(prepared, NodeAd)
        taken = worker.take(prepared, at)
        assert taken.machine == own.machine
        assert orjson.dumps(list(taken.slots)) == orjson.dumps(list(own.slots))
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
