"""``nodeagent run``: the node agent daemon, on the shared :mod:`nodeagent._lifecycle`.

Services start in order, each reporting readiness: the store and the machine
(restored from the last saved state), the agent (re-adopting the jobs of the
previous run), the Unix socket and TCP listeners, the master link; then
``READY=1``. SIGTERM/SIGINT stop it cleanly: requests in flight are answered, the
state saved and the ad pushed a last time, and jobs keep running (they are re-adopted
by the next start). With ``[shutdown] enabled`` the agent holds logind's delay lock and
drains the node when the machine itself shuts down (:mod:`nodeagent.agent._shutdown`).
SIGHUP reloads the policy, the hooks and the health check, the master link,
``[shutdown] schedule`` and ``metrics_require_auth``; a policy the model refuses, or a hook's
``user`` this agent may not switch to, changes nothing. A drain's
completion action ``exit`` ends the daemon with status 0, ``restart`` with
:data:`RESTART_EXIT_STATUS`, which its unit restarts.

Start-up safety: an ``agent.db`` that cannot be read refuses the start
(:class:`~nodeagent._store.StoreError`, exit status 7); one that holds nothing while the
state directory shows a previous life (:mod:`nodeagent.agent._recovery`) refuses it too
(:class:`~nodeagent._lifecycle.StateLost`, exit status 8), unless the daemon was told
what to do (``lost_state``: ``recover`` or ``fresh``, ``nodeagent run --recover`` or
``--fresh``). Jobs are never touched on the way out.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import trio
from starlette.types import ASGIApp

from nodeagent._clock import Clock, WallClock
from nodeagent._lifecycle import (
    DaemonSpec,
    Listening,
    Opened,
    Program,
    StateLost,
    serve_daemon,
    tls_files,
)
from nodeagent._origin import NotAnOrigin, parse_my_address
from nodeagent._serving._hypercorn import advertised_url
from nodeagent._settings import ConfigChanges, ConfigError
from nodeagent._store import StoreError
from nodeagent.agent._agent import Agent, policy_seconds
from nodeagent.agent._api import build_app
from nodeagent.agent._config import (
    AgentConfig,
    check_hook_users,
    load_agent_config,
    machine_resources,
)
from nodeagent.agent._hooks import health_spec, hook_specs, read_boot_id
from nodeagent.agent._metrics import AgentMetrics
from nodeagent.agent._processes import OsProcessRunner, ProcessRunner
from nodeagent.agent._push import MasterLink
from nodeagent.agent._recovery import look_for_previous_life, recovered_machine
from nodeagent.agent._shutdown import ShutdownWatch
from nodeagent.agent._store import ProcessRecord, Store
from slots import (
    BeforeWindow,
    Machine,
    MachinePolicy,
    OnCompletion,
    Resources,
    Schedule,
    SlotsError,
    SuspendPolicy,
    check_site_attributes,
)

__all__ = [
    "RESTART_EXIT_STATUS",
    "AgentDaemon",
    "LostState",
    "check_config",
    "machine_policy",
    "run_agent",
]

log = logging.getLogger("nodeagent.daemon")

#: Exit status of the ``restart`` completion action (``RestartForceExitStatus=`` in the unit).
RESTART_EXIT_STATUS = 75

LostState = Literal["refuse", "recover", "fresh"]
"""What to do when ``agent.db`` holds nothing but a previous life shows: refuse to start
(the default), ``recover`` its running jobs, or start ``fresh`` without them; ids continue
past the previous life's either way (:mod:`nodeagent.agent._recovery`)."""


def machine_policy(config: AgentConfig) -> MachinePolicy:
    """The model's policy from the ``[policy]`` section (durations in whole seconds), the
    names of the ``[hooks]``, the ``[health]`` check's schedule and the ``[attributes]``.

    Raises :class:`SlotsError` for values the model refuses."""
    policy = config.policy
    health = health_spec(config)
    return MachinePolicy(
        max_job_retirement_time=policy_seconds(policy.max_job_retirement_time),
        machine_max_vacate_time=policy_seconds(policy.machine_max_vacate_time),
        start=policy.start,
        suspend_policy=SuspendPolicy(policy.suspended_jobs_on_drain),
        transaction_ttl=policy.transaction_ttl,
        hooks=frozenset(config.hooks),
        hook_durations=tuple(
            sorted(
                (name, float(hook.expected_duration))
                for name, hook in config.hooks.items()
                if hook.expected_duration is not None
            )
        ),
        health=None if health is None else health.policy,
        attributes=check_site_attributes(config.attributes),
        before_window=BeforeWindow(policy.before_window),
    )


def check_config(config: AgentConfig) -> MachinePolicy:
    """The model's policy for ``config``, checked as a start and a reload need it; raises
    :class:`ConfigError` for a policy the model refuses or a hook user this agent may not
    switch to."""
    check_hook_users(config, os.geteuid())
    try:
        return machine_policy(config)
    except SlotsError as exc:
        raise ConfigError(f"[policy]: {exc.message}") from None


