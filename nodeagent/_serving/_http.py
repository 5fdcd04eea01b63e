"""The HTTP kit the daemons share: error bodies, the Unix-socket mark, the auth-error reply,
and request bodies read with a size cap (raw ASGI, so a server can refuse before reading).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nodeagent._auth import (
    AuthError,
    Unauthenticated,
)

__all__ = [
    "BodyTooLarge",
    "auth_error_response",
    "error_body",
    "read_body",
    "replay_body",
    "request_peer",
    "send_error",
    "trusted",
]

_UNIX = "nodeagent.unix"


def trusted(app: ASGIApp) -> ASGIApp:
    """Mark every request through ``app`` as coming over the Unix socket (ADMINISTRATOR)."""

    async def wrapper(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, _UNIX: True}
        await app(scope, receive, send)

    return wrapper


def error_body(code: str, message: str, condor_code: int | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if condor_code is not None:
        error["condor_code"] = condor_code
    return {"error": error}


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """The values of a request refused (a validation error's ``errors()``), one per
    problem: where (``query.limit``, ``hosts.0``; ``body`` for the body itself) and why,
    and nothing of the server's code."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in errors
    )
    return problems or "invalid request"


def request_peer(request: Request) -> str:
    """Who is on the other end, for the audit log: ``unix`` or ``host:port``."""
    if request.scope.get(_UNIX):
        return "unix"
    client = request.client
    return f"{client.host}:{client.port}" if client else "unknown"


async def auth_error_response(request: Request, exc: Exception) -> JSONResponse:
    """The reply to an :class:`AuthError` (401 with ``WWW-Authenticate: Bearer``, or 403)."""
    assert isinstance(exc, AuthError)
    response = JSONResponse(error_body(exc.code, str(exc)), status_code=exc.http_status)
    if isinstance(exc, Unauthenticated):
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


class BodyTooLarge(Exception):
    """A request body over the server's cap (413 ``request.too_large``)."""

    code = "request.too_large"
    http_status = 413


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or ``None`` if the client went away first.

    Raises :class:`BodyTooLarge` without reading anything when ``Content-Length`` declares
    more than ``limit`` bytes, and as soon as more than ``limit`` bytes have arrived
    otherwise (a chunked body): at most ``limit`` bytes plus one chunk are ever held.
    """
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise BodyTooLarge(f"the request body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the request body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then waits on ``receive`` (the disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay


async def send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    *,
    headers: Iterable[tuple[str, str]] = (),
) -> None:
    """Send a whole JSON error reply (:func:`error_body`) through a raw ASGI ``send``."""
    payload = json.dumps(error_body(code, message), separators=(",", ":")).encode()
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers),
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload, "more_body": False})
