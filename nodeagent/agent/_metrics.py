"""Prometheus metrics of one agent, in a registry of its own.

Gauges are read from the agent's ad at scrape time (never stale); request latency
is a histogram fed by the API's middleware; hook runs and health checks are counters
read from the agent's counts (since its start).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nodeagent.agent._hooks import HookCounts
from slots import EXPECTED_ATTRIBUTES

__all__ = ["AgentMetrics"]

_DRAIN_STATES = ("none", "pending", "draining", "drained")


class _AdCollector(Collector):
    def __init__(self, read_ad: Callable[[], dict[str, Any]]) -> None:
        self._read_ad = read_ad

    def collect(self) -> Iterator[Metric]:
        ad = self._read_ad()
        machine = ad["machine"]
        slots = GaugeMetricFamily(
            "nodeagent_slots",
            "Slots by type, state and activity",
            labels=["type", "state", "activity"],
        )
        counts: dict[tuple[str, str, str], int] = {}
        for slot in ad["slots"]:
            key = (slot["SlotType"], slot["State"], slot["Activity"])
            counts[key] = counts.get(key, 0) + 1
        for key, count in sorted(counts.items()):
            slots.add_metric(list(key), count)
        yield slots
        cpus = GaugeMetricFamily("nodeagent_claimed_cpus", "Cores held by dynamic slots")
        cpus.add_metric([], sum(s["Cpus"] for s in ad["slots"] if s["SlotType"] == "Dynamic"))
        yield cpus
        state = GaugeMetricFamily(
            "nodeagent_drain_state", "1 for the machine's current drain state", labels=["state"]
        )
        for name in _DRAIN_STATES:
            state.add_metric([name], 1 if machine["DrainState"] == name else 0)
        yield state
        start = GaugeMetricFamily("nodeagent_start", "1 when the machine accepts new claims")
        start.add_metric([], 1 if machine["Start"] else 0)
        yield start
        expected = GaugeMetricFamily(
            "nodeagent_expected_draining",
            "ExpectedMachine*Draining* values (completion: epoch s; badput: core-s)",
            labels=["schedule", "kind"],
        )
        for name in EXPECTED_ATTRIBUTES:
            body = name.removeprefix("ExpectedMachine")
            schedule, kind = body.split("Draining")
            expected.add_metric([schedule.lower(), kind.lower()], machine[name])
        yield expected
        for attr, metric, text in (
            ("TotalMachineDrainingBadput", "nodeagent_draining_badput_cpu_seconds",
             "TotalMachineDrainingBadput: work lost to drains"),
            ("TotalMachineDrainingUnclaimedTime", "nodeagent_draining_unclaimed_cpu_seconds",
             "TotalMachineDrainingUnclaimedTime: cores idle while draining"),
        ):  # fmt: skip
            family = GaugeMetricFamily(metric, text)
            family.add_metric([], machine[attr])
            yield family


class _CountsCollector(Collector):
    def __init__(self, read_counts: Callable[[], HookCounts]) -> None:
        self._read_counts = read_counts

    def collect(self) -> Iterator[Metric]:
        counts = self._read_counts()
        runs = CounterMetricFamily(
            "nodeagent_hook_runs", "Completion hook runs started, by hook", labels=["hook"]
        )
        failures = CounterMetricFamily(
            "nodeagent_hook_failures",
            "Completion hook runs that failed, did not start or were interrupted, by hook",
            labels=["hook"],
        )
        for name in sorted(set(counts.hook_runs) | set(counts.hook_failures)):
            runs.add_metric([name], counts.hook_runs[name])
            failures.add_metric([name], counts.hook_failures[name])
        yield runs
        yield failures
        checks = CounterMetricFamily("nodeagent_health_checks", "Health checks run")
        checks.add_metric([], counts.health_checks)
        yield checks
        failed = CounterMetricFamily(
            "nodeagent_health_check_failures", "Health checks that failed (or could not start)"
        )
        failed.add_metric([], counts.health_failures)
        yield failed


class AgentMetrics:
    """The metrics of one agent; ``render`` gives the exposition text and content type."""

    def __init__(
        self,
        read_ad: Callable[[], dict[str, Any]],
        *,
        require_auth: bool = True,
        counts: Callable[[], HookCounts] | None = None,
    ) -> None:
        self.require_auth = require_auth  # reloadable: read at every scrape
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_AdCollector(read_ad))
        if counts is not None:
            self.registry.register(_CountsCollector(counts))
        self._latency = Histogram(
            "nodeagent_http_request_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )

    def observe_request(self, method: str, route: str, status: int, started: float) -> None:
        self._latency.labels(method, route, str(status)).observe(time.perf_counter() - started)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
