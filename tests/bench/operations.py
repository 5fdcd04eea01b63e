"""Rolling maintenance operations: creation as they pile up, the idle master with thousands,
and a healthy operation beside operations whose node never answers.

A master runs as a subprocess (``python -m nodeagent master run``, its defaults:
``reconcile_interval`` 1 s, ``agent_timeout`` 10 s) with one real agent (``healthy``:
a ``[hooks.reboot]`` that runs ``true``, no health check) and ``--operations`` simulated
nodes times two whose ads this process pushes (a DAEMON token), all at the address of one
small HTTP server of this process that refuses every drain with ``drain.no_such_hook`` (and
every other call with 503). Two more simulated nodes, ``silent1`` and ``silent2``, are at
loopback ports that take connections and never answer.

1. **Creation.** ``--operations`` operations of two simulated nodes each (a batch per
   node, one at a time), one after the other (``POST /v1/maintenance/operations``, over
   the Unix socket, one kept connection): each starts its first batch, whose drain is
   refused, and pauses, its second batch waiting (its host held). The latency of the first
   ``--sample`` creations and of the last ``--sample`` (with ``--operations`` less that
   many before them), then of one more creation with all of them there.
2. **Idle.** Once every one of them is paused: the master's CPU (user + system, psutil)
   over ``--idle`` seconds, and ``GET /healthz`` (over TCP) every 0.2 s meanwhile.
3. **A healthy operation beside silent ones.** An operation of ``healthy`` alone, from the
   request to the operation ended as ``GET`` shows it (polled every 50 ms), ``--runs``
   times; then again with an operation of ``silent1`` under way, then of both silent nodes.

About 7 minutes (``run_all --timeout 900``). Prints one JSON document. Usage:
``python tests/bench/operations.py [--operations 2000] [--sample 20] [--idle 20] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._auth import Scope, create_token, load_key
from slots import Machine, MachinePolicy, Resources
from tests.bench._benchlib import summary_ms, terminate
from tests.harness import AgentProcess, MasterProcess, wait_for

HOOK = "reboot"


class RefusingAgent:
    """One HTTP server on loopback standing for every simulated node: a drain is refused
    (``drain.no_such_hook``: the operation pauses), anything else is 503."""

    def __init__(self) -> None:
        self.drains = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self, status: int, code: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = json.dumps({"error": {"code": code, "message": code}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                if self.path == "/v1/drain":
                    outer.drains += 1
                    self._reply(422, "drain.no_such_hook")
                else:
                    self._reply(503, "agent.unavailable")

            def do_GET(self) -> None:
                self._reply(503, "agent.unavailable")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def sim_ad(name: str, address: str, now: float) -> dict[str, Any]:
    machine = Machine(
        host=name,
        ip="127.0.0.2",
        address=address,
        total=Resources(cpus=4),
        policy=MachinePolicy(hooks=frozenset({HOOK})),  # its ad lists the hook
        now=now,
    )
    ad: dict[str, Any] = machine.ad(now)
    return ad


def push_ads(master: MasterProcess, ads: list[dict[str, Any]]) -> None:
    """Push each simulated node's ad with a DAEMON token of that node's own."""
    key = load_key(master.key_file)
    with httpx.Client(base_url=master.url, timeout=30) as client:
        for ad in ads:
            name = ad["machine"]["Name"]
            token = create_token(
                key,
                subject=f"agent@{name}",
                scope=Scope.DAEMON,
                node=name,
                lifetime_s=3600,
                now=time.time(),
            )
            client.post(
                "/v1/ads", json=ad, headers={"Authorization": f"Bearer {token}"}
            ).raise_for_status()


def start(
    master: MasterProcess, hosts: list[str], client: httpx.Client | None = None
) -> tuple[str, float]:
    """Start an operation over ``hosts`` (with ``client``, a kept connection to the Unix
    socket, or a connection of its own); its id and the request's latency (s)."""
    body = {"hosts": hosts, "hook": HOOK}
    began = time.perf_counter()
    if client is None:
        reply = master.call("POST", "/v1/maintenance/operations", json=body)
    else:
        reply = client.post("/v1/maintenance/operations", json=body)
    took = time.perf_counter() - began
    if reply.status_code != 201:
        raise RuntimeError(f"POST operation: {reply.status_code} {reply.text}")
    return str(reply.json()["id"]), took


def operation(master: MasterProcess, op_id: str) -> dict[str, Any]:
    doc: dict[str, Any] = master.call("GET", f"/v1/maintenance/operations/{op_id}").json()
    return doc


