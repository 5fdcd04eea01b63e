"""How one daemon calls another: a kept-alive client per peer, its credentials, one error.

Every call a daemon makes to another goes through a :class:`PeerClient`: the agent pushing
its ad to the master (:mod:`nodeagent.agent._push`), the master calling agents
(:class:`HttpAgentLink`), the defrag daemon reading the master's ads and calling agents
(:mod:`nodeagent.defrag._service`). The programs speak each API through its one typed
vocabulary over this transport: :mod:`nodeagent._agent_calls` (the agent's) and
:mod:`nodeagent._master_calls` (the master's).

Connections. While a session is open (``async with client:``; the owning service's ``run``
opens one, see :func:`kept_alive`), every peer — an origin: scheme, host and port — has an
``httpx.AsyncClient`` of its own whose connections stay open between calls. At most
``max_in_flight`` requests go to one peer at once (further callers wait their turn: one
AsyncClient degrades under many concurrent requests), and idle connections expire after
:data:`KEEPALIVE_EXPIRY_S`, before the servers' own five-second idle timeout closes them.
Of the peers with no call in flight, only the ``max_idle_peers`` most recently used keep
their client; the others are closed as calls end. Leaving the last session, or
:meth:`PeerClient.aclose`, closes every kept connection. A call made outside a session
opens a connection for itself and closes it before it returns, so it leaves nothing open.

Credentials. A :class:`TokenMint` signs short-lived tokens with the pool key, one per
subject, receiver and scope, and reuses each until :data:`RENEW_AHEAD` of its lifetime is
left; a :class:`TokenFile` reads a bearer token once, and again when the file is replaced
or when the peer answers 401 or 403 (the request is then sent once more if the token
changed): an operator who replaces a token file needs no restart and no reload or when its owner is
reconfigured (a new :class:`TokenFile`).

Replies. A reply is read as it comes, at most ``max_reply`` bytes (the client's, or the
call's own): a longer one is not read further and fails the call with
``<peer>.bad_reply``, so that no peer can make a daemon hold more than the cap. The caps of
the calls the daemons make are :data:`AGENT_REPLY_LIMIT`, :data:`MASTER_REPLY_LIMIT`,
:data:`MASTER_ADS_REPLY_LIMIT` and the coordinators' (:mod:`nodeagent.master._coordinators`).

Errors. Every failure is a :class:`PeerCallFailed` (``AgentCallFailed`` is the same class)
with a stable ``code``, a ``message`` and the HTTP ``status`` (``None`` without a reply);
``<peer>`` is the peer's role, ``agent`` or ``master``::

    PeerCallFailed
    ├── <peer>.unreachable    no reply: no HTTP address, refused, reset, TLS, name unknown
    ├── <peer>.timeout        no reply within ``timeout`` (a write may have been applied)
    ├── <peer>.token_file     the caller's own token file cannot be read
    ├── the peer's code       an error body (DESIGN §4), read by ``_wire.error_fields``
    ├── <peer>.error          a 5xx reply without an error body
    └── <peer>.bad_reply      another non-2xx reply without one, a 2xx that is not JSON,
                              or a reply over the call's cap

The codes are the command line's (``nodeagent.cli._http``) for the same failures.
httpx's exceptions are translated in one place, :func:`_map_exceptions`; replies are
decoded in one place, :func:`_decode`. A failed call leaves the kept connections usable:
the next call to a peer that was down connects again.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import httpx
import trio

from nodeagent._auth import Scope, create_token
from nodeagent._clock import Clock
from nodeagent._origin import NotAnOrigin, parse_origin
from nodeagent._wire import TokenFileError, error_fields, read_token_file

__all__ = [
    "AGENT_REPLY_LIMIT",
    "KEEPALIVE_EXPIRY_S",
    "MASTER_ADS_REPLY_LIMIT",
    "MASTER_REPLY_LIMIT",
    "MAX_MINTED",
    "RENEW_AHEAD",
    "TOKEN_LIFETIME_S",
    "AgentCallFailed",
    "AgentLink",
    "Credentials",
    "HttpAgentLink",
    "PeerCallFailed",
    "PeerClient",
    "TokenFile",
    "TokenMint",
    "kept_alive",
    "scope_for",
]

#: An idle kept connection is dropped after this long: under the servers' idle timeout
#: (5 s, hypercorn's and :mod:`nodeagent._serving._http11`'s), so a request never races their close.
KEEPALIVE_EXPIRY_S = 4.0
#: Lifetime of the tokens a daemon mints for its calls to agents: short, since each is
#: sent to a node, and it is worth that node alone.
TOKEN_LIFETIME_S = 60.0
#: At most this many minted tokens are kept for reuse (one per node, actor and scope).
MAX_MINTED = 4096
#: A minted token is replaced once less than this share of its lifetime is left.
#: Half: a token is at least 30 s from its expiry when sent, so a receiver whose clock runs
#: up to 30 s ahead of the sender's still takes it.
RENEW_AHEAD = 0.5
#: The largest reply read from an agent (8 MiB): its ad is ~13 kB, ~200 KiB with 128
#: claims; its other replies (a drain, a claim, its health) are smaller.
AGENT_REPLY_LIMIT = 8 << 20
#: The largest reply read from a master by default (1 MiB): the answer to an ad push (the
#: machine's mode and window) is a few hundred bytes.
MASTER_REPLY_LIMIT = 1 << 20
#: The largest list of ads the defrag daemon reads from a master (512 MiB): the
#: partitionable slot ads of the pool, a few kB each, ~50 MB for 10,000 nodes.
MASTER_ADS_REPLY_LIMIT = 512 << 20
#: How long closing a client may take at shutdown (it runs shielded from cancellation).
_CLOSE_GRACE_S = 2.0


class PeerCallFailed(Exception):
    """A peer refused a request or could not be reached; ``code`` says which.

    ``status`` is the reply's HTTP status, ``None`` when there was no reply. See the
    module docstring for the codes.
    """

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


AgentCallFailed = PeerCallFailed
"""The name the master and the defrag daemon catch an agent's refusal by."""


