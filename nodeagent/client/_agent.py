"""The agent's client: :class:`AgentClient` (trio) and its two-phase :class:`DrainTransaction`."""

from __future__ import annotations

import math
import os
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import trio

from nodeagent import __version__
from nodeagent._paths import default_socket
from nodeagent.client._errors import (
    AgentError,
    BadResponse,
    NoSuchRequest,
    TransactionExpired,
    Unreachable,
    _map_exceptions,
    _refusal,
)
from nodeagent.client._results import (
    Claim,
    DrainRequest,
    DrainStatus,
    Estimate,
    Health,
    OnCompletion,
    Schedule,
    _claim_from_json,
    _decode,
    _request_from_json,
    _status_from_json,
)

__all__ = ["CANCEL_GRACE_S", "AgentClient", "DrainTransaction", "default_socket_path"]

CANCEL_GRACE_S = 5.0
"""How long cleanup may take when a block is left: cancelling an unresolved
:class:`DrainTransaction`, closing an :class:`AgentClient` (shielded from cancellation)."""
_UDS_BASE_URL = "http://nodeagent"


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
        job does not fit, :class:`Refused` with code ``machine.window_ahead`` when its
        retirement promise would end after the machine's maintenance window starts (its
        message names the window's start and the longest promise that still fits) and
        :class:`InvalidRequest` for bad arguments (both or neither of ``command`` and
        ``pid``, a ``group`` that is not a job group's name, …); no claim exists then.
        With ``before_window = "shorten"`` on the node, the claim's
        ``job.retirement_shortened_by`` says by how much its promise was cut. ``group``
        names the job group the job is an instance of (published as ``JobGroup`` in its
        slot ad).
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
