"""The master's memory per scheduled machine, in-process, in the state of a running master.

For each size (``--machines``, 10,000 and 30,000 when not given): a master holding one ad
of 8 running claims per node (as ``plan_latency.py``), the schedule of
:func:`plan_latency.schedule`, the whole plan streamed as a server writes it, so that
every forecast is made (as the reconcile passes do), then the summary
(``plan_body(late=True, limit=20)`` without blockers), a whole plan body and a streamed
plan; then a minute of pushes: every
node's next ad (its claims moved on in time by ``--period`` seconds), and the same reads
again (the steady state). Each size runs in its own process, so that one's memory does not
hide the next's.

Reports, per size: ``rss_mib`` after the ads, after the reads and at steady state, and
``per_machine_kib`` (the RSS above the process's before the ads, per machine). With
``--trace`` (slow), tracemalloc's live bytes at steady state per machine, grouped by
``file:line`` (the largest ``--top``) and by owner (the file). With ``--plan-as-data``
the first read is :meth:`Master.plan` instead (the figures of docs/performance.md up to
"Row templates kept deflated" were measured so): the whole plan as data, every row's
dicts at once, which no server makes, and which leaves the allocator's pools holding
≈ 8 KiB a machine that the objects kept do not use.

``--rows-kept-most N``: the most rows a reply keeps (the plan view's
``rows_kept_most``, 10,000 by default): with fewer than the machines, the whole plans
keep none of their rows, as on a pool of more than 10,000.

Prints one JSON document. Usage: ``python tests/bench/memory.py [--machines 10000,30000]
[--period 60] [--trace] [--top 25] [--plan-as-data] [--rows-kept-most N]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._store import DocumentStore
from nodeagent.master._api import plan_body
from nodeagent.master._maintenance import MaintenanceSchedule
from nodeagent.master._master import Master
from tests.bench.ad_ingest import TEMPLATES, node_ad, node_ip, template_machines
from tests.bench.plan_latency import StepClock, in_process_master, schedule

MIB = 1 << 20


def rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


START = 1_800_000_000.0


def stream(master: Master) -> None:
    """The whole plan streamed, as a server writes it (``GET /v1/maintenance/plan``)."""
    now = master.clock.now()
    inputs = master.plan_inputs(now)
    for _ in master.plan_view.stream(inputs, now, with_blockers=True, select=None):
        pass


def reads(master: Master, clock: StepClock, *, as_data: bool = False) -> None:
    """What a running master is asked: the whole plan streamed (every forecast made, as
    the reconcile passes do), the summary, a whole plan body, a streamed plan. With
    ``as_data``, the first read is :meth:`Master.plan` instead, the whole plan as data,
    which no server makes (every row's dicts at once)."""
    clock.t += 1.0
    if as_data:
        master.plan()
    else:
        stream(master)
    clock.t += 1.0
    plan_body(master, with_blockers=False, late=True, limit=20)
    clock.t += 1.0
    plan_body(master)
    clock.t += 1.0
    stream(master)


def measure(
    machines: int,
    period: float,
    trace: bool,
    top: int,
    as_data: bool = False,
    rows_kept_most: int | None = None,
) -> dict[str, Any]:
    machines_of = template_machines(START)  # the same claims, moved on in time
    first = [machine.ad(START) for machine in machines_of]
    later = [machine.ad(START + period) for machine in machines_of]

    def node_ads(templates: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Each node's ad, made when it is received (as a server parses one request at a
        time: 10,000 ads made at once would leave the heap holding their pages)."""
        for i in range(machines):
            yield node_ad(templates[i % TEMPLATES], f"node{i:05d}.bench", node_ip(i))

    with tempfile.TemporaryDirectory() as tmp:
        clock = StepClock(START)
        store = DocumentStore(Path(tmp) / "memory.db")
        try:
            master = in_process_master(store, clock)
            if rows_kept_most is not None:
                master.plan_view.rows_kept_most = rows_kept_most
            base = rss()
            if trace:
                tracemalloc.start(1)
                traced_base = tracemalloc.get_traced_memory()[0]
            started = time.perf_counter()
            for ad in node_ads(first):
                master.ads.update(ad, START)
            master.state.update_schedule(MaintenanceSchedule.from_json(schedule(machines, START)))
            after_ads = rss()
            reads(master, clock, as_data=as_data)
            after_reads = rss()
            # a minute of pushes: every node's next ad, then the same reads
            clock.t = START + period
            for ad in node_ads(later):
                master.ads.update(ad, clock.t)
            reads(master, clock, as_data=as_data)
            steady = rss()
            result: dict[str, Any] = {
                "seconds": round(time.perf_counter() - started, 1),
                "rss_mib": {
                    "before": round(base / MIB, 1),
                    "ads": round(after_ads / MIB, 1),
                    "reads": round(after_reads / MIB, 1),
                    "steady": round(steady / MIB, 1),
                },
                "per_machine_kib": {
                    "reads": round((after_reads - base) / machines / 1024, 1),
                    "steady": round((steady - base) / machines / 1024, 1),
                },
            }
            if trace:
                gc.collect()
                snapshot = tracemalloc.take_snapshot()
                traced = tracemalloc.get_traced_memory()[0] - traced_base
                tracemalloc.stop()
                result["traced_per_machine_bytes"] = round(traced / machines)
                by_file: Counter[str] = Counter()
                for stat in snapshot.statistics("filename"):
                    name = stat.traceback[0].filename
                    short = name.split("/nodeagent/", 1)[-1] if "/nodeagent/" in name else name
                    by_file[short] += stat.size
                result["by_file_bytes_per_machine"] = {
                    name: round(size / machines)
                    for name, size in by_file.most_common(top)
                    if size >= machines
                }
                result["by_line_bytes_per_machine"] = {
                    f"{stat.traceback[0].filename.rsplit('/', 2)[-1]}:"
                    f"{stat.traceback[0].lineno}": round(stat.size / machines)
                    for stat in snapshot.statistics("lineno")[:top]
                }
                counts = Counter(type(o).__name__ for o in gc.get_objects())
                result["gc_objects_per_machine"] = {
                    name: round(n / machines, 1) for name, n in counts.most_common(top)
                }
            return result
        finally:
            store.close()


def _child(
    machines: int,
    period: float,
    trace: bool,
    top: int,
    as_data: bool,
    rows_kept_most: int | None,
    out: Any,
) -> None:
    try:
        out.send(measure(machines, period, trace, top, as_data, rows_kept_most))
    except BaseException as e:  # reported, not raised: the parent prints one document
        out.send({"error": repr(e)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machines", default="10000,30000")
    parser.add_argument("--period", type=float, default=60.0)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--plan-as-data", action="store_true")
    parser.add_argument("--rows-kept-most", type=int, default=None)
    args = parser.parse_args()
    context = multiprocessing.get_context("fork")
    result: dict[str, Any] = {}
    for machines in (int(n) for n in args.machines.split(",")):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(
            target=_child,
            args=(
                machines,
                args.period,
                args.trace,
                args.top,
                args.plan_as_data,
                args.rows_kept_most,
                send,
            ),
        )
        child.start()
        result[str(machines)] = receive.recv()
        child.join()
    json.dump(result, sys.stdout, indent=1)
    print()
    return 1 if any("error" in r for r in result.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
