"""The master's HTTP API: ads, Mesos-compatible maintenance endpoints, the plan.

Mesos endpoints keep Mesos's contract: the same paths and JSON shapes; invalid input
is ``400`` with Mesos's plain-text message and changes nothing; a wrong method is
``405`` ("Expecting one of { 'GET', 'POST' }, but received 'PUT'"). The rest speaks
the agent API's JSON errors. Scopes: READ for queries, status, the plan, the OpenAPI
document and the maintenance page ``/ui/`` (every path but ``/healthz`` needs a token over
TCP, as on the agent); ADMINISTRATOR for schedule, down and up; DAEMON for ad pushes, a
node's token for that node's ad only (:func:`push_ad`). Every state-changing request goes
to the audit log, refused ones included (401 and 403 too), except ad pushes (each agent
sends one every ``update_interval``, and at once on every change).

A query's ``constraint`` is evaluated by an :class:`~nodeagent._expressions._evaluator.Evaluator`:
in worker processes, off the event loop, within a time budget across all the ads it is
evaluated against; past the budget the query is refused (422 ``expression.too_costly``).

Ad pushes are the master's hot path: :func:`with_ad_fast_path` answers ``POST /v1/ads``
in front of the FastAPI app, with the same function (:func:`push_ad`) as the app's own
route, so that the behaviour is one and the cost per ad is that of the work itself. With
ingest workers (``ingest_workers``) the pushes that reach the workers are taken there (the
HTTP, the token, the body made ready) and the master stores them and answers
(:func:`push_answer`), the same reply either way.

Every request is checked from its headers before its body is read: the fast path checks
the DAEMON token first; the app sits behind the gate (:class:`nodeagent._serving._gate.Gate`:
route, token and scope, 404/405, then the body under its endpoint's cap, 413
``request.too_large`` beyond; the endpoints' caps are :data:`BODY_LIMITS`). A refusal
before the body was read closes the connection once the rest of the body is read and
dropped. Refusals keep each endpoint's format (JSON; a Mesos endpoint's 405 in plain text).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
)
from typing import Annotated, Any, Literal
from urllib.parse import quote

import orjson
import trio
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as ASGIScope

from nodeagent import __version__
from nodeagent._audit import AuditLog
from nodeagent._auth import (
    AuthError,
    Principal,
    Scope,
    Unauthenticated,
    require,
)
from nodeagent._expressions._evaluator import Evaluator
from nodeagent._peer import AgentCallFailed
from nodeagent._serving._gate import Audited, Gate, Rule
from nodeagent._serving._http import (
    auth_error_response,
    error_body,
    request_peer,
    validation_message,
)
from nodeagent._store import OutcomeUnknown, StoreError, unwritten
from nodeagent._when import in_words
from nodeagent.master._ad_pushes import (
    AD_BODY_LIMIT,
    Principals,
    TakenPush,
    send_reply,
    take_push,
)
from nodeagent.master._adstore import project
from nodeagent.master._event_stream import SEND_TIMEOUT, events_endpoint
from nodeagent.master._ingest import (
    AdReply,
    OtherAd,
    Prepared,
    Push,
    Refused,
    WorkerRefusal,
    json_bytes,
    prepare_push,
)
from nodeagent.master._leader import LeaderView, NotLeader
from nodeagent.master._maintenance import (
    MachineId,
    MaintenanceError,
    MaintenanceSchedule,
    Mode,
    load_json,
    parse_machine_ids,
    render_json,
)
from nodeagent.master._master import Master, ScheduleChange
from nodeagent.master._metrics import MasterMetrics
from nodeagent.master._notices import mesos_statuses
from nodeagent.master._notices_api import add_notice_routes
from nodeagent.master._operations_api import add_operation_routes
from nodeagent.master._plan_view import PlanQueryError, PlanSelect, reads_totals_kept
from nodeagent.master._preview import SchedulePreview
from nodeagent.master._rolling import Operations
from nodeagent.master._sla_api import add_sla_routes
from nodeagent.master._sla_policies import SlaBook
from nodeagent.master._ui import PAGE_HEADERS, page_file
from slots import InvalidRequest, SlotsError, render_long

__all__ = [
    "AD_BODY_LIMIT",
    "BODY_LIMIT",
    "BODY_LIMITS",
    "LARGE_BODY_LIMIT",
    "AdReply",
    "PlanReply",
    "Principals",
    "build_master_app",
    "plan_body",
    "plan_chunks",
    "push_ad",
    "push_answer",
    "push_reply_bytes",
    "with_ad_fast_path",
    "with_event_stream",
]

log = logging.getLogger(__name__)

_UNIX = "nodeagent.unix"

#: The largest body of an endpoint without a cap of its own (1 MiB): an SLA policy, a
#: query's needs are a few hundred bytes.
BODY_LIMIT = 1 << 20
#: The largest schedule, machine list or operation (16 MiB): a schedule of 10,000
#: machines is ~1.4 MB of JSON, a list of 10,000 machines or hosts less.
LARGE_BODY_LIMIT = 16 << 20
#: Each endpoint's body cap, by (method, route path); :data:`BODY_LIMIT` for the rest.
BODY_LIMITS = {
    ("POST", "/v1/ads"): AD_BODY_LIMIT,
    ("POST", "/maintenance/schedule"): LARGE_BODY_LIMIT,
    ("POST", "/v1/maintenance/schedule/preview"): LARGE_BODY_LIMIT,
    ("PUT", "/v1/maintenance/schedule"): LARGE_BODY_LIMIT,
    ("POST", "/machine/down"): LARGE_BODY_LIMIT,
    ("POST", "/v1/maintenance/down/preview"): LARGE_BODY_LIMIT,
    ("POST", "/machine/up"): LARGE_BODY_LIMIT,
    ("POST", "/v1/maintenance/operations"): LARGE_BODY_LIMIT,
    ("POST", "/v1/maintenance/operations/preview"): LARGE_BODY_LIMIT,
}
_MESOS_METHODS = {
    "/maintenance/schedule": ("GET", "POST"),
    "/maintenance/status": ("GET",),
    "/machine/down": ("POST",),
    "/machine/up": ("POST",),
}


# ---------------------------------------------------------------------------------- OpenAPI
# The Mesos endpoints and ad pushes read their bodies by hand (Mesos's validation order
# and messages; the ad fast path): their request bodies and error replies are declared
# here, for clients and for fuzzing, and the document says what the parsers accept.

_ERROR_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
_DESCRIPTIONS = {
    307: "This master does not lead: send the same request to the leader (Location)",
    400: "Refused as Mesos refuses it (its plain-text message); nothing changed",
    401: "No, bad or expired token (TCP)",
    403: "The token lacks the scope",
    404: "No such resource",
    405: "Wrong method",
    409: "The request no longer fits the state (plan.cursor_stale): ask again from the start",
    412: "The precondition no longer holds (schedule.changed): nothing changed",
    413: "Body over the endpoint's cap (request.too_large; see the API's documentation)",
    422: "Malformed body, bad values or expressions",
    502: "The node could not be asked, or answered an ad the master refuses",
    503: "The state could not be written (store.error) or no master leads (master.no_leader):"
    " nothing changed; or it is not known whether it was (store.outcome_unknown): read the"
    " state back",
}
_TEXT = {"text/plain": {"schema": {"type": "string"}}}
_JSON_ERROR = {"application/json": {"schema": _ERROR_BODY}}


def _errors(*statuses: int, text: tuple[int, ...] = ()) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for error statuses: a JSON error body, or plain text for
    the statuses in ``text``."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted(statuses):
        reply: dict[str, Any] = {"description": _DESCRIPTIONS[status]}
        reply["content"] = _TEXT if status in text else _JSON_ERROR
        out[status] = reply
    return out


def _json_body(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"application/json": {"schema": schema}},
        }
    }


# Mesos reads JSON into protobuf messages leniently, and so does the master: ``null`` is
# an absent field; a repeated field also takes a single value, its nested arrays are
# flattened and its ``null`` items skipped; a number is truncated to a 64-bit integer. The
# schemas say as much, so that a body they refuse is one the master refuses too (400).
_NULL = {"type": "null"}


def _optional(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, _NULL]}


def _repeated(item: dict[str, Any]) -> dict[str, Any]:
    one = {"anyOf": [item, {"type": "array"}, _NULL]}
    return {"anyOf": [{"type": "array", "items": one}, item, _NULL]}


_NANOSECONDS = {
    "type": "object",
    "required": ["nanoseconds"],
    "properties": {
        "nanoseconds": {"type": "number", "description": "Truncated to a 64-bit integer"}
    },
}
_MACHINE_ID = {
    "type": "object",
    "properties": {"hostname": _optional({"type": "string"}), "ip": _optional({"type": "string"})},
    "description": "A hostname, an IPv4 address, or both",
}
_WINDOW = {
    "type": "object",
    "required": ["unavailability"],
    "properties": {
        "machine_ids": _repeated(_MACHINE_ID),
        "unavailability": {
            "type": "object",
            "required": ["start"],
            "properties": {"start": _NANOSECONDS, "duration": _optional(_NANOSECONDS)},
        },
    },
}
_SCHEDULE = {"type": "object", "properties": {"windows": _repeated(_WINDOW)}}
_MACHINE_IDS = {"type": "array", "items": _MACHINE_ID}
_MACHINE_AD = {
    "type": "object",
    "required": ["Name"],
    "properties": {
        "Name": {"type": "string", "minLength": 1},
        "MyType": {"type": "string"},
    },
    "description": "The machine ad: ClassAd attributes as JSON",
}
_AD = {
    "oneOf": [
        {
            "type": "object",
            "required": ["machine", "slots"],
            "properties": {
                "machine": _MACHINE_AD,
                "slots": {
                    "type": "array",
                    "items": {"type": "object", "description": "A slot ad"},
                },
            },
        },
        {
            "type": "object",
            "description": "A node's ad moved on in time: its slot ads' moving values alone",
            "required": ["machine", "moved_on"],
            "additionalProperties": False,
            "properties": {
                "machine": _MACHINE_AD,
                "moved_on": {
                    "type": "object",
                    "required": ["slots_digest", "moving"],
                    "additionalProperties": False,
                    "properties": {
                        "slots_digest": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
                        "moving": {
                            "type": "array",
                            "items": {"type": "object", "additionalProperties": {"type": "number"}},
                        },
                    },
                },
            },
        },
    ]
}
#: Mesos endpoints: 400 in plain text; the rest in JSON (401, 403 from the token check);
#: 503 in plain text (store.error) or JSON (master.no_leader, store.outcome_unknown).
_MESOS_ERRORS = _errors(307, 400, 401, 403, 413, 503, text=(400, 503))
_MESOS_ERRORS[503]["content"] = {**_TEXT, **_JSON_ERROR}


def _mesos_json(value: Any) -> Response:
    return Response(render_json(value), media_type="application/json")


_json_bytes = json_bytes


def push_reply_bytes(reply: Mapping[str, Any]) -> bytes:
    """A push's reply (:meth:`Master.receive_ad`: objects, strings without a lone
    surrogate, 64-bit integers, ``None``) as :func:`_json_bytes` writes it, by orjson (a
    tenth of the time, for every ad of the pool)."""
    return orjson.dumps(reply)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector (restoring its state after).

    A plan of 10,000 machines allocates some 10^5 dicts and lists that live until its
    reply is encoded; allocating them sets off full collections, each of which walks
    every stored ad (≈ 0.2 s at that size) and finds nothing: the rows hold no cycles,
    and reference counting frees them once the reply is encoded.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def plan_body(
    master: Master,
    *,
    with_blockers: bool = True,
    late: bool = False,
    limit: int | None = None,
    select: PlanSelect | None = None,
) -> bytes:
    """``GET /v1/maintenance/plan``'s body made in one go, for a caller in the master's
    process (the API sends it as :class:`PlanReply` makes it): the master's plan view
    writes it now (:meth:`~nodeagent.master._plan_view.PlanView.body`), with the
    collector held off.
    Raises :class:`~nodeagent.master._plan_view.PlanQueryError` for a stale cursor."""
    now = master.clock.now()
    with _collector_paused():
        # The plan's rows are freed when body returns, before the collector resumes (or
        # its first pass would walk them).
        return master.plan_view.body(
            master.plan_inputs(now),
            now,
            with_blockers=with_blockers,
            late=late,
            limit=limit,
            select=select,
        )


#: Seconds of the event loop a plan's reply takes at most before the others have it: its
#: chunks made within one such slice are sent as one (a summary's all at once).
PLAN_SLICE = 0.005
#: A reply of rows sends its head and first chunks once they took this long, its first
#: slice ended there: its first rows leave at once however quickly the next are made (the
#: next chunks of a loaded master's cold rows may take hundreds of ms); a small plan made
#: quicker is still sent as one body.
FIRST_ROWS_AFTER = 0.002


class PlanReply:
    """``GET /v1/maintenance/plan``'s body made a slice at a time, with the collector held
    off, ``now`` that of the request: one JSON document
    (:meth:`~nodeagent.master._plan_view.PlanView.document`), or JSON lines with ``jsonl``
    (:meth:`~nodeagent.master._plan_view.PlanView.stream`). A slice (:meth:`take`) makes
    chunks until :data:`PLAN_SLICE` has passed; the endpoint makes the first at once (of a
    reply of rows, the head and the chunks made within :data:`FIRST_ROWS_AFTER`, the first
    chunk of rows at least: its first rows leave at once), and a reply that ends within it
    (a summary, a small plan) is answered whole, as one body; the rest are sent as they
    are made (:meth:`rest`), the event loop served between two. An error
    ends JSON lines with a line ``{"error": {"code": "plan.failed", "message"}}`` (and is
    logged), and the document's connection without the document's end (the server logs
    it; in the first slice, the reply is a 500): a document that parses is whole.
    Raises :class:`~nodeagent.master._plan_view.PlanQueryError` at once for a stale
    cursor."""

    def __init__(
        self,
        master: Master,
        *,
        jsonl: bool = False,
        with_blockers: bool = True,
        late: bool = False,
        limit: int | None = None,
        select: PlanSelect | None = None,
    ) -> None:
        now = master.clock.now()
        make = master.plan_view.stream if jsonl else master.plan_view.document
        self._chunks = make(
            master.plan_inputs(now),
            now,
            with_blockers=with_blockers,
            late=late,
            limit=limit,
            select=select,
        )
        self._jsonl = jsonl
        #: The chunks after which the first slice may end (:data:`FIRST_ROWS_AFTER`): a
        #: reply of rows sends its head and first rows at once (with those made meanwhile,
        #: within that time); a ``late`` one (a summary:
        #: its rows are sorted once all are made) takes the slice, to be answered whole
        #: when it ends within it.
        self._first: int | None = None if late else 2
        #: Whether the last chunk is made.
        self.ended = False

    def take(self) -> bytes:
        """The next slice's bytes (:attr:`ended` once the last is made)."""
        made: list[bytes] = []
        began = time.perf_counter()
        first, self._first = self._first, None
        try:
            with _collector_paused():
                while True:
                    chunk = next(self._chunks, None)
                    if chunk is None:
                        self.ended = True
                        break
                    made.append(chunk)
                    took = time.perf_counter() - began
                    if took >= PLAN_SLICE or (
                        first is not None and len(made) >= first and took >= FIRST_ROWS_AFTER
                    ):
                        break
        except Exception as exc:
            if not self._jsonl:
                raise
            log.exception("the streamed plan failed")
            self.ended = True
            failed = {"code": "plan.failed", "message": f"the plan failed: {exc!r}"}
            made += [orjson.dumps({"error": failed}), b"\n"]
        return b"".join(made)

    async def rest(self, first: bytes = b"") -> AsyncIterator[bytes]:
        """``first`` (a slice already taken), then the other slices, the event loop
        served before each."""
        if first:
            yield first
        while not self.ended:
            await trio.lowlevel.checkpoint()
            if made := self.take():
                yield made


