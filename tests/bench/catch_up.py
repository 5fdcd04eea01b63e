"""What a master restarted on a full pool spends on each machine to catch up, in process.

A master in this process holds the schedule of ``plan_latency.py`` (``--machines``
machines, 100 windows 2 h and more ahead, every machine DRAINING) and takes every node's
ad as new, as after a restart (``reconcile_pass.py``'s ads: ``ad_ingest.py``'s template
machines, 8 running claims each); then, as its services do after the last ad, with the
clock held:

* **ahead**: the forecasts the passes make ahead of the plans (:meth:`Master.prepare_ahead`
  until none waits: the pass's own work, without what it decides and writes, which a
  restarted master without drains due has little of);
* **totals**: the plan's totals brought in (:meth:`PlanView.warm` until whole, 50 shares a
  call as :meth:`Master.keep_totals` does), then a summary's body (``late``, 20 rows, no
  blockers: what ``nodeagent master plan`` asks), checked whole (no machine behind).

For each, the time a machine (best of ``--runs`` masters, each made anew; the collector as
a daemon's, :class:`~nodeagent.master._collector.SurvivorFreezer`) and the forecast
computations a machine made meanwhile (:meth:`slots.DrainForecast._compute`, counted by a
wrapper: 1 in one part and 0 in the other when every forecast is made once and read by the
other). ``taken_us`` is the ad's taking, slot ads parsed in the master (an
ingest worker parses them on a daemon with ``ingest_workers``): for scale only.

``instructions.py`` counts the same passes and totals in instructions (``first_passes``),
for comparing two versions on a host whose timings move; this gives their time and what
they compute.

Prints one JSON document. Usage: ``python tests/bench/catch_up.py [--machines 10000]
[--runs 3]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import slots._forecast
from nodeagent._store import DocumentStore
from nodeagent.master._api import plan_body
from nodeagent.master._collector import SurvivorFreezer
from nodeagent.master._maintenance import MaintenanceSchedule
from nodeagent.master._master import Master
from tests.bench._benchlib import terminate
from tests.bench.plan_latency import StepClock, in_process_master, schedule
from tests.bench.reconcile_pass import ads_of

#: The shares a call brings in (as ``_master._LEDGER_SLICE``).
SHARES_A_CALL = 50


class Computations:
    """Counts :meth:`slots.DrainForecast._compute`'s calls by the part of the run
    (``part``), while installed."""

    def __init__(self) -> None:
        self.part = ""
        self.counts: Counter[str] = Counter()
        self._original = slots._forecast.DrainForecast._compute

    def __enter__(self) -> Computations:
        original, counts = self._original, self.counts

        def counted(forecast: Any, *args: Any, **kwargs: Any) -> Any:
            counts[self.part] += 1
            return original(forecast, *args, **kwargs)

        slots._forecast.DrainForecast._compute = counted  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        slots._forecast.DrainForecast._compute = self._original  # type: ignore[method-assign]


def restarted(machines: int, now: float, tmp: Path) -> tuple[Master, list[dict[str, Any]]]:
    """A master holding the schedule of ``machines`` and no ad, and every node's ad."""
    master = in_process_master(DocumentStore(tmp / "master.db"), StepClock(now))
    master.state.update_schedule(MaintenanceSchedule.from_json(schedule(machines, now)))
    return master, ads_of(machines, now)


def one_run(machines: int, now: float, tmp: Path, counted: Computations) -> dict[str, float]:
    master, ads = restarted(machines, now, tmp)
    took: dict[str, float] = {}
    gc.collect()
    counted.part = "taken"
    started = time.perf_counter()
    for ad in ads:
        master.receive_ad(ad)
    took["taken"] = time.perf_counter() - started
    counted.part = "ahead"
    started = time.perf_counter()
    master.prepare_ahead()
    while master.forecasts_waiting:
        master.prepare_ahead()
    took["ahead"] = time.perf_counter() - started
    counted.part = "totals"
    started = time.perf_counter()
    while not master.plan_view.warm(master.plan_inputs(now), now, limit=SHARES_A_CALL):
        pass
    summary = json.loads(plan_body(master, with_blockers=False, late=True, limit=20))
    took["totals"] = time.perf_counter() - started
    totals = summary["totals"]
    if totals["machines"] != machines or totals["behind"]:
        raise RuntimeError(f"the summary is not whole: {totals}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machines", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, terminate)
    now = time.time()
    best: dict[str, float] = {}
    # the collector as on a daemon: what survives is frozen, the pool not walked again
    with SurvivorFreezer(), Computations() as counted, tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            counted.counts.clear()
            where = Path(tmp) / str(run)
            where.mkdir()
            for part, seconds in one_run(args.machines, now, where, counted).items():
                best[part] = min(best.get(part, seconds), seconds)
        computations = dict(counted.counts)  # the last run's (each run's are the same)
    machines = args.machines
    result = {
        "benchmark": "catch_up",
        "machines": machines,
        "runs": args.runs,
        **{f"{part}_us": round(1e6 * seconds / machines, 1) for part, seconds in best.items()},
        "forecasts_computed_per_machine": {
            part: round(computations.get(part, 0) / machines, 3) for part in best
        },
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