# --- credentials --------------------------------------------------------------------------


class Credentials(Protocol):
    """Where a call's bearer token comes from."""

    def token(self) -> str | None:
        """The token to send (``None``: send none); raises :class:`PeerCallFailed`."""
        ...

    def renew(self) -> bool:
        """After a 401 or 403: fetch the token anew; whether it changed (then the call is
        retried)."""
        ...


class TokenFile:
    """A bearer token kept in a file: read at the first call, and again when the file was
    replaced or changed since (its inode, size or modification time: one ``stat`` a call)
    or after a 401 or 403.

    ``peer`` names the peer in the error code (``<peer>.token_file``) raised when the file
    cannot be read or does not hold one token.
    """

    def __init__(self, path: Path, *, peer: str) -> None:
        self.path = path
        self._peer = peer
        self._token: str | None = None
        self._seen: tuple[int, int, int] | None = None
        #: How many times the file was read (for tests and logs).
        self.reads = 0

    def token(self) -> str:
        if self._token is None or self._signature() != self._seen:
            self._token = self._read()
        return self._token

    def renew(self) -> bool:
        previous, self._token = self._token, None
        return self.token() != previous

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _read(self) -> str:
        self.reads += 1
        self._seen = self._signature()
        try:
            return read_token_file(self.path)
        except TokenFileError as exc:
            raise PeerCallFailed(f"{self._peer}.token_file", str(exc)) from None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Minted:
    token: str
    issued_at: float
    renew_at: float


#: What a :class:`TokenMint` keeps a token for: (subject, audience, scope).
_MintKey = tuple[str, str | None, Scope]