def plan_chunks(
    master: Master,
    *,
    jsonl: bool = False,
    with_blockers: bool = True,
    late: bool = False,
    limit: int | None = None,
    select: PlanSelect | None = None,
) -> AsyncIterator[bytes]:
    """:class:`PlanReply`'s slices, the first made when it is first asked for."""
    reply = PlanReply(
        master, jsonl=jsonl, with_blockers=with_blockers, late=late, limit=limit, select=select
    )

    async def body() -> AsyncIterator[bytes]:
        first = reply.take()
        async for made in reply.rest(first):
            yield made

    return body()


class BoundedStreamingResponse(StreamingResponse):
    """A body sent as it is made (a streamed plan, a schedule's preview), to a reader that
    takes each chunk within :data:`~nodeagent.master._event_stream.SEND_TIMEOUT`: one that
    takes nothing for that long has the response ended without the body's end (the
    connection closed), and the body's generator closed, so that what it holds is let go."""

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        chunks = self.body_iterator
        try:
            async for chunk in chunks:
                with trio.move_on_after(SEND_TIMEOUT) as stalled:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if stalled.cancelled_caught:
                    log.info(
                        "a reader took nothing for %s: its reply ended", in_words(SEND_TIMEOUT)
                    )
                    return
        finally:
            if isinstance(chunks, AsyncGenerator):
                await chunks.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


