"""One master for 10,000 to 100,000 pushing nodes: ingest, memory, plans, restart, etcd.

For each size of ``--machines`` (10,000, 30,000 and 100,000 by default), a real master
subprocess (``nodeagent master run``, SQLite, :class:`tests.harness.MasterProcess`) holds
that many nodes, every machine scheduled as ``plan_latency.py`` schedules them (100 one-hour
windows 2 to 18.5 hours ahead: every machine DRAINING, no drain due), while simulated agents
push their ads at the pace their update interval implies (``--interval`` 60 s: N / 60 ads a
second).

**The agents** are ``--pushers`` processes, each with its share of the nodes (node ``i``
goes to pusher ``i mod pushers``). A node's ad is the ad of ``ad_ingest.py``'s templates (8
running claims, ≈ 13 KB of JSON; node ``i``'s of template ``i mod --templates``, 8 by
default, each one's claims started 37 s after the one before's: with few templates, the
nodes' forecasts' pieces end together, in waves of a template's nodes) with its names and
ip replaced in the JSON bytes, each node
with its own DAEMON token; a pusher holds its nodes' request heads (≈ 300 bytes a node) and
the templates' JSON, and writes a node's body when it is due: 100,000 nodes cost no more
than a few MiB in the pushers. Each ad is the template machine's ad at the time it is sent
(the same claims moved on in time, as an agent's next push), or with ``--static-ads`` the
same bytes every round. Every node is due once per interval, the nodes spread evenly over
it; once the master's reply gives the digest of a node's slot ads, the node pushes their moving
values alone as an agent does (``moved_on``; ``--whole-ads``: always the whole ad); each
push is on a new connection, as a real agent's is (``--keep-alive``: connections
kept open), at most ``--connections`` in flight per pusher and master. A pusher that falls
behind its schedule says by how much (``pushers_behind_s``).

Per size (``sqlite``):

* **cold read** (``--cold-read metrics`` or ``summary``): right after the first round, one
  scrape of ``/metrics`` or one summary asked of a master that still owes forecasts: how
  long it took, the ads a second the pushers had answered meanwhile and the longest time in
  which none was, and the machines (and, of a scrape, the nodes) it left behind
  (``cold_read``).
* **warm**: after the first full round (every node pushed once), the seconds until the
  master has made every forecast its passes owe (``warm_s``: ``MasterForecastsWaiting`` 0),
  as a master restarted on a full pool does in its first minutes.
* **ingest**: then, over a steady window of
  ``--window`` seconds: the ads the master counted (``nodeagent_master_ads_received_total``
  of ``/metrics`` at both ends) and the pushers' own (answered 200) per second, against the
  needed N / interval; the master's and the pushers' CPU (psutil: a core is 100 %), so that
  a reader sees which side is short; the age of the oldest live ad at the window's end
  (``nodeagent_master_oldest_ad_age_seconds`` of the same scrape, the cheapest to read: the
  scrape is timed too, ``scrape_ms``, and says the nodes it left behind,
  ``scrape_nodes_behind``). With ``--ingest-workers N`` (each master's
  ``ingest_workers``), the workers' CPU and RSS apart from the master's;
  ``--ingest-worker-nice N`` sets their ``ingest_worker_nice`` (the master's default without).
  The host's CPU over the window (``host_cpu_percent``): what it was busy with, the
  benchmark's processes, interrupts and deferred kernel work (mostly loopback TCP), other
  processes, and the time stolen by the hypervisor: whether the host was the benchmark's.
* **memory**: the master's RSS at the window's end and per machine; its peak (``VmHWM``)
  after the plans below.
* **summary**: ``GET /v1/maintenance/plan?late=true&blockers=false&limit=20`` (what
  ``nodeagent master plan`` draws) every ``--summary-every`` s during the window, over TCP
  with a READ token: p50/p99, and the machines each left ``behind`` (``summary_behind``:
  the most, the last, and how many replies were whole).
* **first rows**, while the agents push: the whole plan read to its first row
  ``--first-rows`` times (10), a second apart, over TCP on a new connection each (a READ
  token: the CLI on another host) and over the master's Unix socket (the CLI on its host),
  each reply closed at its first row.
* **whole plan**, while the agents push: ``format=jsonl`` when the master answers it (200,
  ``application/x-ndjson``): the first row is the first ``{"row"`` line, the last row the
  ``{"end"`` line; else the JSON document: its first bytes, its last byte. Then one
  window's rows (``window=<start>``): ``window_filter_answered`` says whether the master
  sent that window's rows only (else it sent the whole plan).
* **preview**: ``POST /v1/maintenance/schedule/preview?rows=changed`` (what ``nodeagent
  master schedule set`` asks; ``--preview-rows all``: every row) of the schedule held with
  ``--preview-machines`` machines (1,000) moved to a new window: request to first row and
  last byte, and the pushes answered meanwhile; the master's RSS before and after it, and
  the machines a summary read just before it left behind. Then
  **apply**: that schedule applied as ``schedule set`` applies it (``PUT
  /v1/maintenance/schedule?if_version=`` the preview's ``schedule_version``, an
  ADMINISTRATOR token): request to reply, the pushes answered meanwhile, the summary's
  first reply after it, and the RSS then.
* **after restart**: the agents stop, the master is SIGKILLed and started again on its store
  (the schedule is there, the ads are not); every node pushes once, spread over the
  interval (``--restart-burst``: all at once); from the last ad in, the first summary (and
  the machines its totals left ``behind``: ``first_summary_behind``), then a summary every
  ``--restart-every`` s (1) until one is whole (``summaries_behind``,
  ``first_whole_summary_since_last_ad_ms``), then the first whole plan; the CPU the master,
  its ingest workers and the pushers took over the round (``round_cpu_percent``) and the
  master's from the last ad to the whole summary (``catch_up_master_cpu_percent``).

``etcd`` (unless ``--no-etcd``): ``--masters`` masters on one real etcd
(:class:`tests.etcd.EtcdServer`, :class:`tests.ha.Masters`), every node pushing to each of
them (as an agent configured with their three urls does, its moving values alone to a
master that holds its slot ads), the summary asked of each in turn
during the steady window: its latency on the leader and on each follower, each master's
ingest, CPU and RSS.

Every process it starts is ended by its pid (masters, etcd, pushers); a master that exits
on its own is reported (``master_exited``: its status and the last lines of its log), not
hidden. Prints one JSON document. Usage: ``python tests/bench/scale.py [--machines
10000,30000,100000] [--interval 60] [--window 60] [--pushers 2] [--keep-alive]
[--no-restart] [--restart-every 1] [--first-rows 10] [--no-preview] [--no-etcd] [--masters 3]
[--ingest-workers N] [--ingest-worker-nice N] [--cold-read metrics|summary]
[--preview-rows changed|all] [--no-apply]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import re
import selectors
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.sharedctypes import SynchronizedArray
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._auth import Scope, create_token, load_key
from nodeagent._moving_values import split_slots
from tests.bench._benchlib import cpu_seconds, percentile, terminate
from tests.bench._etcdlib import require_etcd
from tests.bench.ad_ingest import (
    TEMPLATES,
    Connection,
    log_problems,
    node_ad,
    node_ip,
    stop_master,
    template_machines,
)
from tests.bench.plan_latency import WINDOWS, check_summary, post_schedule
from tests.bench.plan_latency import schedule as plan_schedule
from tests.etcd import EtcdServer
from tests.ha import Masters
from tests.harness import MasterProcess

NS = 1_000_000_000
#: What a template's JSON says where a node's hostname and ip go.
HOST_MARK = "host-mark.invalid"
IP_MARK = "ip-mark.invalid"
#: The digest a push's reply gives of the slot ads held (the same on every master: it is
#: of their content).
_DIGEST_IN_REPLY = re.compile(rb'"slots_digest":"([0-9a-f]{32})"')
#: The tokens' lifetime (a run at 100,000 takes a while).
TOKEN_LIFETIME = 6 * 3600
#: A pusher's figures, in its slice of the shared array.
OK, REFUSED, NO_MODE, FAILED, BEHIND, LAST_OK, DONE, SKIPPED = range(8)
STATS = 8
SUMMARY = {"late": "true", "blockers": "false", "limit": "20"}


def _workers(process: psutil.Process) -> list[psutil.Process]:
    """The master's ingest workers (``ingest_workers``) alive now."""
    found = []
    for child in process.children():
        with contextlib.suppress(psutil.Error):
            if "nodeagent.master._ingest_worker" in child.cmdline():
                found.append(child)
    return found


