"""The Python clients of the agent's and the master's HTTP APIs (DESIGN §4), for trio
programs and scripts.

:class:`AgentClient` talks to one agent, over its Unix socket (ADMINISTRATOR: whoever may
open the socket) or over TCP with a bearer token::

    async with AgentClient() as agent:                    # the default Unix socket
        async with agent.start_draining("graceful", reason="kernel update") as txn:
            print(txn.estimate.completion, [b.slot for b in txn.estimate.blockers])
            await txn.commit()                            # or leave the block: cancelled
        await agent.wait_drained()

:class:`SyncAgentClient` offers the same calls to scripts without an event loop; each call
runs the async one under its own ``trio.run``.

:class:`MasterClient` (and :class:`SyncMasterClient`) talks to the masters: the Mesos
maintenance schedule, down and up, the status, the plan, the ads, the rolling operations
and the SLA policies. Several masters may be named (``urls=[...]``): a request goes to the
first that answers, and a write that reaches a master that does not lead is sent again, as
it was, to the leader that master names (``307``)::

    async with MasterClient(urls=["https://m1:9622", "https://m2:9622"], token=tok) as m:
        await m.set_schedule({"windows": [...]})      # reaches the leader
        print((await m.leader()).leader)

Results are frozen dataclasses that mirror the API's JSON field for field
(:class:`DrainRequest`, :class:`Estimate`, :class:`Blocker`, :class:`Claim`, …); the
machine ad stays a ``dict`` keyed by ClassAd attribute names.

Errors. Every failure of either client is an :class:`AgentError` carrying ``code`` (the
daemon's stable code, or ``client.*`` for failures seen only by the client), ``message``,
``status`` (the HTTP status, ``None`` when there was no reply) and ``condor_code``
(HTCondor's number, where one exists)::

    AgentError
    ├── Unreachable                      client.unreachable | client.timeout   no reply
    ├── BadResponse                      client.bad_response   a reply the API does not promise
    ├── RedirectNotFollowed              client.redirect_refused | client.token_required |
    │                                    client.insecure_redirect | client.too_many_redirects
    │                                    (the master client)
    ├── OutcomeUnknown         503   store.outcome_unknown   (the master client: a write may
    │                                or may not have been applied; read back, then retry)
    └── Refused                          any code the daemon sent; unknown codes stay here
        ├── Unauthorized           401   auth.unauthenticated
        ├── Forbidden              403   auth.forbidden
        ├── InvalidRequest         422   request.invalid
        │   └── InvalidMaintenance 400   maintenance.invalid   (Mesos's plain-text message)
        ├── NoLeader               503   master.no_leader      (retry after ``retry_after`` s)
        ├── NotAccepting           409   machine.not_accepting
        ├── ResourcesInsufficient  409   resources.insufficient
        ├── NoSuchClaim            404   claim.no_such_claim
        ├── DrainInProgress        409   drain.in_progress          (10001)
        ├── NoSuchRequest          404   drain.no_such_request      (10002)
        ├── CheckFailed            412   drain.check_failed         (10003)
        ├── TransactionExpired     410   drain.transaction_expired
        ├── NotPending             409   drain.not_pending
        ├── NoSuchHook             422   drain.no_such_hook
        └── HookRunning            409   drain.hook_running

A :class:`Refused` request changed nothing on the daemon (the API's contract), nor did a
:class:`RedirectNotFollowed` one. After :class:`Unreachable` with code ``client.timeout``,
or :class:`OutcomeUnknown` (a master on etcd whose write got no reply, and etcd could not
say in time whether it applied it), the request may or may not have been applied: read
the state back before retrying a write.
Foreign exceptions (httpx's) are translated in one place, :func:`_map_exceptions`; error
bodies in one place, :func:`_refusal` (the master's through :func:`_master_refusal`); JSON
into results in one place, the ``_*_from_json`` functions.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import ssl
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
import trio

from nodeagent import __version__
from nodeagent._paths import default_master_socket, default_socket
from nodeagent._wire import error_fields

__all__ = [
    "CANCEL_GRACE_S",
    "MAX_REDIRECTS",
    "AgentClient",
    "AgentError",
    "BadResponse",
    "Blocker",
    "CheckFailed",
    "Claim",
    "ClaimResources",
    "DrainInProgress",
    "DrainRequest",
    "DrainStatus",
    "DrainTransaction",
    "Estimate",
    "Forbidden",
    "Health",
    "HealthStatus",
    "HookRun",
    "HookRunning",
    "InvalidMaintenance",
    "InvalidRequest",
    "Job",
    "Leadership",
    "MasterClient",
    "NoLeader",
    "NoSuchClaim",
    "NoSuchHook",
    "NoSuchRequest",
    "NotAccepting",
    "NotPending",
    "OnCompletion",
    "OutcomeUnknown",
    "RedirectNotFollowed",
    "Refused",
    "ResourcesInsufficient",
    "Schedule",
    "SyncAgentClient",
    "SyncDrainTransaction",
    "SyncMasterClient",
    "TransactionExpired",
    "Unauthorized",
    "Unreachable",
    "default_socket_path",
]

Schedule = Literal["graceful", "quick", "fast"]
"""How a drain empties the node (DESIGN §3.3)."""

OnCompletion = str
"""What the agent does once the node is drained (DESIGN §3.3): ``"none"``, ``"resume"``,
``"exit"``, ``"restart"``, or ``"hook:NAME"``, a hook of the agent's configuration (a
request names a hook; it never supplies a command): :class:`NoSuchHook` when the agent has
none of that name."""

CANCEL_GRACE_S = 5.0
"""How long cleanup may take when a block is left: cancelling an unresolved
:class:`DrainTransaction`, closing an :class:`AgentClient` (shielded from cancellation)."""

_T = TypeVar("_T")
_UDS_BASE_URL = "http://nodeagent"


# ============================================================================================
# Errors


class AgentError(Exception):
    """Base of every error this module raises; see the module docstring for the tree."""

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


# ============================================================================================
# Results (frozen, faithful to the JSON)


@dataclass(frozen=True, kw_only=True, slots=True)
class Blocker:
    """A job a drain waits for: ``evict_at`` is its soft kill, ``gone_by`` its hard kill.

    Times are epoch seconds; ``run``, ``retirement_remaining`` and ``vacate`` are seconds.
    """

    claim_id: str
    slot: str
    job_id: str
    owner: str
    cpus: int
    activity: str
    run: int
    retirement_remaining: int
    vacate: int
    evict_at: int | None
    gone_by: int
    accepted_while_draining: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """A schedule's expected completion (epoch s) and badput (cpu-s) as of ``now``.

    Blockers come latest ``gone_by`` first: the first ones set the completion time.
    """

    schedule: str
    now: int
    completion: int
    badput: int
    blockers: tuple[Blocker, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class HookRun:
    """A drain's completion hook as it ran. ``state``: pending, running, succeeded, failed
    or interrupted; ``exit_status`` negative: killed by that signal; ``message`` says how it
    ended; ``output`` is the end of its stdout and stderr. Times are epoch seconds."""

    name: str
    state: str
    reboots: bool
    pid: int | None
    started_at: float | None
    ended_at: float | None
    exit_status: int | None
    message: str | None
    output: str


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthStatus:
    """The agent's health gate (when it has a health check): ``state`` passing (open),
    pending or failing (closed: the node takes no work until ``passes_needed`` checks in
    a row have passed)."""

    state: str
    reason: str | None
    since: float | None
    passes: int
    passes_needed: int
    failures: int
    last_check: float | None
    next_check: float | None
    message: str | None
    output: str


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainRequest:
    """One drain request. ``state``: pending, draining, drained, hook_pending,
    hook_running, hook_failed, cancelled or completed.

    Times are epoch seconds; ``deadline`` is seconds after commit. ``estimate`` is the live
    estimate of the request in force, ``None`` for a request that has ended. ``hook`` is
    its completion hook's run, once due (``on_completion`` ``hook:NAME``).
    """

    id: str
    state: str
    schedule: str
    reason: str
    on_completion: str
    deadline: float | None
    start: str | None
    requested_by: str | None
    created_at: float | None
    expires_at: float | None
    committed_at: float | None
    deadline_at: float | None
    drained_at: float | None
    ended_at: float | None
    estimate: Estimate | None = None
    hook: HookRun | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainStatus:
    """``GET /v1/drain``: the request in force (``current``), or the last one that ended;
    ``accepting`` is ``Start`` (``None`` from an agent that does not say), ``health`` the
    health gate (``None`` without a health check)."""

    current: DrainRequest | None
    last: DrainRequest | None = None
    accepting: bool | None = None
    health: HealthStatus | None = None

    @property
    def state(self) -> str:
        """``none`` when no request is in force, else the current request's state."""
        return "none" if self.current is None else self.current.state


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimResources:
    """A dynamic slot's resources: cores, memory MiB, disk KiB, GPUs."""

    cpus: int
    memory: int
    disk: int
    gpus: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """The job of a claim. ``run`` and ``suspended`` are seconds; ``started_at`` epoch s."""

    job_id: str | None
    owner: str
    max_job_retirement_time: int | None
    job_max_vacate_time: int | None
    kill_signal: str
    group: str | None
    started_at: float | None
    run: float
    suspended: float
    pid: int | None
    argv: tuple[str, ...] | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """A claim: a dynamic slot and its job."""

    id: str
    slot: str
    state: str
    activity: str
    resources: ClaimResources
    job: Job
    accepted_while_draining: bool
    evicted_at: float | None
    hard_kill_at: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Health:
    """``GET /healthz``."""

    status: str
    version: str


