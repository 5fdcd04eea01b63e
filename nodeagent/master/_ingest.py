"""A pushed ad made ready for the master's store, and the frames that carry it between the
master and its ingest worker processes.

What a push costs the master is mostly what needs nothing of its state: the body parsed,
the ad checked against the token's node and against what the master reads of it, the slot
ads packed (:func:`~nodeagent.master._adstore.prepare_node_ad`). :func:`prepare_push` does
all of it, in the master's process or in an ingest worker's
(:mod:`nodeagent.master._ingest_worker`, driven by
:class:`~nodeagent.master._ingest_workers.IngestWorkers`); the master then stores what it
made (:meth:`~nodeagent.master._adstore.AdStore.take`) and answers. Either way a push is
answered byte for byte the same. Pure: no I/O, no clock, no trio.

The frames: a 4-byte big-endian length, then the frame. A request is the request's number
(4 bytes), the token's node (2 bytes of length, then UTF-8; empty for a token that names
none) and the body as pushed. A reply is the request's number and a kind (1 byte):

* ``NODE``: a node's ad ready for the store: three lengths (4 bytes each), then the JSON of
  ``{"machine": {...}, "clocks": [...], "active": bool}`` and the packed slot ads' two
  parts (:meth:`~nodeagent.master._adstore.PackedSlots.parts`);
* ``REFUSED``: the status (2 bytes), then the reply's JSON body;
* ``HERE``: made in the master instead (the ad of another daemon, stored as pushed; or
  one the worker failed on, which the master then refuses or takes as it would alone).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from nodeagent._auth import WrongNode
from nodeagent.master._adstore import (
    NodeAd,
    PackedSlots,
    ad_parts,
    foreign_ad,
    may_hold_control,
    prepare_node_ad,
)
from slots import SlotsError

__all__ = [
    "FRAME",
    "OtherAd",
    "Prepared",
    "Refused",
    "decode_reply",
    "decode_request",
    "encode_reply",
    "encode_request",
    "json_bytes",
    "prepare_push",
]

#: A frame's header: its length, 4 bytes big-endian.
FRAME = struct.Struct(">I")
_REQUEST = struct.Struct(">IH")
_REPLY = struct.Struct(">IB")
_NODE = struct.Struct(">III")
_STATUS = struct.Struct(">H")
_NODE_KIND, _REFUSED_KIND, _HERE_KIND = 1, 2, 3


def json_bytes(value: Any) -> bytes:
    """JSON exactly as :class:`fastapi.responses.JSONResponse` renders it (the API's
    replies, errors included)."""
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


@dataclass(frozen=True, slots=True)
class Refused:
    """A push refused: its status and JSON body (an error, as the rest of the API's)."""

    status: int
    body: bytes

    @classmethod
    def of(cls, status: int, code: str, message: str) -> Refused:
        return cls(status, json_bytes({"error": {"code": code, "message": message}}))


@dataclass(frozen=True, slots=True)
class OtherAd:
    """The ad of another daemon (``MyType`` other than ``"Machine"``): stored as pushed."""

    ad: dict[str, Any]


Prepared = NodeAd | OtherAd | Refused


def _no_constant(name: str) -> float:
    """JSON's NaN and Infinity have no ClassAd form: an ad holding one is refused."""
    raise ValueError(f"{name} is not a number an ad may hold")


def _parse(body: bytes) -> object:
    """The body's JSON value; raises :class:`Refused`-worthy :class:`ValueError` (its
    message) for one that is not JSON an ad may be."""
    try:
        return orjson.loads(body)  # UTF-8, 64-bit integers, no NaN: every agent's ad
    except orjson.JSONDecodeError:
        pass
    try:  # the rest as the other endpoints read it (or refuse it, the same way)
        value = json.loads(body, parse_constant=_no_constant)
        # a lone surrogate (``\\ud800``), which orjson refuses: its ad could not be
        # written back as UTF-8, so every read of it would fail
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not JSON: a text holds a lone UTF-16 surrogate") from None
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    return value


def prepare_push(
    body: bytes,
    node: str | None,
    *,
    after: Callable[[str], PackedSlots | None] | None = None,
) -> Prepared:
    """The body of ``POST /v1/ads`` made ready for the store, or refused as the master
    refuses it: 422 ``request.invalid`` for a body that is not a JSON object (or nests too
    deep to decode); 403 ``auth.wrong_node`` when ``node`` (the token's) is given and the
    ad is another's (:func:`~nodeagent.master._adstore.foreign_ad`); the model's status for
    an ad it refuses (:func:`~nodeagent.master._adstore.prepare_node_ad`). ``after``: the
    node's previous packed slot ads, by its name, when the caller holds them (their
    compressed part is then not made again when it is the same)."""
    try:
        ad = _parse(body)
    except ValueError as exc:
        return Refused.of(422, "request.invalid", str(exc))
    if not isinstance(ad, dict):
        return Refused.of(422, "request.invalid", "an ad is an object")
    if node is not None:
        foreign = foreign_ad(ad, node)
        if foreign is not None:
            message = f"a token of node {node!r} pushes its ad only: {foreign}"
            return Refused.of(WrongNode.http_status, WrongNode.code, message)
    try:
        machine, slots, my_type = ad_parts(ad)
        if my_type != "Machine":
            return OtherAd(ad)
        return prepare_node_ad(
            machine,
            slots,
            plain_text=not may_hold_control(body),
            after=None if after is None else after(machine["Name"]),
        )
    except SlotsError as exc:
        return Refused.of(exc.http_status, exc.code, exc.message)


def encode_request(number: int, node: str | None, body: bytes) -> bytes:
    """The frame asking a worker to prepare ``body`` pushed with ``node``'s token."""
    name = (node or "").encode("utf-8")
    size = _REQUEST.size + len(name) + len(body)
    return b"".join((FRAME.pack(size), _REQUEST.pack(number, len(name)), name, body))


def decode_request(frame: bytes) -> tuple[int, str | None, bytes]:
    """A request frame's number, node and body (the frame without its header)."""
    number, length = _REQUEST.unpack_from(frame)
    start = _REQUEST.size
    name = frame[start : start + length].decode("utf-8")
    return number, name or None, frame[start + length :]


def encode_reply(number: int, prepared: Prepared | None) -> bytes:
    """The frame answering request ``number``: ``prepared``, or ``None`` (and an ad of
    another daemon) for one the master makes itself."""
    if isinstance(prepared, NodeAd):
        static, moving, _ = prepared.slots.parts()
        document = orjson.dumps(
            {"machine": prepared.machine, "clocks": prepared.clocks, "active": prepared.active}
        )
        parts: tuple[bytes, ...] = (
            _REPLY.pack(number, _NODE_KIND),
            _NODE.pack(len(document), len(static), len(moving)),
            document,
            static,
            moving,
        )
    elif isinstance(prepared, Refused):
        parts = (_REPLY.pack(number, _REFUSED_KIND), _STATUS.pack(prepared.status), prepared.body)
    else:
        parts = (_REPLY.pack(number, _HERE_KIND),)
    return FRAME.pack(sum(map(len, parts))) + b"".join(parts)


def decode_reply(frame: bytes | memoryview) -> tuple[int, Prepared | None]:
    """A reply frame's request number and what it carries (``None``: make it here).
    Raises :class:`ValueError` for a frame no worker writes."""
    view = memoryview(frame)
    number, kind = _REPLY.unpack_from(view)
    rest = view[_REPLY.size :]
    if kind == _REFUSED_KIND:
        (status,) = _STATUS.unpack_from(rest)
        return number, Refused(status, bytes(rest[_STATUS.size :]))
    if kind == _HERE_KIND:
        return number, None
    if kind != _NODE_KIND:
        raise ValueError(f"a reply of an unknown kind {kind}")
    sizes = _NODE.unpack_from(rest)
    start = _NODE.size
    document_end = start + sizes[0]
    static_end = document_end + sizes[1]
    if static_end + sizes[2] != len(rest):
        raise ValueError("a reply whose parts are not its length")
    try:
        document = orjson.loads(rest[start:document_end])
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"a node's ad in a reply that is not JSON: {exc}") from None
    if not isinstance(document, dict):
        document = {}
    machine, clocks, active = (document.get(k) for k in ("machine", "clocks", "active"))
    if (
        not isinstance(machine, dict)
        or not isinstance(clocks, list)
        or not all(isinstance(c, dict) for c in clocks)
        or type(active) is not bool
    ):
        raise ValueError("a node's ad in a reply not shaped as one")
    slots = PackedSlots.of_parts(
        bytes(rest[document_end:static_end]), bytes(rest[static_end:]), len(clocks)
    )
    return number, NodeAd(machine=machine, slots=slots, clocks=tuple(clocks), active=active)