def _workers_cpu(process: psutil.Process) -> float:
    total = 0.0
    for worker in _workers(process):
        with contextlib.suppress(psutil.Error):
            total += cpu_seconds(worker)
    return total


def host_cpu(before: Any, after: Any, ours: float, elapsed: float) -> dict[str, float]:
    """The host's CPU over ``elapsed`` s (``psutil.cpu_times()`` ``before`` and ``after``;
    a core is 100 %): all it was busy with (``busy``), the benchmark's processes (``ours``,
    their CPU seconds), interrupts and the kernel's deferred work (``softirq``: most of it
    loopback TCP; some of it is charged to the process it ran in as well), the rest
    (``others``: processes not the benchmark's), and the time the hypervisor gave the
    host's cores to someone else (``steal``)."""

    def delta(field: str) -> float:
        return float(getattr(after, field, 0.0) - getattr(before, field, 0.0))

    busy = sum(map(delta, ("user", "nice", "system", "irq", "softirq")))
    softirq = delta("irq") + delta("softirq")
    parts = {
        "busy": busy,
        "ours": ours,
        "softirq": softirq,
        "others": max(0.0, busy - ours - softirq),
        "steal": delta("steal"),
    }
    return {name: round(100 * seconds / elapsed, 1) for name, seconds in parts.items()}


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def latencies(seconds: list[float]) -> dict[str, Any]:
    if not seconds:
        return {"n": 0}
    values = [s * 1000 for s in seconds]
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 1),
        "p99": round(percentile(values, 99), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


# ---------------------------------------------------------------------------- the agents


@dataclass(frozen=True, kw_only=True, slots=True)
class Share:
    """What one pusher process does: nodes ``index``, ``index + pushers``, … below
    ``machines``, each due once per ``interval`` from ``start`` (monotonic), to every
    address; ``rounds`` rounds (None: until stopped); ``burst``: every push due at once."""

    index: int
    pushers: int
    machines: int
    interval: float
    start: float
    addresses: tuple[tuple[str, int], ...]
    key_file: str
    now: float
    keep_alive: bool
    connections: int
    moving: bool
    rounds: int | None = None
    burst: bool = False
    whole: bool = False
    templates: int = TEMPLATES


class Bodies:
    """The templates' JSON with the node's names and ip as marks, made again each second
    (the template machines' ads at that second) unless ``moving`` is false; and the parts
    of each as pushed moved on (``moved``: the machine ad's JSON and the slot ads' moving
    values' JSON, which holds no name)."""

    def __init__(self, now: float, moving: bool, templates: int = TEMPLATES) -> None:
        self.machines = template_machines(now, templates)
        self.moving = moving
        self.second = -1
        self.texts: list[bytes] = []
        self.moved: list[tuple[bytes, bytes]] = []
        self.at(now)

    def at(self, now: float) -> list[bytes]:
        second = int(now)
        if second != self.second and (self.moving or not self.texts):
            self.second = second
            ads = [node_ad(machine.ad(now), HOST_MARK, IP_MARK) for machine in self.machines]
            self.texts = [json.dumps(ad).encode() for ad in ads]
            self.moved = [
                (
                    json.dumps(ad["machine"]).encode(),
                    json.dumps(split_slots(ad["slots"])[1]).encode(),
                )
                for ad in ads
            ]
        return self.texts

    def moved_on(self, now: float, t: int, digest: bytes) -> bytes:
        """Template ``t``'s ad at ``now`` pushed moved on, for the slot ads of ``digest``."""
        self.at(now)
        machine, moving = self.moved[t]
        return b"".join(
            (
                b'{"machine":',
                machine,
                b',"moved_on":{"slots_digest":"',
                digest,
                b'","moving":',
                moving,
                b"}}",
            )
        )


def push_share(share: Share, stats: SynchronizedArray[float], stop: Any) -> None:
    """A pusher process: push its nodes' ads on schedule until ``stop`` (or its rounds)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    base = share.index * STATS
    key = load_key(Path(share.key_file))
    nodes = list(range(share.index, share.machines, share.pushers))
    count = len(nodes)
    names = [f"node{i:05d}.bench".encode() for i in nodes]
    ips = [node_ip(i).encode() for i in nodes]
    heads = []
    for name in names:
        host = name.decode()
        token = create_token(
            key,
            subject=f"agent@{host}",
            scope=Scope.DAEMON,
            lifetime_s=TOKEN_LIFETIME,
            now=time.time(),
            node=host,
        )
        heads.append(
            (
                "POST /v1/ads HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                "User-Agent: nodeagent-bench\r\nContent-Length: "
            ).encode()
        )
    bodies = Bodies(share.now, share.moving, share.templates)
    host_mark, ip_mark = HOST_MARK.encode(), IP_MARK.encode()

    # the digest of each node's slot ads each master holds (its last reply's): as an
    # agent, a node pushes its moving values alone to a master that holds them
    digests: list[list[bytes | None]] = [[None] * count for _ in share.addresses]

    def request(j: int, a: int) -> bytes:
        digest = None if share.whole else digests[a][j]
        if digest is None:
            text = bodies.at(time.time())[nodes[j] % share.templates]
        else:
            text = bodies.moved_on(time.time(), nodes[j] % share.templates, digest)
        body = text.replace(host_mark, names[j]).replace(ip_mark, ips[j])
        return heads[j] + str(len(body)).encode() + b"\r\n\r\n" + body

    def replied(conn: Connection, status: int) -> None:
        """Keep the digest the reply gives (a 409 ``ad.slots_unknown``: none)."""
        found = _DIGEST_IN_REPLY.search(conn.reply)
        held = found.group(1) if status in (200, -200) and found else None
        digests[where[conn]][conn.node] = held

    def due(k: int) -> float:
        if share.burst:
            return share.start
        rounds, j = divmod(k, count)
        return share.start + (rounds + j / count) * share.interval

    limit = None if share.rounds is None else share.rounds * count
    selector = selectors.DefaultSelector()
    spans = range(len(share.addresses))
    pools = [
        [Connection(share.addresses[a], [b""]) for _ in range(share.connections)] for a in spans
    ]
    idle = [list(pool) for pool in pools]
    resting: set[Connection] = {conn for pool in pools for conn in pool}
    where = {conn: a for a in spans for conn in pools[a]}
    following = [0 for _ in spans]

    def close(conn: Connection) -> None:
        if conn.sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(conn.sock)
            conn.sock.close()
            conn.sock = None

    def rest(conn: Connection) -> None:
        if not share.keep_alive:
            close(conn)
        resting.add(conn)
        idle[where[conn]].append(conn)

    if count == 0:
        stats[base + DONE] = 1
        return
    try:
        while not stop.is_set():
            now = time.monotonic()
            for a in spans:
                if (
                    limit is None
                    and following[a] >= count
                    and now - due(following[a]) > share.interval
                ):
                    # An agent pushes again an interval after its last push: after the
                    # first round (every node pushed once), a push a whole interval late
                    # is not made (the node's next one is due).
                    late = now - share.interval - share.start
                    caught = math.ceil(late / share.interval * count)
                    stats[base + SKIPPED] += caught - following[a]
                    following[a] = caught
                while (
                    idle[a] and (limit is None or following[a] < limit) and due(following[a]) <= now
                ):
                    conn = idle[a].pop()
                    resting.discard(conn)
                    conn.node = following[a] % count
                    conn.prepared = [request(conn.node, a)]
                    conn.next = 0
                    following[a] += 1
                    try:
                        if conn.sock is None:
                            conn.connect(selector)
                        conn.send_next(selector)
                    except OSError:
                        stats[base + FAILED] += 1
                        close(conn)
                        rest(conn)
            waiting = [a for a in spans if limit is None or following[a] < limit]
            stats[base + BEHIND] = max(
                [max(0.0, now - due(following[a])) for a in waiting], default=0.0
            )
            if not waiting and len(resting) == len(where):
                stats[base + DONE] = 1
                return
            # the next push due on a free connection (none free: wait for a reply)
            upcoming = min([due(following[a]) for a in waiting if idle[a]], default=now + 0.05)
            for key_, mask in selector.select(timeout=min(0.05, max(0.0, upcoming - now))):
                conn = key_.data
                if conn in resting:  # a kept connection the master closed while idle
                    close(conn)
                    continue
                try:
                    done = conn.on_event(selector, mask)
                except OSError:
                    stats[base + FAILED] += 1
                    close(conn)
                    rest(conn)
                    continue
                if done is None:
                    continue
                status, closes = done
                replied(conn, status)
                if status == 200:
                    stats[base + OK] += 1
                    stats[base + LAST_OK] = time.monotonic()
                elif status == -200:
                    stats[base + NO_MODE] += 1
                    stats[base + LAST_OK] = time.monotonic()
                else:
                    stats[base + REFUSED] += 1
                if closes:
                    close(conn)
                rest(conn)
    finally:
        for pool in pools:
            for conn in pool:
                close(conn)
        selector.close()


class Pushers:
    """``count`` pusher processes (forked), ended by their pids."""

    def __init__(self, count: int, **share: Any) -> None:
        context = multiprocessing.get_context("fork")
        self.stats: SynchronizedArray[float] = context.Array("d", count * STATS, lock=False)
        self.stop_event = context.Event()
        self.procs = [
            context.Process(
                target=push_share,
                args=(Share(index=k, pushers=count, **share), self.stats, self.stop_event),
                daemon=True,
            )
            for k in range(count)
        ]
        for proc in self.procs:
            proc.start()
        self.psutil = [psutil.Process(proc.pid) for proc in self.procs if proc.pid is not None]

    def total(self, field: int) -> float:
        return sum(self.stats[k * STATS + field] for k in range(len(self.procs)))

    def answered(self) -> int:
        return int(self.total(OK) + self.total(NO_MODE))

    def behind(self) -> float:
        return max(self.stats[k * STATS + BEHIND] for k in range(len(self.procs)))

    def last_ok(self) -> float:
        return max(self.stats[k * STATS + LAST_OK] for k in range(len(self.procs)))

    def done(self) -> bool:
        return all(self.stats[k * STATS + DONE] for k in range(len(self.procs)))

    def cpu(self) -> float:
        total = 0.0
        for process in self.psutil:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += cpu_seconds(process)
        return total

    def rss(self) -> int:
        total = 0
        for process in self.psutil:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += process.memory_info().rss
        return total

    def counts(self) -> dict[str, int]:
        return {
            "answered_200": int(self.total(OK)),
            "answered_200_without_mode": int(self.total(NO_MODE)),
            "refused": int(self.total(REFUSED)),
            "failed": int(self.total(FAILED)),
            "skipped_a_whole_interval_late": int(self.total(SKIPPED)),
        }

    def close(self) -> None:
        self.stop_event.set()
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()  # SIGKILL to its pid
                proc.join(timeout=10)


# ---------------------------------------------------------------------------- the master


class Crashed(RuntimeError):
    """A master exited on its own."""


def alive(master: MasterProcess) -> None:
    proc = master.proc
    if proc is not None and proc.poll() is not None:
        tail = master.log_path.read_text(errors="replace").splitlines()[-15:]
        raise Crashed(json.dumps({"exit_status": proc.returncode, "log_tail": tail}))


def scrape(master: MasterProcess) -> dict[str, float]:
    """The master's ads-received counter (and of them those pushed with their moving values
    alone) and oldest live ad's age (``/metrics``)."""
    started = time.perf_counter()
    text = master.call("GET", "/metrics", timeout=120).text
    elapsed = time.perf_counter() - started
    figures = {"scrape_s": elapsed, "at": started + elapsed / 2}
    for line in text.splitlines():
        if line.startswith("nodeagent_master_ads_received_total "):
            figures["received"] = float(line.split()[-1])
        elif line.startswith("nodeagent_master_oldest_ad_age_seconds "):
            figures["oldest_ad_age_s"] = float(line.split()[-1])
        elif line.startswith("nodeagent_master_ads_moving_values_total "):
            figures["moving_values"] = float(line.split()[-1])
        elif line.startswith("nodeagent_master_nodes_behind "):
            figures["nodes_behind"] = float(line.split()[-1])
    return figures


