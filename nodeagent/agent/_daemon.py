"""``nodeagent run``: the node agent daemon, on the shared :mod:`nodeagent._lifecycle`.

Services start in order, each reporting readiness: the store and the machine
(restored from the last saved state), the agent (re-adopting the jobs of the
previous run), the Unix socket and TCP listeners, the master link; then
``READY=1``. SIGTERM/SIGINT stop it cleanly: requests in flight are answered, the
state saved and the ad pushed a last time, and jobs keep running (they are re-adopted
by the next start). SIGHUP reloads the policy, the master link and
``metrics_require_auth``; a policy the model refuses changes nothing. A drain's
completion action ``exit`` ends the daemon with status 0, ``restart`` with
:data:`RESTART_EXIT_STATUS`, which its unit restarts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import trio
from starlette.types import ASGIApp

from nodeagent._clock import Clock, WallClock
from nodeagent._lifecycle import (
    DaemonSpec,
    Listening,
    Opened,
    Program,
    reload_daemon,
    serve_daemon,
    tls_files,
)
from nodeagent._serving import advertised_url
from nodeagent._settings import ConfigChanges, ConfigError
from nodeagent.agent._agent import Agent, policy_seconds
from nodeagent.agent._api import build_app
from nodeagent.agent._config import AgentConfig, PolicyConfig, load_agent_config, machine_resources
from nodeagent.agent._metrics import AgentMetrics
from nodeagent.agent._processes import OsProcessRunner, ProcessRunner
from nodeagent.agent._push import MasterLink
from nodeagent.agent._store import ProcessRecord, Store
from slots import Machine, MachinePolicy, OnCompletion, Resources, SlotsError, SuspendPolicy

__all__ = ["RESTART_EXIT_STATUS", "AgentDaemon", "machine_policy", "run_agent"]

log = logging.getLogger("nodeagent.daemon")

#: Exit status of the ``restart`` completion action (``RestartForceExitStatus=`` in the unit).
RESTART_EXIT_STATUS = 75


def machine_policy(policy: PolicyConfig) -> MachinePolicy:
    """The model's policy from the ``[policy]`` section (durations in whole seconds)."""
    return MachinePolicy(
        max_job_retirement_time=policy_seconds(policy.max_job_retirement_time),
        machine_max_vacate_time=policy_seconds(policy.machine_max_vacate_time),
        start=policy.start,
        suspend_policy=SuspendPolicy(policy.suspended_jobs_on_drain),
        transaction_ttl=policy.transaction_ttl,
    )


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
    the reloadable ones as reloaded).
    """

    config: AgentConfig
    config_path: Path | None = None
    runner: ProcessRunner | None = None
    clock: Clock = field(default_factory=WallClock)
    handle_signals: bool = True
    agent: Agent | None = None
    urls: list[str] = field(default_factory=list)
    exit_status: int = 0
    _stop: trio.Event = field(default_factory=trio.Event)
    _parts: _Parts | None = None

    def stop(self) -> None:
        """Ask the daemon to stop; jobs keep running."""
        self._stop.set()

    def reload(self) -> ConfigChanges | None:
        """What SIGHUP does: :func:`~nodeagent._lifecycle.reload_daemon`."""
        return reload_daemon(self)

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
            # A reply is never cut off, not even the one whose drain completes with `exit`.
            finish_requests=True,
        )

    def load_config(self) -> AgentConfig:
        return load_agent_config(self.config_path)

    def open_store(self) -> Store:
        return Store(self.config.state_dir / "agent.db")

    def build(self, opened: Opened[Store]) -> ASGIApp:
        """The machine restored from the store (or a new one), the agent, its API."""
        config = self.config
        found = machine_resources(config)
        total = Resources(
            cpus=found.cpus, memory=found.memory_mib, disk=found.disk_kib, gpus=found.gpus
        )
        policy = machine_policy(config.policy)
        now = self.clock.now()
        saved = opened.store.load()
        if saved is None:
            machine = Machine(
                host=config.hostname, ip=config.ip, total=total, policy=policy, now=now
            )
            processes: dict[str, ProcessRecord] = {}
        else:
            document, processes = saved
            machine = Machine.restore(
                document, host=config.hostname, ip=config.ip, total=total, policy=policy, now=now
            )
            log.info(
                "restored state: %d claims, drain %s",
                len(machine.claims(now)),
                machine.request.id if machine.request else "none",
            )
        agent = Agent(
            machine=machine,
            store=opened.store,
            runner=self.runner or OsProcessRunner(),
            clock=self.clock,
            execute_dir=config.execute_dir,
            processes=processes,
        )
        metrics = AgentMetrics(agent.ad, require_auth=config.metrics_require_auth)
        self.agent = agent
        self._parts = _Parts(
            agent=agent, link=MasterLink(agent, config.master, clock=self.clock), metrics=metrics
        )
        return build_app(agent, key=opened.key, audit=opened.audit, metrics=metrics)

    def _built(self) -> _Parts:
        if self._parts is None:
            raise RuntimeError("the agent daemon has not been built")
        return self._parts

    async def start(self, services: trio.Nursery) -> None:
        """Re-adopt the jobs of the previous run before the API answers."""
        await services.start(self._built().agent.run)

    async def serving(self, services: trio.Nursery, listening: Listening) -> None:
        """Advertise the first TCP address (else the socket); push; watch for completion."""
        parts = self._built()
        config = self.config
        parts.agent.machine.address = (
            advertised_url(list(listening.tcp), config.ip) or f"unix://{config.socket}"
        )
        await services.start(parts.link.run)
        services.start_soon(self._completion, parts.agent)

    async def finish(self) -> None:
        """Save the state and push the final ad; jobs keep running."""
        parts = self._built()
        parts.agent.flush()
        await parts.link.push_now()

    def reconfigure(self, running: AgentConfig, changes: ConfigChanges) -> None:
        """The policy (refused whole if the model refuses it), the master link, metrics."""
        parts = self._parts
        try:
            policy = machine_policy(running.policy)
            if parts is not None and running.policy != self.config.policy:
                parts.agent.reload_policy(policy)
        except SlotsError as exc:
            raise ConfigError(f"[policy]: {exc.message}") from None
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


def run_agent(config_path: Path | None) -> int:
    """Run the daemon in the foreground until stopped; returns the exit status.

    Raises :class:`ConfigError` for a configuration the daemon cannot run with.
    """
    config = load_agent_config(config_path)
    try:
        machine_policy(config.policy)
    except SlotsError as exc:
        raise ConfigError(f"[policy]: {exc.message}") from None
    daemon = AgentDaemon(config=config, config_path=config_path)
    return trio.run(daemon.serve)
