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

The frames between the master and a worker (:mod:`nodeagent.master._ingest_worker`, which
takes the pushes' connections): a 4-byte big-endian length, then the frame, its first byte
its kind. The worker writes:

* ``READY`` once, when it accepts; ``ALIVE`` every second while its loop runs;
* ``PUSH``: a push for the master to store and answer: the request's number (4 bytes), the
  seconds it has taken so far (8 bytes, a double), who pushed it (2 bytes of length, then the
  JSON ``[subject, node]`` of the DAEMON token the worker verified; the worker holds the pool
  key, so the master takes its word), then what :func:`encode_prepared` makes of the push
  made ready;
* ``PUSH_BODY``: the same with the body as pushed, for the master to make ready itself (the
  ad of another daemon, or one the worker failed on);
* ``REFUSED``: a push the worker refused from its head (a token, a body too large): its
  status (2 bytes) and seconds (8 bytes), for the master's request metrics.

The master answers each push with ``ANSWER``: the request's number, the status (2 bytes;
0 for :data:`FAILED`), whether to add ``WWW-Authenticate: Bearer`` (1 byte), and the JSON
body (:class:`AdReply`).
A prepared push: a kind (1 byte), then for ``NODE`` a node's ad ready for the store (three
lengths of 4 bytes, then the JSON of ``{"machine": {...}, "clocks": [...], "active": bool}``
and the packed slot ads' two parts, :meth:`~nodeagent.master._adstore.PackedSlots.parts`),
for ``REFUSED`` the status (2 bytes) and the reply's JSON body; ``NODE_UNSETTLED`` is
``NODE`` with the static part of the slot ads unsettled (its digest, then its JSON), as
a worker makes them: the master compresses it only if the node's previous ad's is not the
same; ``MOVED_ON`` a node's ad pushed with its slot ads' moving values alone (the same three
lengths, then the JSON of ``{"machine": {...}, "moving": [...]}``, the digest of the static
part they go with and the moving values packed).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from nodeagent._auth import WrongNode
from nodeagent._moving_values import DIGEST
from nodeagent.master._adstore import (
    CheckedStatics,
    EntryFacts,
    MovedOnAd,
    NodeAd,
    PackedSlots,
    ad_parts,
    carried_inputs,
    foreign_ad,
    may_hold_control,
    prepare_moved_on,
    prepare_node_ad,
    shared_inputs,
)
from slots import InvalidRequest, SlotsError
from slots._ads import jobs_flat_packed
from slots._estimates import SuspendPolicy

__all__ = [
    "ALIVE",
    "FAILED",
    "FRAME",
    "READY",
    "AdReply",
    "OtherAd",
    "Prepared",
    "Push",
    "Refused",
    "WorkerRefusal",
    "decode_answer",
    "decode_prepared",
    "decode_worker_frame",
    "encode_answer",
    "encode_prepared",
    "encode_push",
    "encode_refusal",
    "json_bytes",
    "prepare_push",
    "split_frames",
]

#: A frame's header: its length, 4 bytes big-endian.
FRAME = struct.Struct(">I")
_NODE = struct.Struct(">III")
_STATUS = struct.Struct(">H")
_NODE_KIND, _REFUSED_KIND, _NODE_UNSETTLED_KIND, _MOVED_ON_KIND = 1, 2, 3, 4
_PUSH = struct.Struct(">BIdH")
_REFUSAL = struct.Struct(">BHd")
_ANSWER = struct.Struct(">BIHB")
_READY_KIND, _ALIVE_KIND, _PUSH_KIND, _PUSH_BODY_KIND, _WORKER_REFUSED_KIND = 1, 2, 3, 4, 5
_ANSWER_KIND = 6


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


