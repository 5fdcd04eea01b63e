"""An in-memory world around a :class:`slots.Machine`: jobs that react to signals.

The driver plays the shell: it carries out the model's actions, delivers job exits
at the instants the fake jobs choose, and wakes the model exactly at
:meth:`Machine.next_wakeup`. Every signal is logged with the instant it was sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slots import (
    Action,
    CompletionAction,
    JobSpec,
    Machine,
    MachinePolicy,
    Resources,
    SignalJob,
)


@dataclass
class FakeJob:
    """How a job reacts: it ends on its own after ``length`` seconds of run (or never),
    and exits ``term_delay`` seconds after its soft-kill signal (``None``: ignores it)."""

    length: float | None = None
    term_delay: float | None = 0.0
    exit_at: float | None = None


@dataclass
class World:
    machine: Machine
    now: float
    jobs: dict[str, FakeJob] = field(default_factory=dict)
    signals: list[tuple[float, str, str]] = field(default_factory=list)
    exits: list[tuple[float, str]] = field(default_factory=list)
    completions: list[tuple[float, CompletionAction]] = field(default_factory=list)

    @classmethod
    def make(
        cls,
        *,
        now: float = 1_000_000.0,
        cpus: int = 8,
        memory: int = 16384,
        policy: MachinePolicy | None = None,
    ) -> World:
        machine = Machine(
            host="node1.example.org",
            total=Resources(cpus=cpus, memory=memory, disk=10_000_000),
            policy=policy or MachinePolicy(max_job_retirement_time=3600),
            now=now,
            address="127.0.0.1:9621",
        )
        return cls(machine=machine, now=now)

    def claim(
        self,
        *,
        cpus: int = 1,
        retirement: int | None = None,
        vacate: int | None = None,
        length: float | None = None,
        term_delay: float | None = 0.0,
        started_ago: float = 0.0,
        owner: str = "alice",
    ) -> str:
        info, actions = self.machine.claim(
            self.now,
            resources=Resources(cpus=cpus, memory=100),
            spec=JobSpec(
                owner=owner, max_job_retirement_time=retirement, job_max_vacate_time=vacate
            ),
            started_at=self.now - started_ago,
        )
        job = FakeJob(length=length, term_delay=term_delay)
        if length is not None:
            job.exit_at = self.now + max(0.0, length - started_ago)
        self.jobs[info.claim_id] = job
        self.apply(actions)
        return info.claim_id

    def apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, SignalJob):
                self.signals.append((self.now, action.claim_id, action.signal))
                job = self.jobs.get(action.claim_id)
                if job is None:
                    continue
                if action.signal == "SIGKILL":
                    job.exit_at = self.now
                elif action.signal in ("SIGSTOP", "SIGCONT"):
                    continue  # suspension is not modelled by the fake jobs
                elif job.term_delay is not None:
                    soft_exit = self.now + job.term_delay
                    job.exit_at = soft_exit if job.exit_at is None else min(job.exit_at, soft_exit)
            elif isinstance(action, CompletionAction):
                self.completions.append((self.now, action))

    def next_event(self) -> float | None:
        instants = [j.exit_at for j in self.jobs.values() if j.exit_at is not None]
        wake = self.machine.next_wakeup()
        if wake is not None:
            instants.append(wake)
        return min(instants) if instants else None

    def run_until(self, until: float) -> None:
        """Deliver every exit and wake-up up to ``until``, in time order."""
        while True:
            at = self.next_event()
            if at is None or at > until:
                break
            self.now = max(self.now, at)
            for claim_id, job in list(self.jobs.items()):
                if job.exit_at is not None and job.exit_at <= self.now:
                    del self.jobs[claim_id]
                    self.exits.append((self.now, claim_id))
                    self.apply(self.machine.job_exited(self.now, claim_id))
            self.apply(self.machine.tick(self.now))
        self.now = max(self.now, until)
        self.apply(self.machine.tick(self.now))

    def signals_for(self, claim_id: str) -> list[tuple[float, str]]:
        return [(t, s) for t, c, s in self.signals if c == claim_id]
