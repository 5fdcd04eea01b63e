"""Ad ingest rate: node ads per second a real master absorbs, and its CPU.

A master runs as a subprocess (``python -m nodeagent master run``) on a loopback
TCP port. Simulated agents push real agent ads (``POST /v1/ads`` with a DAEMON token of
their own): ads made by :class:`slots.Machine` with 8 running claims (about 12 KiB of
JSON each), from a few templates whose ``Name``/``Machine``/``MachineIp`` are varied to give
``--nodes`` distinct nodes (``MyAddress`` is a closed loopback port). A share of the nodes
(``--scheduled``) is in a maintenance window a day ahead (DRAINING, no drain due yet), so
those pushes are answered with a mode and a window, as in a cluster under maintenance.

The client is this process: ``--connections`` concurrent connections, each with one
request in flight, driven by one epoll loop over plain sockets with every request
prepared beforehand, so that the client costs little next to the server. Two runs of
``--seconds`` each, after a warm-up: ``keep_alive`` (the connections stay open) and
``connection_per_ad`` (a new connection for every ad, which is what an agent does: its
pushes are a minute apart, and each uses a client of its own). Both CPUs are measured
(psutil for the master, ``getrusage`` for the client) over the measured interval.
``ads_per_master_cpu_second`` is the rate one fully busy core would give the master.

``--store etcd``: the master keeps its state in a real etcd started for the run
(:class:`tests.etcd.EtcdServer`, in the temporary directory, ended by its pid) and leads
it alone; each interval also counts the calls etcd served meanwhile, by method
(``etcd_requests``: its ``grpc_server_started_total``; an ad is soft state and must cost
none) and etcd's CPU.

Prints one JSON document. Usage:
``python tests/bench/ad_ingest.py [--seconds 10] [--nodes 2000] [--connections 64]
[--store sqlite|etcd] [--prefill] [--ingest-workers N]``.

``--ingest-workers N``: the master prepares the pushes in ``N`` worker processes
(``ingest_workers``); ``ingest_workers_cpu_percent`` is their CPU, apart from the master's.

``--prefill``: every node's ad is pushed once before the warm-up, and the benchmark waits
until the reconcile passes have made the scheduled nodes' forecasts
(``nodeagent_master_forecasts_made_ahead_total``): the measured ads are then the nodes'
ads again, as in a running pool, not nodes new to the master.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._auth import Scope, create_token, load_key
from slots import JobSpec, Machine, MachinePolicy, Resources
from tests.bench._benchlib import cpu_seconds, percentile, terminate
from tests.bench._etcdlib import EtcdMeter, etcd_settings, master_values, require_etcd, wait_leading
from tests.etcd import EtcdServer
from tests.harness import MasterProcess

NS = 1_000_000_000
#: The master's etcd_prefix with ``--store etcd``.
PREFIX = "/nodeagent-bench/"
WARMUP = 2.0
TEMPLATES = 8
CLAIMS = 8


# ---------------------------------------------------------------------------- helpers


def stop_master(master: MasterProcess) -> None:
    """SIGTERM the master this benchmark started and wait for it (SIGKILL if it hangs)."""
    proc = master.proc
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)


def log_problems(master: MasterProcess) -> list[str]:
    """WARNING, ERROR and traceback lines of the master's log."""
    try:
        lines = master.log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    return [
        line for line in lines if " WARNING " in line or " ERROR " in line or "Traceback" in line
    ][:20]


def _workers_cpu(process: psutil.Process) -> float:
    """The CPU of the master's ingest workers (its children running
    ``nodeagent.master._ingest_worker``) alive now."""
    total = 0.0
    for child in process.children():
        with contextlib.suppress(psutil.Error):
            if "nodeagent.master._ingest_worker" in child.cmdline():
                total += cpu_seconds(child)
    return total


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------------- the ads


