"""What a schedule of many machines costs the master's event loop when it is written.

A master in process, on a SQLite store in a temporary directory, its clock standing still:

* ``first_set``: ``plan_latency.py``'s schedule of ``--machines`` machines (100 one-hour
  windows) set on an empty master: the part made off the event loop (the body checked,
  the state changed, its version, events, snapshot and JSON:
  :meth:`~nodeagent.master._master.Master.schedule_change_maker`; ``None`` for a master
  without it, which makes it all on the loop) and the part on the loop
  (:meth:`~nodeagent.master._master.Master.set_schedule`: the write and the install);
* ``change``: that schedule with ``--moving`` machines (1,000) moved to a new window,
  the same two parts;
* ``drain_write_ms``: what every write of the master that leaves the schedule as it is (a
  drain's step, an answered notice) costs: :meth:`~nodeagent.master._master.Master.save`,
  ``--writes`` times (the median and the largest).

Prints one JSON document. Usage: ``python tests/bench/schedule_write.py [--machines
100000] [--moving 1000] [--writes 20]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._store import DocumentStore
from nodeagent.master._maintenance import MaintenanceSchedule
from nodeagent.master._master import Master
from tests.bench.plan_latency import StepClock, in_process_master
from tests.bench.plan_latency import schedule as plan_schedule
from tests.bench.scale import moved_schedule

#: The master's documents kept one row per member on SQLite (as its daemon opens them).
COLLECTIONS = ("operations", "notices", "events")


def timed_set(master: Master, schedule: MaintenanceSchedule) -> dict[str, Any]:
    """The schedule set as the API sets it: its change made (off the loop), then applied."""
    maker = getattr(master, "schedule_change_maker", None)
    if maker is None:  # a master that makes it all on the loop
        started = time.perf_counter()
        master.set_schedule(schedule, actor="bench")
        return {"off_loop_s": None, "on_loop_s": round(time.perf_counter() - started, 3)}
    started = time.perf_counter()
    change = maker("bench")(schedule)
    off = time.perf_counter() - started
    started = time.perf_counter()
    master.set_schedule(schedule, actor="bench", change=change)
    return {"off_loop_s": round(off, 3), "on_loop_s": round(time.perf_counter() - started, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=100_000)
    parser.add_argument("--moving", type=int, default=1000)
    parser.add_argument("--writes", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="schedule-write-") as tmp:
        store = DocumentStore(Path(tmp) / "master.db", collections=COLLECTIONS)
        try:
            clock = StepClock(1_800_000_000.0)
            master = in_process_master(store, clock)
            now = clock.now()
            first = MaintenanceSchedule.from_json(plan_schedule(args.machines, now))
            moved = MaintenanceSchedule.from_json(moved_schedule(args.machines, now, args.moving))
            result: dict[str, Any] = {
                "benchmark": "schedule_write",
                "machines": args.machines,
                "moving": args.moving,
                "first_set": timed_set(master, first),
                "change": timed_set(master, moved),
            }
            writes = []
            for _ in range(args.writes):
                started = time.perf_counter()
                master.save()
                writes.append((time.perf_counter() - started) * 1000)
            result["drain_write_ms"] = {
                "p50": round(statistics.median(writes), 2),
                "max": round(max(writes), 2),
                "n": len(writes),
            }
        finally:
            store.close()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
