"""What a push costs an ingest worker: its CPU per push at the rates a pool pushes at.

One real ingest worker (``python -m nodeagent.master._ingest_worker``, given a listener,
its link and its settings as the master gives them); on the other end of the link a
stand-in for the master that answers each push at once (a thread of this process), so that
the figures are the worker's alone. A client process opens a new connection for each push,
as an agent does, and pushes a node's ad moved on (its slot ads' moving values alone, as
``scale.py``'s pushers do once the master holds the slot ads), for ``--nodes`` nodes in
turn, each with a token of its own.

For each rate of ``--rates`` (pushes a second; 0: as fast as the worker takes them, 64 in
flight), after 2 s of warm-up, ``--seconds`` measured: the pushes a second answered, the
worker's CPU per push (psutil, user + system) and its share of a core, and its RSS at the
end. With
``--accept-every S`` the worker's listener wakes every S seconds at most
(``ACCEPT_EVERY`` of the worker; 0: for each connection). With ``--keep-alive`` each node
keeps its connection from one push to its next instead (the worker closes a connection idle
for 5 s: ``--nodes`` over the rate must be less; not with rate 0); a node whose push is
still unanswered when its next is due skips that one (``skipped_still_in_flight``).

Prints one JSON document. Usage: ``python tests/bench/worker_push.py [--rates
250,500,1000,0] [--seconds 8] [--nodes 2000] [--accept-every S] [--keep-alive]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import queue
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._auth import Scope, create_token, generate_key, load_key
from nodeagent._serving._http11 import KEEP_ALIVE_TIMEOUT
from nodeagent.master._ingest import (
    AdReply,
    Push,
    decode_worker_frame,
    encode_answer,
    split_frames,
)
from nodeagent.master._ingest_worker import ACCEPT_EVERY, WorkerSettings
from tests.bench._benchlib import cpu_seconds, terminate
from tests.bench.ad_ingest import node_ip
from tests.bench.scale import Bodies

WARM_UP = 2.0
IN_FLIGHT = 64
#: The master's answer to every push: stored, the node's mode and its slot ads' digest.
REPLY = AdReply(
    200,
    b'{"machine_id":{"hostname":"n","ip":"10.0.0.1"},"mode":"DRAINING","slots_digest":"'
    + b"0" * 32
    + b'"}',
)


def requests(key_file: Path, nodes: int) -> list[bytes]:
    """Each node's push of its moving values alone, with its own token."""
    key = load_key(key_file)
    now = time.time()
    bodies = Bodies(now, True)
    made = []
    for i in range(nodes):
        host = f"node{i:05d}.bench"
        token = create_token(
            key, subject=f"agent@{host}", scope=Scope.DAEMON, lifetime_s=3600, now=now, node=host
        )
        body = (
            bodies.moved_on(now, i % 8, b"ab" * 16)
            .replace(b"host-mark.invalid", host.encode())
            .replace(b"ip-mark.invalid", node_ip(i).encode())
        )
        made.append(
            (
                "POST /v1/ads HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
    return made


def push(
    port: int,
    key_file: str,
    nodes: int,
    rate: float,
    seconds: float,
    worker: int,
    out: Any,
    keep_alive: bool = False,
) -> None:
    """The client: a push per connection (``keep_alive``: a connection per node, kept),
    ``rate`` a second (0: ``IN_FLIGHT`` at once, each followed by the next); puts on ``out``
    the pushes answered and refused, the seconds and the CPU seconds of the process
    ``worker`` once warm."""
    made = requests(Path(key_file), nodes)
    process = psutil.Process(worker)
    selector = selectors.DefaultSelector()
    sent = answered = refused = skipped = 0
    replies: dict[socket.socket, bytes] = {}
    kept: dict[int, socket.socket] = {}
    node_of: dict[socket.socket, int] = {}

    def start() -> None:
        nonlocal sent, skipped
        node = sent % nodes
        sent += 1
        sock = kept.get(node)
        if sock is not None and sock in replies:  # its last push not yet answered
            skipped += 1
            return
        if sock is None:
            sock = socket.socket()
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect(("127.0.0.1", port))
            selector.register(sock, selectors.EVENT_WRITE, made[node])
            node_of[sock] = node
            if keep_alive:
                kept[node] = sock
        else:
            sock.sendall(made[node])
            selector.register(sock, selectors.EVENT_READ, made[node])
        replies[sock] = b""

    began = time.monotonic()
    warm = began + WARM_UP
    due = began
    counted: int | None = None
    cpu = wall = 0.0
    if not rate:
        for _ in range(IN_FLIGHT):
            start()
    while True:
        now = time.monotonic()
        if counted is None and now >= warm:
            counted, cpu, wall = answered, cpu_seconds(process), now
        if now >= warm + seconds:
            break
        if rate:
            while due <= now:
                start()
                due += 1 / rate
        for key, events in selector.select(max(0.0, due - now) if rate else 1.0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if events & selectors.EVENT_WRITE:
                sock.sendall(key.data)
                selector.modify(sock, selectors.EVENT_READ)
                continue
            data = sock.recv(65536)
            replies[sock] += data
            if data and b"\r\n\r\n" not in replies[sock]:
                continue
            answered += 1
            refused += not replies.pop(sock).startswith(b"HTTP/1.1 200 ")
            selector.unregister(sock)
            if not keep_alive or not data:
                kept.pop(node_of.pop(sock), None)
                sock.close()
            if not rate:
                start()
    assert counted is not None
    out.put(
        (answered - counted, refused, skipped, time.monotonic() - wall, cpu_seconds(process) - cpu)
    )


def answer_pushes(link: socket.socket) -> None:
    """The master's side of the link: every push answered at once, until the worker ends
    (the link closed, or reset when the worker is killed)."""
    buffer = bytearray()
    with contextlib.suppress(ConnectionError):
        while data := link.recv(1 << 20):
            buffer += data
            answers = []
            for frame in split_frames(buffer):
                push = decode_worker_frame(frame)
                if isinstance(push, Push):
                    answers.append(encode_answer(push.number, REPLY))
            if answers:
                link.sendall(b"".join(answers))


def at_rate(rate: float, options: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    key_file = tmp / "pool.key"
    key = generate_key(key_file) if not key_file.exists() else load_key(key_file)
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(1024)
    ours, theirs = socket.socketpair()
    settings = WorkerSettings(
        listeners=(listening.fileno(),),
        link=theirs.fileno(),
        relay=str(tmp / "relay.sock"),
        key=key.hex(),
        tls=None,
        read_timeout=30,
    )
    every = ACCEPT_EVERY if options.accept_every is None else options.accept_every
    code = (
        "import sys, nodeagent.master._ingest_worker as w; "
        f"w.ACCEPT_EVERY = {every!r}; sys.exit(w.main())"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        pass_fds=(listening.fileno(), theirs.fileno()),
    )
    theirs.close()
    try:
        assert worker.stdin is not None
        worker.stdin.write(settings.line())
        worker.stdin.flush()
        threading.Thread(target=answer_pushes, args=(ours,), daemon=True).start()
        out: Any = multiprocessing.Queue()
        client = multiprocessing.Process(
            target=push,
            args=(
                listening.getsockname()[1],
                str(key_file),
                options.nodes,
                rate,
                options.seconds,
                worker.pid,
                out,
                options.keep_alive,
            ),
        )
        client.start()
        try:
            got = None
            while got is None:  # a client that failed ends without putting its figures
                alive = client.is_alive()  # before the read: what it put is there by then
                with contextlib.suppress(queue.Empty):
                    got = out.get(timeout=1)
                if got is None and not alive:
                    raise RuntimeError(f"the client ended with status {client.exitcode}")
            answered, refused, skipped, seconds, cpu = got
            rss = psutil.Process(worker.pid).memory_info().rss
        finally:
            client.kill()
            client.join()
    finally:
        worker.kill()
        worker.wait()
        ours.close()
        listening.close()
    return {
        "rate_asked": rate or "as fast as taken",
        "pushes_per_s": round(answered / seconds, 1),
        "worker_us_per_push": round(cpu / max(answered, 1) * 1e6),
        "worker_cpu_percent": round(100 * cpu / seconds, 1),
        "worker_rss_mib": round(rss / 2**20, 1),
        "refused": refused,
        "skipped_still_in_flight": skipped,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="250,500,1000,0")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--accept-every", type=float, default=None)
    parser.add_argument("--keep-alive", action="store_true")
    options = parser.parse_args()
    rates = [float(r) for r in options.rates.split(",")]
    if options.keep_alive and any(not r or options.nodes / r >= KEEP_ALIVE_TIMEOUT for r in rates):
        parser.error(f"--keep-alive: each rate must push every node within {KEEP_ALIVE_TIMEOUT} s")
    signal.signal(signal.SIGTERM, terminate)  # the worker and the client ended on the way out
    with tempfile.TemporaryDirectory() as tmp:
        runs = [at_rate(rate, options, Path(tmp)) for rate in rates]
    every = ACCEPT_EVERY if options.accept_every is None else options.accept_every
    result = {
        "benchmark": "worker_push",
        "accept_every_s": every,
        "keep_alive": options.keep_alive,
        "runs": runs,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
