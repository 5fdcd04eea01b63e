"""The defrag daemon: its decisions as tables, its service on virtual time against a fake pool."""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from nodeagent._agent_calls import AgentCalls
from nodeagent._auth import generate_key
from nodeagent._clock import TrioClock
from nodeagent._lifecycle import reload_config
from nodeagent._peer import AgentCallFailed
from nodeagent._settings import ConfigError
from nodeagent._store import DocumentStore
from nodeagent.cli._app import app
from nodeagent.cli._defrag import with_default_port
from nodeagent.cli._render import render_stats
from nodeagent.defrag._config import DefragConfig, load_defrag_config
from nodeagent.defrag._daemon import DefragDaemon, defrag_policy
from nodeagent.defrag._policy import (
    RECENT_WINDOW,
    Cancel,
    Candidate,
    CostBaseline,
    DefragPolicy,
    Pacing,
    draining_cost,
    estimate_acceptable,
    machine_of,
    pace,
    plan_cycle,
    with_machine_ads,
)
from nodeagent.defrag._records import (
    RECORD_LIFETIME,
    DrainRecord,
    ad_knows,
    records_from_json,
    records_to_json,
)
from nodeagent.defrag._service import DefragService, MasterCallFailed
from slots import JobSpec, Machine, MachinePolicy, OnCompletion, Resources, Schedule

EPOCH = 1_800_000_000.0
REASON = "Defrag t"


# ----------------------------------------------------------------------- ads for the tables