class TokenMint:
    """Tokens signed with the pool ``key``, one per (subject, audience, scope), reused.

    A token is minted at its first call and reused until ``RENEW_AHEAD`` of its
    ``lifetime_s`` is left (or the clock went back before its issue time); then a new one is
    minted. At most ``max_tokens`` are kept: those whose time is up go first, then the least
    recently used. ``clock`` is the wall clock unless a test gives another.
    """

    def __init__(
        self,
        key: bytes,
        *,
        scope: Scope = Scope.ADMINISTRATOR,
        lifetime_s: float = TOKEN_LIFETIME_S,
        clock: Clock | None = None,
        max_tokens: int = MAX_MINTED,
    ) -> None:
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self._key = key
        self._scope = scope
        self._lifetime = lifetime_s
        self._clock = clock
        self._max = max_tokens
        self._tokens: OrderedDict[_MintKey, _Minted] = OrderedDict()
        #: How many tokens were signed (for tests and metrics).
        self.minted = 0

    def _now(self) -> float:
        return time.time() if self._clock is None else self._clock.now()

    @property
    def kept(self) -> int:
        """How many tokens are kept for reuse now."""
        return len(self._tokens)

    def token(
        self, subject: str, *, audience: str | None = None, scope: Scope | None = None
    ) -> str:
        """The current token of ``subject`` for ``audience`` (its ``aud``; ``None``: none)
        with ``scope`` (default: the mint's); raises ValueError for an empty subject or
        audience."""
        now = self._now()
        key: _MintKey = (subject, audience, self._scope if scope is None else scope)
        minted = self._tokens.get(key)
        if minted is not None and minted.issued_at <= now < minted.renew_at:
            self._tokens.move_to_end(key)
            return minted.token
        token = create_token(
            self._key,
            subject=subject,
            scope=key[2],
            lifetime_s=self._lifetime,
            now=now,
            audience=audience,
        )
        self.minted += 1
        self._tokens.pop(key, None)
        if len(self._tokens) >= self._max:
            # Forget the tokens whose time is up, then the least recently used.
            for stale in [k for k, m in self._tokens.items() if not m.renew_at > now]:
                del self._tokens[stale]
            while len(self._tokens) >= self._max:
                self._tokens.popitem(last=False)
        self._tokens[key] = _Minted(
            token=token,
            issued_at=int(now),
            renew_at=int(now) + self._lifetime * (1 - RENEW_AHEAD),
        )
        return token

    def credentials(
        self, subject: str, *, audience: str | None = None, scope: Scope | None = None
    ) -> Credentials:
        """The :class:`Credentials` of ``subject`` for ``audience`` with ``scope`` (a minted
        token is not renewed on 401)."""
        return _MintedFor(self, subject, audience, scope)


@dataclass(frozen=True, slots=True)
class _MintedFor:
    mint: TokenMint
    subject: str
    audience: str | None
    scope: Scope | None

    def token(self) -> str:
        return self.mint.token(self.subject, audience=self.audience, scope=self.scope)

    def renew(self) -> bool:
        return False  # a fresh token would be refused for the same reason


# --- the client ---------------------------------------------------------------------------


_Origin = tuple[str, str, int | None]


@dataclass(eq=False)
class _Peer:
    client: httpx.AsyncClient
    limiter: trio.CapacityLimiter
    in_flight: int = 0


def _origin(url: str) -> _Origin:
    parsed = httpx.URL(url)
    return parsed.scheme, parsed.host, parsed.port


async def _close(client: httpx.AsyncClient) -> None:
    """Close ``client`` even while the caller is being cancelled (bounded)."""
    with trio.move_on_after(_CLOSE_GRACE_S, shield=True):
        await client.aclose()


