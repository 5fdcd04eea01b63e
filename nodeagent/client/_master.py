"""The masters' client: :class:`MasterClient` (trio), which finds the leader among several
masters and follows its redirects, reads their event stream (:meth:`MasterClient.events`)
and follows the notices (:meth:`MasterClient.notices`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import ssl
import time
from collections.abc import AsyncGenerator, Awaitable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, overload
from urllib.parse import quote

import httpx
import trio

from nodeagent import __version__
from nodeagent._notice_feed import NoticeFeed
from nodeagent._paths import default_master_socket
from nodeagent.client._agent import CANCEL_GRACE_S, _segment
from nodeagent.client._errors import (
    _REFUSALS,
    AgentError,
    BadResponse,
    Forbidden,
    InvalidMaintenance,
    InvalidRequest,
    NoLeader,
    OutcomeUnknown,
    RedirectNotFollowed,
    Refused,
    Unreachable,
    _error_fields,
    _map_exceptions,
    _refusal,
)
from nodeagent.client._results import (
    Admission,
    Leadership,
    Notice,
    NoticeChange,
    _decode,
    _leadership_from_json,
    _notice_from_json,
    admission,
)

__all__ = ["EVENTS_IDLE_S", "MAX_REDIRECTS", "MasterClient"]

MAX_REDIRECTS = 3
"""How many redirects (307, 308) in a row :class:`MasterClient` follows; one more is
:class:`RedirectNotFollowed` ``client.too_many_redirects``."""

EVENTS_IDLE_S = 45.0
"""Seconds without a byte of the event stream (the master sends a heartbeat every 15 s)
after which :meth:`MasterClient.events` takes the connection for broken and reconnects."""

_EVENT_BACKOFF_MIN_S = 0.1
_EVENT_BACKOFF_MAX_S = 5.0
_EVENT_LINE_BYTES = 16 << 20
"""A line of the event stream, at most (an event naming every machine of a large
schedule is some hundreds of KiB)."""

_MASTER_BASE_URL = "http://nodeagent-master"
_REDIRECTS = (307, 308)
_MASTER_REFUSALS: dict[str, type[Refused]] = {
    **_REFUSALS,
    NoLeader.code: NoLeader,
    "auth.wrong_group": Forbidden,
    "notice.bad_body": InvalidRequest,
    "notice.bad_reason": InvalidRequest,
    "notice.bad_expected_completion": InvalidRequest,
    "plan.bad_window": InvalidRequest,
    "plan.bad_machine": InvalidRequest,
    "plan.bad_cursor": InvalidRequest,
}
"""The agent's codes and the master's own (a master's code kept on the class it falls
under: ``auth.wrong_group`` is a :class:`Forbidden`); the agent's client keeps
:data:`_REFUSALS`."""

_CONNECTED: dict[str, Any] = {"type": "connected"}
"""What :meth:`MasterClient._events` yields, when asked to, each time a stream is open
(before its first line): a follower that must read something else then (the notices)."""

_NOTICES = "/v1/notices"
_CHANGE_KINDS: dict[str, Literal["listed", "issued", "answered", "rescinded"]] = {
    "listed": "listed",
    "issued": "issued",
    "answered": "answered",
    "rescinded": "rescinded",
}
"""The kinds of :class:`~nodeagent.client.NoticeChange`, by the feed's names."""


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


