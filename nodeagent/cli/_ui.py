"""What ``nodeagent master ui`` does: the maintenance page on loopback, in front of the master.

As ``kubectl proxy`` and ``nomad ui`` do, the command listens on a loopback address,
serves the page (the package's own files, :mod:`nodeagent.master._ui`) and forwards the
page's reads to the master the command line reaches (its Unix socket, or ``--host`` with
the operator's token: the token stays in this process, never in a URL or in the browser).
It prints the URL and, on a terminal, opens a browser there unless ``--no-open``.

What it forwards, and to whom:

* only ``GET`` of the paths the page reads (:data:`FORWARDED`: the plan, the operations,
  the event stream, the leader), with their query, ``Accept`` and ``Last-Event-ID``; the
  reply is relayed as it comes (the event stream unbuffered), with its status, content type
  and caching headers;
* any other method is 405, any other path 404, a request with a body 400;
* a request whose ``Host`` is not the address it listens on (``127.0.0.1:PORT``, or
  ``localhost:PORT``) is 403 ``ui.host_refused``: a name that a foreign site points at
  loopback (DNS rebinding) reaches nothing; one whose ``Origin`` is another origin is 403
  ``ui.origin_refused``. No reply carries a CORS header, so no other site's script may
  read one.

Each connection is served by a thread of its own and closed after one reply. The master
is asked ``GET /v1/leader`` before the listener opens, so a master that cannot be reached,
or that refuses the token, ends the command at once with the usual exit statuses (3, 4).
Ctrl-C or SIGTERM stops it (exit 0). Standard library only, without ``typing``: no import
of the server stack.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sys
import threading
from http import HTTPStatus

from nodeagent.cli._common import master_target
from nodeagent.cli._errors import UsageError
from nodeagent.cli._http import request
from nodeagent.cli._transport import BrokenReply, Endpoint, open_stream
from nodeagent.master._ui import PAGE_HEADERS, page_file

TYPE_CHECKING = False  # not typing's: the command imports neither typing nor dataclasses
if TYPE_CHECKING:
    from nodeagent.cli._http import Target

__all__ = ["FORWARDED", "forwarded", "loopback_address", "ui"]

#: The paths forwarded to the master (``GET`` only), as patterns of the whole path.
FORWARDED = re.compile(
    r"/v1/maintenance/plan|/v1/maintenance/operations(?:/[A-Za-z0-9._-]{1,64})?"
    r"|/v1/events|/v1/leader"
)
_HEAD_LIMIT = 64 * 1024
_READ_TIMEOUT_S = 30.0
_MASTER_TIMEOUT_S = 75.0
#: The longest an event stream may stay silent (the master sends a comment every 15 s).
_IDLE_S = 60.0
_RELAYED = ("content-type", "cache-control", "retry-after")
#: What a request target may hold (visible ASCII: no space, no control character), and a
#: header forwarded: nothing the master could read as the end of a line.
_TARGET = re.compile(r"/[!-~]{0,8191}")
_VALUE = re.compile(r"[ -~]{0,1024}")


def loopback_address(text: str) -> tuple[str, int]:
    """``--listen``: ``HOST:PORT`` (``[::1]:PORT`` for IPv6), HOST a loopback address or
    ``localhost``, PORT 0 (any free port) to 65535. Raises
    :class:`~nodeagent.cli._errors.UsageError` ``cli.usage`` otherwise."""
    host, colon, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    bad = not colon or not port_text.isdigit() or int(port_text) > 65535
    if not bad and host not in {"localhost", "::1"}:
        parts = host.split(".")
        bad = not (
            len(parts) == 4
            and parts[0] == "127"
            and all(p.isdigit() and int(p) <= 255 for p in parts)
        )
    if bad:
        raise UsageError(
            "cli.usage",
            f"--listen {text!r}: expected a loopback HOST:PORT (127.0.0.1:8080, [::1]:0, "
            "localhost:0): the page forwards the operator's rights, so it listens on "
            "loopback only",
        )
    return ("127.0.0.1" if host == "localhost" else host), int(port_text)


def forwarded(method: str, path: str) -> bool:
    """Whether ``method path`` (no query) goes to the master."""
    return method == "GET" and FORWARDED.fullmatch(path) is not None


class _Proxy:
    """The listener's state: where it listens (its URL and the ``Host`` values it takes)
    and the master it forwards to."""

    def __init__(self, sock: socket.socket, target: Target) -> None:
        self.sock = sock
        self.target = target
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        self.origin = f"http://{shown}:{port}"
        self.url = f"{self.origin}/ui/"
        self.hosts = {f"{shown}:{port}", f"localhost:{port}"}
        self.origins = {f"http://{h}" for h in self.hosts}
        if target.unix is not None:
            self.endpoint = Endpoint(unix=os.fspath(target.unix))
        else:
            self.endpoint = Endpoint(
                host=target.host, port=target.port, tls=target.scheme == "https"
            )

    # --- one connection -------------------------------------------------------------------

    def serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the browser went away: nothing to answer
            conn.settimeout(_READ_TIMEOUT_S)
            try:
                head = _read_head(conn)
            except ValueError as exc:
                _error(conn, 400, "request.invalid", str(exc))
                return
            if head is not None:
                self.answer(conn, *head)

    def answer(
        self, conn: socket.socket, method: str, target: str, headers: dict[str, str]
    ) -> None:
        path, _, query = target.partition("?")
        if _TARGET.fullmatch(target) is None:
            _error(conn, 400, "request.invalid", "a request target of visible ASCII only")
            return
        if headers.get("host", "").lower() not in self.hosts:
            _error(conn, 403, "ui.host_refused", f"this listener answers {self.origin} only")
            return
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in self.origins:
            _error(conn, 403, "ui.origin_refused", f"a request from {origin} is not the page's")
            return
        if method != "GET":
            _error(conn, 405, "http.method_not_allowed", "only GET", allow=True)
            return
        if headers.get("transfer-encoding") or headers.get("content-length", "0").strip() != "0":
            _error(conn, 400, "request.invalid", "a GET has no body")
            return
        for name in ("accept", "last-event-id"):
            if _VALUE.fullmatch(headers.get(name, "")) is None:
                _error(conn, 400, "request.invalid", f"{name}: printable ASCII only")
                return
        if path in ("/", "/ui"):
            _send_head(conn, 302, "Found", [("Location", "/ui/"), ("Content-Length", "0")])
            return
        if path.startswith("/ui/"):
            found = page_file(path.removeprefix("/ui/"))
            if found is None:
                _error(conn, 404, "http.not_found", f"no page file {path!r}")
                return
            body, content_type = found
            fields = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
            _send_head(conn, 200, "OK", [*fields, *PAGE_HEADERS])
            conn.sendall(body)
            return
        if not forwarded(method, path):
            _error(conn, 404, "http.not_found", f"{path} is not forwarded to the master")
            return
        self.forward(conn, path + (f"?{query}" if query else ""), headers)

    def forward(self, conn: socket.socket, target: str, headers: dict[str, str]) -> None:
        """Relay ``GET target`` to the master and its reply back, as it comes."""
        sent = [("Accept", headers.get("accept", "application/json"))]
        sent.append(("User-Agent", "nodeagent-ui"))
        if "last-event-id" in headers:
            sent.append(("Last-Event-ID", headers["last-event-id"]))
        if self.target.token is not None:
            sent.append(("Authorization", f"Bearer {self.target.token}"))
        where = self.target.base_path + target
        try:
            stream = open_stream(
                self.endpoint, "GET", where, headers=sent, timeout=_MASTER_TIMEOUT_S, idle=_IDLE_S
            )
        except (OSError, BrokenReply) as exc:
            reason = (
                "timed out" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
            )
            _error(
                conn,
                502,
                "master.unreachable",
                f"cannot reach the master at {self.target.describe()}: {reason}",
            )
            return
        with stream:
            fields = [(name, stream.headers[name]) for name in _RELAYED if name in stream.headers]
            if "cache-control" not in stream.headers:
                fields.append(("Cache-Control", "no-store"))
            fields.append(("X-Content-Type-Options", "nosniff"))
            _send_head(conn, stream.status, stream.reason or _reason(stream.status), fields)
            try:
                for piece in stream.body():
                    conn.sendall(piece)
            except (TimeoutError, BrokenReply):
                return  # the browser sees the reply end early (an event stream reconnects)

    # --- the listener ---------------------------------------------------------------------

    def run(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()


def _read_head(conn: socket.socket) -> tuple[str, str, dict[str, str]] | None:
    """The request line and headers (names in lower case, each with its last value);
    ``None`` when the browser closed first. Raises :class:`ValueError` for what is not
    an HTTP/1.x request head of at most 64 KiB."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(8192)
        if not chunk:
            return None
        data += chunk
        if len(data) > _HEAD_LIMIT:
            raise ValueError("request head too large")
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    words = lines[0].split(" ")
    if len(words) != 3 or not words[2].startswith("HTTP/1.") or not words[1].startswith("/"):
        raise ValueError("not an HTTP/1.x request line")
    method, target, _ = words
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError("a malformed header line")
        headers[name.strip().lower()] = value.strip()
    return method, target, headers


