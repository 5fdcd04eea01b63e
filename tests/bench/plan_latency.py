"""Latency of the cluster maintenance plan for 10,000 scheduled machines.

10,000 nodes, each with an agent ad of 8 running claims (made by :class:`slots.Machine`,
as in ``ad_ingest.py``), all scheduled: 100 windows of 100 machines, 2 to 18.5 hours
ahead, so every machine is DRAINING and no drain is due during the benchmark.

* **In-process**: :meth:`Master.plan` on a master holding those ads and that schedule.
  Its clock moves on by one second before each call, so no call can reuse what an
  earlier one computed for the same second; the ads are then 1 to ``runs`` seconds old
  and are all brought up to ``now``.
* **Over HTTP**: a real master subprocess receives the 10,000 ads over TCP (DAEMON
  tokens) and the schedule over its Unix socket; then ``GET /v1/maintenance/plan`` over
  TCP with a READ token, one keep-alive connection, from the request to the last byte of
  the reply. The master's CPU time per request is given too.

Both with blockers (the default) and with ``blockers=false``. Prints one JSON document.
Usage: ``python tests/bench/plan_latency.py [--machines 10000] [--runs 3] [--http-runs 2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._adstore import AdStore
from nodeagent._agent_link import HttpAgentLink
from nodeagent._maintenance import MaintenanceSchedule
from nodeagent._master import Master
from nodeagent._store import DocumentStore
from tests.bench._benchlib import percentile, terminate
from tests.bench.ad_ingest import (
    CLAIMS,
    TEMPLATES,
    log_problems,
    node_ad,
    node_ip,
    push_each,
    requests,
    stop_master,
    template_ads,
)
from tests.harness import MasterProcess

NS = 1_000_000_000
WINDOWS = 100


class StepClock:
    """Wall-clock time that moves only when told."""

    def __init__(self, now: float) -> None:
        self.t = now

    def now(self) -> float:
        return self.t


def schedule(machines: int, now: float) -> dict[str, Any]:
    """``WINDOWS`` one-hour windows, 2 h to 2 h + 99 × 10 min ahead, machines dealt round."""
    return {
        "windows": [
            {
                "machine_ids": [
                    {"hostname": f"node{i:05d}.bench", "ip": node_ip(i)}
                    for i in range(w, machines, WINDOWS)
                ],
                "unavailability": {
                    "start": {"nanoseconds": int((now + 7200 + 600 * w) * NS)},
                    "duration": {"nanoseconds": 3600 * NS},
                },
            }
            for w in range(min(WINDOWS, machines))
        ]
    }


def summary(seconds: list[float]) -> dict[str, Any]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50": round(percentile(ms, 50), 1),
        "p99": round(percentile(ms, 99), 1),
        "min": round(min(ms), 1),
        "max": round(max(ms), 1),
    }


def check(plan: dict[str, Any], machines: int, *, blockers: bool) -> None:
    rows = plan["machines"]
    if len(rows) != machines or plan["totals"]["without_node"] != 0:
        raise RuntimeError(f"{len(rows)} machines in the plan, {plan['totals']} totals")
    if any(row["expected"] is None for row in rows):
        raise RuntimeError("a machine has no estimate")
    if blockers != all(len(row["blockers"]) == CLAIMS for row in rows):
        raise RuntimeError("blockers are not what was asked")


# ---------------------------------------------------------------------------- in-process


def in_process(ads: list[dict[str, Any]], now: float, runs: int, tmp: Path) -> dict[str, Any]:
    clock = StepClock(now)
    store = DocumentStore(tmp / "in-process.db")
    try:
        master = Master(
            store=store,
            link=HttpAgentLink(b"k" * 32),
            clock=clock,
            ads=AdStore(lifetime=3600),
        )
        for ad in ads:
            master.ads.update(ad, now)
        master.state.update_schedule(MaintenanceSchedule.from_json(schedule(len(ads), now)))
        result: dict[str, Any] = {}
        for blockers in (True, False):
            times = []
            for _ in range(runs):
                clock.t += 1.0
                started = time.perf_counter()
                plan = master.plan(with_blockers=blockers)
                times.append(time.perf_counter() - started)
                check(plan, len(ads), blockers=blockers)
            result["plan_ms" if blockers else "plan_without_blockers_ms"] = summary(times)
        return result
    finally:
        store.close()


# ---------------------------------------------------------------------------- over HTTP


def over_http(machines: int, now: float, runs: int, tmp: Path) -> dict[str, Any]:
    master = MasterProcess(tmp / "master", settings={"ad_lifetime": 3600})
    try:
        master.start()
        assert master.proc is not None
        process = psutil.Process(master.proc.pid)
        host, port = master.url.removeprefix("http://").rsplit(":", 1)
        started = time.perf_counter()
        statuses = push_each((host, int(port)), requests(master, int(port), machines, now))
        pushed_in = time.perf_counter() - started
        if statuses != {200: machines}:
            raise RuntimeError(f"ad pushes answered {statuses}")
        posted = master.call("POST", "/maintenance/schedule", json=schedule(machines, now))
        if posted.status_code != 200:
            raise RuntimeError(f"schedule refused: {posted.status_code} {posted.text}")
        result: dict[str, Any] = {"ads_pushed_in_s": round(pushed_in, 2)}
        with master.client(master.token("READ")) as client:
            for blockers in (True, False):
                times, cpu, size = [], [], 0
                for _ in range(runs):
                    cpu0 = sum(process.cpu_times()[:2])
                    t0 = time.perf_counter()
                    response = client.get(
                        "/v1/maintenance/plan", params={"blockers": str(blockers).lower()}
                    )
                    times.append(time.perf_counter() - t0)
                    cpu.append(sum(process.cpu_times()[:2]) - cpu0)
                    if response.status_code != 200:
                        raise RuntimeError(f"plan: {response.status_code} {response.text[:200]}")
                    size = len(response.content)
                    check(response.json(), machines, blockers=blockers)
                name = "plan" if blockers else "plan_without_blockers"
                result[f"{name}_ms"] = summary(times)
                result[f"{name}_master_cpu_ms"] = summary(cpu)
                result[f"{name}_reply_bytes"] = size
        result["master_rss_mib"] = round(process.memory_info().rss / 2**20, 1)
    finally:
        stop_master(master)
    result["master_log_problems"] = log_problems(master)
    return result


def run(machines: int, runs: int, http_runs: int) -> dict[str, Any]:
    now = time.time()
    templates = template_ads(now)
    ads = [
        node_ad(templates[i % TEMPLATES], f"node{i:05d}.bench", node_ip(i)) for i in range(machines)
    ]
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as name:
        tmp = Path(name)
        local = in_process(ads, now, runs, tmp)
        del ads
        remote = over_http(machines, now, http_runs, tmp) if http_runs else {}
    return {
        "benchmark": "plan_latency",
        "machines": machines,
        "claims_per_node": CLAIMS,
        "windows": min(WINDOWS, machines),
        "target_p50_ms": 250,
        "in_process": local,
        "http": remote,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machines", type=int, default=10_000, help="scheduled machines")
    parser.add_argument("--runs", type=int, default=3, help="in-process calls per variant")
    parser.add_argument("--http-runs", type=int, default=2, help="HTTP requests per variant")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, terminate)
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(run(args.machines, args.runs, args.http_runs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
