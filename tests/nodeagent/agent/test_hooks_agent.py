"""The agent running completion hooks and health checks, on virtual time with fakes.

Jobs are :class:`~nodeagent.testing.FakeRunner`'s; hooks and health checks are
:class:`FakeProgram` processes that end with a chosen exit status a chosen time after
their program is let go (:meth:`FakeProgram.start`), or ignore SIGTERM. The store is a
real SQLite store that can be told to fail, as a full disk does.
"""

from __future__ import annotations

import itertools
import json
import signal
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._audit import AuditLog
from nodeagent._clock import TrioClock
from nodeagent._store import StoreError
from nodeagent.agent._agent import Agent, ClaimRequest
from nodeagent.agent._hooks import (
    KILL_GRACE,
    OUTPUT_FILE_LIMIT,
    REAPER_SLACK,
    HealthSpec,
    HookSpec,
)
from nodeagent.agent._metrics import AgentMetrics
from nodeagent.agent._processes import (
    LaunchFailed,
    LaunchSpec,
    NoSuchProcess,
    ProcessIdentity,
    Reaped,
)
from nodeagent.agent._store import ProcessRecord, StateStore, Store
from nodeagent.testing import FakeBehaviour, FakeRunner
from slots import (
    DrainState,
    HealthPolicy,
    HookRunning,
    JobSpec,
    Machine,
    MachinePolicy,
    OnCompletion,
    Resources,
    Schedule,
)

EPOCH = 1_800_000_000.0


@dataclass(eq=False)
class FakeProgram:
    """A hook or health check: runs ``length`` seconds once let go, then exits ``status``;
    SIGTERM ends it at once unless ``ignores_term``; SIGKILL always."""

    identity: ProcessIdentity
    spec: LaunchSpec
    length: float
    status: int
    ignores_term: bool
    nursery: trio.Nursery
    on_start: Any = None
    started_at: float | None = None
    signals: list[tuple[float, str]] = field(default_factory=list)
    returncode: int | None = None
    _done: trio.Event = field(default_factory=trio.Event)

    def start(self) -> None:
        if self.on_start is not None:
            self.on_start(self)
        self.started_at = trio.current_time()

        async def run() -> None:
            await trio.sleep(self.length)
            self._exit(self.status)

        self.nursery.start_soon(run)

    def _exit(self, code: int) -> None:
        if not self._done.is_set():
            self.returncode = code
            self._done.set()

    async def wait(self) -> int | None:
        await self._done.wait()
        return self.returncode

    def exited(self) -> bool:
        return self._done.is_set()

    def signal_group(self, sig: signal.Signals) -> None:
        if self.exited():
            return
        self.signals.append((trio.current_time(), sig.name))
        if sig is signal.SIGKILL or (sig is signal.SIGTERM and not self.ignores_term):
            self._exit(-int(sig))


class Runner(FakeRunner):
    """Jobs as :class:`FakeRunner` runs them; ``hook-*`` and ``health`` programs as
    :class:`FakeProgram`, shaped by ``programs[argv[0]]`` = (length, status, ignores
    TERM)."""

    def __init__(self, clock: TrioClock) -> None:
        super().__init__(lambda spec: FakeBehaviour(length=None, term_delay=0.0), clock=clock)
        self.programs: dict[str, tuple[float, int, bool]] = {}
        self.launches: list[FakeProgram] = []
        self.adoptable: dict[int, FakeProgram] = {}
        self.on_start: Any = None
        self.missing: set[str] = set()
        self._program_pids = itertools.count(20_000)
        self._programs_nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._programs_nursery = nursery
            await nursery.start(super().run)
            task_status.started()

    async def launch(self, spec: LaunchSpec) -> Any:
        name = spec.argv[0]
        if name not in self.programs and name not in self.missing:
            return await super().launch(spec)
        await trio.lowlevel.checkpoint()
        if name in self.missing:
            raise LaunchFailed(f"cannot start {name!r}: No such file or directory")
        length, status, ignores = self.programs[name]
        pid = next(self._program_pids)
        assert self._programs_nursery is not None
        proc = FakeProgram(
            identity=ProcessIdentity(pid=pid, start_time=EPOCH, pgid=pid),
            spec=spec,
            length=length,
            status=status,
            ignores_term=ignores,
            nursery=self._programs_nursery,
            on_start=self.on_start,
        )
        if not spec.held:
            proc.start()
        self.launches.append(proc)
        return proc

    async def adopt(
        self,
        pid: int,
        *,
        start_time: float | None = None,
        boot_start: float | None = None,
        boot_id: str | None = None,
    ) -> Any:
        if pid in self.adoptable:
            await trio.lowlevel.checkpoint()
            return self.adoptable[pid]
        if pid >= 20_000:
            await trio.lowlevel.checkpoint()
            raise NoSuchProcess(f"no process {pid}")
        return await super().adopt(
            pid, start_time=start_time, boot_start=boot_start, boot_id=boot_id
        )