def memory(pid: int) -> dict[str, int]:
    """RSS and peak RSS (VmHWM) of ``pid``, in bytes."""
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            figures[name] = int(value.split()[0]) * 1024
    return figures


def summary_behind(reader: httpx.Client) -> int | None:
    """The machines a summary read now leaves behind (its totals' ``behind``)."""
    reply = reader.get("/v1/maintenance/plan", params=SUMMARY, timeout=600)
    reply.raise_for_status()
    behind: int | None = (reply.json().get("totals") or {}).get("behind")
    return behind


def rss_mib(master: MasterProcess) -> float:
    """The master's resident memory now, in MiB."""
    assert master.proc is not None
    return round(memory(master.proc.pid)["VmRSS"] / 2**20, 1)


def window_start(now: float, w: int) -> float:
    """Window ``w``'s start as the plan shows it (``plan_latency``'s schedule)."""
    return int((now + 7200 + 600 * w) * NS) / NS


def moved_schedule(machines: int, now: float, moving: int) -> dict[str, Any]:
    """``plan_latency``'s schedule with its first ``moving`` machines in a new window."""
    document = plan_schedule(machines, now)
    moved = {f"node{i:05d}.bench" for i in range(min(moving, machines))}
    leaving: list[dict[str, str]] = []
    for window in document["windows"]:
        kept: list[dict[str, str]] = []
        for machine in window["machine_ids"]:
            (leaving if machine["hostname"] in moved else kept).append(machine)
        window["machine_ids"] = kept
    document["windows"] = [w for w in document["windows"] if w["machine_ids"]]
    document["windows"].append(
        {
            "machine_ids": leaving,
            "unavailability": {
                "start": {"nanoseconds": int((now + 7200 + 600 * WINDOWS) * NS)},
                "duration": {"nanoseconds": 3600 * NS},
            },
        }
    )
    return document