def template_ads(now: float) -> list[dict[str, Any]]:
    """Agent ads of machines with 8 running claims each, of different ages and promises."""
    return [machine.ad(now) for machine in template_machines(now)]


def template_machines(now: float, count: int = TEMPLATES) -> list[Machine]:
    """The machines of :func:`template_ads` (their ads at a later time are the same claims,
    moved on in time, as an agent's next push); ``count`` of them, each one's claims started
    37 s after the one before's."""
    machines = []
    for t in range(count):
        machine = Machine(
            host="template.bench",
            total=Resources(cpus=32, memory=131072, disk=100_000_000),
            policy=MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=300),
            now=now - 86400,
            address="http://template.bench:9621",
            ip="10.255.255.255",
        )
        for c in range(CLAIMS):
            machine.claim(
                now - 600 * (c + 1) - 37 * t,
                resources=Resources(cpus=1 + (c + t) % 4, memory=2048 * (1 + c % 3), disk=10_000),
                spec=JobSpec(
                    job_id=f"{1000 + t}.{c}",
                    owner=f"user{(t + c) % 5}",
                    max_job_retirement_time=None if c % 3 == 0 else 900 * (c % 4 + 1),
                ),
            )
        machines.append(machine)
    return machines


def node_ad(template: dict[str, Any], host: str, ip: str) -> dict[str, Any]:
    """``template`` as node ``host`` at ``ip`` (every name, address and ip replaced)."""

    def rename(ad: dict[str, Any]) -> dict[str, Any]:
        ad = dict(ad)
        ad["Name"] = str(ad["Name"]).replace("template.bench", host)
        ad["Machine"] = host
        ad["MachineIp"] = ip
        # A closed loopback port: a master calling a benchmark's node reaches no one.
        ad["MyAddress"] = "http://127.0.0.1:9"
        if "ParentSlot" in ad:
            ad["ParentSlot"] = str(ad["ParentSlot"]).replace("template.bench", host)
        return ad

    return {"machine": rename(template["machine"]), "slots": [rename(s) for s in template["slots"]]}


def node_ip(i: int) -> str:
    return f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"