Prepared = NodeAd | MovedOnAd | OtherAd | Refused


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
    deflated: bool = True,
    checked: CheckedStatics | None = None,
) -> Prepared:
    """The body of ``POST /v1/ads`` made ready for the store, or refused as the master
    refuses it: 422 ``request.invalid`` for a body that is not a JSON object (or nests too
    deep to decode); 403 ``auth.wrong_node`` when ``node`` (the token's) is given and the
    ad is another's (:func:`~nodeagent.master._adstore.foreign_ad`); the model's status for
    an ad it refuses (:func:`~nodeagent.master._adstore.prepare_node_ad`). ``after``: the
    node's previous packed slot ads, by its name, when the caller holds them (their
    compressed part is then not made again when it is the same). ``deflated=False`` (an
    ingest worker, which holds none): their static part is left for the master to settle
    against the previous ad's (:meth:`~nodeagent.master._adstore.PackedSlots.share_static`).
    ``checked``: the static parts of slot ads that passed, of a caller that holds no
    previous ads (:class:`~nodeagent.master._adstore.CheckedStatics`)."""
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
        if "moved_on" in ad:
            return _moved_on(ad, body)
        machine, slots, my_type = ad_parts(ad)
        if my_type != "Machine":
            return OtherAd(ad)
        return prepare_node_ad(
            machine,
            slots,
            plain_text=not may_hold_control(body),
            after=None if after is None else after(machine["Name"]),
            deflated=deflated,
            checked=checked,
        )
    except SlotsError as exc:
        return Refused.of(exc.http_status, exc.code, exc.message)


def _moved_on(ad: dict[str, Any], body: bytes) -> MovedOnAd:
    """A node's ad pushed with its slot ads' moving values alone
    (:func:`~nodeagent.master._adstore.prepare_moved_on`); raises
    :class:`~slots.InvalidRequest`."""
    machine = ad.get("machine")
    if set(ad) != {"machine", "moved_on"} or not isinstance(machine, dict):
        raise InvalidRequest("an ad moved on is {'machine': {...}, 'moved_on': {...}}")
    name = machine.get("Name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("the machine ad has no Name")
    if machine.get("MyType", "Machine") != "Machine":
        raise InvalidRequest(f"{name}: only a node's ad is pushed moved on")
    return prepare_moved_on(machine, ad["moved_on"], plain_text=not may_hold_control(body))


def encode_prepared(prepared: NodeAd | MovedOnAd | Refused) -> bytes:
    """A push made ready, as a ``PUSH`` frame carries it (module docstring)."""
    if isinstance(prepared, Refused):
        return b"".join((bytes((_REFUSED_KIND,)), _STATUS.pack(prepared.status), prepared.body))
    if isinstance(prepared, MovedOnAd):
        document = orjson.dumps({"machine": prepared.machine, "moving": prepared.moving})
        parts = (document, prepared.digest, prepared.packed)
        return b"".join(
            (bytes((_MOVED_ON_KIND,)), _NODE.pack(*(len(part) for part in parts)), *parts)
        )
    static, moving, _, deflated = prepared.slots.parts()
    facts = None
    if prepared.facts is not None:
        vacate, policy, deadline = prepared.facts.machine_inputs
        jobs = prepared.facts.jobs
        facts = [
            prepared.facts.empty,
            prepared.facts.grouped,
            vacate,
            str(policy),
            deadline,
            None if jobs is None else list(jobs),
        ]
    document = orjson.dumps(
        {
            "machine": prepared.machine,
            "clocks": prepared.clocks,
            "active": prepared.active,
            "facts": facts,
        }
    )
    return b"".join(
        (
            bytes((_NODE_KIND if deflated else _NODE_UNSETTLED_KIND,)),
            _NODE.pack(len(document), len(static), len(moving)),
            document,
            static,
            moving,
        )
    )


def decode_prepared(data: bytes | memoryview) -> NodeAd | MovedOnAd | Refused:
    """What :func:`encode_prepared` made; raises :class:`ValueError` for what it does not
    make."""
    view = memoryview(data)
    if not view:
        raise ValueError("a push with nothing made ready")
    kind, rest = view[0], view[1:]
    if kind == _REFUSED_KIND:
        (status,) = _STATUS.unpack_from(rest)
        return Refused(status, bytes(rest[_STATUS.size :]))
    if kind not in (_NODE_KIND, _NODE_UNSETTLED_KIND, _MOVED_ON_KIND):
        raise ValueError(f"a push made ready of an unknown kind {kind}")
    sizes = _NODE.unpack_from(rest)
    start = _NODE.size
    document_end = start + sizes[0]
    static_end = document_end + sizes[1]
    if static_end + sizes[2] != len(rest):
        raise ValueError("a push made ready whose parts are not its length")
    try:
        document = orjson.loads(rest[start:document_end])
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"a node's ad made ready that is not JSON: {exc}") from None
    if not isinstance(document, dict):
        document = {}
    if kind == _MOVED_ON_KIND:
        machine, moving = document.get("machine"), document.get("moving")
        digest = bytes(rest[document_end:static_end])
        if (
            not isinstance(machine, dict)
            or not isinstance(moving, list)
            or not all(isinstance(values, dict) for values in moving)
            or len(digest) != DIGEST
        ):
            raise ValueError("a node's ad moved on made ready not shaped as one")
        return MovedOnAd(machine, digest, tuple(moving), bytes(rest[static_end:]))
    machine, clocks, active = (document.get(k) for k in ("machine", "clocks", "active"))
    if (
        not isinstance(machine, dict)
        or not isinstance(clocks, list)
        or not all(isinstance(c, dict) for c in clocks)
        or type(active) is not bool
    ):
        raise ValueError("a node's ad made ready not shaped as one")
    facts = read_facts(document.get("facts"))
    slots = PackedSlots.of_parts(
        bytes(rest[document_end:static_end]),
        bytes(rest[static_end:]),
        len(clocks),
        deflated=kind == _NODE_KIND,
    )
    return NodeAd(machine=machine, slots=slots, clocks=tuple(clocks), active=active, facts=facts)