class PeerClient:
    """Calls to the peers of one role (``peer``: ``agent`` or ``master``); see the module
    docstring for connections, credentials and errors.

    ``timeout`` (seconds, for connecting and for each read and write) may be set at any
    time: the next call uses it. ``max_reply``: the largest reply read (bytes), unless a
    call gives its own. ``verify``: the TLS context for ``https://`` peers, or
    whether to verify them against the system's CA bundle. Every peer's client shares one
    TLS context, made at the first call (≈ 40 ms of CPU, which a client of its own would
    spend each time).
    """

    def __init__(
        self,
        peer: str,
        *,
        timeout: float = 10.0,
        verify: bool | ssl.SSLContext = True,
        max_in_flight: int = 4,
        max_idle_peers: int = 64,
        max_reply: int = MASTER_REPLY_LIMIT,
    ) -> None:
        if max_in_flight < 1 or max_idle_peers < 0:
            raise ValueError("max_in_flight must be at least 1 and max_idle_peers not negative")
        self.peer = peer
        self.timeout = timeout
        self.max_reply = max_reply
        self._verify = verify
        self._tls: ssl.SSLContext | None = verify if isinstance(verify, ssl.SSLContext) else None
        self._max_in_flight = max_in_flight
        self._max_idle_peers = max_idle_peers
        self._peers: OrderedDict[_Origin, _Peer] = OrderedDict()
        self._sessions = 0

    @property
    def kept(self) -> int:
        """How many peers have a client kept open now."""
        return len(self._peers)

    async def __aenter__(self) -> Self:
        """Open a session: connections are kept until the last session ends."""
        self._sessions += 1
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._sessions = max(0, self._sessions - 1)
        if self._sessions == 0:
            await self.aclose()

    async def aclose(self) -> None:
        """Close every kept connection and end the sessions; later calls open their own.

        Runs to its end (bounded) even when the caller is being cancelled. A call in flight
        to a closed peer fails with ``<peer>.unreachable``.
        """
        self._sessions = 0
        peers = list(self._peers.values())
        self._peers.clear()
        for each in peers:
            await _close(each.client)

    def _new_client(self, connections: int) -> httpx.AsyncClient:
        limits = httpx.Limits(
            max_connections=connections,
            max_keepalive_connections=connections,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        )
        if self._tls is None:
            self._tls = httpx.create_ssl_context(verify=bool(self._verify))
        return httpx.AsyncClient(verify=self._tls, limits=limits)

    async def request(
        self,
        method: str,
        url: str,
        *,
        credentials: Credentials | None = None,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        max_reply: int | None = None,
    ) -> Any:
        """Send one request to ``url`` and return the reply's JSON document, read up to
        ``max_reply`` bytes (default: the client's).

        Raises :class:`PeerCallFailed` (see the module docstring); the peer's refusal left
        nothing changed there, per the API's contract.
        """
        cap = self.max_reply if max_reply is None else max_reply
        try:
            origin = _origin(url)
        except httpx.InvalidURL as exc:
            raise PeerCallFailed(f"{self.peer}.unreachable", f"not an HTTP address: {url}") from exc
        if self._sessions == 0:
            client = self._new_client(1)
            try:
                return await self._exchange(
                    client, method, url, credentials=credentials, json=json, params=params, cap=cap
                )
            finally:
                await _close(client)
        peer = self._peers.get(origin)
        if peer is None:
            peer = _Peer(
                client=self._new_client(self._max_in_flight),
                limiter=trio.CapacityLimiter(self._max_in_flight),
            )
            self._peers[origin] = peer
        self._peers.move_to_end(origin)
        peer.in_flight += 1
        try:
            async with peer.limiter:
                return await self._exchange(
                    peer.client,
                    method,
                    url,
                    credentials=credentials,
                    json=json,
                    params=params,
                    cap=cap,
                )
        finally:
            peer.in_flight -= 1
            await self._evict()

    async def _evict(self) -> None:
        """Close the least recently used idle peers beyond ``max_idle_peers``."""
        excess = len(self._peers) - self._max_idle_peers
        if excess <= 0:
            return
        idle = [origin for origin, peer in self._peers.items() if peer.in_flight == 0]
        for origin in idle[:excess]:
            await _close(self._peers.pop(origin).client)

    async def _exchange(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        *,
        credentials: Credentials | None,
        json: Any,
        params: Mapping[str, str] | None,
        cap: int,
    ) -> Any:
        retried = False
        while True:
            token = None if credentials is None else credentials.token()
            headers = {} if token is None else {"Authorization": f"Bearer {token}"}
            with _map_exceptions(self.peer, url, self.timeout, client):
                request = client.build_request(
                    method, url, json=json, params=params, headers=headers, timeout=self.timeout
                )
                streamed = await client.send(request, stream=True)
                try:
                    response = await _read_capped(streamed, cap)
                finally:
                    await streamed.aclose()
            if response is None:
                raise PeerCallFailed(
                    f"{self.peer}.bad_reply",
                    f"{method} {url}: the reply is too large (over {cap} bytes); not read",
                    streamed.status_code,
                )
            if response.status_code in (401, 403) and credentials is not None and not retried:
                retried = True
                if credentials.renew():
                    continue
            return _decode(self.peer, method, url, response)


