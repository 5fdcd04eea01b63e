"""``nodeagent master run``: the master daemon's lifecycle.

Starts in order: the store (schedule, modes, drains, counters), the TCP listeners and
a local Unix socket (ADMINISTRATOR), the reconcile service; then ``READY=1``. After a
restart it reconciles with the agents' ads as they arrive again. SIGTERM/SIGINT stop
it; SIGHUP reloads the drain policy and the ad lifetime.

The TCP listeners take every agent's ad pushes, thousands a second in a large pool, so
they are served by :mod:`nodeagent._http11` (HTTP/1.1 with h11 on trio), whose cost per
request is less than half of hypercorn's trio worker's. The API is the same ASGI app,
with ad pushes answered in front of FastAPI
(:func:`~nodeagent.master._api.with_ad_fast_path`). The Unix socket is served by
hypercorn, like the agent's.
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
from nodeagent._http11 import serve_http
from nodeagent._peer import AgentLink, HttpAgentLink
from nodeagent._serving import free_stale_socket, serve, write_runtime_info
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._api import build_master_app, with_ad_fast_path
from nodeagent.master._config import MasterConfig, load_master_config
from nodeagent.master._master import Master
from nodeagent.master._metrics import MasterMetrics
from nodeagent.master._plan import PlanPolicy

__all__ = ["MasterDaemon", "plan_policy", "run_master"]

log = logging.getLogger("nodeagent.master")


def plan_policy(config: MasterConfig) -> PlanPolicy:
    return PlanPolicy(
        drain_policy=config.drain_policy,
        drain_margin=config.drain_margin,
        escalation=config.escalation,
    )


@dataclass
class MasterDaemon:
    """One running master; :meth:`serve` runs it until stopped."""

    config: MasterConfig
    config_path: Path | None = None
    clock: Clock = field(default_factory=WallClock)
    link: AgentLink | None = None
    handle_signals: bool = True
    master: Master | None = None
    urls: list[str] = field(default_factory=list)
    _stop: trio.Event = field(default_factory=trio.Event)

    def stop(self) -> None:
        self._stop.set()

    @property
    def socket(self) -> Path:
        return self.config.runtime_dir / "master.sock"

    async def serve(
        self, *, task_status: trio.TaskStatus[MasterDaemon] = trio.TASK_STATUS_IGNORED
    ) -> int:
        config = self.config
        for directory in (config.state_dir, config.runtime_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not config.key_file.exists():
            generate_key(config.key_file)
            log.info("generated a new pool key in %s: give it to the agents", config.key_file)
        key = load_key(config.key_file)
        store = DocumentStore(config.state_dir / "master.db")
        audit = AuditLog(config.audit_log)
        try:
            await self._serve(store, audit, key, task_status)
        finally:
            store.close()
            audit.close()
        return 0

    async def _serve(
        self,
        store: DocumentStore,
        audit: AuditLog,
        key: bytes,
        task_status: trio.TaskStatus[MasterDaemon],
    ) -> None:
        config = self.config
        master = Master(
            store=store,
            link=self.link or HttpAgentLink(key, timeout=config.agent_timeout),
            clock=self.clock,
            ads=AdStore(lifetime=config.ad_lifetime),
            policy=plan_policy(config),
            reconcile_interval=config.reconcile_interval,
        )
        master.load()
        self.master = master
        metrics = MasterMetrics(master, require_auth=config.metrics_require_auth)
        app = with_ad_fast_path(
            build_master_app(master, key=key, audit=audit, metrics=metrics),
            master,
            key=key,
            metrics=metrics,
        )
        async with trio.open_nursery() as nursery:
            free_stale_socket(self.socket)
            unix_urls = await serve(
                nursery, trusted(app), [f"unix:{self.socket}"], shutdown=self._stop.wait, unix=True
            )
            tls = None
            if config.tls_cert is not None and config.tls_key is not None:
                tls = (config.tls_cert, config.tls_key)
            tcp_urls = await serve_http(nursery, app, list(config.listen), tls=tls)
            self.urls = [*unix_urls, *tcp_urls]
            write_runtime_info(
                config.runtime_dir / "master.json", self.urls, socket=str(self.socket)
            )
            await nursery.start(master.run)
            if self.handle_signals:
                nursery.start_soon(self._signals, master, metrics)
            nursery.start_soon(_sdnotify.run_watchdog)
            _sdnotify.ready()
            log.info("nodeagent master ready on %s", ", ".join(self.urls))
            task_status.started(self)
            await self._stop.wait()
            _sdnotify.stopping()
            # Stop at once: state is saved before every reply, so a request cut off here
            # either took effect (and was saved) or did not.
            nursery.cancel_scope.cancel()
        for leftover in (config.runtime_dir / "master.json", self.socket):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()

    async def _signals(self, master: Master, metrics: MasterMetrics) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as received:
            async for signum in received:
                if signum != signal.SIGHUP:
                    log.info("received %s", signal.Signals(signum).name)
                    self.stop()
                    continue
                _sdnotify.reloading()
                try:
                    new = load_master_config(self.config_path)
                except Exception as exc:
                    log.error("reload refused, configuration unchanged: %s", exc)
                else:
                    master.policy = plan_policy(new)
                    master.reconcile_interval = new.reconcile_interval
                    master.ads.lifetime = new.ad_lifetime
                    metrics.require_auth = new.metrics_require_auth
                    self.config = new
                    master.wake()
                    log.info("reloaded the master's configuration")
                _sdnotify.ready()


def run_master(config_path: Path | None) -> int:
    """Run the master in the foreground until stopped."""
    config = load_master_config(config_path)
    return trio.run(MasterDaemon(config=config, config_path=config_path).serve)
