"""etcd's v3 API through its JSON gateway (``/v3/…``), over httpx.

The masters keep their shared state and elect their leader in etcd
(:mod:`nodeagent._ha._store`, :mod:`nodeagent._ha._leadership`). They speak to it through the
gateway every etcd 3.4+ server serves on its client port: JSON over HTTP, keys and values
in base64, int64 fields as decimal strings. httpx is already the daemons' HTTP client, on
trio for the async calls (:class:`AsyncEtcd`: leases, watches, the election) and blocking
for the store's writes (:class:`SyncEtcd`: a write is made while the caller's state is
consistent, like the SQLite store's, within ``timeout``).

Several endpoints (the members of one etcd cluster) are tried in turn, starting with the
one that last answered: a connection failure, a timeout or a member that says it is
unavailable moves on to the next one, within one ``timeout`` for the whole call. TLS (a CA
file, a client certificate) and etcd's own users (``/v3/auth/authenticate``: a token sent
with each request, renewed when etcd says it expired) are supported.
"""

from __future__ import annotations

import base64
import contextlib
import ssl
import time
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import trio

from nodeagent._store import StoreError, StoreUnavailable

__all__ = [
    "REPLY_LIMIT",
    "AsyncEtcd",
    "EtcdError",
    "EtcdSettings",
    "EtcdUnavailable",
    "KeyValue",
    "ReplyTooLarge",
    "SyncEtcd",
    "WatchEvent",
    "b64",
    "created_at",
    "delete",
    "get",
    "modified_at",
    "prefix_end",
    "put",
    "revision_of",
    "unb64",
]

#: gRPC status codes etcd answers with, by name.
#: The largest reply (or watch message) read from etcd (256 MiB): the largest is the
#: master's whole state, read at its start, a few MB for thousands of operations (etcd
#: refuses a request over 1.5 MiB, so each document and each transaction is smaller). A
#: longer one is not read further and fails on that endpoint (:class:`ReplyTooLarge`).
REPLY_LIMIT = 256 << 20

_UNAVAILABLE = 14
_UNAUTHENTICATED = 16
_DEADLINE_EXCEEDED = 4


class EtcdError(StoreError):
    """etcd refused a request, or answered something this client cannot read."""

    code = "store.error"
    http_status = 503


