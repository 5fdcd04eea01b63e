"""What one reconcile pass costs a master holding ``--machines`` scheduled machines.

The master of ``plan_latency.py`` in-process (SQLite, the agents' ads of 8 running claims,
100 windows 2 h to 18.5 h ahead, so every machine is DRAINING and no drain is due), its
clock moved on by a second before each pass, as the periodic pass (``reconcile_interval``
1 s) sees it. :meth:`Master.reconcile` is called in a trio nursery (it starts no task here:
no drain is due, no record held); the times are its own, without the tasks it would start:

* ``first_ms``: the passes until every forecast and row template is made (a pass makes
  ``forecasts_per_pass`` of them), as after a restart; ``first_passes`` counts them;
* ``idle_ms``: nothing changed since the last pass (no ad came in);
* ``churn_ms``: ``machines / 60`` ads came in since the last pass (the default
  ``update_interval``), each the node's ad moved on a second (same claims);
* ``change``: ``--moving`` machines (1,000) moved to a new window by a new schedule (set
  as the API sets it: :meth:`Master.schedule_change_maker`, then
  :meth:`Master.set_schedule`): the next pass (``pass_ms``, and the machines it planned,
  ``planned``), then the plan's totals brought whole (``totals_ms``: the ledger a summary
  reads, :meth:`~nodeagent.master._plan_view.PlanView.ledger`; ``shares_remade``);
* ``steady``: with ``--steady S``, S seconds of a pool at rest after the churn passes, as
  a master lives them: each second ``machines / 60`` ads moved on and a pass, the totals
  read every 2 seconds as a summary reads them. A pool's ads all came in within its first
  minute, so the instants their ages are read at (``--lifetime``, the ads' lifetime:
  3,600 s by default, 300 s for a daemon's) come together unless each newer ad moves them
  on: with ``--lifetime 300 --steady 420`` the section crosses the first ads' lifetime.
  The pass's time and the machines it planned, the totals' time and the shares they
  remade, each second (p50, max, and the whole section's sum);
* ``profile``: with ``--profile``, the functions that take most of a churn pass (cProfile,
  cumulative seconds over ``--runs`` passes).

Prints one JSON document. Usage: ``python tests/bench/reconcile_pass.py [--machines
10000] [--runs 5] [--moving 1000] [--lifetime 3600] [--steady 0] [--profile]``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._peer import HttpAgentLink
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._maintenance import MaintenanceSchedule
from nodeagent.master._master import Master
from nodeagent.master._pass_index import PassIndex
from nodeagent.master._plan import MachinePlan
from nodeagent.master._plan_view import PlanInputs
from tests.bench._benchlib import summary_ms
from tests.bench.ad_ingest import node_ad, node_ip, template_ads
from tests.bench.plan_latency import StepClock, schedule
from tests.bench.scale import moved_schedule


def ads_of(machines: int, now: float) -> list[dict[str, Any]]:
    templates = template_ads(now)
    return [
        node_ad(templates[i % len(templates)], f"node{i:05d}.bench", node_ip(i))
        for i in range(machines)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--moving", type=int, default=1000)
    parser.add_argument("--lifetime", type=float, default=3600.0, help="the ads' (s)")
    parser.add_argument("--steady", type=int, default=0, help="seconds of a pool at rest")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    now = time.time()
    ads = ads_of(args.machines, now)
    per_pass = max(1, args.machines // 60)
    with tempfile.TemporaryDirectory() as tmp:
        store = DocumentStore(Path(tmp) / "master.db")
        clock = StepClock(now)
        master = Master(
            store=store,
            link=HttpAgentLink(b"k" * 32),
            clock=clock,
            ads=AdStore(lifetime=args.lifetime),
        )
        for ad in ads:
            master.ads.update(ad, now)
        master.set_schedule(MaintenanceSchedule.from_json(schedule(len(ads), now)), actor="bench")
        result: dict[str, Any] = {"machines": args.machines, "ads_per_pass": per_pass}
        profiler = cProfile.Profile() if args.profile else None

        async def passes() -> None:
            async with trio.open_nursery() as nursery:
                first, count = 0.0, 0
                while True:
                    clock.t += 1.0
                    made = master.forecasts_per_pass
                    started = time.perf_counter()
                    master.reconcile(nursery)
                    first += time.perf_counter() - started
                    count += 1
                    # every forecast made: a pass that made none
                    if _unmade(master, clock.t) == 0 or count > 2 + args.machines // made:
                        break
                result["first_ms"] = round(first * 1000, 1)
                result["first_passes"] = count
                idle = []
                for _ in range(args.runs):
                    clock.t += 1.0
                    started = time.perf_counter()
                    master.reconcile(nursery)
                    idle.append(time.perf_counter() - started)
                result["idle_ms"] = summary_ms(idle)
                churn = []
                cursor = 0
                for _ in range(args.runs):
                    clock.t += 1.0
                    for _ in range(per_pass):
                        master.receive_ad(ads[cursor % len(ads)])
                        cursor += 1
                    gc.collect()
                    if profiler is not None:
                        profiler.enable()
                    started = time.perf_counter()
                    master.reconcile(nursery)
                    churn.append(time.perf_counter() - started)
                    if profiler is not None:
                        profiler.disable()
                result["churn_ms"] = summary_ms(churn)
                if args.steady:
                    result["steady"] = steady(
                        master,
                        clock,
                        nursery,
                        ads[cursor % len(ads) :] + ads[: cursor % len(ads)],
                        args.steady,
                    )
                result["tasks_started"] = len(nursery.child_tasks)
                if args.moving:
                    result["change"] = change(master, clock, nursery, now, args.moving)
                nursery.cancel_scope.cancel()

        trio.run(passes)
        store.close()
        if profiler is not None:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
            result["profile"] = out.getvalue().splitlines()
    print(json.dumps(result, indent=2))


@contextlib.contextmanager
def planned_by_passes(master: Master) -> Iterator[list[int]]:
    """The machines each pass run in the block plans, one count a pass."""
    looked_at = master._plans_to_look_at
    planned: list[int] = []

    def counted(inputs: PlanInputs, now: float) -> tuple[PassIndex, list[MachinePlan]]:
        index, plans = looked_at(inputs, now)
        planned.append(len(plans))
        return index, plans

    master._plans_to_look_at = counted  # type: ignore[method-assign]
    try:
        yield planned
    finally:
        del master._plans_to_look_at


def steady(
    master: Master, clock: StepClock, nursery: trio.Nursery, ads: list[dict[str, Any]], seconds: int
) -> dict[str, Any]:
    """``seconds`` of a pool at rest: each second a sixtieth of ``ads`` (in turn) moved on
    and a pass, the totals read every 2 seconds (see the module docstring)."""
    per_second = max(1, len(ads) // 60)
    passes: list[float] = []
    totals: list[float] = []
    remade: list[int] = []
    now = clock.now()
    master.plan_view.ledger(master.plan_inputs(now), now)  # the totals whole, as read
    with planned_by_passes(master) as planned:
        for second in range(seconds):
            clock.t += 1.0
            for i in range(second * per_second, (second + 1) * per_second):
                master.receive_ad(ads[i % len(ads)])
            started = time.perf_counter()
            master.reconcile(nursery)
            passes.append(time.perf_counter() - started)
            if second % 2:
                now = clock.now()
                started = time.perf_counter()
                ledger = master.plan_view.ledger(master.plan_inputs(now), now)
                totals.append(time.perf_counter() - started)
                remade.append(0 if ledger is None else ledger.remade)

    def counts(values: list[int]) -> dict[str, float]:
        ordered = sorted(values)
        return {"p50": ordered[len(ordered) // 2], "max": ordered[-1], "sum": sum(values)}

    return {
        "seconds": seconds,
        "ads_per_s": per_second,
        "pass_ms": summary_ms(passes),
        "planned": counts(planned),
        "totals_ms": summary_ms(totals),
        "shares_remade": counts(remade),
    }


def change(
    master: Master, clock: StepClock, nursery: trio.Nursery, scheduled_at: float, moving: int
) -> dict[str, Any]:
    """``moving`` machines of the schedule set at ``scheduled_at`` moved by a new one:
    the next pass, then the totals."""
    now = clock.now()
    master.plan_view.ledger(master.plan_inputs(now), now)  # the totals whole, as read
    machines = len(master.state.machines())
    moved = MaintenanceSchedule.from_json(moved_schedule(machines, scheduled_at, moving))
    master.set_schedule(moved, actor="bench", change=master.schedule_change_maker("bench")(moved))
    clock.t += 1.0
    gc.collect()
    with planned_by_passes(master) as planned:
        started = time.perf_counter()
        master.reconcile(nursery)
        pass_s = time.perf_counter() - started
    now = clock.now()
    started = time.perf_counter()
    ledger = master.plan_view.ledger(master.plan_inputs(now), now)
    totals_s = time.perf_counter() - started
    return {
        "moving": moving,
        "pass_ms": round(pass_s * 1000, 1),
        "planned": planned[0],
        "totals_ms": round(totals_s * 1000, 1),
        "shares_remade": None if ledger is None else ledger.remade,
    }


def _unmade(master: Master, now: float) -> int:
    """The scheduled nodes whose forecast is not made for their window."""
    from nodeagent.master._plan import planned_escalation

    count = 0
    for plan in master.plans(now):
        if plan.node is None:
            continue
        escalation = planned_escalation(plan, master.policy.escalation)
        if not plan.node.forecast.ready(now, window_start=plan.window_start, escalation=escalation):
            count += 1
    return count


if __name__ == "__main__":
    main()
