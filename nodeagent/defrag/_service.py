"""The defrag service: cycles against the master's ads and the agents, on trio."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import trio

from nodeagent._clock import Clock
from nodeagent._peer import (
    AgentCallFailed,
    HttpAgentLink,
    PeerCallFailed,
    PeerClient,
    TokenFile,
    kept_alive,
)
from nodeagent._store import DocumentStore
from nodeagent.defrag._policy import (
    TRANSACTION_TTL,
    Cancel,
    Candidate,
    CostBaseline,
    CyclePlan,
    DefragPolicy,
    DefragStats,
    Pacing,
    draining_cost,
    estimate_acceptable,
    log,
    plan_cycle,
)

__all__ = ["CycleReport", "DefragLink", "DefragService", "HttpDefragLink", "MasterCallFailed"]


MasterCallFailed = PeerCallFailed
"""The name the service catches the master's refusals by (codes ``master.*`` or the
master's own, see :mod:`nodeagent._peer`)."""


class DefragLink(Protocol):
    """How the daemon reaches the pool (a fake pool stands in for it in tests).

    ``slot_ads`` and ``publish`` raise :class:`MasterCallFailed`; ``call_agent`` raises
    :class:`~nodeagent._peer.AgentCallFailed` with the agent's stable code (both are
    :class:`~nodeagent._peer.PeerCallFailed`).
    """

    async def slot_ads(self) -> list[dict[str, Any]]: ...

    async def publish(self, ad: dict[str, Any]) -> None: ...

    async def call_agent(
        self, address: str, method: str, path: str, *, body: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...


class HttpDefragLink:
    """The real link: the master's ``/v1/ads`` with a DAEMON token read from ``token_file``
    (at the first request, and again after a 401 or :meth:`reconfigure`), and the agents'
    API with a short-lived ADMINISTRATOR token minted from the pool key (subject
    ``defrag:defrag-<name>``, recorded as the drain's requester; minted once and reused
    until near its expiry).

    While a session is open (``async with link:``, which :meth:`DefragService.run` does)
    the connections to the master and to each agent are kept between calls; leaving it, or
    :meth:`aclose`, closes them (see :class:`~nodeagent._peer.PeerClient`).
    """

    def __init__(
        self,
        *,
        master_url: str,
        token_file: Path | None,
        key: bytes,
        name: str,
        timeout: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self.actor = f"defrag-{name}"
        self._master = PeerClient("master", timeout=timeout, max_idle_peers=1)
        self._agents = HttpAgentLink(key, timeout=timeout, subject_prefix="defrag", clock=clock)
        self.reconfigure(master_url=master_url, token_file=token_file, timeout=timeout)

    def reconfigure(self, *, master_url: str, token_file: Path | None, timeout: float) -> None:
        """Apply a reloaded ``master_url``, ``token_file`` and ``agent_timeout`` from the next
        call on; the token file is read again then."""
        self.master_url = master_url.rstrip("/")
        self.token_file = token_file
        self._credentials = None if token_file is None else TokenFile(token_file, peer="master")
        self.timeout = timeout

    @property
    def timeout(self) -> float:
        """Seconds to connect and for each read and write, to the master and the agents."""
        return self._master.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._master.timeout = value
        self._agents.timeout = value

    async def __aenter__(self) -> Self:
        await self._master.__aenter__()
        await self._agents.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._agents.__aexit__(exc_type, exc, tb)
        finally:
            await self._master.__aexit__(exc_type, exc, tb)

    async def aclose(self) -> None:
        """Close the kept connections; later calls open their own."""
        try:
            await self._agents.aclose()
        finally:
            await self._master.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        return await self._master.request(
            method,
            self.master_url + path,
            credentials=self._credentials,
            json=json,
            params=params,
        )

    async def slot_ads(self) -> list[dict[str, Any]]:
        reply = await self._request(
            "GET", "/v1/ads", params={"slots": "true", "constraint": "PartitionableSlot =?= true"}
        )
        ads = reply.get("ads") if isinstance(reply, dict) else None
        if not isinstance(ads, list):
            raise MasterCallFailed("master.bad_reply", "/v1/ads: no 'ads' list")
        return [ad for ad in ads if isinstance(ad, dict)]

    async def publish(self, ad: dict[str, Any]) -> None:
        await self._request("POST", "/v1/ads", json={"machine": ad, "slots": []})

    async def call_agent(
        self, address: str, method: str, path: str, *, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await self._agents.call(address, method, path, actor=self.actor, body=body)


# --- the service --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CycleReport:
    """What one cycle did (for logs and tests)."""

    plan: CyclePlan | None
    started: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()


@dataclass
class DefragService:
    """Runs the cycles and publishes the statistics; see the module docstring.

    ``store`` (optional) keeps the pacing across restarts. ``identity`` is merged into the
    published ad (``MyAddress``, ``DaemonStartTime``).
    """

    policy: DefragPolicy
    link: DefragLink
    clock: Clock
    store: DocumentStore | None = None
    update_interval: float = 60.0
    identity: dict[str, Any] = field(default_factory=dict)
    stats: DefragStats = field(default_factory=DefragStats)
    pacing: Pacing = field(default_factory=Pacing)
    baselines: dict[str, CostBaseline] = field(default_factory=dict)
    _wake: trio.Event | None = None
    _publish: trio.Event | None = None

    def load(self) -> None:
        """Restore the pacing saved by a previous run."""
        if self.store is not None:
            self.pacing = Pacing.from_json(self.store.load("pacing"))

    def _save(self) -> None:
        if self.store is not None:
            self.store.save(pacing=self.pacing.to_json())

    def wake(self) -> None:
        """Run a cycle now (after a reload)."""
        if self._wake is not None:
            self._wake.set()

    def ad(self) -> dict[str, Any]:
        """The Defrag ad: identity and statistics."""
        now = self.clock.now()
        return {
            "MyType": "Defrag",
            "Name": f"defrag-{self.policy.name}",
            "DefragName": self.policy.name,
            "DrainReason": self.policy.reason,
            "MyCurrentTime": int(now),
            **self.identity,
            **self.stats.ad(now),
        }

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Cycle every ``interval`` and publish every ``update_interval``, forever.

        The first cycle comes one interval after the last saved one (at once if none). The
        link's connections are kept while this runs and closed when it ends
        (:func:`~nodeagent._peer.kept_alive`).
        """
        self._publish = trio.Event()
        self._publish.set()  # push the ad at once
        async with kept_alive(self.link), trio.open_nursery() as nursery:
            nursery.start_soon(self._publisher)
            task_status.started()
            self._wake = trio.Event()
            while True:
                last = self.pacing.last_poll
                if last is not None:
                    delay = last + self.policy.interval - self.clock.now()
                    if delay > 0:
                        with trio.move_on_after(delay):
                            await self._wake.wait()
                self._wake = trio.Event()
                await self.cycle()

    async def _publisher(self) -> None:
        """Push the ad when nudged (after each cycle), else every ``update_interval``."""
        while True:
            if self._publish is not None:
                with trio.move_on_after(self.update_interval):
                    await self._publish.wait()
            self._publish = trio.Event()
            try:
                await self.link.publish(self.ad())
            except MasterCallFailed as exc:
                log.warning("cannot push the Defrag ad: %s", exc)

    async def cycle(self) -> CycleReport:
        """One cycle: read the ads, cancel, drain, publish. Never raises for a link error."""
        now = self.clock.now()
        try:
            ads = await self.link.slot_ads()
        except MasterCallFailed as exc:
            self.stats.query_failures += 1
            self.pacing = Pacing(last_poll=now, carry=self.pacing.carry)
            self._save()
            log.warning("cycle skipped: cannot read the ads: %s", exc)
            self._nudge_publisher()
            return CycleReport(plan=None)
        plan = plan_cycle(ads, self.policy, now=now, pacing=self.pacing)
        self.pacing = plan.pacing
        self._save()
        self.stats.observe(plan)
        avg_badput, avg_unclaimed, self.baselines = draining_cost(ads, self.baselines)
        self.stats.avg_draining_badput = avg_badput
        self.stats.avg_draining_unclaimed = avg_unclaimed
        log.info(
            "%d draining, %d whole; earned %.3f drains, may start %d%s",
            len(plan.draining),
            len(plan.whole),
            plan.credit,
            plan.wanted,
            f" ({plan.why})" if plan.why else "",
        )
        cancelled = [c.machine for c in plan.cancels if await self._cancel(c)]
        started: list[str] = []
        skipped: list[str] = []
        failed: list[str] = []
        for candidate in plan.candidates:
            if len(started) >= plan.wanted:
                break
            outcome = await self._drain(candidate)
            {"success": started, "skip": skipped, "failure": failed}[outcome].append(
                candidate.machine
            )
        self._nudge_publisher()
        return CycleReport(
            plan=plan,
            started=tuple(started),
            skipped=tuple(skipped),
            failed=tuple(failed),
            cancelled=tuple(cancelled),
        )

    def _nudge_publisher(self) -> None:
        if self._publish is not None:
            self._publish.set()

    async def _cancel(self, cancel: Cancel) -> bool:
        try:
            await self.link.call_agent(
                cancel.address, "POST", f"/v1/drain/{cancel.request_id}/cancel"
            )
        except AgentCallFailed as exc:
            log.warning("%s: cannot cancel drain %s: %s", cancel.machine, cancel.request_id, exc)
            return False
        self.stats.record("cancel", cancel.machine, self.clock.now())
        log.info("%s: cancelled drain %s (cancel requirements)", cancel.machine, cancel.request_id)
        return True

    async def _drain(self, candidate: Candidate) -> str:
        """Phase 1, compare, commit. Returns ``success``, ``skip`` or ``failure``."""
        policy = self.policy
        what = str(policy.schedule)
        body: dict[str, Any] = {
            "schedule": what,
            "reason": policy.reason,
            "on_completion": "resume",
            "ttl": TRANSACTION_TTL,
        }
        if policy.draining_start_expr is not None:
            body["start"] = policy.draining_start_expr
        address = candidate.address
        try:
            phase1 = await self.link.call_agent(address, "POST", "/v1/drain", body=body)
            request_id = str(phase1["id"])
        except (AgentCallFailed, KeyError) as exc:
            return self._failed(candidate, what, f"phase 1: {exc}")
        estimate = phase1.get("estimate") or {}
        fresh = estimate.get("badput") if isinstance(estimate, dict) else None
        if not estimate_acceptable(candidate.badput, fresh, policy.max_badput_increase):
            await self._abandon(candidate, request_id)
            self.stats.record("skip", candidate.machine, self.clock.now(), what)
            log.info(
                "%s: skipped: badput %s now, %s when ranked (more than %g×)",
                candidate.machine,
                fresh,
                candidate.badput,
                policy.max_badput_increase,
            )
            return "skip"
        try:
            await self.link.call_agent(address, "POST", f"/v1/drain/{request_id}/commit")
        except AgentCallFailed as exc:
            await self._abandon(candidate, request_id)
            return self._failed(candidate, what, f"commit: {exc}")
        self.stats.record("success", candidate.machine, self.clock.now(), what)
        log.info(
            "%s: %s drain %s started (badput %s, rank %g)",
            candidate.machine,
            what,
            request_id,
            fresh,
            candidate.rank,
        )
        return "success"

    def _failed(self, candidate: Candidate, what: str, message: str) -> str:
        self.stats.record("failure", candidate.machine, self.clock.now(), what)
        log.warning("%s: drain failed: %s", candidate.machine, message)
        return "failure"

    async def _abandon(self, candidate: Candidate, request_id: str) -> None:
        """Cancel a pending transaction; if that fails, the agent expires it by itself."""
        try:
            await self.link.call_agent(candidate.address, "POST", f"/v1/drain/{request_id}/cancel")
        except AgentCallFailed as exc:
            log.warning(
                "%s: cannot cancel pending drain %s (it expires in %g s): %s",
                candidate.machine,
                request_id,
                TRANSACTION_TTL,
                exc,
            )