def healthy_run(master: MasterProcess) -> float:
    """Seconds from the request to the healthy node's operation ended (completed)."""
    began = time.perf_counter()
    op_id, _ = start(master, ["healthy"])
    while True:
        doc = operation(master, op_id)
        if doc["ended_at"] is not None:
            break
        if time.perf_counter() - began > 600:
            raise RuntimeError(f"operation {op_id} not ended after 600 s: {doc}")
        time.sleep(0.05)
    if doc["state"] != "completed":
        raise RuntimeError(f"operation {op_id} ended {doc['state']}: {doc}")
    return time.perf_counter() - began


def note(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def seconds(values: list[float]) -> dict[str, Any]:
    return {"runs": [round(v, 2) for v in values], "median": round(statistics.median(values), 2)}


@contextlib.contextmanager
def silent_listener() -> Iterator[str]:
    """A loopback port whose connections the kernel takes and nobody answers."""
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(256)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def stop_master(master: MasterProcess) -> None:
    proc = master.proc
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def bench(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    refusing = RefusingAgent()
    try:
        with (
            MasterProcess(tmp / "master") as master,
            silent_listener() as silent1,
            silent_listener() as silent2,
        ):
            try:
                return measure(tmp, master, refusing, (silent1, silent2), args)
            finally:
                stop_master(master)
    finally:
        refusing.close()


def measure(
    tmp: Path,
    master: MasterProcess,
    refusing: RefusingAgent,
    silent: tuple[str, str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    extra = f'[hooks.{HOOK}]\ncommand = ["/bin/true"]\n'
    settings = master.agent_settings(tmp / "healthy", node="healthy", update_interval=0.5)
    with AgentProcess(tmp / "healthy", hostname="healthy", master=settings, extra=extra):
        now = time.time()
        names = [f"sim{i:05d}" for i in range(2 * args.operations)]
        ads = [sim_ad(name, refusing.url, now) for name in names]
        ads += [sim_ad(f"silent{i + 1}", url, now) for i, url in enumerate(silent)]
        push_ads(master, ads)
        note(f"{len(ads)} ads pushed")
        wait_for(lambda: len(master.call("GET", "/v1/ads").json()["ads"]) == len(ads) + 1)

        # 1. creation
        pairs = [names[i : i + 2] for i in range(0, len(names), 2)]
        with master.client() as client:
            latencies = [start(master, pair, client)[1] for pair in pairs]
            last_id, one_more = start(master, ["healthy"], client)
        wait_for(lambda: operation(master, last_id)["ended_at"] is not None, timeout=120)

        note(f"{len(latencies) + 1} operations created")

        # 2. idle, once every simulated node's operation is paused
        def all_paused() -> bool:
            ops = master.call("GET", "/v1/maintenance/operations").json()["operations"]
            paused = sum(1 for op in ops if op["state"] == "paused")
            return bool(paused == args.operations)

        wait_for(all_paused, timeout=600, interval=1.0)
        time.sleep(2.0)
        assert master.proc is not None
        process = psutil.Process(master.proc.pid)
        before = process.cpu_times()
        began = time.perf_counter()
        health: list[float] = []
        with httpx.Client(base_url=master.url, timeout=30) as client:
            while time.perf_counter() - began < args.idle:
                asked = time.perf_counter()
                client.get("/healthz").raise_for_status()
                health.append(time.perf_counter() - asked)
                time.sleep(0.2)
        after = process.cpu_times()
        elapsed = time.perf_counter() - began
        cpu = (after.user - before.user) + (after.system - before.system)

        note("idle measured")

        # 3. a healthy operation alone, then beside one and two silent ones
        alone = [healthy_run(master) for _ in range(args.runs)]
        beside: dict[str, Any] = {}
        for count, name in enumerate(("silent1", "silent2"), start=1):
            op_id, _ = start(master, [name])
            wait_for(
                lambda op_id=op_id: operation(master, op_id)["batches"][0]["state"] != "waiting"
            )
            beside[f"beside_{count}_silent"] = seconds(
                [healthy_run(master) for _ in range(args.runs)]
            )
        silent_doc = operation(master, op_id)
        sample = args.sample
        return {
            "operations": args.operations,
            "creation_ms": {
                f"first_{sample}": summary_ms(latencies[:sample]),
                f"last_{sample}": summary_ms(latencies[-sample:]),
                f"with_{args.operations}": round(one_more * 1000, 1),
            },
            "idle": {
                "seconds": round(elapsed, 1),
                "master_cpu_percent": round(100 * cpu / elapsed, 1),
                "healthz_ms": summary_ms(health),
            },
            "healthy_operation_s": {"alone": seconds(alone), **beside},
            "silent_operation_state": silent_doc["batches"][0]["nodes"][0]["phase"],
            "drains_refused": refusing.drains,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--operations", type=int, default=2000)
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, terminate)
    with tempfile.TemporaryDirectory(prefix="bench-operations-") as tmp:
        result = bench(Path(tmp), args)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
