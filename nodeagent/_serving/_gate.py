"""The gate in front of every daemon's HTTP API: the caller and the body are checked from
the headers before a byte of the body is read, and a refused body closes its connection.

:class:`Gate` is raw ASGI in front of an app (FastAPI's router gives it the routes). Every
request passes these steps in order, each refusing before the next one runs:

1. the route is matched (method and path) to its :class:`Rule`;
2. the caller is authenticated (401) and its scope checked (403), from the headers alone;
3. an unknown path is 404, a known path with another method 405 with ``Allow``;
4. the body is read, at most the rule's ``body_limit`` bytes: 413 ``request.too_large``
   from ``Content-Length`` before reading, or as soon as a chunked body passes the cap;
5. with ``json_bodies``, a body must be UTF-8 JSON the parser can hold: 422
   ``request.invalid``;
6. the app runs, with the body replayed and the principal in the scope (:data:`PRINCIPAL`).

An error of the app is logged, and answered 500 ``internal.error`` when nothing of its
reply was sent. A client that goes away while its reply is being written (a plan read to
its first rows, then closed) is no error: the reply ends there, noted at debug level.

A refusal whose body was not read (:func:`refuse`) is sent at once, with
``Connection: close``; then the rest of the body is read and thrown away, up to
:data:`DISCARD_LIMIT` bytes, and the connection is closed. Reading the rest is what lets
the client, which may still be sending, read its reply: a server that closes a socket with
unread data resets the connection, and a server that neither reads nor closes holds it
forever (hypercorn 0.18 does: its queue of request messages is full, and putting the
disconnect on it blocks). Past :data:`DISCARD_LIMIT`, or when the client stalls for the
server's read timeout, the connection is closed without more ado.

The audit: a rule with an ``action`` names a state-changing route; every refusal of the
gate on such a route is handed to ``audit``, and with ``audit_replies`` the app's replies
too (held until audited, so that the record is written before the reply leaves).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import trio
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nodeagent._auth import (
    AuthError,
    Principal,
    Unauthenticated,
    require,
)
from nodeagent._auth import (
    Scope as AuthScope,
)
from nodeagent._serving._http import _UNIX, BodyTooLarge, error_body, read_body, replay_body

__all__ = [
    "AUDIT_DETAILS",
    "DISCARD_LIMIT",
    "PRINCIPAL",
    "Audited",
    "Gate",
    "Rule",
    "has_body",
    "refuse",
]

log = logging.getLogger("nodeagent.http")

#: After a refusal, at most this much of the request body is read and thrown away before
#: the connection is closed (64 MiB: more than any body a client of the pool sends; read
#: at loopback speed in a fraction of a second, and never held).
DISCARD_LIMIT = 64 << 20

#: The scope key under which the gate hands the app the caller (:class:`Principal`).
PRINCIPAL = "nodeagent.principal"

#: The scope key under which a route hands the gate its request's parameters (a JSON
#: object) for the audit record's ``details``; unset: ``details`` is null.
AUDIT_DETAILS = "nodeagent.audit_details"

_ANONYMOUS = "anonymous"


@dataclass(frozen=True, kw_only=True)
class Rule:
    """Who may call a route: ``scope`` (``None``: anyone, even without a token), only when
    ``when()`` says so if given; ``action`` names a state-changing route in the audit log
    (``{param}`` fields are filled from the path); ``body_limit`` caps its body (``None``:
    the gate's)."""

    scope: AuthScope | None
    action: str | None = None
    when: Callable[[], bool] | None = None
    body_limit: int | None = None

    def required(self) -> AuthScope | None:
        if self.scope is None or (self.when is not None and not self.when()):
            return None
        return self.scope


#: What an unknown path or method needs on TCP: a valid token.
_ANY_CALLER = Rule(scope=AuthScope.READ)


@dataclass(frozen=True, kw_only=True)
class Audited:
    """One audited request, as the gate hands it to its ``audit``: the rule's ``action``
    (its fields filled), the caller (``None``: anonymous), the reply's ``status`` and JSON
    ``body`` (``None`` if not JSON), the path's parameters, whether the client went away
    before its body was read (``abandoned``), and the request's parameters as the route
    read them (``details``, ``None`` when it read none, e.g. a body refused as invalid)."""

    action: str
    who: Principal | None
    peer: str
    status: int
    body: Any
    params: Mapping[str, Any]
    abandoned: bool
    details: Mapping[str, Any] | None = None

    @property
    def subject(self) -> str:
        return self.who.subject if self.who is not None else _ANONYMOUS

    def result(self) -> str:
        """``ok``, the error body's code, ``request.abandoned`` or ``http.<status>``."""
        if self.abandoned:
            return "request.abandoned"
        if self.status < 400:
            return "ok"
        body = self.body
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            code = body["error"].get("code")
            if isinstance(code, str):
                return code
        return f"http.{self.status}"


#: How a refusal is written: (status, code, message) → (content type, payload).
Render = Callable[[Scope, int, str, str], tuple[str, bytes]]


def _json_error(scope: Scope, status: int, code: str, message: str) -> tuple[str, bytes]:
    payload = json.dumps(error_body(code, message), separators=(",", ":")).encode()
    return "application/json", payload


def has_body(scope: Scope) -> bool:
    """Whether the request's headers announce a body (a length above 0, or chunks)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


async def _discard(receive: Receive, limit: int) -> bool:
    """Read and drop the request body; whether it ended (or the client went away) before
    ``limit`` bytes."""
    size = 0
    while size <= limit:
        message = await receive()
        if message["type"] == "http.disconnect":
            return True
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return True
    return False


async def _drain(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _refusal_head(
    status: int,
    payload: bytes,
    content_type: str,
    headers: Iterable[tuple[str, str]],
    *,
    unread: bool,
) -> list[Message]:
    """The refusal's messages; with ``unread`` the response is left open (see
    :func:`_close_unread`), with ``Connection: close``."""
    raw = [
        (b"content-type", content_type.encode("latin-1")),
        (b"content-length", str(len(payload)).encode()),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers),
    ]
    if unread:
        raw.append((b"connection", b"close"))
    return [
        {"type": "http.response.start", "status": status, "headers": raw},
        {"type": "http.response.body", "body": payload, "more_body": unread},
    ]


async def _close_unread(receive: Receive, send: Send) -> None:
    """End a response left open by :func:`_refusal_head` once the rest of the request
    body is read and dropped, up to :data:`DISCARD_LIMIT`; past that the response ends
    while the rest is still being read (which lets the server pass the disconnect), and
    the server closes the connection."""
    end: Message = {"type": "http.response.body", "body": b"", "more_body": False}
    if await _discard(receive, DISCARD_LIMIT):
        await send(end)
        return
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drain, receive)
        await send(end)
        nursery.cancel_scope.cancel()


async def refuse(
    receive: Receive,
    send: Send,
    status: int,
    payload: bytes,
    *,
    content_type: str = "application/json",
    headers: Iterable[tuple[str, str]] = (),
    unread: bool,
) -> None:
    """Send a whole refusal; with ``unread`` (the request's body was not read to its
    end), close the connection after it: the reply's bytes leave first (the client may
    read them while it still sends), then the rest of the body is read and dropped (see
    the module docstring)."""
    for message in _refusal_head(status, payload, content_type, headers, unread=unread):
        await send(message)
    if unread:
        await _close_unread(receive, send)


@dataclass(frozen=True, kw_only=True)
class _Match:
    route: BaseRoute | None
    rule: Rule
    params: dict[str, Any]
    allowed: frozenset[str]  # the methods of the path, when the method did not match


class _Reply:
    """The ``send`` handed to the app: notes the status, and holds the reply when asked."""

    def __init__(self, send: Send, *, hold: bool) -> None:
        self._send = send
        self._hold = hold
        self.held: list[Message] = []
        self.status = 500
        self.sent = False
        self.abandoned = False  # the client went away before its body was read
        self.lost = False  # the client went away while its reply was being written
        self.error_body: Any = None  # the gate's own refusal
        self.unread = False  # a refusal left open until the rest of the body is dropped

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        if self._hold:
            self.held.append(message)
        else:
            self.sent = True
            try:
                await self._send(message)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.lost = True
                raise

    async def release(self) -> None:
        for message in self.held:
            await self._send(message)
        self.sent = bool(self.held)

    def body(self) -> Any:
        if self.error_body is not None:
            return self.error_body
        raw = b"".join(m.get("body", b"") for m in self.held if m["type"] == "http.response.body")
        try:
            return json.loads(raw)
        except ValueError:
            return None


def _json_problem(body: bytes) -> str | None:
    """Why ``body`` is not a JSON document the API can read, or ``None``."""
    try:
        json.loads(body)
    except RecursionError:
        return "the body is nested too deeply"
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    except ValueError as exc:
        return f"the body is not JSON: {exc}"
    return None


def _peer(scope: Scope) -> str:
    if scope.get(_UNIX):
        return "unix"
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "unknown"


class Gate:
    """Raw ASGI in front of an API: authenticate, cap and check the body, audit, time.

    ``rules`` by (method, route path); a matched route without a rule, and an unknown
    one, needs READ. ``verify`` makes the principal of an ``Authorization`` header (or
    raises :class:`AuthError`); ``None``: TCP takes no token (no pool key). A request
    marked as come over the Unix socket is ADMINISTRATOR. ``body_limit``: the cap of a
    rule without its own. ``render`` writes the gate's refusals (JSON error bodies by
    default). ``observe(method, route path, status, started)`` is called for every request
    when given; ``audit`` for audited requests (see the module docstring).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: list[BaseRoute],
        rules: Mapping[tuple[str, str], Rule],
        verify: Callable[[str | None], Principal] | None,
        body_limit: int,
        json_bodies: bool = True,
        render: Render | None = None,
        audit: Callable[[Audited], Awaitable[None]] | None = None,
        audit_replies: bool = False,
        observe: Callable[[str, str, int, float], None] | None = None,
    ) -> None:
        self.app = app
        self.routes = routes
        self.rules = rules
        self.verify = verify
        self.body_limit = body_limit
        self.json_bodies = json_bodies
        self.render = render or _json_error
        self.audit = audit
        self.audit_replies = audit_replies
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        found = self._match(scope)
        path = getattr(found.route, "path", "unmatched")
        audited = found.rule.action is not None and self.audit is not None
        reply = _Reply(send, hold=audited and self.audit_replies)
        who: Principal | None = None
        gate_refused = True
        try:
            who = self._authenticate(scope, found)
            required = found.rule.required()
            if who is not None and required is not None:
                require(who, required)
            if found.route is None and not found.allowed:
                await self._refuse(scope, reply, 404, "http.not_found", "no such path")
            elif found.allowed:
                allow = ", ".join(sorted(found.allowed))
                await self._refuse(
                    scope,
                    reply,
                    405,
                    "http.method_not_allowed",
                    f"{scope['method']} is not allowed here (allowed: {allow})",
                    headers=[("Allow", allow)],
                )
            else:
                gate_refused = await self._serve(scope, receive, reply, found, who)
        except AuthError as exc:
            headers = [("WWW-Authenticate", "Bearer")] if isinstance(exc, Unauthenticated) else []
            await self._refuse(scope, reply, exc.http_status, exc.code, str(exc), headers=headers)
        if audited and (gate_refused or self.audit_replies):
            await self._audit(scope, found, who, reply)
        await reply.release()
        if reply.unread:
            await _close_unread(receive, send)
        if self.observe is not None:
            self.observe(scope["method"], path, reply.status, started)

    def _match(self, scope: Scope) -> _Match:
        allowed: set[str] = set()
        for route in self.routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                path = getattr(route, "path", "")
                rule = self.rules.get((scope["method"], path), _ANY_CALLER)
                params = dict(child.get("path_params", {}))
                return _Match(route=route, rule=rule, params=params, allowed=frozenset())
            if match is Match.PARTIAL:
                allowed.update(getattr(route, "methods", None) or ())
        # No route, or (``allowed``) the path exists with other methods only.
        return _Match(route=None, rule=_ANY_CALLER, params={}, allowed=frozenset(allowed))

    def _authenticate(self, scope: Scope, found: _Match) -> Principal | None:
        """The caller, from the headers alone (``None``: an anonymous call the route allows).

        Raises :class:`Unauthenticated` when the route needs a token and it is missing or bad.
        """
        if scope.get(_UNIX):
            return Principal(subject="local", scope=AuthScope.ADMINISTRATOR, via="unix")
        if found.rule.required() is None:
            return None
        if self.verify is None:
            raise Unauthenticated("this listener accepts no tokens (no pool key)")
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        return self.verify(header)

    async def _serve(
        self, scope: Scope, receive: Receive, reply: _Reply, found: _Match, who: Principal | None
    ) -> bool:
        """Read the body and run the app; whether the gate refused the request itself."""
        limit = self.body_limit if found.rule.body_limit is None else found.rule.body_limit
        try:
            body = await read_body(scope, receive, limit)
        except BodyTooLarge as exc:
            await self._refuse(scope, reply, exc.http_status, exc.code, str(exc))
            return True
        if body is None:  # the client went away
            reply.abandoned = True
            return True
        if body and self.json_bodies:
            problem = _json_problem(body)
            if problem is not None:
                await self._refuse(scope, reply, 422, "request.invalid", problem, unread=False)
                return True
        inner = {**scope, PRINCIPAL: who}
        try:
            await self.app(inner, replay_body(body, receive), reply.send)
        except Exception:
            if reply.lost:  # a reply cut short by its reader (a plan read to its first rows)
                log.debug("%s %s: the client went away", scope["method"], scope["path"])
                return False
            log.exception("unhandled error in %s %s", scope["method"], scope["path"])
            if reply.sent:
                raise
            reply.held.clear()
            await self._refuse(
                scope, reply, 500, "internal.error", "internal error; see the log", unread=False
            )
        finally:
            if AUDIT_DETAILS in inner:  # what the route read, for the audit record
                scope[AUDIT_DETAILS] = inner[AUDIT_DETAILS]
        return False

    async def _refuse(
        self,
        scope: Scope,
        reply: _Reply,
        status: int,
        code: str,
        message: str,
        *,
        headers: list[tuple[str, str]] | None = None,
        unread: bool | None = None,
    ) -> None:
        content_type, payload = self.render(scope, status, code, message)
        reply.error_body = error_body(code, message)
        reply.unread = has_body(scope) if unread is None else unread
        for each in _refusal_head(
            status, payload, content_type, headers or (), unread=reply.unread
        ):
            await reply.send(each)

    async def _audit(
        self, scope: Scope, found: _Match, who: Principal | None, reply: _Reply
    ) -> None:
        if self.audit is None or found.rule.action is None:
            return
        try:
            action = found.rule.action.format(**found.params)
        except (KeyError, IndexError, ValueError):
            action = found.rule.action
        await self.audit(
            Audited(
                action=action,
                who=who,
                peer=_peer(scope),
                status=reply.status,
                body=reply.body(),
                params=found.params,
                abandoned=reply.abandoned,
                details=scope.get(AUDIT_DETAILS),
            )
        )