@dataclass(frozen=True, kw_only=True)
class _Parts:
    """What :meth:`AgentDaemon.build` made for one run."""

    agent: Agent
    link: MasterLink
    metrics: AgentMetrics


@dataclass
class AgentDaemon(Program[AgentConfig, Store]):
    """One running agent daemon; :meth:`serve` runs it until stopped.

    ``runner`` and ``clock`` are seams for tests; ``handle_signals`` is off when the
    daemon is embedded in another trio program (signals belong to the main program).
    ``config`` is the running configuration (after a reload: the fixed keys as started,
    the reloadable ones as reloaded). ``lost_state`` decides a start whose store holds
    nothing after a previous life (see :data:`LostState`). ``system_bus`` is the D-Bus
    address of logind's bus (``SYSTEM``: ``DBUS_SYSTEM_BUS_ADDRESS``, else the standard
    socket), a seam for tests.
    """

    config: AgentConfig
    config_path: Path | None = None
    lost_state: LostState = "refuse"
    runner: ProcessRunner | None = None
    clock: Clock = field(default_factory=WallClock)
    handle_signals: bool = True
    system_bus: str = "SYSTEM"
    agent: Agent | None = None
    urls: list[str] = field(default_factory=list)
    exit_status: int = 0
    _stop: trio.Event = field(default_factory=trio.Event)
    _parts: _Parts | None = None

    async def serve(
        self, *, task_status: trio.TaskStatus[AgentDaemon] = trio.TASK_STATUS_IGNORED
    ) -> int:
        """Serve until stopped; returns the exit status (see :data:`RESTART_EXIT_STATUS`)."""
        await serve_daemon(
            self, stop=self._stop, handle_signals=self.handle_signals, task_status=task_status
        )
        return self.exit_status

    # ------------------------------------------------------------------ lifecycle hooks

    def spec(self) -> DaemonSpec:
        config = self.config
        return DaemonSpec(
            name=f"nodeagent {config.hostname}",
            log=log,
            directories=(config.state_dir, config.runtime_dir, config.execute_dir),
            key_file=config.key_file,
            create_key=True,
            audit_log=config.audit_log,
            socket=config.socket,
            runtime_file=config.runtime_dir / "nodeagent.json",
            runtime_info={"host": config.hostname},
            listen=config.listen,
            tls=tls_files(config.tls_cert, config.tls_key),
            read_timeout=config.read_timeout,
            # A reply is never cut off, not even the one whose drain completes with `exit`.
            finish_requests=True,
        )

    def load_config(self) -> AgentConfig:
        return load_agent_config(self.config_path)

    def open_store(self) -> Store:
        return Store(self.config.state_dir / "agent.db")

    def build(self, opened: Opened[Store]) -> ASGIApp:
        """The machine restored from the store (or a new one, or one recovered after a
        previous life), the agent, its API.

        Raises :class:`ConfigError` for a configuration the agent cannot run with (see
        :func:`check_config`), :class:`StoreError` for a saved state it cannot read and
        :class:`StateLost` for a store that holds nothing after a previous life, unless
        ``lost_state`` says what to do.
        """
        config = self.config
        check_config(config)
        machine, processes = self._machine(opened.store)
        agent = Agent(
            machine=machine,
            store=opened.store,
            runner=self.runner or OsProcessRunner(),
            clock=self.clock,
            execute_dir=config.execute_dir,
            processes=processes,
            hooks=hook_specs(config),
            health=health_spec(config),
            hook_dir=config.runtime_dir / "hooks",
            boot_id=lambda: read_boot_id(config.boot_id_file),
            audit=opened.audit,
        )
        metrics = AgentMetrics(
            agent.ad, require_auth=config.metrics_require_auth, counts=lambda: agent.counts
        )
        self.agent = agent
        self._parts = _Parts(
            agent=agent, link=MasterLink(agent, config.master, clock=self.clock), metrics=metrics
        )
        return build_app(agent, key=opened.key, audit=opened.audit, metrics=metrics)

    def _machine(self, store: Store) -> tuple[Machine, dict[str, ProcessRecord]]:
        config = self.config
        found = machine_resources(config)
        total = Resources(
            cpus=found.cpus, memory=found.memory_mib, disk=found.disk_kib, gpus=found.gpus
        )
        policy = machine_policy(config)
        now = self.clock.now()
        saved = store.load()
        if saved is not None:
            document, processes = saved
            machine = _restore(
                document,
                store.path,
                host=config.hostname,
                ip=config.ip,
                total=total,
                policy=policy,
                now=now,
            )
            log.info(
                "restored state: %d claims, drain %s",
                len(machine.claims(now)),
                machine.request.id if machine.request else "none",
            )
            if self.lost_state != "refuse":
                log.info("state found in %s: --%s has nothing to do", store.path, self.lost_state)
            return machine, processes
        life = look_for_previous_life(execute_dir=config.execute_dir, audit_log=config.audit_log)
        if not life.found:
            fresh = Machine(host=config.hostname, ip=config.ip, total=total, policy=policy, now=now)
            return fresh, {}
        if self.lost_state == "refuse":
            raise StateLost(
                f"{store.path} holds no state, yet this node had a previous life: "
                f"{life.summary()}. Refusing to start over with request ids from 1: start once "
                "with `nodeagent run --recover` to re-adopt the jobs still running, or "
                "`--fresh` to start with no claims (those jobs are left alone); the ids "
                "continue past the previous life's either way"
            )
        machine, processes = recovered_machine(
            life,
            how=self.lost_state,
            host=config.hostname,
            ip=config.ip,
            total=total,
            policy=policy,
            now=now,
        )
        # On disk before anything answers: the next start is an ordinary one.
        store.save(machine.snapshot(), processes)
        log.warning(
            "%s held no state after a previous life (%s); started --%s: %d jobs re-adopted "
            "(claims %s), next drain request %d, next claim %d",
            store.path,
            life.summary(),
            self.lost_state,
            len(processes),
            ", ".join(processes) or "none",
            machine.next_request_id,
            machine.next_slot_number,
        )
        return machine, processes

    def _built(self) -> _Parts:
        if self._parts is None:
            raise RuntimeError("the agent daemon has not been built")
        return self._parts

    async def start(self, services: trio.Nursery) -> None:
        """Re-adopt the jobs of the previous run before the API answers; then, with
        ``[shutdown] enabled``, take logind's delay lock (:mod:`nodeagent.agent._shutdown`)."""
        agent = self._built().agent
        await services.start(agent.run)
        if self.config.shutdown.enabled:
            watch = ShutdownWatch(
                agent=agent,
                schedule=lambda: Schedule(self.config.shutdown.schedule),
                bus=self.system_bus,
            )
            await services.start(watch.run)

    async def serving(self, services: trio.Nursery, listening: Listening) -> None:
        """Advertise the first TCP address (else the socket); push; watch for completion."""
        parts = self._built()
        config = self.config
        address = advertised_url(list(listening.tcp), config.ip) or f"unix://{config.socket}"
        try:
            # The masters refuse an ad whose MyAddress is not a plain origin: refuse to start
            # rather than push ads that are refused for ever.
            parse_my_address(address)
        except NotAnOrigin as exc:
            raise ConfigError(
                f"the address this agent would advertise (MyAddress): {exc}"
            ) from None
        parts.agent.machine.address = address
        await services.start(parts.link.run)
        services.start_soon(self._completion, parts.agent)

    async def finish(self) -> None:
        """Save the state and push the final ad; jobs keep running."""
        parts = self._built()
        parts.agent.flush()
        await parts.link.push_now()

    def reconfigure(self, running: AgentConfig, changes: ConfigChanges) -> None:
        """The policy, hooks, health check and site attributes (refused whole if the model
        refuses them or a hook's user is not to be had), the master link, metrics."""
        parts = self._parts
        policy = check_config(running)
        kept = self.config
        if parts is not None and (
            running.policy,
            running.hooks,
            running.health,
            running.attributes,
        ) != (kept.policy, kept.hooks, kept.health, kept.attributes):
            parts.agent.reload_hooks(hook_specs(running), health_spec(running))
            parts.agent.reload_policy(policy)
        if parts is not None:
            if running.master != self.config.master:
                parts.link.reconfigure(running.master)
            parts.metrics.require_auth = running.metrics_require_auth

    async def _completion(self, agent: Agent) -> None:
        await agent.completed.wait()
        assert agent.completion is not None
        action = agent.completion.action
        self.exit_status = RESTART_EXIT_STATUS if action is OnCompletion.RESTART else 0
        log.info("drain complete: %s (exit status %d)", action, self.exit_status)
        self.stop()


def _restore(document: dict[str, Any], path: Path, **machine: Any) -> Machine:
    """The machine of a saved document; a document this version cannot read is a
    :class:`StoreError` naming the file."""
    try:
        return Machine.restore(document, **machine)
    except (SlotsError, KeyError, TypeError, ValueError) as exc:
        what = exc.message if isinstance(exc, SlotsError) else f"{type(exc).__name__}: {exc}"
        raise StoreError(
            f"{path} holds a state this agent cannot read ({what}): move it aside (with its "
            "-wal and -shm files) and start with --recover, or put back a backup"
        ) from exc


def run_agent(config_path: Path | None, *, lost_state: LostState = "refuse") -> int:
    """Run the daemon in the foreground until stopped; returns the exit status.

    Raises :class:`ConfigError` for a configuration the daemon cannot run with, and the
    start failures of :func:`~nodeagent._lifecycle.serve_daemon` (see the module
    docstring).
    """
    config = load_agent_config(config_path)
    check_config(config)
    daemon = AgentDaemon(config=config, config_path=config_path, lost_state=lost_state)
    return trio.run(daemon.serve)
