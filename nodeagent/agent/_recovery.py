"""A previous life without its state: what an empty ``agent.db`` lost, found again.

``agent.db`` holds the drain request, the id counters and the claims with their job
processes. When it is deleted, emptied (0 bytes) or moved aside, the agent would start
as a new machine while the state directory shows that it is not one: job directories in
``execute/`` (``slot1_<n>``, whose jobs may still run) and records in the audit log.
Request ids would restart at 1 and the running jobs would be nobody's.

:func:`look_for_previous_life` gathers that evidence (:class:`PreviousLife`); the daemon
refuses to start on it (:class:`~nodeagent._lifecycle.StateLost`, exit status 8) unless
the operator decided (``nodeagent run --recover`` or ``--fresh``). Either way the ids
continue past every id the previous life used (the highest drain request id and claim
id of the audit log, the highest job directory), so no id is ever used twice.
:func:`recovered_machine` builds the machine to start with:

* ``recover``: each job directory whose job still runs (a process leading its own
  session and process group, whose output or working directory is that directory) is
  claimed again under its old claim id and re-adopted by pid and start time. What only
  ``agent.db`` knew is replaced by what keeps every promise: the job's own
  ``MaxJobRetirementTime`` and ``JobMaxVacateTime`` by the machine's (never lower), its
  run time by the process's age only when the audit log holds the claim's whole life and
  no suspension (otherwise by zero: the job gets its whole retirement again), its
  resources by an equal share of the machine (so nothing new is admitted on top of it),
  its kill signal by SIGTERM, its owner by the process's user. A job found stopped is
  claimed Suspended. Jobs adopted by pid (never run in ``execute/``) are not found.
* ``fresh``: no claims; the jobs still running are left alone.

A drain that was in force is not restored: its deadline and schedule were in
``agent.db`` only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import psutil

from nodeagent.agent._processes import boot_start_of, current_boot_id
from nodeagent.agent._store import ProcessRecord
from slots import JobSpec, Machine, MachinePolicy, Resources

__all__ = ["FoundJob", "PreviousLife", "look_for_previous_life", "recovered_machine"]

_SLOT_DIR = re.compile(r"slot1_([1-9][0-9]*)")
_DECIMAL = re.compile(r"[1-9][0-9]{0,17}")


@dataclass(frozen=True, kw_only=True)
class FoundJob:
    """A job process of a previous life, still running: it leads its own session and
    process group, and its output or working directory is ``execute/slot1_<slot>``."""

    slot: int
    pid: int
    start_time: float
    owner: str
    argv: tuple[str, ...]
    stopped: bool
    boot_start: float | None = None
    boot_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class PreviousLife:
    """What the state directory shows of a previous life (see the module docstring).

    ``slots``: the numbers of the job directories; ``jobs``: their jobs still running;
    ``audit_records``: the audit log's records; ``last_request`` and ``last_claim``: the
    highest drain request id and claim id it names (0: none); ``created``: the claims
    whose ``claim.create`` it holds, ``suspended``: those it shows suspended.
    """

    execute_dir: Path
    audit_log: Path
    slots: tuple[int, ...] = ()
    jobs: tuple[FoundJob, ...] = ()
    audit_records: int = 0
    last_request: int = 0
    last_claim: int = 0
    created: frozenset[int] = field(default_factory=frozenset)
    suspended: frozenset[int] = field(default_factory=frozenset)

    @property
    def found(self) -> bool:
        """Whether there was a previous life at all."""
        return bool(self.slots or self.audit_records)

    @property
    def next_request(self) -> int:
        return self.last_request + 1

    @property
    def next_slot(self) -> int:
        return max((self.last_claim, *self.slots)) + 1

    def summary(self) -> str:
        """One phrase: the job directories, the jobs still running, the audit records."""
        parts = []
        if self.slots:
            running = ""
            if self.jobs:
                pids = ", ".join(str(job.pid) for job in self.jobs[:5])
                more = ", …" if len(self.jobs) > 5 else ""
                running = f", {len(self.jobs)} of their jobs still running (pids {pids}{more})"
            directories = _plural(len(self.slots), "job directory", "job directories")
            parts.append(f"{directories} in {self.execute_dir}{running}")
        if self.audit_records:
            last = f", last drain request {self.last_request}" if self.last_request else ""
            records = _plural(self.audit_records, "record", "records")
            parts.append(f"{records} in {self.audit_log}{last}")
        return " and ".join(parts)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def look_for_previous_life(*, execute_dir: Path, audit_log: Path) -> PreviousLife:
    """The evidence of a previous life in ``execute_dir``, the audit log and the process
    table (reads only; a missing directory or file is no evidence)."""
    slots = sorted(_slot_directories(execute_dir))
    records, last_request, last_claim, created, suspended = _read_audit(audit_log)
    return PreviousLife(
        execute_dir=execute_dir,
        audit_log=audit_log,
        slots=tuple(slots),
        jobs=tuple(_running_jobs(execute_dir, set(slots))) if slots else (),
        audit_records=records,
        last_request=last_request,
        last_claim=last_claim,
        created=frozenset(created),
        suspended=frozenset(suspended),
    )


def recovered_machine(
    life: PreviousLife,
    *,
    how: Literal["recover", "fresh"],
    host: str,
    ip: str,
    total: Resources,
    policy: MachinePolicy,
    now: float,
) -> tuple[Machine, dict[str, ProcessRecord]]:
    """The machine to start with after ``life``, and the job processes to re-adopt.

    Its ids continue past the previous life's; with ``recover`` it holds a claim for
    each job still running (at most one per cpu, the earliest first; see the module
    docstring for what each claim is given).
    """
    jobs = list(life.jobs)[: total.cpus] if how == "recover" else []
    # Claims are carved under their old numbers, whatever START says now (they run
    # already); the machine gets its real policy once they are all in.
    admit_all = dataclasses.replace(policy, start="true")
    machine = Machine(host=host, ip=ip, total=total, policy=admit_all, now=now)
    processes: dict[str, ProcessRecord] = {}
    for job, share in zip(jobs, _shares(total, len(jobs)), strict=True):
        machine = _with_counters(machine, next_slot=job.slot, next_request=1, now=now)
        whole_life = job.slot in life.created and job.slot not in life.suspended
        info, _ = machine.claim(
            now,
            resources=share,
            spec=JobSpec(owner=job.owner),
            started_at=min(job.start_time, now) if whole_life and not job.stopped else None,
        )
        if job.stopped:
            machine.suspend(now, info.claim_id)
        processes[info.claim_id] = ProcessRecord(
            claim_id=info.claim_id,
            pid=job.pid,
            start_time=job.start_time,
            pgid=job.pid,
            argv=job.argv,
            execute_dir=str(life.execute_dir / f"slot1_{info.claim_id}"),
            boot_start=job.boot_start,
            boot_id=job.boot_id,
        )
    restored = _with_counters(
        machine, next_slot=life.next_slot, next_request=life.next_request, now=now
    )
    return Machine.restore(
        restored.snapshot(), host=host, ip=ip, total=total, policy=policy, now=now
    ), processes


def _with_counters(machine: Machine, *, next_slot: int, next_request: int, now: float) -> Machine:
    """``machine`` with its next claim and drain request numbers set (through the
    snapshot, the one way the model takes them)."""
    document = machine.snapshot()
    document["next_slot"] = max(next_slot, machine.next_slot_number)
    document["next_request"] = max(next_request, machine.next_request_id)
    return Machine.restore(
        document,
        host=machine.host,
        ip=machine.ip,
        total=machine.total,
        policy=machine.policy,
        now=now,
    )


def _shares(total: Resources, count: int) -> Iterator[Resources]:
    """``total`` split in ``count`` shares as equal as whole units allow (the first ones
    take the remainders); ``count`` is at most ``total.cpus``."""
    for i in range(count):
        yield Resources(
            cpus=_part(total.cpus, count, i),
            memory=_part(total.memory, count, i),
            disk=_part(total.disk, count, i),
            gpus=_part(total.gpus, count, i),
        )


def _part(amount: int, count: int, index: int) -> int:
    return amount // count + (1 if index < amount % count else 0)


def _slot_directories(execute_dir: Path) -> Iterator[int]:
    with contextlib.suppress(OSError):
        for entry in os.scandir(execute_dir):
            match = _SLOT_DIR.fullmatch(entry.name)
            if match is not None and entry.is_dir(follow_symlinks=False):
                yield int(match.group(1))


def _read_audit(path: Path) -> tuple[int, int, int, set[int], set[int]]:
    """Records, highest drain request id, highest claim id, the claims created and the
    claims suspended, from the accepted requests of the audit log (lines that are not
    records are skipped)."""
    records = last_request = last_claim = 0
    created: set[int] = set()
    suspended: set[int] = set()
    try:
        f = path.open("rb")
    except OSError:
        return records, last_request, last_claim, created, suspended
    with f:
        for line in f:
            if not line.strip():
                continue
            records += 1
            try:
                record = json.loads(line)
                action, result, about = record["action"], record["result"], record["request_id"]
            except (ValueError, TypeError, KeyError):
                continue
            if result != "ok" or not isinstance(about, str) or not _DECIMAL.fullmatch(about):
                continue
            number = int(about)
            if str(action).startswith("drain."):
                last_request = max(last_request, number)
            elif str(action).startswith("claim."):
                last_claim = max(last_claim, number)
                if action == "claim.create":
                    created.add(number)
                elif action == "claim.suspend":
                    suspended.add(number)
    return records, last_request, last_claim, created, suspended


def _running_jobs(execute_dir: Path, slots: set[int]) -> Iterator[FoundJob]:
    """The job still running in each of ``slots``: the earliest-started process that
    leads its own session and group and writes to, or works in, that job directory."""
    try:
        inside = execute_dir.resolve()
    except OSError:
        return
    found: dict[int, FoundJob] = {}
    me = os.getpid()
    for proc in psutil.process_iter():
        pid = proc.pid
        if pid == me:
            continue
        try:
            if os.getpgid(pid) != pid or os.getsid(pid) != pid:
                continue
            slot = _slot_of(pid, inside)
            if slot is None or slot not in slots:
                continue
            with proc.oneshot():
                status = proc.status()
                if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                    continue
                job = FoundJob(
                    slot=slot,
                    pid=pid,
                    start_time=float(proc.create_time()),
                    owner=proc.username(),
                    argv=tuple(proc.cmdline()),
                    stopped=status == psutil.STATUS_STOPPED,
                    boot_start=boot_start_of(pid),
                    boot_id=current_boot_id(),
                )
        except (OSError, psutil.Error):
            continue
        known = found.get(slot)
        if known is None or job.start_time < known.start_time:
            found[slot] = job
    for slot in sorted(found):
        yield found[slot]


def _slot_of(pid: int, execute_dir: Path) -> int | None:
    """The job directory that ``pid``'s stdout, stderr or working directory is in."""
    for link in ("fd/1", "fd/2", "cwd"):
        try:
            target = Path(os.readlink(f"/proc/{pid}/{link}"))
        except OSError:
            continue
        if not target.is_relative_to(execute_dir):
            continue
        parts = target.relative_to(execute_dir).parts
        match = _SLOT_DIR.fullmatch(parts[0]) if parts else None
        if match is not None:
            return int(match.group(1))
    return None