def read_facts(carried: Any) -> EntryFacts | None:
    """The :class:`~nodeagent.master._adstore.EntryFacts` a ``PUSH`` frame carries as
    ``[empty, grouped, vacate, policy, deadline, jobs]`` (or ``null``; ``jobs`` a list of
    integers as :func:`~slots._ads.jobs_flat` writes them, or ``null``)."""
    if carried is None:
        return None
    try:
        empty, grouped, vacate, policy, deadline, jobs = carried
        inputs = (vacate, SuspendPolicy(policy), deadline)
    except (TypeError, ValueError):
        raise ValueError("a node's ad made ready with facts not shaped as such") from None
    packed = None if jobs is None or type(jobs) is not list else jobs_flat_packed(jobs)
    if (
        type(empty) is not bool
        or type(grouped) is not bool
        or not carried_inputs(inputs)
        or (jobs is not None and packed is None)
    ):
        raise ValueError("a node's ad made ready with facts not shaped as such")
    return EntryFacts(
        empty=empty, grouped=grouped, machine_inputs=shared_inputs(inputs), jobs=packed
    )


@dataclass(frozen=True, slots=True)
class AdReply:
    """The answer to an ad push: a status and a JSON body (``application/json``)."""

    status: int
    body: bytes
    www_authenticate: bool = False

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [
            (b"content-length", str(len(self.body)).encode("ascii")),
            (b"content-type", b"application/json"),
        ]
        if self.www_authenticate:
            headers.append((b"www-authenticate", b"Bearer"))
        return headers


@dataclass(frozen=True, slots=True)
class Push:
    """A push a worker took, for the master to store and answer: made ready
    (``prepared``), or its ``body`` to make ready in the master."""

    number: int
    seconds: float
    #: The verified token's subject and node (``None``: a pool-wide token).
    subject: str
    node: str | None
    prepared: NodeAd | MovedOnAd | Refused | None = None
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class WorkerRefusal:
    """A push a worker refused from its head (status), after ``seconds``."""

    status: int
    seconds: float


#: The answer to a push the master failed on (a bug, logged): the worker closes its
#: connection without a reply (the master's own server answers 500 and closes it).
FAILED = AdReply(0, b"")


