"""Prometheus metrics of the master, in a registry of its own, read at scrape time.

What the plan and the ads say (late machines, escalations to come, expected badput, nodes
by state, lost nodes, operations) is counted by :mod:`nodeagent.master._fleet` at each
scrape, from the plan view's caches. A family whose samples name a machine or a node
(``machine``, ``node`` labels) has one only for the machines or nodes in that condition
(late, to be escalated, a failed hook, a failing health check, lost): its help text and
type are exported even when none is.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nodeagent.master._fleet import (
    NodeFigures,
    NodeLedger,
    notice_figures,
    operation_figures,
)

if TYPE_CHECKING:
    from nodeagent.master._adstore import AdStore
    from nodeagent.master._ingest_workers import IngestWorkers
    from nodeagent.master._leader import LeaderView
    from nodeagent.master._master import Master
    from nodeagent.master._notify import Notifier

__all__ = ["NODES_A_SLICE", "MasterMetrics"]

#: The nodes a scrape takes again in one part before it lets the others run
#: (:meth:`MasterMetrics.node_slices`).
NODES_A_SLICE = 500
#: The seconds a scrape spends taking the nodes again before it answers
#: (:meth:`MasterMetrics.scrape`): the nodes it has not taken by then are counted as of
#: their older ad, or not at all (``nodeagent_master_nodes_behind``), and the master takes
#: them after the scrape as it keeps the plan's totals. Prometheus gives up on a scrape
#: after 10 s by default; a large pool's first scrape after a restart takes its 100,000
#: nodes in parts served between the pushes, ≈ 10 s on a busy 2-core master.
SCRAPE_NODES_WITHIN = 1.0


class _MasterCollector(Collector):
    def __init__(self, master: Master) -> None:
        self._master = master
        self.leader: LeaderView | None = None
        self.notifier: Notifier | None = None
        self.ingest: IngestWorkers | None = None
        #: The node figures kept between scrapes: for which store, and what it says.
        self._node_ledger: tuple[AdStore, NodeLedger, set[str]] | None = None
        #: Whether a render takes again the nodes left to take (else it counts them
        #: behind: a scrape whose parts ran out of time, :meth:`MasterMetrics.scrape`).
        self.bring_rest = True

    def collect(self) -> Iterator[Metric]:
        master = self._master
        now = master.clock.now()
        modes = GaugeMetricFamily(
            "nodeagent_master_machines", "Scheduled machines by mode", labels=["mode"]
        )
        counts = {"UP": 0, "DRAINING": 0, "DOWN": 0}
        for status in master.state.machines():
            counts[str(status.mode)] = counts.get(str(status.mode), 0) + 1
        for mode, count in counts.items():
            modes.add_metric([mode], count)
        yield modes
        nodes = GaugeMetricFamily("nodeagent_master_nodes", "Nodes with an ad", labels=["state"])
        figures, left = self._node_figures(master, now)
        lost, rebooting = len(figures.lost), figures.rebooting
        nodes.add_metric(["live"], len(master.ads) - lost - rebooting)
        nodes.add_metric(["lost"], lost)
        nodes.add_metric(["rebooting"], rebooting)
        yield nodes
        behind = GaugeMetricFamily(
            "nodeagent_master_nodes_behind",
            "Nodes whose latest ad this scrape's node counts have not read: counted as of "
            "their older ad, or not at all (0 when the counts are whole)",
        )
        behind.add_metric([], left)
        yield behind
        for name, value, text in (
            ("nodeagent_master_ads_received", master.ads.received, "Ads received"),
            ("nodeagent_master_ads_expired", master.ads.expired, "Ads that expired (node lost)"),
            ("nodeagent_master_ads_moving_values", master.ads.moving_values_pushed,
             "Ads pushed with their slot ads' moving values alone"),
            ("nodeagent_master_ads_slots_unknown", master.ads.slots_unknown,
             "Pushes of moving values alone refused: the slot ads they go with not held"),
            ("nodeagent_master_drains_started", master.counters.drains_started,
             "Graceful drains started for maintenance"),
            ("nodeagent_master_drains_escalated", master.counters.drains_escalated,
             "Drains escalated at their window"),
            ("nodeagent_master_down_drains", master.counters.down_drains,
             "Fast drains of machines brought down"),
            ("nodeagent_master_drain_failures", master.counters.drain_failures,
             "Drain requests an agent refused or did not answer"),
            ("nodeagent_master_pool_token_ads", master.pool_token_ads,
             "Ads taken with a DAEMON token that names no node (allow_pool_daemon_tokens)"),
            ("nodeagent_master_forecasts_made_ahead", master.forecasts_made_ahead,
             "Forecasts (and plan rows) made ahead of the plans that read them"),
        ):  # fmt: skip
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], value)
            yield counter
        waiting = GaugeMetricFamily(
            "nodeagent_master_forecasts_waiting",
            "Scheduled machines whose forecast the reconcile passes have yet to make "
            "(after a restart, until every node's is made); a plan makes those it reads",
        )
        waiting.add_metric([], master.forecasts_waiting)
        yield waiting
        yield from self._ingest()
        yield from self._schedule(master, now)
        yield from self._nodes(master, figures)
        yield from self._operations(master)
        yield from self._notices(master)
        yield from self._events()
        leader = self.leader
        if leader is not None:
            leading = GaugeMetricFamily(
                "nodeagent_master_leading",
                "1 while this master leads (always, with the SQLite store), else 0",
            )
            leading.add_metric([], 1 if leader.leading else 0)
            yield leading
            terms = CounterMetricFamily(
                "nodeagent_master_leadership_terms", "Terms of leadership this master began"
            )
            terms.add_metric([], 0 if leader.election is None else leader.election.terms)
            yield terms

    def _schedule(self, master: Master, now: float) -> Iterator[Metric]:
        """The scheduled machines by their plan rows (:func:`schedule_figures`)."""
        inputs = master.plan_inputs(now)
        figures = master.plan_view.schedule_figures(inputs, now)
        late = GaugeMetricFamily(
            "nodeagent_master_machines_late",
            "Scheduled machines whose node would not be empty before its window if every "
            "job kept its retirement promise",
        )
        late.add_metric([], len(figures.late))
        yield late
        behind = GaugeMetricFamily(
            "nodeagent_master_plan_machines_behind",
            "Scheduled machines this scrape counts as of an older ad or instant, or not at "
            "all: their plan figures wait to be remade (0 when the figures are whole)",
        )
        behind.add_metric([], figures.behind)
        yield behind
        late_by = GaugeMetricFamily(
            "nodeagent_master_machine_late_seconds",
            "How long after its window starts a late machine's node would be empty by its "
            "jobs' retirement promises (late machines only)",
            labels=["machine", "node"],
        )
        for each in figures.late:
            late_by.add_metric([each.machine, each.node], each.late_by)
        yield late_by
        planned = GaugeMetricFamily(
            "nodeagent_master_escalations_planned",
            "Scheduled machines whose drain the master will escalate at their window, "
            "cutting retirement promises (not yet escalated)",
        )
        planned.add_metric([], len(figures.escalations))
        yield planned
        labels = ["machine", "node", "escalation"]
        starts = GaugeMetricFamily(
            "nodeagent_master_escalation_window_start_timestamp_seconds",
            "When the window of a machine to be escalated starts (epoch s)",
            labels=labels,
        )
        jobs = GaugeMetricFamily(
            "nodeagent_master_escalation_cut_jobs",
            "Jobs whose retirement promise the escalation of a machine will cut",
            labels=labels,
        )
        badput = GaugeMetricFamily(
            "nodeagent_master_escalation_cut_badput_cpu_seconds",
            "Work the escalation of a machine will lose (core-s)",
            labels=labels,
        )
        for escalating in figures.escalations:
            values = [escalating.machine, escalating.node, escalating.escalation]
            starts.add_metric(values, escalating.window_start)
            jobs.add_metric(values, escalating.cut_jobs)
            badput.add_metric(values, escalating.cut_badput)
        yield starts
        yield jobs
        yield badput
        expected = GaugeMetricFamily(
            "nodeagent_master_expected_badput_cpu_seconds",
            "Badput expected if every scheduled machine were drained now with this "
            "schedule, summed (core-s)",
            labels=["schedule"],
        )
        for schedule, value in figures.expected_badput.items():
            expected.add_metric([schedule], value)
        yield expected
        closed = GaugeMetricFamily(
            "nodeagent_master_closed_capacity_cpu_seconds",
            "Capacity the drains close before their windows, summed over the scheduled "
            "machines (core-s): as planned, and had every node admitted any promise "
            "(admit) or none that outlives its window (refuse, shorten)",
            labels=["admission"],
        )
        for admission, seconds in figures.closed.items():
            closed.add_metric([admission], float(seconds))
        yield closed

    def _notices(self, master: Master) -> Iterator[Metric]:
        """The notices in force by their latest answer (:func:`notice_figures`)."""
        figures = notice_figures(master.notices.values())
        answers = GaugeMetricFamily(
            "nodeagent_master_notices",
            "Notices in force (one per scheduled machine and job group on it) by their "
            "latest answer",
            labels=["answer"],
        )
        for answer, count in figures.answers.items():
            answers.add_metric([answer], count)
        yield answers
        declined = GaugeMetricFamily(
            "nodeagent_master_notice_declined",
            "1 for each notice in force whose group declined it",
            labels=["machine", "group"],
        )
        for machine, group in figures.declined:
            declined.add_metric([machine, group], 1)
        yield declined

    def _node_figures(self, master: Master, now: float) -> tuple[NodeFigures, int]:
        """The nodes by their ads (:func:`~nodeagent.master._fleet.node_figures`), kept
        between scrapes (:class:`~nodeagent.master._fleet.NodeLedger`, told of the ads
        that arrived or went by the store's
        :meth:`~nodeagent.master._adstore.AdStore.watch_names`), and how many nodes they
        have yet to take again: none unless :attr:`bring_rest` is false."""
        ads = master.ads
        ledger, changed = self._ledger_at(master, now)
        if self.bring_rest:
            ledger.bring_to(now, changed, ads.get)
            changed.clear()
        else:  # the ads grown too old let go of, the nodes left counted behind
            ledger.bring_to(now, (), ads.get)
        figures = ledger.figures(now, ads.lost_at(now), ads.rebooting_at(now))
        return figures, len(changed)

    def node_slices(self) -> Iterator[None]:
        """The node figures brought to now a part at a time before a scrape reads them
        (:meth:`~nodeagent.master._fleet.NodeLedger.bring_part`, at most
        :data:`NODES_A_SLICE` nodes a part), yielding between two parts: a minute of a
        large pool's ads is tens of thousands of nodes to take again. They take the nodes
        changed before the first part (every node for a new ledger), not those whose ads
        come meanwhile, which a pool pushes as fast as the parts may take them."""
        master = self._master
        ledger: NodeLedger | None = None
        owed = 0
        while True:
            now = master.clock.now()
            held, changed = self._ledger_at(master, now)
            if held is not ledger:
                ledger, owed = held, len(changed)
            names = min(owed, NODES_A_SLICE)
            owed -= names
            if ledger.bring_part(now, changed, master.ads.get, names, NODES_A_SLICE) and not owed:
                return
            yield

    def _ledger_at(self, master: Master, now: float) -> tuple[NodeLedger, set[str]]:
        """The node ledger for ``now`` and the names of the nodes it has yet to take
        again: a new one (every node to take) for a new store, a new ``lifetime`` or a
        clock gone back."""
        ads = master.ads
        held = self._node_ledger
        if held is None or held[0] is not ads or not held[1].holds(ads.lifetime, now):
            changed = held[2] if held is not None and held[0] is ads else ads.watch_names()
            changed.update(entry.name for entry in ads.entries())
            held = self._node_ledger = (ads, NodeLedger(ads.lifetime), changed)
        return held[1], held[2]

    def _nodes(self, master: Master, figures: NodeFigures) -> Iterator[Metric]:
        """The nodes by their ads (:meth:`_node_figures`)."""
        ads = master.ads
        for name, text, counts in (
            ("nodeagent_master_nodes_by_drain_state", "Live nodes by their ad's DrainState",
             figures.drain_states),
            ("nodeagent_master_nodes_by_hook_state",
             "Live nodes by their ad's DrainHookState (nodes that publish one)",
             figures.hook_states),
            ("nodeagent_master_nodes_by_health_state",
             "Live nodes by their ad's HealthState (nodes that publish one)",
             figures.health_states),
        ):  # fmt: skip
            family = GaugeMetricFamily(name, text, labels=["state"])
            for state, count in counts.items():
                family.add_metric([state], count)
            yield family
        failed = GaugeMetricFamily(
            "nodeagent_master_node_hook_failed",
            "1 for a live node whose completion hook failed and keeps it closed",
            labels=["node", "hook"],
        )
        for node, hook in figures.hooks_failed:
            failed.add_metric([node, hook], 1)
        yield failed
        failing = GaugeMetricFamily(
            "nodeagent_master_node_health_failing",
            "1 for a live node whose health check fails (closed until it passes)",
            labels=["node"],
        )
        for node in figures.health_failing:
            failing.add_metric([node], 1)
        yield failing
        lost = GaugeMetricFamily(
            "nodeagent_master_lost_node_ad_age_seconds",
            "The age of a lost node's last ad (older than the ad lifetime)",
            labels=["node"],
        )
        for node, age in figures.lost:
            lost.add_metric([node], age)
        yield lost
        oldest = GaugeMetricFamily(
            "nodeagent_master_oldest_ad_age_seconds",
            "The age of the oldest live node's ad (0 without one)",
        )
        oldest.add_metric([], figures.oldest_live_ad)
        yield oldest
        lifetime = GaugeMetricFamily(
            "nodeagent_master_ad_lifetime_seconds",
            "How long an ad stays live without a newer one (ad_lifetime): older, its node is lost",
        )
        lifetime.add_metric([], ads.lifetime)
        yield lifetime

    def _operations(self, master: Master) -> Iterator[Metric]:
        """The rolling operations (:func:`operation_figures`)."""
        figures = operation_figures(master.operations.values())
        operations = GaugeMetricFamily(
            "nodeagent_master_operations", "Rolling operations by state", labels=["state"]
        )
        for state, count in figures.operations.items():
            operations.add_metric([state], count)
        yield operations
        batches = GaugeMetricFamily(
            "nodeagent_master_operation_batches",
            "Batches of the rolling operations running or paused, by state",
            labels=["state"],
        )
        for state, count in sorted(figures.batches.items()):
            batches.add_metric([state], count)
        yield batches
        held = GaugeMetricFamily(
            "nodeagent_master_operation_batches_held",
            "Batches of running operations held by their SLA, badput budget or a node not "
            "heard from",
        )
        held.add_metric([], figures.held)
        yield held

    def _ingest(self) -> Iterator[Metric]:
        """The ingest worker processes (``ingest_workers``; all 0 without)."""
        workers = self.ingest
        running = GaugeMetricFamily(
            "nodeagent_master_ingest_workers",
            "Ingest worker processes taking the ad pushes now (ingest_workers)",
        )
        running.add_metric([], 0 if workers is None else workers.running)
        yield running
        for name, value, text in (
            ("nodeagent_master_ingest_worker_exits",
             0 if workers is None else workers.ended,
             "Ingest workers that ended or were killed while the master ran (each started again)"),
            ("nodeagent_master_ads_taken_by_workers",
             0 if workers is None else workers.taken,
             "Ad pushes an ingest worker took (its HTTP), stored and answered by the master"),
            ("nodeagent_master_ads_prepared_by_workers",
             0 if workers is None else workers.prepared,
             "Ad pushes parsed, checked and packed by an ingest worker"),
        ):  # fmt: skip
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], value)
            yield counter

    def _events(self) -> Iterator[Metric]:
        hub = self._master.events
        for name, value, text in (
            ("nodeagent_master_events_kept", len(hub.log), "Events kept for subscribers"),
            ("nodeagent_master_event_last_id", hub.log.last_id, "The id of the last event"),
            ("nodeagent_master_event_subscribers", hub.subscribers,
             "Subscribers of GET /v1/events connected to this master"),
        ):  # fmt: skip
            gauge = GaugeMetricFamily(name, text)
            gauge.add_metric([], value)
            yield gauge
        lag = GaugeMetricFamily(
            "nodeagent_master_webhook_lag_events",
            "Events written that a webhook has not taken yet",
            labels=["url"],
        )
        failures = CounterMetricFamily(
            "nodeagent_master_webhook_failures",
            "Deliveries to a webhook that failed (each is tried again)",
            labels=["url"],
        )
        delivered = GaugeMetricFamily(
            "nodeagent_master_webhook_last_delivery_timestamp_seconds",
            "When a webhook last took an event (absent: never since this master started)",
            labels=["url"],
        )
        notifier = self.notifier
        if notifier is not None:
            for url, state in notifier.states.items():
                lag.add_metric([url], notifier.lag(url))
                failures.add_metric([url], state.failures)
                if state.last_delivery is not None:
                    delivered.add_metric([url], state.last_delivery)
        yield lag
        yield failures
        yield delivered


class MasterMetrics:
    """The master's metrics; ``render`` gives the exposition text and content type."""

    def __init__(self, master: Master, *, require_auth: bool = True) -> None:
        self.require_auth = require_auth
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = _MasterCollector(master)
        self.registry.register(self._collector)
        # kept current between scrapes, as the plan's totals are (Master.keep_totals)
        master.kept_with_totals.append(self._collector.node_slices)
        self._latency = Histogram(
            "nodeagent_master_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        # the interpreter's collections by generation (python_gc_*): the full ones are the
        # whole walks of a large pool (nodeagent.master._collector)
        GCCollector(registry=self.registry)

    def show_leadership(self, leader: LeaderView) -> None:
        """Export whether this master leads (``nodeagent_master_leading``) and its terms."""
        self._collector.leader = leader

    def show_notifier(self, notifier: Notifier) -> None:
        """Export the webhooks' lag, failures and last deliveries."""
        self._collector.notifier = notifier

    def show_ingest(self, workers: IngestWorkers | None) -> None:
        """Export the ingest workers' figures (``nodeagent_master_ingest_*``)."""
        self._collector.ingest = workers

    def observe_request(self, method: str, route: str, started: float) -> None:
        self._latency.labels(method, route).observe(time.perf_counter() - started)

    def observe_request_seconds(self, method: str, route: str, seconds: float) -> None:
        """A request that took ``seconds`` (one an ingest worker and the master shared)."""
        self._latency.labels(method, route).observe(seconds)

    def node_slices(self) -> Iterator[None]:
        """Bring the node figures a scrape reads to now a part at a time, yielding between
        two parts (run them as a pass's slices are run; :meth:`render` then takes the
        nodes whose ads came meanwhile)."""
        return self._collector.node_slices()

    async def scrape(
        self, in_slices: Callable[[Iterator[None]], Awaitable[None]]
    ) -> tuple[bytes, str]:
        """A scrape's text and content type: the node figures brought to now a part at a
        time (:meth:`node_slices`, run by ``in_slices`` as a pass's slices are run) for
        :data:`SCRAPE_NODES_WITHIN` seconds at most, then rendered: with the nodes whose
        ads came meanwhile when the parts ended in time, else with those left counted
        behind (``nodeagent_master_nodes_behind``)."""
        began = time.monotonic()
        short = False

        def parts() -> Iterator[None]:
            nonlocal short
            for _ in self.node_slices():
                if time.monotonic() - began >= SCRAPE_NODES_WITHIN:
                    short = True
                    return
                yield

        await in_slices(parts())
        return self.render(bring_rest=not short)

    def render(self, *, bring_rest: bool = True) -> tuple[bytes, str]:
        """The exposition text and content type; ``bring_rest`` false: the nodes left to
        take again are counted behind, not taken."""
        self._collector.bring_rest = bring_rest
        try:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        finally:
            self._collector.bring_rest = True