def _send_head(
    conn: socket.socket, status: int, reason: str, fields: list[tuple[str, str]]
) -> None:
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in fields)]
    lines.append("Connection: close")
    conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))


def _reason(status: int) -> str:
    """The reason phrase of ``status`` (a server may send none: ``HTTP/1.1 200``)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _error(
    conn: socket.socket, status: int, code: str, message: str, *, allow: bool = False
) -> None:
    """An error as the API writes them (``{"error": {"code", "message"}}``)."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    fields = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if allow:
        fields.append(("Allow", "GET"))
    _send_head(conn, status, _reason(status), fields)
    conn.sendall(body)


class _Stop(Exception):
    """SIGTERM: stop serving."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def ui(
    *,
    listen: str,
    no_open: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master ui``: serve the maintenance page on ``listen`` (loopback) until
    Ctrl-C or SIGTERM, forwarding its reads to the master; print its URL, and open a
    browser on a terminal unless ``no_open``."""
    address = loopback_address(listen)
    target = master_target(host, token, socket_path)
    request(target, "GET", "/v1/leader", timeout=10)  # reachable, and the token is taken
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError("cli.listen", f"cannot listen on {listen}: {exc.strerror}") from None
    sock.listen(64)
    proxy = _Proxy(sock, target)
    sys.stdout.write(
        f"The maintenance page of the master at {target.describe()}:\n  {proxy.url}\n"
        "(this address alone; Ctrl-C to stop)\n"
    )
    sys.stdout.flush()
    if not no_open and sys.stdout.isatty():
        import webbrowser  # noqa: PLC0415  (only on a terminal)

        webbrowser.open(proxy.url)
    signal.signal(signal.SIGTERM, _stop)
    try:
        proxy.run()
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        sock.close()
