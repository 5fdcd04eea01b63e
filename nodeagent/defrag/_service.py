"""The defrag service: cycles against the master's ads and the agents, on trio.

Each drain the service starts is recorded (:mod:`._records`) once phase 1 names its
request, and the record saved with the pacing before the commit; a cycle never acts on an
ad older than that record.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import trio

from nodeagent._agent_calls import AgentCalls, DrainBody, Transaction
from nodeagent._clock import Clock
from nodeagent._master_calls import MasterCalls, UnusableReply
from nodeagent._peer import (
    AgentCallFailed,
    HttpAgentLink,
    PeerCallFailed,
    PeerClient,
    TokenFile,
    kept_alive,
)
from nodeagent._store import Documents, StoreError
from nodeagent._when import in_words
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
    with_machine_ads,
)
from nodeagent.defrag._records import DrainRecord, records_from_json, records_to_json

__all__ = ["CycleReport", "DefragLink", "DefragService", "HttpDefragLink", "MasterCallFailed"]


MasterCallFailed = PeerCallFailed
"""The name the service catches the master's refusals by (codes ``master.*`` or the
master's own, see :mod:`nodeagent._peer`)."""


class DefragLink(Protocol):
    """How the daemon reaches the pool (a fake pool stands in for it in tests).

    ``slot_ads``, ``machine_ads`` and ``publish`` raise :class:`MasterCallFailed`.
    ``agent`` names one agent's calls (:class:`~nodeagent._agent_calls.AgentCalls`), which
    raise :class:`~nodeagent._peer.AgentCallFailed` with the agent's stable code (both are
    :class:`~nodeagent._peer.PeerCallFailed`): ``address`` is its ``MyAddress``, ``node``
    the receiving machine (its slot ads' ``Machine``, which the master took from that
    node's own token only), to which the token each call carries is bound.
    """

    async def slot_ads(self) -> list[dict[str, Any]]: ...

    async def machine_ads(self, machine: str) -> list[dict[str, Any]]: ...

    async def publish(self, ad: dict[str, Any]) -> None: ...

    def agent(self, address: str, *, node: str) -> AgentCalls: ...


