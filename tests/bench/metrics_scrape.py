"""The cost of a scrape of the master's ``/metrics`` with 10,000 scheduled machines.

The master's metrics read the plan at every scrape (the late machines, the escalations to
come, the expected badput: :mod:`nodeagent.master._fleet`), so a scrape costs about what
the plan's summary costs. In-process, on a master holding the ads and the schedule of
``plan_latency.py`` (10,000 nodes with 8 running claims each, 100 windows of 100 machines
2 to 18.5 hours ahead), whose clock moves on by one second before each call:
``scrape_ms`` is :meth:`MasterMetrics.render` (the exposition text, as ``GET /metrics``
makes it) after a plan made every node's forecast, as a running master's reconcile passes
do; ``summary_body_ms`` is the body of ``GET /v1/maintenance/plan?late=true&blockers=false
&limit=20`` (what ``nodeagent master plan`` asks for) at the same point, for comparison;
``cold_scrape_ms`` is a scrape right after every ad was replaced with no pass in between,
so that every forecast is made during the call (the worst case); ``bytes`` is the size of
the exposition (no machine is late: no per-machine sample).

Prints one JSON document. Usage: ``python tests/bench/metrics_scrape.py [--machines 10000]
[--runs 10]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._peer import HttpAgentLink
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._api import plan_body
from nodeagent.master._maintenance import MaintenanceSchedule
from nodeagent.master._master import Master
from nodeagent.master._metrics import MasterMetrics
from tests.bench._benchlib import terminate
from tests.bench.ad_ingest import CLAIMS, TEMPLATES, node_ad, node_ip, template_ads
from tests.bench.plan_latency import StepClock, schedule, summary


def run(machines: int, runs: int) -> dict[str, Any]:
    now = time.time()
    templates = template_ads(now)
    ads = [
        node_ad(templates[i % TEMPLATES], f"node{i:05d}.bench", node_ip(i)) for i in range(machines)
    ]
    clock = StepClock(now)
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as name:
        store = DocumentStore(Path(name) / "master.db")
        try:
            master = Master(
                store=store, link=HttpAgentLink(b"k" * 32), clock=clock, ads=AdStore(lifetime=3600)
            )
            for ad in ads:
                master.ads.update(ad, now)
            master.state.update_schedule(MaintenanceSchedule.from_json(schedule(machines, now)))
            metrics = MasterMetrics(master)
            master.plan()  # makes every forecast, as a running master's reconcile passes do
            scrapes, summaries = [], []
            text = b""
            for _ in range(runs):
                clock.t += 1.0
                started = time.perf_counter()
                text, _ = metrics.render()
                scrapes.append(time.perf_counter() - started)
                clock.t += 1.0
                started = time.perf_counter()
                plan_body(master, with_blockers=False, late=True, limit=20)
                summaries.append(time.perf_counter() - started)
            exposition = text.decode()
            if f'nodeagent_master_machines{{mode="DRAINING"}} {float(machines)}' not in exposition:
                raise RuntimeError("the scrape does not count the scheduled machines")
            cold = []
            for _ in range(max(1, runs // 2)):
                clock.t += 1.0
                for ad in ads:
                    master.ads.update(ad, clock.t)
                gc.collect()
                started = time.perf_counter()
                metrics.render()
                cold.append(time.perf_counter() - started)
        finally:
            store.close()
    return {
        "benchmark": "metrics_scrape",
        "machines": machines,
        "claims_per_node": CLAIMS,
        "scrape_ms": summary(scrapes),
        "summary_body_ms": summary(summaries),
        "cold_scrape_ms": summary(cold),
        "bytes": len(text),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machines", type=int, default=10_000, help="scheduled machines")
    parser.add_argument("--runs", type=int, default=10, help="scrapes measured")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, terminate)
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(run(args.machines, args.runs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
