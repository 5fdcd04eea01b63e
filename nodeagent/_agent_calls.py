"""The agent's API as the other daemons speak it: one typed call per operation, and the
two-phase drain written once.

The master and the defrag daemon call an agent only through this module (the layout test
holds them to it): :class:`AgentCalls` names one agent (its address and node) and the
requester the agent records (``actor``), over any :class:`Send` — the daemons' is
:meth:`AgentCalls.over`, an :class:`~nodeagent._peer.AgentLink` whose tokens are bound to
the node. A call's failure is the transport's exception (for a link,
:class:`~nodeagent._peer.PeerCallFailed` with the agent's stable ``code``).

The two-phase drain (DESIGN §5) is :meth:`AgentCalls.transaction`: phase 1 on entering
(the request id and the estimate), then whatever the caller must do before the commit —
write its own record of the drain, compare the estimate — then :meth:`Transaction.commit`.
A block left before any commit (an exception, a check that declines, a cancellation)
cancels the pending request, shielded and bounded by :data:`CANCEL_GRACE_S`; if that
cancel fails, the agent still cancels the request by itself at its expiry (``ttl``). A
commit that fails is the caller's to settle: its outcome may be unknown (no reply), so it
is never cancelled here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self
from urllib.parse import quote

if TYPE_CHECKING:  # the link itself needs httpx; the pure models import this module
    from nodeagent._peer import AgentLink

__all__ = [
    "CANCEL_GRACE_S",
    "AgentCalls",
    "Committed",
    "DrainBody",
    "Phase1",
    "Send",
    "Transaction",
    "is_gone",
]

log = logging.getLogger("nodeagent.agent_calls")

#: How long the cancel of an abandoned transaction may take (it runs shielded).
CANCEL_GRACE_S = 5.0
#: The agent's code for a drain request that is not in force (ended, expired, never made).
_GONE = "drain.no_such_request"


class Send(Protocol):
    """One request to the agent: ``method`` and ``path`` (with its query), a JSON body or
    none; the reply, a JSON object. Raises on a refusal or no reply."""

    def __call__(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> Awaitable[dict[str, Any]]: ...


def is_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is the agent's answer that the drain request is not in force."""
    return getattr(exc, "code", None) == _GONE


def _segment(value: str) -> str:
    return quote(value, safe="")