async def _read_capped(response: httpx.Response, cap: int) -> httpx.Response | None:
    """The streamed ``response`` read whole, or ``None`` as soon as its body is known to
    pass ``cap`` bytes (from its ``Content-Length``, or as it arrives): at most ``cap``
    bytes and a piece are ever held."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        return None
    pieces: list[bytes] = []
    size = 0
    # Past the cap, the next read is cancelled rather than the loop left, so that every
    # generator of the HTTP stack under it finishes (none is left to the collector).
    with trio.CancelScope() as reading:
        async for piece in response.aiter_bytes():
            size += len(piece)
            if size > cap:
                reading.cancel()
                continue
            pieces.append(piece)
    if size > cap:
        return None
    return httpx.Response(
        response.status_code,
        headers=response.headers,
        content=b"".join(pieces),
        request=response.request,
    )


@contextlib.contextmanager
def _map_exceptions(
    peer: str, url: str, timeout: float, client: httpx.AsyncClient
) -> Iterator[None]:
    """Translate httpx's exceptions into :class:`PeerCallFailed`; the one place that does."""
    parsed = httpx.URL(url)
    where = f"{parsed.scheme}://{parsed.netloc.decode('ascii')}" if parsed.scheme else url
    try:
        yield
    except httpx.TimeoutException as exc:
        raise PeerCallFailed(
            f"{peer}.timeout",
            f"the {peer} at {where} did not answer within {timeout:g} s ({type(exc).__name__})",
        ) from exc
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        raise PeerCallFailed(
            f"{peer}.unreachable", f"cannot reach the {peer} at {where}: {reason}"
        ) from exc
    except httpx.HTTPError as exc:
        raise PeerCallFailed(
            f"{peer}.bad_reply", f"unusable reply from the {peer} at {where}: {exc}"
        ) from exc
    except RuntimeError as exc:
        if not client.is_closed:
            raise
        # The session ended (shutdown) between taking the client and sending on it.
        raise PeerCallFailed(f"{peer}.unreachable", f"the link to {where} is closed") from exc


def _decode(peer: str, method: str, url: str, response: httpx.Response) -> Any:
    """The JSON of a 2xx reply, or the :class:`PeerCallFailed` of any other."""
    status = response.status_code
    if 200 <= status < 300:
        try:
            return response.json()
        except ValueError:
            raise PeerCallFailed(
                f"{peer}.bad_reply", f"{method} {url}: HTTP {status} without JSON", status
            ) from None
    fields = error_fields(response.content)
    if fields is not None:
        code, message, _ = fields
        raise PeerCallFailed(code, message, status)
    lines = response.text.strip().splitlines()
    message = f"HTTP {status}" + (f": {lines[0][:200]}" if lines else "")
    raise PeerCallFailed(f"{peer}.error" if status >= 500 else f"{peer}.bad_reply", message, status)


def kept_alive(link: object) -> contextlib.AbstractAsyncContextManager[object]:
    """A session of ``link`` if it keeps connections (an async context manager), else a
    no-op: a service's ``run`` wraps its work in it, so the link's connections live as long
    as the service and are closed when it stops, whatever link (or test fake) it was given.
    """
    if isinstance(link, contextlib.AbstractAsyncContextManager):
        return link
    return contextlib.nullcontext(link)


# --- the master's and the defrag daemon's link to the agents ------------------------------


