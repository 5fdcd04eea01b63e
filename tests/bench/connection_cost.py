"""What a connection costs the master's HTTP server: CPU per request, new or kept alive, with
and without TLS, and memory per idle kept-alive connection.

The server is :mod:`nodeagent._serving._http11` (the master's TCP listeners) in a process of
its own, serving an app that reads the body and answers a small JSON reply (no master: the
cost of the ad itself is ``ad_ingest.py``'s). The client is this process, over loopback.

* ``concurrent``: requests of ``--body`` bytes as ``ad_ingest.py`` pushes ads (its client,
  :func:`ad_ingest.drive`: 64 connections with a request in flight each, 2 s of warm-up,
  ``--seconds`` measured), kept alive, then each on a new connection: the server's CPU per
  request and the requests a second.
* ``requests``: ``--requests`` requests of ``--body`` bytes one after the other, on one
  kept-alive connection, then each on a new connection, then each on a new TLS connection
  (a full handshake), then each on a new TLS connection resuming the previous one's
  session: the server's CPU per request (psutil, user + system), for an RSA-2048 and an
  ECDSA P-256 certificate made by ``openssl`` (skipped without it).
* ``idle``: ``--idle`` connections opened, one request each, then left open (the server's
  idle timeout raised to an hour for this): the server's RSS and the kernel's slab memory
  (``/proc/meminfo``, both ends of each connection) per connection.

Prints one JSON document. Usage: ``python tests/bench/connection_cost.py [--seconds 5]
[--requests 500] [--idle 5000] [--body 13500]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import resource
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._benchlib import terminate
from tests.bench.ad_ingest import drive
from tests.certificates import CertificateUnavailable, self_signed

REPLY = b'{"machine_id":{"hostname":"node00001.bench","ip":"10.0.0.1"},"mode":"UP"}'


# ---------------------------------------------------------------------------- the server


def serve(port: int, cert: str | None, key: str | None, idle_timeout: float) -> None:
    """The server process: the h11 server on 127.0.0.1:``port`` (TLS with ``cert``)."""
    import trio

    from nodeagent._serving import _http11
    from nodeagent._serving._http import read_body

    _http11.KEEP_ALIVE_TIMEOUT = idle_timeout

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await read_body(scope, receive, 1 << 20)
        headers = [(b"content-length", str(len(REPLY)).encode()), (b"content-type", b"json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": REPLY})

    async def main() -> None:
        tls = None if cert is None or key is None else (Path(cert), Path(key))
        async with trio.open_nursery() as nursery:
            await _http11.serve_http(nursery, app, [f"127.0.0.1:{port}"], tls=tls)
            print("ready", flush=True)

    trio.run(main)


class Server:
    """The server process, ended (SIGTERM, then SIGKILL) when the block ends."""

    def __init__(self, *, cert: Path | None = None, key: Path | None = None) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        command = [sys.executable, __file__, "--serve", str(self.port)]
        if cert is not None and key is not None:
            command += ["--cert", str(cert), "--key", str(key)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            raise RuntimeError("the server did not start")
        self.process = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        times = self.process.cpu_times()
        return float(times.user + times.system)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


# ---------------------------------------------------------------------------- the client


def request(body: bytes) -> bytes:
    return (
        b"POST /v1/ads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


def exchange(sock: socket.socket, data: bytes) -> None:
    """Send one request and read its whole reply (the reply is small: one read or two)."""
    sock.sendall(data)
    reply = b""
    while not reply.endswith(REPLY):
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        reply += chunk


def per_request(server: Server, count: int, data: bytes, make: Any) -> float:
    """The server's CPU (µs) per request ``data``, each on the socket ``make(last)`` gives
    (``last``, the socket of the request before, or a new one)."""
    sock = None
    started = server.cpu()
    for _ in range(count):
        made = make(sock)
        if made is not sock and sock is not None:
            sock.close()
        sock = made
        exchange(sock, data)
    if sock is not None:
        sock.close()
    return round((server.cpu() - started) / count * 1e6, 1)


def tls_connect(
    context: ssl.SSLContext,
    address: tuple[str, int],
    session: ssl.SSLSession | None,
    last: object = None,
) -> ssl.SSLSocket:
    """A new TLS connection to ``address`` (resuming ``session`` if given)."""
    raw = socket.create_connection(address)
    return context.wrap_socket(raw, server_hostname="127.0.0.1", session=session)


def concurrent_cost(seconds: float, body: bytes) -> dict[str, Any]:
    """Requests as ``ad_ingest.py``'s client sends them, against the server alone."""
    figures: dict[str, Any] = {}
    with Server() as server:
        address = ("127.0.0.1", server.port)
        prepared = [request(body)] * 64
        for name, reconnect in (("keep_alive", False), ("new_connection", True)):
            run = drive(address, prepared, 64, server.proc.pid, seconds, reconnect=reconnect)
            per_second = run["ads_per_master_cpu_second"]
            figures[name] = {
                "requests_per_second": run["ads_per_second"],
                "server_cpu_percent": run["master_cpu_percent"],
                "server_cpu_us": round(1e6 / per_second, 1) if per_second else None,
                "errors": run["errors"],
            }
    return figures


