"""A previous life without its state: the evidence found, and the machine recovered from it.

The process table is not involved here (no job runs in the temporary directories); the
found jobs are given, as :func:`look_for_previous_life` would report them. The real
processes are in ``tests/integration/test_startup_safety.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.agent._recovery import (
    FoundJob,
    PreviousLife,
    look_for_previous_life,
    recovered_machine,
)
from slots import Activity, MachinePolicy, Resources

NOW = 1_800_000_000.0
TOTAL = Resources(cpus=8, memory=16000, disk=1000, gpus=1)
POLICY = MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=60, start="false")


def record(action: str, request_id: str | None, result: str = "ok") -> str:
    return json.dumps({"action": action, "request_id": request_id, "result": result})


def test_nothing_on_disk_is_no_previous_life(tmp_path: Path) -> None:
    life = look_for_previous_life(execute_dir=tmp_path / "execute", audit_log=tmp_path / "a.log")
    assert not life.found
    (tmp_path / "execute").mkdir()
    (tmp_path / "a.log").write_text("")
    assert not look_for_previous_life(
        execute_dir=tmp_path / "execute", audit_log=tmp_path / "a.log"
    ).found


def test_the_evidence_of_job_directories_and_the_audit_log(tmp_path: Path) -> None:
    execute = tmp_path / "execute"
    for name in ("slot1_2", "slot1_7", "slot1_x", "slot1_0"):
        (execute / name).mkdir(parents=True)
    (execute / "slot1_9").write_text("a file, not a job directory")
    audit = tmp_path / "audit.log"
    audit.write_text(
        "\n".join(
            [
                record("drain.start", "3"),
                record("drain.commit", "99", result="drain.no_such_request"),
                record("drain.cancel", "3"),
                record("claim.create", "5"),
                record("claim.create", "6"),
                record("claim.suspend", "6"),
                record("claim.release", "abc"),
                record("claim.create", None, result="resources.insufficient"),
                "not a record",
                "",
            ]
        )
    )
    life = look_for_previous_life(execute_dir=execute, audit_log=audit)
    assert life.found
    assert life.slots == (2, 7)
    assert life.jobs == ()
    assert (life.audit_records, life.last_request, life.last_claim) == (9, 3, 6)
    assert (life.created, life.suspended) == (frozenset({5, 6}), frozenset({6}))
    assert (life.next_request, life.next_slot) == (4, 8)
    assert life.summary() == (
        f"2 job directories in {execute} and 9 records in {audit}, last drain request 3"
    )


def job(slot: int, *, age: float = 100.0, stopped: bool = False) -> FoundJob:
    return FoundJob(
        slot=slot,
        pid=10_000 + slot,
        start_time=NOW - age,
        owner="alice",
        argv=("sim", str(slot)),
        stopped=stopped,
    )


def life_with(
    *jobs: FoundJob, created: set[int], suspended: frozenset[int] = frozenset()
) -> PreviousLife:
    return PreviousLife(
        execute_dir=Path("/srv/execute"),
        audit_log=Path("/srv/audit.log"),
        slots=(1, *sorted(j.slot for j in jobs)),
        jobs=jobs,
        audit_records=12,
        last_request=4,
        last_claim=9,
        created=frozenset(created),
        suspended=suspended,
    )


def test_recover_claims_each_running_job_under_its_old_id(tmp_path: Path) -> None:
    life = life_with(
        job(3), job(5, age=50), job(8, stopped=True), created={3, 5, 8}, suspended=frozenset({5})
    )
    machine, processes = recovered_machine(
        life, how="recover", host="n1", ip="10.0.0.1", total=TOTAL, policy=POLICY, now=NOW
    )
    claims = {c.claim_id: c for c in machine.claims(NOW)}
    assert list(claims) == ["3", "5", "8"]
    # An equal share of the machine each, the first ones taking the remainders.
    assert [c.resources for c in claims.values()] == [
        Resources(cpus=3, memory=5334, disk=334, gpus=1),
        Resources(cpus=3, memory=5333, disk=333, gpus=0),
        Resources(cpus=2, memory=5333, disk=333, gpus=0),
    ]
    # Whole life in the audit log and never suspended: the run time is the process's age.
    assert claims["3"].run == pytest.approx(100.0)
    # Suspended once (5), or stopped now (8): counted from now, the promise kept whole.
    assert (claims["5"].run, claims["8"].run) == (0.0, 0.0)
    assert claims["8"].activity is Activity.SUSPENDED
    assert {c.spec.owner for c in claims.values()} == {"alice"}
    assert {c.spec.max_job_retirement_time for c in claims.values()} == {None}
    # Admitted whatever START says; the machine keeps its own policy.
    assert machine.policy == POLICY
    assert (machine.next_request_id, machine.next_slot_number) == (5, 10)
    assert {k: (p.pid, p.pgid, p.start_time) for k, p in processes.items()} == {
        "3": (10_003, 10_003, NOW - 100),
        "5": (10_005, 10_005, NOW - 50),
        "8": (10_008, 10_008, NOW - 100),
    }
    assert processes["5"].execute_dir == "/srv/execute/slot1_5"


def test_a_claim_the_audit_log_does_not_hold_from_its_start_runs_from_now() -> None:
    machine, _ = recovered_machine(
        life_with(job(3), created=set()),
        how="recover",
        host="n1",
        ip="10.0.0.1",
        total=TOTAL,
        policy=POLICY,
        now=NOW,
    )
    (claim,) = machine.claims(NOW)
    assert claim.run == 0.0


def test_no_more_claims_than_cpus() -> None:
    jobs = [job(n) for n in range(2, 12)]
    machine, processes = recovered_machine(
        life_with(*jobs, created=set()),
        how="recover",
        host="n1",
        ip="10.0.0.1",
        total=TOTAL,
        policy=POLICY,
        now=NOW,
    )
    assert [c.claim_id for c in machine.claims(NOW)] == [str(n) for n in range(2, 10)]
    assert len(processes) == 8
    assert machine.next_slot_number == 12


def test_fresh_claims_nothing_and_the_ids_continue() -> None:
    machine, processes = recovered_machine(
        life_with(job(3), job(5), created={3, 5}),
        how="fresh",
        host="n1",
        ip="10.0.0.1",
        total=TOTAL,
        policy=POLICY,
        now=NOW,
    )
    assert machine.claims(NOW) == []
    assert processes == {}
    assert (machine.next_request_id, machine.next_slot_number) == (5, 10)
    assert machine.free() == TOTAL