def read_plan(
    client: httpx.Client, params: dict[str, str], *, first_only: bool = False
) -> dict[str, Any]:
    """``GET /v1/maintenance/plan`` with ``params``, as JSON lines when answered so, read
    to the end without keeping it (``first_only``: closed at its first row, the master
    stops making it): first/last row times, rows, bytes."""
    started = time.perf_counter()
    first = last = None
    rows = size = 0
    end: dict[str, Any] | None = None
    error = None
    with client.stream(
        "GET", "/v1/maintenance/plan", params={**params, "format": "jsonl"}, timeout=600
    ) as response:
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"plan: {response.status_code} {response.text[:300]}")
        lines = response.headers.get("content-type", "").startswith("application/x-ndjson")
        pending = b""
        needle = b'"machine_id":'
        for chunk in response.iter_bytes():
            now = time.perf_counter()
            size += len(chunk)
            if not lines:
                if first is None:
                    first = now
                rows += (pending + chunk).count(needle)
                pending = chunk[-(len(needle) - 1) :]
                last = now
                continue
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                if line.startswith(b'{"row"'):
                    rows += 1
                    if first is None:
                        first = now
                elif line.startswith(b'{"end"'):
                    last = now
                    end = json.loads(line)["end"]
                elif line.startswith(b'{"error"'):
                    last = now
                    error = json.loads(line)["error"]
            if first_only and first is not None:
                break
    finished = time.perf_counter()
    figures: dict[str, Any] = {
        "format": "jsonl" if lines else "json",
        "first_row_ms" if lines else "first_bytes_ms": None
        if first is None
        else ms(first - started),
        "last_row_ms" if lines else "last_byte_ms": None if last is None else ms(last - started),
        "total_ms": ms(finished - started),
        "rows": rows,
        "reply_bytes": size,
    }
    if end is not None:
        figures["matched"] = end.get("matched")
    if error is not None:
        figures["error"] = error
    return figures


def first_row(client: httpx.Client) -> float:
    """Seconds from asking the whole plan as JSON lines to its first row (the reply
    closed there)."""
    figures = read_plan(client, {}, first_only=True)
    if figures.get("first_row_ms") is None:
        raise RuntimeError(f"plan: no row ({figures})")
    return float(figures["first_row_ms"]) / 1000


def first_rows(master: MasterProcess, samples: int) -> dict[str, Any]:
    """The whole plan's first row ``samples`` times, a second apart, while the agents
    push: over TCP on a new connection each (a READ token: the CLI elsewhere) and over
    the master's Unix socket (the CLI on its host)."""
    tcp: list[float] = []
    unix: list[float] = []
    for _ in range(samples):
        alive(master)
        with master.client(master.token("READ")) as client:
            tcp.append(first_row(client))
        time.sleep(1)
        with master.client() as client:
            unix.append(first_row(client))
        time.sleep(1)
    return {"tcp_ms": latencies(tcp), "unix_ms": latencies(unix)}


