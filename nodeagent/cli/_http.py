"""How the command line finds and reaches a daemon, over its own small HTTP/1.1 client.

Only the commands that make a request import this module; nothing here imports
``http.client`` (nor ``email``), ``typing``, ``dataclasses``, pydantic, httpx or trio, and
``ssl`` only for an ``https://`` URL: the transport is :mod:`nodeagent.cli._transport`.

* :func:`resolve_target` turns the common options (``--host``, ``--token``, ``--socket``)
  and their environment variables into a :class:`Target`; without ``--host`` the target
  is the local Unix socket, at the path the daemon itself uses
  (:func:`nodeagent._paths.default_socket`). :func:`resolve_master_target` does the same
  for ``nodeagent master …``: the ``NODEAGENT_MASTER_*`` variables, port 9622, the
  master's socket (:func:`nodeagent._paths.default_master_socket`).
* :func:`call` sends one HTTP/1.1 request over the Unix socket or TCP (TLS for
  ``https://``) with the bearer token, and returns a :class:`Reply` (status, raw text and
  parsed JSON); :func:`check` turns an error reply into its
  :class:`~nodeagent.cli._errors.AgentError` (the body read by
  :func:`nodeagent._wire.error_fields`, as every other caller reads it).
* :func:`stream` sends a ``GET`` whose reply does not end (the master's event stream) and
  returns a :class:`Streamed`, whose lines are read as they come.
* A master that does not lead answers a write with ``307`` and the leader's URL in
  ``Location``: :func:`call` sends the same request (method, body, headers, the token) there,
  at most :data:`MAX_REDIRECTS` times in a row, and only to a master the command was given
  (``--host URL[,URL…]``) or the origin that redirected (see :func:`call`).

Errors are those of :mod:`nodeagent.cli._errors`: a connection that fails is
:class:`~nodeagent.cli._errors.Unreachable`, an unusable option a
:class:`~nodeagent.cli._errors.UsageError`.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import quote, urlsplit

from nodeagent._paths import default_master_socket, default_socket
from nodeagent._wire import TokenFileError, error_fields, read_token_file
from nodeagent.cli._errors import (
    AgentError,
    AgentFailed,
    Refused,
    Unauthorized,
    Unreachable,
    UsageError,
)
from nodeagent.cli._record import record
from nodeagent.cli._transport import (
    MAX_REPLY_BYTES,
    BrokenReply,
    Endpoint,
    ReplyTooLarge,
    Stream,
    exchange,
    open_stream,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from typing import Any

__all__ = [
    "DEFAULT_MASTER_PORT",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT_S",
    "MAX_REDIRECTS",
    "Reply",
    "Streamed",
    "Target",
    "call",
    "check",
    "path_segment",
    "request",
    "resolve_master_target",
    "resolve_target",
    "stream",
]

DEFAULT_PORT = 9621
"""The agent's default TCP port (``listen = ["127.0.0.1:9621"]``)."""

DEFAULT_MASTER_PORT = 9622
"""The master's default TCP port (``listen = ["127.0.0.1:9622"]``)."""

DEFAULT_TIMEOUT_S = 75.0
"""How long one exchange (connect, send, read the whole reply) may take. Longer than the
daemon's default transaction lifetime (30 s), because a state-changing request waits while
a drain transaction is pending."""

MAX_REDIRECTS = 3
"""How many redirects (307, 308) in a row :func:`call` follows; one more is an error."""

_REDIRECTS = (307, 308)


# --- targets ------------------------------------------------------------------------------


@record
class Target:
    """One agent (or the master, ``peer="master"``): its Unix socket (``unix``) or its
    TCP address, and the bearer token. ``peer`` names it in error codes and messages."""

    unix: Path | None = None
    scheme: str = "http"
    host: str = ""
    port: int = DEFAULT_PORT
    base_path: str = ""
    token: str | None = None
    peer: str = "agent"
    #: The variable that names the token file, for messages (``--token`` or it).
    token_variable: str = "NODEAGENT_TOKEN_FILE"
    #: The masters the command was given (``--host`` lists them), by scheme, host and
    #: port: the only places besides this target's own origin a redirect may lead to.
    masters: tuple[tuple[str, str, int], ...] = ()
    #: The variable that names the masters, for messages.
    host_variable: str = "NODEAGENT_HOST"

    @property
    def origin(self) -> tuple[str, str, int] | None:
        """Scheme, host and port; ``None`` for the Unix socket."""
        return None if self.unix is not None else (self.scheme, self.host.lower(), self.port)

    def describe(self) -> str:
        if self.unix is not None:
            return f"unix:{self.unix}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}"