def _blocker_from_json(d: Mapping[str, Any]) -> Blocker:
    return Blocker(
        claim_id=d["claim_id"],
        slot=d["slot"],
        job_id=d["job_id"],
        owner=d["owner"],
        cpus=d["cpus"],
        activity=d["activity"],
        run=d["run"],
        retirement_remaining=d["retirement_remaining"],
        vacate=d["vacate"],
        evict_at=d["evict_at"],
        gone_by=d["gone_by"],
        accepted_while_draining=d["accepted_while_draining"],
    )


def _estimate_from_json(d: Mapping[str, Any]) -> Estimate:
    return Estimate(
        schedule=d["schedule"],
        now=d["now"],
        completion=d["completion"],
        badput=d["badput"],
        blockers=tuple(_blocker_from_json(b) for b in d["blockers"]),
    )


def _hook_from_json(d: Mapping[str, Any]) -> HookRun:
    return HookRun(
        name=d["name"],
        state=d["state"],
        reboots=d["reboots"],
        pid=d["pid"],
        started_at=d["started_at"],
        ended_at=d["ended_at"],
        exit_status=d["exit_status"],
        message=d["message"],
        output=d["output"],
    )


def _health_from_json(d: Mapping[str, Any]) -> HealthStatus:
    return HealthStatus(
        state=d["state"],
        reason=d["reason"],
        since=d["since"],
        passes=d["passes"],
        passes_needed=d["passes_needed"],
        failures=d["failures"],
        last_check=d["last_check"],
        next_check=d["next_check"],
        message=d["message"],
        output=d["output"],
    )


def _request_from_json(d: Mapping[str, Any]) -> DrainRequest:
    estimate = d.get("estimate")
    hook = d.get("hook")
    return DrainRequest(
        id=d["id"],
        state=d["state"],
        schedule=d["schedule"],
        reason=d["reason"],
        on_completion=d["on_completion"],
        deadline=d["deadline"],
        start=d["start"],
        requested_by=d["requested_by"],
        created_at=d["created_at"],
        expires_at=d["expires_at"],
        committed_at=d["committed_at"],
        deadline_at=d["deadline_at"],
        drained_at=d["drained_at"],
        ended_at=d["ended_at"],
        estimate=None if estimate is None else _estimate_from_json(estimate),
        hook=None if hook is None else _hook_from_json(hook),
    )


def _status_from_json(d: Mapping[str, Any]) -> DrainStatus:
    """The drain body: a request (in force) or ``{"state": "none", "last": ...}``, with
    ``accepting`` and ``health``."""
    health = None if d.get("health") is None else _health_from_json(d["health"])
    accepting = d.get("accepting")
    if d["state"] == "none":
        last = d.get("last")
        return DrainStatus(
            current=None,
            last=None if last is None else _request_from_json(last),
            accepting=accepting,
            health=health,
        )
    return DrainStatus(current=_request_from_json(d), accepting=accepting, health=health)


def _claim_from_json(d: Mapping[str, Any]) -> Claim:
    r, j = d["resources"], d["job"]
    return Claim(
        id=d["id"],
        slot=d["slot"],
        state=d["state"],
        activity=d["activity"],
        resources=ClaimResources(
            cpus=r["cpus"], memory=r["memory"], disk=r["disk"], gpus=r["gpus"]
        ),
        job=Job(
            job_id=j["job_id"],
            owner=j["owner"],
            max_job_retirement_time=j["max_job_retirement_time"],
            job_max_vacate_time=j["job_max_vacate_time"],
            kill_signal=j["kill_signal"],
            group=j.get("group"),
            started_at=j["started_at"],
            run=j["run"],
            suspended=j["suspended"],
            pid=j["pid"],
            argv=None if j["argv"] is None else tuple(j["argv"]),
        ),
        accepted_while_draining=d["accepted_while_draining"],
        evicted_at=d["evicted_at"],
        hard_kill_at=d["hard_kill_at"],
    )


def _decode(
    convert: Callable[[Mapping[str, Any]], _T], body: Any, what: str, *, peer: str = "agent"
) -> _T:
    """``convert(body)``, with a shape mismatch reported as :class:`BadResponse`."""
    try:
        return convert(body)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadResponse(f"the {peer}'s {what} reply lacks or mistypes {exc}") from exc


# ============================================================================================
# Where the agent is


def default_socket_path(env: Mapping[str, str] | None = None, uid: int | None = None) -> Path:
    """The Unix socket an agent started with the same environment listens on.

    The agent's own rule, key by key: ``socket`` from ``$NODEAGENT_SOCKET``, else from its
    configuration file (``$NODEAGENT_CONFIG``, else ``/etc/nodeagent/nodeagent.toml`` when
    it exists); otherwise ``nodeagent.sock`` in its runtime directory
    (``$NODEAGENT_RUNTIME_DIR``, the file's ``runtime_dir``, ``$RUNTIME_DIRECTORY``,
    ``/run/nodeagent`` for root, ``$XDG_RUNTIME_DIR/nodeagent``, ``/tmp/nodeagent-<uid>``).
    ``env`` defaults to ``os.environ``, ``uid`` to the effective uid.
    """
    return default_socket(os.environ if env is None else env, os.geteuid() if uid is None else uid)


# ============================================================================================
# The async client


def _drain_body(
    *,
    schedule: Schedule,
    reason: str,
    on_completion: OnCompletion,
    deadline: float | None,
    start: str | None,
    ttl: float | None = None,
    check: str | None = None,
    commit: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schedule": schedule,
        "reason": reason,
        "on_completion": on_completion,
        "commit": commit,
    }
    optional = {"deadline": deadline, "start": start, "ttl": ttl, "check": check}
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