def preview(
    client: httpx.Client, pushers: Pushers, document: dict[str, Any], rows: str
) -> dict[str, Any]:
    """``POST /v1/maintenance/schedule/preview?rows=``, read to the end: latency (first
    bytes of the rows, last byte), size, moved, its ``schedule_version``; and the pushes
    answered meanwhile (:func:`meanwhile`)."""
    body = json.dumps(document).encode()
    size, head, tail, status, first = 0, b"", b"", 0, None
    with meanwhile(pushers) as pushes:
        started = time.perf_counter()
        with client.stream(
            "POST",
            "/v1/maintenance/schedule/preview",
            params={"rows": rows},
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=600,
        ) as response:
            status = response.status_code
            for chunk in response.iter_bytes():
                size += len(chunk)
                if first is None and b'"machines":[{' in head + chunk:
                    first = time.perf_counter() - started
                if len(head) < 65536:
                    head += chunk[: 65536 - len(head)]
                tail = (tail + chunk)[-(1 << 20) :]
        elapsed = time.perf_counter() - started
    if status != 200:
        raise RuntimeError(f"preview: {status} {tail[:300]!r}")
    moved = re.search(rb'"totals":\s*\{[^}]*"moved":\s*(\d+)', tail) or re.search(
        rb'"totals":\s*\{[^}]*"moved":\s*(\d+)', head
    )
    version = re.search(rb'"schedule_version":\s*"([0-9a-f]+)"', head)
    return {
        "rows": rows,
        "first_row_ms": None if first is None else ms(first),
        "ms": ms(elapsed),
        "request_bytes": len(body),
        "reply_bytes": size,
        "moved": None if moved is None else int(moved[1]),
        "schedule_version": None if version is None else version[1].decode(),
        **pushes,
    }


def apply_previewed(
    master: MasterProcess,
    reader: httpx.Client,
    pushers: Pushers,
    document: dict[str, Any],
    version: str,
) -> dict[str, Any]:
    """The previewed schedule applied as ``schedule set`` applies it (``PUT
    /v1/maintenance/schedule?if_version=``): request to reply, the pushes answered
    meanwhile, then the summary's first reply after it."""
    body = json.dumps(document).encode()
    with master.client(master.token("ADMINISTRATOR")) as admin, meanwhile(pushers) as pushes:
        started = time.perf_counter()
        reply = admin.put(
            "/v1/maintenance/schedule",
            params={"if_version": version},
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=600,
        )
        elapsed = time.perf_counter() - started
    if reply.status_code != 200:
        raise RuntimeError(f"apply: {reply.status_code} {reply.text[:300]!r}")
    started = time.perf_counter()
    summary = reader.get("/v1/maintenance/plan", params=SUMMARY, timeout=600)
    summary.raise_for_status()
    return {
        "ms": ms(elapsed),
        **pushes,
        "summary_after_ms": ms(time.perf_counter() - started),
        "summary_after_behind": (summary.json().get("totals") or {}).get("behind"),
    }


@contextlib.contextmanager
def meanwhile(pushers: Pushers) -> Iterator[dict[str, Any]]:
    """While the block runs: the ads the pushers had answered a second, and the longest
    time in which none was answered (sampled every 50 ms: a master that does the block's
    work in one go holds every push for as long); in the dict yielded, once it ends."""
    answered = pushers.answered()
    done = threading.Event()
    longest = [0.0]

    def watch() -> None:
        last, since = pushers.answered(), time.perf_counter()
        while not done.wait(0.05):
            now, count = time.perf_counter(), pushers.answered()
            if count != last:
                last, since = count, now
            longest[0] = max(longest[0], now - since)

    figures: dict[str, Any] = {}
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.perf_counter()
    try:
        yield figures
    finally:
        seconds = time.perf_counter() - started
        done.set()
        watcher.join()
        figures["ads_per_s_meanwhile"] = round((pushers.answered() - answered) / seconds, 1)
        figures["longest_without_an_ad_s"] = round(longest[0], 2)


def wait_round(
    pushers: Pushers,
    needed: int,
    timeout: float,
    masters: list[MasterProcess],
) -> float | None:
    """Wait until the pushers have ``needed`` answers; the seconds it took (None: not in
    ``timeout``)."""
    started = time.monotonic()
    while pushers.answered() < needed:
        for master in masters:
            alive(master)
        if time.monotonic() - started > timeout:
            return None
        time.sleep(0.5)
    return round(time.monotonic() - started, 1)


def cold_read(
    master: MasterProcess, pushers: Pushers, reader: httpx.Client, what: str
) -> dict[str, Any]:
    """A scrape or a summary (``what``) asked of a master that still owes forecasts (right
    after the first round): how long it took, the ads the pushers had answered a second
    meanwhile, and the longest time meanwhile in which none was answered (sampled every 50
    ms: a master that makes the forecasts in one go holds every push for as long)."""
    waiting = int(master.call("GET", "/v1/ad").json()["MasterForecastsWaiting"])
    with meanwhile(pushers) as pushes:
        started = time.perf_counter()
        if what == "summary":
            response = reader.get("/v1/maintenance/plan", params=SUMMARY, timeout=900)
        else:
            response = reader.get("/metrics", timeout=900)
        seconds = time.perf_counter() - started
    return {
        "forecasts_waiting_before": waiting,
        "status": response.status_code,
        "read": what,
        "behind": _behind(response, what),
        # the nodes whose latest ad the scrape's node counts had not read
        "nodes_behind": _gauge(response, "nodeagent_master_nodes_behind")
        if what == "metrics"
        else None,
        "read_s": round(seconds, 2),
        **pushes,
        "forecasts_waiting_after": int(
            master.call("GET", "/v1/ad").json()["MasterForecastsWaiting"]
        ),
    }


def _behind(response: httpx.Response, what: str) -> int | None:
    """The machines a summary's totals or a scrape left behind (``None``: not said)."""
    if response.status_code == 200 and what == "summary":
        return int(response.json()["totals"]["behind"])
    return _gauge(response, "nodeagent_master_plan_machines_behind")


def _gauge(response: httpx.Response, name: str) -> int | None:
    """The value of a scrape's gauge ``name`` without labels (``None``: not said)."""
    if response.status_code != 200:
        return None
    for line in response.text.splitlines():
        if line.startswith(f"{name} "):
            return int(float(line.split()[-1]))
    return None


def wait_warm(masters: list[MasterProcess], timeout: float) -> float | None:
    """Wait until every master has made the forecasts its passes owe
    (``MasterForecastsWaiting`` of its ``GET /v1/ad`` is 0: a master just started on a
    full pool makes them at ``forecasts_per_pass`` a pass); the seconds it took (None: not
    in ``timeout``)."""
    started = time.monotonic()
    while True:
        waiting = 0
        for master in masters:
            alive(master)
            waiting += int(master.call("GET", "/v1/ad").json()["MasterForecastsWaiting"])
        if waiting == 0:
            return round(time.monotonic() - started, 1)
        if time.monotonic() - started > timeout:
            return None
        time.sleep(1.0)


