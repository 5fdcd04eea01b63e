"""The clients' errors (the tree in :mod:`nodeagent.client`'s docstring), and the one place
each foreign failure becomes one: httpx's exceptions (:func:`_map_exceptions`) and error
bodies (:func:`_refusal`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx

from nodeagent._wire import error_fields

__all__ = [
    "AgentError",
    "BadResponse",
    "CheckFailed",
    "DrainInProgress",
    "Forbidden",
    "HookRunning",
    "InvalidMaintenance",
    "InvalidRequest",
    "NoLeader",
    "NoSuchClaim",
    "NoSuchHook",
    "NoSuchRequest",
    "NotAccepting",
    "NotPending",
    "OutcomeUnknown",
    "RedirectNotFollowed",
    "Refused",
    "ResourcesInsufficient",
    "TransactionExpired",
    "Unauthorized",
    "Unreachable",
]


class AgentError(Exception):
    """Base of every error the clients raise; the tree is in :mod:`nodeagent.client`."""

    code: str = "client.error"
    status: int | None = None
    condor_code: int | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        condor_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        if condor_code is not None:
            self.condor_code = condor_code

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class Unreachable(AgentError):
    """No reply: the socket is missing, the connection failed or broke, or it timed out.

    ``code`` is ``client.timeout`` when the agent did not answer in time — the request
    may then have been applied — and ``client.unreachable`` otherwise.
    """

    code = "client.unreachable"


class BadResponse(AgentError):
    """The daemon replied with something the API does not promise (not JSON, wrong shape)."""

    code = "client.bad_response"


class Refused(AgentError):
    """The daemon answered with an error and changed nothing; ``code`` is the daemon's."""

    code = "agent.error"


class Unauthorized(Refused):
    """TCP without a token, or with a malformed, forged or expired one (401)."""

    code = "auth.unauthenticated"
    status = 401


class Forbidden(Refused):
    """The token's scope does not cover the call, e.g. a READ token writing (403)."""

    code = "auth.forbidden"
    status = 403


class InvalidRequest(Refused):
    """Bad arguments: an unparsable expression, a negative duration, … (422)."""

    code = "request.invalid"
    status = 422


class NotAccepting(Refused):
    """A new claim while the machine's Start is false, e.g. while draining (409)."""

    code = "machine.not_accepting"
    status = 409


class ResourcesInsufficient(Refused):
    """A new claim does not fit in the free resources (409)."""

    code = "resources.insufficient"
    status = 409


class NoSuchClaim(Refused):
    """No claim has this id (404)."""

    code = "claim.no_such_claim"
    status = 404


class DrainInProgress(Refused):
    """Another drain request (pending or committed) is in force (409, HTCondor 10001)."""

    code = "drain.in_progress"
    status = 409
    condor_code = 10001


class NoSuchRequest(Refused):
    """No drain request in force has this id (404, HTCondor 10002)."""

    code = "drain.no_such_request"
    status = 404
    condor_code = 10002


class CheckFailed(Refused):
    """A one-shot drain's ``check`` expression was not true on the machine ad (412, 10003)."""

    code = "drain.check_failed"
    status = 412
    condor_code = 10003


class TransactionExpired(Refused):
    """The pending transaction passed its ``expires_at`` before the commit (410).

    The agent has cancelled the request; start a new transaction.
    """

    code = "drain.transaction_expired"
    status = 410


class NotPending(Refused):
    """Commit of a request that is no longer pending (already committed) (409)."""

    code = "drain.not_pending"
    status = 409


class NoSuchHook(Refused):
    """``on_completion`` names a hook the agent's configuration does not hold (422)."""

    code = "drain.no_such_hook"
    status = 422


class HookRunning(Refused):
    """Cancel of a drain whose completion hook is running (409): retry once it has ended."""

    code = "drain.hook_running"
    status = 409


class InvalidMaintenance(InvalidRequest):
    """A Mesos maintenance endpoint of the master refused the body (400): ``message`` is
    Mesos's own plain-text reason. Nothing changed."""

    code = "maintenance.invalid"
    status = 400