def _frame(*parts: bytes) -> bytes:
    return FRAME.pack(sum(map(len, parts))) + b"".join(parts)


#: The frames a worker writes once when it accepts, and every second while it runs.
READY = _frame(bytes((_READY_KIND,)))
ALIVE = _frame(bytes((_ALIVE_KIND,)))


def encode_push(
    number: int,
    seconds: float,
    subject: str,
    node: str | None,
    *,
    prepared: NodeAd | MovedOnAd | Refused | None = None,
    body: bytes = b"",
) -> bytes:
    """A ``PUSH`` frame (``prepared``), else a ``PUSH_BODY`` frame (``body``), of a push
    whose DAEMON token names ``subject`` and ``node``."""
    who = orjson.dumps([subject, node])
    kind = _PUSH_BODY_KIND if prepared is None else _PUSH_KIND
    payload = body if prepared is None else encode_prepared(prepared)
    return _frame(_PUSH.pack(kind, number, seconds, len(who)), who, payload)


def encode_refusal(status: int, seconds: float) -> bytes:
    """A worker's ``REFUSED`` frame."""
    return _frame(_REFUSAL.pack(_WORKER_REFUSED_KIND, status, seconds))


def decode_worker_frame(frame: bytes | memoryview) -> Push | WorkerRefusal | bool:
    """A worker's frame (without its header): a push, a refusal, ``True`` for ``READY``,
    ``False`` for ``ALIVE``; raises :class:`ValueError` for a frame no worker writes."""
    view = memoryview(frame)
    if not view:
        raise ValueError("an empty frame")
    kind = view[0]
    if kind in (_READY_KIND, _ALIVE_KIND) and len(view) == 1:
        return kind == _READY_KIND
    if kind == _WORKER_REFUSED_KIND and len(view) == _REFUSAL.size:
        _, status, seconds = _REFUSAL.unpack_from(view)
        return WorkerRefusal(status, seconds)
    if kind not in (_PUSH_KIND, _PUSH_BODY_KIND) or len(view) < _PUSH.size:
        raise ValueError(f"a frame of an unknown kind {kind}")
    _, number, seconds, length = _PUSH.unpack_from(view)
    start = _PUSH.size + length
    if len(view) < start:
        raise ValueError("a push whose pusher is cut short")
    try:
        subject, node = orjson.loads(view[_PUSH.size : start])
    except (orjson.JSONDecodeError, TypeError, ValueError):
        subject = node = None
    if type(subject) is not str or (node is not None and type(node) is not str):
        raise ValueError("a push whose pusher is not [subject, node]")
    if kind == _PUSH_BODY_KIND:
        return Push(number, seconds, subject, node, body=bytes(view[start:]))
    return Push(number, seconds, subject, node, prepared=decode_prepared(view[start:]))


def encode_answer(number: int, reply: AdReply) -> bytes:
    """The master's ``ANSWER`` to push ``number``."""
    head = _ANSWER.pack(_ANSWER_KIND, number, reply.status, reply.www_authenticate)
    return _frame(head, reply.body)


def decode_answer(frame: bytes | memoryview) -> tuple[int, AdReply]:
    """An ``ANSWER`` frame's push number and reply; raises :class:`ValueError` for another."""
    view = memoryview(frame)
    if len(view) < _ANSWER.size or view[0] != _ANSWER_KIND:
        raise ValueError("not an answer")
    _, number, status, www = _ANSWER.unpack_from(view)
    return number, AdReply(status, bytes(view[_ANSWER.size :]), www_authenticate=bool(www))


def split_frames(buffer: bytearray) -> list[memoryview]:
    """The whole frames at the start of ``buffer`` (without their headers), removed from
    it; what follows them stays."""
    frames: list[bytes] = []
    at = 0
    while len(buffer) - at >= FRAME.size:
        (size,) = FRAME.unpack_from(buffer, at)
        end = at + FRAME.size + size
        if end > len(buffer):
            break
        frames.append(bytes(buffer[at + FRAME.size : end]))
        at = end
    del buffer[:at]
    return [memoryview(frame) for frame in frames]
