"""What the master's notices cost a reconcile pass, with each claim's two verdicts.

``--machines`` scheduled machines (one window, ``--window`` seconds ahead), each node
running 4 jobs of 3 job groups (3 notices a machine) with a retirement time of an hour, so
the escalation at the window cuts them. The notices' pass
(``Master._reconcile_notices``, on a SQLite store) is timed:

* ``first``: every notice issued, with its verdicts read from the plan, and written;
* ``one_ad``: one node's ad pushed again (its verdicts read again, the others' kept);
* ``nothing``: no input changed (the pass returns at once);
* ``all_ads``: every node's ad pushed again a second later, the same jobs (each ad its
  previous one moved on in time: the verdicts are kept, unless the forecast piece they were
  read from ended); ``saved_again`` counts the notices written again (0: a verdict read
  again moves by whole seconds, under the slack).

Times are milliseconds (p50, p99, min and max over ``--runs``). Prints one JSON document.
Usage: ``python tests/bench/notices_pass.py [--machines 1000] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._clock import TrioClock
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._maintenance import MachineId, MaintenanceSchedule, Unavailability, Window
from nodeagent.master._master import Master
from nodeagent.master._plan import PlanPolicy
from slots import JobSpec, Machine, MachinePolicy, Resources
from tests.bench._benchlib import summary_ms

EPOCH = 1_800_000_000.0
GROUPS = ("www-data/prod/web", "www-data/prod/web", "batch/dev/etl", "ml/dev/train")


class NoLink:
    async def call(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("the notices' pass makes no call")


def host(i: int) -> tuple[str, str]:
    return f"n{i}.bench", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"


def node_ad(i: int, now: float) -> dict[str, Any]:
    name, ip = host(i)
    machine = Machine(
        host=name,
        ip=ip,
        address=f"http://{ip}:9621",
        total=Resources(cpus=8),
        policy=MachinePolicy(max_job_retirement_time=3600),
        now=EPOCH,
    )
    for group in GROUPS:
        machine.claim(EPOCH, resources=Resources(cpus=1), spec=JobSpec(group=group))
    return machine.ad(now)


def timed(master: Master, now: float) -> float:
    plans = list(master.plan_view.plans(master.plan_inputs(now), now))
    started = time.perf_counter()
    master._reconcile_notices(plans, now)
    return time.perf_counter() - started


def saved(path: Path) -> dict[str, Any]:
    return DocumentStore(path, collections=("notices",)).load("notices") or {}


def one_run(machines: int, window: float, root: Path) -> dict[str, Any]:
    path = root / "master.db"
    master = Master(
        store=DocumentStore(path, collections=("notices",)),
        link=NoLink(),
        clock=TrioClock(EPOCH),
        ads=AdStore(lifetime=1e9),
        policy=PlanPolicy(drain_policy="just_in_time"),
        reconcile_interval=1.0,
    )
    # Every verdict read by the first pass (a pass's budget would leave some to the next).
    master.forecasts_per_pass = machines
    for i in range(machines):
        master.receive_ad(node_ad(i, EPOCH))
    ids = tuple(MachineId(hostname=h, ip=ip) for h, ip in map(host, range(machines)))
    start_ns = int((EPOCH + window) * 1e9)
    unavailability = Unavailability(start_ns=start_ns, duration_ns=3600 * 10**9)
    schedule = MaintenanceSchedule(
        windows=(Window(machine_ids=ids, unavailability=unavailability),)
    )
    master.set_schedule(schedule, actor="bench")
    first = timed(master, EPOCH)
    before = saved(path)
    master.receive_ad(node_ad(0, EPOCH + 1))
    one_ad = timed(master, EPOCH + 1)
    nothing = timed(master, EPOCH + 1)
    for i in range(machines):
        master.receive_ad(node_ad(i, EPOCH + 2))
    all_ads = timed(master, EPOCH + 2)
    after = saved(path)
    cut = sum(
        1
        for n in master.notices.values()
        for c in n.claims
        if c.cut_by is not None and c.cut_by > 0
    )
    return {
        "notices": len(master.notices),
        "claims_cut": cut,
        "first": first,
        "one_ad": one_ad,
        "nothing": nothing,
        "all_ads": all_ads,
        "saved_again": sum(1 for key, doc in after.items() if before.get(key) != doc),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=1000)
    parser.add_argument("--window", type=float, default=600.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as root:

            async def run(root: str = root) -> dict[str, Any]:
                return one_run(args.machines, args.window, Path(root))

            runs.append(trio.run(run, clock=trio.testing.MockClock()))
    result: dict[str, Any] = {
        "machines": args.machines,
        "notices": runs[0]["notices"],
        "claims_cut": runs[0]["claims_cut"],
        "saved_again": max(r["saved_again"] for r in runs),
    }
    for name in ("first", "one_ad", "nothing", "all_ads"):
        result[f"{name}_ms"] = summary_ms([r[name] for r in runs])
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
