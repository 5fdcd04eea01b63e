"""The plan's reply written from templates is the plan, byte for byte where it matters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent._peer import HttpAgentLink
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._api import plan_body
from nodeagent.master._blockers_json import BlockersJson
from nodeagent.master._maintenance import MachineId, MaintenanceSchedule, Unavailability, Window
from nodeagent.master._master import Master
from nodeagent.master._plan import PlanPolicy
from slots import DrainForecast, Escalation, JobSpec, Machine, MachinePolicy, Resources
from tests.slots.test_forecast import T0, instants, previous_values, slot_ads


class StepClock:
    """Wall-clock time that moves only when told."""

    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


#: Owners whose text a ``%`` template would misread if it were not escaped.
owners = st.sampled_from(["alice", "50%", "%d", "%%s", 'a"b\\c', "ünï", "\x00"])


@settings(max_examples=200)
@given(
    ads=slot_ads(),
    previous=previous_values(),
    steps=instants,
    window=st.none() | st.integers(-3000, 9000),
    escalation=st.sampled_from(list(Escalation)),
    owner=owners,
)
def test_blockers_text_is_what_orjson_writes_for_the_blockers(
    ads: list[dict[str, Any]],
    previous: Any,
    steps: list[int],
    window: int | None,
    escalation: Escalation,
    owner: str,
) -> None:
    for ad in ads[1:]:
        ad["RemoteOwner"] = owner
    forecast = DrainForecast(ads, previous)
    text = BlockersJson()
    window_start = None if window is None else T0 + window + 0.25
    now = T0
    for step in steps:
        now += step
        for instant in (now, now + 0.5):  # the second read of a second reuses the first
            fragment = text.fragment(
                forecast, instant, window_start=window_start, escalation=escalation
            )
            blockers = forecast.blockers(instant, window_start=window_start, escalation=escalation)
            if fragment is None:  # not exact: a deadline that is not a whole second
                assert not forecast.ready(instant)
                continue
            assert orjson.dumps(fragment) == orjson.dumps(blockers)


def test_an_integer_beyond_64_bits_leaves_the_blockers_to_the_caller() -> None:
    ad = {
        "Name": "slot1_1@h",
        "SlotType": "Dynamic",
        "State": "Claimed",
        "Activity": "Busy",
        "Cpus": 1,
        "TotalJobRunTime": 10,
        "MaxJobRetirementTime": 100,
        "JobId": 2**70,
    }
    forecast = DrainForecast([ad], None)
    assert BlockersJson().fragment(forecast, T0) is None
    assert forecast.blockers(T0)[0]["job_id"] == 2**70


def _node_ad(n: int, now: float, jobs: int) -> dict[str, Any]:
    machine = Machine(
        host=f"n{n}.test",
        ip=f"10.0.0.{n}",
        address=f"http://10.0.0.{n}:9621",
        total=Resources(cpus=8),
        policy=MachinePolicy(max_job_retirement_time=600 * (n + 1)),
        now=now - 900,
    )
    for j in range(jobs):
        machine.claim(
            now - 900 + 100 * j,
            resources=Resources(cpus=1 + j % 3),
            spec=JobSpec(job_id=f"{n}.{j}", owner="50%d" if j % 2 else "alice"),
        )
    return machine.ad(now)


def test_the_encoded_reply_is_the_plan(tmp_path: Path) -> None:
    """Machines early and late, with and without jobs and a drain of the master's:
    the reply plan_body writes decodes to exactly Master.plan(), second after second."""
    clock = StepClock(1_800_000_000.0)
    store = DocumentStore(tmp_path / "master.db")
    master = Master(
        store=store,
        link=HttpAgentLink(b"k" * 32),  # no pass runs: nothing is called
        clock=clock,
        ads=AdStore(lifetime=10_000),
        policy=PlanPolicy(escalation="quick"),
    )
    now = clock.now()
    for n in range(6):
        master.receive_ad(_node_ad(n, now, jobs=n % 4))
    windows = [
        Window(
            machine_ids=(MachineId(hostname=f"n{n}.test", ip=f"10.0.0.{n}"),),
            unavailability=Unavailability(
                start_ns=int((now + 300 * (n + 1)) * 1e9), duration_ns=3600 * 10**9
            ),
        )
        for n in range(6)
    ]
    master.state.update_schedule(MaintenanceSchedule(windows=tuple(windows)))
    master.drains["n1.test|10.0.0.1"] = {"request_id": "3", "phase": "committed"}
    try:
        for _ in range(5):
            for late in (False, True):
                for blockers in (True, False):
                    plain = master.plan(with_blockers=blockers, late=late)
                    body = plan_body(master, with_blockers=blockers, late=late)
                    assert orjson.loads(body) == orjson.loads(orjson.dumps(plain))
            clock.t += 97.5
        cuts = [r for r in master.plan()["machines"] if r["as_planned"]["cuts"]]
        assert cuts  # some rows took the path that lists cuts
    finally:
        store.close()