class NoLeader(Refused):
    """No master leads at the moment (503 ``master.no_leader``): the masters asked cannot
    reach etcd, or the leader has just died and no successor is elected yet. Nothing
    changed: send the request again after ``retry_after`` seconds (the master's
    ``Retry-After``), or let :class:`MasterClient` do it (``retry_no_leader``)."""

    code = "master.no_leader"
    status = 503
    retry_after: float = 1.0


class OutcomeUnknown(AgentError):
    """A master answered a write 503 ``store.outcome_unknown``: its store (etcd) was sent
    the write and could not say in time whether it applied it. It may have been; the
    master that made it has stopped leading and takes the state from etcd again. Not a
    :class:`Refused` (that changed nothing), and not sent to another master: read the
    state back (once a master leads again, :class:`NoLeader` until then) and send the
    write again only if it is not there."""

    code = "store.outcome_unknown"
    status = 503


class RedirectNotFollowed(AgentError):
    """A master sent the request on to its leader (307, 308) and the client did not follow:
    nothing was sent to ``location``, and nothing changed. ``code``:

    * ``client.redirect_refused``: ``location`` is not a master the client was given
      (``url``, ``urls``) nor the origin of the master that redirected: the token is never
      sent to an address a reply chose; name every master in ``urls=[...]``;
    * ``client.token_required``: the leader is over TCP and the client has no token (it
      spoke to a master's Unix socket, where none is needed): give it one, or use the
      leader's own socket;
    * ``client.insecure_redirect``: from ``https://`` to ``http://``, which would send the
      token in clear: give the leader's ``https://`` URL;
    * ``client.too_many_redirects``: more than :data:`MAX_REDIRECTS` in a row: the masters
      do not agree on who leads (try again in a moment).
    """

    code = "client.redirect_not_followed"
    location: str | None = None


_REFUSALS: dict[str, type[Refused]] = {
    cls.code: cls
    for cls in (
        Unauthorized,
        Forbidden,
        InvalidRequest,
        NotAccepting,
        ResourcesInsufficient,
        NoSuchClaim,
        DrainInProgress,
        NoSuchRequest,
        CheckFailed,
        TransactionExpired,
        NotPending,
        NoSuchHook,
        HookRunning,
    )
}
"""The one table from the agent's stable codes to exception classes."""

_BY_STATUS: dict[int, type[Refused]] = {401: Unauthorized, 403: Forbidden}
"""Only for error replies without a readable code (e.g. from a proxy in between)."""


def _error_fields(response: httpx.Response) -> tuple[str, str, int | None] | None:
    """``(code, message, condor_code)`` of an API error body, ``None`` when it is not one
    (read by :func:`nodeagent._wire.error_fields`, as every other caller reads it)."""
    return error_fields(response.content)


def _refusal(response: httpx.Response, *, peer: str = "agent") -> Refused:
    """The exception for an error reply ``{"error": {"code", "message", "condor_code"?}}``.

    A known code selects its class; an unknown one gives a plain :class:`Refused`. A reply
    without a readable body (e.g. from a proxy) is classified by its status alone.
    """
    status = response.status_code
    fields = _error_fields(response)
    if fields is None:
        text = response.text.strip()[:200] or response.reason_phrase
        cls = _BY_STATUS.get(status, Refused)
        code = "http.error" if cls is Refused else cls.code
        return cls(f"HTTP {status} from the {peer}: {text}", code=code, status=status)
    code, message, condor_code = fields
    return _REFUSALS.get(code, Refused)(message, code=code, status=status, condor_code=condor_code)


@contextlib.contextmanager
def _map_exceptions(where: str, *, peer: str = "agent") -> Iterator[None]:
    """Translate httpx's exceptions into :class:`AgentError`\\ s; the one place that does
    (the httpx exception stays as the ``__cause__``)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise Unreachable(
            f"the {peer} at {where} did not answer in time ({type(exc).__name__})",
            code="client.timeout",
        ) from exc
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        raise Unreachable(f"cannot reach the {peer} at {where}: {reason}") from exc
    except httpx.HTTPError as exc:
        raise BadResponse(f"unusable reply from the {peer} at {where}: {exc}") from exc