def requests_cost(count: int, data: bytes, tmp: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with Server() as server:
        address = ("127.0.0.1", server.port)
        figures["keep_alive_us"] = per_request(
            server, count, data, lambda s: s or socket.create_connection(address)
        )
        figures["new_connection_us"] = per_request(
            server, count, data, lambda s: socket.create_connection(address)
        )
    for kind in ("rsa2048", "ecdsa_p256"):
        try:
            cert, key = self_signed(tmp, kind=kind)
        except (CertificateUnavailable, FileNotFoundError):
            figures[kind] = "openssl cannot make a certificate here"
            continue
        context = ssl.create_default_context(cafile=str(cert))
        with Server(cert=cert, key=key) as server:
            address = ("127.0.0.1", server.port)
            sessions: list[ssl.SSLSession | None] = [None]

            full = per_request(
                server, count, data, functools.partial(tls_connect, context, address, None)
            )
            resumed_count = 0
            started = server.cpu()
            for _ in range(count):
                sock = tls_connect(context, address, sessions[-1])
                exchange(sock, data)
                resumed_count += bool(sock.session_reused)
                sessions.append(sock.session)
                sock.close()
            figures[kind] = {
                "new_tls_connection_us": full,
                "resumed_tls_connection_us": round((server.cpu() - started) / count * 1e6, 1),
                "sessions_resumed": resumed_count,
            }
    figures["requests"] = count
    return figures


def slab_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Slab:"):
            return int(line.split()[1])
    return 0


def idle_cost(count: int, data: bytes) -> dict[str, Any]:
    limit = count + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < limit:
        return {"error": f"RLIMIT_NOFILE {hard} < {limit}"}
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, limit), hard))
    kept: list[socket.socket] = []
    with Server() as server:
        address = ("127.0.0.1", server.port)
        try:
            for _ in range(100):  # the server's first connections: imports, buffers
                sock = socket.create_connection(address)
                exchange(sock, data)
                kept.append(sock)
            time.sleep(0.5)
            rss0, slab0 = server.process.memory_info().rss, slab_kib()
            for _ in range(count):
                sock = socket.create_connection(address)
                exchange(sock, data)
                kept.append(sock)
            time.sleep(1.0)
            rss1, slab1 = server.process.memory_info().rss, slab_kib()
            cpu0 = server.cpu()
            time.sleep(2.0)
            idle_cpu = (server.cpu() - cpu0) / 2.0
        finally:
            for sock in kept:
                sock.close()
    return {
        "connections": count,
        "server_rss_per_connection_bytes": round((rss1 - rss0) / count),
        "kernel_slab_per_connection_bytes": round((slab1 - slab0) * 1024 / count),
        "server_rss_mib": round(rss1 / 2**20, 1),
        "server_cpu_percent_while_idle": round(100 * idle_cpu, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="concurrent, measured")
    parser.add_argument("--requests", type=int, default=500, help="requests of each kind")
    parser.add_argument("--idle", type=int, default=5000, help="idle connections held")
    parser.add_argument("--body", type=int, default=13500, help="bytes of each request body")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cert", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:  # SIGTERM ends it
        serve(args.serve, args.cert, args.key, idle_timeout=3600.0)
        return 0
    signal.signal(signal.SIGTERM, terminate)
    data = request(b"x" * args.body)
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as tmp:
        figures = {
            "benchmark": "connection_cost",
            "body_bytes": args.body,
            "concurrent": concurrent_cost(args.seconds, b"x" * args.body),
            "requests": requests_cost(args.requests, data, Path(tmp)),
            "idle": idle_cost(args.idle, data),
        }
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
