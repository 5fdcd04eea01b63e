"""The published ads: attributes, estimates, ClassAd text, and drain_estimates."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slots import (
    EXPECTED_ATTRIBUTES,
    JobSpec,
    Machine,
    MachinePolicy,
    Resources,
    Schedule,
    SuspendPolicy,
    drain_estimates,
    parse_long,
    render_long,
)
from slots._ads import finite_number

from .world import World

T0 = 1_000_000.0

MACHINE_WIDE = {
    "Name", "Machine", "MyAddress", "DaemonStartTime", "MyCurrentTime", "TotalCpus",
    "TotalMemory", "TotalDisk", "TotalGPUs", "Start", "DrainState",
    "TotalMachineDrainingBadput", "TotalMachineDrainingUnclaimedTime",
    "TotalDrainingBadputTime", "TotalDrainingUnclaimedTime", "MaxJobRetirementTime",
    "MachineMaxVacateTime", *EXPECTED_ATTRIBUTES,
}  # fmt: skip
PER_JOB_SLOT = {
    "SlotID", "SlotType", "PartitionableSlot", "Cpus", "Memory", "Disk", "GPUs", "State",
    "Activity", "EnteredCurrentState", "EnteredCurrentActivity", "JobId", "RemoteOwner",
    "JobStart", "TotalJobRunTime", "TotalJobSuspendTime", "MaxJobRetirementTime",
    "RetirementTimeRemaining", "AcceptedWhileDraining", "CpuUsage", "MemoryUsage",
}  # fmt: skip


def busy_world() -> World:
    world = World.make(
        policy=MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=120)
    )
    world.claim(cpus=2, started_ago=600)
    world.claim(cpus=1, retirement=600, vacate=300, started_ago=100)
    world.claim(cpus=3, started_ago=4000, owner="bob")
    return world


def test_machine_and_slot_ads_carry_the_documented_attributes() -> None:
    world = busy_world()
    ad = world.machine.ad(T0)
    assert MACHINE_WIDE.issubset(ad["machine"])
    pslot, *dynamic = ad["slots"]
    assert MACHINE_WIDE.issubset(pslot)
    assert (pslot["SlotType"], pslot["PartitionableSlot"], pslot["Cpus"]) == (
        "Partitionable",
        True,
        2,
    )
    for slot in dynamic:
        assert (MACHINE_WIDE | PER_JOB_SLOT).issubset(slot)
        assert slot["SlotType"] == "Dynamic"
    second = dynamic[1]
    assert second["MaxJobRetirementTime"] == 600  # the job's effective value
    assert second["RetirementTimeRemaining"] == 500
    assert second["JobMaxVacateTime"] == 300
    assert "JobMaxVacateTime" not in dynamic[0]  # the job set none
    assert "Draining" not in ad["machine"]


def test_published_estimates() -> None:
    ad = busy_world().machine.ad(T0)["machine"]
    # Job A: R 3000, V 120 → G 3000. Job B: MJRT 600, R 500, V = 300 → G 500.
    # Job C: R 0, V 120 → G 120.
    assert ad["ExpectedMachineGracefulDrainingCompletion"] == T0 + 3000
    assert ad["ExpectedMachineGracefulDrainingBadput"] == 2 * (600 + 3000) + (100 + 500) + 3 * (
        4000 + 120
    )
    assert ad["ExpectedMachineQuickDrainingCompletion"] == T0 + 300
    assert ad["ExpectedMachineQuickDrainingBadput"] == 2 * 720 + 400 + 3 * 4120
    assert ad["ExpectedMachineFastDrainingCompletion"] == T0
    assert ad["ExpectedMachineFastDrainingBadput"] == 2 * 600 + 100 + 3 * 4000


def test_idle_completion_is_sticky() -> None:
    world = World.make()
    assert world.machine.ad(T0 + 50)["machine"]["ExpectedMachineGracefulDrainingCompletion"] == T0
    job = world.claim()
    world.now = T0 + 100
    world.apply(world.machine.job_exited(world.now, job))
    for later in (T0 + 100, T0 + 500, T0 + 9999):
        ad = world.machine.ad(later)["machine"]
        assert ad["ExpectedMachineGracefulDrainingCompletion"] == T0 + 100
        assert ad["ExpectedMachineFastDrainingCompletion"] == T0 + 100
        assert ad["ExpectedMachineQuickDrainingBadput"] == 0


def test_values_are_clamped() -> None:
    world = World.make(policy=MachinePolicy(max_job_retirement_time=10**12))
    world.claim(cpus=8)
    ad = world.machine.ad(T0)["machine"]
    assert ad["ExpectedMachineGracefulDrainingCompletion"] == 2147483647
    assert ad["ExpectedMachineGracefulDrainingBadput"] == 2147483647


def test_classad_text_reads_back_unchanged_with_the_official_parser() -> None:
    world = busy_world()
    world.machine.set_maintenance("DRAINING", {"Start": 1_000_600, "Duration": 3600})
    world.machine.start_draining(
        T0, schedule=Schedule.GRACEFUL, reason='say "hi" \\ there', commit=True
    )
    ad = world.machine.ad(T0 + 10)
    ads = [ad["machine"], *ad["slots"]]
    assert parse_long(render_long(ads)) == ads


def test_render_long_is_condor_status_long_format() -> None:
    text = render_long([{"A": 1, "B": "x", "C": True, "D": None}, {"A": 2}])
    assert text == 'A = 1\nB = "x"\nC = true\n\nA = 2\n'


@pytest.mark.parametrize("elapsed", [0.0, 0.4, 0.99])
def test_drain_estimates_agrees_with_the_model_at_the_same_instant(elapsed: float) -> None:
    world = busy_world()
    world.machine.start_draining(T0, schedule=Schedule.GRACEFUL, deadline=2000, commit=True)
    now = T0 + 77 + elapsed
    ad = world.machine.ad(now)
    expected = {k: ad["machine"][k] for k in EXPECTED_ATTRIBUTES}
    assert drain_estimates(ad["slots"], now) == expected


def test_drain_estimates_brings_stale_ads_up_to_now() -> None:
    world = busy_world()
    stale = world.machine.ad(T0)["slots"]
    later = T0 + 250
    fresh = world.machine.ad(later)["machine"]
    assert drain_estimates(stale, later) == {k: fresh[k] for k in EXPECTED_ATTRIBUTES}


def test_drain_estimates_counts_down_vacating_and_freezes_suspended() -> None:
    world = World.make(
        policy=MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=300)
    )
    vacating = world.claim(cpus=1, started_ago=100)
    suspended = world.claim(cpus=1, started_ago=100)
    world.apply(world.machine.release(T0, vacating))
    world.apply(world.machine.suspend(T0, suspended))
    stale = world.machine.ad(T0)["slots"]
    later = T0 + 100
    fresh = world.machine.ad(later)["machine"]
    assert drain_estimates(stale, later) == {k: fresh[k] for k in EXPECTED_ATTRIBUTES}
    assert fresh["ExpectedMachineQuickDrainingCompletion"] == later + 300  # the suspended one
    assert fresh["ExpectedMachineGracefulDrainingCompletion"] == later + 3500


def test_drain_estimates_with_previous_for_idle_machines() -> None:
    idle = [{"SlotType": "Partitionable", "State": "Unclaimed", "Activity": "Idle", "Cpus": 8}]
    previous = dict.fromkeys(EXPECTED_ATTRIBUTES, 500)
    out = drain_estimates(idle, 1000.0, previous)
    assert out["ExpectedMachineGracefulDrainingCompletion"] == 500
    assert out["ExpectedMachineGracefulDrainingBadput"] == 0
    assert drain_estimates(idle, 1000.0)["ExpectedMachineQuickDrainingCompletion"] == 1000


def test_suspend_policy_is_published_and_used() -> None:
    machine = Machine(
        host="h",
        total=Resources(cpus=2),
        policy=MachinePolicy(max_job_retirement_time=1000, suspend_policy=SuspendPolicy.EVICT),
        now=T0,
    )
    info, _ = machine.claim(T0, resources=Resources(cpus=1), spec=JobSpec())
    machine.suspend(T0, info.claim_id)
    ad = machine.ad(T0)
    assert ad["machine"]["DrainSuspendedJobs"] == "evict"
    assert ad["machine"]["ExpectedMachineGracefulDrainingCompletion"] == T0 + 600
    assert drain_estimates(ad["slots"], T0)["ExpectedMachineGracefulDrainingCompletion"] == T0 + 600


def test_slots_does_no_io_and_imports_no_shell_library() -> None:
    code = (
        "import sys, slots\n"
        "m = slots.Machine(host='h', total=slots.Resources(cpus=1), "
        "policy=slots.MachinePolicy(), now=0.0)\n"
        "m.ad(1.0)\n"
        "bad = {'trio', 'psutil', 'pydantic', 'httpx', 'sqlite3', 'socket',\n"
        "       'subprocess', 'asyncio'}\n"
        "print(sorted(bad & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_ad_blockers_agree_with_the_agents_own() -> None:
    from slots import ad_blockers

    world = busy_world()
    ad = world.machine.ad(T0 + 30)
    own = world.machine.drain_estimate(T0 + 30, Schedule.GRACEFUL).blockers
    rows = ad_blockers(ad["slots"], T0 + 30)
    assert [(r["claim_id"], r["evict_at"], r["gone_by"]) for r in rows] == [
        (b.claim_id, b.evict_at, b.gone_by) for b in own
    ]
    later = ad_blockers(ad["slots"], T0 + 90)  # a stale ad brought forward
    assert later[0]["gone_by"] == own[0].gone_by  # running jobs: the same promise


#: A value → whether the arithmetic reads it as a finite number.
FINITE_NUMBERS = {
    "an int": (7, True),
    "a float": (-2.5, True),
    "the largest float": (sys.float_info.max, True),
    "an int as large as the largest float": (int(sys.float_info.max), True),
    "an int past the largest float": (10**309, False),
    "a negative int past it": (-(10**400), False),
    "infinity": (float("inf"), False),
    "not a number": (float("nan"), False),
    "a bool": (True, False),
    "a string": ("1", False),
    "None": (None, False),
}


@pytest.mark.parametrize(("value", "finite"), FINITE_NUMBERS.values(), ids=FINITE_NUMBERS.keys())
def test_finite_number(value: object, finite: bool) -> None:
    assert finite_number(value) is finite