class AgentLink(Protocol):
    """The seam from the master (or the defrag daemon) to the agents; fakes stand in for it.

    ``node`` is the receiving node's name (its ad's ``Name``, its slot ads' ``Machine``):
    the token the call carries is bound to it.
    """

    async def call(
        self,
        address: str,
        method: str,
        path: str,
        *,
        node: str,
        actor: str,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]: ...


def scope_for(method: str) -> Scope:
    """The least scope an agent's API needs for ``method`` (DESIGN §4): READ for a read,
    ADMINISTRATOR for a write."""
    return Scope.READ if method.upper() in ("GET", "HEAD") else Scope.ADMINISTRATOR


class HttpAgentLink:
    """The agents' HTTP API at their ``MyAddress``, with a token minted for each call's node.

    The caller holds the pool key and signs, for each (node, ``actor``, scope), a token of
    subject ``<subject_prefix>:<actor>`` (``master:…``, ``defrag:…``) that the agent records
    as the drain's requester. Each token is worth one node for one purpose: its ``aud`` is
    the receiving node's name (the agent refuses a token bound to another), its scope is
    the least the call needs (:func:`scope_for`: READ to read an ad, ADMINISTRATOR to
    drain, cancel or commit), and it lives :data:`TOKEN_LIFETIME_S`; each is minted once
    and reused until near its expiry (:class:`TokenMint`, bounded).

    ``address`` must be a plain origin (:mod:`nodeagent._origin`): the URL is that origin
    and the caller's own path, never the address's text with the path appended.
    Connections to each agent are kept while a session is open (``async with link:``;
    :meth:`aclose`), see :class:`PeerClient`. ``timeout`` may be set at any time; the next
    call uses it.
    """

    def __init__(
        self,
        key: bytes,
        *,
        timeout: float = 10.0,
        verify: bool | ssl.SSLContext = True,
        subject_prefix: str = "master",
        clock: Clock | None = None,
        max_in_flight: int = 4,
        max_idle_peers: int = 64,
        token_lifetime_s: float = TOKEN_LIFETIME_S,
    ) -> None:
        self._prefix = subject_prefix
        self.mint = TokenMint(
            key, scope=Scope.ADMINISTRATOR, lifetime_s=token_lifetime_s, clock=clock
        )
        self.peers = PeerClient(
            "agent",
            timeout=timeout,
            verify=verify,
            max_in_flight=max_in_flight,
            max_idle_peers=max_idle_peers,
            max_reply=AGENT_REPLY_LIMIT,
        )

    @property
    def timeout(self) -> float:
        """Seconds to connect and for each read and write of a call."""
        return self.peers.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self.peers.timeout = value

    async def __aenter__(self) -> Self:
        await self.peers.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.peers.__aexit__(exc_type, exc, tb)

    async def aclose(self) -> None:
        """Close the kept connections (see :meth:`PeerClient.aclose`)."""
        await self.peers.aclose()

    async def call(
        self,
        address: str,
        method: str,
        path: str,
        *,
        node: str,
        actor: str,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One request to the agent ``node`` at ``address``; its reply, a JSON object.

        Raises :class:`PeerCallFailed`: ``agent.unreachable`` for an address that is not
        a plain ``http(s)://`` origin (such as an agent listening on its Unix socket only,
        or an address with a path), or no ``node``, with nothing sent.
        """
        if not node:
            raise PeerCallFailed("agent.unreachable", f"no node named for the agent at {address}")
        try:
            origin = parse_origin(address)
        except NotAnOrigin as exc:
            raise PeerCallFailed(
                "agent.unreachable", f"no HTTP address for the agent {node}: {exc}"
            ) from None
        url = origin.url(path)
        reply = await self.peers.request(
            method,
            url,
            json=body,
            credentials=self.mint.credentials(
                f"{self._prefix}:{actor}", audience=node, scope=scope_for(method)
            ),
        )
        if not isinstance(reply, dict):
            raise PeerCallFailed("agent.bad_reply", f"{method} {url}: not a JSON object")
        return reply
