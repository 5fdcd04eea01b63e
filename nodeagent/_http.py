"""The HTTP kit the daemons share: error bodies, the Unix-socket mark, the auth-error reply."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from nodeagent._auth import (
    AuthError,
    Unauthenticated,
)

__all__ = ["auth_error_response", "error_body", "request_peer", "trusted"]

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
