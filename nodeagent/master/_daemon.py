"""``nodeagent master run``: the master daemon, on the shared :mod:`nodeagent._lifecycle`.

Starts in order: the store (schedule, modes, drains, counters), the TCP listeners and
a local Unix socket (ADMINISTRATOR), the reconcile service; then ``READY=1``. After a
restart it reconciles with the agents' ads as they arrive again. SIGTERM/SIGINT stop
it at once (state is saved before every reply, so a request cut off either took effect
or did not). SIGHUP reloads the drain policy, the reconcile interval, the ad lifetime and the
reboot grace,
``metrics_require_auth`` and ``agent_timeout`` (the next call to an agent uses it, and
it bounds how long a plan waits for fresh ads: :meth:`Master.refresh_figures`) and
``allow_pool_daemon_tokens`` (logged as a warning while on). A drain
the master left ``pending`` in its store (stopped between the record and the commit)
is settled with its node by the first reconcile pass.

The TCP listeners take every agent's ad pushes, thousands a second in a large pool, so
they are served by :mod:`nodeagent._serving._http11` (HTTP/1.1 with h11 on trio), whose cost per
request is less than half of hypercorn's trio worker's. The API is the same ASGI app,
with ad pushes answered in front of FastAPI
(:func:`~nodeagent.master._api.with_ad_fast_path`), whose bodies ``ingest_workers`` worker
processes prepare when set (:class:`~nodeagent.master._ingest_workers.IngestWorkers`, started
with the services, leader or follower). The Unix socket is served by the same server: on a
loaded master a request waits behind the other tasks' steps at each turn of the loop it
takes, and hypercorn's take several times as many (a plan's first row through the local
socket of a master of 100,000 machines under their pushes: ≈ 180–280 ms there).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio
from starlette.types import ASGIApp

from nodeagent._clock import Clock, WallClock
from nodeagent._ha._etcd import AsyncEtcd
from nodeagent._ha._leadership import Election, EtcdTasks, Fence, lease_ttl
from nodeagent._ha._store import EtcdStore
from nodeagent._lifecycle import (
    DaemonSpec,
    Listening,
    Opened,
    Program,
    serve_daemon,
    tls_files,
)
from nodeagent._peer import AgentLink, HttpAgentLink
from nodeagent._serving._http11 import ListenerShare
from nodeagent._settings import ConfigChanges
from nodeagent._store import Documents, DocumentStore, StoreError
from nodeagent.master._adstore import AdStore
from nodeagent.master._api import (
    build_master_app,
    push_answer,
    with_ad_fast_path,
    with_event_stream,
)
from nodeagent.master._collector import SurvivorFreezer
from nodeagent.master._config import MasterConfig, load_master_config
from nodeagent.master._event_stream import EventHub
from nodeagent.master._ingest_workers import IngestWorkers, relay_path
from nodeagent.master._leader import LeaderView
from nodeagent.master._master import Master, loop_idle
from nodeagent.master._metrics import MasterMetrics
from nodeagent.master._notify import Notifier, NotifyTarget
from nodeagent.master._plan import PlanPolicy
from nodeagent.master._rolling import Operations
from nodeagent.master._sla_policies import SlaBook

__all__ = ["MasterDaemon", "plan_policy", "run_master"]

log = logging.getLogger("nodeagent.master")
#: The least time from one reconcile pass to the next woken early (``Master.wake_gap``).
_WAKE_GAP = 0.25
#: The share of the master's time the passes may spend making forecasts ahead
#: (:attr:`Master.forecasts_time_share`): the rest of the core is the ads' and the replies'.
_FORECASTS_TIME_SHARE = 0.25
#: The master's documents kept one etcd key per member (see nodeagent._ha._store).
_COLLECTIONS = ("drains", "operations", "notices", "events")
#: The master's documents kept one SQLite row per member (see nodeagent._store.Members).
_SQLITE_COLLECTIONS = ("operations", "notices", "events")


def _prefix(config: MasterConfig) -> str:
    return config.etcd_keys("master")


def plan_policy(config: MasterConfig) -> PlanPolicy:
    return PlanPolicy(
        drain_policy=config.drain_policy,
        drain_margin=config.drain_margin,
        escalation=config.escalation,
        up_after_window=config.up_after_window,
        on_all_accepted=config.on_all_accepted,
        hears_within=config.ad_lifetime,
    )


@dataclass(frozen=True, kw_only=True)
class _Parts:
    """What :meth:`MasterDaemon.build` made for one run.

    ``agents`` is the link the daemon made (None when one was given): the one whose
    ``timeout`` a reload of ``agent_timeout`` sets.
    """

    master: Master
    metrics: MasterMetrics
    operations: Operations
    agents: HttpAgentLink | None
    sla: SlaBook
    leader: LeaderView
    notifier: Notifier


@dataclass
class MasterDaemon(Program[MasterConfig, Documents]):
    """One running master; :meth:`serve` runs it until stopped.

    ``link`` and ``clock`` are seams for tests (a given ``link`` is used as it is: a reload
    of ``agent_timeout`` applies to the link the daemon makes itself); ``handle_signals``
    is off when the daemon is embedded in another trio program. ``config`` is the running
    configuration (after a reload: the fixed keys as started, the reloadable ones as
    reloaded).
    """

    config: MasterConfig
    config_path: Path | None = None
    clock: Clock = field(default_factory=WallClock)
    link: AgentLink | None = None
    handle_signals: bool = True
    master: Master | None = None
    urls: list[str] = field(default_factory=list)
    _stop: trio.Event = field(default_factory=trio.Event)
    _parts: _Parts | None = None
    _etcd: AsyncEtcd | None = None
    _etcd_tasks: EtcdTasks | None = None
    #: The ingest worker processes (``ingest_workers``), once built.
    ingest: IngestWorkers | None = None
    #: The TCP listeners shared with them (``ingest_workers``), once built.
    share: ListenerShare | None = None

    def __post_init__(self) -> None:
        if self.config.ingest_workers:
            self.share = ListenerShare(relay_path(self.config.runtime_dir))

    @property
    def socket(self) -> Path:
        return self.config.runtime_dir / "master.sock"

    async def serve(
        self, *, task_status: trio.TaskStatus[MasterDaemon] = trio.TASK_STATUS_IGNORED
    ) -> int:
        await serve_daemon(
            self, stop=self._stop, handle_signals=self.handle_signals, task_status=task_status
        )
        return 0

    # ------------------------------------------------------------------ lifecycle hooks

    def spec(self) -> DaemonSpec:
        config = self.config
        return DaemonSpec(
            name="nodeagent master",
            log=log,
            directories=(config.state_dir, config.runtime_dir),
            key_file=config.key_file,
            create_key=True,
            audit_log=config.audit_log,
            socket=self.socket,
            runtime_file=config.runtime_dir / "master.json",
            listen=config.listen,
            tls=tls_files(config.tls_cert, config.tls_key),
            read_timeout=config.read_timeout,
            http_server="h11",
            share=self.share,
        )

    def load_config(self) -> MasterConfig:
        return load_master_config(self.config_path)

    def open_store(self) -> Documents:
        """SQLite (``master.db``), or etcd (``store = "etcd"``: read whole now; raises
        :class:`~nodeagent._store.StoreError` when etcd cannot be reached)."""
        config = self.config
        if config.store == "etcd":
            return EtcdStore(
                config.etcd_settings(),
                _prefix(config),
                collections=_COLLECTIONS,
                write_timeout=lease_ttl(config.leader_ttl) / 3,
            )
        return DocumentStore(config.state_dir / "master.db", collections=_SQLITE_COLLECTIONS)

    def build(self, opened: Opened[Documents]) -> ASGIApp:
        """The master restored from its store, with its API (ad pushes on a fast path)."""
        config = self.config
        link: AgentLink
        if self.link is not None:
            link = self.link
            agents = None
        else:
            link = agents = HttpAgentLink(opened.key, timeout=config.agent_timeout)
        master = Master(
            store=opened.store,
            link=link,
            clock=self.clock,
            ads=AdStore(lifetime=config.ad_lifetime, reboot_grace=config.reboot_grace),
            policy=plan_policy(config),
            reconcile_interval=config.reconcile_interval,
            wake_gap=min(_WAKE_GAP, config.reconcile_interval),
            forecasts_time_share=_FORECASTS_TIME_SHARE,
            loop_idle=loop_idle,
            fetch_timeout=config.agent_timeout,
            events=EventHub(keep=config.events_kept),
        )
        master.load()
        _allow_pool_daemon_tokens(master, config.allow_pool_daemon_tokens)
        metrics = MasterMetrics(master, require_auth=config.metrics_require_auth)
        self.master = master
        operations = Operations(master)
        operations.load()
        sla = SlaBook(
            store=opened.store,
            file=config.sla_file,
            coordinator_timeout=config.sla_coordinator_timeout,
        )
        sla.load()
        operations.sla = sla  # each batch's SLA check
        leader = LeaderView(store=config.store)
        metrics.show_leadership(leader)
        notifier = Notifier(
            hub=master.events,
            store=opened.store,
            targets=[
                NotifyTarget(
                    url=entry.url,
                    types=entry.types,
                    secret_file=entry.secret_file,
                    timeout=entry.timeout,
                )
                for entry in config.notify
            ],
            clock=self.clock,
        )
        metrics.show_notifier(notifier)
        self._parts = _Parts(
            master=master,
            metrics=metrics,
            operations=operations,
            agents=agents,
            sla=sla,
            leader=leader,
            notifier=notifier,
        )
        master.identity = lambda: (leader.url, _term(leader))
        app: ASGIApp = build_master_app(
            master,
            key=opened.key,
            audit=opened.audit,
            metrics=metrics,
            operations=operations,
            sla=sla,
            leader=leader,
        )
        app = with_event_stream(app, master, key=opened.key, metrics=metrics)
        if config.ingest_workers:
            assert self.share is not None
            self.ingest = IngestWorkers(
                config.ingest_workers,
                share=self.share,
                answer=push_answer(master, metrics),
                key=opened.key,
                read_timeout=config.read_timeout,
                nice=config.ingest_worker_nice,
            )
        metrics.show_ingest(self.ingest)
        return with_ad_fast_path(app, master, key=opened.key, metrics=metrics)

    async def serving(self, services: trio.Nursery, listening: Listening) -> None:
        """The plan's totals kept for the summaries and scrapes (every master), the
        reconcile service and the engine of rolling maintenance operations: at once with
        SQLite; with etcd, while this master leads (:meth:`_lead`), following
        the leader's writes meanwhile."""
        parts = self._parts
        if parts is None:
            raise RuntimeError("the master daemon has not been built")
        config = self.config
        tcp = [url for url in listening.urls if not url.startswith("http://unix")]
        parts.leader.url = config.advertise_url or (tcp[0] if tcp else listening.urls[0])
        store = parts.master.store
        if self.ingest is not None:  # leader or follower, a master takes ads
            await services.start(self.ingest.run)
        # and answers summaries and scrapes: the totals kept from the start, as after a
        # read, so that the first summary after a restart finds them made (a scraper
        # reads them every few seconds anyway).
        parts.master.note_totals_read()
        await services.start(parts.master.keep_totals)
        if not isinstance(store, EtcdStore):
            await services.start(parts.master.run)
            await services.start(parts.operations.run)
            await services.start(parts.notifier.run)
            return
        etcd = self._etcd = AsyncEtcd(store.settings)
        ttl = lease_ttl(config.leader_ttl)
        election = Election(
            etcd=etcd,
            key=_prefix(config).encode() + b"leader",
            ttl=ttl,
            identity={"url": parts.leader.url, "host": socket.gethostname(), "pid": os.getpid()},
            log=log,
        )
        parts.leader.election, parts.leader.ttl = election, ttl
        parts.leader.holding = lambda: store.fence is not None
        self._etcd_tasks = EtcdTasks(etcd)
        await services.start(
            self._etcd_tasks.run,
            [
                partial(store.follow, etcd, self._followed),
                partial(election.run, self._lead),
                # a follower makes the forecasts its plans read ahead, as a leader's passes do
                partial(parts.master.run_ahead, lambda: parts.leader.leading),
            ],
        )

    async def _lead(self, fence: Fence) -> None:
        """One term of leadership: the state as etcd holds it now (every write of the
        terms before), then the reconcile service and the operations engine, until the
        term ends (cancelled), or a write of theirs is fenced out."""
        parts = self._parts
        store = None if parts is None else parts.master.store
        if parts is None or not isinstance(store, EtcdStore) or self._etcd is None:
            raise RuntimeError("the master daemon has not been built for etcd")
        # What the predecessors wrote since this master's copy: only those documents are
        # taken again (the plans kept for the rest stay); then a pass starts afresh.
        self._take_state(parts, await store.refresh_async(self._etcd))
        parts.master.take_over()
        try:
            await store.hold(fence, parts.master.run, parts.operations.run, parts.notifier.run)
        finally:
            self._take_state(parts)  # a follower again: the state as written

    def _followed(self, names: set[str]) -> None:
        """The leader changed the documents ``names``: take them (a leader's own writes
        are not reported; it reads all at the start of its term). Taken whenever the
        store holds no fence: from the moment a term's write is fenced out or its outcome
        is unknown, not only once the election says the term is over — a write of unknown
        outcome that lands meanwhile must reach the memory, whose copy already holds it."""
        parts = self._parts
        store = None if parts is None else parts.master.store
        if parts is not None and isinstance(store, EtcdStore) and store.fence is None:
            self._take_state(parts, names)

    @staticmethod
    def _take_state(parts: _Parts, names: set[str] | None = None) -> None:
        try:
            parts.master.follow(names)
            if names is None or "operations" in names:
                parts.operations.load()
            if names is None or "sla_policies" in names:
                parts.sla.load()
        except StoreError as exc:
            log.error("cannot read the shared state: %s", exc)

    async def finish(self) -> None:
        """With etcd: the election and the watch end (a leader gives its lease back, so
        that another master leads at once), then the etcd client closes."""
        if self._etcd_tasks is not None:
            await self._etcd_tasks.close()

    def reconfigure(self, running: MasterConfig, changes: ConfigChanges) -> None:
        """The plan policy, intervals, ad lifetime and reboot grace, metrics auth, pool-wide
        DAEMON tokens, the agents' timeout, the SLA file's policies and the coordinators'
        timeout; then a reconcile pass at once."""
        parts = self._parts
        if parts is None:
            return
        parts.master.policy = plan_policy(running)
        parts.master.reconcile_interval = running.reconcile_interval
        parts.master.ads.lifetime = running.ad_lifetime
        parts.master.ads.reboot_grace = running.reboot_grace
        parts.master.fetch_timeout = running.agent_timeout
        parts.metrics.require_auth = running.metrics_require_auth
        if running.allow_pool_daemon_tokens != parts.master.allow_pool_daemon_tokens:
            _allow_pool_daemon_tokens(parts.master, running.allow_pool_daemon_tokens)
        if parts.agents is not None:
            parts.agents.timeout = running.agent_timeout
        parts.sla.reconfigure(running.sla_file, running.sla_coordinator_timeout)
        parts.master.wake()


def _term(leader: LeaderView) -> int | None:
    """The pool's term of leadership this master holds (``None``: the one master)."""
    return None if leader.election is None else leader.election.term


def _allow_pool_daemon_tokens(master: Master, allow: bool) -> None:
    """Whether ``master`` takes ads pushed with DAEMON tokens that name no node; a warning
    says so while it does (such a token lets its holder push any node's ad)."""
    master.allow_pool_daemon_tokens = allow
    if allow:
        log.warning(
            "allow_pool_daemon_tokens is on: ads pushed with DAEMON tokens that name no node "
            "are taken, and their holders may push any node's ad; give each agent its own "
            "(nodeagent token create --scope DAEMON --node HOST), then turn it off"
        )


def run_master(config_path: Path | None) -> int:
    """Run the master in the foreground until stopped."""
    config = load_master_config(config_path)
    with SurvivorFreezer():  # no collection walks the whole pool but as it grows
        return trio.run(MasterDaemon(config=config, config_path=config_path).serve)