class FailingStore:
    """A :class:`Store` that refuses to write while ``failing`` is set (a full disk)."""

    def __init__(self, path: Path) -> None:
        self.store = Store(path)
        self.failing = False

    def save(self, machine: dict[str, Any], processes: Mapping[str, ProcessRecord]) -> None:
        if self.failing:
            raise StoreError("database or disk is full")
        self.store.save(machine, processes)

    def saved_state(self) -> str | None:
        loaded = self.store.load()
        assert loaded is not None
        request = loaded[0]["request"]
        return None if request is None else str(request["state"])


@dataclass
class Rig:
    agent: Agent
    runner: Runner
    store: FailingStore
    audit_path: Path
    t0: float

    def audit(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.audit_path.read_text().splitlines()]

    def ad(self) -> dict[str, Any]:
        machine: dict[str, Any] = self.agent.ad()["machine"]
        return machine

    def hooks(self) -> list[FakeProgram]:
        return [p for p in self.runner.launches if p.spec.argv[0].startswith("hook")]

    def checks(self) -> list[FakeProgram]:
        return [p for p in self.runner.launches if p.spec.argv[0] == "health"]


HOOKS = {
    "reboot": HookSpec(
        name="reboot",
        command=("hook-reboot", "--now"),
        timeout=600,
        reboots=True,
        environment={"SITE": "lab"},
    ),
    "broken": HookSpec(name="broken", command=("hook-broken",), timeout=60),
    "stuck": HookSpec(name="stuck", command=("hook-stuck",), timeout=60),
    "gone": HookSpec(name="gone", command=("hook-gone",), timeout=60),
}
HEALTH = HealthSpec(command=("health",), timeout=30, interval=20, passes=2)


def policy(health: HealthSpec | None) -> MachinePolicy:
    return MachinePolicy(
        hooks=frozenset(HOOKS),
        health=None
        if health is None
        else HealthPolicy(passes=health.passes, interval=health.interval),
    )


@asynccontextmanager
async def rig(
    tmp_path: Path,
    *,
    health: HealthSpec | None = HEALTH,
    machine: Machine | None = None,
    runner: Runner | None = None,
    boot: str = "boot-1",
) -> AsyncIterator[Rig]:
    clock = TrioClock(EPOCH)
    runner = runner or Runner(clock)
    runner.programs.setdefault("hook-reboot", (30.0, 0, False))
    runner.programs.setdefault("hook-broken", (5.0, 3, False))
    runner.programs.setdefault("hook-stuck", (10_000.0, 0, True))
    runner.missing.add("hook-gone")
    runner.programs.setdefault("health", (2.0, 0, False))
    machine = machine or Machine(
        host="vnode", total=Resources(cpus=4, memory=8192), policy=policy(health), now=clock.now()
    )
    store = FailingStore(tmp_path / "agent.db")
    seam: StateStore = store
    audit_path = tmp_path / "audit.log"
    with AuditLog(audit_path) as audit:
        agent = Agent(
            machine=machine,
            store=seam,
            runner=runner,
            clock=clock,
            execute_dir=tmp_path / "execute",
            usage_interval=0,
            hooks=HOOKS,
            health=health,
            hook_dir=tmp_path / "hooks",
            boot_id=lambda: boot,
            audit=audit,
        )
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(runner.run)
                await nursery.start(agent.run)
                yield Rig(
                    agent=agent,
                    runner=runner,
                    store=store,
                    audit_path=audit_path,
                    t0=trio.current_time(),
                )
                nursery.cancel_scope.cancel()
        finally:
            store.store.close()