#: The rows of a schedule's preview made in one slice of the event loop (≈ 0.2 ms each).
PREVIEW_SLICE = 100
#: What ``next`` gives for a preview's steps that ended.
_END: Any = object()
#: A slice of a preview of the rows that change counts this many kept machines (each a
#: look-up, no row made) as one row made.
KEPT_PER_ROW = 50


def _read_schedule(body: bytes) -> MaintenanceSchedule:
    """A schedule's body as ``POST /maintenance/schedule`` reads it (Mesos's 400s)."""
    return MaintenanceSchedule.from_json(load_json(body, "object"))


def preview_document(
    preview: SchedulePreview, previewing: trio.Lock, clock: Callable[[], float] | None = None
) -> AsyncGenerator[bytes, None]:
    """``POST /v1/maintenance/schedule/preview``'s body: the document
    :meth:`Master.preview_schedule` returns, written as its rows are made
    (:class:`~nodeagent.master._preview.SchedulePreview`; with ``clock``, each at the
    time it gives), :data:`PREVIEW_SLICE` rows a slice (a kept machine counted without
    its row, :data:`KEPT_PER_ROW` to a row) with the collector held off; between two
    slices the others have the loop for as long as the slice took, as between a pass's.
    The previews take turns for their slices (``previewing``, held for a slice and the
    turn after it, not while a slice is sent), so that previews never take more than
    half of the loop, however many are asked, and a reader that stalls holds up no
    other. A failure after the first bytes ends the connection without the document's
    end (the server logs it)."""

    async def document() -> AsyncGenerator[bytes, None]:
        head = _json_bytes(preview.head)
        yield head[:-1] + b',"machines":['
        steps = preview.steps(clock)
        separator = b""
        done = False
        while not done:
            # A slice and the others' turn after it, under the lock; the send is not (a
            # reader that stalls holds up no other preview).
            async with previewing:
                began = trio.current_time()
                made: list[bytes] = []
                with _collector_paused():
                    budget = PREVIEW_SLICE * KEPT_PER_ROW
                    while budget > 0:
                        row = next(steps, _END)
                        if row is _END:
                            done = True
                            tail = _json_bytes(preview.tail())
                            break
                        if row is None:
                            budget -= 1
                        else:
                            made.append(_json_bytes(row))
                            budget -= KEPT_PER_ROW
                await trio.sleep(trio.current_time() - began)
            if made:
                yield separator + b",".join(made)
                separator = b","
        yield b"]," + tail[1:]

    return document()


