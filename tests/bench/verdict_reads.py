"""What reading a node's two verdicts costs a master, per machine, next to today's read.

``--machines`` forecasts (:class:`slots.DrainForecast`) of agent ads with 8 running claims
each (``ad_ingest.py``'s templates: retirement promises of 900 s to 1 h), read as a plan
reads them, at a new second each run:

* ``estimates_and_blockers``: what the plan read before the verdicts: the six estimates
  and the graceful blockers (``values`` + ``blockers``);
* ``both_verdicts``: the six estimates, :meth:`~slots.DrainForecast.verdicts` and the
  blockers as planned for the window, with their cuts;
* ``verdicts``: :meth:`~slots.DrainForecast.verdicts` alone; ``promise``: the promise
  figure alone.

Two windows: ``far`` (2 h ahead: every promise is kept) and ``near`` (10 min ahead: the
escalation cuts most jobs, so the pieces differ from the window-free ones). ``prepare``
is the cost of making a piece (once per ad and window; again only past its horizon),
without and with the window. Times are microseconds per machine (p50 and p90 over
``--runs``). Prints one JSON document.
Usage: ``python tests/bench/verdict_reads.py [--machines 10000] [--runs 7]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slots import EXPECTED_ATTRIBUTES, DrainForecast, Escalation
from tests.bench._benchlib import percentile
from tests.bench.ad_ingest import TEMPLATES, template_ads

NOW = 1_795_320_000
WINDOWS = {"far": 7200, "near": 600}


def forecasts(machines: int) -> list[DrainForecast]:
    templates = template_ads(NOW)
    made = []
    for i in range(machines):
        ad = templates[i % TEMPLATES]
        previous = {k: ad["machine"][k] for k in EXPECTED_ATTRIBUTES}
        made.append(DrainForecast(ad["slots"], previous))
    return made


def per_machine(seconds: float, machines: int) -> float:
    return round(seconds / machines * 1e6, 2)


def timed(
    machines: int, runs: int, read: Callable[[DrainForecast, int], object]
) -> dict[str, float]:
    """``read`` of every forecast at ``NOW + run`` for each run: µs per machine."""
    made = forecasts(machines)
    for forecast in made:
        read(forecast, NOW)  # the pieces, as a reconcile pass makes them
    samples = []
    gc.disable()
    try:
        for run in range(1, runs + 1):
            start = time.perf_counter()
            for forecast in made:
                read(forecast, NOW + run)
            samples.append(per_machine(time.perf_counter() - start, machines))
    finally:
        gc.enable()
    return {"p50": round(percentile(samples, 50), 2), "p90": round(percentile(samples, 90), 2)}


def prepare_cost(machines: int, window: float | None) -> float:
    made = forecasts(machines)
    start = time.perf_counter()
    for forecast in made:
        if window is None:
            forecast.prepare(NOW)
        else:
            forecast.prepare(NOW, window_start=window, escalation=Escalation.QUICK)
    return per_machine(time.perf_counter() - start, machines)


def run(machines: int, runs: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "machines": machines,
        "claims_per_machine": 8,
        "estimates_and_blockers": timed(
            machines, runs, lambda f, now: (f.values(now), f.blockers(now))
        ),
        "promise": timed(machines, runs, lambda f, now: f.promise(now)),
        "prepare_us": {"no_window": prepare_cost(machines, None)},
    }
    for name, ahead in WINDOWS.items():
        window = float(NOW + ahead)

        def both(f: DrainForecast, now: int, window: float = window) -> object:
            return (
                f.values(now),
                f.verdicts(now, window_start=window, escalation=Escalation.QUICK),
                f.blockers(now, window_start=window, escalation=Escalation.QUICK),
            )

        def verdicts(f: DrainForecast, now: int, window: float = window) -> object:
            return f.verdicts(now, window_start=window, escalation=Escalation.QUICK)

        cut = forecasts(1)[0].verdicts(NOW, window_start=window, escalation=Escalation.QUICK)
        result[name] = {
            "window_ahead_s": ahead,
            "cut_jobs_first_machine": cut.cut_jobs,
            "both_verdicts": timed(machines, runs, both),
            "verdicts": timed(machines, runs, verdicts),
        }
        result["prepare_us"][f"window_{name}"] = prepare_cost(machines, window)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(run(args.machines, args.runs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