def _names(value: str | Iterable[str] | None) -> list[str]:
    """A filter's names: one, a list, or a comma-separated string (``None``: none)."""
    items = [value] if isinstance(value, str) else list(value or ())
    return [name.strip() for item in items for name in item.split(",") if name.strip()]


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

    async def admissions(self, promise: float, *, now: float | None = None) -> list[Admission]:
        """For every node, whether a job with retirement promise ``promise`` (seconds;
        0: evicted at once when a drain comes) could start there now and keep it: the
        node takes new work and the promise ends before its machine's window starts
        (:class:`~nodeagent.client.Admission`, with the longest promise it could keep).

        One read of the ads and one of the schedule, for a scheduler placing work: the
        window is the master's (the schedule's machine matched by hostname without regard
        to case, or by ip when it names no hostname), which the node learns with its next
        ad push. ``now``: the time to
        judge at (default: this machine's clock). Raises as :meth:`ads` does; ValueError
        for a negative or non-finite promise.
        """
        if not (promise >= 0 and math.isfinite(promise)):
            raise ValueError(f"a promise is seconds (>= 0), not {promise!r}")
        ads = await self.ads(
            projection=("Name", "Machine", "MachineIp", "Start", "MaxJobRetirementTime")
        )
        starts = _window_starts(await self.schedule())
        at = time.time() if now is None else now
        found = []
        for ad in ads:
            host = str(ad.get("Machine") or ad.get("Name") or "").lower()
            start = starts.get(host, starts.get(str(ad.get("MachineIp"))))
            found.append(admission(ad, start, promise, at))
        return found

    async def set_schedule(self, schedule: Mapping[str, Any]) -> None:
        """Replace the schedule (Mesos JSON: ``{"windows": [...]}``); the leader applies it.
        Raises :class:`InvalidMaintenance` with Mesos's message when it is refused."""
        await self._call("POST", "/maintenance/schedule", body=dict(schedule), mesos=True)

    async def preview_schedule(
        self, schedule: Mapping[str, Any], *, changed_only: bool = False
    ) -> dict[str, Any]:
        """What :meth:`set_schedule` with ``schedule`` would do now (``POST
        /v1/maintenance/schedule/preview``, READ; nothing changes): per machine its mode
        now and after, the drain that would start at once and the jobs evicted at once,
        the machines dropped, the totals and the ``warnings`` (``schedule.window_open``,
        ``schedule.suspicious_time``, ``schedule.unknown_machine``). ``changed_only``:
        the rows of the machines the change adds or moves only (``rows=changed``: the
        kept ones are counted, their drains and cuts are the plan's). Raises
        :class:`InvalidMaintenance` with Mesos's message for a schedule it would refuse."""
        return await self._object(
            "POST",
            "/v1/maintenance/schedule/preview",
            body=dict(schedule),
            params={"rows": "changed"} if changed_only else None,
            mesos=True,
        )

    async def apply_schedule(self, schedule: Mapping[str, Any], *, if_version: str) -> str:
        """Replace the schedule as :meth:`set_schedule` does, only while the master holds
        the state a preview was made from (``if_version``: the preview's
        ``schedule_version``; ``PUT /v1/maintenance/schedule``). Returns the new version.
        Raises :class:`InvalidMaintenance` with Mesos's message when it is refused, and
        :class:`Refused` ``schedule.changed`` (412) when the schedule or a machine's
        mode changed since: nothing was applied, preview again."""
        document = await self._object(
            "PUT",
            "/v1/maintenance/schedule",
            body=dict(schedule),
            params={"if_version": if_version},
            mesos=True,
        )
        return str(document["schedule_version"])

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
        self,
        *,
        late: bool = False,
        limit: int | None = None,
        blockers: bool = True,
        windows: Iterable[float] = (),
        machines: str | Iterable[str] = (),
        after: str | None = None,
    ) -> dict[str, Any]:
        """The maintenance plan (``GET /v1/maintenance/plan``): ``late``: only the rows
        late by their promises or to be escalated; ``limit``: at most that many rows;
        ``blockers=False``: rows without their blockers. ``windows`` (their starts in epoch
        seconds: a whole second selects the windows starting within it, a number with a
        fraction the window starting exactly then, as the rows show it) and ``machines``
        (hostnames or IPs): the plan of those machines only, whose totals count them
        (without: every machine). ``after``: the rows after the previous page's ``next``
        (``""``: from the first row; with any of these the reply carries ``next``,
        ``None`` after the last page). A bad window, name or cursor is
        :class:`InvalidRequest` (422); a cursor that no longer fits the schedule
        :class:`Refused` with status 409 (``plan.cursor_stale``: ask the first page
        again)."""
        query = _plan_query(late, limit, blockers, windows, machines, after)
        return await self._object("GET", f"/v1/maintenance/plan?{query}")

    async def plan_lines(
        self,
        *,
        late: bool = False,
        limit: int | None = None,
        blockers: bool = True,
        windows: Iterable[float] = (),
        machines: str | Iterable[str] = (),
        after: str | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The plan streamed (``GET /v1/maintenance/plan?format=jsonl``) as the master
        makes it, its lines as dicts: first ``{"plan": {"now", "policy"}}``, then
        ``{"row": {…}}`` a row (the rows of :meth:`plan`), last ``{"end": {"matched",
        "totals", "after_window", "next"}}``::

            async with contextlib.aclosing(master.plan_lines(windows=[start])) as lines:
                async for line in lines:
                    if "row" in line:
                        print(line["row"]["machine_id"])

        The parameters are :meth:`plan`'s, and so are the errors before the first line
        (the masters of ``urls`` asked in turn until one answers). A plan that fails
        after its first line ends with a line ``{"error": …}``: :class:`BadResponse`
        with its message, as is a stream that ends without its ``end`` line. Leaving
        the loop closes the connection (``aclosing`` at once)."""
        query = _plan_query(late, limit, blockers, windows, machines, after)
        target = f"/v1/maintenance/plan?{query}&format=jsonl"
        passed: list[str] = []
        for index, base in enumerate(self._bases):
            here = self._describe(base)
            http = self._local if base is None else self._remote
            if http is None:
                raise RuntimeError(f"use 'async with {self!r}' before calling it")
            url = target if base is None else base + target
            try:
                with _map_exceptions(here, peer="master"):
                    async with http.stream("GET", url) as reply:
                        if not reply.is_success:
                            await reply.aread()
                            raise _master_refusal(reply, mesos=False)
                        ended = False
                        async with contextlib.aclosing(_lines(reply, here)) as lines:
                            async for text in lines:
                                line = _plan_line(text, here)
                                if "end" in line:
                                    ended = True
                                yield line
                        if not ended:
                            raise BadResponse(f"the plan from {here} ended before its end line")
                        return
            except (Unreachable, Refused) as exc:
                if not _another_may_answer(exc, read=True) or index + 1 == len(self._bases):
                    if not passed:
                        raise
                    passed.append(f"{here}: {exc.message}")
                    raise _restated(exc, "no master answered: " + "; ".join(passed)) from exc
                passed.append(f"{here}: {exc.message}")

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

    # ------------------------------------------------------------------ notices

    @overload
    def notices(
        self,
        group: str | Iterable[str] | None = None,
        machine: str | Iterable[str] | None = None,
        *,
        follow: Literal[False] = False,
    ) -> Awaitable[list[Notice]]: ...

    @overload
    def notices(
        self,
        group: str | Iterable[str] | None = None,
        machine: str | Iterable[str] | None = None,
        *,
        follow: Literal[True],
    ) -> AsyncGenerator[NoticeChange, None]: ...

    def notices(
        self,
        group: str | Iterable[str] | None = None,
        machine: str | Iterable[str] | None = None,
        *,
        follow: bool = False,
    ) -> Awaitable[list[Notice]] | AsyncGenerator[NoticeChange, None]:
        """The notices (Mesos's inverse offers) of job groups ``group`` on machines
        ``machine`` (exact names: one, a list, or a comma-separated string; ``None``:
        every one).

        Without ``follow``: ``await`` it for the notices in force (``GET /v1/notices``),
        sorted by machine and group, each with its window, claims and latest answer.

        With ``follow``: an async iterator of :class:`~nodeagent.client.NoticeChange`, that
        first yields each notice in force (``listed``), then every change as the master
        makes it (``issued``, ``answered``, ``rescinded``: the ``notice.*`` events of
        these groups and machines), with the notice after it::

            async with contextlib.aclosing(master.notices("web/prod/front", follow=True)) as feed:
                async for change in feed:
                    if change.kind in ("listed", "issued") and change.notice.answer is None:
                        await master.accept(change.notice.id, reason="stateless: drain at will")

        It opens the event stream before it lists, so a change made meanwhile is neither
        missed nor yielded twice, and it resumes by itself as :meth:`events` does (a broken
        connection, a master restarted or another of ``urls``: the events after the last
        one read). Where the master no longer keeps the events it missed (a ``gap``) it
        lists again (asked again after a backoff, as the stream is, until a master
        answers) and yields what differs: notices new since (``listed``), answers changed
        (``answered``), and notices gone (``rescinded``, with ``rescinded`` ``None``: when
        is not known). It raises what :meth:`events` raises (a ``group`` that is no
        ``ROLE/ENV/NAME``: :class:`InvalidRequest`), and what the first listing raises (a
        refusal of a later one too). The stream and a listing take two connections:
        ``follow`` needs a client of ``max_concurrency`` at least 2 (else ValueError).

        Raises :class:`Unauthorized` or :class:`Forbidden` for a token refused (a READ
        token suffices), :class:`BadResponse` for a reply not of the API's shape.
        """
        groups, machines = _names(group), _names(machine)
        if not follow:
            return self._notices(groups, machines)
        if self._max_concurrency < 2:
            raise ValueError("following the notices takes two connections: max_concurrency >= 2")
        return self._notice_changes(groups, machines)

    async def _notice_documents(
        self, groups: Sequence[str], machines: Sequence[str]
    ) -> list[dict[str, Any]]:
        params = {"group": ",".join(groups), "machine": ",".join(machines)}
        return await self._listed(_NOTICES, "notices", {k: v for k, v in params.items() if v})

    async def _notices(self, groups: Sequence[str], machines: Sequence[str]) -> list[Notice]:
        documents = await self._notice_documents(groups, machines)
        return [_decode(_notice_from_json, d, "notices", peer="master") for d in documents]

    async def _notice_changes(
        self, groups: Sequence[str], machines: Sequence[str]
    ) -> AsyncGenerator[NoticeChange, None]:
        """:meth:`notices` with ``follow``: the stream, the listings and the changes."""
        feed = NoticeFeed(groups=groups, machines=machines)
        query = {"format": "jsonl", "follow": "true", "last": "0", "type": "notice.*"}
        if groups:
            query["group"] = ",".join(groups)
        if machines:
            query["machine"] = ",".join(machines)
        listed = False
        stream = self._events(query, since=None, follow=True, marks=True)
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                found: list[tuple[str, Any]]
                event_id = when = None
                if event is _CONNECTED:
                    if listed:
                        continue  # resumed after the last event read: nothing to list
                    listed = True
                    found = feed.listed(await self._notice_documents(groups, machines))
                elif event.get("type") == "gap":
                    found = feed.listed(await self._listed_again(groups, machines))
                else:
                    change = feed.event(event)
                    found = [] if change is None else [change]
                    event_id, when = event.get("id"), event.get("time")
                for kind, document in found:
                    notice = _decode(_notice_from_json, document, "notice", peer="master")
                    yield NoticeChange(
                        kind=_CHANGE_KINDS[kind],
                        notice=notice,
                        event_id=event_id,
                        time=when if isinstance(when, int | float) else None,
                    )

    async def _listed_again(
        self, groups: Sequence[str], machines: Sequence[str]
    ) -> list[dict[str, Any]]:
        """The notices listed again after a gap: a listing no master answers (no reply, a
        ``5xx``) is asked again after the stream's backoff; a refusal raises."""
        failures = 0
        while True:
            try:
                return await self._notice_documents(groups, machines)
            except (Unreachable, Refused) as exc:
                if isinstance(exc, Refused) and (exc.status or 0) < 500:
                    raise
            failures += 1
            await trio.sleep(min(_EVENT_BACKOFF_MIN_S * 2 ** (failures - 1), _EVENT_BACKOFF_MAX_S))

    async def accept(
        self, notice_id: str, *, reason: str, expected_completion: float | None = None
    ) -> Notice:
        """Accept notice ``notice_id`` for its group (``POST /v1/notices/{id}/accept``):
        ``reason`` (required, non-empty, at most 1 KiB), ``expected_completion`` (epoch s,
        optional: when the group expects its instances there to be gone; the owner's word,
        it relaxes no eviction). Only the latest answer counts; it is written before the
        reply. Returns the notice with its answer.

        Raises (nothing changed) :class:`Forbidden` ``auth.wrong_group`` for a token that
        may not answer for the notice's group (``auth.forbidden``: none at all);
        :class:`Refused` ``notice.no_such_notice`` (404) for a notice not in force (unknown,
        or rescinded: answer the new one); :class:`InvalidRequest` ``notice.bad_reason``,
        ``notice.bad_expected_completion`` or ``notice.bad_body`` (422). Follows a
        redirect to the leader as every write does. ValueError for an id that is no path
        segment.
        """
        return await self._answer(notice_id, "accept", reason, expected_completion)

    async def decline(
        self, notice_id: str, *, reason: str, expected_completion: float | None = None
    ) -> Notice:
        """Decline notice ``notice_id`` (``POST /v1/notices/{id}/decline``), as
        :meth:`accept`: a decline stops no window (the modes stay the operator's), the
        plan shows it."""
        return await self._answer(notice_id, "decline", reason, expected_completion)

    async def _answer(
        self, notice_id: str, verb: str, reason: str, expected_completion: float | None
    ) -> Notice:
        body: dict[str, Any] = {"reason": reason}
        if expected_completion is not None:
            body["expected_completion"] = expected_completion
        path = f"{_NOTICES}/{quote(_segment(notice_id), safe='')}/{verb}"
        document = await self._object("POST", path, body=body)
        return _decode(_notice_from_json, document, "notice", peer="master")

    # ------------------------------------------------------------------ the event stream

    def events(
        self,
        *,
        since: int | None = None,
        last: int | None = None,
        types: str | Iterable[str] = (),
        machines: str | Iterable[str] = (),
        groups: str | Iterable[str] = (),
        follow: bool = True,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The masters' events (``GET /v1/events?format=jsonl``), as dicts, in order of
        their ids: ``{"id", "time", "type", "machines", "groups", "text", "facts"}``
        (docs/master-api.md), and ``{"type": "gap", "missed", "after", "resume", "text"}``
        where events asked for are no longer kept (``missed`` of them, up to ``resume``)::

            async with contextlib.aclosing(master.events(types=["drain.*"])) as events:
                async for event in events:
                    print(event["id"], event["text"])

        ``since``: the events after that id; else ``last``: the last ``last`` kept events
        that match first; else, following, only new ones, and not following, every kept
        one. ``types`` (``drain.committed`` or ``drain.*``), ``machines`` (a hostname or
        its first label) and ``groups`` (``ROLE/ENV/NAME``) filter them: a list, or one
        comma-separated string. With ``follow`` (default) the iterator does not end;
        without, it ends after the kept events.

        **It resumes by itself.** When the connection breaks, the master restarts or says
        nothing for :data:`EVENTS_IDLE_S` (it sends a heartbeat every 15 s), it connects
        again, to the next master of ``urls`` in turn, after a backoff (0.1 s doubling up
        to 5 s, from the first line read again), and asks for the events after the last
        one it yielded (or a gap's ``resume``): it never yields an event twice, nor skips
        one the masters still keep. A ``5xx`` reply (a master starting, :class:`NoLeader`)
        is retried the same way. Only the first connection, which no master answered
        (each asked in turn), raises its :class:`Unreachable` or ``5xx``
        :class:`Refused`; a refusal raises at any time, never retried: a bad filter,
        ``since`` or ``last`` is :class:`InvalidRequest` (422), a token refused
        :class:`Unauthorized` or :class:`Forbidden`; a line that is not an event
        :class:`BadResponse`. Bound it with a cancel scope; leaving the loop closes the
        connection (``aclosing`` closes it at once).

        The stream holds one of the client's connections while it is open; it takes no
        part of ``max_concurrency``'s requests. Raises ValueError for a negative
        ``since`` or ``last``, or both given.
        """
        for name, value in (("since", since), ("last", last)):
            if value is not None and (isinstance(value, bool) or value < 0):
                raise ValueError(f"{name} must be an event id (an integer >= 0), not {value!r}")
        if since is not None and last is not None:
            raise ValueError("give since or last, not both")
        query = {"format": "jsonl", "follow": "true" if follow else "false"}
        if last is not None:
            query["last"] = str(last)
        for name, values in (("type", types), ("machine", machines), ("group", groups)):
            listed = values if isinstance(values, str) else ",".join(values)
            if listed:
                query[name] = listed
        return self._events(query, since=since, follow=follow)

    async def _events(
        self, query: Mapping[str, str], *, since: int | None, follow: bool, marks: bool = False
    ) -> AsyncGenerator[dict[str, Any], None]:
        """:meth:`events`: the connections in turn, and where the stream is; with
        ``marks``, :data:`_CONNECTED` each time a stream is open."""
        seen = since  # the last id yielded (or a gap's resume): none at or before it again
        resume = since  # where the next connection asks from
        index, connected, failures = 0, False, 0
        passed: list[str] = []
        timeout = httpx.Timeout(self._timeout, read=EVENTS_IDLE_S)
        while True:
            base = self._bases[index]
            here = self._describe(base)
            http = self._local if base is None else self._remote
            if http is None:
                raise RuntimeError(f"use 'async with {self!r}' before calling it")
            params = dict(query)
            if resume is not None:
                params.pop("last", None)
                params["since"] = str(resume)
            url = "/v1/events" if base is None else base + "/v1/events"
            try:
                with _map_exceptions(here, peer="master"):
                    async with http.stream("GET", url, params=params, timeout=timeout) as reply:
                        if not reply.is_success:
                            await reply.aread()
                            raise _master_refusal(reply, mesos=False)
                        connected = True
                        floor = reply.headers.get("x-nodeagent-last-event-id", "")
                        if follow and resume is None and floor.isdigit():
                            resume = int(floor)  # a fresh stream starts after it
                        if marks:
                            yield _CONNECTED
                        async with contextlib.aclosing(_lines(reply, here)) as lines:
                            async for line in lines:
                                failures = 0
                                event = _event(line, here)
                                if event is None:
                                    continue  # a heartbeat
                                if event.get("type") == "gap":
                                    mark = event.get("resume")
                                    if isinstance(mark, int) and (seen is None or mark > seen):
                                        seen = resume = mark
                                        yield event
                                    continue
                                event_id = event["id"]
                                if seen is not None and event_id <= seen:
                                    continue  # yielded already
                                seen = event_id
                                resume = event_id if resume is None else max(resume, event_id)
                                yield event
                if not follow:
                    return
            except (Unreachable, Refused) as exc:
                if isinstance(exc, Refused) and (exc.status or 0) < 500:
                    raise
                if not connected:
                    passed.append(f"{here}: {exc.message}")
                    if index + 1 == len(self._bases):
                        if len(passed) == 1:
                            raise
                        raise _restated(exc, "no master answered: " + "; ".join(passed)) from exc
                    index += 1
                    continue
            index = (index + 1) % len(self._bases)
            failures += 1
            await trio.sleep(min(_EVENT_BACKOFF_MIN_S * 2 ** (failures - 1), _EVENT_BACKOFF_MAX_S))


async def _lines(reply: httpx.Response, here: str) -> AsyncGenerator[bytes, None]:
    """The reply's lines as they come (without their newline; an unended last one is not
    a line), each at most :data:`_EVENT_LINE_BYTES`: longer is :class:`BadResponse`."""
    pending = bytearray()
    pieces = reply.aiter_bytes()
    try:
        async for piece in pieces:
            pending += piece
            start = 0
            while (end := pending.find(b"\n", start)) >= 0:
                yield bytes(pending[start:end])
                start = end + 1
            del pending[:start]
            if len(pending) > _EVENT_LINE_BYTES:
                raise BadResponse(
                    f"the master at {here} sent an event longer than {_EVENT_LINE_BYTES} bytes"
                )
    finally:
        # Left early (the caller closed the stream): the next read is cancelled, so that
        # every generator of the HTTP stack under this one finishes rather than being
        # left to the collector (trio warns of each).
        with trio.CancelScope() as reading:
            reading.cancel()
            async for _ in pieces:
                pass


def _plan_query(  # noqa: PLR0917 - the plan's parameters, in the methods' order
    late: bool,
    limit: int | None,
    blockers: bool,
    windows: Iterable[float],
    machines: str | Iterable[str],
    after: str | None,
) -> str:
    """The plan's query: its parameters, ``window`` and ``machine`` repeated."""
    params: list[tuple[str, str | int | float | bool | None]] = [
        ("late", str(late).lower()),
        ("blockers", str(blockers).lower()),
    ]
    if limit is not None:
        params.append(("limit", str(limit)))
    params += [("window", repr(float(start))) for start in windows]
    params += [("machine", name) for name in _names(machines)]
    if after is not None:
        params.append(("after", after))
    return str(httpx.QueryParams(params))


def _plan_line(line: bytes, here: str) -> dict[str, Any]:
    """One line of the streamed plan; raises :class:`BadResponse` for an error line or
    for anything that is not a line of the plan."""
    try:
        found = json.loads(line)
    except ValueError:
        found = None
    if not isinstance(found, dict) or len(found) != 1 or not found.keys() & _PLAN_LINES:
        shown = line[:80].decode("utf-8", errors="replace")
        raise BadResponse(f"the master at {here} sent a line that is not the plan's: {shown!r}")
    if "error" in found:
        error = found["error"]
        message = error.get("message") if isinstance(error, dict) else None
        raise BadResponse(f"the plan from {here} failed midway: {message or error!r}")
    return found


#: The keys of the streamed plan's lines.
_PLAN_LINES = frozenset({"plan", "row", "end", "error"})


def _event(line: bytes, here: str) -> dict[str, Any] | None:
    """One line of the stream: an event (or a gap), ``None`` for a heartbeat; raises
    :class:`BadResponse` for anything else."""
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError:
        event = None
    if not isinstance(event, dict) or not (
        isinstance(event.get("id"), int) or event.get("type") == "gap"
    ):
        shown = line[:80].decode("utf-8", errors="replace")
        raise BadResponse(f"the master at {here} sent a line that is not an event: {shown!r}")
    return event


def _window_starts(schedule: Mapping[str, Any]) -> dict[str, float]:
    """Each scheduled machine's window start (epoch s), by its lower-case hostname, or
    by its ip when it names none (Mesos's machine id)."""
    starts: dict[str, float] = {}
    for window in schedule.get("windows", ()):
        start_ns = window.get("unavailability", {}).get("start", {}).get("nanoseconds")
        if not isinstance(start_ns, int):
            continue
        for machine in window.get("machine_ids", ()):
            key = str(machine.get("hostname") or "").lower() or machine.get("ip")
            if key:
                starts[key] = start_ns / 1e9
    return starts