def requests(master: MasterProcess, port: int, nodes: int, now: float) -> list[bytes]:
    """One prepared ``POST /v1/ads`` per node, each with the node's own DAEMON token."""
    templates = template_ads(now)
    key = load_key(master.key_file)
    prepared = []
    for i in range(nodes):
        host = f"node{i:05d}.bench"
        body = json.dumps(node_ad(templates[i % TEMPLATES], host, node_ip(i))).encode()
        token = create_token(
            key, subject=f"agent@{host}", scope=Scope.DAEMON, lifetime_s=3600, now=now, node=host
        )
        head = (
            f"POST /v1/ads HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"User-Agent: nodeagent-bench\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        prepared.append(head.encode() + body)
    return prepared


def schedule(nodes: int, share: float, now: float) -> dict[str, Any]:
    """A window a day away for the first ``share`` of the nodes (they become DRAINING)."""
    count = int(nodes * share)
    if count == 0:
        return {}
    return {
        "windows": [
            {
                "machine_ids": [
                    {"hostname": f"node{i:05d}.bench", "ip": node_ip(i)} for i in range(count)
                ],
                "unavailability": {
                    "start": {"nanoseconds": int((now + 86400) * NS)},
                    "duration": {"nanoseconds": 3600 * NS},
                },
            }
        ]
    }


# ---------------------------------------------------------------------------- the client


class Connection:
    """One keep-alive connection, one request in flight; cycles through its nodes."""

    def __init__(self, address: tuple[str, int], prepared: list[bytes]) -> None:
        self.address = address
        self.prepared = prepared
        self.next = 0
        self.sock: socket.socket | None = None
        self.out = b""
        self.inbuf = bytearray()
        self.sent_at = 0.0
        self.reconnects = -1
        #: The body of the last reply, and the node whose ad the request in flight is.
        self.reply = b""
        self.node = 0

    def connect(self, selector: selectors.BaseSelector) -> None:
        if self.sock is not None:
            selector.unregister(self.sock)
            self.sock.close()
        self.sock = socket.create_connection(self.address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.reconnects += 1
        self.inbuf.clear()
        selector.register(self.sock, selectors.EVENT_READ, self)

    def send_next(self, selector: selectors.BaseSelector) -> None:
        self.out = self.prepared[self.next % len(self.prepared)]
        self.next += 1
        self.sent_at = time.perf_counter()
        self._flush(selector)

    def resend(self, selector: selectors.BaseSelector) -> None:
        """The server closed the connection: reconnect and send the same ad again."""
        self.connect(selector)
        self.out = self.prepared[(self.next - 1) % len(self.prepared)]
        self.sent_at = time.perf_counter()
        self._flush(selector)

    def _flush(self, selector: selectors.BaseSelector) -> None:
        assert self.sock is not None
        try:
            sent = self.sock.send(self.out)
        except BlockingIOError:
            sent = 0
        self.out = self.out[sent:]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)
        selector.modify(self.sock, events, self)

    def on_event(self, selector: selectors.BaseSelector, mask: int) -> tuple[int, bool] | None:
        """Handle readiness; returns (status, server closes) when a response is complete."""
        assert self.sock is not None
        if mask & selectors.EVENT_WRITE and self.out:
            self._flush(selector)
        if not mask & selectors.EVENT_READ:
            return None
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return None
        except ConnectionError:
            data = b""
        if not data:
            self.resend(selector)
            return None
        self.inbuf += data
        end = self.inbuf.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(self.inbuf[:end]).lower()
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name == b"content-length":
                length = int(value)
        if len(self.inbuf) < end + 4 + length:
            return None
        status = int(head[9:12])
        if b'"mode"' not in self.inbuf[end + 4 : end + 4 + length]:
            status = -status if status == 200 else status
        closes = b"\r\nconnection: close" in head
        self.reply = bytes(self.inbuf[end + 4 : end + 4 + length])
        del self.inbuf[: end + 4 + length]
        return status, closes


def push_each(
    address: tuple[str, int], prepared: list[bytes], connections: int = 16
) -> dict[int, int]:
    """Send every prepared request once; returns how many got each status."""
    selector = selectors.DefaultSelector()
    conns = [Connection(address, prepared[c::connections]) for c in range(connections)]
    conns = [conn for conn in conns if conn.prepared]
    statuses: dict[int, int] = {}
    try:
        for conn in conns:
            conn.connect(selector)
            conn.send_next(selector)
        busy = len(conns)
        while busy:
            events = selector.select(timeout=30)
            if not events:
                raise TimeoutError("the master did not answer for 30 s")
            for key, mask in events:
                conn = key.data
                done = conn.on_event(selector, mask)
                if done is None:
                    continue
                status, closes = done
                statuses[status] = statuses.get(status, 0) + 1
                if conn.next == len(conn.prepared):
                    # done: closed, so that the server's closing it when idle is not
                    # taken for a request to send again
                    assert conn.sock is not None
                    selector.unregister(conn.sock)
                    conn.sock.close()
                    conn.sock = None
                    busy -= 1
                    continue
                if closes:
                    conn.connect(selector)
                conn.send_next(selector)
    finally:
        for conn in conns:
            if conn.sock is not None:
                selector.unregister(conn.sock)
                conn.sock.close()
        selector.close()
    return statuses


def drive(
    address: tuple[str, int],
    prepared: list[bytes],
    connections: int,
    master_pid: int,
    seconds: float,
    *,
    reconnect: bool = False,
    etcd: EtcdServer | None = None,
) -> dict[str, Any]:
    """Push ads as fast as the master answers: warm-up, then the measured interval.

    ``reconnect``: a new connection for every ad (as an agent makes: one short-lived
    client per push), instead of keep-alive. ``etcd``: the master's etcd, whose calls
    and CPU over the measured interval are counted too.
    """
    selector = selectors.DefaultSelector()
    conns = [Connection(address, prepared[c::connections]) for c in range(connections)]
    master = psutil.Process(master_pid)
    counted = 0
    errors: dict[int, int] = {}
    latencies: list[float] = []
    measuring = False
    start = time.perf_counter()
    warm_until = start + WARMUP
    end = warm_until + seconds
    master_cpu0 = client_cpu0 = workers_cpu0 = t0 = 0.0
    meter = None if etcd is None else EtcdMeter(etcd)
    try:
        for conn in conns:
            conn.connect(selector)
            conn.send_next(selector)
        while True:
            now = time.perf_counter()
            if not measuring and now >= warm_until:
                measuring = True
                if meter is not None:
                    meter.start()
                    now = time.perf_counter()
                t0, master_cpu0, client_cpu0 = now, cpu_seconds(master), _own_cpu()
                workers_cpu0 = _workers_cpu(master)
            if now >= end:
                break
            for key, mask in selector.select(timeout=0.1):
                conn = key.data
                done = conn.on_event(selector, mask)
                if done is None:
                    continue
                status, closes = done
                finished = time.perf_counter()
                if measuring:
                    if status == 200:
                        counted += 1
                        latencies.append(finished - conn.sent_at)
                    else:
                        errors[status] = errors.get(status, 0) + 1
                if closes or reconnect:
                    conn.connect(selector)
                conn.send_next(selector)
        elapsed = time.perf_counter() - t0
        master_cpu = cpu_seconds(master) - master_cpu0
        workers_cpu = _workers_cpu(master) - workers_cpu0
        client_cpu = _own_cpu() - client_cpu0
        on_etcd = {} if meter is None else meter.since(elapsed)
    finally:
        for conn in conns:
            if conn.sock is not None:
                selector.unregister(conn.sock)
                conn.sock.close()
        selector.close()
    ms = [x * 1000 for x in latencies] or [math.nan]
    return {
        "ads": counted,
        "seconds": round(elapsed, 3),
        "ads_per_second": round(counted / elapsed, 1),
        "master_cpu_percent": round(100 * master_cpu / elapsed, 1),
        "ads_per_master_cpu_second": round(counted / master_cpu, 1) if master_cpu else None,
        "ingest_workers_cpu_percent": round(100 * workers_cpu / elapsed, 1),
        "client_cpu_percent": round(100 * client_cpu / elapsed, 1),
        "latency_ms": {
            "p50": round(percentile(ms, 50), 2),
            "p99": round(percentile(ms, 99), 2),
            "max": round(max(ms), 2),
        },
        "errors": {str(k): v for k, v in sorted(errors.items())},
        "reconnects": sum(c.reconnects for c in conns),
        **on_etcd,
    }


# ---------------------------------------------------------------------------- benchmark


def made_ahead(master: MasterProcess) -> float:
    """The forecasts the master's passes have made (``forecasts_made_ahead_total``)."""
    for line in master.call("GET", "/metrics").text.splitlines():
        if line.startswith("nodeagent_master_forecasts_made_ahead_total "):
            return float(line.split()[-1])
    return 0.0


def prefill(master: MasterProcess, address: tuple[str, int], prepared: list[bytes]) -> float:
    """Push every node's ad once and wait until the passes have made the scheduled nodes'
    forecasts (at most a minute more); returns the seconds it took."""
    started = time.perf_counter()
    statuses = push_each(address, prepared, connections=16)
    if set(statuses) != {200}:
        raise RuntimeError(f"ad pushes answered {statuses}")
    deadline = time.monotonic() + 60
    scheduled = master.call("GET", "/maintenance/status").json().get("draining_machines", [])
    while made_ahead(master) < len(scheduled) and time.monotonic() < deadline:
        time.sleep(5)  # a scrape reads every scheduled machine's plan: not too often
    return time.perf_counter() - started


def run(
    seconds: float,
    nodes: int,
    connections: int,
    scheduled: float,
    store: str = "sqlite",
    *,
    prefilled: bool = False,
    ingest_workers: int = 0,
) -> dict[str, Any]:
    if store == "etcd":
        require_etcd()
    with (
        tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        settings: dict[str, Any] = {
            "reconcile_interval": 1.0,
            "ad_lifetime": 300,
            "ingest_workers": ingest_workers,
        }
        etcd = None
        if store == "etcd":
            etcd = stack.enter_context(EtcdServer(Path(tmp) / "etcd"))
            settings.update(etcd_settings(etcd, PREFIX))
        master = MasterProcess(Path(tmp) / "master", settings=settings)
        try:
            master.start()
            assert master.proc is not None
            if etcd is not None:
                wait_leading(master)
            now = time.time()
            posted = master.call(
                "POST", "/maintenance/schedule", json=schedule(nodes, scheduled, now)
            )
            if posted.status_code != 200:
                raise RuntimeError(f"schedule refused: {posted.status_code} {posted.text}")
            host, port = master.url.removeprefix("http://").rsplit(":", 1)
            prepared = requests(master, int(port), nodes, now)
            sizes = [len(p) for p in prepared]
            address = (host, int(port))
            pid = master.proc.pid
            prefill_s = prefill(master, address, prepared) if prefilled else None
            keep_alive = drive(address, prepared, connections, pid, seconds, etcd=etcd)
            fresh = drive(address, prepared, connections, pid, seconds, reconnect=True, etcd=etcd)
            values = {} if etcd is None else {"etcd_value_bytes": master_values(etcd, PREFIX)}
            received = master.call("GET", "/metrics").text
            nodes_seen = len(
                master.call("GET", "/v1/ads", params={"projection": "Name"}).json()["ads"]
            )
            rss = psutil.Process(master.proc.pid).memory_info().rss
        finally:
            stop_master(master)
        counter = next(
            float(line.split()[-1])
            for line in received.splitlines()
            if line.startswith("nodeagent_master_ads_received_total")
        )
        counted = keep_alive["ads"] + fresh["ads"]
        if counter < counted:
            raise RuntimeError(f"the master counted {counter} ads, the client {counted}")
        return {
            "benchmark": "ad_ingest",
            "store": store,
            "ingest_workers": ingest_workers,
            "nodes": nodes,
            "nodes_seen": nodes_seen,
            "prefilled_in_s": None if prefill_s is None else round(prefill_s, 1),
            "scheduled_nodes": int(nodes * scheduled),
            "claims_per_ad": CLAIMS,
            "request_bytes": {"min": min(sizes), "max": max(sizes)},
            "connections": connections,
            "warmup_s": WARMUP,
            "keep_alive": keep_alive,
            "connection_per_ad": fresh,
            "master_rss_mib": round(rss / 2**20, 1),
            "master_ads_received_total": int(counter),
            **values,
            "target_ads_per_second": 2000,
            "master_log_problems": log_problems(master),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured interval, each")
    parser.add_argument("--nodes", type=int, default=2000, help="distinct simulated nodes")
    parser.add_argument("--connections", type=int, default=64, help="concurrent connections")
    parser.add_argument("--scheduled", type=float, default=0.1, help="share of nodes scheduled")
    parser.add_argument(
        "--store", choices=("sqlite", "etcd"), default="sqlite", help="the master's store"
    )
    parser.add_argument(
        "--prefill",
        action="store_true",
        help="push every node's ad once first: the measured ads are the nodes' ads again",
    )
    parser.add_argument("--ingest-workers", type=int, default=0, help="the master's ingest_workers")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, terminate)
    with contextlib.suppress(BrokenPipeError):
        figures = run(
            args.seconds,
            args.nodes,
            args.connections,
            args.scheduled,
            args.store,
            prefilled=args.prefill,
            ingest_workers=args.ingest_workers,
        )
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
