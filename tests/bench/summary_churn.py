"""The summary and the metrics scrape of one master while its nodes' ads keep coming.

A master in-process holds ``--machines`` nodes' ads (8 running claims each, the templates
of ``ad_ingest.py``) and the 100-window schedule of ``plan_latency.py`` (every machine
DRAINING). Each round its clock moves on ``--every`` seconds, and in each of those
seconds ``machines / 60`` nodes send their next ad (the same claims moved on in time, as
agents with the default ``update_interval`` do); then the summary ``nodeagent master
plan`` asks for (``late=true``, no blockers, 20 rows: :func:`plan_body`) and a scrape of
``/metrics`` are timed, as the server makes them.

``summary_ms`` and ``scrape_ms`` are those of the master, whose plan view keeps its
totals between replies (:mod:`nodeagent.master._plan_ledger`) and whose scrape keeps the
nodes' figures (:class:`~nodeagent.master._fleet.NodeLedger`); ``every_row_summary_ms``
is the same summary made by a plan view of its own that reads every machine's row (its
rows' caches kept from one round to the next, as the view did before it kept totals),
for comparison (a summary that says it left machines behind, a round of more ads than a
reply remakes, is not compared). ``first_summary_ms``: the first summary, which makes every
machine's share. ``remade`` counts the shares remade per round, ``behind`` the machines each
summary left.

Prints one JSON document. Usage: ``python tests/bench/summary_churn.py [--machines
30000] [--rounds 6] [--every 2]``.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from nodeagent.master._maintenance import MaintenanceSchedule
from nodeagent.master._metrics import MasterMetrics
from nodeagent.master._plan_view import PlanView
from tests.bench._benchlib import percentile
from tests.bench.ad_ingest import TEMPLATES, node_ad, node_ip, template_machines
from tests.bench.plan_latency import StepClock, in_process_master, schedule


def figures(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {"p50": round(percentile(ms, 50), 1), "max": round(max(ms), 1), "n": len(ms)}


class ChurnedPool:
    """A master in this process on ``store`` holding ``machines`` nodes' ads (the templates
    of ``ad_ingest.py``) and ``plan_latency.py``'s schedule, every forecast made, as a
    running master's passes make them; :meth:`second` moves its clock on a second, in which
    the next ``machines / 60`` nodes send their next ad (the same claims moved on)."""

    def __init__(self, store: DocumentStore, machines: int, now: float) -> None:
        self.machines = machines
        self.per_second = machines // 60
        self.templates = template_machines(now)
        self.clock = StepClock(now)
        self.master = master = in_process_master(store, self.clock)
        for ad in self.ads(now, range(machines)):
            master.ads.update(ad, now)
        master.state.update_schedule(MaintenanceSchedule.from_json(schedule(machines, now)))
        master.plan()
        self._cursor = 0

    def ads(self, at: float, nodes: range | list[int]) -> list[dict[str, Any]]:
        made = [m.ad(at) for m in self.templates]
        return [node_ad(made[i % TEMPLATES], f"node{i:05d}.bench", node_ip(i)) for i in nodes]

    def second(self) -> None:
        clock = self.clock
        clock.t += 1
        nodes = [(self._cursor + j) % self.machines for j in range(self.per_second)]
        self._cursor += self.per_second
        for ad in self.ads(clock.t, nodes):
            self.master.ads.update(ad, clock.t)


def run(machines: int, rounds: int, every: int) -> dict[str, Any]:
    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        store = DocumentStore(Path(tmp) / "master.db")
        try:
            pool = ChurnedPool(store, machines, now)
            master, clock = pool.master, pool.clock
            metrics = MasterMetrics(master, require_auth=False)
            every_row = PlanView()
            started = time.perf_counter()
            plan_body(master, with_blockers=False, late=True, limit=20)
            first = time.perf_counter() - started
            every_row.body(
                dataclasses.replace(master.plan_inputs(now), changes=None),
                now,
                late=True,
                limit=20,
                with_blockers=False,
            )
            metrics.render()
            summary, scrape, read_all, remade, behind = [], [], [], [], []
            for _ in range(rounds):
                for _ in range(every):
                    pool.second()
                gc.disable()  # as the server does while it makes a reply
                started = time.perf_counter()
                body = plan_body(master, with_blockers=False, late=True, limit=20)
                summary.append(time.perf_counter() - started)
                ledger = master.plan_view.kept
                remade.append(0 if ledger is None else ledger.remade)
                started = time.perf_counter()
                metrics.render()
                scrape.append(time.perf_counter() - started)
                started = time.perf_counter()
                other = every_row.body(
                    dataclasses.replace(master.plan_inputs(clock.t), changes=None),
                    clock.t,
                    late=True,
                    limit=20,
                    with_blockers=False,
                )
                read_all.append(time.perf_counter() - started)
                gc.enable()
                kept = json.loads(body)
                behind.append(kept["totals"]["behind"])
                if not behind[-1] and kept != json.loads(other):
                    raise RuntimeError("the summary kept differs from the one read row by row")
            totals = json.loads(body)["totals"]
            if not totals["behind"] and totals["machines"] != machines:
                raise RuntimeError(f"{totals['machines']} machines in the totals")
            return {
                "machines": machines,
                "ads_per_round": pool.per_second * every,
                "first_summary_ms": round(first * 1000, 1),
                "summary_ms": figures(summary),
                "every_row_summary_ms": figures(read_all),
                "scrape_ms": figures(scrape),
                "remade": remade,
                "behind": behind,
                "late": totals["late"],
            }
        finally:
            store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--every", type=int, default=2, help="seconds between summaries")
    options = parser.parse_args()
    print(json.dumps(run(options.machines, options.rounds, options.every), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
