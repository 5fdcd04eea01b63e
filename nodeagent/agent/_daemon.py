"""``nodeagent run``: the node agent daemon's lifecycle.

Services start in order, each reporting readiness: the store and the machine
(restored from the last saved state), the agent (re-adopting the jobs of the
previous run), the Unix socket and TCP listeners, the master link; then
``READY=1``. SIGTERM/SIGINT stop it cleanly and leave jobs running (they are
re-adopted by the next start); SIGHUP reloads the policy and the master link.
A drain's completion action ``exit`` ends the daemon with status 0, ``restart``
with :data:`RESTART_EXIT_STATUS`, which its unit restarts.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path

import trio

from nodeagent import _sdnotify
from nodeagent._audit import AuditLog
from nodeagent._auth import generate_key, load_key
from nodeagent._clock import Clock, WallClock
from nodeagent._http import trusted
from nodeagent._serving import (
    SHUTDOWN_GRACE,
    advertised_url,
    free_stale_socket,
    serve,
    write_runtime_info,
)
from nodeagent._settings import ConfigError, reloadable_changes
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


@dataclass
class AgentDaemon:
    """One running agent daemon; :meth:`serve` runs it until stopped.

    ``runner`` and ``clock`` are seams for tests; ``handle_signals`` is off when the
    daemon is embedded in another trio program (signals belong to the main program).
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
    _metrics: AgentMetrics | None = None

    def stop(self) -> None:
        """Ask the daemon to stop; jobs keep running."""
        self._stop.set()

    async def serve(
        self, *, task_status: trio.TaskStatus[AgentDaemon] = trio.TASK_STATUS_IGNORED
    ) -> int:
        config = self.config
        for directory in (config.state_dir, config.runtime_dir, config.execute_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not config.key_file.exists():
            generate_key(config.key_file)
            log.info("generated a new pool key in %s", config.key_file)
        key = load_key(config.key_file)
        store = Store(config.state_dir / "agent.db")
        audit = AuditLog(config.audit_log)
        try:
            return await self._serve(store, audit, key, task_status)
        finally:
            store.close()
            audit.close()

    async def _serve(
        self,
        store: Store,
        audit: AuditLog,
        key: bytes,
        task_status: trio.TaskStatus[AgentDaemon],
    ) -> int:
        config = self.config
        found = machine_resources(config)
        total = Resources(
            cpus=found.cpus, memory=found.memory_mib, disk=found.disk_kib, gpus=found.gpus
        )
        policy = machine_policy(config.policy)
        now = self.clock.now()
        saved = store.load()
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
            store=store,
            runner=self.runner or OsProcessRunner(),
            clock=self.clock,
            execute_dir=config.execute_dir,
            processes=processes,
        )
        self.agent = agent
        metrics = AgentMetrics(agent.ad, require_auth=config.metrics_require_auth)
        self._metrics = metrics
        app = build_app(agent, key=key, audit=audit, metrics=metrics)
        link = MasterLink(agent, config.master, clock=self.clock)
        async with trio.open_nursery() as services:
            await services.start(agent.run)
            # The servers stop on self._stop and return once their in-flight requests are
            # answered (hypercorn's graceful timeout): a reply is never cut off, not even
            # the one whose drain completes with `exit`.
            async with trio.open_nursery() as servers:
                free_stale_socket(config.socket)
                unix_urls = await serve(
                    servers,
                    trusted(app),
                    [f"unix:{config.socket}"],
                    shutdown=self._stop.wait,
                    unix=True,
                )
                tcp_urls: list[str] = []
                if config.listen:
                    tls = None
                    if config.tls_cert is not None and config.tls_key is not None:
                        tls = (config.tls_cert, config.tls_key)
                    tcp_urls = await serve(
                        servers, app, list(config.listen), shutdown=self._stop.wait, tls=tls
                    )
                self.urls = [*unix_urls, *tcp_urls]
                machine.address = advertised_url(tcp_urls, config.ip) or f"unix://{config.socket}"
                write_runtime_info(
                    config.runtime_dir / "nodeagent.json",
                    self.urls,
                    host=config.hostname,
                    socket=str(config.socket),
                )
                await services.start(link.run)
                if self.handle_signals:
                    services.start_soon(self._signals, agent, link)
                services.start_soon(self._completion, agent)
                services.start_soon(_sdnotify.run_watchdog)
                _sdnotify.ready()
                _sdnotify.status(f"serving {machine.host}: {', '.join(self.urls)}")
                log.info("nodeagent %s ready on %s", machine.host, ", ".join(self.urls))
                task_status.started(self)
                await self._stop.wait()
                _sdnotify.stopping()
                log.info("stopping; jobs keep running")
                servers.cancel_scope.deadline = trio.current_time() + SHUTDOWN_GRACE + 1
            agent.flush()
            with trio.move_on_after(SHUTDOWN_GRACE) as scope:
                scope.shield = True
                await link.push_now()
            services.cancel_scope.cancel()
        for leftover in (config.runtime_dir / "nodeagent.json", config.socket):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        return self.exit_status

    async def _completion(self, agent: Agent) -> None:
        await agent.completed.wait()
        assert agent.completion is not None
        action = agent.completion.action
        self.exit_status = RESTART_EXIT_STATUS if action is OnCompletion.RESTART else 0
        log.info("drain complete: %s (exit status %d)", action, self.exit_status)
        self.stop()

    async def _signals(self, agent: Agent, link: MasterLink) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as received:
            async for signum in received:
                if signum == signal.SIGHUP:
                    self._reload(agent, link)
                else:
                    log.info("received %s", signal.Signals(signum).name)
                    self.stop()

    def _reload(self, agent: Agent, link: MasterLink) -> None:
        _sdnotify.reloading()
        try:
            new = load_agent_config(self.config_path)
        except Exception as exc:
            log.error("reload refused, configuration unchanged: %s", exc)
            _sdnotify.ready()
            return
        changes = reloadable_changes(self.config, new)
        if changes.ignored:
            log.warning("these keys change only on restart: %s", ", ".join(changes.ignored))
        try:
            agent.reload_policy(machine_policy(new.policy))
        except Exception as exc:
            log.error("reload refused, policy unchanged: %s", exc)
        else:
            link.reconfigure(new.master)
            if self._metrics is not None:
                self._metrics.require_auth = new.metrics_require_auth
            self.config = self.config.model_copy(
                update={
                    "policy": new.policy,
                    "master": new.master,
                    "metrics_require_auth": new.metrics_require_auth,
                }
            )
            log.info("reloaded: %s", ", ".join(changes.applied) or "nothing changed")
        _sdnotify.ready()


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