def steady(
    masters: list[MasterProcess],
    pushers: Pushers,
    seconds: float,
    every: float,
    readers: list[httpx.Client],
    machines: int,
) -> dict[str, Any]:
    """The steady window: counters at both ends, summaries asked meanwhile (reader ``k``
    of ``readers`` asks master ``k``, in turn)."""
    processes = [psutil.Process(m.proc.pid) for m in masters if m.proc is not None]
    before = [scrape(m) for m in masters]
    answered0, pcpu0 = pushers.answered(), pushers.cpu()
    mcpu0 = [cpu_seconds(p) for p in processes]
    wcpu0 = [_workers_cpu(p) for p in processes]
    host0, own0 = psutil.cpu_times(), cpu_seconds(psutil.Process())
    t0 = time.perf_counter()
    times: list[list[float]] = [[] for _ in readers]
    behind: list[list[int]] = [[] for _ in readers]
    problems: list[str] = []
    turn = 0
    next_at = t0
    while True:
        next_at += every
        wait = next_at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if time.perf_counter() - t0 >= seconds:
            break
        for master in masters:
            alive(master)
        k = turn % len(readers)
        turn += 1
        started = time.perf_counter()
        response = readers[k].get("/v1/maintenance/plan", params=SUMMARY, timeout=600)
        times[k].append(time.perf_counter() - started)
        if response.status_code != 200:
            problems.append(f"master {k}: {response.status_code} {response.text[:200]}")
            continue
        try:
            plan = response.json()
            behind[k].append(int(plan["totals"]["behind"]))
            check_summary(plan, machines)
        except RuntimeError as e:
            problems.append(f"master {k}: {e}")
    elapsed = time.perf_counter() - t0
    answered = pushers.answered() - answered0
    pcpu = pushers.cpu() - pcpu0
    mcpu = [cpu_seconds(p) - c for p, c in zip(processes, mcpu0, strict=True)]
    wcpu = [_workers_cpu(p) - c for p, c in zip(processes, wcpu0, strict=True)]
    # the masters, their workers, the pushers and this process (the summaries' reader)
    ours = pcpu + sum(mcpu) + sum(wcpu) + cpu_seconds(psutil.Process()) - own0
    host = host_cpu(host0, psutil.cpu_times(), ours, elapsed)
    after = [scrape(m) for m in masters]
    per_master = []
    for k, master in enumerate(masters):
        # the counter's instants: the middle of each scrape
        received = after[k]["received"] - before[k]["received"]
        counted = after[k]["at"] - before[k]["at"]
        assert master.proc is not None
        rss = memory(master.proc.pid)["VmRSS"]
        per_master.append(
            {
                "ads_received_per_s": round(received / counted, 1),
                # of them, pushed with their slot ads' moving values alone
                "moving_values_share": round(
                    (after[k].get("moving_values", 0) - before[k].get("moving_values", 0))
                    / max(received, 1),
                    3,
                ),
                "master_cpu_percent": round(100 * mcpu[k] / elapsed, 1),
                "ingest_workers_cpu_percent": round(100 * wcpu[k] / elapsed, 1),
                "ingest_workers_rss_mib": round(
                    sum(w.memory_info().rss for w in _workers(processes[k])) / 2**20, 1
                ),
                "oldest_ad_age_s": after[k].get("oldest_ad_age_s"),
                "scrape_ms": ms(after[k]["scrape_s"]),
                # nodes whose latest ad the scrape's node counts had not read
                "scrape_nodes_behind": after[k].get("nodes_behind"),
                "rss_mib": round(rss / 2**20, 1),
                "rss_kib_per_machine": round(rss / 1024 / machines, 1),
                "summary_ms": latencies(times[k]),
                # machines each summary counted as of an older ad, or not at all
                "summary_behind": {
                    "max": max(behind[k], default=None),
                    "last": behind[k][-1] if behind[k] else None,
                    "whole_replies": sum(1 for b in behind[k] if b == 0),
                    "replies": len(behind[k]),
                },
            }
        )
    return {
        "window_s": round(elapsed, 1),
        "pushers_ads_per_s": round(answered / elapsed / len(masters), 1),
        "pushers_cpu_percent": round(100 * pcpu / elapsed, 1),
        "pushers_behind_s": round(pushers.behind(), 1),
        "pushers_since_start": pushers.counts(),
        "pushers_rss_mib": round(pushers.rss() / 2**20, 1),
        "host_cpu_percent": host,
        "masters": per_master,
        "summary_problems": problems[:5],
    }


# ---------------------------------------------------------------------------- the parts


@dataclass(frozen=True, kw_only=True, slots=True)
class Options:
    interval: float
    window: float
    pushers: int
    connections: int
    keep_alive: bool
    moving: bool
    every: float
    preview_machines: int
    preview_rows: str = "changed"
    apply: bool = True
    restart: bool
    restart_burst: bool
    round_timeout: float
    restart_every: float = 1.0
    ingest_workers: int = 0
    ingest_worker_nice: int | None = None
    cold_read: str | None = None
    whole: bool = False
    templates: int = TEMPLATES
    first_rows: int = 10


def address(master: MasterProcess) -> tuple[str, int]:
    host, port = master.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def start_pushers(
    options: Options,
    machines: int,
    targets: list[MasterProcess],
    now: float,
    *,
    rounds: int | None = None,
    burst: bool = False,
) -> Pushers:
    return Pushers(
        options.pushers,
        machines=machines,
        interval=options.interval,
        start=time.monotonic(),
        addresses=tuple(address(m) for m in targets),
        key_file=str(targets[0].key_file),
        now=now,
        keep_alive=options.keep_alive,
        connections=options.connections,
        moving=options.moving,
        rounds=rounds,
        burst=burst,
        whole=options.whole,
        templates=options.templates,
    )


def guarded(result: dict[str, Any], name: str, part: Callable[[], dict[str, Any]]) -> bool:
    """Run ``part`` into ``result[name]``; an error is reported there. False when a
    master crashed (what follows is not measured)."""
    progress(f"  {name}")
    try:
        result[name] = part()
    except Crashed as e:
        result[name] = {"master_exited": json.loads(str(e))}
        return False
    except Exception as e:  # reported; the run goes on to what it can
        result[name] = {"error": f"{type(e).__name__}: {e}"}
    return True