class RequestTiming:
    """Each HTTP request's time to its response's head, by method and route (``unmatched``
    for a path no route takes), given to ``observe`` (the master's request histogram): a
    pure ASGI middleware. Starlette's ``@app.middleware("http")`` runs the app in a task
    of its own and hands every chunk of the body over through a stream, each step a turn
    of the event loop, which on a loaded master is a wait of tens of ms."""

    def __init__(self, app: ASGIApp, *, observe: Callable[[str, str, float], None]) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                route = getattr(scope.get("route"), "path", "unmatched")
                self.observe(scope["method"], route, started)
            await send(message)

        await self.app(scope, receive, timed)


def _refused(exc: AuthError) -> AdReply:
    return AdReply(
        exc.http_status,
        _json_bytes(error_body(exc.code, str(exc))),
        www_authenticate=isinstance(exc, Unauthenticated),
    )


def _pusher(
    master: Master, principals: Principals, authorization: str | None, *, unix: bool
) -> Principal | AdReply:
    """Who pushes an ad: a DAEMON token's holder (see :func:`_pool_pusher`), or the
    refusal (401 or 403)."""
    try:
        who = principals(authorization, unix=unix)
        require(who, Scope.DAEMON)
    except AuthError as exc:
        return _refused(exc)
    refused = _pool_pusher(master, who.subject, who.node)
    return who if refused is None else refused


def _pool_pusher(master: Master, subject: str, node: str | None) -> AdReply | None:
    """The refusal (403) of a push by a DAEMON token of ``subject`` that names no node
    unless ``Master.allow_pool_daemon_tokens``; ``None`` for one that may push."""
    if node is None:
        try:
            master.pool_token_used(subject)
        except AuthError as exc:
            return _refused(exc)
    return None


def _pushed(master: Master, prepared: Prepared) -> AdReply:
    """The reply to a push made ready for the store (:func:`prepare_push`): stored, or
    refused."""
    if isinstance(prepared, Refused):
        return AdReply(prepared.status, prepared.body)
    try:
        reply = master.receive_ad(prepared.ad if isinstance(prepared, OtherAd) else prepared)
    except SlotsError as exc:
        return AdReply(exc.http_status, _json_bytes(error_body(exc.code, exc.message)))
    return AdReply(200, push_reply_bytes(reply))


def push_ad(
    master: Master, principals: Principals, authorization: str | None, body: bytes, *, unix: bool
) -> AdReply:
    """``POST /v1/ads``: check the DAEMON token, parse the ad, check that it is the token's
    node's, :meth:`Master.receive_ad`.

    The reply carries the machine's mode and window. Errors are those of the rest of the
    API: 401 (with ``WWW-Authenticate: Bearer``) or 403, 422 for a body that is not a
    JSON object (or nests too deep to decode), the model's status for an ad it refuses.
    Node restriction: a token that names a node pushes that node's ad only (else 403
    ``auth.wrong_node``, :func:`~nodeagent.master._adstore.foreign_ad`); a DAEMON token
    that names none is refused (403 ``auth.pool_daemon_token``) unless
    ``Master.allow_pool_daemon_tokens``. A refused ad changes nothing. The body is made
    ready for the store here (:func:`~nodeagent.master._ingest.prepare_push`);
    :func:`push_answer` answers the pushes an ingest worker made ready.
    """
    who = _pusher(master, principals, authorization, unix=unix)
    if isinstance(who, AdReply):
        return who
    return _pushed(master, prepare_push(body, who.node, after=master.ads.packed_slots))


def push_answer(
    master: Master, metrics: MasterMetrics
) -> Callable[[Push | WorkerRefusal], AdReply | None]:
    """How the master answers the pushes its ingest workers took
    (:class:`~nodeagent.master._ingest_workers.IngestWorkers`): the push stored (by the
    token's subject and node the worker verified: a worker holds the pool key, so its word
    is taken, and the master keeps no second cache of 100,000 nodes' tokens), the reply
    returned, the request's latency observed (the worker's seconds and the master's); a
    refusal the worker made from a push's head is only observed (``None``)."""

    def answer(push: Push | WorkerRefusal) -> AdReply | None:
        if isinstance(push, WorkerRefusal):
            metrics.observe_request_seconds("POST", "/v1/ads", push.seconds)
            return None
        started = time.perf_counter()
        reply = _pool_pusher(master, push.subject, push.node)
        if reply is None:
            prepared: Prepared
            if push.prepared is None:  # its body, for the master to make ready
                prepared = prepare_push(push.body, push.node, after=master.ads.packed_slots)
            else:
                prepared = push.prepared
            reply = _pushed(master, prepared)
        seconds = push.seconds + time.perf_counter() - started
        metrics.observe_request_seconds("POST", "/v1/ads", seconds)
        return reply

    return answer