class AgentClient:
    """An async (trio) client of one agent; use as ``async with AgentClient(...) as c:``.

    ``socket``: the agent's Unix socket (default :func:`default_socket_path`); the peer is
    ADMINISTRATOR and sends no token. ``url``: the agent's TCP address
    (``http://host:9621``, or ``https://``), with ``token`` — a JWT whose scope (READ or
    ADMINISTRATOR) decides what the calls may do. ``timeout`` bounds each request's
    connect, read and write, in seconds (callers bound whole operations with trio cancel
    scopes); at most ``max_concurrency`` requests are in flight at once, the rest queue.
    ``transport`` replaces the network, e.g. with :class:`httpx.MockTransport` in tests.

    The client may be entered again after it is left, never twice at once. Raises
    ValueError for contradictory arguments.
    """

    def __init__(
        self,
        *,
        socket: str | Path | None = None,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 30,
        max_concurrency: int = 8,
        verify: ssl.SSLContext | bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if socket is not None and (url is not None or transport is not None):
            raise ValueError("give the agent's socket, or its url (and/or a transport), not both")
        if token is not None and url is None and transport is None:
            raise ValueError("a token goes with a TCP url; the Unix socket needs none")
        if url is not None and httpx.URL(url).scheme not in ("http", "https"):
            raise ValueError(f"the agent's url must be http:// or https://, not {url!r}")
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self._socket: Path | None = None
        if url is None and transport is None:
            self._socket = Path(socket) if socket is not None else default_socket_path()
        self._url = url
        self._token = token
        self._timeout = timeout
        self._max_concurrency = max_concurrency
        self._verify = verify
        self._transport = transport
        self._http: httpx.AsyncClient | None = None
        self._limit = trio.Semaphore(max_concurrency)

    @property
    def where(self) -> str:
        """The agent's address, for messages: ``unix:<path>`` or the URL."""
        if self._socket is not None:
            return f"unix:{self._socket}"
        return self._url or _UDS_BASE_URL

    def __repr__(self) -> str:
        return f"AgentClient({self.where})"

    async def __aenter__(self) -> AgentClient:
        if self._http is not None:
            raise RuntimeError(f"{self!r} is already open")
        headers = {"User-Agent": f"nodeagent-client/{__version__}"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        transport = self._transport
        if transport is None and self._socket is not None:
            transport = httpx.AsyncHTTPTransport(uds=str(self._socket))
        self._http = httpx.AsyncClient(
            base_url=self._url or _UDS_BASE_URL,
            headers=headers,
            timeout=self._timeout,
            verify=self._verify,
            transport=transport,
            limits=httpx.Limits(max_connections=self._max_concurrency),
        )
        self._limit = trio.Semaphore(self._max_concurrency)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        http, self._http = self._http, None
        if http is not None:
            with trio.move_on_after(CANCEL_GRACE_S, shield=True):
                await http.aclose()

    # ------------------------------------------------------------------ transport

    async def _send(
        self, method: str, path: str, *, json: Any = None, params: Mapping[str, str] | None = None
    ) -> httpx.Response:
        """One request; an error reply raises its :class:`Refused`."""
        http = self._http
        if http is None:
            raise RuntimeError(f"use 'async with {self!r}' before calling it")
        async with self._limit:
            with _map_exceptions(self.where):
                response = await http.request(method, path, json=json, params=params)
        if response.is_success:
            return response
        raise _refusal(response)

    async def _json(self, method: str, path: str, *, json: Any = None) -> dict[str, Any]:
        response = await self._send(method, path, json=json)
        try:
            body = response.json()
        except ValueError as exc:
            raise BadResponse(
                f"the agent's reply to {method} {path} is not JSON", status=response.status_code
            ) from exc
        if not isinstance(body, dict):
            raise BadResponse(f"the agent's reply to {method} {path} is not a JSON object")
        return body

    # ------------------------------------------------------------------ reads

    async def healthz(self) -> Health:
        """Liveness; needs no token."""
        return _decode(
            lambda d: Health(status=d["status"], version=d["version"]),
            await self._json("GET", "/healthz"),
            "healthz",
        )

    async def ad(self) -> dict[str, Any]:
        """The ad as JSON: ``{"machine": {...}, "slots": [...]}``, HTCondor attribute names."""
        return await self._json("GET", "/v1/ad")

    async def ad_classad(self) -> str:
        """The machine ad and every slot ad in ClassAd long format (``condor_status -l``)."""
        response = await self._send("GET", "/v1/ad", params={"format": "classad"})
        return response.text

    async def drain(self) -> DrainStatus:
        """The drain request in force with its live estimate, or the last one that ended."""
        return _decode(_status_from_json, await self._json("GET", "/v1/drain"), "drain")

    async def claims(self) -> list[Claim]:
        """Every claim and its job."""
        body = await self._json("GET", "/v1/claims")
        return _decode(lambda d: [_claim_from_json(c) for c in d["claims"]], body, "claims")

    async def claim(self, claim_id: str) -> Claim:
        """One claim; :class:`NoSuchClaim` when there is none with this id."""
        body = await self._json("GET", f"/v1/claims/{_segment(claim_id)}")
        return _decode(_claim_from_json, body, "claim")

    # ------------------------------------------------------------------ drains

    def start_draining(
        self,
        schedule: Schedule = "graceful",
        *,
        reason: str = "",
        on_completion: OnCompletion = "none",
        deadline: float | None = None,
        start: str | None = None,
        ttl: float | None = None,
    ) -> DrainTransaction:
        """Phase 1 of the drain transaction, as an async context manager.

        Entering sends the request: the node keeps running but its state changes wait, so
        ``txn.estimate`` (completion, badput, blockers) stays true until the block ends.
        ``await txn.commit()`` starts the drain. Leaving the block without a commit, or
        with an exception, cancels the request. ``deadline``: seconds after commit after
        which what still runs is evicted as by *quick*; ``start``: a ClassAd START
        expression admitting jobs during a graceful drain; ``ttl``: seconds the agent keeps
        the transaction pending (default: its policy) before cancelling it by itself.
        Entering raises :class:`DrainInProgress` when a request is in force and
        :class:`InvalidRequest` for bad arguments; nothing changes then.
        """
        body = _drain_body(
            schedule=schedule,
            reason=reason,
            on_completion=on_completion,
            deadline=deadline,
            start=start,
            ttl=ttl,
        )
        return DrainTransaction(self, body)

    async def drain_now(
        self,
        schedule: Schedule = "graceful",
        *,
        reason: str = "",
        on_completion: OnCompletion = "none",
        deadline: float | None = None,
        start: str | None = None,
        check: str | None = None,
    ) -> DrainRequest:
        """A one-shot drain (phase 1 and commit in one request); returns it as committed.

        ``check``: a ClassAd expression that must be true on the machine ad at that
        instant (``condor_drain -check``), else :class:`CheckFailed` and nothing changes.
        """
        body = _drain_body(
            schedule=schedule,
            reason=reason,
            on_completion=on_completion,
            deadline=deadline,
            start=start,
            check=check,
            commit=True,
        )
        return _decode(
            _request_from_json, await self._json("POST", "/v1/drain", json=body), "drain"
        )

    async def cancel_draining(self, request_id: str | None = None) -> DrainRequest | None:
        """Cancel a pending or active drain request; returns it as ended.

        Without ``request_id``: whatever is in force, and ``None`` (a no-op) when nothing
        is. With one: :class:`NoSuchRequest` unless that request is in force.
        """
        if request_id is None:
            body = await self._json("DELETE", "/v1/drain")
        else:
            body = await self._json("POST", f"/v1/drain/{_segment(request_id)}/cancel")
        return _decode(_status_from_json, body, "cancel").last

    async def wait_drained(
        self, request_id: str | None = None, *, poll: float = 0.5
    ) -> DrainRequest | None:
        """Return once the drain is over: the node is drained, or the request has ended.

        Polls ``GET /v1/drain`` every ``poll`` seconds and returns the request as last
        seen: ``state`` ``drained`` (in force, the node empty), ``hook_failed`` (in force,
        its completion hook failed), ``completed`` (its completion action or hook ran; the
        node may still wait for its health check: :meth:`drain` says) or ``cancelled``;
        ``None`` when there has never been a request. A pending or draining request, and
        one whose hook is due or running, is waited for. With ``request_id``, that request
        is watched, and :class:`NoSuchRequest` is raised once it is neither in force nor
        the last one. Bound the wait with a trio cancel scope.
        """
        over = ("drained", "hook_failed")
        while True:
            status = await self.drain()
            current, last = status.current, status.last
            if request_id is None:
                if current is None:
                    return last
                if current.state in over:
                    return current
            elif current is not None and current.id == request_id:
                if current.state in over:
                    return current
            elif last is not None and last.id == request_id:
                return last
            else:
                raise NoSuchRequest(
                    f"drain request {request_id!r} is neither in force nor the last one"
                )
            await trio.sleep(poll)

    # ------------------------------------------------------------------ claims

    async def create_claim(
        self,
        command: Sequence[str] | None = None,
        *,
        pid: int | None = None,
        cpus: int = 1,
        memory: int = 0,
        disk: int = 0,
        gpus: int = 0,
        max_job_retirement_time: int | None = None,
        job_max_vacate_time: int | None = None,
        owner: str | None = None,
        job_id: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        kill_signal: str | None = None,
        group: str | None = None,
    ) -> Claim:
        """A new dynamic slot running ``command`` (an argv list) or adopting ``pid``.

        Waits while a drain transaction is pending. Raises :class:`NotAccepting` when
        the machine's Start is false (draining), :class:`ResourcesInsufficient` when the
        job does not fit and :class:`InvalidRequest` for bad arguments (both or neither
        of ``command`` and ``pid``, a ``group`` that is not a job group's name, …); no
        claim exists then. ``group`` names the job group the job is an instance of
        (published as ``JobGroup`` in its slot ad).
        """
        if isinstance(command, str):
            raise TypeError("command is an argv list, not a string")
        fields: dict[str, Any] = {
            "command": None if command is None else list(command),
            "pid": pid,
            "max_job_retirement_time": max_job_retirement_time,
            "job_max_vacate_time": job_max_vacate_time,
            "owner": owner,
            "job_id": job_id,
            "env": None if env is None else dict(env),
            "cwd": cwd,
            "user": user,
            "kill_signal": kill_signal,
            "group": group,
        }
        body = {"cpus": cpus, "memory": memory, "disk": disk, "gpus": gpus}
        body.update({k: v for k, v in fields.items() if v is not None})
        return _decode(_claim_from_json, await self._json("POST", "/v1/claims", json=body), "claim")

    async def release(self, claim_id: str) -> Claim:
        """Vacate the claim: soft-kill its job now, hard-kill it after its vacate time."""
        body = await self._json("DELETE", f"/v1/claims/{_segment(claim_id)}")
        return _decode(_claim_from_json, body, "release")

    async def suspend(self, claim_id: str) -> Claim:
        """SIGSTOP the claim's job; its run time stops accruing."""
        body = await self._json("POST", f"/v1/claims/{_segment(claim_id)}/suspend")
        return _decode(_claim_from_json, body, "suspend")

    async def continue_(self, claim_id: str) -> Claim:
        """SIGCONT the claim's job."""
        body = await self._json("POST", f"/v1/claims/{_segment(claim_id)}/continue")
        return _decode(_claim_from_json, body, "continue")


def _segment(value: str) -> str:
    """``value`` as one path segment (ids are decimal strings; refuse anything else odd)."""
    if not value or "/" in value or value in (".", ".."):
        raise ValueError(f"not an id: {value!r}")
    return value


class DrainTransaction:
    """A pending drain request, from :meth:`AgentClient.start_draining`.

    ``async with`` sends phase 1; inside, :attr:`request_id`, :attr:`estimate` (with its
    blockers) and :attr:`expires_at` describe it; :meth:`commit` starts the drain and
    :meth:`cancel` drops it. Leaving the block unresolved — no commit or cancel, or an
    exception (including a trio cancellation) — cancels the request, shielded and bounded
    by :data:`CANCEL_GRACE_S`. When that cancel fails, the agent still cancels the
    request by itself at ``expires_at``: the failure is raised when the block ended
    normally, and added as a note to the block's exception otherwise.
    """

    def __init__(self, client: AgentClient, body: dict[str, Any]) -> None:
        self._client = client
        self._body = body
        self._request: DrainRequest | None = None
        self._estimate: Estimate | None = None
        self._resolved = False

    @property
    def request(self) -> DrainRequest:
        """The request as the agent last described it (pending, then committed or ended)."""
        if self._request is None:
            raise RuntimeError("the drain transaction has not started: use 'async with'")
        return self._request

    @property
    def request_id(self) -> str:
        return self.request.id

    @property
    def estimate(self) -> Estimate:
        """The estimate of phase 1, or of the commit once committed."""
        if self._estimate is None:
            raise RuntimeError("the drain transaction has not started: use 'async with'")
        return self._estimate

    @property
    def expires_at(self) -> float | None:
        """When the agent cancels the pending request by itself (epoch seconds)."""
        return self.request.expires_at

    def _update(self, request: DrainRequest) -> None:
        self._request = request
        if request.estimate is not None:
            self._estimate = request.estimate

    async def __aenter__(self) -> DrainTransaction:
        if self._request is not None:
            raise RuntimeError("a drain transaction is entered once")
        body = await self._client._json("POST", "/v1/drain", json=self._body)
        self._update(_decode(_request_from_json, body, "drain"))
        if self._estimate is None:
            raise BadResponse("the agent's phase-1 reply carries no estimate")
        return self

    async def commit(self) -> Estimate:
        """Phase 2: the drain starts now; returns the estimate at commit time.

        Raises :class:`TransactionExpired` when the request passed ``expires_at`` (the
        agent has cancelled it), :class:`NoSuchRequest` when it was cancelled otherwise,
        :class:`NotPending` when it is already committed.
        """
        path = f"/v1/drain/{_segment(self.request_id)}/commit"
        try:
            body = await self._client._json("POST", path)
        except TransactionExpired:
            self._resolved = True
            raise
        self._update(_decode(_request_from_json, body, "commit"))
        self._resolved = True
        return self.estimate

    async def cancel(self) -> None:
        """Cancel the request (pending, or committed and draining): the node resumes."""
        self._resolved = True
        ended = await self._client.cancel_draining(self.request_id)
        if ended is not None:
            self._update(ended)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._resolved or self._request is None:
            return
        failure: AgentError | None = None
        with trio.move_on_after(CANCEL_GRACE_S, shield=True) as scope:
            try:
                await self.cancel()
            except NoSuchRequest:
                pass  # already gone: expired, or cancelled by someone else
            except AgentError as err:
                failure = err
        if scope.cancelled_caught:
            failure = Unreachable(
                f"cancelling drain request {self.request_id} at {self._client.where} took "
                f"over {CANCEL_GRACE_S:g} s",
                code="client.timeout",
            )
        if failure is None:
            return
        note = f"the agent cancels it by itself at its expiry ({self.expires_at})"
        if exc is None:
            failure.add_note(note)
            raise failure
        exc.add_note(f"cancelling drain request {self.request_id} failed too: {failure}; {note}")


# ============================================================================================
# The synchronous wrapper


class SyncAgentClient:
    """:class:`AgentClient` for scripts: the same calls, blocking, no event loop needed.

    Each call runs the async method under its own ``trio.run`` with a fresh HTTP
    connection, so it must not be made from inside a trio (or other async) program, nor
    from two threads at once. A drain transaction spans several calls and stays pending
    on the agent between them::

        agent = SyncAgentClient()
        with agent.start_draining("graceful", reason="kernel update") as txn:
            print(txn.estimate.completion)
            txn.commit()

    Arguments and errors are those of :class:`AgentClient`.
    """

    def __init__(
        self,
        *,
        socket: str | Path | None = None,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 30,
        verify: ssl.SSLContext | bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._client = AgentClient(
            socket=socket,
            url=url,
            token=token,
            timeout=timeout,
            max_concurrency=1,
            verify=verify,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"SyncAgentClient({self._client.where})"

    def _run(self, call: Callable[[AgentClient], Awaitable[_T]]) -> _T:
        async def main() -> _T:
            async with self._client as client:
                return await call(client)

        return trio.run(main)

    def healthz(self) -> Health:
        return self._run(lambda c: c.healthz())

    def ad(self) -> dict[str, Any]:
        return self._run(lambda c: c.ad())

    def ad_classad(self) -> str:
        return self._run(lambda c: c.ad_classad())

    def drain(self) -> DrainStatus:
        return self._run(lambda c: c.drain())

    def claims(self) -> list[Claim]:
        return self._run(lambda c: c.claims())

    def claim(self, claim_id: str) -> Claim:
        return self._run(lambda c: c.claim(claim_id))

    def start_draining(
        self,
        schedule: Schedule = "graceful",
        *,
        reason: str = "",
        on_completion: OnCompletion = "none",
        deadline: float | None = None,
        start: str | None = None,
        ttl: float | None = None,
    ) -> SyncDrainTransaction:
        """:meth:`AgentClient.start_draining` as a (plain) context manager."""
        txn = self._client.start_draining(
            schedule,
            reason=reason,
            on_completion=on_completion,
            deadline=deadline,
            start=start,
            ttl=ttl,
        )
        return SyncDrainTransaction(self, txn)

    def drain_now(
        self,
        schedule: Schedule = "graceful",
        *,
        reason: str = "",
        on_completion: OnCompletion = "none",
        deadline: float | None = None,
        start: str | None = None,
        check: str | None = None,
    ) -> DrainRequest:
        return self._run(
            lambda c: c.drain_now(
                schedule,
                reason=reason,
                on_completion=on_completion,
                deadline=deadline,
                start=start,
                check=check,
            )
        )

    def cancel_draining(self, request_id: str | None = None) -> DrainRequest | None:
        return self._run(lambda c: c.cancel_draining(request_id))

    def wait_drained(
        self, request_id: str | None = None, *, poll: float = 0.5, timeout: float | None = None
    ) -> DrainRequest | None:
        """:meth:`AgentClient.wait_drained`; ``timeout`` (seconds) raises TimeoutError."""

        async def bounded(client: AgentClient) -> DrainRequest | None:
            with trio.fail_after(math.inf if timeout is None else timeout):
                return await client.wait_drained(request_id, poll=poll)

        try:
            return self._run(bounded)
        except trio.TooSlowError:
            raise TimeoutError(f"the node was not drained within {timeout:g} s") from None

    def create_claim(
        self,
        command: Sequence[str] | None = None,
        *,
        pid: int | None = None,
        cpus: int = 1,
        memory: int = 0,
        disk: int = 0,
        gpus: int = 0,
        max_job_retirement_time: int | None = None,
        job_max_vacate_time: int | None = None,
        owner: str | None = None,
        job_id: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        kill_signal: str | None = None,
        group: str | None = None,
    ) -> Claim:
        return self._run(
            lambda c: c.create_claim(
                command,
                pid=pid,
                cpus=cpus,
                memory=memory,
                disk=disk,
                gpus=gpus,
                max_job_retirement_time=max_job_retirement_time,
                job_max_vacate_time=job_max_vacate_time,
                owner=owner,
                job_id=job_id,
                env=env,
                cwd=cwd,
                user=user,
                kill_signal=kill_signal,
                group=group,
            )
        )

    def release(self, claim_id: str) -> Claim:
        return self._run(lambda c: c.release(claim_id))

    def suspend(self, claim_id: str) -> Claim:
        return self._run(lambda c: c.suspend(claim_id))

    def continue_(self, claim_id: str) -> Claim:
        return self._run(lambda c: c.continue_(claim_id))


class SyncDrainTransaction:
    """:class:`DrainTransaction` for :class:`SyncAgentClient`: the same contract, blocking.

    Entering, :meth:`commit`, :meth:`cancel` and leaving each run the async
    transaction's step under its own ``trio.run``; the request stays pending on the agent
    in between (up to its ``expires_at``).
    """

    def __init__(self, client: SyncAgentClient, txn: DrainTransaction) -> None:
        self._client = client
        self._txn = txn

    @property
    def request(self) -> DrainRequest:
        return self._txn.request

    @property
    def request_id(self) -> str:
        return self._txn.request_id

    @property
    def estimate(self) -> Estimate:
        return self._txn.estimate

    @property
    def expires_at(self) -> float | None:
        return self._txn.expires_at

    def __enter__(self) -> SyncDrainTransaction:
        self._client._run(lambda _: self._txn.__aenter__())
        return self

    def commit(self) -> Estimate:
        return self._client._run(lambda _: self._txn.commit())

    def cancel(self) -> None:
        self._client._run(lambda _: self._txn.cancel())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._client._run(lambda _: self._txn.__aexit__(exc_type, exc, tb))


# ============================================================================================
# The masters' client

MAX_REDIRECTS = 3
"""How many redirects (307, 308) in a row :class:`MasterClient` follows; one more is
:class:`RedirectNotFollowed` ``client.too_many_redirects``."""

_MASTER_BASE_URL = "http://nodeagent-master"
_REDIRECTS = (307, 308)
_MASTER_REFUSALS: dict[str, type[Refused]] = {**_REFUSALS, NoLeader.code: NoLeader}
"""The agent's codes and the master's own; the agent's client keeps :data:`_REFUSALS`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Leadership:
    """``GET /v1/leader``: who leads (``leader``, its URL; ``None`` while no master does),
    the master asked (``url``, the JSON's ``self``) and whether it leads, its ``store``
    (``sqlite``: the one master, which always leads; ``etcd``: several), the lease's TTL
    (seconds, ``None`` with SQLite), how long it has led (seconds, ``None`` when it does
    not lead or there is no election) and how many terms it has led."""

    leader: str | None
    url: str
    leading: bool
    store: str
    lease_ttl: float | None
    leading_for: float | None
    terms: int


def _leadership_from_json(d: Mapping[str, Any]) -> Leadership:
    leading = d["leading"]
    if not isinstance(leading, bool):
        raise TypeError("'leading' is not a boolean")
    return Leadership(
        leader=d["leader"],
        url=d["self"],
        leading=leading,
        store=d["store"],
        lease_ttl=d["lease_ttl"],
        leading_for=d["leading_for"],
        terms=int(d["terms"]),
    )


def _retry_after(response: httpx.Response) -> float:
    """The reply's ``Retry-After`` in seconds (a number of seconds; 1 when absent or not
    a finite non-negative number)."""
    try:
        value = float(response.headers.get("retry-after", ""))
    except ValueError:
        return 1.0
    return value if math.isfinite(value) and value >= 0 else 1.0


def _master_refusal(response: httpx.Response, *, mesos: bool) -> Refused | OutcomeUnknown:
    """The exception for a master's error reply: its JSON error body by code (the agent's
    codes and :class:`NoLeader`, with ``Retry-After``), or, from a Mesos endpoint
    (``mesos``), its plain-text 400 as :class:`InvalidMaintenance` and its plain-text 503
    (the state could not be written) as a :class:`Refused` ``store.error``; anything else
    by its status alone, as :func:`_refusal` does. ``store.outcome_unknown`` (from any
    endpoint) is :class:`OutcomeUnknown`, not a refusal."""
    status = response.status_code
    fields = _error_fields(response)
    if fields is None:
        plain = response.headers.get("content-type", "").startswith("text/plain")
        text = response.text.strip()
        if mesos and plain and status == 400:
            return InvalidMaintenance(text or "invalid request", status=400)
        if mesos and plain and status == 503:
            return Refused(text or "the state could not be written", code="store.error", status=503)
        return _refusal(response, peer="master")
    code, message, condor_code = fields
    if code == OutcomeUnknown.code:
        return OutcomeUnknown(message, status=status)
    error = _MASTER_REFUSALS.get(code, Refused)(
        message, code=code, status=status, condor_code=condor_code
    )
    if isinstance(error, NoLeader):
        error.retry_after = _retry_after(response)
    return error


def _redirect_location(response: httpx.Response) -> str | None:
    """Where a ``307``/``308`` sends the request: its ``Location`` when that is an absolute
    ``http(s)://`` URL with a host and no user info; ``None`` otherwise (the reply then
    stands as it is, its error body saying why)."""
    if response.status_code not in _REDIRECTS:
        return None
    location = response.headers.get("location")
    if not location:
        return None
    try:
        url = httpx.URL(location)
    except (httpx.InvalidURL, ValueError):
        return None
    if url.scheme not in ("http", "https") or not url.host or url.userinfo:
        return None
    return str(url)


def _origin(url: str) -> tuple[str, str, int] | None:
    """``url``'s scheme, host and port (the scheme's default when none is written);
    ``None`` for anything that is no ``http(s)://`` URL (a Unix socket's ``unix:…``)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError):
        return None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.scheme, parsed.host.lower(), port


def _another_may_answer(error: Unreachable | Refused, *, read: bool) -> bool:
    """Whether the next master may be asked where one failed. A read: after no reply or a
    5xx. A write: only when it surely changed nothing: the connection could not be made
    (nothing was sent), or a ``503`` (no leader, or a state that could not be written)."""
    if isinstance(error, Unreachable):
        return read or isinstance(error.__cause__, httpx.ConnectError | httpx.ConnectTimeout)
    status = error.status or 0
    return status >= 500 if read else status == 503


def _restated(last: AgentError, message: str) -> AgentError:
    """``last``'s class and fields with ``message`` (naming every master passed over)."""
    again = type(last)(message, code=last.code, status=last.status, condor_code=last.condor_code)
    if isinstance(last, NoLeader) and isinstance(again, NoLeader):
        again.retry_after = last.retry_after
    return again


def _group_path(group: str) -> str:
    """An SLA job group's name as the path it is in ``/v1/sla/policies/{group}`` (it may
    hold ``/``; each segment quoted); refuses empty and dot segments."""
    segments = group.split("/")
    if not group or any(s in ("", ".", "..") for s in segments):
        raise ValueError(f"not a job group's name: {group!r}")
    return "/".join(quote(s, safe="") for s in segments)


def _machine_ids(machine_ids: Iterable[Mapping[str, str]]) -> list[dict[str, str]]:
    if isinstance(machine_ids, Mapping):
        raise TypeError("machine_ids is a list of {'hostname', 'ip'} mappings, not one")
    return [dict(m) for m in machine_ids]


class MasterClient:
    """An async (trio) client of the masters; use as ``async with MasterClient(...) as m:``.

    ``socket``: a master's Unix socket (default: where a master started with the same
    environment listens, :func:`nodeagent._paths.default_master_socket`); the peer is
    ADMINISTRATOR. ``url``: a master's TCP address (``http://host:9622`` or ``https://``),
    or ``urls``: several masters sharing one state, in the order to ask them; with
    ``token``, a JWT whose scope (READ or ADMINISTRATOR) decides what the calls may do.
    ``timeout``, ``max_concurrency``, ``verify`` and ``transport`` are as for
    :class:`AgentClient` (a ``transport`` without a URL stands for the Unix socket).

    **Several masters.** A request goes to the first master that answers: the next one is
    asked after no reply or a 5xx for a read, and, for a write, only when the first surely
    changed nothing (the connection could not be made, or a ``503`` refusal). When every
    master failed so, the last one's error is raised, naming each.

    **Redirects.** A master that does not lead answers a write with ``307`` (or ``308``)
    and the leader's URL in ``Location``: the same method, body and token are sent there,
    at most :data:`MAX_REDIRECTS` times in a row, and only to a master the client was given
    (the scheme, host and port of one of ``url`` or ``urls``) or to the origin of the master
    that redirected. A redirect the client does not follow raises
    :class:`RedirectNotFollowed` before anything is sent: more than :data:`MAX_REDIRECTS` in
    a row, to any other address (from a Unix socket: to any TCP address), from ``https://``
    to ``http://``, or to TCP without a token (``token`` goes to TCP masters only).

    **No leader.** A ``503`` ``master.no_leader`` raises :class:`NoLeader`, which changed
    nothing; with ``retry_no_leader`` (seconds, default 0: no retry) the request is sent
    again after each reply's ``Retry-After`` until it is answered otherwise or that many
    seconds have passed.

    **Outcome unknown.** A ``503`` ``store.outcome_unknown`` raises :class:`OutcomeUnknown`
    at once (no other master is asked, nothing is sent again): the write may have been
    applied. Read the state back, and send the write again only if it is not there.

    The client may be entered again after it is left, never twice at once. Raises
    ValueError for contradictory arguments.
    """

    def __init__(
        self,
        *,
        socket: str | Path | None = None,
        url: str | None = None,
        urls: Sequence[str] = (),
        token: str | None = None,
        timeout: float = 30,
        max_concurrency: int = 8,
        verify: ssl.SSLContext | bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_no_leader: float = 0,
    ) -> None:
        if isinstance(urls, str):
            raise TypeError("urls is a list of URLs; give one master's as url=")
        named = [socket is not None, url is not None, bool(urls)]
        if sum(named) > 1:
            raise ValueError("give a master's socket, its url, or several urls: one of them")
        if socket is not None and transport is not None:
            raise ValueError("give the master's socket or a transport, not both")
        bases = (url,) if url is not None else tuple(urls)
        for base in bases:
            if httpx.URL(base).scheme not in ("http", "https"):
                raise ValueError(f"a master's url must be http:// or https://, not {base!r}")
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if not (retry_no_leader >= 0 and math.isfinite(retry_no_leader)):
            raise ValueError(f"retry_no_leader must be seconds (>= 0), not {retry_no_leader!r}")
        self._socket: Path | None = None
        if not bases and transport is None:
            self._socket = (
                Path(socket)
                if socket is not None
                else default_master_socket(os.environ, os.geteuid())
            )
        self._bases: tuple[str | None, ...] = tuple(b.rstrip("/") for b in bases) or (None,)
        #: Where a redirect may send the token: the masters given, by scheme, host and port.
        self._origins = frozenset(_origin(b) for b in bases)
        self._token = token
        self._timeout = timeout
        self._max_concurrency = max_concurrency
        self._verify = verify
        self._transport = transport
        self._retry_no_leader = float(retry_no_leader)
        self._local: httpx.AsyncClient | None = None
        self._remote: httpx.AsyncClient | None = None
        self._limit = trio.Semaphore(max_concurrency)

    @property
    def where(self) -> str:
        """The masters' addresses, for messages: ``unix:<path>`` or the URLs."""
        return ", ".join(self._describe(base) for base in self._bases)

    def _describe(self, base: str | None) -> str:
        if base is not None:
            return base
        return f"unix:{self._socket}" if self._socket is not None else _MASTER_BASE_URL

    def __repr__(self) -> str:
        return f"MasterClient({self.where})"

    async def __aenter__(self) -> MasterClient:
        if self._remote is not None:
            raise RuntimeError(f"{self!r} is already open")
        headers = {"User-Agent": f"nodeagent-client/{__version__}"}
        limits = httpx.Limits(max_connections=self._max_concurrency)
        if self._bases == (None,):
            local = self._transport
            if local is None:
                local = httpx.AsyncHTTPTransport(uds=str(self._socket))
            self._local = httpx.AsyncClient(
                base_url=_MASTER_BASE_URL,
                headers=headers,
                timeout=self._timeout,
                transport=local,
                limits=limits,
            )
        remote_headers = dict(headers)
        if self._token is not None:
            remote_headers["Authorization"] = f"Bearer {self._token}"
        self._remote = httpx.AsyncClient(
            headers=remote_headers,
            timeout=self._timeout,
            verify=self._verify,
            transport=self._transport,
            limits=limits,
        )
        self._limit = trio.Semaphore(self._max_concurrency)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        local, remote, self._local, self._remote = self._local, self._remote, None, None
        with trio.move_on_after(CANCEL_GRACE_S, shield=True):
            for http in (local, remote):
                if http is not None:
                    await http.aclose()

    # ------------------------------------------------------------------ transport

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        mesos: bool = False,
    ) -> httpx.Response:
        """One request (``body`` sent as JSON) to the first master that answers, its
        redirects followed; a success reply, or the error it makes. :class:`NoLeader` is
        retried for ``retry_no_leader`` seconds."""
        if self._remote is None:
            raise RuntimeError(f"use 'async with {self!r}' before calling it")
        target = path if not params else f"{path}?{httpx.QueryParams(params)}"
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        deadline = trio.current_time() + self._retry_no_leader
        while True:
            try:
                return await self._first_answer(method, target, payload, mesos)
            except NoLeader as exc:
                left = deadline - trio.current_time()
                if left <= 0:
                    raise
                await trio.sleep(min(exc.retry_after, left))

    async def _first_answer(
        self, method: str, target: str, payload: bytes | None, mesos: bool
    ) -> httpx.Response:
        """:meth:`_follow` from each master in turn, until one answers (the class
        docstring says when the next one is asked)."""
        passed: list[str] = []
        last: Unreachable | Refused | None = None
        for base in self._bases:
            try:
                return await self._follow(base, method, target, payload, mesos)
            except (Unreachable, Refused) as exc:
                if not _another_may_answer(exc, read=method == "GET"):
                    raise
                passed.append(f"{self._describe(base)}: {exc.message}")
                last = exc
        assert last is not None  # there is at least one master
        if len(passed) == 1:
            raise last
        raise _restated(last, "no master answered: " + "; ".join(passed)) from last

    async def _follow(
        self, base: str | None, method: str, target: str, payload: bytes | None, mesos: bool
    ) -> httpx.Response:
        """The request to ``base`` (``None``: the Unix socket), then to each leader it is
        redirected to (see the class docstring); the success reply, or its error."""
        url, local = (target, True) if base is None else (base + target, False)
        hops: list[str] = []
        while True:
            here = self._describe(None) if local else url
            response = await self._exchange(local, method, url, payload, here)
            location = _redirect_location(response)
            if location is None:
                if response.is_success:
                    return response
                raise _master_refusal(response, mesos=mesos)
            hops.append(location)
            self._check_hop(location, hops, method=method, target=target, base=base, here=here)
            url, local = location, False

    def _check_hop(
        self,
        location: str,
        hops: list[str],
        *,
        method: str,
        target: str,
        base: str | None,
        here: str,
    ) -> None:
        """Raise :class:`RedirectNotFollowed` when the redirect from ``here`` to
        ``location`` must not be followed."""
        refused: RedirectNotFollowed | None = None
        origin = _origin(location)
        if len(hops) > MAX_REDIRECTS:
            refused = RedirectNotFollowed(
                f"{method} {target}: redirected {len(hops)} times in a row "
                f"({self._describe(base)} → {' → '.join(hops)}); the masters do not agree on "
                "who leads: try again in a moment",
                code="client.too_many_redirects",
            )
        elif origin not in self._origins and origin != _origin(here):
            given = ", ".join(b for b in self._bases if b is not None) or "none"
            refused = RedirectNotFollowed(
                f"the master at {here} redirected to {location}, which is not one of the "
                f"masters this client was given ({given}): the token is sent to no other "
                "address; name every master with urls=[...]",
                code="client.redirect_refused",
            )
        elif self._token is None:
            refused = RedirectNotFollowed(
                f"the master at {here} sent this request to the leader at {location}, which "
                "needs a token over TCP: give the client a token (token=...), or send the "
                "request to the leader's own socket",
                code="client.token_required",
            )
        elif here.startswith("https://") and not location.startswith("https://"):
            refused = RedirectNotFollowed(
                f"the master at {here} redirected to {location} without TLS: the token is not "
                "sent in clear; give the leader's https:// URL",
                code="client.insecure_redirect",
            )
        if refused is not None:
            refused.location = location
            raise refused

    async def _exchange(
        self, local: bool, method: str, url: str, payload: bytes | None, here: str
    ) -> httpx.Response:
        http = self._local if local else self._remote
        if http is None:
            raise RuntimeError(f"use 'async with {self!r}' before calling it")
        headers = None if payload is None else {"Content-Type": "application/json"}
        async with self._limit:
            with _map_exceptions(here, peer="master"):
                return await http.request(method, url, content=payload, headers=headers)

    async def _object(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        mesos: bool = False,
    ) -> dict[str, Any]:
        response = await self._call(method, path, body=body, params=params, mesos=mesos)
        try:
            document = response.json()
        except ValueError as exc:
            raise BadResponse(
                f"the master's reply to {method} {path} is not JSON", status=response.status_code
            ) from exc
        if not isinstance(document, dict):
            raise BadResponse(f"the master's reply to {method} {path} is not a JSON object")
        return document

    async def _listed(
        self, path: str, key: str, params: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        document = await self._object("GET", path, params=params)
        items = document.get(key)
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise BadResponse(f"the master's reply to GET {path} has no {key!r} list of objects")
        return items

    # ------------------------------------------------------------------ leadership

    async def leader(self) -> Leadership:
        """Who leads, as the master asked knows it (``GET /v1/leader``)."""
        body = await self._object("GET", "/v1/leader")
        return _decode(_leadership_from_json, body, "leader", peer="master")

    # ------------------------------------------------------------------ Mesos maintenance

    async def schedule(self) -> dict[str, Any]:
        """The maintenance schedule, Mesos JSON (``{}`` when empty)."""
        return await self._object("GET", "/maintenance/schedule", mesos=True)

    async def set_schedule(self, schedule: Mapping[str, Any]) -> None:
        """Replace the schedule (Mesos JSON: ``{"windows": [...]}``); the leader applies it.
        Raises :class:`InvalidMaintenance` with Mesos's message when it is refused."""
        await self._call("POST", "/maintenance/schedule", body=dict(schedule), mesos=True)

    async def clear_schedule(self) -> None:
        """Replace the schedule with an empty one (a DOWN machine cannot be dropped:
        :class:`InvalidMaintenance`)."""
        await self.set_schedule({})

    async def status(self) -> dict[str, Any]:
        """``GET /maintenance/status``: ``{"draining_machines": [...], "down_machines":
        [...]}`` (Mesos JSON)."""
        return await self._object("GET", "/maintenance/status", mesos=True)

    async def down(self, machine_ids: Iterable[Mapping[str, str]]) -> None:
        """DRAINING machines (``{"hostname", "ip"}`` each) go DOWN, all or none."""
        await self._call("POST", "/machine/down", body=_machine_ids(machine_ids), mesos=True)

    async def up(self, machine_ids: Iterable[Mapping[str, str]]) -> dict[str, Any]:
        """DOWN machines go UP and leave the schedule, all or none; returns the master's
        report ``{"machines": [...]}``: whether each node is back in service."""
        body = _machine_ids(machine_ids)
        return await self._object("POST", "/machine/up", body=body, mesos=True)

    # ------------------------------------------------------------------ the plan, ads

    async def plan(
        self, *, late: bool = False, limit: int | None = None, blockers: bool = True
    ) -> dict[str, Any]:
        """The maintenance plan (``GET /v1/maintenance/plan``): ``late``: only the rows
        late by their promises or to be escalated; ``limit``: at most that many rows;
        ``blockers=False``: rows without their blockers. The totals count every machine."""
        params = {"late": str(late).lower(), "blockers": str(blockers).lower()}
        if limit is not None:
            params["limit"] = str(limit)
        return await self._object("GET", "/v1/maintenance/plan", params=params)

    async def ads(
        self,
        *,
        constraint: str | None = None,
        projection: str | Sequence[str] | None = None,
        slots: bool = False,
    ) -> list[dict[str, Any]]:
        """The node ads (``slots=True``: the slot ads) matching a ClassAd ``constraint``,
        with only the attributes of ``projection`` (names, or one comma-separated string)."""
        params: dict[str, str] = {}
        if constraint is not None:
            params["constraint"] = constraint
        if projection is not None:
            names = projection if isinstance(projection, str) else ",".join(projection)
            params["projection"] = names
        if slots:
            params["slots"] = "true"
        return await self._listed("/v1/ads", "ads", params)

    # ------------------------------------------------------------------ operations

    async def start_operation(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Start a rolling maintenance operation (``spec``: ``hosts`` or ``constraint``,
        ``hook``, ``grouping``, ``batches``, …); its progress document."""
        return await self._object("POST", "/v1/maintenance/operations", body=dict(spec))

    async def operations(self) -> list[dict[str, Any]]:
        """Every operation's progress document, newest first."""
        return await self._listed("/v1/maintenance/operations", "operations")

    async def operation(self, operation_id: str) -> dict[str, Any]:
        """One operation's progress document (``operation.no_such_operation``: 404)."""
        path = f"/v1/maintenance/operations/{_segment(operation_id)}"
        return await self._object("GET", path)

    async def _operation_change(self, operation_id: str, verb: str) -> dict[str, Any]:
        path = f"/v1/maintenance/operations/{_segment(operation_id)}/{verb}"
        return await self._object("POST", path)

    async def pause_operation(self, operation_id: str) -> dict[str, Any]:
        """Start no further batch or drain (``operation.not_running``: 409)."""
        return await self._operation_change(operation_id, "pause")

    async def resume_operation(self, operation_id: str) -> dict[str, Any]:
        """Go on with a paused operation (``operation.not_paused``: 409)."""
        return await self._operation_change(operation_id, "resume")

    async def cancel_operation(self, operation_id: str) -> dict[str, Any]:
        """Cancel what is not under way (``operation.finished``: 409)."""
        return await self._operation_change(operation_id, "cancel")

    # ------------------------------------------------------------------ SLA policies

    async def sla_policies(self) -> list[dict[str, Any]]:
        """Every SLA policy in force, by group, each with its ``source``."""
        return await self._listed("/v1/sla/policies", "policies")

    async def set_sla_policy(self, group: str, policy: Mapping[str, Any]) -> dict[str, Any]:
        """Set ``group``'s policy (``{"kind": ...}``); the policy as stored
        (``sla.invalid_policy``: 422)."""
        path = f"/v1/sla/policies/{_group_path(group)}"
        return await self._object("PUT", path, body=dict(policy))

    async def delete_sla_policy(self, group: str) -> dict[str, Any]:
        """Remove the API's policy of ``group``: ``{"group", "in_force"}``
        (``sla.no_such_policy``: 404)."""
        return await self._object("DELETE", f"/v1/sla/policies/{_group_path(group)}")


class SyncMasterClient:
    """:class:`MasterClient` for scripts: the same calls, blocking, no event loop needed.

    Each call runs the async method under its own ``trio.run`` with fresh connections, so
    it must not be made from inside a trio (or other async) program, nor from two threads
    at once. Arguments and errors are those of :class:`MasterClient`.
    """

    def __init__(
        self,
        *,
        socket: str | Path | None = None,
        url: str | None = None,
        urls: Sequence[str] = (),
        token: str | None = None,
        timeout: float = 30,
        verify: ssl.SSLContext | bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_no_leader: float = 0,
    ) -> None:
        self._client = MasterClient(
            socket=socket,
            url=url,
            urls=urls,
            token=token,
            timeout=timeout,
            max_concurrency=1,
            verify=verify,
            transport=transport,
            retry_no_leader=retry_no_leader,
        )

    def __repr__(self) -> str:
        return f"SyncMasterClient({self._client.where})"

    def _run(self, call: Callable[[MasterClient], Awaitable[_T]]) -> _T:
        async def main() -> _T:
            async with self._client as client:
                return await call(client)

        return trio.run(main)

    def leader(self) -> Leadership:
        return self._run(lambda c: c.leader())

    def schedule(self) -> dict[str, Any]:
        return self._run(lambda c: c.schedule())

    def set_schedule(self, schedule: Mapping[str, Any]) -> None:
        self._run(lambda c: c.set_schedule(schedule))

    def clear_schedule(self) -> None:
        self._run(lambda c: c.clear_schedule())

    def status(self) -> dict[str, Any]:
        return self._run(lambda c: c.status())

    def down(self, machine_ids: Iterable[Mapping[str, str]]) -> None:
        self._run(lambda c: c.down(machine_ids))

    def up(self, machine_ids: Iterable[Mapping[str, str]]) -> dict[str, Any]:
        return self._run(lambda c: c.up(machine_ids))

    def plan(
        self, *, late: bool = False, limit: int | None = None, blockers: bool = True
    ) -> dict[str, Any]:
        return self._run(lambda c: c.plan(late=late, limit=limit, blockers=blockers))

    def ads(
        self,
        *,
        constraint: str | None = None,
        projection: str | Sequence[str] | None = None,
        slots: bool = False,
    ) -> list[dict[str, Any]]:
        return self._run(lambda c: c.ads(constraint=constraint, projection=projection, slots=slots))

    def start_operation(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return self._run(lambda c: c.start_operation(spec))

    def operations(self) -> list[dict[str, Any]]:
        return self._run(lambda c: c.operations())

    def operation(self, operation_id: str) -> dict[str, Any]:
        return self._run(lambda c: c.operation(operation_id))

    def pause_operation(self, operation_id: str) -> dict[str, Any]:
        return self._run(lambda c: c.pause_operation(operation_id))

    def resume_operation(self, operation_id: str) -> dict[str, Any]:
        return self._run(lambda c: c.resume_operation(operation_id))

    def cancel_operation(self, operation_id: str) -> dict[str, Any]:
        return self._run(lambda c: c.cancel_operation(operation_id))

    def sla_policies(self) -> list[dict[str, Any]]:
        return self._run(lambda c: c.sla_policies())

    def set_sla_policy(self, group: str, policy: Mapping[str, Any]) -> dict[str, Any]:
        return self._run(lambda c: c.set_sla_policy(group, policy))

    def delete_sla_policy(self, group: str) -> dict[str, Any]:
        return self._run(lambda c: c.delete_sla_policy(group))