def progress(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def ingest_settings(options: Options) -> dict[str, Any]:
    """The masters' settings of their ingest workers."""
    settings: dict[str, Any] = {"ingest_workers": options.ingest_workers}
    if options.ingest_worker_nice is not None:
        settings["ingest_worker_nice"] = options.ingest_worker_nice
    return settings


def on_sqlite(options: Options, machines: int, tmp: Path) -> dict[str, Any]:
    master = MasterProcess(
        tmp / "master", settings={"ad_lifetime": 300, **ingest_settings(options)}
    )
    result: dict[str, Any] = {}
    pushers: Pushers | None = None
    try:
        master.start()
        assert master.proc is not None
        now = time.time()
        post_schedule(master, machines, now)
        agents = pushers = start_pushers(options, machines, [master], now)
        started = time.monotonic()
        reader = master.client(master.token("READ"))
        first = wait_round(pushers, machines, options.round_timeout, [master])
        result["first_round_s"] = first
        if (what := options.cold_read) is not None:
            with master.client(master.token("READ")) as cold:
                guarded(result, "cold_read", lambda: cold_read(master, agents, cold, what))
        result["warm_s"] = wait_warm([master], options.round_timeout)
        with reader:
            ok = guarded(
                result,
                "steady",
                lambda: steady([master], agents, options.window, options.every, [reader], machines),
            )
            if ok and options.first_rows:
                ok = guarded(result, "first_rows", lambda: first_rows(master, options.first_rows))
            if ok:
                ok = guarded(result, "whole_plan", lambda: read_plan(reader, {}))
            if ok:

                def one_window() -> dict[str, Any]:
                    figures = read_plan(reader, {"window": repr(window_start(now, 0))})
                    figures["window_rows_expected"] = len(range(0, machines, WINDOWS))
                    figures["window_filter_answered"] = figures["rows"] < machines
                    return figures

                ok = guarded(result, "one_window", one_window)
            if ok and options.preview_machines:
                document = moved_schedule(machines, now, options.preview_machines)
                rows = options.preview_rows
                before = memory(master.proc.pid)
                behind = summary_behind(reader)
                ok = guarded(result, "preview", lambda: preview(reader, agents, document, rows))
                result["preview"]["summary_before_behind"] = behind
                result["preview"]["rss_before_mib"] = round(before["VmRSS"] / 2**20, 1)
                result["preview"]["rss_after_mib"] = rss_mib(master)
                version = result.get("preview", {}).get("schedule_version")
                if ok and options.apply and version:
                    ok = guarded(
                        result,
                        "apply",
                        lambda: apply_previewed(master, reader, agents, document, version),
                    )
                    result["apply"]["rss_after_mib"] = rss_mib(master)
        alive(master)
        mem = memory(master.proc.pid)
        result["memory"] = {
            "rss_mib": round(mem["VmRSS"] / 2**20, 1),
            "peak_rss_mib": round(mem["VmHWM"] / 2**20, 1),
            "peak_kib_per_machine": round(mem["VmHWM"] / 1024 / machines, 1),
        }
        result["pushing_s"] = round(time.monotonic() - started, 1)
        pushers.close()
        pushers = None
        if options.restart:
            guarded(result, "after_restart", lambda: after_restart(options, machines, master, now))
    except Crashed as e:
        result["master_exited"] = json.loads(str(e))
    finally:
        if pushers is not None:
            pushers.close()
        stop_master(master)
    result["master_log_problems"] = log_problems(master)
    return result


def after_restart(
    options: Options, machines: int, master: MasterProcess, now: float
) -> dict[str, Any]:
    assert master.proc is not None
    master.proc.kill()
    master.proc.wait()
    started = time.perf_counter()
    master.start()
    result: dict[str, Any] = {"start_s": round(time.perf_counter() - started, 2)}
    burst = options.restart_burst
    pushers = start_pushers(options, machines, [master], now, rounds=1, burst=burst)
    process = psutil.Process(master.proc.pid)
    cpu0 = (cpu_seconds(process), _workers_cpu(process), pushers.cpu())
    try:
        pushed_from = time.monotonic()
        while not pushers.done():
            alive(master)
            if time.monotonic() - pushed_from > options.round_timeout:
                raise TimeoutError(f"{pushers.answered()} of {machines} ads in")
            time.sleep(0.05)
        last_in = pushers.last_ok()
        result["ads"] = "all at once" if burst else f"spread over {options.interval} s"
        result["ads_back_s"] = round(last_in - pushed_from, 1)
        result["pushers"] = pushers.counts()
        # where the round's time went: a core is 100 %
        spent = (cpu_seconds(process), _workers_cpu(process), pushers.cpu())
        result["round_cpu_percent"] = {
            name: round(100 * (b - a) / max(last_in - pushed_from, 1e-9), 1)
            for name, a, b in zip(("master", "ingest_workers", "pushers"), cpu0, spent, strict=True)
        }
    finally:
        pushers.close()
    with master.client(master.token("READ")) as reader:
        t0 = time.monotonic()
        response = reader.get("/v1/maintenance/plan", params=SUMMARY, timeout=600)
        t1 = time.monotonic()
        if response.status_code != 200:
            raise RuntimeError(f"summary: {response.status_code} {response.text[:300]}")
        check_summary(response.json(), machines)
        result["first_summary_ms"] = ms(t1 - t0)
        # the machines whose share of its totals the summary left (made later)
        result["first_summary_behind"] = _behind(response, "summary")
        result["first_summary_since_last_ad_ms"] = ms(t1 - last_in)
        # then a summary every --restart-every s (1 s: twice as often as `nodeagent master
        # plan --watch` asks) until one is whole: the first whole summary, and the
        # machines each left behind
        behind = [result["first_summary_behind"]]
        while behind[-1] != 0 and time.monotonic() - last_in < options.round_timeout:
            time.sleep(max(0.0, options.restart_every - (time.monotonic() - t1)))
            response = reader.get("/v1/maintenance/plan", params=SUMMARY, timeout=600)
            t1 = time.monotonic()
            behind.append(_behind(response, "summary"))
        result["summaries_behind"] = behind
        if behind[-1] == 0:
            result["first_whole_summary_since_last_ad_ms"] = ms(t1 - last_in)
        result["catch_up_master_cpu_percent"] = round(
            100 * (cpu_seconds(process) - spent[0]) / max(t1 - last_in, 1e-9), 1
        )
        plan = read_plan(reader, {})
        result["first_whole_plan"] = plan
        result["first_whole_plan_since_last_ad_ms"] = ms(time.monotonic() - last_in)
    result["rss_mib"] = round(memory(master.proc.pid)["VmRSS"] / 2**20, 1)
    return result


def on_etcd(
    options: Options, machines: int, count: int, tmp: Path, max_request: int | None
) -> dict[str, Any]:
    require_etcd()
    result: dict[str, Any] = {"masters": count}
    args = () if max_request is None else (f"--max-request-bytes={max_request}",)
    with EtcdServer(tmp / "etcd", args=args) as etcd:
        masters = Masters(tmp / "pool", etcd, count, ad_lifetime=300, **ingest_settings(options))
        pushers: Pushers | None = None
        readers: list[httpx.Client] = []
        try:
            masters.start()
            leader = masters.leader()
            now = time.time()
            post_schedule(leader, machines, now)
            agents = pushers = start_pushers(options, machines, masters.all, now)
            result["first_round_s"] = wait_round(
                pushers, machines * count, options.round_timeout, masters.all
            )
            result["warm_s"] = wait_warm(masters.all, options.round_timeout)
            readers = [m.client(m.token("READ")) for m in masters.all]
            guarded(
                result,
                "steady",
                lambda: steady(
                    masters.all, agents, options.window, options.every, readers, machines
                ),
            )
            roles = []
            for master in masters.all:
                doc = masters.leader_doc(master)
                roles.append("leader" if doc.get("leading") else "follower")
            result["roles_at_end"] = roles
            result["leader_at_start"] = masters.all.index(leader)
        except Crashed as e:
            result["master_exited"] = json.loads(str(e))
        finally:
            for reader in readers:
                reader.close()
            if pushers is not None:
                pushers.close()
            masters.close()
        result["master_log_problems"] = [log_problems(m) for m in masters.all]
    return result


def run(
    options: Options,
    sizes: list[int],
    *,
    etcd: bool,
    count: int,
    max_request: int | None,
) -> dict[str, Any]:
    results = []
    for machines in sizes:
        progress(f"{machines} machines, sqlite")
        with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as name:
            figures: dict[str, Any] = {
                "machines": machines,
                "needed_ads_per_s": round(machines / options.interval, 1),
                "sqlite": on_sqlite(options, machines, Path(name)),
            }
        if etcd:
            progress(f"{machines} machines, etcd")
            with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as name:
                figures["etcd"] = on_etcd(options, machines, count, Path(name), max_request)
        results.append(figures)
    return {
        "benchmark": "scale",
        "interval_s": options.interval,
        "window_s": options.window,
        "pushers": options.pushers,
        "connections_per_pusher": options.connections,
        "connection_per_ad": not options.keep_alive,
        "ads_move_in_time": options.moving,
        "moving_values_alone": not options.whole,
        "summary_params": SUMMARY,
        "oldest_ad_age_from": "nodeagent_master_oldest_ad_age_seconds (/metrics)",
        "claims_per_node": 8,
        "templates": options.templates,
        "ingest_workers": options.ingest_workers,
        "ingest_worker_nice": options.ingest_worker_nice,  # None: the master's default
        "windows": WINDOWS,
        "sizes": results,
    }


def sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machines", type=sizes, default=[10_000, 30_000, 100_000])
    parser.add_argument("--interval", type=float, default=60.0, help="agents' update_interval")
    parser.add_argument("--window", type=float, default=None, help="steady window (s)")
    parser.add_argument("--pushers", type=int, default=2, help="pusher processes")
    parser.add_argument("--connections", type=int, default=32, help="in flight per pusher")
    parser.add_argument("--keep-alive", action="store_true", help="keep connections open")
    parser.add_argument("--static-ads", action="store_true", help="the same bytes each round")
    parser.add_argument(
        "--whole-ads", action="store_true", help="every push the whole ad (no moving values alone)"
    )
    parser.add_argument("--summary-every", type=float, default=2.0, help="seconds")
    parser.add_argument(
        "--first-rows", type=int, default=10, help="whole plans read to their first row (0: none)"
    )
    parser.add_argument("--preview-machines", type=int, default=1000)
    parser.add_argument("--no-preview", action="store_true")
    parser.add_argument("--preview-rows", choices=["changed", "all"], default="changed")
    parser.add_argument("--no-apply", action="store_true", help="preview, not apply")
    parser.add_argument("--no-restart", action="store_true")
    parser.add_argument("--restart-burst", action="store_true", help="ads back all at once")
    parser.add_argument(
        "--restart-every", type=float, default=1.0, help="summaries after a restart (s)"
    )
    parser.add_argument("--no-etcd", action="store_true")
    parser.add_argument("--masters", type=int, default=3, help="masters on etcd")
    parser.add_argument("--etcd-max-request-bytes", type=int, default=None)
    parser.add_argument(
        "--ingest-workers", type=int, default=0, help="each master's ingest_workers"
    )
    parser.add_argument(
        "--ingest-worker-nice",
        type=int,
        default=None,
        help="each master's ingest_worker_nice (default: the master's)",
    )
    parser.add_argument(
        "--cold-read",
        choices=["metrics", "summary"],
        default=None,
        help="scrape or ask a summary right after the first round, forecasts still owed",
    )
    parser.add_argument(
        "--round-timeout", type=float, default=None, help="for a round (default 5 intervals)"
    )
    parser.add_argument(
        "--templates",
        type=int,
        default=TEMPLATES,
        help="template machines the nodes' ads are of, each one's claims started 37 s after "
        "the one before's (node i's ad is template i mod N's)",
    )
    args = parser.parse_args()
    options = Options(
        interval=args.interval,
        window=args.window if args.window is not None else args.interval,
        pushers=args.pushers,
        connections=args.connections,
        keep_alive=args.keep_alive,
        moving=not args.static_ads,
        every=args.summary_every,
        preview_machines=0 if args.no_preview else args.preview_machines,
        preview_rows=args.preview_rows,
        apply=not args.no_apply,
        restart=not args.no_restart,
        restart_burst=args.restart_burst,
        restart_every=args.restart_every,
        round_timeout=args.round_timeout or 5 * args.interval,
        ingest_workers=args.ingest_workers,
        ingest_worker_nice=args.ingest_worker_nice,
        cold_read=args.cold_read,
        whole=args.whole_ads,
        templates=args.templates,
        first_rows=args.first_rows,
    )
    signal.signal(signal.SIGTERM, terminate)
    with contextlib.suppress(BrokenPipeError):
        figures = run(
            options,
            args.machines,
            etcd=not args.no_etcd,
            count=args.masters,
            max_request=args.etcd_max_request_bytes,
        )
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