class HttpDefragLink:
    """The real link: the masters' ads (:class:`~nodeagent._master_calls.MasterCalls`)
    with a DAEMON token read from ``token_file`` (at the first request, and again after a
    401 or :meth:`reconfigure`), and the agents' API
    (:class:`~nodeagent._agent_calls.AgentCalls`) with a short-lived token minted from the
    pool key for each node and scope (:class:`~nodeagent._peer.HttpAgentLink`: subject
    ``defrag:defrag-<name>``, recorded as the drain's requester; bound to the node; minted
    once and reused until near its expiry).

    The masters are ``master_url`` (one) or ``master_urls`` (several, sharing one state),
    not both. :meth:`slot_ads` reads the ads from the first master, in that order, that
    answers: one that cannot be reached, times out or answers 5xx is passed over for the
    next (a refusal, such as a 401, is not). :meth:`publish` pushes the Defrag ad to every
    master at the same time.

    While a session is open (``async with link:``, which :meth:`DefragService.run` does)
    the connections to each master and to each agent are kept between calls; leaving it,
    or :meth:`aclose`, closes them (see :class:`~nodeagent._peer.PeerClient`).
    """

    def __init__(
        self,
        *,
        master_url: str | None = None,
        master_urls: Sequence[str] = (),
        token_file: Path | None,
        key: bytes,
        name: str,
        timeout: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self.actor = f"defrag-{name}"
        self._master = PeerClient("master", timeout=timeout)
        self._agents = HttpAgentLink(key, timeout=timeout, subject_prefix="defrag", clock=clock)
        #: The master the last ads were read from (``None`` before the first read).
        self.read_from: str | None = None
        self.reconfigure(
            master_url=master_url, master_urls=master_urls, token_file=token_file, timeout=timeout
        )

    def reconfigure(
        self,
        *,
        master_url: str | None = None,
        master_urls: Sequence[str] = (),
        token_file: Path | None,
        timeout: float,
    ) -> None:
        """Apply a reloaded ``master_url`` or ``master_urls``, ``token_file`` and
        ``agent_timeout`` from the next call on; the token file is read again then.

        Raises ValueError unless exactly one of ``master_url`` and ``master_urls`` names
        the masters (nothing is changed then)."""
        if (master_url is None) == (not master_urls):
            raise ValueError("give master_url (one master) or master_urls (several), not both")
        urls = (master_url,) if master_url is not None else tuple(master_urls)
        self.master_urls = tuple(url.rstrip("/") for url in urls)
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

    def _calls(self, url: str) -> MasterCalls:
        return MasterCalls(peer=self._master, url=url, credentials=self._credentials)

    async def slot_ads(self) -> list[dict[str, Any]]:
        """The partitionable slot ads (one a machine: what a cycle ranks) of the first
        master that answers (see the class docstring); raises :class:`MasterCallFailed`
        naming each master when none did, and the first answer that is not a list of ads
        (:class:`~nodeagent._master_calls.UnusableReply`) as it is. A machine's jobs (its
        dynamic slot ads) are read only for a candidate whose badput check needs them
        (:meth:`machine_ads`), so that a cycle reads one ad a machine, not one a job."""
        passed: list[str] = []
        last: MasterCallFailed | None = None
        for url in self.master_urls:
            try:
                ads = await self._calls(url).slot_ads(constraint=_PARTITIONABLE)
            except MasterCallFailed as exc:
                if not _another_may_answer(exc):
                    raise
                passed.append(f"{url}: {exc.message}")
                last = exc
                continue
            if passed:
                log.info("ads read from %s; passed over %s", url, "; ".join(passed))
            self.read_from = url
            return ads
        assert last is not None  # there is at least one master
        if len(passed) == 1:
            raise last
        raise MasterCallFailed(last.code, "no master answered: " + "; ".join(passed), last.status)

    async def machine_ads(self, machine: str) -> list[dict[str, Any]]:
        """Every slot ad of one machine (``GET /v1/ads/{machine}``) from the master the
        last cycle read (else the first); raises :class:`MasterCallFailed`."""
        return await self._calls(self.read_from or self.master_urls[0]).machine_ads(machine)

    async def publish(self, ad: dict[str, Any]) -> None:
        """Push the Defrag ad to every master at once; raises :class:`MasterCallFailed`
        naming those that did not take it (the others did)."""
        failed: dict[str, MasterCallFailed] = {}

        async def push(url: str) -> None:
            try:
                await self._calls(url).push_ad({"machine": ad, "slots": []})
            except MasterCallFailed as exc:
                failed[url] = exc

        async with trio.open_nursery() as nursery:
            for url in self.master_urls:
                nursery.start_soon(push, url)
        ordered = [(url, failed[url]) for url in self.master_urls if url in failed]
        if not ordered:
            return
        first = ordered[0][1]
        if len(self.master_urls) == 1:
            raise first
        raise MasterCallFailed(
            first.code,
            "not taken by " + "; ".join(f"{url}: {exc.message}" for url, exc in ordered),
            first.status,
        )

    def agent(self, address: str, *, node: str) -> AgentCalls:
        """The calls to the agent ``node`` at ``address``, recorded as this daemon's."""
        return AgentCalls.over(self._agents, address, node=node, actor=self.actor)


#: The slot ads a cycle reads: the partitionable ones, one a machine.
_PARTITIONABLE = "PartitionableSlot =?= true"


def _another_may_answer(exc: MasterCallFailed) -> bool:
    """Whether another master may answer where this one failed: no reply (unreachable,
    timed out) or a 5xx; not a refusal, nor a reply that is not a list of ads, nor the
    caller's own token file."""
    if exc.code == "master.token_file" or isinstance(exc, UnusableReply):
        return False
    return exc.status is None or exc.status >= 500


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

    ``store`` (optional) keeps the pacing and the records of the drains across restarts
    (and leaders). ``identity`` is merged into the published ad (``MyAddress``,
    ``DaemonStartTime``). ``drains``: the records of this daemon's drains that no ad has
    shown yet, by machine.
    """

    policy: DefragPolicy
    link: DefragLink
    clock: Clock
    store: Documents | None = None
    update_interval: float = 60.0
    identity: dict[str, Any] = field(default_factory=dict)
    stats: DefragStats = field(default_factory=DefragStats)
    pacing: Pacing = field(default_factory=Pacing)
    baselines: dict[str, CostBaseline] = field(default_factory=dict)
    drains: dict[str, DrainRecord] = field(default_factory=dict)
    _wake: trio.Event | None = None
    _publish: trio.Event | None = None

    def load(self) -> None:
        """Restore the pacing and the records of the drains saved by a previous run."""
        if self.store is not None:
            self.pacing = Pacing.from_json(self.store.load("pacing"))
            self.drains = records_from_json(self.store.load("drains"))

    def _save(self) -> None:
        if self.store is not None:
            self.store.save(pacing=self.pacing.to_json(), drains=records_to_json(self.drains))

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
        plan = plan_cycle(ads, self.policy, now=now, pacing=self.pacing, records=self.drains)
        self.pacing = plan.pacing
        self.drains = {record.machine: record for record in plan.records}
        self._save()
        self.stats.observe(plan)
        avg_badput, avg_unclaimed, self.baselines = draining_cost(ads, self.baselines)
        self.stats.avg_draining_badput = avg_badput
        self.stats.avg_draining_unclaimed = avg_unclaimed
        log.info(
            "%d draining (%d not in the ads yet), %d whole; earned %.3f drains, may start %d%s",
            len(plan.draining),
            len(plan.unseen),
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
        agent = self.link.agent(cancel.address, node=cancel.machine)
        try:
            cancelled = await agent.cancel(cancel.request_id)
        except AgentCallFailed as exc:
            log.warning("%s: cannot cancel drain %s: %s", cancel.machine, cancel.request_id, exc)
            return False
        if not cancelled:
            log.warning(
                "%s: cannot cancel drain %s: it is not in force", cancel.machine, cancel.request_id
            )
            return False
        self.stats.record("cancel", cancel.machine, self.clock.now())
        log.info("%s: cancelled drain %s (cancel requirements)", cancel.machine, cancel.request_id)
        return True

    async def _drain(self, candidate: Candidate) -> str:
        """Phase 1, record, compare, commit (one
        :meth:`~nodeagent._agent_calls.AgentCalls.transaction`). Returns ``success``,
        ``skip`` or ``failure``.

        The record of the drain is saved before the commit: a
        :class:`~nodeagent._store.StoreError` there (with etcd, also the loss of
        leadership) is raised with the transaction uncommitted, and cancelled if it can be
        (else the agent expires it after its ``ttl``). A transaction the daemon declines
        (a skip) or whose commit fails is cancelled by :meth:`_abandon`; one left by
        anything else (the daemon stopping, say) is cancelled by the transaction itself.
        """
        policy = self.policy
        what = str(policy.schedule)
        body = DrainBody(
            schedule=what,
            reason=policy.reason,
            on_completion="resume",
            ttl=TRANSACTION_TTL,
            start=policy.draining_start_expr,
        )
        agent = self.link.agent(candidate.address, node=candidate.machine)
        async with AsyncExitStack() as stack:
            try:
                tx = await stack.enter_async_context(agent.transaction(body))
            except (AgentCallFailed, ValueError) as exc:
                return self._failed(candidate, what, f"phase 1: {exc}")
            return await self._decide(candidate, tx, what)

    async def _decide(self, candidate: Candidate, tx: Transaction, what: str) -> str:
        """:meth:`_drain` after phase 1: record, compare, save, commit."""
        policy = self.policy
        phase1 = tx.phase1
        record = DrainRecord(
            machine=candidate.machine,
            request_id=tx.request_id,
            committed=False,
            at=self._node_time(phase1.created_at),
        )
        previous, self.drains[candidate.machine] = self.drains.get(candidate.machine), record
        fresh = phase1.estimate.get("badput")
        # the promise as of the fresh estimate's instant (the node's clock), not the ad's
        at = self._node_time(phase1.estimate.get("now"), phase1.created_at)
        ranked = candidate.badput_at(at)
        if not estimate_acceptable(ranked, fresh, policy.max_badput_increase):
            candidate = await self._with_jobs(candidate)
            ranked = candidate.badput_at(at)
        if not estimate_acceptable(ranked, fresh, policy.max_badput_increase):
            await self._abandon(candidate, tx, previous)
            self.stats.record("skip", candidate.machine, self.clock.now(), what)
            log.info(
                "%s: skipped: badput %s now, more than %g× the %s its ad gives by now "
                "(%s when ranked)",
                candidate.machine,
                fresh,
                policy.max_badput_increase,
                ranked,
                candidate.badput,
            )
            return "skip"
        try:
            self._save()  # written before the commit
        except StoreError:
            await self._abandon(candidate, tx, previous)
            raise
        try:
            committed = await tx.commit()
        except AgentCallFailed as exc:
            await self._abandon(candidate, tx, previous)
            return self._failed(candidate, what, f"commit: {exc}")
        at = self._node_time(committed.committed_at)
        self.drains[candidate.machine] = replace(record, committed=True, at=at)
        self.stats.record("success", candidate.machine, self.clock.now(), what)
        log.info(
            "%s: %s drain %s started (badput %s, rank %g)",
            candidate.machine,
            what,
            tx.request_id,
            fresh,
            candidate.rank,
        )
        return "success"

    def _failed(self, candidate: Candidate, what: str, message: str) -> str:
        self.stats.record("failure", candidate.machine, self.clock.now(), what)
        log.warning("%s: drain failed: %s", candidate.machine, message)
        return "failure"

    async def _with_jobs(self, candidate: Candidate) -> Candidate:
        """``candidate`` with its machine's jobs, to bring its promise forward
        (:meth:`Candidate.badput_at`), when its ads hold none (a cycle reads one ad a
        machine): the master's ads of that machine now (:func:`with_machine_ads`).
        Unchanged when the ads already hold the jobs or cannot be read (the check then
        compares with the ranked figure as it was)."""
        if any(ad.get("PartitionableSlot") is False for ad in candidate.ads):
            return candidate
        try:
            ads = await self.link.machine_ads(candidate.machine)
        except MasterCallFailed as exc:
            log.info("%s: its jobs' ads cannot be read: %s", candidate.machine, exc)
            return candidate
        return with_machine_ads(candidate, ads)

    def _node_time(self, *values: Any) -> float:
        """An instant an agent's reply gives (its clock): the first of ``values`` that is
        a number; the daemon's own clock stands in when none is."""
        for value in values:
            if (
                not isinstance(value, bool)
                and isinstance(value, int | float)
                and math.isfinite(value)
            ):
                return float(value)
        return self.clock.now()

    async def _abandon(
        self, candidate: Candidate, tx: Transaction, previous: DrainRecord | None
    ) -> None:
        """Cancel a pending transaction (or one whose commit failed): the drain never was,
        and the machine's record is ``previous`` again (that of the drain before, if any).
        If the cancel fails, or the agent no longer has the request, the agent expires the
        transaction by itself, and its record stays (until an ad shows what became of
        it)."""
        try:
            cancelled = await tx.cancel()
        except AgentCallFailed as exc:
            why = str(exc)
        else:
            if cancelled:
                if previous is None:
                    self.drains.pop(candidate.machine, None)
                else:
                    self.drains[candidate.machine] = previous
                return
            why = "it is not in force"
        log.warning(
            "%s: cannot cancel pending drain %s (it expires in %s): %s",
            candidate.machine,
            tx.request_id,
            in_words(TRANSACTION_TTL),
            why,
        )