def pslot(
    machine: str,
    *,
    free: int = 2,
    total: int = 8,
    badput: int = 100,
    state: str = "none",
    reason: str | None = None,
    request_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A partitionable slot ad as the master serves it (machine-wide values included)."""
    ad: dict[str, Any] = {
        "Name": f"slot1@{machine}",
        "Machine": machine,
        "MyAddress": f"fake://{machine}",
        "PartitionableSlot": True,
        "SlotType": "Partitionable",
        "Cpus": free,
        "TotalCpus": total,
        "ExpectedMachineGracefulDrainingBadput": badput,
        "ExpectedMachineQuickDrainingBadput": badput // 2,
        "ExpectedMachineFastDrainingBadput": badput // 4,
        "ExpectedMachineGracefulDrainingCompletion": int(EPOCH) + 60,
        "ExpectedMachineQuickDrainingCompletion": int(EPOCH) + 10,
        "ExpectedMachineFastDrainingCompletion": int(EPOCH),
        "DrainState": state,
        "Lost": False,
    }
    if state in ("draining", "drained"):
        ad["Draining"] = True
    if reason is not None:
        ad["DrainReason"] = reason
        ad["DrainingRequestId"] = request_id or "7"
    ad.update(extra)
    return {k: v for k, v in ad.items() if v is not None}


def policy(**overrides: Any) -> DefragPolicy:
    knobs: dict[str, Any] = {"name": "t", "interval": 600.0, "draining_machines_per_hour": 60.0}
    knobs.update(overrides)
    return DefragPolicy(**knobs)


def names(candidates: Any) -> list[str]:
    return [c.machine for c in candidates]


# ----------------------------------------------------------------------- pacing


@pytest.mark.parametrize(
    ("rate", "interval", "cycles", "per_cycle"),
    [
        # one an hour every ten minutes: the sixth cycle starts the first drain
        (1.0, 600.0, 13, [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0]),
        # two hours between cycles: HTCondor drains nothing (interval > 1 h); we keep the rate
        (0.75, 7200.0, 4, [1, 2, 1, 2]),
        (0.25, 5400.0, 8, [0, 0, 1, 0, 0, 1, 0, 1]),
        (25.0, 7200.0, 2, [50, 50]),
        # a day between cycles
        (0.1, 86400.0, 3, [2, 2, 3]),
        (0.0, 600.0, 3, [0, 0, 0]),
    ],
)
def test_the_rate_holds_for_any_interval(
    rate: float, interval: float, cycles: int, per_cycle: list[int]
) -> None:
    pacing = Pacing()
    got = []
    for k in range(cycles):
        _, units, pacing = pace(rate, interval, EPOCH + k * interval, pacing)
        got.append(units)
    assert got == per_cycle


@given(
    rate=st.floats(min_value=0.01, max_value=500),
    interval=st.floats(min_value=1, max_value=3 * 86400),
    cycles=st.integers(min_value=1, max_value=60),
)
def test_cycles_never_exceed_the_rate_and_never_lose_a_whole_drain(
    rate: float, interval: float, cycles: int
) -> None:
    pacing, total = Pacing(), 0
    for k in range(cycles):
        _, units, pacing = pace(rate, interval, EPOCH + k * interval, pacing)
        total += units
    exact = rate * cycles * interval / 3600
    assert total <= exact + 1e-6
    assert total > exact - 1 - 1e-6
    assert 0 <= pacing.carry < 1


@pytest.mark.parametrize(
    ("elapsed", "carry", "credit"),
    [
        (600.0, 0.0, 1.0),  # on time
        (1800.0, 0.0, 1.0),  # late (the daemon was down): one interval's worth, no burst
        (100.0, 0.5, 0.5 + 100 / 600),  # early (a reload woke it): what the time earned
        (-5.0, 0.25, 0.25),  # the clock stepped back: nothing earned
    ],
)
def test_elapsed_time_is_clamped_to_one_interval(
    elapsed: float, carry: float, credit: float
) -> None:
    got, _, after = pace(6.0, 600.0, EPOCH + elapsed, Pacing(last_poll=EPOCH, carry=carry))
    assert got == pytest.approx(credit)
    assert after.last_poll == EPOCH + elapsed


# ----------------------------------------------------------------------- one cycle's decisions


@dataclass(frozen=True)
class Case:
    ads: list[dict[str, Any]]
    knobs: dict[str, Any] = field(default_factory=dict)
    draining: tuple[str, ...] = ()
    whole: tuple[str, ...] = ()
    cancels: tuple[str, ...] = ()
    candidates: tuple[str, ...] = ()
    wanted: int = 10
    why: str = ""


CASES = {
    "cheapest first by the default rank": Case(
        ads=[pslot("a", badput=300), pslot("b", badput=100), pslot("c", badput=200)],
        candidates=("b", "c", "a"),
    ),
    "ties by machine name": Case(
        ads=[pslot("z", badput=5), pslot("m", badput=5)], candidates=("m", "z")
    ),
    "a non-numeric rank counts 0": Case(
        ads=[pslot("b", badput=5), pslot("a", badput=500)],
        knobs={"rank": "NoSuchAttribute"},
        candidates=("a", "b"),
    ),
    "a custom rank: most free cores first": Case(
        ads=[pslot("a", free=1), pslot("b", free=6)], knobs={"rank": "Cpus"}, candidates=("b", "a")
    ),
    "whole machines are counted, not drained": Case(
        ads=[pslot("w", free=8), pslot("f", free=2)], whole=("w",), candidates=("f",)
    ),
    "an admin's drain is not counted, cancelled, whole or a candidate": Case(
        ads=[pslot("x", free=8, state="draining", reason="admin"), pslot("f")],
        candidates=("f",),
    ),
    "another defrag daemon's drain is left alone": Case(
        ads=[pslot("x", free=8, state="draining", reason="Defrag other")], why="no candidate"
    ),
    "the master's maintenance drain is left alone": Case(
        ads=[pslot("x", state="draining", reason="maintenance", MaintenanceMode="DRAINING")],
        why="no candidate",
    ),
    "our drains count; those matching the cancel requirements are cancelled": Case(
        ads=[
            pslot("d1", free=8, state="draining", reason=REASON, request_id="4"),
            pslot("d2", free=2, state="draining", reason=REASON),
            pslot("f"),
        ],
        draining=("d1", "d2"),
        whole=("d1",),
        cancels=("d1",),
        candidates=("f",),
    ),
    "custom cancel requirements: half a machine is enough": Case(
        ads=[
            pslot("d1", free=4, state="draining", reason=REASON),
            pslot("d2", free=2, state="draining", reason=REASON),
        ],
        knobs={"cancel_requirements": "Cpus * 2 >= TotalCpus"},
        draining=("d1", "d2"),
        cancels=("d1",),
        why="no candidate",
    ),
    "concurrency: headroom, not just a gate": Case(
        ads=[
            pslot("d1", state="draining", reason=REASON),
            pslot("d2", state="draining", reason=REASON),
            pslot("a"),
            pslot("b"),
        ],
        knobs={"max_concurrent_draining": 3},
        draining=("d1", "d2"),
        candidates=("a", "b"),
        wanted=1,
        why="max_concurrent_draining reached",
    ),
    "concurrency reached": Case(
        ads=[pslot("d1", state="draining", reason=REASON), pslot("a")],
        knobs={"max_concurrent_draining": 1},
        draining=("d1",),
        wanted=0,
        why="max_concurrent_draining reached",
    ),
    "max_concurrent_draining 0 stops everything": Case(
        ads=[pslot("a")],
        knobs={"max_concurrent_draining": 0},
        wanted=0,
        why="max_concurrent_draining reached",
    ),
    "whole machines: our draining machines count as whole to be": Case(
        ads=[
            pslot("w", free=8),
            pslot("d1", state="draining", reason=REASON),
            pslot("a"),
            pslot("b"),
        ],
        knobs={"max_whole_machines": 3},
        draining=("d1",),
        whole=("w",),
        candidates=("a", "b"),
        wanted=1,
        why="max_whole_machines reached",
    ),
    "a drained machine of ours counts once": Case(
        ads=[pslot("d1", free=8, state="drained", reason=REASON), pslot("a")],
        knobs={"max_whole_machines": 2, "cancel_requirements": "false"},
        draining=("d1",),
        whole=("d1",),
        candidates=("a",),
        wanted=1,
        why="max_whole_machines reached",
    ),
    "rate 0: nothing, and no candidate is even ranked": Case(
        ads=[pslot("a")], knobs={"draining_machines_per_hour": 0.0}, wanted=0, why="rate 0"
    ),
    "not candidates: pending, maintenance, lost, offline, no address, not partitionable": Case(
        ads=[
            pslot("p", state="pending", reason="admin"),
            pslot("m1", MaintenanceMode="DRAINING"),
            pslot("m2", MaintenanceMode="DOWN"),
            pslot("up", MaintenanceMode="UP"),
            pslot("lost", Lost=True),
            pslot("off", Offline=True),
            pslot("noaddr", MyAddress=None),
            {**pslot("dyn"), "PartitionableSlot": False, "Name": "slot1_1@dyn"},
        ],
        candidates=("up",),
    ),
    "a lost machine draining for us is not counted": Case(
        ads=[pslot("d1", free=8, state="draining", reason=REASON, Lost=True)], why="no candidate"
    ),
    "requirements narrow the candidates": Case(
        ads=[pslot("small"), pslot("big", total=64, free=10)],
        knobs={"requirements": "TotalCpus >= 32"},
        candidates=("big",),
    ),
    "a custom whole machine expression": Case(
        ads=[pslot("a", free=6), pslot("b", free=2)],
        knobs={"whole_machine_expr": "Cpus >= 6"},
        whole=("a",),
        candidates=("b",),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_plan_cycle(case: Case) -> None:
    plan = plan_cycle(case.ads, policy(**case.knobs), now=EPOCH, pacing=Pacing())
    assert plan.draining == case.draining
    assert plan.whole == case.whole
    assert tuple(c.machine for c in plan.cancels) == case.cancels
    assert tuple(names(plan.candidates)) == case.candidates
    assert plan.wanted == case.wanted
    assert plan.why == case.why


def test_a_cancel_names_the_request_and_the_address() -> None:
    ads = [pslot("d1", free=8, state="draining", reason=REASON, request_id="42")]
    plan = plan_cycle(ads, policy(), now=EPOCH, pacing=Pacing())
    assert plan.cancels == (Cancel(machine="d1", address="fake://d1", request_id="42"),)


def test_candidates_carry_the_ranked_estimate_of_the_schedule() -> None:
    ads = [pslot("a", badput=100)]
    graceful = plan_cycle(ads, policy(), now=EPOCH, pacing=Pacing()).candidates[0]
    quick = plan_cycle(ads, policy(schedule=Schedule.QUICK), now=EPOCH, pacing=Pacing()).candidates[
        0
    ]
    assert (graceful.badput, graceful.completion, graceful.rank) == (100, int(EPOCH) + 60, -100)
    assert (quick.badput, quick.completion) == (50, int(EPOCH) + 10)


def test_machine_of() -> None:
    assert machine_of({"Machine": "h1", "Name": "slot1@h2"}) == "h1"
    assert machine_of({"Name": "slot1@h2"}) == "h2"
    assert machine_of({"Name": "h3"}) == "h3"


@pytest.mark.parametrize(
    ("ranked", "fresh", "ok"),
    [(100, 100, True), (100, 150, True), (100, 151, False), (0, 0, True), (0, 1, False),
     (None, 10**6, True), (100, None, True), (100, "x", True)],
)  # fmt: skip
def test_estimate_acceptable(ranked: int | None, fresh: Any, ok: bool) -> None:
    assert estimate_acceptable(ranked, fresh, 1.5) is ok


@dataclass(frozen=True, kw_only=True)
class AgedAd:
    """A machine ranked on its ad of ``ad_at`` and asked phase 1 at ``phase_at``; ``jobs``
    (claimed at, cpus) before the ad, ``later`` between the ad and phase 1. Every machine
    promises 1 s of retirement and ``vacate`` s to vacate: past its retirement, a job's
    graceful badput is cpus × (run + vacate), and grows with the run."""

    jobs: tuple[tuple[float, int], ...]
    later: tuple[tuple[float, int], ...] = ()
    ad_at: float = EPOCH - 10
    phase_at: float = EPOCH
    vacate: int = 5
    ranked: int  # the ad's ExpectedMachineGracefulDrainingBadput
    brought: int  # that, brought forward to the end of phase 1's second
    fresh: int  # phase 1's estimate
    ok: bool


AGED = {
    # 2 × (2 + 5) when ranked, 2 × (12 + 5) at phase 1: the same job, ten seconds older
    # (brought forward to the end of that second: 2 × (13 + 5))
    "a young job on an ad 10 s old": AgedAd(
        jobs=((EPOCH - 12, 2),), ranked=14, brought=36, fresh=34, ok=True
    ),
    "the ad of phase 1's second": AgedAd(
        jobs=((EPOCH - 12, 2),), ad_at=EPOCH, ranked=34, brought=36, fresh=34, ok=True
    ),
    # 0.95 s of run at the ad (its whole seconds counted up: 1), 1.09 s at phase 1, in the
    # same second: the ad's figure is already phase 1's
    "a run that crosses a second within the ad's second": AgedAd(
        jobs=((EPOCH - 1.1, 2),), ad_at=EPOCH - 0.15, phase_at=EPOCH - 0.01, vacate=1,
        ranked=4, brought=6, fresh=4, ok=True,
    ),
    "an old job on an old ad": AgedAd(
        jobs=((EPOCH - 1000, 2),), ad_at=EPOCH - 60, ranked=1890, brought=2012, fresh=2010,
        ok=True,
    ),
    # a job claimed since the ad: 4 × (5 + 5) more than the ad promised, brought forward
    "a job of 4 cores claimed since the ad": AgedAd(
        jobs=((EPOCH - 12, 2),), later=((EPOCH - 5, 4),), ranked=14, brought=36, fresh=74,
        ok=False,
    ),
    "a job of 1 core claimed since the ad, within the factor": AgedAd(
        jobs=((EPOCH - 12, 2),), later=((EPOCH - 1, 1),), ranked=14, brought=36, fresh=40,
        ok=True,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", AGED.values(), ids=AGED.keys())
def test_the_ranked_badput_is_brought_forward_to_phase_1(case: AgedAd) -> None:
    """The fresh estimate is compared with the ad's promise as of the same instant: the
    age of the ad alone never skips a drain; a real increase still does."""
    m = Machine(
        host="m",
        total=Resources(cpus=8, memory=8192),
        policy=MachinePolicy(max_job_retirement_time=1, machine_max_vacate_time=case.vacate),
        now=EPOCH - 2000,
        address="http://m:1",
    )
    for at, cpus in case.jobs:
        m.claim(at, resources=Resources(cpus=cpus), spec=JobSpec())
    ads = m.ad(case.ad_at)["slots"]
    for at, cpus in case.later:
        m.claim(at, resources=Resources(cpus=cpus), spec=JobSpec())
    _, estimate, _ = m.start_draining(
        case.phase_at,
        schedule=Schedule.GRACEFUL,
        reason=REASON,
        on_completion=OnCompletion.RESUME,
    )
    (candidate,) = plan_cycle(ads, policy(), now=case.ad_at, pacing=Pacing()).candidates
    assert candidate.ads == tuple(ads)
    assert estimate.now == math.floor(case.phase_at)
    assert (candidate.badput, estimate.badput) == (case.ranked, case.fresh)
    assert candidate.badput_at(estimate.now) == case.brought
    assert estimate_acceptable(candidate.badput_at(estimate.now), estimate.badput, 1.5) is case.ok


def test_a_ranked_badput_is_brought_forward_as_far_as_its_ads_say() -> None:
    job = {"Name": "slot1_1@a", "Machine": "a", "State": "Claimed", "Activity": "Busy",
           "Cpus": 2, "TotalJobRunTime": 10, "MyCurrentTime": int(EPOCH) - 10}  # fmt: skip
    timed = pslot("a", badput=100, MyCurrentTime=int(EPOCH) - 10)
    for ads, brought in [
        ([timed, job], 100 + 2 * 11),  # the job ran 10 s more, to the end of EPOCH's second
        ([pslot("a", badput=100), job], 100),  # the ad has no MyCurrentTime
        ([timed, {**job, "TotalJobRunTime": "x"}], 100),  # a value that is not a number
        ([timed, {**job, "DrainSuspendedJobs": "x"}], 100),
    ]:
        (candidate,) = plan_cycle(ads, policy(), now=EPOCH, pacing=Pacing()).candidates
        assert candidate.badput_at(EPOCH) == brought
        assert candidate.badput_at(EPOCH - 20) == 100  # phase 1 before the ad: as it is
    unpromised = pslot("a", MyCurrentTime=int(EPOCH) - 10)
    del unpromised["ExpectedMachineGracefulDrainingBadput"]
    (unknown,) = plan_cycle([unpromised, job], policy(), now=EPOCH, pacing=Pacing()).candidates
    assert unknown.badput_at(EPOCH + 10) is None


def test_plan_on_the_agents_own_ads() -> None:
    """The attribute names the policy relies on are the ones a real machine publishes."""

    def machine(host: str, jobs: list[int], retirement: int) -> Machine:
        m = Machine(
            host=host,
            total=Resources(cpus=8, memory=8192),
            policy=MachinePolicy(max_job_retirement_time=retirement, machine_max_vacate_time=5),
            now=EPOCH - 100,
            address=f"http://{host}:1",
        )
        for cpus in jobs:
            m.claim(EPOCH - 10, resources=Resources(cpus=cpus), spec=JobSpec())
        return m

    cheap, dear, idle = (
        machine("cheap", [2, 2], 50),
        machine("dear", [4], 600),
        machine("idle", [], 0),
    )
    ours = machine("ours", [1], 600)
    ours.start_draining(EPOCH, schedule=Schedule.GRACEFUL, reason=REASON, commit=True,
                        on_completion=OnCompletion.RESUME)  # fmt: skip
    admin = machine("admin", [1], 600)
    admin.start_draining(EPOCH, schedule=Schedule.GRACEFUL, reason="admin", commit=True)
    ads = [s for m in (cheap, dear, idle, ours, admin) for s in m.ad(EPOCH)["slots"]]
    plan = plan_cycle(ads, policy(cancel_requirements="false"), now=EPOCH, pacing=Pacing())
    assert plan.draining == ("ours",)
    assert plan.whole == ("idle",)
    assert names(plan.candidates) == ["cheap", "dear"]
    assert plan.candidates[0].badput == 2 * 2 * 50
    assert plan.candidates[1].badput == 4 * 600


def test_draining_cost_is_the_fraction_of_core_time_since_first_seen() -> None:
    def ad(machine: str, badput: int, unclaimed: int, at: float, cpus: int = 8) -> dict[str, Any]:
        return pslot(
            machine,
            total=cpus,
            TotalMachineDrainingBadput=badput,
            TotalMachineDrainingUnclaimedTime=unclaimed,
            MyCurrentTime=at,
        )

    b0, u0, base = draining_cost([ad("a", 1000, 50, 0), ad("b", 0, 0, 0, cpus=2)], {})
    assert (b0, u0) == (0.0, 0.0)
    assert base["a"] == CostBaseline(badput=1000, unclaimed=50, at=0)
    badput, unclaimed, base = draining_cost(
        [ad("a", 1000 + 800, 50 + 200, 100), ad("b", 200, 0, 100, cpus=2)], base
    )
    assert badput == pytest.approx((800 / 100 + 200 / 100) / 10)
    assert unclaimed == pytest.approx((200 / 100) / 10)
    # a counter that went backwards (state wiped) starts a new baseline
    _, _, base = draining_cost([ad("a", 10, 0, 200)], base)
    assert base == {"a": CostBaseline(badput=10, unclaimed=0, at=200)}


# ----------------------------------------------------------------------- the daemon's record

#: A drain of machine "a" this daemon committed, request 4, at EPOCH + 0.5 (node's clock).
COMMITTED = DrainRecord(machine="a", request_id="4", committed=True, at=EPOCH + 0.5)
PENDING = DrainRecord(machine="a", request_id="4", committed=False, at=EPOCH + 0.5)
BEFORE, SAME_SECOND, AFTER = int(EPOCH) - 30, int(EPOCH), int(EPOCH) + 1


@pytest.mark.parametrize(
    ("record", "ad", "knows"),
    [
        # made before the drain: no request, the jobs still there
        (COMMITTED, pslot("a", MyCurrentTime=BEFORE), False),
        # MyCurrentTime is whole seconds: the second of the commit may be before it
        (COMMITTED, pslot("a", MyCurrentTime=SAME_SECOND), False),
        # made after: whatever it shows (here: the drain over, the machine whole)
        (COMMITTED, pslot("a", free=8, MyCurrentTime=AFTER), True),
        # it shows the drain, committed
        (COMMITTED, pslot("a", state="draining", reason=REASON, request_id="4",
                          MyCurrentTime=SAME_SECOND), True),
        # it shows the request still pending: made before the commit
        (COMMITTED, pslot("a", state="pending", reason=REASON, request_id="4",
                          MyCurrentTime=SAME_SECOND), False),
        # ... which is all a record of phase 1 knows
        (PENDING, pslot("a", state="pending", reason=REASON, request_id="4",
                        MyCurrentTime=SAME_SECOND), True),
        # a later request (anyone's), or an earlier one
        (COMMITTED, pslot("a", state="pending", reason="admin", request_id="5",
                          MyCurrentTime=SAME_SECOND), True),
        (COMMITTED, pslot("a", state="draining", reason="admin", request_id="3",
                          MyCurrentTime=SAME_SECOND), False),
        # an ad without MyCurrentTime knows a record by its request id only
        (COMMITTED, pslot("a", free=8), False),
    ],
)  # fmt: skip
def test_an_ad_knows_a_record_by_its_request_or_its_time(
    record: DrainRecord, ad: dict[str, Any], knows: bool
) -> None:
    assert ad_knows(record, ad) is knows


RECORD_CASES = {
    "an ad older than the record: counted as draining, not a candidate": Case(
        ads=[pslot("a", MyCurrentTime=BEFORE), pslot("b", badput=900)],
        knobs={"max_concurrent_draining": 2},
        draining=("a",),
        candidates=("b",),
        wanted=1,
        why="max_concurrent_draining reached",
    ),
    "... nor whole, nor cancelled from that ad": Case(
        ads=[pslot("a", free=8, state="draining", reason=REASON, request_id="3",
                   MyCurrentTime=BEFORE)],
        draining=("a",),
        why="no candidate",
    ),
    "an ad that knows the drain decides: over, the machine whole": Case(
        ads=[pslot("a", free=8, MyCurrentTime=AFTER), pslot("b")],
        whole=("a",),
        candidates=("b",),
    ),
    "an ad that knows it decides: fragmented again, a candidate again": Case(
        ads=[pslot("a", MyCurrentTime=AFTER)], candidates=("a",)
    ),
    "a lost machine's record is kept but counts nothing": Case(
        ads=[pslot("a", Lost=True, MyCurrentTime=BEFORE)], why="no candidate"
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", RECORD_CASES.values(), ids=RECORD_CASES.keys())
def test_plan_cycle_never_acts_on_an_ad_older_than_its_record(case: Case) -> None:
    records = {"a": COMMITTED}
    plan = plan_cycle(case.ads, policy(**case.knobs), now=EPOCH + 1, pacing=Pacing(),
                      records=records)  # fmt: skip
    assert plan.draining == case.draining
    assert plan.unseen == tuple(m for m in case.draining if m == "a")
    assert plan.whole == case.whole
    assert tuple(c.machine for c in plan.cancels) == case.cancels
    assert tuple(names(plan.candidates)) == case.candidates
    assert plan.wanted == case.wanted
    assert plan.why == case.why
    assert plan.records == (COMMITTED,)


@pytest.mark.parametrize(
    ("ads", "kept"),
    [
        ([pslot("a", MyCurrentTime=AFTER)], True),
        # an ad an hour after the record: no master serves an older one still
        ([pslot("a", MyCurrentTime=int(COMMITTED.at + RECORD_LIFETIME))], True),
        ([pslot("a", MyCurrentTime=int(COMMITTED.at + RECORD_LIFETIME) + 1)], False),
        # the master lists no ad of the machine at all (forgotten)
        ([pslot("b", MyCurrentTime=AFTER)], False),
        ([pslot("a", Lost=True, MyCurrentTime=BEFORE)], True),
    ],
)
def test_a_record_is_kept_an_hour_or_while_its_machine_is_listed(
    ads: list[dict[str, Any]], kept: bool
) -> None:
    plan = plan_cycle(ads, policy(), now=EPOCH + 1, pacing=Pacing(), records={"a": COMMITTED})
    assert plan.records == ((COMMITTED,) if kept else ())


def test_records_round_trip_through_the_store_and_unreadable_ones_are_left_out() -> None:
    records = {"a": COMMITTED, "b": DrainRecord(machine="b", request_id="x", committed=False,
                                                 at=1.0)}  # fmt: skip
    assert records_from_json(records_to_json(records)) == records
    doc = {
        **records_to_json(records),
        "c": {"request_id": 7, "committed": True, "at": 1.0},
        "d": {"request_id": "7", "committed": "yes", "at": 1.0},
        "e": {"request_id": "7", "committed": True, "at": True},
        "f": None,
    }
    assert records_from_json(doc) == records
    assert records_from_json(None) == records_from_json([1, 2]) == {}


# ----------------------------------------------------------------------- a fake pool


@dataclass
class FakeMachine:
    """One node as the defrag daemon sees it: an ad and the drain API, on the test's clock."""

    name: str
    jobs: list[int] = field(default_factory=lambda: [2, 2])
    total: int = 8
    badput: int = 100
    fresh_badput: int | None = None  # what phase 1 reports (default: the ad's)
    drain_time: float = 60.0  # how long a committed drain takes to empty the node
    refill: bool = False  # new jobs arrive as soon as it resumes
    reachable: bool = True
    request: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    #: the slot ads the master holds, since when (the test may set the first)
    served: tuple[float, list[dict[str, Any]]] | None = None


_PSLOT = {
    "PartitionableSlot": True,
    "MyCurrentTime": 100,
    "ExpectedMachineGracefulDrainingBadput": 14,
}
_JOB = {"PartitionableSlot": False, "MyCurrentTime": 100, "Cpus": 2}


@pytest.mark.parametrize(
    ("ads", "expected"),
    [
        # the ad ranked, read again: its jobs added, its promise kept
        ([_PSLOT, _JOB], {"badput": 14, "as_of": 100.0, "ads": 2}),
        # a newer ad: its own promise, as of its own time
        (
            [{**_PSLOT, "MyCurrentTime": 104, "ExpectedMachineGracefulDrainingBadput": 22}, _JOB],
            {"badput": 22, "as_of": 104.0, "ads": 2},
        ),
        # no partitionable slot ad (the machine gone from the master): unchanged
        ([_JOB], {"badput": 14, "as_of": 100.0, "ads": 1}),
        ([], {"badput": 14, "as_of": 100.0, "ads": 1}),
    ],
)
def test_with_machine_ads(ads: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    ranked = Candidate(
        machine="m",
        address="http://m:1",
        rank=-14,
        badput=14,
        completion=None,
        as_of=100.0,
        ads=(_PSLOT,),
    )
    got = with_machine_ads(ranked, ads)
    assert {"badput": got.badput, "as_of": got.as_of, "ads": len(got.ads)} == expected


class FakePool:
    """A :class:`~nodeagent.defrag._service.DefragLink` over fake machines (no I/O, no Mock)."""

    def __init__(self, clock: TrioClock, machines: list[FakeMachine]) -> None:
        self.clock = clock
        self.machines = {m.name: m for m in machines}
        self.down_until = -1.0  # the master does not answer before this offset
        #: The master holds each machine's ad this long before it hears it again (None:
        #: every read shows the machines as they are).
        self.ad_refresh: float | None = None
        self.published: list[dict[str, Any]] = []
        #: A cycle's read gets the partitionable slot ads only, as the real link asks the
        #: master; a machine's jobs come through :meth:`machine_ads` (False: every ad).
        self.partitionable_only = False
        self.machine_reads: list[str] = []
        self._ids = itertools.count(1)

    def offset(self) -> float:
        return round(self.clock.now() - EPOCH, 6)

    def commits(self) -> list[tuple[float, str]]:
        return sorted(
            (h["committed_at"], m.name)
            for m in self.machines.values()
            for h in m.history
            if h.get("committed_at") is not None
        )

    def _settle(self) -> None:
        now = self.offset()
        for m in self.machines.values():
            r = m.request
            if (
                r is not None
                and r["state"] == "draining"
                and r["committed_at"] + m.drain_time <= now
            ):
                r["state"] = "completed"
                m.request = None
                m.jobs = [2, 2] if m.refill else []

    def ads(self, m: FakeMachine) -> list[dict[str, Any]]:
        r = m.request
        ad = pslot(
            m.name,
            free=m.total - sum(m.jobs),
            total=m.total,
            badput=m.badput if m.jobs else 0,
            state="none" if r is None else r["state"],
            reason=None if r is None else r["reason"],
            request_id=None if r is None else r["id"],
            TotalMachineDrainingBadput=0,
            TotalMachineDrainingUnclaimedTime=0,
            MyCurrentTime=int(self.clock.now()),
        )
        return [ad]

    async def slot_ads(self) -> list[dict[str, Any]]:
        await trio.lowlevel.checkpoint()
        if self.offset() < self.down_until:
            raise MasterCallFailed("master.unreachable", "down")
        self._settle()
        now = self.offset()
        for m in self.machines.values():
            if self.ad_refresh is None or m.served is None or now >= m.served[0] + self.ad_refresh:
                m.served = (now, self.ads(m))
        every = [ad for m in self.machines.values() if m.served is not None for ad in m.served[1]]
        if self.partitionable_only:
            return [ad for ad in every if ad.get("PartitionableSlot", True) is True]
        return every

    async def machine_ads(self, machine: str) -> list[dict[str, Any]]:
        await trio.lowlevel.checkpoint()
        if self.offset() < self.down_until:
            raise MasterCallFailed("master.unreachable", "down")
        self.machine_reads.append(machine)
        served = self.machines[machine].served
        return [] if served is None else list(served[1])

    async def publish(self, ad: dict[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        if self.offset() < self.down_until:
            raise MasterCallFailed("master.unreachable", "down")
        self.published.append(ad)

    def agent(self, address: str, *, node: str) -> AgentCalls:
        async def send(
            method: str, path: str, body: dict[str, Any] | None = None
        ) -> dict[str, Any]:
            return await self.call_agent(address, method, path, node=node, body=body)

        return AgentCalls(send)

    async def call_agent(
        self,
        address: str,
        method: str,
        path: str,
        *,
        node: str,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The agent's side: its answer to one request, as its API gives it."""
        await trio.lowlevel.checkpoint()
        # every call names the node it is for: the machine whose address it took
        assert node == address.removeprefix("fake://")
        m = self.machines[address.removeprefix("fake://")]
        if not m.reachable:
            raise AgentCallFailed("agent.unreachable", f"{address}: connection refused")
        self._settle()
        r = m.request
        if (method, path) == ("POST", "/v1/drain"):
            assert body is not None
            if r is not None:
                raise AgentCallFailed("drain.in_progress", f"request {r['id']} in force", 409)
            r = {"id": str(next(self._ids)), "state": "pending", **body, "committed_at": None}
            m.request = r
            m.history.append(r)
            badput = m.badput if m.fresh_badput is None else m.fresh_badput
            return {
                "id": r["id"],
                "state": "pending",
                "estimate": {"badput": badput, "now": int(self.clock.now())},
                "created_at": self.clock.now(),
            }
        request_id, _, verb = path.removeprefix("/v1/drain/").partition("/")
        if r is None or r["id"] != request_id:
            raise AgentCallFailed("drain.no_such_request", f"no request {request_id}", 404)
        if verb == "commit":
            r.update(state="draining", committed_at=self.offset())
            return {"id": r["id"], "state": r["state"], "committed_at": self.clock.now()}
        if verb == "cancel":
            r["state"] = "cancelled"
            m.request = None
        return {"id": r["id"], "state": r["state"]}


@asynccontextmanager
async def running(
    machines: list[FakeMachine],
    tmp_path: Path | None = None,
    *,
    master_down_until: float = -1.0,
    clock: TrioClock | None = None,
    ad_refresh: float | None = None,
    partitionable_only: bool = False,
    **knobs: Any,
) -> AsyncIterator[tuple[DefragService, FakePool]]:
    clock = clock or TrioClock(EPOCH)
    pool = FakePool(clock, machines)
    pool.down_until = master_down_until
    pool.ad_refresh = ad_refresh
    pool.partitionable_only = partitionable_only
    store = None if tmp_path is None else DocumentStore(tmp_path / "defrag.db")
    service = DefragService(
        policy=policy(**knobs), link=pool, clock=clock, store=store, update_interval=300.0
    )
    service.load()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            yield service, pool
            nursery.cancel_scope.cancel()
    finally:
        if store is not None:
            store.close()


def fragmented(*names_: str, **fields: Any) -> list[FakeMachine]:
    return [FakeMachine(name=n, **fields) for n in names_]


# ----------------------------------------------------------------------- the service


async def test_one_an_hour_every_ten_minutes(autojump_clock: trio.testing.MockClock) -> None:
    machines = fragmented("a", "b", "c", "d", refill=True)
    async with running(machines, draining_machines_per_hour=1.0) as (_, pool):
        await trio.sleep(3 * 3600 + 1)
    assert [t for t, _ in pool.commits()] == [3000.0, 6600.0, 10200.0]


async def test_two_hour_intervals_keep_the_rate(autojump_clock: trio.testing.MockClock) -> None:
    machines = fragmented("a", "b", "c", "d", refill=True, drain_time=600)
    async with running(machines, interval=7200.0, draining_machines_per_hour=0.75) as (_, pool):
        await trio.sleep(4 * 7200 - 1)
    assert [t for t, _ in pool.commits()] == [0.0, 7200.0, 7200.0, 14400.0, 21600.0, 21600.0]


async def test_concurrency_limit_and_machines_resume_whole(
    autojump_clock: trio.testing.MockClock,
) -> None:
    machines = [
        FakeMachine(name="a", badput=100, drain_time=1500),
        FakeMachine(name="b", badput=200, drain_time=1500),
        FakeMachine(name="c", badput=300, drain_time=1500),
    ]
    async with running(machines, max_concurrent_draining=1) as (service, pool):
        await trio.sleep(601)
        assert service.stats.machines_draining == 1
        await trio.sleep(3 * 1800)
        ad = service.ad()
    # cheapest first, one at a time: the next starts at the first cycle after a resume
    assert pool.commits() == [(0.0, "a"), (1800.0, "b"), (3600.0, "c")]
    for m in machines:
        assert (m.jobs, m.request) == ([], None)
        assert [h["reason"] for h in m.history] == [REASON]
        assert [h["on_completion"] for h in m.history] == ["resume"]
    assert ad["MachinesDrainingPeak"] == 1
    assert ad["WholeMachines"] == 3
    assert ad["WholeMachinesPeak"] == 3
    assert ad["DrainSuccesses"] == 3
    assert ad["RecentDrainSuccesses"] == 1  # only c's drain is less than an hour old
    assert [e["who"] for e in ad["RecentDrainsList"]] == ["c", "b", "a"]


async def test_the_whole_machine_limit(autojump_clock: trio.testing.MockClock) -> None:
    machines = [FakeMachine(name="w", jobs=[]), *fragmented("a", "b", "c", drain_time=100)]
    async with running(machines, max_whole_machines=2) as (service, pool):
        await trio.sleep(5 * 600)
        stats = service.stats
    assert pool.commits() == [(0.0, "a")]
    assert stats.whole_machines == 2


async def test_a_worse_fresh_estimate_skips_the_candidate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    machines = [
        FakeMachine(name="a", badput=100, fresh_badput=151),
        FakeMachine(name="b", badput=200, fresh_badput=300),
        FakeMachine(name="c", badput=300),
    ]
    async with running(machines, draining_machines_per_hour=6.0) as (service, pool):
        await trio.sleep(1)
        ad = service.ad()
    assert [h["state"] for h in machines[0].history] == ["cancelled"]
    assert pool.commits() == [(0.0, "b")]
    assert (ad["DrainSkips"], ad["DrainSuccesses"], ad["DrainFailures"]) == (1, 1, 0)


@pytest.mark.parametrize("partitionable_only", [False, True], ids=["every ad", "as the master"])
async def test_an_old_ad_of_a_young_job_is_no_badput_increase(
    autojump_clock: trio.testing.MockClock, partitionable_only: bool
) -> None:
    """The master serves ads 10 s old. A young job's badput has grown since, as its ad says
    it would (2 × (2 + 5) then, 2 × (12 + 5) at phase 1): drained. A job of 4 cores
    claimed since the ad adds 4 × (5 + 5) to that: skipped. Read as the real link reads
    (the partitionable slot ads a cycle, a machine's jobs only for a check that needs
    them), the same, with the jobs of the two candidates read once each."""

    def node(name: str, *later: tuple[float, int]) -> FakeMachine:
        m = Machine(
            host=name,
            total=Resources(cpus=8, memory=8192),
            policy=MachinePolicy(max_job_retirement_time=1, machine_max_vacate_time=5),
            now=EPOCH - 100,
            address=f"fake://{name}",
        )
        m.claim(EPOCH - 12, resources=Resources(cpus=2), spec=JobSpec())
        ads = m.ad(EPOCH - 10)["slots"]
        for at, cpus in later:
            m.claim(at, resources=Resources(cpus=cpus), spec=JobSpec())
        _, estimate, _ = m.start_draining(EPOCH, schedule=Schedule.GRACEFUL, reason=REASON)
        return FakeMachine(name=name, fresh_badput=estimate.badput, served=(-10.0, ads))

    grown, young = node("grown", (EPOCH - 5, 4)), node("young")
    assert (grown.fresh_badput, young.fresh_badput) == (74, 34)
    async with running(
        [grown, young],
        ad_refresh=600,
        partitionable_only=partitionable_only,
        draining_machines_per_hour=6.0,
    ) as (service, pool):
        await trio.sleep(1)
        ad = service.ad()
    assert [h["state"] for h in grown.history] == ["cancelled"]
    assert pool.commits() == [(0.0, "young")]
    assert (ad["DrainSkips"], ad["DrainSuccesses"], ad["DrainFailures"]) == (1, 1, 0)
    assert sorted(pool.machine_reads) == (["grown", "young"] if partitionable_only else [])


async def test_a_failed_drain_moves_on_to_the_next(autojump_clock: trio.testing.MockClock) -> None:
    machines = [FakeMachine(name="a", badput=1, reachable=False), FakeMachine(name="b")]
    machines.append(FakeMachine(name="busy", badput=0, request={"id": "x", "state": "pending",
                                                                  "reason": "admin"}))  # fmt: skip
    async with running(machines, draining_machines_per_hour=6.0) as (service, pool):
        await trio.sleep(1)
        ad = service.ad()
    assert pool.commits() == [(0.0, "b")]
    assert (ad["DrainFailures"], ad["RecentDrainFailures"], ad["DrainSuccesses"]) == (1, 1, 1)
    assert ad["RecentDrainsList"][1] == {
        "when": int(EPOCH),
        "who": "a",
        "what": "graceful",
        "result": "failure",
    }


async def test_cancel_requirements_cancel_only_our_drains(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def draining(name: str, request_id: str, reason: str) -> FakeMachine:
        request = {"id": request_id, "state": "draining", "reason": reason, "committed_at": -10.0}
        return FakeMachine(name=name, jobs=[2], request=request, drain_time=10**6)

    ours, admin = draining("ours", "5", REASON), draining("admin", "6", "admin")
    async with running(
        [ours, admin], draining_machines_per_hour=0.0, cancel_requirements="Cpus >= 6"
    ) as (service, _):
        await trio.sleep(1)
        assert service.ad()["RecentCancels"] == 1
        await trio.sleep(RECENT_WINDOW)
        ad = service.ad()
    assert ours.request is None
    assert admin.request is not None
    assert admin.request["state"] == "draining"
    assert (ad["Cancels"], ad["RecentCancels"]) == (1, 0)
    assert ad["RecentCancelsList"] == [{"when": int(EPOCH), "who": "ours"}]


async def test_a_master_that_is_down_skips_cycles(autojump_clock: trio.testing.MockClock) -> None:
    machines = fragmented("a", "b")
    async with running(machines, master_down_until=1799, draining_machines_per_hour=6.0) as (
        service,
        pool,
    ):
        await trio.sleep(1801)
        skipped = service.stats.query_failures
        first = pool.commits()
        await trio.sleep(600)
    assert skipped == 3
    # the time the master was down earned nothing: one drain per cycle once it is back
    assert first == [(1800.0, "a")]
    assert pool.commits() == [(1800.0, "a"), (2400.0, "b")]


async def test_the_pacing_survives_a_restart(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    machines = fragmented("a", "b", refill=True)
    clock = TrioClock(EPOCH)
    knobs: dict[str, Any] = {"clock": clock, "draining_machines_per_hour": 1.0}
    async with running(machines, tmp_path, **knobs) as (service, _):
        await trio.sleep(1300)  # cycles at 0, 600, 1200: half a drain earned
        assert service.pacing.carry == pytest.approx(0.5)
    await trio.sleep(200)  # down for less than an interval
    async with running(machines, tmp_path, **knobs) as (service, pool):
        assert service.pacing.carry == pytest.approx(0.5)
        await trio.sleep(2000)
    # the next cycle came one interval after the last one (1800, not 1500 at the restart),
    # and the sixth cycle drained
    assert pool.commits() == [(3000.0, "a")]


async def test_the_defrag_ad_is_pushed(autojump_clock: trio.testing.MockClock) -> None:
    async with running(fragmented("a"), draining_machines_per_hour=6.0) as (_, pool):
        await trio.sleep(1000)
    times = [ad["MyCurrentTime"] - int(EPOCH) for ad in pool.published]
    # at start and after each cycle (0, 600), and update_interval after the previous push
    assert sorted(set(times)) == [0, 300, 600, 900]
    last = pool.published[-1]
    assert last["MyType"] == "Defrag"
    assert last["Name"] == "defrag-t"
    assert last["DrainReason"] == REASON
    assert last["LastPollTime"] == int(EPOCH) + 600
    assert {"MachinesDraining", "WholeMachinesPeak", "AvgDrainingBadput"} <= set(last)


@pytest.mark.parametrize(
    "drain_time",
    [
        1,  # over before the next cycle: read stale, it would be drained a second time
        900,  # still draining then: read stale, it would be tried (and b drained past the limit)
    ],
)
async def test_a_late_ad_never_gets_a_machine_drained_twice(
    autojump_clock: trio.testing.MockClock, drain_time: float
) -> None:
    """The master holds each ad for 25 minutes: the cycles at 600 and 1200 read the ads of
    time 0, which show a as it was before its drain."""
    machines = [
        FakeMachine(name="a", badput=100, drain_time=drain_time),
        FakeMachine(name="b", badput=200, drain_time=drain_time),
    ]
    async with running(machines, ad_refresh=1500, max_concurrent_draining=1) as (service, pool):
        await trio.sleep(601)
        assert service.stats.machines_draining == 1  # a, on the record alone
        assert service.drains["a"].committed
        await trio.sleep(1800)
        ad = service.ad()
    # b once the master held a fresh ad of a again (at 1800)
    assert pool.commits() == [(0.0, "a"), (1800.0, "b")]
    assert [len(m.history) for m in machines] == [1, 1]
    assert (ad["DrainSuccesses"], ad["DrainFailures"], ad["MachinesDrainingPeak"]) == (1 + 1, 0, 1)


async def test_the_record_survives_a_restart_and_goes_to_the_next_leader(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    machines = fragmented("a", "b", drain_time=1)
    clock = TrioClock(EPOCH)
    knobs: dict[str, Any] = {"clock": clock, "ad_refresh": 1500, "max_concurrent_draining": 1}
    async with running(machines, tmp_path, **knobs) as (service, _):
        await trio.sleep(300)  # a drained at 0, over at 1
        assert list(service.drains) == ["a"]
    async with running(machines, tmp_path, **knobs) as (service, pool):
        assert service.drains["a"].request_id == "1"  # saved before the commit
        await trio.sleep(1000)  # a cycle at 600 on the ads of time 0
    assert pool.commits() == [(0.0, "a")]
    assert len(machines[0].history) == 1


async def test_a_skipped_transaction_leaves_no_record(
    autojump_clock: trio.testing.MockClock,
) -> None:
    machines = [FakeMachine(name="a", badput=100, fresh_badput=1000), FakeMachine(name="b")]
    async with running(machines, ad_refresh=1500) as (service, pool):
        await trio.sleep(601)  # skipped at 0, b drained at 0; a tried again at 600, not b
        assert list(service.drains) == ["b"]
    assert [h["state"] for h in machines[0].history] == ["cancelled", "cancelled"]
    assert pool.commits() == [(0.0, "b")]


# ----------------------------------------------------------------------- configuration


def test_configuration_defaults_are_condor_defrags(tmp_path: Path) -> None:
    config = load_defrag_config(None, {"HOME": str(tmp_path)}, uid=1000)
    p = defrag_policy(config)
    assert p == DefragPolicy(name="main")
    assert p.reason == "Defrag main"
    assert p.cancel_expr == "Cpus == TotalCpus"
    assert config.update_interval == 60
    assert config.key_file == tmp_path / ".local/state/nodeagent-defrag/pool.key"


def test_configuration_file_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "defrag.toml"
    path.write_text(
        'name = "big"\ninterval = "2h"\ndraining_machines_per_hour = 0.5\n'
        'schedule = "quick"\nrank = "Cpus"\nmaster_url = "http://m:9622"\n'
    )
    config = load_defrag_config(path, {"HOME": str(tmp_path)}, uid=1000)
    assert (config.interval, config.schedule, config.master_url) == (7200, "quick", "http://m:9622")
    path.write_text('rank = "Cpus >"\nmax_whole_machines = -2\nname = "a b"\n')
    with pytest.raises(ConfigError) as err:
        load_defrag_config(path, {"HOME": str(tmp_path)}, uid=1000)
    problems = "\n".join(err.value.problems)
    assert "rank: not a ClassAd expression" in problems
    assert "max_whole_machines" in problems
    assert "name" in problems


def test_the_shipped_example_configuration_loads(tmp_path: Path) -> None:
    example = Path(__file__).parents[3] / "systemd" / "defrag.toml.example"
    config = load_defrag_config(example, {"HOME": str(tmp_path)}, uid=1000)
    assert defrag_policy(config) == DefragPolicy(name="main")


async def test_reload_applies_the_policy_but_keeps_the_name(tmp_path: Path) -> None:
    generate_key(tmp_path / "pool.key")
    base: dict[str, Any] = {
        "state_dir": tmp_path,
        "runtime_dir": tmp_path,
        "key_file": tmp_path / "pool.key",
    }
    old = DefragConfig(**base, name="one", master_url="http://m:1")
    new = DefragConfig(**base, name="two", master_url="http://m:1", interval=60, rank="Cpus")
    clock = TrioClock(EPOCH)
    service = DefragService(policy=defrag_policy(old), link=FakePool(clock, []), clock=clock)
    daemon = DefragDaemon(config=old, service=service)
    reload_config(daemon, new)
    assert service.policy.name == "one"
    assert (service.policy.interval, service.policy.rank) == (60, "Cpus")
    assert daemon.config.name == "one"


# ----------------------------------------------------------------------- command line


def test_status_rendering() -> None:
    ad = {
        "Name": "defrag-main",
        "DrainReason": "Defrag main",
        "LastPollTime": int(EPOCH) - 5,
        "MachinesDraining": 1,
        "MachinesDrainingPeak": 2,
        "DrainSuccesses": 3,
        "RecentDrainSuccesses": 1,
        "AvgDrainingBadput": 0.0123,
        "RecentDrainsList": [
            {"when": int(EPOCH), "who": "n1", "what": "graceful", "result": "success"}
        ],
    }
    text = render_stats(ad, now=EPOCH)
    assert "defrag-main: drains with reason 'Defrag main'" in text
    assert "(5 s ago)" in text
    assert "machines draining   1      peak 2" in text
    assert "drains started      3      last hour 1" in text
    assert "1.23 % of the pool's core time" in text
    assert "n1  graceful  success" in text


@pytest.mark.parametrize(
    ("host", "url"),
    [("h", "http://h:9623"), ("https://h/p", "https://h:9623/p"), ("h:80", "h:80"),
     ("http://[::1]", "http://[::1]:9623")],
)  # fmt: skip
def test_status_host_gets_the_defrag_port(host: str, url: str) -> None:
    assert with_default_port(host) == url


def test_status_without_a_daemon_exits_3(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["defrag", "status", "--socket", str(tmp_path / "no.sock")])
    assert result.exit_code == 3
    assert "defrag.unreachable: cannot reach the defrag daemon" in result.output


def test_status_refuses_long_with_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["defrag", "status", "--socket", str(tmp_path / "s"), "--json", "-l"]
    )
    assert result.exit_code == 2


async def test_the_draining_start_expression_goes_with_every_drain(
    autojump_clock: trio.testing.MockClock,
) -> None:
    machines = [FakeMachine(name="a", badput=100, drain_time=1500)]
    async with running(machines, draining_start_expr="TARGET.RequestCpus <= 2") as (_, pool):
        await trio.sleep(601)
    assert pool.commits() == [(0.0, "a")]
    assert [h.get("start") for h in machines[0].history] == ["TARGET.RequestCpus <= 2"]


async def test_without_a_draining_start_expression_drains_admit_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    machines = [FakeMachine(name="a", badput=100, drain_time=1500)]
    async with running(machines) as (_, pool):
        await trio.sleep(601)
    assert pool.commits() == [(0.0, "a")]
    assert "start" not in machines[0].history[0]