class EtcdUnavailable(EtcdError, StoreUnavailable):
    """No endpoint answered within the timeout (each one's failure is in the message)."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@dataclass(frozen=True, kw_only=True)
class EtcdSettings:
    """Where etcd is and how to speak to it.

    ``endpoints``: client URLs (``http://10.0.0.1:2379``, ``https://…``); ``ca_file``
    verifies the members' certificates (https), ``cert_file``/``key_file`` are the client's
    own; ``user``/``password`` log in to etcd's authentication; ``timeout`` bounds each
    call, over all endpoints.
    """

    endpoints: tuple[str, ...]
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    user: str | None = None
    password: str | None = None
    timeout: float = 2.0

    def tls(self) -> ssl.SSLContext | bool:
        """What httpx verifies the members with (and presents to them)."""
        if self.ca_file is None and self.cert_file is None:
            return True
        context = ssl.create_default_context(
            cafile=None if self.ca_file is None else str(self.ca_file)
        )
        if self.cert_file is not None:
            context.load_cert_chain(
                str(self.cert_file), None if self.key_file is None else str(self.key_file)
            )
        return context

    def describe(self) -> str:
        return ", ".join(self.endpoints)


@dataclass(frozen=True, kw_only=True)
class KeyValue:
    """One key as etcd holds it (``value`` empty for a deletion in a watch event)."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int = 0

    @classmethod
    def of(cls, kv: Mapping[str, Any]) -> KeyValue:
        return cls(
            key=unb64(kv["key"]),
            value=unb64(kv.get("value", "")),
            create_revision=int(kv.get("create_revision", 0)),
            mod_revision=int(kv.get("mod_revision", 0)),
            lease=int(kv.get("lease", 0)),
        )


@dataclass(frozen=True, kw_only=True)
class WatchEvent:
    """A change a watch reports: a put (``deleted`` false) or a deletion of ``kv.key``."""

    kv: KeyValue
    deleted: bool


def revision_of(reply: Mapping[str, Any]) -> int:
    """The store revision a reply's header names (0 if none)."""
    return int(reply.get("header", {}).get("revision", 0))


@dataclass(frozen=True)
class _Post:
    """A request of :meth:`_Calls.attempts`: ``POST <endpoint>/v3/<path>`` within
    ``seconds``."""

    endpoint: str
    path: str
    body: bytes
    seconds: float


class _Calls:
    """What the sync and async clients share: endpoint order, the body of each call,
    the reading of each reply (which says: done, try the next endpoint, or fail)."""

    def __init__(self, settings: EtcdSettings) -> None:
        if not settings.endpoints:
            raise ValueError("etcd needs at least one endpoint")
        self.settings = settings
        self._endpoints = [url.rstrip("/") for url in settings.endpoints]
        self._token: str | None = None

    def order(self) -> list[str]:
        """The endpoints, the one that answered last first."""
        return list(self._endpoints)

    def answered(self, endpoint: str) -> None:
        if self._endpoints[0] != endpoint:
            self._endpoints.remove(endpoint)
            self._endpoints.insert(0, endpoint)

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._token is not None:
            headers["Authorization"] = self._token
        return headers

    @property
    def needs_token(self) -> bool:
        return self.settings.user is not None and self._token is None

    def login_body(self) -> bytes:
        return orjson.dumps({"name": self.settings.user, "password": self.settings.password or ""})

    def logged_in(self, endpoint: str, response: httpx.Response) -> None:
        """Take the token of a reply to ``auth/authenticate``; raises :class:`EtcdError`."""
        try:
            outcome, reply = self.read(endpoint, response)
        except EtcdError as exc:
            raise EtcdError(f"cannot log in to etcd as {self.settings.user!r}: {exc}") from None
        token = reply.get("token") if outcome == "ok" else None
        if not isinstance(token, str) or not token:
            raise EtcdError(f"cannot log in to etcd at {endpoint} as {self.settings.user!r}")
        self._token = token

    def read(self, endpoint: str, response: httpx.Response) -> tuple[str, Any]:
        """``("ok", reply)``, ``("next", why)`` (try another endpoint), ``("login", why)``
        (the token expired: log in again) or raises :class:`EtcdError`."""
        try:
            reply = orjson.loads(response.content) if response.content else {}
        except orjson.JSONDecodeError:
            return "next", f"{endpoint}: HTTP {response.status_code}, not JSON"
        if response.status_code == 200 and isinstance(reply, dict) and "error" not in reply:
            self.answered(endpoint)
            return "ok", reply
        code = reply.get("code") if isinstance(reply, dict) else None
        message = str(reply.get("message") or reply.get("error")) if isinstance(reply, dict) else ""
        if code == _UNAUTHENTICATED and self.settings.user is not None and self._token is not None:
            self._token = None
            return "login", message
        if code in (_UNAVAILABLE, _DEADLINE_EXCEEDED) or response.status_code >= 502:
            return "next", f"{endpoint}: {message or f'HTTP {response.status_code}'}"
        raise EtcdError(f"etcd at {endpoint} refused the request: {message}")

    def attempts(
        self, path: str, body: Mapping[str, Any], left: Callable[[], float]
    ) -> Generator[_Post, httpx.Response | httpx.HTTPError, dict[str, Any]]:
        """One call as the requests to send: yields each POST (login, then the call, on
        each endpoint in turn), is sent its response or the transport's error, and returns
        etcd's reply; raises :class:`EtcdUnavailable` once ``left()`` (the seconds left)
        runs out or every endpoint failed, :class:`EtcdError` for a refusal. The sync and
        the async client drive it, each with its own transport."""
        failures: list[str] = []
        payload = orjson.dumps(body)
        for _ in range(2):  # a second round only after logging in again
            for endpoint in self.order():
                seconds = left()
                if seconds <= 0:
                    raise self.unavailable(failures)
                if self.needs_token:
                    login = yield _Post(endpoint, "auth/authenticate", self.login_body(), seconds)
                    if isinstance(login, httpx.HTTPError):
                        failures.append(_transport_failure(endpoint, login))
                        continue
                    self.logged_in(endpoint, login)
                response = yield _Post(endpoint, path, payload, max(left(), 0.001))
                if isinstance(response, httpx.HTTPError):
                    failures.append(_transport_failure(endpoint, response))
                    continue
                outcome, value = self.read(endpoint, response)
                if outcome == "ok":
                    return dict(value)
                failures.append(str(value))
                if outcome == "login":
                    break
            else:
                break
        raise self.unavailable(failures)

    def unavailable(self, failures: Sequence[str]) -> EtcdUnavailable:
        return EtcdUnavailable(
            f"etcd is unavailable ({'; '.join(failures) or 'no time left'}): "
            f"check the endpoints {self.settings.describe()}"
        )


class ReplyTooLarge(httpx.HTTPError):
    """A reply (or a watch's message) over :data:`REPLY_LIMIT`: not read further, and
    taken as the endpoint's failure."""


class _Capped:
    """A reply's body pieces, up to ``cap`` bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self.pieces: list[bytes] = []

    def declared(self, response: httpx.Response) -> None:
        """Raise :class:`ReplyTooLarge` before reading if the reply's length passes the cap."""
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.cap:
            raise ReplyTooLarge(f"the reply declares {length} bytes, over {self.cap}; not read")

    def take(self, piece: bytes) -> bool:
        """Keep ``piece``; False once the body passed the cap (the piece is dropped)."""
        self.size += len(piece)
        if self.size > self.cap:
            return False
        self.pieces.append(piece)
        return True

    def check(self) -> None:
        """Raise :class:`ReplyTooLarge` if the body passed the cap."""
        if self.size > self.cap:
            raise ReplyTooLarge(f"the reply passed {self.cap} bytes; not read further")

    def response(self, streamed: httpx.Response) -> httpx.Response:
        """``streamed``'s status and headers with the body read."""
        return httpx.Response(
            streamed.status_code,
            headers=streamed.headers,
            content=b"".join(self.pieces),
            request=streamed.request,
        )


async def _lines(response: httpx.Response, cap: int) -> AsyncGenerator[str, None]:
    """A streamed reply's lines (a watch's messages), each at most ``cap`` bytes (else
    :class:`ReplyTooLarge`, the read under it cancelled so that the HTTP stack's generators
    finish)."""
    pending = bytearray()
    with trio.CancelScope() as reading:
        async for piece in response.aiter_bytes():
            if len(pending) > cap:
                reading.cancel()
                continue
            pending += piece
            if b"\n" in piece:
                *lines, rest = pending.split(b"\n")
                pending = bytearray(rest)
                for line in lines:
                    yield line.decode()
    if len(pending) > cap:
        raise ReplyTooLarge(f"a watch message passed {cap} bytes")
    if pending and not reading.cancelled_caught:
        yield pending.decode()


def _transport_failure(endpoint: str, exc: httpx.HTTPError) -> str:
    return f"{endpoint}: {type(exc).__name__} {exc}".rstrip()


class SyncEtcd:
    """Blocking calls, each within ``settings.timeout`` over all endpoints."""

    def __init__(self, settings: EtcdSettings) -> None:
        self._calls = _Calls(settings)
        self._client = httpx.Client(verify=settings.tls(), timeout=settings.timeout)

    def close(self) -> None:
        self._client.close()

    def call(
        self, path: str, body: Mapping[str, Any], *, limit: float | None = None
    ) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` and return etcd's reply, within ``limit``
        seconds (``settings.timeout`` by default) over all endpoints."""
        deadline = time.monotonic() + (limit or self._calls.settings.timeout)
        attempts = self._calls.attempts(path, body, lambda: deadline - time.monotonic())
        post = next(attempts)
        while True:
            result: httpx.Response | httpx.HTTPError
            try:
                result = self._raw(post.endpoint, post.path, post.body, post.seconds)
            except httpx.HTTPError as exc:
                result = exc
            try:
                post = attempts.send(result)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _raw(self, endpoint: str, path: str, body: bytes, timeout: float) -> httpx.Response:
        request = self._client.build_request(
            "POST",
            f"{endpoint}/v3/{path}",
            content=body,
            headers=self._calls.headers(),
            timeout=timeout,
        )
        response = self._client.send(request, stream=True)
        try:
            pieces = _Capped(REPLY_LIMIT)
            pieces.declared(response)
            for piece in response.iter_bytes():
                if not pieces.take(piece):
                    break
            pieces.check()
        finally:
            response.close()
        return pieces.response(response)

    def range_prefix(self, prefix: bytes) -> tuple[int, list[KeyValue]]:
        """Every key under ``prefix`` and the revision they were read at."""
        reply = self.call("kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))})
        return revision_of(reply), [KeyValue.of(kv) for kv in reply.get("kvs", ())]

    def txn(
        self,
        compare: Sequence[Mapping[str, Any]],
        success: Sequence[Mapping[str, Any]],
        failure: Sequence[Mapping[str, Any]] = (),
        *,
        limit: float | None = None,
    ) -> tuple[bool, dict[str, Any]]:
        """One transaction: whether its compares held, and etcd's reply."""
        reply = self.call(
            "kv/txn",
            {"compare": list(compare), "success": list(success), "failure": list(failure)},
            limit=limit,
        )
        return bool(reply.get("succeeded")), reply

    def keepalive(self, lease: int, *, limit: float | None = None) -> int:
        """Refresh ``lease`` (within ``limit`` seconds); its TTL now (0: the lease is gone)."""
        reply = self.call("lease/keepalive", {"ID": str(lease)}, limit=limit)
        return int(reply.get("result", reply).get("TTL", 0))


class AsyncEtcd:
    """The same calls on trio, plus leases and watches."""

    def __init__(self, settings: EtcdSettings) -> None:
        self._calls = _Calls(settings)
        self._client = httpx.AsyncClient(verify=settings.tls(), timeout=settings.timeout)
        self.settings = settings

    async def aclose(self) -> None:
        await self._client.aclose()

    async def call(
        self, path: str, body: Mapping[str, Any], *, limit: float | None = None
    ) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` and return etcd's reply, within ``limit``
        seconds (``settings.timeout`` by default) over all endpoints."""
        deadline = trio.current_time() + (limit or self._calls.settings.timeout)
        attempts = self._calls.attempts(path, body, lambda: deadline - trio.current_time())
        post = next(attempts)
        while True:
            result: httpx.Response | httpx.HTTPError
            try:
                result = await self._raw(post.endpoint, post.path, post.body, post.seconds)
            except httpx.HTTPError as exc:
                result = exc
            try:
                post = attempts.send(result)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def _raw(self, endpoint: str, path: str, body: bytes, seconds: float) -> httpx.Response:
        request = self._client.build_request(
            "POST",
            f"{endpoint}/v3/{path}",
            content=body,
            headers=self._calls.headers(),
            timeout=seconds,
        )
        response = await self._client.send(request, stream=True)
        try:
            pieces = _Capped(REPLY_LIMIT)
            pieces.declared(response)
            # Past the cap, the next read is cancelled rather than the loop left, so
            # that every generator of the HTTP stack under it finishes.
            with trio.CancelScope() as reading:
                async for piece in response.aiter_bytes():
                    if not pieces.take(piece):
                        reading.cancel()
            pieces.check()
        finally:
            await response.aclose()
        return pieces.response(response)

    async def get(self, key: bytes) -> tuple[int, KeyValue | None]:
        reply = await self.call("kv/range", {"key": b64(key)})
        kvs = reply.get("kvs", ())
        return revision_of(reply), KeyValue.of(kvs[0]) if kvs else None

    async def range_prefix(self, prefix: bytes) -> tuple[int, list[KeyValue]]:
        reply = await self.call(
            "kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))}
        )
        return revision_of(reply), [KeyValue.of(kv) for kv in reply.get("kvs", ())]

    async def txn(
        self,
        compare: Sequence[Mapping[str, Any]],
        success: Sequence[Mapping[str, Any]],
        failure: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[bool, dict[str, Any]]:
        reply = await self.call(
            "kv/txn", {"compare": list(compare), "success": list(success), "failure": list(failure)}
        )
        return bool(reply.get("succeeded")), reply

    async def grant(self, ttl: int) -> int:
        """A new lease of ``ttl`` seconds; its id."""
        reply = await self.call("lease/grant", {"TTL": str(ttl)})
        lease = int(reply.get("ID", 0))
        if not lease:
            raise EtcdError(f"etcd granted no lease: {reply.get('error', reply)}")
        return lease

    async def keepalive(self, lease: int, *, limit: float | None = None) -> int:
        """Refresh ``lease`` (within ``limit`` seconds); its TTL now (0: the lease is gone)."""
        reply = await self.call("lease/keepalive", {"ID": str(lease)}, limit=limit)
        result = reply.get("result", reply)
        return int(result.get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        await self.call("lease/revoke", {"ID": str(lease)})

    async def watch(
        self, key: bytes, start_revision: int, *, prefix: bool = True
    ) -> AsyncGenerator[list[WatchEvent], None]:
        """The changes of the keys under ``key`` (or of ``key`` alone, without ``prefix``)
        from ``start_revision`` on, a batch per message etcd sends, until the stream ends (a
        member that went away: the caller watches again from the revision it has seen).
        Raises :class:`EtcdError` when etcd cancels the watch (its history was compacted
        past ``start_revision``), :class:`EtcdUnavailable` when no endpoint takes it."""
        calls = self._calls
        create = {"key": b64(key), "start_revision": str(start_revision)}
        if prefix:
            create["range_end"] = b64(prefix_end(key))
        body = orjson.dumps({"create_request": create})
        failures: list[str] = []
        for endpoint in calls.order():
            request = self._client.build_request(
                "POST",
                f"{endpoint}/v3/watch",
                content=body,
                headers=calls.headers(),
                timeout=httpx.Timeout(calls.settings.timeout, read=None),
            )
            try:
                response = await self._client.send(request, stream=True)
            except httpx.HTTPError as exc:
                failures.append(_transport_failure(endpoint, exc))
                continue
            try:
                if response.status_code != 200:
                    failures.append(f"{endpoint}: HTTP {response.status_code}")
                    continue
                calls.answered(endpoint)
                lines_of = _lines(response, REPLY_LIMIT)
                async with contextlib.aclosing(lines_of) as lines:
                    async for line in lines:
                        batch = _watch_batch(line)
                        if batch:
                            yield batch
                return
            except httpx.HTTPError as exc:
                failures.append(_transport_failure(endpoint, exc))
            finally:
                # Closed even when the watch is cancelled, so that no half-read body is
                # left to the garbage collector.
                with trio.CancelScope(shield=True):
                    await response.aclose()
        raise calls.unavailable(failures)

    async def watch_until(
        self,
        key: bytes,
        start_revision: int,
        done: Callable[[list[WatchEvent]], bool],
        *,
        prefix: bool = True,
    ) -> bool:
        """Watch (as :meth:`watch`) until ``done`` says a batch is the one awaited: True
        then, False when the stream ended first.

        The watch is ended by cancelling its next read rather than by leaving the loop,
        so that every generator of the HTTP stack under it finishes (one left suspended
        would be closed by the garbage collector, mid-stream)."""
        found = False
        with trio.CancelScope() as scope:
            async with contextlib.aclosing(
                self.watch(key, start_revision, prefix=prefix)
            ) as batches:
                async for events in batches:
                    if not found and done(events):
                        found = True
                        scope.cancel()
        return found


def _watch_batch(line: str) -> list[WatchEvent]:
    if not line.strip():
        return []
    message = orjson.loads(line)
    if "error" in message:
        raise EtcdError(f"etcd ended the watch: {message['error']}")
    result = message.get("result", {})
    if result.get("canceled") or result.get("compact_revision"):
        raise EtcdError(
            f"etcd cancelled the watch (history compacted to {result.get('compact_revision')})"
        )
    return [
        WatchEvent(kv=KeyValue.of(event["kv"]), deleted=event.get("type") == "DELETE")
        for event in result.get("events", ())
    ]


def put(key: bytes, value: bytes, *, lease: int = 0) -> dict[str, Any]:
    """A put operation of a transaction."""
    request: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def delete(key: bytes) -> dict[str, Any]:
    """A delete operation of a transaction."""
    return {"request_delete_range": {"key": b64(key)}}


def get(key: bytes) -> dict[str, Any]:
    """A read of ``key`` in a transaction (its reply: ``response_range``)."""
    return {"request_range": {"key": b64(key)}}


def modified_at(key: bytes, revision: int) -> dict[str, Any]:
    """A compare: ``key`` was last written at ``revision`` (0: it does not exist)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def created_at(key: bytes, revision: int) -> dict[str, Any]:
    """A compare: ``key`` exists and was created at ``revision`` (0: it does not exist)."""
    return {
        "key": b64(key),
        "target": "CREATE",
        "result": "EQUAL",
        "create_revision": str(revision),
    }