async def claim(r: Rig) -> str:
    info = await r.agent.create_claim(
        ClaimRequest(resources=Resources(cpus=1), spec=JobSpec(), argv=("job",))
    )
    return info.claim_id


def drain(r: Rig, hook: str, *, schedule: Schedule = Schedule.QUICK) -> str:
    request, _ = r.agent.start_draining(
        schedule=schedule, reason="kernel 6.9", on_completion=OnCompletion.HOOK, hook=hook,
        deadline=None, start=None, check=None, commit=True, ttl=None, requested_by="alice",
    )  # fmt: skip
    return request.id


async def test_the_hook_runs_once_after_the_last_job_is_gone_and_its_start_is_written_first(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        states_at_start: list[str | None] = []
        r.runner.on_start = lambda proc: states_at_start.append(r.store.saved_state())
        claim_id = await claim(r)
        job = next(iter(r.runner.processes.values()))
        job.behaviour = FakeBehaviour(length=None, term_delay=50.0)  # vacates in 50 s
        drain(r, "reboot")
        await trio.sleep(49)
        assert r.hooks() == []  # never before the last job is gone
        await trio.sleep(2)
        assert r.agent.machine.claims(r.agent.now()) == []
        [hook] = r.hooks()
        assert states_at_start == ["hook_running"]  # durable before the program ran
        assert hook.started_at == pytest.approx(r.t0 + 50)
        spec = hook.spec
        assert (spec.argv, spec.held) == (("hook-reboot", "--now"), True)
        assert spec.execute_dir == tmp_path / "hooks" / "1-reboot"
        assert spec.reaped == Reaped(
            output=tmp_path / "hooks" / "1-reboot" / "output",
            output_limit=OUTPUT_FILE_LIMIT,
            grace=KILL_GRACE,
        )
        env = dict(spec.env or {})
        assert {k: env[k] for k in env if k.startswith("NODEAGENT_") or k == "SITE"} == {
            "NODEAGENT_HOOK": "reboot",
            "NODEAGENT_NODE": "vnode",
            "NODEAGENT_DRAIN_REQUEST_ID": "1",
            "NODEAGENT_DRAIN_REASON": "kernel 6.9",
            "NODEAGENT_DRAIN_SCHEDULE": "quick",
            "SITE": "lab",
        }
        ad = r.ad()
        assert (ad["DrainHookState"], ad["DrainState"], ad["Start"]) == (
            "running",
            "drained",
            False,
        )
        assert ad["DrainHookStartTime"] == int(EPOCH + 50)
        await trio.sleep(30)
        ad = r.ad()
        assert (ad["DrainHookState"], ad["DrainHookExitStatus"]) == ("succeeded", 0)
        assert ad["DrainState"] == "none"
        assert len(r.hooks()) == 1  # exactly once
        assert r.agent.counts.hook_runs == {"reboot": 1}
        del claim_id


async def test_a_failing_hook_leaves_the_node_closed_and_is_audited(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        drain(r, "broken")
        await trio.sleep(10)
        assert r.agent.machine.drain_state is DrainState.HOOK_FAILED
        ad = r.ad()
        assert (ad["Start"], ad["DrainHookState"], ad["DrainHookMessage"]) == (
            False,
            "failed",
            "exit status 3",
        )
        assert r.checks() == []  # no health check while the drain holds the node
        records = [(a["action"], a["result"], a["request_id"]) for a in r.audit()]
        assert records == [("hook.start", "ok", "1"), ("hook.end", "hook.failed", "1")]
        end = r.audit()[-1]["details"]
        assert (end["hook"], end["exit_status"], end["message"]) == ("broken", 3, "exit status 3")
        assert r.agent.counts.hook_failures == {"broken": 1}
        assert r.store.saved_state() == "hook_failed"


async def test_a_hook_past_its_timeout_gets_sigterm_then_sigkill(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The reaper SIGKILLs what is left KILL_GRACE after the SIGTERM; the agent SIGKILLs
    # the process group itself only should the reaper not have ended REAPER_SLACK later.
    async with rig(tmp_path) as r:
        drain(r, "stuck")
        await trio.sleep(60 + KILL_GRACE + REAPER_SLACK + 1)
        [hook] = r.hooks()
        assert [(round(t - r.t0, 6), s) for t, s in hook.signals] == [
            (60.0, "SIGTERM"),
            (60.0 + KILL_GRACE + REAPER_SLACK, "SIGKILL"),
        ]
        ad = r.ad()
        assert ad["DrainHookMessage"] == "timed out after 60 s (SIGTERM, then SIGKILL)"
        assert ad["DrainHookExitStatus"] == -9


async def test_a_hook_whose_start_cannot_be_written_does_not_start(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        drain(r, "reboot")  # an empty node: the hook is due at commit, and starts soon
        r.store.failing = True
        await trio.sleep(5)
        [hook] = r.hooks()
        assert hook.started_at is None  # held, and killed unrun
        assert [(round(t - r.t0, 6), s) for t, s in hook.signals] == [(0.0, "SIGKILL")]
        ad = r.ad()
        assert ad["DrainHookState"] == "failed"
        assert ad["DrainHookMessage"].startswith(
            "not started: its start could not be written (database or disk is full)"
        )
        assert ad["Start"] is False
        r.store.failing = False
        await trio.sleep(40)  # the persist service writes the failure once it can
        assert r.store.saved_state() == "hook_failed"
        assert len(r.hooks()) == 1


async def test_a_hook_that_cannot_be_launched_fails_and_is_counted(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        drain(r, "gone")
        await trio.sleep(1)
        ad = r.ad()
        assert (
            ad["DrainHookMessage"]
            == "not started: cannot start 'hook-gone': No such file or directory"
        )
        assert r.agent.counts.hook_failures == {"gone": 1}
        assert [a["action"] for a in r.audit()] == ["hook.end"]


async def test_a_hook_removed_by_a_reload_before_it_is_due_cannot_start(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        await claim(r)
        next(iter(r.runner.processes.values())).behaviour = FakeBehaviour(term_delay=100.0)
        drain(r, "reboot")
        r.agent.reload_hooks({}, HEALTH)
        r.agent.reload_policy(MachinePolicy(health=HealthPolicy(passes=2, interval=20)))
        await trio.sleep(101)
        assert r.hooks() == []
        assert r.ad()["DrainHookMessage"] == "not started: no hook named 'reboot' is configured"


async def test_a_running_hook_cannot_be_cancelled(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        drain(r, "reboot")
        await trio.sleep(1)
        with pytest.raises(HookRunning):
            r.agent.cancel_draining(None)
        assert r.agent.machine.drain_state is DrainState.HOOK_RUNNING


async def test_health_checks_keep_the_node_closed_until_enough_pass_in_a_row(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        r.runner.programs["health"] = (2.0, 1, False)  # failing
        drain(r, "reboot")
        await trio.sleep(30.1)  # the hook ends at +30; the first check starts then
        assert r.agent.machine.request is None
        await trio.sleep(2.4)
        ad = r.ad()
        assert (ad["HealthState"], ad["HealthFailures"], ad["Start"]) == ("failing", 1, False)
        assert ad["HealthMessage"] == "exit status 1"
        assert ad["HealthNextCheck"] == int(EPOCH + 52)
        await trio.sleep(22)  # the retry at +52 fails too
        assert r.ad()["HealthFailures"] == 2
        r.runner.programs["health"] = (2.0, 0, False)  # healthy again
        await trio.sleep(22)  # +74 → +76 passes (1 of 2)
        ad = r.ad()
        assert (ad["HealthState"], ad["HealthPasses"], ad["Start"]) == ("pending", 1, False)
        await trio.sleep(22)  # +96 → +98 passes (2 of 2)
        ad = r.ad()
        assert (ad["HealthState"], ad["Start"]) == ("passing", True)
        starts = [round(p.started_at - r.t0, 6) for p in r.checks() if p.started_at is not None]
        assert starts == [30.0, 52.0, 74.0, 96.0]
        assert (r.agent.counts.health_checks, r.agent.counts.health_failures) == (4, 2)
        actions = [a["action"] for a in r.audit() if a["action"].startswith("health")]
        assert actions == ["health.failing", "health.pending", "health.passing"]


async def test_cancelling_a_failed_hook_runs_the_health_check_before_service(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        drain(r, "broken")
        await trio.sleep(10)
        r.agent.cancel_draining(None)
        assert r.agent.machine.accepting() is False
        await trio.sleep(2.5)
        assert r.ad()["HealthPasses"] == 1
        await trio.sleep(21)  # the second check runs from +32 to +34
        assert r.agent.machine.accepting() is False
        await trio.sleep(1)
        assert r.agent.machine.accepting() is True


async def test_without_a_health_check_the_node_opens_when_the_hook_ends(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path, health=None) as r:
        drain(r, "reboot")
        await trio.sleep(31)
        assert r.agent.machine.accepting() is True
        assert r.checks() == []


async def test_a_restart_on_the_same_boot_waits_for_the_hook_and_never_runs_it_again(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        drain(r, "reboot")
        await trio.sleep(5)
        [hook] = r.hooks()
        document = r.agent.machine.snapshot()
    # The hook still runs (the daemon died, its process group did not): a new daemon on
    # the same boot waits for it, then records it interrupted, then the health check.
    machine = Machine.restore(
        document,
        host="vnode",
        total=Resources(cpus=4, memory=8192),
        policy=policy(HEALTH),
        now=EPOCH + 5,
    )
    clock = TrioClock(EPOCH + 5)
    runner = Runner(clock)
    runner.adoptable[hook.identity.pid] = hook
    hook._done = trio.Event()
    async with rig(tmp_path / "again", machine=machine, runner=runner) as r2:
        assert r2.hooks() == []
        await trio.sleep(1)
        assert r2.agent.machine.drain_state is DrainState.HOOK_RUNNING
        hook._exit(0)
        await trio.sleep(0.5)
        run = r2.agent.machine.hook_run()
        assert run is not None
        assert run[1].state == "interrupted"
        assert r2.hooks() == []  # never started again
        assert r2.agent.machine.accepting() is False
        await trio.sleep(25)
        assert r2.agent.machine.accepting() is True


async def test_a_restart_on_another_boot_counts_a_reboots_hook_as_succeeded(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        drain(r, "reboot")
        await trio.sleep(5)
        document = r.agent.machine.snapshot()
    machine = Machine.restore(
        document,
        host="vnode",
        total=Resources(cpus=4, memory=8192),
        policy=policy(HEALTH),
        now=EPOCH + 5,
    )
    async with rig(tmp_path / "again", machine=machine, boot="boot-2") as r2:
        await trio.sleep(0.1)
        run = r2.agent.machine.hook_run()
        assert run is not None
        assert (run[1].state, run[1].message) == (
            "succeeded",
            "the machine rebooted during the hook",
        )
        assert r2.hooks() == []
        assert len(r2.checks()) == 1


async def test_the_metrics_count_hook_runs_failures_and_health_checks(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        drain(r, "broken")
        await trio.sleep(10)
        r.agent.cancel_draining(None)
        await trio.sleep(3)
        metrics = AgentMetrics(r.agent.ad, counts=lambda: r.agent.counts)
        text = metrics.render()[0].decode()
        assert 'nodeagent_hook_runs_total{hook="broken"} 1.0' in text
        assert 'nodeagent_hook_failures_total{hook="broken"} 1.0' in text
        assert "nodeagent_health_checks_total 1.0" in text
        assert "nodeagent_health_check_failures_total 0.0" in text
