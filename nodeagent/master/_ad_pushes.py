"""An ad push taken from its head, the same in the master and in its ingest workers.

:class:`Principals` says who makes a request (the verified tokens remembered);
:func:`take_push` checks a push's token from its headers before a byte of its body is read,
then reads the body under :data:`AD_BODY_LIMIT` (413 ``request.too_large`` beyond), and
answers the refusals itself; :func:`send_reply` answers the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from starlette.types import Receive, Send
from starlette.types import Scope as ASGIScope

from nodeagent._auth import (
    AuthError,
    Principal,
    Scope,
    Unauthenticated,
    principal_from_authorization,
    require,
)
from nodeagent._serving._gate import has_body, refuse
from nodeagent._serving._http import _UNIX, BodyTooLarge, error_body, read_body
from nodeagent.master._ingest import AdReply, json_bytes

__all__ = [
    "AD_BODY_LIMIT",
    "Principals",
    "TakenPush",
    "is_push",
    "pusher",
    "send_reply",
    "take_push",
]

#: The largest ad push (4 MiB): an agent's ad is ~13 kB, a node with 128 claims ~200 KiB.
AD_BODY_LIMIT = 4 << 20


class Principals:
    """Who makes a request: ADMINISTRATOR on the Unix socket, else the bearer token's holder.

    Verified tokens are remembered by the exact ``Authorization`` value (every agent
    sends the same token with each push, and checking a signature costs as much as
    storing the ad). What a token says cannot change, so a remembered one is only checked
    again against the clock (``now``): it is used while it has not expired and the clock
    has not gone back past the moment it was verified (so its ``iat`` check still holds);
    otherwise it is verified again, which refuses it with the usual message. A token is
    remembered only once verified, so those remembered are valid tokens in use (≈ 0.7 KB
    each); at ``limit`` they are all forgotten at once. The key is the one the daemon
    started with: a new key is a restart, which forgets them all.
    """

    #: A token for each node of a pool of 100,000 and their renewals. Each node pushes once
    #: a minute: with fewer tokens than nodes remembered, a pool that goes through its
    #: nodes in turn would find none of them remembered (≈ 40 µs an ad to verify).
    LIMIT = 262_144

    def __init__(self, now: Callable[[], float], key: bytes | None, *, limit: int = LIMIT) -> None:
        self._now = now
        self._key = key
        self._limit = limit
        self._verified: dict[str, tuple[Principal, float]] = {}
        #: Tokens verified, not answered from those remembered.
        self.verifications = 0

    def __call__(self, authorization: str | None, *, unix: bool) -> Principal:
        if unix:
            return Principal(subject="local", scope=Scope.ADMINISTRATOR, via="unix")
        if self._key is None:
            raise Unauthenticated("this listener accepts no tokens (no pool key)")
        now = self._now()
        if authorization is not None:
            known = self._verified.get(authorization)
            if known is not None:
                who, verified_at = known
                if verified_at <= now and who.expires_at is not None and now < who.expires_at:
                    return who
                del self._verified[authorization]
        self.verifications += 1
        who = principal_from_authorization(authorization, self._key, now)
        if authorization is not None:
            if len(self._verified) >= self._limit:
                self._verified.clear()
            self._verified[authorization] = (who, now)
        return who


@dataclass(frozen=True, slots=True)
class TakenPush:
    """A push whose token holds DAEMON, and its whole body."""

    authorization: str | None
    who: Principal
    body: bytes


def pusher(
    headers: Iterable[tuple[bytes, bytes]], principals: Principals, *, unix: bool
) -> tuple[str | None, Principal]:
    """A push's ``Authorization`` (from ``headers``, lower-case names) and whom it names,
    who must hold DAEMON; raises :class:`~nodeagent._auth.AuthError` otherwise."""
    authorization = next(
        (value.decode("latin-1") for name, value in headers if name == b"authorization"), None
    )
    who = principals(authorization, unix=unix)
    require(who, Scope.DAEMON)
    return authorization, who


async def take_push(
    scope: ASGIScope, receive: Receive, send: Send, principals: Principals
) -> TakenPush | int | None:
    """The push of ``POST /v1/ads``: its token checked from the headers (DAEMON), then its
    body read. A refusal (401 with ``WWW-Authenticate: Bearer``, 403, 413) is answered
    here and its status returned; ``None`` when the client went away."""
    try:  # from the headers, before a byte of the body is read
        authorization, who = pusher(scope["headers"], principals, unix=bool(scope.get(_UNIX)))
        body = await read_body(scope, receive, AD_BODY_LIMIT)
    except (AuthError, BodyTooLarge) as exc:
        headers = [("WWW-Authenticate", "Bearer")] if isinstance(exc, Unauthenticated) else []
        payload = json_bytes(error_body(exc.code, str(exc)))
        await refuse(
            receive, send, exc.http_status, payload, headers=headers, unread=has_body(scope)
        )
        return exc.http_status
    if body is None:
        return None
    return TakenPush(authorization, who, body)


def is_push(method: bytes, target: bytes) -> bool:
    """Whether a request line is an ad push's (``POST /v1/ads``, any query)."""
    return method == b"POST" and target.partition(b"?")[0] == b"/v1/ads"


async def send_reply(send: Send, reply: AdReply) -> None:
    """Answer a push with ``reply``."""
    await send({"type": "http.response.start", "status": reply.status, "headers": reply.headers()})
    await send({"type": "http.response.body", "body": reply.body})