@dataclass(frozen=True, kw_only=True)
class DrainBody:
    """A drain request (``POST /v1/drain``), as DESIGN §5 names its fields.

    ``deadline`` is relative (seconds after the commit); ``on_completion`` is ``resume``,
    ``exit`` or ``hook:NAME``; ``start`` a ClassAd expression choosing the jobs drained
    first.
    """

    schedule: str
    reason: str
    ttl: float = 30.0
    deadline: float | None = None
    on_completion: str | None = None
    start: str | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"schedule": self.schedule, "reason": self.reason}
        body["ttl"] = int(self.ttl) if float(self.ttl).is_integer() else self.ttl
        for name in ("deadline", "on_completion", "start"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body


@dataclass(frozen=True, kw_only=True)
class Phase1:
    """Phase 1's reply: the pending request's id, its estimate (DESIGN §5, as sent), when
    the agent made it (the node's clock), and the whole reply."""

    request_id: str
    estimate: Mapping[str, Any]
    created_at: float | None
    reply: Mapping[str, Any]

    @classmethod
    def of(cls, reply: Mapping[str, Any]) -> Phase1:
        request_id = reply.get("id")
        if not isinstance(request_id, str) or not request_id:
            raise ValueError("the agent's phase-1 reply carries no request id")
        estimate = reply.get("estimate")
        return cls(
            request_id=request_id,
            estimate=estimate if isinstance(estimate, dict) else {},
            created_at=_number(reply.get("created_at")),
            reply=reply,
        )

    @property
    def completion(self) -> float | None:
        """The estimate's completion instant, if it gives one."""
        return _number(self.estimate.get("completion"))


@dataclass(frozen=True, kw_only=True)
class Committed:
    """The commit's reply: the request's state (``draining``, or ``drained`` when the node
    was empty), when the node committed it (its clock), and the whole reply."""

    request_id: str
    state: str | None
    committed_at: float | None
    reply: Mapping[str, Any]

    @classmethod
    def of(cls, request_id: str, reply: Mapping[str, Any]) -> Committed:
        state = reply.get("state")
        return cls(
            request_id=request_id,
            state=state if isinstance(state, str) else None,
            committed_at=_number(reply.get("committed_at")),
            reply=reply,
        )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class AgentCalls:
    """The calls to one agent, each a typed method over ``send``."""

    send: Send

    @classmethod
    def over(cls, link: AgentLink, address: str, *, node: str, actor: str) -> AgentCalls:
        """The agent ``node`` at ``address`` through ``link`` (tokens bound to ``node``,
        recorded as ``actor``'s requests)."""

        def send(
            method: str, path: str, body: dict[str, Any] | None = None
        ) -> Awaitable[dict[str, Any]]:
            return link.call(address, method, path, node=node, actor=actor, body=body)

        return cls(send)

    async def ad(self) -> dict[str, Any]:
        """``GET /v1/ad``: the node's ad (machine and slots), as the agent serves it now."""
        return await self.send("GET", "/v1/ad")

    async def begin(self, body: DrainBody) -> Phase1:
        """Phase 1, ``POST /v1/drain``: a pending request and its estimate. Prefer
        :meth:`transaction`, which cancels what it does not commit."""
        reply = await self.send("POST", "/v1/drain", body.to_json())
        return Phase1.of(reply)

    async def commit(self, request_id: str) -> Committed:
        """Phase 2, ``POST /v1/drain/{id}/commit``: the drain starts now."""
        reply = await self.send("POST", f"/v1/drain/{_segment(request_id)}/commit")
        return Committed.of(request_id, reply)

    async def cancel(self, request_id: str) -> bool:
        """Cancel that request (``POST /v1/drain/{id}/cancel``; never another's). False
        when it was not in force any more (ended, expired, cancelled by someone else)."""
        try:
            await self.send("POST", f"/v1/drain/{_segment(request_id)}/cancel")
        except Exception as exc:
            if is_gone(exc):
                return False
            raise
        return True

    async def cancel_any(self) -> None:
        """Cancel whatever drain is in force (``DELETE /v1/drain``; a no-op when none is)."""
        await self.send("DELETE", "/v1/drain")

    def transaction(self, body: DrainBody) -> Transaction:
        """The two-phase drain of ``body`` (see the module docstring)."""
        return Transaction(self, body)


class Transaction:
    """``async with calls.transaction(body) as tx``: phase 1 on entering (:attr:`phase1`),
    :meth:`commit` inside; left uncommitted, the pending request is cancelled."""

    def __init__(self, calls: AgentCalls, body: DrainBody) -> None:
        self.calls = calls
        self.body = body
        self._phase1: Phase1 | None = None
        self._resolved = False

    @property
    def phase1(self) -> Phase1:
        if self._phase1 is None:
            raise RuntimeError("the drain transaction has not started: use 'async with'")
        return self._phase1

    @property
    def request_id(self) -> str:
        return self.phase1.request_id

    async def __aenter__(self) -> Self:
        if self._phase1 is not None:
            raise RuntimeError("a drain transaction is entered once")
        self._phase1 = await self.calls.begin(self.body)
        return self

    async def commit(self) -> Committed:
        """Commit the pending request. A failure (raised) is the caller's to settle: the
        request is not cancelled, since a commit without a reply may have gone through."""
        self._resolved = True
        return await self.calls.commit(self.request_id)

    async def cancel(self) -> bool:
        """Cancel the pending request now; False when it was gone already."""
        self._resolved = True
        return await self.calls.cancel(self.request_id)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._resolved or self._phase1 is None:
            return
        self._resolved = True
        import trio  # noqa: PLC0415  (here: the types load without trio, for pure models)

        with trio.move_on_after(CANCEL_GRACE_S, shield=True):
            try:
                await self.calls.cancel(self.request_id)
            except Exception as err:  # the agent expires it at its ttl
                log.warning(
                    "pending drain %s not cancelled (it expires in %g s): %s",
                    self.request_id,
                    self.body.ttl,
                    err,
                )