def with_ad_fast_path(
    app: ASGIApp, master: Master, *, key: bytes | None, metrics: MasterMetrics
) -> ASGIApp:
    """``app`` with ``POST /v1/ads`` answered by :func:`push_ad` before it reaches ``app``.

    The DAEMON token is checked from the headers before the body is read
    (:func:`~nodeagent.master._ad_pushes.take_push`; then again by :func:`push_ad`, from
    the verified tokens it remembers); the body is capped at
    :data:`~nodeagent.master._ad_pushes.AD_BODY_LIMIT` (413 ``request.too_large``).
    Everything else goes to ``app``. The request latency is observed as the app's
    middleware would (route ``/v1/ads``).
    """
    principals = Principals(master.clock.now, key)

    async def fast_path(scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/ads" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        taken = await take_push(scope, receive, send, principals)
        if taken is None:  # the client went away
            return
        if isinstance(taken, TakenPush):
            reply = push_ad(
                master, principals, taken.authorization, taken.body, unix=bool(scope.get(_UNIX))
            )
            await send_reply(send, reply)
        metrics.observe_request("POST", "/v1/ads", started)

    return fast_path


def with_event_stream(
    app: ASGIApp, master: Master, *, key: bytes | None, metrics: MasterMetrics
) -> ASGIApp:
    """``app`` with ``GET /v1/events`` served before it reaches ``app``
    (:func:`~nodeagent.master._event_stream.events_endpoint`: READ, from the headers).
    The time to the start of the stream is observed as the app's middleware would."""
    principals = Principals(master.clock.now, key)
    endpoint = events_endpoint(master.events, lambda auth, unix: principals(auth, unix=unix))

    async def events(scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/events":
            await app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                metrics.observe_request(scope["method"], "/v1/events", started)
            await send(message)

        await endpoint(scope, receive, timed)

    return events


def _request_target(scope: ASGIScope) -> str:
    """The path and query as the caller sent them, still percent-encoded (ASGI's
    ``raw_path`` and ``query_string``): a ``Location`` made from the decoded path would
    hold raw spaces and non-ASCII text (an invalid URL, or a header that cannot be
    written). Without ``raw_path`` the decoded path is quoted again."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(scope.get("path", "/"), safe="/:@!$&'()*+,;=~")
    query = scope.get("query_string", b"").decode("latin-1")
    return f"{path}?{query}" if query else path


def build_master_app(
    master: Master,
    *,
    key: bytes | None,
    audit: AuditLog | None,
    metrics: MasterMetrics,
    evaluator: Evaluator | None = None,
    sla: SlaBook | None = None,
    operations: Operations | None = None,
    leader: LeaderView | None = None,
) -> FastAPI:
    """The master API bound to ``master``. ``leader``: whether this master leads (without:
    it is the one master); a master that does not lead sends writes to the one that does
    (:class:`~nodeagent.master._leader.NotLeader`). ``sla``: the SLA policies the endpoints of
    :mod:`~nodeagent.master._sla_api` serve (without: the app reads its own from the
    master's store).

    ``evaluator`` evaluates the queries' constraints; its owner closes it. Without one,
    the app makes its own (with the default budget and workers), whose workers end with
    the process. ``operations``: the rolling maintenance operations the endpoints of
    :mod:`~nodeagent.master._operations_api` serve (without: the app makes its own from
    the master's, which nothing then runs).
    """
    constraints = Evaluator() if evaluator is None else evaluator
    app = FastAPI(
        title="nodeagent master API",
        version=__version__,
        summary="Node ads, the Mesos-compatible maintenance schedule, the maintenance plan.",
        openapi_url=None,  # served below, behind READ like every path but /healthz
        docs_url=None,
        redoc_url=None,
    )

    principals = Principals(master.clock.now, key)
    leadership = LeaderView() if leader is None else leader
    previewing = trio.Lock()  # the schedule previews' slices, one at a time (preview_document)

    def principal(request: Request) -> Principal:
        return principals(request.headers.get("authorization"), unix=bool(request.scope.get(_UNIX)))

    def allowed(request: Request, scope: Scope) -> Principal:
        who = principal(request)
        require(who, scope)
        return who

    peer = request_peer

    async def record(request: Request, subject: str, action: str, result: str) -> None:
        if audit is not None:
            await audit.record_async(
                subject=subject, peer=peer(request), action=action, result=result
            )

    async def administrator(request: Request, action: str) -> Principal:
        """The caller, who must be ADMINISTRATOR, of a write this master must lead to make;
        a refusal, or a write sent to the leader, is audited under ``action`` (before the
        body is read)."""
        try:
            who = principal(request)
        except AuthError as exc:
            await record(request, "anonymous", action, exc.code)
            raise
        try:
            require(who, Scope.ADMINISTRATOR)
            leadership.check()
        except (AuthError, NotLeader) as exc:
            await record(request, who.subject, action, exc.code)
            raise
        return who

    async def mesos_change(
        request: Request,
        action: str,
        apply: Callable[[Any, str], Any],
        reply: Callable[[Any], Awaitable[Response]] | None = None,
        *,
        read: Callable[[str], Callable[[bytes], Any]] | None = None,
    ) -> Response:
        """Apply a Mesos change; every outcome is audited, refusals of the caller included.
        ``reply`` makes the answer from what ``apply`` returned (else an empty 200).
        ``read``, given the caller's name, gives (on the loop) the function that makes the
        body what ``apply`` takes, called in a thread (a schedule of 100,000 machines takes
        seconds to read and check: the others are served meanwhile); without it, ``apply``
        takes the body."""
        who = await administrator(request, action)
        body = await request.body()
        try:
            if read is None:
                given: Any = body
            else:
                given = await trio.to_thread.run_sync(read(who.subject), body)
            applied = apply(given, who.subject)
        except MaintenanceError as exc:
            await record(request, who.subject, action, exc.code)
            return PlainTextResponse(exc.message, status_code=400)
        except SlotsError as exc:  # a precondition of an endpoint of ours
            await record(request, who.subject, action, exc.code)
            return JSONResponse(error_body(exc.code, exc.message), status_code=exc.http_status)
        except StoreError as exc:
            await record(request, who.subject, action, exc.code)
            if isinstance(exc, OutcomeUnknown):
                return JSONResponse(error_body(exc.code, unwritten(exc)), status_code=503)
            return PlainTextResponse(unwritten(exc), status_code=503)  # as Mesos's errors
        await record(request, who.subject, action, "ok")
        if reply is not None:
            return await reply(applied)
        return Response(status_code=200)

    # ------------------------------------------------------------------ errors

    app.add_exception_handler(AuthError, auth_error_response)

    @app.exception_handler(NotLeader)
    async def _not_leader(request: Request, exc: NotLeader) -> JSONResponse:
        """307 to the same path and query on the leader (the method and body are sent
        again there); 503 while nobody leads."""
        body = error_body(exc.code, str(exc))
        if exc.leader is None:
            return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})
        body["error"]["leader"] = exc.leader
        target = exc.leader.rstrip("/") + _request_target(request.scope)
        return JSONResponse(body, status_code=307, headers={"Location": target})

    @app.exception_handler(SlotsError)
    async def _slots_error(request: Request, exc: SlotsError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.http_status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            error_body("request.invalid", validation_message(exc.errors())), status_code=422
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        allowed_methods = _MESOS_METHODS.get(request.url.path)
        if exc.status_code == 405 and allowed_methods is not None:
            listed = ", ".join(f"'{m}'" for m in allowed_methods)
            return PlainTextResponse(
                f"Expecting one of {{ {listed} }}, but received '{request.method}'",
                status_code=405,
                headers={"Allow": ", ".join(allowed_methods)},
            )
        codes = {404: "http.not_found", 405: "http.method_not_allowed"}
        return JSONResponse(
            error_body(codes.get(exc.status_code, "http.error"), str(exc.detail)),
            status_code=exc.status_code,
        )

    app.add_middleware(RequestTiming, observe=metrics.observe_request)

    # ------------------------------------------------------------------ health

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, Any]:
        """Liveness. No auth."""
        return {"status": "ok", "version": __version__}

    @app.get(
        "/metrics", tags=["health"], response_class=PlainTextResponse, responses=_errors(401, 403)
    )
    async def prometheus(request: Request) -> Response:
        """Prometheus text: the machines, nodes, drains, plan verdicts, operations, events
        and webhooks (docs/master-api.md#health lists them); the plan's figures are those
        kept between replies, at most ``_ANSWER_SHARES`` of them remade
        (``Master.note_totals_read``); the nodes' figures are brought to now first, a part
        at a time, the others served between two parts, for a second at most: the nodes
        left are counted behind (``MasterMetrics.scrape``)."""
        if metrics.require_auth:
            allowed(request, Scope.READ)
        master.note_totals_read()
        payload, content_type = await metrics.scrape(master.in_slices)
        return Response(payload, media_type=content_type)

    @app.get("/v1/openapi.json", include_in_schema=False)
    async def openapi_document(request: Request) -> JSONResponse:
        """This API's OpenAPI document (READ, as the agent's)."""
        allowed(request, Scope.READ)
        return JSONResponse(app.openapi())

    # ------------------------------------------------------------------ the page

    @app.get("/ui/", include_in_schema=False)
    @app.get("/ui/{name}", include_in_schema=False)
    async def maintenance_page(request: Request, name: str = "") -> Response:
        """The maintenance page's files (READ, as the API it reads; ``_ui``)."""
        allowed(request, Scope.READ)
        found = page_file(name)
        if found is None:
            return JSONResponse(error_body("http.not_found", f"no page file {name!r}"), 404)
        body, content_type = found
        return Response(body, headers=dict(PAGE_HEADERS), media_type=content_type)

    # ------------------------------------------------------------------ leadership

    @app.get("/v1/leader", tags=["health"], responses=_errors(401, 403))
    async def get_leader(request: Request) -> dict[str, Any]:
        """Which master leads (``leader``: its URL; ``null`` while nobody does), whether
        this one does, and its store (``sqlite``: the one master; ``etcd``: several)."""
        allowed(request, Scope.READ)
        return leadership.to_json()

    @app.get("/v1/ad", tags=["health"], responses=_errors(401, 403))
    async def master_ad(request: Request) -> dict[str, Any]:
        """The master's own ad (``MyType`` ``Master``): who it is, who leads, its store."""
        allowed(request, Scope.READ)
        shown = leadership.to_json()
        return {
            "MyType": "Master",
            "Name": shown["self"],
            "MyAddress": shown["self"],
            "MasterVersion": __version__,
            "MasterStore": shown["store"],
            "MasterLeader": shown["leader"],
            "MasterIsLeader": shown["leading"],
            "MyCurrentTime": int(master.clock.now()),
            "NumberOfNodes": len(master.ads),
            "MasterForecastsMadeAhead": master.forecasts_made_ahead,
            "MasterForecastsWaiting": master.forecasts_waiting,
        }

    # ------------------------------------------------------------------ ads

    @app.post(
        "/v1/ads",
        tags=["ads"],
        responses=_errors(401, 403, 409, 413, 422),
        openapi_extra=_json_body(
            _AD, "The node's ad, as its agent's ``GET /v1/ad`` gives it, or moved on in time"
        ),
    )
    async def post_ad(request: Request) -> Response:
        """An agent's ad (DAEMON); the reply carries the machine's mode and window."""
        reply = push_ad(
            master,
            principals,
            request.headers.get("authorization"),
            await request.body(),
            unix=bool(request.scope.get(_UNIX)),
        )
        return Response(
            reply.body,
            status_code=reply.status,
            headers={"WWW-Authenticate": "Bearer"} if reply.www_authenticate else None,
            media_type="application/json",
        )

    @app.get(
        "/v1/ads",
        tags=["ads"],
        responses={
            200: {
                "description": "JSON, or ClassAd long format with ``?format=classad``",
                "content": _TEXT,
            },
            **_errors(401, 403, 422),
        },
    )
    async def get_ads(
        request: Request,
        *,
        constraint: str | None = None,
        projection: str | None = None,
        format: str = "json",
        slots: bool = False,
        type: str = "Machine",
    ) -> Response:
        """Node ads (``slots=true``: slot ads; ``type=Defrag``: other daemons' ads)
        matching a ClassAd ``constraint``, evaluated within a time budget (422
        ``expression.too_costly`` past it)."""
        allowed(request, Scope.READ)
        if format not in ("json", "classad"):
            return JSONResponse(
                error_body("request.invalid", "format must be 'json' or 'classad'"), 422
            )
        fields = [p.strip() for p in projection.split(",") if p.strip()] if projection else None
        ads = master.ads.query(master.clock.now(), slots=slots, my_type=type)
        if constraint is not None:
            matching = await constraints.select(constraint, ads)
            ads = [ad for ad, match in zip(ads, matching, strict=True) if match]
        ads = project(ads, fields)
        if format == "classad":
            return PlainTextResponse(render_long(ads))
        return JSONResponse({"ads": ads})

    @app.get("/v1/ads/{name}", tags=["ads"], responses=_errors(401, 403, 404, 422, 502))
    async def get_ad(
        request: Request, name: str, *, fresh: bool = False, type: str = "Machine"
    ) -> JSONResponse:
        """One node's ad (``type=Defrag``: another daemon's); ``fresh=true`` fetches a
        node's from the node (its ``MyAddress``) now: 502 with the call's code when the
        node cannot be asked or answers an ad the master refuses (``agent.bad_reply``)."""
        allowed(request, Scope.READ)
        entry = master.ads.get(name, type)
        if entry is None:
            return JSONResponse(error_body("ads.no_such_node", f"no ad for {name!r}"), 404)
        if fresh and type == "Machine":
            try:
                entry = await master.fetch_ad(entry)
            except AgentCallFailed as exc:
                return JSONResponse(error_body(exc.code, exc.message), 502)
            except InvalidRequest as exc:
                return JSONResponse(error_body("agent.bad_reply", exc.message), 502)
        now = master.clock.now()
        return JSONResponse(
            {
                "machine": master.ads.served(entry, now),
                "slots": list(entry.slots),
                "age": round(entry.age(now), 3),
            }
        )

    # ------------------------------------------------------------------ Mesos maintenance

    @app.get("/maintenance/schedule", tags=["maintenance"], responses=_errors(401, 403))
    async def get_schedule(request: Request) -> Response:
        """The maintenance schedule (Mesos JSON)."""
        allowed(request, Scope.READ)
        return _mesos_json(master.state.schedule.to_json())

    def read_change(actor: str) -> Callable[[bytes], ScheduleChange]:
        """The schedule's body read and its change made, of the state held now, in a
        thread (:meth:`Master.schedule_change_maker`)."""
        make = master.schedule_change_maker(actor)
        return lambda body: make(_read_schedule(body))

    @app.post(
        "/maintenance/schedule",
        tags=["maintenance"],
        response_class=Response,
        responses=_MESOS_ERRORS,
        openapi_extra=_json_body(_SCHEDULE, "The whole new schedule (Mesos JSON)"),
    )
    async def post_schedule(request: Request) -> Response:
        """Replace the schedule (Mesos rules)."""

        def apply(change: ScheduleChange, actor: str) -> None:
            master.set_schedule(change.schedule, actor=actor, change=change)

        return await mesos_change(request, "maintenance.schedule", apply, read=read_change)

    @app.put(
        "/v1/maintenance/schedule",
        tags=["maintenance"],
        response_class=JSONResponse,
        responses=_errors(307, 400, 401, 403, 412, 413, 422, 503, text=(400, 503)),
        openapi_extra=_json_body(_SCHEDULE, "The whole new schedule (Mesos JSON)"),
    )
    async def put_schedule(
        request: Request, if_version: Annotated[str, Query(min_length=1, max_length=64)]
    ) -> Response:
        """``POST /maintenance/schedule`` with a precondition: applied only while the
        schedule and the machines' modes are those of ``if_version`` (a preview's
        ``schedule_version``), else 412 ``schedule.changed`` and nothing changes. The
        same Mesos rules and 400 messages; the reply is the new ``schedule_version``.
        Audited as ``maintenance.schedule``."""

        def apply(change: ScheduleChange, actor: str) -> str:
            master.set_schedule(change.schedule, actor=actor, if_version=if_version, change=change)
            return master.schedule_version()

        async def answer(version: str) -> Response:
            return JSONResponse({"schedule_version": version})

        return await mesos_change(request, "maintenance.schedule", apply, answer, read=read_change)

    @app.post(
        "/v1/maintenance/schedule/preview",
        tags=["maintenance"],
        response_class=JSONResponse,
        responses=_MESOS_ERRORS,
        openapi_extra=_json_body(_SCHEDULE, "A whole schedule, as POST /maintenance/schedule"),
    )
    async def preview_schedule(
        request: Request, rows: Literal["all", "changed"] = "all"
    ) -> Response:
        """What ``POST /maintenance/schedule`` with this body would do, from the ads held
        now: the plan under it, the drains that would start at once, the jobs evicted
        at once, what the escalations would cut, the machines dropped, and warnings.
        Writes nothing. A body the schedule endpoint refuses gets its 400 and message.
        ``rows=changed``: the rows of the machines the change adds or moves only (the
        kept ones counted, their rows not made). The body is read and checked, and the
        state copied, in a thread (a schedule of 100,000 machines takes seconds), the
        rows then made a slice at a time."""
        allowed(request, Scope.READ)
        body = await request.body()
        made = master.schedule_preview_maker(changed_only=rows == "changed")

        def check() -> SchedulePreview:
            return made(_read_schedule(body))

        try:
            preview = await trio.to_thread.run_sync(check)
        except MaintenanceError as exc:
            return PlainTextResponse(exc.message, status_code=400)
        return BoundedStreamingResponse(
            preview_document(preview, previewing, master.clock.now),
            media_type="application/json",
        )

    @app.post(
        "/machine/down",
        tags=["maintenance"],
        response_class=Response,
        responses=_MESOS_ERRORS,
        openapi_extra=_json_body(_MACHINE_IDS, "The machines to bring down"),
    )
    async def machine_down(request: Request) -> Response:
        """DRAINING machines go DOWN, all or none (Mesos rules). The reply (200, JSON) says,
        per machine, whether its node has confirmed the master's fast drain, and if not
        why it is pending (the node unreachable, lost, or not reporting)."""

        def apply(body: bytes, actor: str) -> tuple[MachineId, ...]:
            machine_ids = parse_machine_ids(load_json(body, "array"))
            master.machines_down(machine_ids, actor=actor)
            return machine_ids

        async def reply(machine_ids: tuple[MachineId, ...]) -> Response:
            return JSONResponse({"machines": await master.down_report(machine_ids)})

        return await mesos_change(request, "machine.down", apply, reply)

    @app.get("/v1/maintenance/down", tags=["maintenance"], responses=_errors(401, 403))
    async def down_machines(request: Request) -> dict[str, Any]:
        """Every DOWN machine, and whether its node holds the master's fast drain
        (``confirmed``) or why not yet (``pending``): the answer ``POST /machine/down``
        gave, as it stands now."""
        allowed(request, Scope.READ)
        down = [m.id for m in master.state.machines() if m.mode is Mode.DOWN]
        return {"machines": master.down_rows(down)}

    @app.post(
        "/v1/maintenance/down/preview",
        tags=["maintenance"],
        response_class=JSONResponse,
        responses=_MESOS_ERRORS,
        openapi_extra=_json_body(_MACHINE_IDS, "The machines to bring down, as /machine/down"),
    )
    async def preview_down(request: Request) -> Response:
        """What ``POST /machine/down`` with this body would do now: per machine, every
        job its node's fast drain evicts at once, its cores and the promises cut. Writes
        nothing. A body ``/machine/down`` refuses gets its 400 and message."""
        allowed(request, Scope.READ)
        body = await request.body()
        try:
            preview = master.preview_down(parse_machine_ids(load_json(body, "array")))
        except MaintenanceError as exc:
            return PlainTextResponse(exc.message, status_code=400)
        return Response(_json_bytes(preview), media_type="application/json")

    @app.post(
        "/machine/up",
        tags=["maintenance"],
        response_class=Response,
        responses=_MESOS_ERRORS,
        openapi_extra=_json_body(_MACHINE_IDS, "The machines to bring up"),
    )
    async def machine_up(request: Request) -> Response:
        """DOWN machines go UP and leave the schedule, all or none (Mesos rules). The
        reply (200, JSON) says, per machine and node, whether the node is back in service
        once the master has cancelled its drain there, and if not what keeps it out (its
        completion hook, its health check): a node opens only when its check passes."""

        def apply(body: bytes, actor: str) -> tuple[MachineId, ...]:
            machine_ids = parse_machine_ids(load_json(body, "array"))
            master.machines_up(machine_ids, actor=actor)
            return machine_ids

        async def reply(machine_ids: tuple[MachineId, ...]) -> Response:
            report = await master.up_report(machine_ids)
            return JSONResponse({"machines": report})

        return await mesos_change(request, "machine.up", apply, reply)

    @app.get("/maintenance/status", tags=["maintenance"], responses=_errors(401, 403))
    async def maintenance_status(request: Request) -> Response:
        """Draining and down machines (Mesos JSON)."""
        allowed(request, Scope.READ)
        notices = list(master.notices.values())

        def statuses(machine: MachineId) -> list[dict[str, Any]]:
            return mesos_statuses(notices, (machine.hostname, machine.ip))

        return _mesos_json(master.state.status().to_json(statuses if notices else None))

    @app.get(
        "/v1/maintenance/plan",
        tags=["maintenance"],
        response_class=JSONResponse,
        responses={
            200: {
                "description": "The plan: one JSON document, or with format=jsonl JSON "
                "lines (a head, a line a row, an end); either sent as the rows are made",
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    "application/x-ndjson": {"schema": {"type": "string"}},
                },
            },
            **_errors(401, 403, 409, 422),
        },
    )
    async def plan(
        request: Request,
        *,
        blockers: bool = True,
        late: bool = False,
        limit: Annotated[int | None, Query(ge=0)] = None,
        format: Literal["json", "jsonl"] = "json",
        window: Annotated[list[str] | None, Query()] = None,
        machine: Annotated[list[str] | None, Query()] = None,
        after: str | None = None,
    ) -> Response:
        """The cluster maintenance plan: per machine and totals (first, the ads that
        predate their machine's window are fetched: ``Master.refresh_figures``; for a
        ``late=true`` reply or a page (``limit``) of every machine, the totals are those
        kept between replies, at most ``_ANSWER_SHARES`` of them remade:
        ``Master.note_totals_read``).
        ``late=true``: only the rows late by their promises or to be escalated;
        ``limit=N``: at most N rows; ``blockers=false``: rows without their blockers.
        ``window=START`` and ``machine=HOST`` (repeatable): the plan of the machines of
        those windows (a whole second: the windows starting within it; with a fraction:
        the window starting exactly then), of those hostnames or IPs (the totals count
        them; without: every machine). ``after=CURSOR``: the rows after the previous
        page's ``next``. The document is sent as its rows are made; ``format=jsonl``:
        JSON lines, sent as they are made (a head, a line a row, an end).
        422 ``plan.bad_window``, ``plan.bad_machine``, ``plan.unknown_window``,
        ``plan.unknown_machine``, ``plan.bad_cursor``; 409
        ``plan.cursor_stale``."""
        allowed(request, Scope.READ)
        try:
            select = PlanSelect.parse(windows=window or (), machines=machine or (), after=after)
        except PlanQueryError as exc:
            return JSONResponse(error_body(exc.code, str(exc)), status_code=exc.status)
        await master.refresh_figures()
        chosen = select if select.given else None
        if reads_totals_kept(chosen, late=late, limit=limit):  # PlanView._ledger_page
            master.note_totals_read()
        try:
            reply = PlanReply(
                master,
                jsonl=format == "jsonl",
                with_blockers=blockers,
                late=late,
                limit=limit,
                select=chosen,
            )
        except PlanQueryError as exc:
            return JSONResponse(error_body(exc.code, str(exc)), status_code=exc.status)
        media_type = "application/x-ndjson" if format == "jsonl" else "application/json"
        first = reply.take()
        if reply.ended:  # made within one slice (a summary): one body, no task of its own
            return Response(first, media_type=media_type)
        return BoundedStreamingResponse(reply.rest(first), media_type=media_type)

    if sla is None:
        sla = SlaBook(store=master.store)
        sla.load()
    add_sla_routes(
        app,
        master,
        sla,
        principal=principal,
        administrator=administrator,
        record=record,
        constraints=constraints,
        errors=_errors,
    )
    add_notice_routes(
        app,
        master,
        principal=principal,
        leadership=leadership.check,
        record=record,
        errors=_errors,
    )
    if operations is None:
        operations = Operations(master)
        operations.load()
    add_operation_routes(
        app,
        operations,
        principal=principal,
        administrator=administrator,
        record=record,
        constraints=constraints,
        errors=_errors,
    )
    app.add_middleware(
        Gate,
        routes=app.router.routes,
        rules=_rules(metrics),
        verify=lambda authorization: principals(authorization, unix=False),
        body_limit=BODY_LIMIT,
        json_bodies=False,  # each endpoint refuses a bad body its own way (Mesos: 400)
        render=_render,
        audit=None if audit is None else _gate_audit(audit),
    )
    return app


def _rules(metrics: MasterMetrics) -> dict[tuple[str, str], Rule]:
    """Who may call each route (the rest: READ), the audited ones and their body caps."""
    rules = {
        ("GET", "/healthz"): Rule(scope=None),
        ("GET", "/metrics"): Rule(scope=Scope.READ, when=lambda: metrics.require_auth),
        ("POST", "/v1/ads"): Rule(scope=Scope.DAEMON),
        # The maintenance page: READ, as the API it reads (no anonymous page over TCP).
        ("GET", "/ui/"): Rule(scope=Scope.READ),
        ("GET", "/ui/{name}"): Rule(scope=Scope.READ),
    }
    writes = {
        ("POST", "/maintenance/schedule"): "maintenance.schedule",
        ("PUT", "/v1/maintenance/schedule"): "maintenance.schedule",
        ("POST", "/machine/down"): "machine.down",
        ("POST", "/machine/up"): "machine.up",
        ("PUT", "/v1/sla/policies/{group:path}"): "sla.policy.put",
        ("DELETE", "/v1/sla/policies/{group:path}"): "sla.policy.delete",
        ("POST", "/v1/maintenance/operations"): "operation.start",
        **{
            ("POST", f"/v1/maintenance/operations/{{op_id}}/{verb}"): f"operation.{verb} {{op_id}}"
            for verb in ("pause", "resume", "cancel")
        },
    }
    for route, action in writes.items():
        rules[route] = Rule(scope=Scope.ADMINISTRATOR, action=action)
    # An owner's answer: READ at the gate, the route checks the token's groups.
    for verb in ("accept", "decline"):
        route = ("POST", f"/v1/notices/{{notice_id}}/{verb}")
        rules[route] = Rule(scope=Scope.READ, action=f"notice.{verb} {{notice_id}}")
    # The previews take what their writes take, as READ: their caps need a rule too.
    for route in BODY_LIMITS:
        rules.setdefault(route, Rule(scope=Scope.READ))
    return {
        route: Rule(
            scope=rule.scope, action=rule.action, when=rule.when, body_limit=BODY_LIMITS.get(route)
        )
        for route, rule in rules.items()
    }


def _render(scope: ASGIScope, status: int, code: str, message: str) -> tuple[str, bytes]:
    """The gate's refusals: JSON error bodies; a wrong method on a Mesos endpoint in
    Mesos's plain text."""
    allowed = _MESOS_METHODS.get(scope["path"])
    if status == 405 and allowed is not None:
        listed = ", ".join(f"'{m}'" for m in allowed)
        text = f"Expecting one of {{ {listed} }}, but received '{scope['method']}'"
        return "text/plain; charset=utf-8", text.encode()
    return "application/json", _json_bytes(error_body(code, message))


def _gate_audit(audit: AuditLog) -> Callable[[Audited], Awaitable[None]]:
    """How the gate audits the writes it refuses itself (the endpoints audit the rest)."""

    async def write(done: Audited) -> None:
        await audit.record_async(
            subject=done.subject, peer=done.peer, action=done.action, result=done.result()
        )

    return write
