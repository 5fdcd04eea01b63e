"""Prometheus metrics of the master, in a registry of its own, read at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from nodeagent.master._leader import LeaderView
    from nodeagent.master._master import Master
    from nodeagent.master._notify import Notifier

__all__ = ["MasterMetrics"]


class _MasterCollector(Collector):
    def __init__(self, master: Master) -> None:
        self._master = master
        self.leader: LeaderView | None = None
        self.notifier: Notifier | None = None

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
        entries = master.ads.entries()
        lost = sum(1 for e in entries if master.ads.lost(e, now))
        nodes.add_metric(["live"], len(entries) - lost)
        nodes.add_metric(["lost"], lost)
        yield nodes
        for name, value, text in (
            ("nodeagent_master_ads_received", master.ads.received, "Ads received"),
            ("nodeagent_master_ads_expired", master.ads.expired, "Ads that expired (node lost)"),
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
        ):  # fmt: skip
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], value)
            yield counter
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
        self._latency = Histogram(
            "nodeagent_master_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )

    def show_leadership(self, leader: LeaderView) -> None:
        """Export whether this master leads (``nodeagent_master_leading``) and its terms."""
        self._collector.leader = leader

    def show_notifier(self, notifier: Notifier) -> None:
        """Export the webhooks' lag, failures and last deliveries."""
        self._collector.notifier = notifier

    def observe_request(self, method: str, route: str, started: float) -> None:
        self._latency.labels(method, route).observe(time.perf_counter() - started)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