def _parse_host(value: str, default_port: int = DEFAULT_PORT) -> tuple[str, str, int, str]:
    """``URL`` of ``--host``: ``https://h:p/prefix``, ``h:p`` or ``h`` (http, default port)."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise UsageError("cli.bad_url", f"invalid --host {value!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            "cli.bad_url",
            f"invalid --host {value!r}: expected http://HOST[:PORT] or https://HOST[:PORT]",
        )
    if parts.query or parts.fragment or parts.username is not None:
        raise UsageError("cli.bad_url", f"invalid --host {value!r}: only scheme, host, port, path")
    if port is None:
        port = default_port
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


def _read_token(path: str) -> str:
    try:
        return read_token_file(path)
    except TokenFileError as exc:
        raise UsageError("cli.token_file", str(exc)) from None


def resolve_target(
    *,
    host: str | None,
    token_file: str | None,
    socket_path: str | None,
    env: Mapping[str, str],
    uid: int,
) -> Target:
    """The agent the common options designate.

    Each option falls back to its variable: ``--host`` to ``NODEAGENT_HOST``, ``--token``
    to ``NODEAGENT_TOKEN_FILE``, ``--socket`` to ``NODEAGENT_SOCKET``. A host (from either)
    selects TCP; otherwise the Unix socket (``--socket`` or
    :func:`~nodeagent._paths.default_socket`). The token file is read here. Raises
    :class:`~nodeagent.cli._errors.UsageError`.
    """
    host = host or env.get("NODEAGENT_HOST") or None
    token_file = token_file or env.get("NODEAGENT_TOKEN_FILE") or None
    token = None if token_file is None else _read_token(token_file)
    if host is not None:
        scheme, hostname, port, base = _parse_host(host)
        return Target(scheme=scheme, host=hostname, port=port, base_path=base, token=token)
    unix = Path(socket_path) if socket_path else default_socket(env, uid)
    return Target(unix=unix, token=token)


def resolve_master_target(
    *,
    host: str | None,
    token_file: str | None,
    socket_path: str | None,
    env: Mapping[str, str],
    uid: int,
) -> Target:
    """The master the common options of ``nodeagent master …`` designate.

    As :func:`resolve_target`, with the master's variables (``NODEAGENT_MASTER_HOST``,
    ``NODEAGENT_MASTER_TOKEN_FILE``, ``NODEAGENT_MASTER_SOCKET``), its default port
    (:data:`DEFAULT_MASTER_PORT`) and its socket
    (:func:`~nodeagent._paths.default_master_socket`). ``--host`` may list several masters
    separated by commas (``https://m1:9622,https://m2:9622``): the command goes to the
    first, and a redirect may lead to any of them (:attr:`Target.masters`). Raises
    :class:`~nodeagent.cli._errors.UsageError`.
    """
    host = host or env.get("NODEAGENT_MASTER_HOST") or None
    token_file = token_file or env.get("NODEAGENT_MASTER_TOKEN_FILE") or None
    token = None if token_file is None else _read_token(token_file)
    if host is not None:
        listed = [_parse_host(h, DEFAULT_MASTER_PORT) for h in host.split(",") if h.strip()]
        if not listed:
            raise UsageError("cli.bad_url", f"invalid --host {host!r}: no master named")
        scheme, hostname, port, base = listed[0]
        return Target(
            scheme=scheme,
            host=hostname,
            port=port,
            base_path=base,
            token=token,
            peer="master",
            token_variable="NODEAGENT_MASTER_TOKEN_FILE",
            masters=tuple((s, h.lower(), p) for s, h, p, _ in listed),
            host_variable="NODEAGENT_MASTER_HOST",
        )
    unix = Path(socket_path) if socket_path else default_master_socket(env, uid)
    return Target(
        unix=unix,
        token=token,
        peer="master",
        token_variable="NODEAGENT_MASTER_TOKEN_FILE",
        host_variable="NODEAGENT_MASTER_HOST",
    )


# --- the transport ------------------------------------------------------------------------


@record
class Reply:
    """One answer: HTTP ``status``, the body as ``text``, and ``data`` when it is JSON."""

    status: int
    text: str
    data: Any = None
    content_type: str = ""


def _endpoint(target: Target) -> Endpoint:
    if target.unix is not None:
        return Endpoint(unix=os.fspath(target.unix))
    return Endpoint(host=target.host, port=target.port, tls=target.scheme == "https")


def _too_large(target: Target, exc: ReplyTooLarge, what: str = "") -> AgentFailed:
    """``<peer>.bad_reply``: the peer sent more than the command reads."""
    return AgentFailed(
        f"{target.peer}.bad_reply",
        f"the {target.peer} at {target.describe()} sent {what}{exc}",
        reply=Reply(status=exc.status, text=""),
    )


def _unreachable(target: Target, exc: BaseException) -> Unreachable:
    where = target.describe()
    peer = target.peer
    if isinstance(exc, TimeoutError):
        return Unreachable(f"{peer}.timeout", f"no answer from the {peer} at {where} in time")
    if isinstance(exc, FileNotFoundError):
        reason = f"no such socket (is the {peer} running?)"
    elif isinstance(exc, ConnectionRefusedError):
        reason = f"connection refused (is the {peer} running?)"
    elif isinstance(exc, PermissionError):
        reason = f"permission denied (the socket is for the {peer}'s group)"
    elif isinstance(exc, socket.gaierror):
        reason = f"cannot resolve {target.host}: {exc.strerror}"
    elif isinstance(exc, BrokenReply):
        reason = f"the connection broke ({exc})"
    elif isinstance(exc, OSError):
        reason = exc.strerror or type(exc).__name__
        if type(exc).__module__ == "ssl" or type(exc).__name__.startswith("SSL"):
            reason = f"TLS: {exc}"
    else:
        reason = str(exc)
    return Unreachable(f"{peer}.unreachable", f"cannot reach the {peer} at {where}: {reason}")


def call(
    target: Target,
    method: str,
    path: str,
    body: Mapping[str, Any] | None = None,
    *,
    content: bytes | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    limit: int = MAX_REPLY_BYTES,
) -> Reply:
    """Send one request and return the daemon's reply, whatever its status.

    ``path`` is the API path (``/v1/drain``); ``body`` is sent as JSON, ``content`` (bytes
    already in JSON, sent as they are) instead of it. A body that announces JSON but does
    not parse raises :class:`~nodeagent.cli._errors.AgentFailed` ``<peer>.bad_reply``, and
    so does a body longer than ``limit`` bytes (not read further); every connection
    failure (socket missing, refused, reset, a reply cut short or not HTTP, TLS) raises
    :class:`~nodeagent.cli._errors.Unreachable`, and so does an exchange that has not
    ended ``timeout`` seconds after it began (``<peer>.timeout``; each redirect followed
    has ``timeout`` of its own).

    A ``307`` or ``308`` whose ``Location`` is an absolute ``http(s)://`` URL (a master
    that does not lead, naming the leader) is followed: the same method, body and headers,
    with the target's token, go to that URL (TLS for ``https://``, verified as for
    ``--host``), at most :data:`MAX_REDIRECTS` times in a row; one more raises
    :class:`~nodeagent.cli._errors.AgentFailed` ``<peer>.too_many_redirects``. A redirect
    the command line cannot follow raises instead of sending anything: to an address that
    is neither one of the masters given (:attr:`Target.masters`) nor the origin that
    redirected (from the Unix socket: any TCP address not given):
    :class:`~nodeagent.cli._errors.AgentFailed` ``<peer>.redirect_refused``, naming it and
    how to list the masters; to TCP without a token:
    :class:`~nodeagent.cli._errors.Unauthorized` ``cli.token_required``, naming the URL
    and how to give a token; from ``https://`` to ``http://`` with a token:
    :class:`~nodeagent.cli._errors.AgentFailed` ``<peer>.insecure_redirect``. Any other
    ``Location`` leaves the reply as it is (its error body says why).
    """
    headers = {"Accept": "application/json", "User-Agent": "nodeagent-cli"}
    if target.token is not None:
        headers["Authorization"] = f"Bearer {target.token}"
    payload: bytes | None = content
    if body is not None:
        payload = json.dumps(body, separators=(",", ":")).encode()
    if payload is not None:
        headers["Content-Type"] = "application/json"
    where, where_path = target, target.base_path + path
    hops: list[str] = []
    while True:
        reply, location = _exchange(
            where,
            method,
            where_path,
            payload=payload,
            headers=headers,
            timeout=timeout,
            limit=limit,
        )
        if reply.status not in _REDIRECTS or location is None:
            return reply
        found = _redirected(where, location)
        if found is None:
            return reply
        hops.append(location)
        if len(hops) > MAX_REDIRECTS:
            raise AgentFailed(
                f"{target.peer}.too_many_redirects",
                f"{method} {path}: redirected {len(hops)} times in a row "
                f"({target.describe()} → {' → '.join(hops)}); the {target.peer}s do not agree "
                "on who leads: try again in a moment",
                reply=reply,
            )
        _check_hop(target, where, found[0], location, reply)
        where, where_path = found


def _redirected(current: Target, location: str) -> tuple[Target, str] | None:
    """The target and path a ``Location`` names, if it is an absolute http(s) URL."""
    try:
        parts = urlsplit(location)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    found = Target(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        token=current.token,
        peer=current.peer,
        token_variable=current.token_variable,
        masters=current.masters,
        host_variable=current.host_variable,
    )
    return found, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _check_hop(first: Target, current: Target, found: Target, location: str, reply: Reply) -> None:
    """Raise when the redirect from ``current`` to ``found`` must not be followed."""
    peer = first.peer
    if found.origin not in first.masters and found.origin != current.origin:
        given = ", ".join(f"{s}://{h}:{p}" for s, h, p in first.masters) or "none"
        raise AgentFailed(
            f"{peer}.redirect_refused",
            f"the {peer} at {current.describe()} redirected to {location}, which is not one "
            f"of the {peer}s given ({given}): the token is sent to no other address; list "
            f"every {peer} with --host URL,URL… (or {first.host_variable})",
            reply=reply,
        )
    if found.token is None:
        raise Unauthorized(
            "cli.token_required",
            f"the {peer} at {current.describe()} sent this request to the leader at "
            f"{location}, which needs a token over TCP: give one with --token FILE "
            f"(or {first.token_variable}), or send the request to the leader's own socket",
            reply=reply,
        )
    if current.unix is None and current.scheme == "https" and found.scheme != "https":
        raise AgentFailed(
            f"{peer}.insecure_redirect",
            f"the {peer} at {current.describe()} redirected to {location} without TLS: "
            "the token is not sent in clear; give the leader's https:// URL with --host",
            reply=reply,
        )


def _exchange(
    target: Target,
    method: str,
    path: str,
    *,
    payload: bytes | None,
    headers: Mapping[str, str],
    timeout: float,
    limit: int,
) -> tuple[Reply, str | None]:
    """One request to ``target``: the reply, and its ``Location`` header (or ``None``)."""
    try:
        response = exchange(
            _endpoint(target),
            method,
            path,
            headers=headers.items(),
            body=payload,
            timeout=timeout,
            limit=limit,
        )
    except ReplyTooLarge as exc:
        raise _too_large(target, exc) from None
    except (OSError, BrokenReply) as exc:
        raise _unreachable(target, exc) from None
    raw = response.body
    text = raw.decode("utf-8", errors="replace")
    content_type = response.headers.get("content-type", "")
    location = response.headers.get("location")
    reply = Reply(status=response.status, text=text, content_type=content_type)
    if content_type.startswith("application/json"):
        try:
            data = json.loads(text)
        except ValueError:
            raise AgentFailed(
                f"{target.peer}.bad_reply",
                f"the {target.peer} at {target.describe()} sent invalid JSON "
                f"(HTTP {response.status})",
                reply=reply,
            ) from None
        reply = Reply(status=reply.status, text=text, data=data, content_type=content_type)
    return reply, location


def check(reply: Reply, *, peer: str = "agent") -> Reply:
    """Return ``reply`` if it is a success (2xx); raise its
    :class:`~nodeagent.cli._errors.AgentError` if not.

    A reply without the API's error body gets the code ``<peer>.error`` (5xx) or
    ``<peer>.bad_reply``."""
    if 200 <= reply.status < 300:
        return reply
    fields = error_fields(reply.data)
    condor_code: int | None = None
    if fields is not None:
        code, message, condor_code = fields
    else:
        code = f"{peer}.error" if reply.status >= 500 else f"{peer}.bad_reply"
        lines = reply.text.strip().splitlines()
        message = f"HTTP {reply.status}" + (f": {lines[0][:200]}" if lines else "")
    cls: type[AgentError]
    if reply.status in (401, 403):
        cls = Unauthorized
    elif 400 <= reply.status < 500:
        cls = Refused
    else:
        cls = AgentFailed
    raise cls(code, message, reply=reply, condor_code=condor_code)


def request(
    target: Target,
    method: str,
    path: str,
    body: Mapping[str, Any] | None = None,
    *,
    content: bytes | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    limit: int = MAX_REPLY_BYTES,
) -> Reply:
    """:func:`call`, then :func:`check`; for successful JSON endpoints, ``data`` is set."""
    reply = call(target, method, path, body, content=content, timeout=timeout, limit=limit)
    check(reply, peer=target.peer)
    if reply.data is None and reply.content_type.startswith("application/json"):
        peer = target.peer
        raise AgentFailed(f"{peer}.bad_reply", f"the {peer} sent an empty JSON reply", reply=reply)
    return reply


def path_segment(value: str) -> str:
    """``value`` quoted for use as one path segment (a claim or request id)."""
    return quote(value, safe="")


# --- a reply read as it comes -------------------------------------------------------------


class Streamed:
    """A success reply whose body is read as it comes (:func:`stream`): its ``headers``,
    then :meth:`lines`. Close it (it is a context manager)."""

    def __init__(self, target: Target, reply: Stream) -> None:
        self._target = target
        self._stream = reply
        self.headers = reply.headers

    def __enter__(self) -> Streamed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stream.close()

    def lines(self) -> Iterator[bytes]:
        """Each line of the body as it comes (an empty one too), until the body ends.
        A connection that breaks, a body cut short, and nothing for the stream's idle
        time raise :class:`~nodeagent.cli._errors.Unreachable`; a line too long
        :class:`~nodeagent.cli._errors.AgentFailed` ``<peer>.bad_reply``."""
        target = self._target
        try:
            yield from self._stream.lines()
        except ReplyTooLarge as exc:
            raise _too_large(target, exc, "a line of ") from None
        except (OSError, BrokenReply) as exc:
            raise _unreachable(target, exc) from None


def stream(
    target: Target, path: str, *, idle: float, timeout: float = DEFAULT_TIMEOUT_S
) -> Streamed:
    """``GET path`` with the target's token, its reply read as it comes: returns once a
    success (2xx) has sent its head, within ``timeout`` seconds; each later read of its
    body waits ``idle`` seconds at most (:meth:`Streamed.lines`).

    An error reply is read whole and raised as :func:`request` raises it (its body by
    :func:`check`: :class:`~nodeagent.cli._errors.Refused`,
    :class:`~nodeagent.cli._errors.Unauthorized`,
    :class:`~nodeagent.cli._errors.AgentFailed`); a connection that fails, as
    :func:`call` does (:class:`~nodeagent.cli._errors.Unreachable`). No redirect is
    followed: every master answers the reads.
    """
    headers = {"Accept": "application/x-ndjson", "User-Agent": "nodeagent-cli"}
    if target.token is not None:
        headers["Authorization"] = f"Bearer {target.token}"
    try:
        opened = open_stream(
            _endpoint(target),
            "GET",
            target.base_path + path,
            headers=headers.items(),
            timeout=timeout,
            idle=idle,
        )
    except (OSError, BrokenReply) as exc:
        raise _unreachable(target, exc) from None
    if 200 <= opened.status < 300:
        return Streamed(target, opened)
    try:
        with opened:
            raw = opened.read(limit=1 << 20)
    except ReplyTooLarge as exc:
        raise _too_large(target, exc) from None
    except (OSError, BrokenReply) as exc:
        raise _unreachable(target, exc) from None
    text = raw.decode("utf-8", errors="replace")
    content_type = opened.headers.get("content-type", "")
    data = None
    if content_type.startswith("application/json"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
    check(
        Reply(status=opened.status, text=text, data=data, content_type=content_type),
        peer=target.peer,
    )
    raise AssertionError("check raises for a status that is no success")  # pragma: no cover
