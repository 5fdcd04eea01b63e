"""The cyclic garbage collector's pauses in a master that holds a large pool.

The master of ``summary_churn.py`` (``--machines`` nodes' ads, 8 running claims each, the
100-window schedule of ``plan_latency.py``, every forecast made), with the daemon's
:class:`~nodeagent.master._collector.SurvivorFreezer` installed. For ``--seconds`` its clock
moves on a second at a time, and in each ``machines / 60`` nodes send their next ad (as
agents with the default ``update_interval`` do), with a summary every two seconds; every
collection meanwhile is timed through :data:`gc.callbacks`, by generation, and the objects
those collections freed counted (``collected``). The frozen objects are counted before and
after the seconds of ads (what the freezer watches grow). Then a whole walk, as the freezer
makes one once they have grown by a quarter, is timed: everything thawed, then a full
collection (``thaw_ms``: the event loop of a running master is held that long), with the
garbage it found (``thaw_collected``: the cycles left while frozen).

Prints one JSON document. Usage: ``python tests/bench/collector_pauses.py [--machines
100000] [--seconds 30]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._store import DocumentStore
from nodeagent.master._api import plan_body
from nodeagent.master._collector import SurvivorFreezer
from tests.bench.summary_churn import ChurnedPool


class Pauses:
    """A :data:`gc.callbacks` entry that keeps each collection's time by generation."""

    def __init__(self) -> None:
        self.by_generation: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self.collected = 0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.by_generation[info["generation"]].append(time.perf_counter() - self._began)
            self.collected += info["collected"]

    def figures(self) -> dict[str, dict[str, float]]:
        return {
            f"gen{generation}": {
                "n": len(pauses),
                "total_ms": round(sum(pauses) * 1000, 1),
                "max_ms": round(max(pauses, default=0.0) * 1000, 1),
            }
            for generation, pauses in self.by_generation.items()
        }


def run(machines: int, seconds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = DocumentStore(Path(tmp) / "master.db")
        try:
            pool = ChurnedPool(store, machines, time.time())
            pauses = Pauses()
            with SurvivorFreezer():
                gc.collect()  # what was made so far: frozen
                frozen_before = gc.get_freeze_count()
                gc.callbacks.append(pauses)
                started = time.perf_counter()
                for second in range(seconds):
                    pool.second()
                    if second % 2 == 0:
                        plan_body(pool.master, with_blockers=False, late=True, limit=20)
                took = time.perf_counter() - started
                gc.callbacks.remove(pauses)
                gc.collect()  # what the seconds left young: frozen too
                frozen_after = gc.get_freeze_count()
                tracked = len(gc.get_objects()) + frozen_after
                gc.unfreeze()  # as the freezer's whole collection does
                began = time.perf_counter()
                garbage = gc.collect()
                thaw = time.perf_counter() - began
        finally:
            store.close()
    return {
        "machines": machines,
        "seconds_of_ads": seconds,
        "ads_per_second": pool.per_second,
        "took_s": round(took, 2),
        **pauses.figures(),
        "collected": pauses.collected,
        "tracked_objects": tracked,
        "frozen_before": frozen_before,
        "frozen_after": frozen_after,
        "thaw_ms": round(thaw * 1000, 1),
        "thaw_collected": garbage,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=100_000)
    parser.add_argument("--seconds", type=int, default=30)
    options = parser.parse_args()
    print(json.dumps(run(options.machines, options.seconds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
