"""The master: node ads, the maintenance schedule, the plan, and the drains it drives.

State: the schedule and machine modes (:class:`~nodeagent.master._maintenance.MaintenanceState`)
and the drains the master started live in SQLite, saved before a request is answered;
ads are soft state, re-sent by the agents. A reconcile pass — every
``reconcile_interval``, and at once after any schedule change — compares the schedule
with the ads and acts. What it does for each machine is decided by the pure model
(:func:`~nodeagent.master._drains.decide`, with the machine's
:class:`~nodeagent.master._drains.DrainRecord`); :class:`Master` is the shell that carries
the step out (its calls to the node through :class:`~nodeagent._agent_calls.AgentCalls`,
then the record written):

* a DRAINING machine's node gets a graceful drain (reason ``maintenance``, two-phase:
  estimate, then commit) at its planned start (just in time, or at once);
* when its window starts and the node is not empty, the drain escalates, whatever the
  order of events (see :func:`~nodeagent.master._drains.decide`): with ``quick`` a drain
  started before the window carries the window start as its deadline, so the agent itself
  evicts at that instant; a drain started once the window has opened (the master was down
  across it) is started ``quick`` (or ``fast``) at once; a drain of the master's whose
  deadline the ad does not show at or before the window (never set, lost, or the window
  moved earlier) is replaced by a ``quick`` one; ``fast`` replaces the drain by a fast one.
  A plan row says ``escalated`` only once the node has been told;
* a DOWN machine's node is fast-drained and stays closed;
* a machine brought up (or dropped from the schedule) has the master's drain cancelled,
  so its node resumes.

Modes change only by operator request, as in Mesos.

**Its own record first.** A drain the master starts is recorded (saved) after phase 1
returns its request id and before the commit, in phase ``pending``; the commit's reply
moves it to ``committed`` (with the node's ``committed_at``). A pass never acts on an ad
older than that record (:func:`~nodeagent.master._drains.ad_knows`: the ad shows that
request id or a later one, or was made after the commit): before the window it waits for
the next ad, from the window on it fetches one. A record left ``pending`` (the commit
failed, or the master stopped between record and commit) is settled from the node's ad,
fetched (:func:`~nodeagent.master._drains.settle`): the drain is committed (adopted:
escalated at the window like any other), still pending (cancelled, and the record
forgotten: the next pass starts one as the window then requires), or gone (forgotten; an
abandoned transaction expires on the agent after its ``ttl``). The two-phase drain
recorded before its commit is written once, :meth:`Master.drain_transaction`, which
rolling operations use too (:mod:`nodeagent.master._rolling`, which takes a machine from
the passes with :meth:`Master.hold` and gives it back with :meth:`Master.release_hold`).

**No verdict from an ad that predates the truth.** The master remembers when each
machine entered its window (the schedule change, by its clock; soft state, since every
ad a restarted master holds is newer). A scheduled node whose stored ad predates that
change has its ad fetched (:meth:`Master.refresh_figures`: at most once per change and
node, ``fetch_concurrency`` at a time, within ``fetch_timeout``); a pass starts that in
the background and a plan waits for it. A node that does not answer keeps its old
figures, which its plan row flags ``figures_stale``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import time
from collections import OrderedDict
from collections.abc import (
    Callable,
    Collection,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any

import trio

from nodeagent._agent_calls import AgentCalls, Committed, DrainBody, Phase1
from nodeagent._auth import PoolToken
from nodeagent._clock import Clock
from nodeagent._peer import AgentCallFailed, AgentLink, kept_alive
from nodeagent._store import Documents, Fixed, Members, StoreError, store_text
from nodeagent._when import in_words, iso_time
from nodeagent.master._adstore import AdEntry, AdStore, MovedOnAd, NodeAd, PackedSlots, foreign_ad
from nodeagent.master._drains import (
    ABSENT,
    COMMITTED,
    PENDING,
    REASON,
    STARTING,
    BringUp,
    Down,
    DrainRecord,
    Escalate,
    MarkDown,
    Postpone,
    Refresh,
    RememberLate,
    Start,
    Step,
    Withdraw,
    ad_knows,
    decide,
    release,
    settle,
)
from nodeagent.master._event_drafts import (
    drain_event,
    escalation,
    evicted_cuts,
    leader_elected,
    mode_changes,
    node_back,
    node_changes,
    node_lost,
    node_shutdown_changes,
    notice_answered,
    notice_issued,
    notice_rescinded,
    operation_changes,
    schedule_changed,
)
from nodeagent.master._event_stream import EventHub
from nodeagent.master._events import Draft, Event, member_key
from nodeagent.master._maintenance import (
    MachineId,
    MachineStatus,
    MaintenanceError,
    MaintenanceSchedule,
    MaintenanceState,
    Mode,
    Window,
)
from nodeagent.master._notices import (
    Answer,
    Notice,
    NoticeClaim,
    NoticeWindow,
    Verdict,
    accepted_machines,
    claims_of_slots,
    every_claim_grouped,
    notice_from_json,
    reconcile_notices,
)
from nodeagent.master._pass_index import DueTimes, PassIndex, changed_machines, next_due
from nodeagent.master._plan import (
    MachinePlan,
    PlanPolicy,
    machine_key,
    machine_plan,
    planned_escalation,
    row_figures,
    row_state,
)
from nodeagent.master._plan_ledger import AdChanges
from nodeagent.master._plan_view import PlanInputs, PlanView
from nodeagent.master._preview import (
    ScheduleChanged,
    SchedulePreview,
    preview_down,
    schedule_version,
)
from slots import InvalidRequest

__all__ = ["COMMITTED", "PENDING", "Master", "MasterCounters", "ad_knows", "loop_idle"]

log = logging.getLogger("nodeagent.master")

#: No machine's notices all accepted (``on_all_accepted`` is not ``drain_now``): one
#: object, which a pass compares by identity.
_NONE_ACCEPTED: frozenset[str] = frozenset()

#: A node whose drain request fails is retried after 2, 4, 8 … passes, at most this long.
_MAX_BACKOFF = 60.0


#: The most shares of the plan's totals kept between replies a summary or a scrape remakes
#: itself (≈ 0.2 ms each whose forecast is made, ≈ 1 ms else), and for how long at most
#: (seconds of work): it answers at once with the others as they were and says how many
#: (``behind``); :meth:`Master.keep_totals` brings the rest in.
_ANSWER_SHARES = 250
_ANSWER_SECONDS = 0.05

#: The shares :meth:`Master.keep_totals` brings in a slice, and for how long after the
#: last read it keeps them current (seconds).
_LEDGER_SLICE = 50
#: The looks at forecasts already made (≈ 30–60 µs each) between two readings of a
#: pass's work clock (:meth:`Master._forecasts_ahead`).
_LOOKS_A_CLOCK = 32
_KEEP_WARM_FOR = 300.0


async def _in_slices(slices: Iterator[None], idle: Callable[[], bool]) -> None:
    """Run ``slices`` (a pass's work, yielding between its slices), serving the others
    between two slices for as long as the slice took: a pass never holds more than half of
    the event loop, however many of its rounds the others' requests take (an ad prepared
    by an ingest worker takes three). Unless the loop is ``idle`` (:func:`loop_idle`)
    before and after one turn of it, in which the loop also reads what its sockets
    hold: then nobody waits, and the next slice comes at once."""
    began = trio.current_time()
    for _ in slices:
        if idle():
            await trio.lowlevel.checkpoint()
            if idle():
                began = trio.current_time()
                continue
        await trio.sleep(trio.current_time() - began)
        began = trio.current_time()


def loop_idle() -> bool:
    """Whether no other task of the running trio loop is ready to run (a request, an
    ad, a reply being written): what :attr:`Master.loop_idle` asks on a daemon."""
    return trio.lowlevel.current_statistics().tasks_runnable == 0


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleChange:
    """What replacing the schedule of the state ``base`` (with ``base_actors``) by
    ``schedule`` at ``actor``'s request makes (:func:`change_schedule`): the new state
    and actors, its version, its events and its snapshot's JSON. Pure,
    made off the event loop (a schedule of 100,000 machines takes seconds to check,
    snapshot and encode); :meth:`Master.set_schedule` carries it out while the master
    still holds ``base`` and ``base_actors``, else makes it anew."""

    base: MaintenanceState
    base_actors: dict[str, str]
    schedule: MaintenanceSchedule
    actor: str
    state: MaintenanceState
    actors: dict[str, str]
    #: Each machine's window in ``base`` (the machines entering a window are noted).
    windows_before: dict[str, Window | None]
    version: str
    events: list[Draft]
    #: The JSON of the new state's snapshot, as the store writes it.
    text: str


def change_schedule(
    base: MaintenanceState,
    base_actors: dict[str, str],
    schedule: MaintenanceSchedule,
    *,
    actor: str,
) -> ScheduleChange:
    """:class:`ScheduleChange` of ``base`` (never changed: a copy is changed). Raises
    :class:`MaintenanceError` for a schedule Mesos refuses."""
    state = copy.copy(base)  # mutators install new containers: a copy is apart
    state.update_schedule(schedule)
    scheduled = {machine_key(m.id) for m in state.machines()}
    actors = {k: v for k, v in base_actors.items() if k in scheduled}
    for key in scheduled:
        actors.setdefault(key, actor)
    version = schedule_version(state)
    events = [
        schedule_changed(base, state, actor=actor, version=version),
        *mode_changes(base, state, actor=actor),
    ]
    return ScheduleChange(
        base=base,
        base_actors=base_actors,
        schedule=schedule,
        actor=actor,
        state=state,
        actors=actors,
        windows_before={machine_key(m.id): m.window for m in base.machines()},
        version=version,
        events=events,
        text=store_text(state.snapshot()),
    )


@dataclass
class MasterCounters:
    """What the master counts (exported as metrics; survives restarts)."""

    drains_started: int = 0
    drains_escalated: int = 0
    drains_cancelled: int = 0
    down_drains: int = 0
    drain_failures: int = 0


#: What a reconcile pass reads from a node's ad, besides the time (see ``decide``).
_RECONCILE_ATTRIBUTES = (
    "Machine",
    "MachineIp",
    "MyAddress",
    "DrainState",
    "DrainingRequestId",
    "DrainSchedule",
    "DrainingDeadline",
    "MaxJobRetirementTime",
    "MachineMaxVacateTime",
    "ShuttingDown",
)


def _reconcile_key(entry: AdEntry) -> tuple[Any, ...]:
    machine = entry.machine
    return tuple(machine.get(name) for name in _RECONCILE_ATTRIBUTES)


#: A scheduled machine's claims by group with their verdicts, what they were read from
#: (its key, window, planned escalation, its node's name and :func:`_ad_version`), and the
#: last whole second they hold (that of the forecast's piece they were read from).
_ClaimsRead = tuple[tuple[Any, ...], dict[str, tuple[NoticeClaim, ...]], float]


def _ad_version(entry: AdEntry) -> object:
    """What a node's claims are read from: its ad's basis (the same for the ad moved on in
    time, :func:`~nodeagent.master._adstore.moved_on`, whose claims' verdicts change only
    where the forecast's piece ends), or, when its forecast is not exact (it reads the ads
    at each ``now``), the ad itself."""
    return entry.basis if entry.forecast.exact else entry.updates


@dataclass
class Master:
    """See the module docstring. ``run`` is the reconcile service."""

    store: Documents
    link: AgentLink
    clock: Clock
    ads: AdStore
    policy: PlanPolicy = field(default_factory=PlanPolicy)
    reconcile_interval: float = 1.0
    #: A pass woken before its interval (a new node, a schedule change) comes at least this
    #: long after the previous pass started: ads of thousands of nodes arriving at once
    #: after a restart would otherwise run passes back to back and starve the ingest.
    wake_gap: float = 0.0
    #: Forecasts a reconcile pass makes at most (≈ 0.3 ms each without their blockers,
    #: ≈ 0.7 ms with them and the row's template: :meth:`PlanView.keeps_row`). On a
    #: daemon :attr:`forecasts_time_share` bounds them first: passes come well over a
    #: second apart on a loaded master, and the pieces of 100,000 nodes may end at
    #: hundreds a second (at 500 a pass, the forecasts owed after a restart of the
    #: benchmark's 100,000 were never all made).
    forecasts_per_pass: int = 2000
    #: Forecasts the reconcile service makes before it serves the others again
    #: (:meth:`_pass`): ≈ 20 ms.
    forecasts_per_slice: int = 25
    #: And the longest a slice of the passes' forecasts, or of the totals kept
    #: (:meth:`keep_totals`), works on ``work_clock`` before the others are served (at
    #: 100,000 machines a forecast takes ≈ 1 ms on the loaded master, and every task's
    #: turn waits for the slices taken in the same round of the loop).
    slice_seconds: float = 0.005
    #: The share of the master's time the passes may spend making forecasts ahead, on
    #: ``work_clock`` (``None``: :attr:`forecasts_per_pass` alone bounds them): of each
    #: ``reconcile_interval`` at most, shared by the passes run meanwhile. After a restart
    #: on a large pool the forecasts owed take minutes of a core; bounded so, they wait
    #: rather than the ads (a node whose ads wait too long is lost).
    forecasts_time_share: float | None = None
    #: Whether nothing else waits for the master's loop (:func:`loop_idle` on a daemon):
    #: past their share, the passes make the forecasts owed while it says so, each
    #: slice of them followed by a turn of the others (:meth:`_pass`), and bank no debt
    #: for them; and the slices of a pass or of the totals kept follow one another
    #: without a pause (:func:`_in_slices`). The loop's idle time is thus theirs, and a
    #: busy loop's is not.
    loop_idle: Callable[[], bool] = field(default=lambda: False)
    #: What :attr:`forecasts_time_share` is measured on (the time the making took).
    work_clock: Callable[[], float] = time.perf_counter
    state: MaintenanceState = field(default_factory=MaintenanceState)
    #: The master's drain records, by machine key (see :mod:`nodeagent.master._drains`).
    drains: dict[str, DrainRecord] = field(default_factory=dict)
    #: Who asked for each scheduled machine's maintenance: a change makes a new dict (it
    #: is saved as :class:`~nodeagent._store.Fixed`, written only when it is another).
    actors: dict[str, str] = field(default_factory=dict)
    counters: MasterCounters = field(default_factory=MasterCounters)
    #: The state last saved and the JSON of its snapshot (a drain's write does not make
    #: it again; the snapshot itself, 100,000 dicts, is not kept).
    _snapshot: tuple[MaintenanceState, str] | None = None
    #: A state and its :func:`~nodeagent.master._preview.schedule_version` (half a second
    #: at 100,000 machines).
    _version: tuple[MaintenanceState, str] | None = None
    _wake: trio.Event = field(default_factory=trio.Event)
    #: Machines a task acts on (a pass's, a rolling operation's): see :meth:`hold`.
    _busy: set[str] = field(default_factory=set)
    #: Machines whose drain the master is starting: phase 1 sent, its reply not yet in.
    _starting: set[str] = field(default_factory=set)
    #: Set (and replaced) each time a drain record is let go (:meth:`_release`).
    _released: trio.Event = field(default_factory=trio.Event)
    _backoff: dict[str, tuple[int, float]] = field(default_factory=dict)  # failures, retry at
    #: Why the last call for a machine failed, by key, until one succeeds: what a down or
    #: up that has not reached its node says (:meth:`down_report`, :meth:`up_report`).
    _last_failure: dict[str, str] = field(default_factory=dict)
    #: Set (and replaced) each time a pass's action on a machine ends (:meth:`_act`).
    _acted: trio.Event = field(default_factory=trio.Event)
    #: Node ads fetched at once at most (see :meth:`refresh_figures`).
    fetch_concurrency: int = 32
    #: How long a refresh of stale figures may take (a plan waits that long at most).
    fetch_timeout: float = 10.0
    #: When each scheduled machine entered its window (the schedule change), by key.
    window_since: dict[str, float] = field(default_factory=dict)
    #: Machines whose node's ad may predate ``window_since``: the change time, the id.
    _to_fetch: dict[str, tuple[float, MachineId]] = field(default_factory=dict)
    _fetches: dict[str, trio.Event] = field(default_factory=dict)
    #: The plan's caches and replies (:mod:`nodeagent.master._plan_view`).
    plan_view: PlanView = field(
        default_factory=lambda: PlanView(
            answer_limit=_ANSWER_SHARES, answer_seconds=_ANSWER_SECONDS
        )
    )
    #: When a summary or a scrape last read the plan's totals (:meth:`note_totals_read`).
    _totals_read_at: float = -math.inf
    #: Set by a read of the totals (:meth:`keep_totals` waits for it).
    _totals_read: trio.Event = field(default_factory=trio.Event)
    #: What else :meth:`keep_totals` keeps current with the totals, each a maker of its
    #: slices (the scrape's node figures: :meth:`MasterMetrics.node_slices
    #: <nodeagent.master._metrics.MasterMetrics.node_slices>`).
    kept_with_totals: list[Callable[[], Iterator[None]]] = field(default_factory=list)
    _refreshing: bool = False
    #: Drain records loaded from the store whose node's ad, if held, may predate them.
    _unseen: set[str] = field(default_factory=set)
    #: The drains whose commit is under way, by node: their request id and the
    #: ``drain.committed`` event to stage (:meth:`drain_transaction`), or staged first by
    #: an ad that shows the drain begun before the commit's reply is read (:meth:`_take_ad`).
    _committing: dict[str, tuple[str, Draft]] = field(default_factory=dict)
    #: The rolling maintenance operations, by id, as JSON (see
    #: :mod:`nodeagent.master._rolling`): an operation is saved when it changes
    #: (:meth:`commit_state`), with the rest, so that its step and the drain record and
    #: modes it acts through are written together; the others are not written again.
    operations: dict[str, Any] = field(default_factory=dict)
    #: The notices in force (Mesos's inverse offers) with their answers, by id
    #: (:mod:`nodeagent.master._notices`): saved when one is issued, rescinded or answered.
    notices: dict[str, Notice] = field(default_factory=dict)
    #: Whether the notices held must be reconciled again whatever changed (loaded, or
    #: a write of theirs failed).
    _notices_stale: bool = True
    #: The windows and claims by machine name the notices were last reconciled from.
    _notice_windows: dict[str, NoticeWindow] = field(default_factory=dict)
    _notice_by_name: dict[str, dict[str, tuple[NoticeClaim, ...]]] = field(default_factory=dict)
    #: Machines whose claims' verdicts a pass left to a later one (its budget was spent).
    _notice_deferred: set[str] = field(default_factory=set)
    #: The scheduled machines' plans and due instants, kept from pass to pass
    #: (:mod:`nodeagent.master._pass_index`); ``None``: made again by the next pass.
    _pass_index: PassIndex | None = None
    #: The hostnames and ips of the nodes whose ad came since the last pass.
    _touched: set[tuple[str | None, str | None]] = field(default_factory=set)
    #: The (hostname, ip) of the ads taken that only moved on in time
    #: (:meth:`~nodeagent.master._adstore.AdStore.moved_quietly`) since the last pass.
    _moved_quietly: set[tuple[str, str | None]] = field(default_factory=set)
    #: The ad store watched for the plan view (:meth:`_ads_watched`), and what it said.
    _watching: tuple[AdStore, set[tuple[str, str | None]], set[tuple[str, str | None]]] | None = (
        None
    )
    #: The machines a pass looks at again at the next one (a record, a task, a backoff).
    _passed: set[str] = field(default_factory=set)
    #: Machines whose forecast a pass found not made and left to a later one (its budget),
    #: oldest first.
    _unready: OrderedDict[str, None] = field(default_factory=OrderedDict)
    #: The time the forecasts ahead may still take (:meth:`_forecast_time`), and when the
    #: last pass took it (the master's clock).
    _forecast_credit: float | None = None
    _credit_at: float | None = None
    #: The first second each scheduled machine's forecast made ahead no longer holds, by
    #: key (:meth:`_forecasts_ahead` makes it again then).
    _ahead: DueTimes = field(default_factory=DueTimes)
    #: Forecasts made ahead of the plans (by the passes, a follower's :meth:`run_ahead`,
    #: or the totals kept: :meth:`keep_totals`): a metric.
    forecasts_made_ahead: int = 0
    #: The machines whose every notice is accepted, and the notices it was read from.
    _accepted: tuple[Mapping[str, Notice], frozenset[str]] | None = None
    #: The notices in force by machine name, and the notices it was read from.
    _by_machine: tuple[Mapping[str, Notice], dict[str, tuple[Notice, ...]]] | None = None
    #: Each scheduled machine's claims by group with their verdicts (by plan key), and what
    #: they were read from (its node's ad, its window, the escalation planned there).
    _notice_claims: dict[str, _ClaimsRead] = field(default_factory=dict)
    #: Whether ads pushed with a DAEMON token that names no node are taken (a migration
    #: to per-node tokens; ``[master] allow_pool_daemon_tokens``).
    allow_pool_daemon_tokens: bool = False
    #: Ads taken with a DAEMON token that names no node (the metric of the migration).
    pool_token_ads: int = 0
    #: The subjects of such tokens already logged (each is logged once).
    _pool_token_subjects: set[str] = field(default_factory=set)
    #: The events: written with the state they describe, kept, published
    #: (:mod:`nodeagent.master._event_stream`).
    events: EventHub = field(default_factory=EventHub)
    #: This master's URL and its term of leadership, as its ``leader.elected`` event
    #: says them (set by the daemon).
    identity: Callable[[], tuple[str, int | None]] = lambda: ("master", None)

    # ------------------------------------------------------------------ durability

    def load(self) -> None:
        """Restore the schedule, modes, drains and counters from the store, and forget
        what a reconcile pass had under way (a new term of leadership starts afresh)."""
        snapshot = self.store.load("maintenance")
        self.state = MaintenanceState() if snapshot is None else MaintenanceState.restore(snapshot)
        self.drains = self._stored_drains()
        self._unseen = set(self.drains)
        self._busy, self._starting, self._backoff = set(), set(), {}
        self._last_failure = {}
        self.actors = dict(self.store.load("actors") or {})
        counters = self.store.load("counters")
        self.counters = MasterCounters(**counters) if counters else MasterCounters()
        self.operations = dict(self.store.load("operations") or {})
        self.notices = self._stored_notices()
        self._notices_stale = True
        self._pass_index = None
        self._load_events()

    def _load_events(self) -> None:
        """The events the store keeps (raises :class:`StoreError` for one unreadable)."""
        try:
            self.events.log.load(self.store.load("events"))
        except ValueError as exc:
            raise StoreError(f"{self.store.where}: {exc}") from exc
        self.events.published()

    def follow(self, names: Collection[str] | None = None) -> None:
        """Take the state the leader wrote (a master that follows, see
        :mod:`nodeagent.master._leader`): the documents ``names`` (all by default) again
        from the store. A drain record equal to the one held is kept as it is, so that
        the plans made of it stay cached; the machines that entered a window or whose
        window moved are remembered with the time this master learnt it, as
        :meth:`set_schedule` does, so that its plan fetches their nodes' ads first."""
        if names is None:
            names = {
                "maintenance",
                "drains",
                "actors",
                "counters",
                "operations",
                "notices",
                "events",
            }
        if "maintenance" in names:
            before = {machine_key(m.id): m.window for m in self.state.machines()}
            snapshot = self.store.load("maintenance")
            self.state = (
                MaintenanceState() if snapshot is None else MaintenanceState.restore(snapshot)
            )
            self._remember_windows(before, self.state.machines(), self.clock.now())
        if "drains" in names:
            held = self.drains
            fresh = self.store.load("drains") or {}
            self.drains = {}
            for key, stored in fresh.items():
                kept = held.get(key)
                if kept is None or kept.to_json() != stored:  # else the same record
                    kept = DrainRecord.from_json(stored)
                self.drains[key] = kept
            self._unseen = set(self.drains)
        if "actors" in names:
            self.actors = dict(self.store.load("actors") or {})
        if "counters" in names:
            counters = self.store.load("counters")
            self.counters = MasterCounters(**counters) if counters else MasterCounters()
        if "operations" in names:
            self.operations = dict(self.store.load("operations") or {})
        if "notices" in names:
            self.notices = self._stored_notices()
            self._notices_stale = True
        if "events" in names:
            self._follow_events()
        self._busy, self._starting, self._backoff = set(), set(), {}
        self._last_failure = {}
        self._pass_index = None

    def _follow_events(self) -> None:
        """The events the leader wrote since the last one held (all of them again when
        the copy has lost its thread: the leader's log went on past a hole)."""
        log_ = self.events.log
        try:
            stored = self.store.load_after("events", member_key(log_.last_id))
            taken = log_.extend(stored.values())
            if stored and not taken and min(int(k) for k in stored) > log_.last_id + 1:
                log_.load(self.store.load("events"))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{self.store.where}: unreadable events: {exc}") from exc
        self.events.published()

    def _stored_notices(self) -> dict[str, Notice]:
        """The notices the store holds; raises :class:`StoreError` for one unreadable."""
        stored = self.store.load("notices") or {}
        try:
            return {key: notice_from_json(value) for key, value in stored.items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"{self.store.where}: unreadable notices: {exc}") from exc

    def _stored_drains(self) -> dict[str, DrainRecord]:
        """The drain records the store holds (written by this master or an older one)."""
        stored = self.store.load("drains") or {}
        return {key: DrainRecord.from_json(value) for key, value in stored.items()}

    def take_over(self) -> None:
        """A new term of leadership (:mod:`nodeagent.master._leader`) with the state taken
        from the store: nothing of a pass is under way, and every drain record's node is
        asked for its ad unless the ad held knows the record (see :meth:`reconcile`)."""
        self._busy, self._starting, self._backoff = set(), set(), {}
        self._last_failure = {}
        self._unseen = set(self.drains)
        self._pass_index = None

    def save(self, *, events: Sequence[Draft] = ()) -> None:
        """Write the schedule, modes, drains, actors and counters, with ``events`` and
        those staged; raises :class:`~nodeagent._store.StoreError` (what was saved before
        stays saved; ``events`` are dropped, the staged ones kept). The operations are
        written by :meth:`commit_state`, each when it changes."""
        self._save(self.state, self.actors, events=events)

    def _save(
        self,
        state: MaintenanceState,
        actors: dict[str, str],
        operations: Mapping[str, Any] | None = None,
        *,
        events: Sequence[Draft] = (),
        notices: Mapping[str, Notice | None] | None = None,
    ) -> None:
        """Write the state given, with the events of this change: ``events``, the
        staged ones, those of the ``operations`` that changed
        (:func:`~nodeagent.master._event_drafts.operation_changes`). They are kept and
        published once the store holds them all. ``notices`` are the notices written
        (``None``: that notice is deleted), the others left as they are."""
        if self._snapshot is None or self._snapshot[0] is not state:
            self._snapshot = (state, store_text(state.snapshot()))
        documents: dict[str, Any] = {
            # The schedule and modes (a state is never changed: a change makes another),
            # and the actors (likewise), written when they change only.
            "maintenance": Fixed(text=self._snapshot[1]),
            "drains": {key: record.to_json() for key, record in self.drains.items()},
            "actors": Fixed(actors),
            "counters": vars(self.counters),
        }
        drafts = list(events)
        if operations:
            for op_id, op in operations.items():
                drafts += operation_changes(self.operations.get(op_id), op)
            if "operations" in self.store.collections:
                documents["operations"] = Members(put=operations)
            else:  # a store that keeps it whole
                documents["operations"] = {**self.operations, **operations}
        if notices:
            put = {k: n.to_json() for k, n in notices.items() if n is not None}
            gone = tuple(k for k, n in notices.items() if n is None)
            if "notices" in self.store.collections:
                documents["notices"] = Members(put=put, delete=gone)
            else:  # a store that keeps it whole
                whole = {k: n.to_json() for k, n in self.notices.items() if k not in gone}
                documents["notices"] = whole | put
        made, staged = self._events_to_write(drafts, documents)
        self.store.save(**documents)
        self.events.written(made, staged)

    def _events_to_write(
        self, drafts: Sequence[Draft], documents: dict[str, Any]
    ) -> tuple[list[Event], int]:
        """The events a write carries (the staged ones first, then ``drafts``), put in
        ``documents``; and how many of them were staged. Nothing is kept yet."""
        made, staged = self.events.take(drafts, self.clock.now())
        if not made:
            return made, staged
        log_ = self.events.log
        put, gone = log_.members(made)
        if "events" in self.store.collections:
            documents["events"] = Members(put=put, delete=gone)
        else:  # a store that keeps it whole
            whole = {member_key(e.id): e.to_json() for e in log_.after(0)[1]}
            for key in gone:
                whole.pop(key, None)
            documents["events"] = whole | put
        return made, staged

    def write_staged_events(self) -> None:
        """Write the events staged (those a change of state did not carry); raises
        :class:`StoreError`, keeping them staged."""
        documents: dict[str, Any] = {}
        made, staged = self._events_to_write((), documents)
        if made:
            self.store.save(**documents)
        self.events.written(made, staged)

    def commit_state(
        self,
        state: MaintenanceState,
        actors: dict[str, str],
        *,
        operations: Mapping[str, Any] | None = None,
        actor: str = "master",
    ) -> None:
        """Save ``state`` and ``actors`` with the drains and counters, and ``operations``
        (rolling operations by id, as JSON: only these are written, see
        :class:`~nodeagent._store.Members`), then install them (a rolling operation's
        change of modes); raises :class:`~nodeagent._store.StoreError`, changing nothing
        in memory. The machines whose mode changes are written as ``mode.changed``
        events by ``actor``."""
        self._save(state, actors, operations, events=mode_changes(self.state, state, actor=actor))
        self.state, self.actors = state, actors
        if operations:
            self.operations.update(operations)
        self.wake()

    def wake(self) -> None:
        """Run a reconcile pass now."""
        self._wake.set()

    def hold(self, key: str) -> bool:
        """Take machine ``key`` for a task that acts on its node (a pass's, a rolling
        operation's drain): False when one holds it already. Until :meth:`release_hold`,
        no pass acts on the machine (its record included)."""
        if key in self._busy:
            return False
        self._busy.add(key)
        return True

    def release_hold(self, key: str) -> None:
        """Let go of machine ``key`` (:meth:`hold`); a no-op when it is not held."""
        self._busy.discard(key)

    # ------------------------------------------------------------------ operator requests

    def set_schedule(
        self,
        schedule: MaintenanceSchedule,
        *,
        actor: str,
        if_version: str | None = None,
        change: ScheduleChange | None = None,
    ) -> None:
        """POST /maintenance/schedule: replace the schedule (Mesos rules).

        Raises :class:`MaintenanceError` for a schedule Mesos refuses,
        :class:`~nodeagent.master._preview.ScheduleChanged` when ``if_version`` is given and
        is not :meth:`schedule_version` (the state a preview was made from has changed),
        and :class:`~nodeagent._store.StoreError` when the new state cannot be saved; each
        way nothing has changed, in memory or on disk. A machine that enters a window,
        or whose window moves, is remembered with the time of this change
        (``window_since``): its node's ad, if older, is fetched before a plan shows its
        figures (:meth:`refresh_figures`). ``change``: the change made off the event loop
        (:meth:`schedule_change_maker`), carried out if the master still holds what it was
        made from (else made again here).
        """
        if if_version is not None and if_version != self.schedule_version():
            raise ScheduleChanged(
                "the schedule or a machine's mode has changed since the preview "
                f"(version {if_version}, now {self.schedule_version()}): nothing was "
                "applied; preview the schedule again"
            )
        if (
            change is None
            or change.base is not self.state
            or change.base_actors is not self.actors
            or change.schedule is not schedule
            or change.actor != actor
        ):
            change = change_schedule(self.state, self.actors, schedule, actor=actor)
        state, actors = change.state, change.actors
        now = self.clock.now()
        self._snapshot = (state, change.text)
        self._save(state, actors, events=change.events)
        self.state, self.actors = state, actors
        self._version = (state, change.version)
        self._remember_windows(change.windows_before, state.machines(), now)
        self.wake()

    def schedule_change_maker(self, actor: str) -> Callable[[MaintenanceSchedule], ScheduleChange]:
        """The function that makes :meth:`set_schedule`'s change of the state and actors
        held now (taken now), reading nothing of the master again: another thread may
        call it."""
        base, actors = self.state, self.actors
        return lambda schedule: change_schedule(base, actors, schedule, actor=actor)

    def _remember_windows(
        self, before: Mapping[str, Any], statuses: tuple[MachineStatus, ...], now: float
    ) -> None:
        """Note ``now`` as the time each machine of ``statuses`` entered its window, unless
        it had that window ``before`` (then its time stays)."""
        since: dict[str, float] = {}
        entering: dict[str, tuple[float, MachineId]] = {}
        for status in statuses:
            key = machine_key(status.id)
            if status.window is None:
                continue
            earlier = before.get(key)
            if earlier is not None and earlier.unavailability == status.window.unavailability:
                if key in self.window_since:
                    since[key] = self.window_since[key]
                continue
            since[key] = now
            entering[key] = (now, status.id)
        self.window_since = since
        self._to_fetch = {k: v for k, v in self._to_fetch.items() if k in since} | entering

    def machines_down(self, machine_ids: tuple[MachineId, ...], *, actor: str) -> None:
        """POST /machine/down (Mesos rules). Raises :class:`MaintenanceError` or
        :class:`~nodeagent._store.StoreError`, changing nothing in memory or on disk."""
        state = copy.copy(self.state)
        actors = dict(self.actors)
        for changed in state.down(machine_ids):
            actors[machine_key(changed.id)] = actor
        self._save(state, actors, events=mode_changes(self.state, state, actor=actor))
        self.state, self.actors = state, actors
        self._tried_afresh(machine_ids)
        self.wake()

    def _tried_afresh(self, machine_ids: tuple[MachineId, ...]) -> None:
        """An operator's change to these machines is carried out at the next pass, not
        after a backoff left by an earlier failure, and is judged by its own outcome."""
        for machine_id in machine_ids:
            key = machine_key(machine_id)
            self._backoff.pop(key, None)
            self._last_failure.pop(key, None)

    def machines_up(self, machine_ids: tuple[MachineId, ...], *, actor: str) -> None:
        """POST /machine/up (Mesos rules). Raises :class:`MaintenanceError` or
        :class:`~nodeagent._store.StoreError`, changing nothing in memory or on disk."""
        state = copy.copy(self.state)
        state.up(machine_ids)
        self._save(state, self.actors, events=mode_changes(self.state, state, actor=actor))
        self.state = state
        self._tried_afresh(machine_ids)
        self.wake()

    async def down_report(self, machine_ids: tuple[MachineId, ...]) -> list[dict[str, Any]]:
        """Whether the nodes of machines just brought DOWN hold the master's fast drain.

        Waits up to :attr:`fetch_timeout` for the reconcile pass to carry out the down on
        each machine's node: until every one has ``confirmed`` (the node committed the
        fast drain: its ``request_id``) or has failed. A machine not confirmed is
        ``pending``, with why: the call's failure (the master tries again, with backoff,
        and the node goes DOWN once it answers), no ad matching it, its node lost, or its
        node's machine shutting down or rebooting (left alone until it is back).
        """
        keys = {machine_key(machine_id): machine_id for machine_id in machine_ids}

        def settled() -> bool:
            now = self.clock.now()
            for key, machine_id in keys.items():
                record = self.drains.get(key)
                if (record is not None and record.down) or key in self._last_failure:
                    continue
                nodes = self.ads.find(machine_id.hostname, machine_id.ip)
                if any(not self.ads.lost(n, now) and not n.shutting_down for n in nodes):
                    return False  # a node to drain: its pass is on its way
            return True

        with trio.move_on_after(self.fetch_timeout):
            while not settled():
                await self._acted.wait()
        return self.down_rows(machine_ids)

    def down_rows(self, machine_ids: Iterable[MachineId]) -> list[dict[str, Any]]:
        """Whether each machine's node holds the master's fast drain now (``confirmed``,
        with its ``request_id``), or why not (``pending``); see :meth:`down_report`."""
        keys = {machine_key(machine_id): machine_id for machine_id in machine_ids}
        now = self.clock.now()
        report = []
        for key, machine_id in keys.items():
            nodes = self.ads.find(machine_id.hostname, machine_id.ip)
            record = self.drains.get(key)
            confirmed = record is not None and record.down
            pending = None
            if not confirmed:
                if not nodes:
                    pending = "no node's ad matches it: the node goes DOWN once its agent reports"
                elif all(self.ads.lost(node, now) for node in nodes):
                    pending = (
                        f"node {nodes[0].name} is lost (no ad for {self.ads.lifetime:.0f} s): "
                        "its fast drain is sent once it reports again"
                    )
                elif all(n.shutting_down for n in nodes if not self.ads.lost(n, now)):
                    pending = (
                        f"node {nodes[0].name}'s machine is shutting down or rebooting (its "
                        "agent drains it): its fast drain is sent once it is back"
                    )
                else:
                    pending = self._last_failure.get(key, "not carried out yet")
                    pending += "; the master keeps trying"
            report.append(
                {
                    "machine_id": machine_id.to_json(),
                    "nodes": [node.name for node in nodes],
                    "confirmed": confirmed,
                    "request_id": record.request_id if confirmed and record else None,
                    "pending": pending,
                }
            )
        return report

    async def up_report(self, machine_ids: tuple[MachineId, ...]) -> list[dict[str, Any]]:
        """What the nodes of machines just brought UP say once the master has cancelled
        its drains there: each node's :attr:`AdEntry.service
        <nodeagent.master._adstore.AdEntry.service>` from an ad fetched after the cancel.

        Waits up to :attr:`fetch_timeout` for the reconcile pass to cancel the drains,
        then asks each node for its ad (32 at a time, within what is left of that time).
        A node that did not answer is reported from the ad held (``fresh`` false).
        """
        keys = {machine_key(machine_id) for machine_id in machine_ids}
        deadline = trio.current_time() + self.fetch_timeout
        with trio.move_on_at(deadline):
            while keys & self.drains.keys():
                await self._released.wait()
        found = {
            machine_key(machine_id): (machine_id, self.ads.find(machine_id.hostname, machine_id.ip))
            for machine_id in machine_ids
        }
        fresh: dict[str, AdEntry] = {}
        limit = trio.CapacityLimiter(self.fetch_concurrency)

        async def fetch(entry: AdEntry) -> None:
            async with limit:
                with contextlib.suppress(AgentCallFailed, InvalidRequest):
                    fresh[entry.name] = await self.fetch_ad(entry)

        with trio.move_on_at(deadline):
            async with trio.open_nursery() as nursery:
                for _, entries in found.values():
                    for entry in entries:
                        nursery.start_soon(fetch, entry)
        report = []
        for key, (machine_id, entries) in found.items():
            nodes = []
            for entry in entries:
                shown = fresh.get(entry.name, entry)
                nodes.append({"name": entry.name, "fresh": entry.name in fresh, **shown.service})
            record = self.drains.get(key)
            pending = None
            if record is not None:  # the master's drain there is not cancelled yet
                pending = self._last_failure.get(
                    key, f"drain {record.request_id} on {record.node_name} not cancelled yet"
                )
                pending += "; the master keeps trying"
            report.append(
                {
                    "machine_id": machine_id.to_json(),
                    "nodes": nodes,
                    "confirmed": record is None,
                    "pending": pending,
                }
            )
        return report

    # ------------------------------------------------------------------ ads

    def receive_ad(
        self, ad: Mapping[str, Any] | NodeAd | MovedOnAd, *, plain_text: bool = False
    ) -> dict[str, Any]:
        """Store a node's ad (as pushed, or checked and packed already by an ingest worker:
        :class:`~nodeagent.master._adstore.NodeAd`, or one pushed with its slot ads'
        moving values alone, :class:`~nodeagent.master._adstore.MovedOnAd`, which raises
        :class:`~nodeagent.master._adstore.SlotsUnknown` when the store does not hold the
        slot ads they go with); the reply carries its machine's mode and window, and the
        digest of its slot ads' static part (``slots_digest``: a node may push its next
        ad with its moving values alone, for that digest).

        The ad of a DRAINING or DOWN machine wakes the reconcile pass when it can change
        what the pass does: a node new or back from lost, or a change of its drain or of
        what its drain's length depends on. Otherwise the periodic pass sees it soon
        enough; with thousands of agents, a pass per ad would run passes back to back.
        ``plain_text``: see :func:`~nodeagent.master._adstore.check_node_ad`.
        """
        now = self.clock.now()
        machine = ad.machine if isinstance(ad, NodeAd | MovedOnAd) else ad.get("machine")
        name = machine.get("Name") if isinstance(machine, dict) else None
        previous = self.ads.get(name) if isinstance(name, str) else None
        was_lost = previous is not None and self.ads.lost(previous, now)
        entry = self._take_ad(ad, now, plain_text=plain_text, previous=previous)
        if entry.my_type != "Machine":
            return {"machine_id": None, "mode": None, "unavailability": None}
        slots = entry.slots
        status = self.state.match(entry.hostname, entry.ip)
        if (
            status is not None
            and status.mode in (Mode.DRAINING, Mode.DOWN)
            and (previous is None or was_lost or _reconcile_key(previous) != _reconcile_key(entry))
        ):
            self.wake()
        window = None if status is None or status.window is None else status.window
        return {
            "machine_id": {"hostname": entry.hostname, "ip": entry.ip},
            "mode": str(Mode.UP if status is None else status.mode),
            "unavailability": None if window is None else window.unavailability.to_json(),
            "slots_digest": slots.digest.hex() if isinstance(slots, PackedSlots) else None,
        }

    def _take_ad(
        self,
        ad: Mapping[str, Any] | NodeAd | MovedOnAd,
        now: float,
        *,
        plain_text: bool = False,
        previous: AdEntry | None = None,
    ) -> AdEntry:
        """Store a node's ad (:meth:`AdStore.update`, which raises :class:`InvalidRequest`,
        or :meth:`AdStore.take` for one prepared already) and stage the events its change
        from the last one says (while recording): its drain, hook and health
        (:func:`~nodeagent.master._event_drafts.node_changes`), a lost node back.
        ``previous``: the entry held before, when the caller has it."""
        if previous is None:
            machine = ad.machine if isinstance(ad, NodeAd | MovedOnAd) else ad.get("machine")
            name = machine.get("Name") if isinstance(machine, dict) else None
            previous = self.ads.get(name) if isinstance(name, str) else None
        was_lost = previous is not None and self.ads.lost(previous, now)
        if isinstance(ad, NodeAd):
            entry = self.ads.take(ad, now)
        elif isinstance(ad, MovedOnAd):
            entry = self.ads.take_moved_on(ad, now)
        else:
            entry = self.ads.update(ad, now, plain_text=plain_text)
        # the machines whose plan this ad may change are looked at by the next pass; an
        # ad moved on in time quietly changes none (the next pass swaps it into the plans
        # it holds): a pass looks at them anyway when the ad before it would have turned
        # its node rebooting or lost (next_due)
        if previous is not None and self.ads.moved_quietly(previous, entry, now):
            self._moved_quietly.add((entry.hostname, entry.ip))
        else:
            self._touched.add((entry.hostname, entry.ip))
            if previous is not None and (previous.hostname, previous.ip) != (
                entry.hostname,
                entry.ip,
            ):
                self._touched.add((previous.hostname, previous.ip))
        if not self.events.recording or previous is None or entry.my_type != "Machine":
            return entry
        committing = self._committing.get(entry.name)
        if (
            committing is not None
            and entry.machine.get("DrainingRequestId") == committing[0]
            and entry.machine.get("DrainState") in ("draining", "drained")
        ):
            # the node began the drain: its commit took, whatever the reply says when it
            # is read; the event says so before the node's own
            del self._committing[entry.name]
            self.events.stage(committing[1])
        if was_lost:
            self.events.stage(
                node_back(node=entry.name, machine=entry.hostname, away=now - previous.received_at)
            )
        if previous.machine.get("ShuttingDown") is True or entry.shutting_down:
            self.events.stage(
                *node_shutdown_changes(
                    previous.machine,
                    entry.machine,
                    node=entry.name,
                    machine=entry.hostname,
                    away=now - previous.received_at,
                )
            )
        if previous.machine is not entry.machine and _watched(previous.machine) != _watched(
            entry.machine
        ):
            self.events.stage(
                *node_changes(
                    previous.machine,
                    entry.machine,
                    node=entry.name,
                    machine=entry.hostname,
                    groups=_groups(entry),
                )
            )
        return entry

    def pool_token_used(self, subject: str) -> None:
        """An ad comes with a DAEMON token of ``subject`` that names no node: raise
        :class:`~nodeagent._auth.PoolToken` unless :attr:`allow_pool_daemon_tokens`; else
        count it (:attr:`pool_token_ads`) and log a warning the first time ``subject`` is
        seen."""
        if not self.allow_pool_daemon_tokens:
            raise PoolToken(
                f"{subject} holds a pool-wide DAEMON token (it names no node): make one "
                "per node (nodeagent token create --scope DAEMON --node HOST)"
            )
        self.pool_token_ads += 1
        if subject not in self._pool_token_subjects and len(self._pool_token_subjects) < 4096:
            self._pool_token_subjects.add(subject)
            log.warning(
                "an ad pushed with %s's pool-wide DAEMON token (no node) was taken "
                "(allow_pool_daemon_tokens): give that agent its own node's token",
                subject,
            )

    async def _node_ad(self, address: str, node: str) -> dict[str, Any]:
        """The ad the node ``node`` serves at ``address``; raises :class:`AgentCallFailed`,
        or :class:`InvalidRequest` when it is not ``node``'s own (the answer of another
        node, or of something else at that address), which is then not stored."""
        ad = await AgentCalls.over(self.link, address, node=node, actor="master").ad()
        foreign = foreign_ad(ad, node)
        if foreign is not None:
            raise InvalidRequest(f"the node {node} at {address} answered another's ad: {foreign}")
        return ad

    async def fetch_ad(self, entry: AdEntry) -> AdEntry:
        """Ask the node for its ad now (at its ``MyAddress``) and store it; raises
        :class:`AgentCallFailed`, or :class:`InvalidRequest` for an ad the master refuses
        (one that is not the node's own included), storing nothing."""
        if not entry.address:
            return entry
        ad = await self._node_ad(entry.address, entry.name)
        return self._take_ad(ad, self.clock.now())

    def _live_node(self, machine_id: MachineId, now: float) -> AdEntry | None:
        is_lost = self.ads.lost_at(now)
        for entry in self.ads.find(machine_id.hostname, machine_id.ip):
            if not is_lost(entry):
                return entry
        return None

    async def refresh_figures(self) -> None:
        """Fetch the ad of every scheduled node whose stored ad predates the schedule
        change that put its machine in its window; return when they are all in, or
        after ``fetch_timeout``.

        Each node is asked at most once per such change (a fetch already under way is
        waited for, not repeated), ``fetch_concurrency`` at a time. A node that does not
        answer in time, or refuses, keeps its old figures (its plan row says
        ``figures_stale``) until it pushes again. A machine without a live node needs
        no fetch: the first ad of its node is newer than the change.
        """
        now = self.clock.now()
        waits: list[trio.Event] = []
        starts: list[tuple[str, AdEntry, float, trio.Event]] = []
        for key, (since, machine_id) in list(self._to_fetch.items()):
            event = self._fetches.get(key)
            if event is not None:
                waits.append(event)
                continue
            entry = self._live_node(machine_id, now)
            if entry is None or entry.received_at >= since or not entry.address:
                del self._to_fetch[key]
                continue
            event = self._fetches[key] = trio.Event()
            starts.append((key, entry, since, event))
        if not waits and not starts:
            return
        limiter = trio.CapacityLimiter(self.fetch_concurrency)
        with trio.move_on_after(self.fetch_timeout):
            async with trio.open_nursery() as nursery:
                for key, entry, since, event in starts:
                    nursery.start_soon(self._fetch_figures, limiter, key, entry, since, event)
                for event in waits:
                    nursery.start_soon(event.wait)

    async def _fetch_figures(
        self,
        limiter: trio.CapacityLimiter,
        key: str,
        entry: AdEntry,
        since: float,
        event: trio.Event,
    ) -> None:
        """One fetch of :meth:`refresh_figures`; counted as made however it ends."""
        try:
            async with limiter:
                await self.fetch_ad(entry)
        except (AgentCallFailed, InvalidRequest) as exc:
            log.warning(
                "%s: fresh ad not fetched, its figures are %s old: %s",
                entry.name,
                in_words(self.clock.now() - entry.received_at),
                exc,
            )
        finally:
            if self._to_fetch.get(key, (None,))[0] == since:
                del self._to_fetch[key]
            if self._fetches.get(key) is event:
                del self._fetches[key]
            event.set()

    async def _refresh_in_background(self) -> None:
        self._refreshing = True
        try:
            await self.refresh_figures()
        finally:
            self._refreshing = False

    # ------------------------------------------------------------------ the plan

    def plan_inputs(self, now: float) -> PlanInputs:
        """What a plan at ``now`` is made of, read from the master and its ad store."""
        return PlanInputs(
            statuses=self.state.machines(),
            find=self.ads.find,
            is_lost=self.ads.lost_at(now),
            is_rebooting=self.ads.rebooting_at(now),
            drains=self.drains,
            starting=self._starting,
            window_since=self.window_since,
            policy=self.policy,
            counters=vars(self.counters),
            nodes=len(self.ads),
            notices=self._notices_by_machine(),
            changes=AdChanges(
                touched=(watched := self._ads_watched())[0],
                moved=watched[1],
                latest=self.ads.get,
                lifetime=self.ads.lifetime,
                reboot_grace=self.ads.reboot_grace,
            ),
        )

    def _ads_watched(
        self,
    ) -> tuple[set[tuple[str, str | None]], set[tuple[str, str | None]]]:
        """What the ad store tells the plan view's ledger of the ads that arrived or went
        (:meth:`~nodeagent.master._adstore.AdStore.watch`), watched from the first plan,
        and apart, of those that only moved on in time: a share reads its node's ad only
        through what the ad store keeps of the one before (the forecast, the facts of its
        static part) and the instants the ad turns rebooting or lost, at which it is
        remade anyway (:func:`~nodeagent.master._pass_index.next_due`), so its ads are
        only swapped for the newer."""
        watched = self._watching
        if watched is None or watched[0] is not self.ads:
            moved: set[tuple[str, str | None]] = set()
            watched = self._watching = (self.ads, self.ads.watch(quietly=moved), moved)
        return watched[1], watched[2]

    def schedule_version(self) -> str:
        """The version of the schedule and modes held now
        (:func:`~nodeagent.master._preview.schedule_version`)."""
        state = self.state
        if self._version is None or self._version[0] is not state:
            self._version = (state, schedule_version(state))
        return self._version[1]

    def preview_schedule(self, schedule: MaintenanceSchedule) -> dict[str, Any]:
        """What :meth:`set_schedule` with ``schedule`` would do now, changing nothing
        (:meth:`~nodeagent.master._preview.SchedulePreview.document`). Raises
        :class:`MaintenanceError` as :meth:`set_schedule` would."""
        return self.schedule_preview(schedule).document()

    def schedule_preview(
        self, schedule: MaintenanceSchedule, *, changed_only: bool = False
    ) -> SchedulePreview:
        """:meth:`preview_schedule` to be made a row at a time
        (:class:`~nodeagent.master._preview.SchedulePreview`): the schedule checked and
        the state copied now. Raises :class:`MaintenanceError` as :meth:`set_schedule`
        would."""
        return self.schedule_preview_maker(changed_only=changed_only)(schedule)

    def schedule_preview_maker(
        self, *, changed_only: bool = False
    ) -> Callable[[MaintenanceSchedule], SchedulePreview]:
        """:meth:`schedule_preview` in two steps: what it reads of the master taken now
        (the state, the plan's inputs, the hostnames, the notices, the time), and the
        function that checks a schedule against them and copies the state, which reads
        nothing of the master again, so that another thread may call it (the state's
        mutators install new containers: the one taken now is never changed)."""
        now = self.clock.now()
        state = copy.copy(self.state)
        inputs = self.plan_inputs(now)
        hostnames = [entry.hostname for entry in self.ads.entries()]
        notices = list(self.notices.values())

        def make(schedule: MaintenanceSchedule) -> SchedulePreview:
            return SchedulePreview(
                state,
                schedule,
                inputs,
                now,
                hostnames=hostnames,
                notices=notices,
                changed_only=changed_only,
            )

        return make

    def preview_down(self, machine_ids: tuple[MachineId, ...]) -> dict[str, Any]:
        """What :meth:`machines_down` would do now, changing nothing
        (:func:`~nodeagent.master._preview.preview_down`): every job it evicts at once.
        Raises :class:`MaintenanceError` as :meth:`machines_down` would."""
        now = self.clock.now()
        return preview_down(self.state, machine_ids, self.plan_inputs(now), now)

    def plans(self, now: float) -> list[MachinePlan]:
        """Every scheduled machine's plan (see :func:`~nodeagent.master._plan.machine_plan`)."""
        return self.plan_view.plans(self.plan_inputs(now), now)

    def plan(
        self, *, with_blockers: bool = True, late: bool = False, limit: int | None = None
    ) -> dict[str, Any]:
        """GET /v1/maintenance/plan as data, from the ads held now (see
        :meth:`~nodeagent.master._plan_view.PlanView.reply`; the API writes
        :meth:`~nodeagent.master._plan_view.PlanView.body` after awaiting
        :meth:`refresh_figures`, so that no row's figures predate its window)."""
        now = self.clock.now()
        return self.plan_view.reply(
            self.plan_inputs(now), now, with_blockers=with_blockers, late=late, limit=limit
        )

    # ------------------------------------------------------------------ reconcile

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reconcile the schedule with the nodes, forever.

        The link's connections to the agents are kept while this runs and closed when it
        ends (:func:`~nodeagent._peer.kept_alive`). While it runs the master records
        events (it leads): the first says so (``leader.elected``), and what it sees is
        written within :data:`~nodeagent.master._event_stream.FLUSH_DELAY`, and when it
        ends (what is staged then is written before it stops recording).
        """
        url, term = self.identity()
        self.events.recording = True
        self.events.stage(leader_elected(url=url, term=term))
        task_status.started()
        try:
            async with kept_alive(self.link), trio.open_nursery() as nursery:
                nursery.start_soon(self.events.flush_when_staged, self.write_staged_events)
                await self._reconcile_forever(nursery)
        finally:
            self.events.stop_recording(self.write_staged_events)

    async def _reconcile_forever(self, nursery: trio.Nursery) -> None:
        """A pass each ``reconcile_interval``, or when woken (at least ``wake_gap`` after
        the last one started), served in slices (:meth:`_pass`); after each slice the
        others have the loop for as long as the slice took."""
        while True:
            self._wake = trio.Event()
            started = trio.current_time()
            await _in_slices(self._pass(nursery), self.loop_idle)
            with trio.move_on_after(self.reconcile_interval):
                await self._wake.wait()
                await trio.sleep_until(started + self.wake_gap)

    def reconcile(self, nursery: trio.Nursery) -> None:
        """One pass: start, escalate, down and cancel drains as the schedule says, then make
        the forecasts a plan will read (:meth:`_forecasts_ahead`)."""
        for _ in self._pass(nursery):
            pass

    def _pass(self, nursery: trio.Nursery) -> Generator[None, None, None]:
        """:meth:`reconcile` in slices: what it decides and starts before the first, then
        the forecasts ahead, with a slice after each :attr:`forecasts_per_slice` of them or
        :attr:`slice_seconds` of their work, so that a caller that serves the others
        between two slices (the reconcile service) holds the event loop for about that
        long at most."""
        now = self.clock.now()
        for name in self.ads.sweep(now):
            entry = self.ads.get(name)
            hostname = name if entry is None else entry.hostname
            grace = self.ads.reboot_grace if entry is not None and entry.shutting_down else None
            away = self.ads.lifetime + (grace or 0.0)
            log.warning("node %s is lost: no ad for %s", name, in_words(away))
            self.events.stage(
                node_lost(node=name, machine=hostname, lifetime=self.ads.lifetime, grace=grace)
            )
        # The just-in-time start comes from the drain bound (see nodeagent.master._plan), so a
        # pass reads no estimates but for the nodes it drains (and the forecasts it makes
        # ahead, _forecasts_ahead).
        if self._to_fetch and not self._refreshing:
            nursery.start_soon(self._refresh_in_background)
        # A record left pending is settled from the node first (see _settle); a record
        # loaded from the store has its node asked once unless the ad held knows it: a
        # restarted master holds no ad, a new leader may hold one its predecessor's
        # record postdates (pushes lag), and neither must judge the node by it.
        for key, record in self.drains.items():
            if key in self._busy or self._backoff.get(key, (0, 0.0))[1] > now:
                continue
            if record.phase is PENDING:
                self._busy.add(key)
                nursery.start_soon(self._settle, key)
            elif key in self._unseen:
                held = self.ads.get(record.node_name)
                if held is not None and ad_knows(record, held):
                    self._unseen.discard(key)
                elif record.address:
                    self._busy.add(key)
                    nursery.start_soon(self._look_up, key)
        inputs = self.plan_inputs(now)  # once a pass: the schedule's machines are copied
        index, plans = self._plans_to_look_at(inputs, now)
        whole = not index.plans  # a new index: every machine looked at
        self._reconcile_notices(plans, now, whole=whole)
        lifetime, grace = self.ads.lifetime, self.ads.reboot_grace
        for plan in plans:
            index.keep(plan, next_due(plan, now, lifetime=lifetime, reboot_grace=grace))
        accepted = self._accepted_machines()
        if accepted is not index.world[-1]:  # and the machines whose acceptance changed
            flipped = accepted ^ index.world[-1]
            index.world = (*index.world[:-1], accepted)
            keys = {plan.key for plan in plans}
            keys.update(m.key for m in index.machines if m.name in flipped)
            plans = [index.plans[m.key] for m in index.in_order(keys) if m.key in index.plans]
        for plan in plans:
            if plan.node is None or plan.lost or plan.key in self._busy:
                continue
            if self._backoff.get(plan.key, (0, 0.0))[1] > now:
                continue  # a failing node is retried later, not on every pass
            ours = self.drains.get(plan.key)
            all_accepted = (
                bool(accepted)
                and _notice_machine(plan) in accepted
                and every_claim_grouped(plan.node.slots)
            )
            step = decide(plan, ours, self.policy, now, all_accepted=all_accepted)
            if isinstance(step, RememberLate):
                assert ours is not None
                self.drains[plan.key] = ours.noted(plan.key, late=step.late)
                self.save()
            elif step is not None:
                self._busy.add(plan.key)
                nursery.start_soon(self._act, plan, step)
        for key in [k for k in self.drains if k not in index.by_key and k not in self._busy]:
            self._busy.add(key)
            nursery.start_soon(self._release, key)
        self._passed = self._held_keys()
        yield from self._forecasts_ahead(index, plans, inputs, now, whole=whole)

    def prepare_ahead(self) -> None:
        """What a follower does of a pass: the plans of the machines that changed or came
        due, and the forecasts and row templates a plan reads made ahead
        (:meth:`_forecasts_ahead`), so that it answers plans as fast as the leader. It
        decides nothing and writes nothing (the leader's pass does)."""
        for _ in self._ahead_pass():
            pass

    def _ahead_pass(self) -> Generator[None, None, None]:
        """:meth:`prepare_ahead` in slices (as :meth:`_pass`)."""
        now = self.clock.now()
        inputs = self.plan_inputs(now)
        index, plans = self._plans_to_look_at(inputs, now)
        lifetime, grace = self.ads.lifetime, self.ads.reboot_grace
        whole = not index.plans
        for plan in plans:
            index.keep(plan, next_due(plan, now, lifetime=lifetime, reboot_grace=grace))
        self._passed = self._held_keys()
        yield from self._forecasts_ahead(index, plans, inputs, now, whole=whole)

    async def run_ahead(
        self,
        leading: Callable[[], bool],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """While this master follows (``leading()`` false; with etcd), every
        ``reconcile_interval``: :meth:`prepare_ahead`. A leader's passes do it themselves:
        nothing is done while the reconcile service runs (:meth:`run`, until its term's
        end is carried out), so that no pass misses what changed."""
        task_status.started()
        while True:
            if not leading() and not self.events.recording:
                await _in_slices(self._ahead_pass(), self.loop_idle)
            await trio.sleep(self.reconcile_interval)

    @property
    def forecasts_waiting(self) -> int:
        """The scheduled machines whose forecast a pass left to a later one (its budget
        spent): a metric, 0 once the master is warm after a restart."""
        return len(self._unready)

    def _held_keys(self) -> set[str]:
        """The machines a pass looks at whatever changed: those with a drain record, a
        task acting on them, a backoff (few: the machines being drained)."""
        return {*self.drains, *self._starting, *self._busy, *self._backoff}

    def _plans_to_look_at(
        self, inputs: PlanInputs, now: float
    ) -> tuple[PassIndex, list[MachinePlan]]:
        """The plans of the machines a pass looks at now, made anew, in schedule order, and
        the index that holds the others' (:class:`~nodeagent.master._pass_index.PassIndex`).

        Every machine when the policy or the ads' lifetime changed (a new index), and at
        every pass while two scheduled machines have the same name (the notices are kept
        by name). Else those whose window, mode, time of entering their window or notices
        accepted changed, or new to the schedule (the index carried over:
        :meth:`~nodeagent.master._pass_index.PassIndex.carried`), those that one of their
        nodes' ads may change (:attr:`_touched`), those due
        (:func:`~nodeagent.master._pass_index.next_due`), those with a record, a task or a
        backoff now or at the last pass, and those whose notices' verdicts a pass left to
        a later one (a forecast left to a later pass is made by :meth:`_forecasts_ahead`).
        """
        machines = self.plan_view.scheduled(inputs.statuses)
        world = (
            machines,
            inputs.policy,
            inputs.window_since,
            self.ads.lifetime,
            self.ads.reboot_grace,
            self._accepted_machines(),
        )
        index = self._pass_index
        fresh: set[str] = set()
        if index is not None and index.names_unique and not index.holds(world):
            changed = changed_machines(index.world, world, by_machine=(2,), by_name=(5,))
            if changed is not None:
                index, fresh = index.carried(world, machines, changed)
                self._pass_index = index
        if index is None or not index.holds(world) or not index.names_unique:
            index = self._pass_index = PassIndex(world=world, machines=machines)
            self._touched.clear()
            self._moved_quietly.clear()
            keys: Collection[str] = index.by_key
        else:
            woken = set(fresh)
            # the newer ads swapped in first: the machines due read their ages
            for host, address in self._moved_quietly:
                woken.update(
                    k for k in index.matching(host, address) if not index.moved_on(k, self.ads.get)
                )
            self._moved_quietly.clear()
            lifetime, grace = self.ads.lifetime, self.ads.reboot_grace
            woken |= index.due(now, lifetime=lifetime, reboot_grace=grace)
            woken |= self._passed
            woken |= self._held_keys()
            woken |= self._notice_deferred
            for hostname, ip in self._touched:
                woken.update(index.matching(hostname, ip))
            self._touched.clear()
            keys = woken
        is_lost, find, policy = inputs.is_lost, inputs.find, inputs.policy
        drains, starting, since = inputs.drains, inputs.starting, inputs.window_since
        plans = [
            machine_plan(
                machine,
                find(machine.id.hostname, machine.id.ip),
                is_lost=is_lost,
                now=now,
                policy=policy,
                drain_record=drains.get(machine.key)
                or (STARTING if machine.key in starting else None),
                window_since=since.get(machine.key),
            )
            for machine in index.in_order(keys)
        ]
        return index, plans

    async def in_slices(self, slices: Iterator[None]) -> None:
        """Run ``slices`` (work that yields between its parts) as the passes run theirs:
        the others served between two parts for as long as each took, unless the loop is
        idle (:func:`_in_slices`)."""
        await _in_slices(slices, self.loop_idle)

    def note_totals_read(self) -> None:
        """A summary or a scrape is reading the plan's totals kept between replies: it
        remakes at most :data:`_ANSWER_SHARES` of the shares that changed or came due, for
        at most :data:`_ANSWER_SECONDS`, and answers at once, saying how many it left
        (``behind``); :meth:`keep_totals` brings in the others, and keeps them current for
        :data:`_KEEP_WARM_FOR` after the read."""
        self._totals_read_at = self.clock.now()
        self._totals_read.set()

    async def keep_totals(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The plan's totals kept between replies, brought to now on every master (leader
        or follower) after a summary or a scrape read them: :data:`_LEDGER_SLICE` shares a
        slice at most, for :attr:`slice_seconds` of work at most
        (:meth:`~nodeagent.master._plan_view.PlanView.warm`, each making the
        forecasts its shares read), serving the others between two slices for as long as
        each took (:func:`_in_slices`), until none waits; then again every
        ``reconcile_interval``, for :data:`_KEEP_WARM_FOR` after the last read. And with
        them, in the same way, what :attr:`kept_with_totals` holds (a scrape then finds
        its nodes' figures about a ``reconcile_interval`` old, not a scrape interval).
        Apart from the passes, whose decisions never wait for it; idle while nobody
        reads."""
        task_status.started()
        while True:
            await self._totals_read.wait()
            self._totals_read = trio.Event()
            while self.clock.now() - self._totals_read_at <= _KEEP_WARM_FOR:
                await _in_slices(self._totals_slices(), self.loop_idle)
                for slices in self.kept_with_totals:
                    await _in_slices(slices(), self.loop_idle)
                await trio.sleep(self.reconcile_interval)

    def _totals_slices(self) -> Generator[None, None, None]:
        """:meth:`keep_totals`'s slices, until the totals are whole."""
        view = self.plan_view
        while True:
            now = self.clock.now()
            inputs = self.plan_inputs(now)
            ledger = view.kept
            made = 0 if ledger is None else ledger.forecasts_made
            whole = view.warm(inputs, now, limit=_LEDGER_SLICE, seconds=self.slice_seconds)
            if (kept := view.kept) is not None:  # the forecasts made ahead of the readers
                self.forecasts_made_ahead += kept.forecasts_made - (made if kept is ledger else 0)
            if whole:
                return
            yield

    def _forecasts_ahead(
        self,
        index: PassIndex,
        plans: Sequence[MachinePlan],
        inputs: PlanInputs,
        now: float,
        *,
        whole: bool,
    ) -> Generator[None, None, None]:
        """Make the forecasts a plan will read, at most :attr:`forecasts_per_pass` of them,
        so that a plan finds them made (a forecast costs ≈ 0.3 ms to make, µs to read),
        with their blockers and the row's template for the machines whose rows a reply
        wrote lately (:meth:`~nodeagent.master._plan_view.PlanView.keeps_row`; ≈ 0.7 ms
        in all; the others' rows are made by the reply that writes them): of the
        machines looked at, of those earlier
        passes left (their budget spent), and of those whose piece ended (a forecast made
        holds until its piece's last second, :meth:`~slots.DrainForecast.made_until`;
        each is kept by that second, :attr:`_ahead`). A pass thus reads what changed and
        what came due, never the whole pool; ``whole``: every machine is looked at (a new
        index), and what was kept of the others is dropped. Yields after every
        :attr:`forecasts_per_slice` forecasts made, or sooner once a slice took
        :attr:`slice_seconds` of ``work_clock``, its looks at forecasts already made
        included (:meth:`_pass`).

        Between two slices the others may run: an ad may replace a node's entry (a plan
        held here then makes the forecast of the entry it read, which a moved-on entry
        shares, or of none any plan reads again: harmless), and a reply may read the
        forecasts (each is made whole or not at all)."""
        budget = self.forecasts_per_pass
        per_slice = max(1, self.forecasts_per_slice)
        share = self.forecasts_time_share
        time_left = math.inf if share is None else self._forecast_time(share, now)
        work_clock, loop_idle = self.work_clock, self.loop_idle
        unready, ahead = self._unready, self._ahead
        if whole:
            unready.clear()
            ahead.clear()
        seen: set[str] = set()
        escalation = self.policy.escalation
        keeps_row = self.plan_view.keeps_row

        def look_at(plan: MachinePlan) -> bool:
            """Whether it made the plan's forecast."""
            nonlocal budget, time_left
            if plan.node is None or plan.key in seen:
                return False
            seen.add(plan.key)
            # Made for the window and escalation the plan reads (plan_row).
            window, forecast = plan.window_start, plan.node.forecast
            applied = planned_escalation(plan, escalation)
            made = False
            rows = keeps_row(plan.key, now)  # its row was read lately: its template too
            if not forecast.ready(now, window_start=window, escalation=applied, blockers=rows):
                spare = time_left <= 0  # past the share: only while nothing else waits
                if not budget or (spare and not loop_idle()):  # made by a later pass
                    unready[plan.key] = None
                    return False
                started = work_clock()
                forecast.prepare(now, window_start=window, escalation=applied, blockers=rows)
                if rows:  # and the template of the row such a reply writes
                    self.plan_view.prepare_row(plan, inputs, now)
                if not spare:
                    time_left -= work_clock() - started
                budget -= 1
                self.forecasts_made_ahead += 1
                made = True
            ahead.set(plan.key, forecast.made_until(window_start=window, escalation=applied) + 1)
            return made

        looked = 0

        def candidates() -> Iterator[MachinePlan]:
            """The machines looked at, then those waiting, oldest first (those whose piece
            ended behind those left before), while the budget lasts."""
            nonlocal looked
            for plan in plans:
                looked += 1
                unready.pop(plan.key, None)
                yield plan
            unready.update(dict.fromkeys(ahead.due(math.floor(now))))
            while budget and unready and (time_left > 0 or loop_idle()):
                key, _ = unready.popitem(last=False)
                if key in index.plans:
                    yield index.plans[key]

        in_slice = 0
        began = work_clock()
        try:
            looks = 0
            for plan in candidates():
                if look_at(plan):
                    in_slice += 1
                else:  # the looks' time counts too: a whole pool's took seconds
                    looks += 1
                    if looks % _LOOKS_A_CLOCK:
                        continue
                if in_slice >= per_slice or work_clock() - began >= self.slice_seconds:
                    yield
                    in_slice, began = 0, work_clock()
        finally:  # left between two slices (the service cancelled): the rest waits
            unready.update(dict.fromkeys(p.key for p in plans[looked:] if p.node is not None))
            if share is not None:
                self._forecast_credit = time_left  # overspent: the next passes make up

    def _forecast_time(self, share: float, now: float) -> float:
        """The time a pass starting at ``now`` may spend making forecasts ahead: what
        :attr:`forecasts_time_share` of the time since the last pass gave, plus what that
        pass left (or less what it overspent), at most the share of one
        ``reconcile_interval`` or of that time, the longer (a loaded master's passes come
        further apart than the interval: they have their share all the same, and bank
        none). Passes woken more often than the interval (a new node's ad wakes one) thus
        share that time: the forecasts take the share of the master's time, not of each
        pass."""
        credit, since = self._forecast_credit, self._credit_at
        self._credit_at = now
        if credit is None or since is None:
            return share * self.reconcile_interval
        gap = max(0.0, now - since)
        return min(share * max(self.reconcile_interval, gap), credit + share * gap)

    def _notices_by_machine(self) -> dict[str, tuple[Notice, ...]]:
        """The notices in force by machine name, each machine's by group (what the plan's
        rows show); made again only when the notices change."""
        if self._by_machine is None or self._by_machine[0] is not self.notices:
            found: dict[str, list[Notice]] = {}
            for notice in self.notices.values():
                found.setdefault(notice.machine, []).append(notice)
            index = {
                machine: tuple(sorted(held, key=lambda n: n.group))
                for machine, held in found.items()
            }
            self._by_machine = (self.notices, index)
        return self._by_machine[1]

    def _accepted_machines(self) -> frozenset[str]:
        """The machines whose owners have all accepted their notices
        (:func:`~nodeagent.master._notices.accepted_machines`), read again only when the
        notices change (each change makes a new :attr:`notices`); none unless
        ``[master] on_all_accepted = "drain_now"``. The same set is the same object (a
        pass's index is kept by the objects it was made for: a change of the notices that
        leaves the machines accepted as they were does not make the next pass look at every
        machine)."""
        if self.policy.on_all_accepted != "drain_now":
            return _NONE_ACCEPTED
        if self._accepted is None or self._accepted[0] is not self.notices:
            accepted = accepted_machines(self.notices.values()) or _NONE_ACCEPTED
            if self._accepted is not None and accepted == self._accepted[1]:
                accepted = self._accepted[1]
            self._accepted = (self.notices, accepted)
        return self._accepted[1]

    def _reconcile_notices(
        self, plans: Sequence[MachinePlan], now: float, *, whole: bool = True
    ) -> None:
        """Issue and rescind notices as the schedule and the nodes' groups say
        (:func:`~nodeagent.master._notices.reconcile_notices`), only when a scheduled
        machine's window or its claims changed (its claims are read again when its window,
        its escalation or its node's ad changed — an ad its previous one moved on in time
        is not a change — or when the piece of its forecast they were read from ended:
        :data:`_ClaimsRead`); what changed is saved with its events (a
        store failure is logged and the notices are reconciled again at the next pass). A
        kept notice is saved again (no event) when its claims' jobs or verdicts changed
        (:func:`~nodeagent.master._notices.claims_changed`).

        ``plans``: every scheduled machine's (``whole``), or those of the machines a pass
        looks at, the others' windows and claims kept from the passes before; then only the
        machines whose window or claims changed are reconciled (``machines`` of
        :func:`~nodeagent.master._notices.reconcile_notices`), unless the last reconcile
        was not saved.

        Reading a node's verdicts makes its forecast for the window (≈ 0.3 ms) unless a plan
        made it already: a pass makes at most :attr:`forecasts_per_pass` of them, and gives
        the other machines' claims without verdicts (``cut_by`` unknown) until a later pass
        reads them (:attr:`_notice_deferred`), so a schedule of many machines never holds
        the event loop for long."""
        if whole:
            windows: dict[str, NoticeWindow] = {}
            claims: dict[str, dict[str, tuple[NoticeClaim, ...]]] = {}
            read: dict[str, _ClaimsRead] = {}
            self._notice_deferred = set()
        else:
            windows, claims, read = self._notice_windows, self._notice_by_name, self._notice_claims
            self._notice_deferred.difference_update(plan.key for plan in plans)
        touched: set[str] = set()  # the machines whose window or claims changed
        budget = self.forecasts_per_pass
        for plan in plans:
            applied = planned_escalation(plan, self.policy.escalation)
            inputs = (
                plan.key,
                plan.window_start,
                plan.window_end,
                applied,
                None if plan.node is None else (plan.node.name, _ad_version(plan.node)),
            )
            name = _notice_machine(plan)
            end = plan.window_end
            window = NoticeWindow(
                start=plan.window_start, duration=None if end is None else end - plan.window_start
            )
            if windows.get(name) != window:
                windows[name] = window
                touched.add(name)
            if plan.node is None:
                read.pop(plan.key, None)
                if claims.pop(name, None) is not None:
                    touched.add(name)
                continue
            known = self._notice_claims.get(plan.key)  # the claims read before
            if known is None or known[0] != inputs or math.floor(now) > known[2]:
                node, start = plan.node, plan.window_start
                # a node without a group's claim has none to read (its slot ads unread)
                plain = claims_of_slots(node.slots, now=now) if node.grouped else {}
                forecast = node.forecast
                ready = not plain or forecast.ready(now, window_start=start, escalation=applied)
                if not plain:  # a node without a group's claim reads no forecast
                    known = inputs, plain, math.inf
                elif ready or budget > 0:
                    budget -= not ready
                    planned = forecast.blockers(now, window_start=start, escalation=applied)
                    until = forecast.made_until(window_start=start, escalation=applied)
                    known = inputs, claims_of_slots(node.slots, now=now, planned=planned), until
                else:  # read again by a later pass: () is never a pass's inputs
                    known = ((), plain, math.inf)
                    self._notice_deferred.add(plan.key)
            read[plan.key] = known
            if claims.get(name) != known[1]:
                claims[name] = known[1]
                touched.add(name)
        changed = bool(touched)
        if whole:  # every entry was new: what changed is what differs from before
            changed = windows != self._notice_windows or claims != self._notice_by_name
            self._notice_windows, self._notice_by_name, self._notice_claims = windows, claims, read
        if not changed and not self._notices_stale:
            return
        # A machine's notices follow from its own window and claims only: when the notices
        # held were reconciled with every other machine's, the touched ones are enough.
        only = None if whole or self._notices_stale else touched
        done = reconcile_notices(self.notices, windows, claims, now=now, machines=only)
        self._notices_stale = True  # until what it changed is saved
        if done.changed or done.refreshed:
            changes: dict[str, Notice | None] = {n.id: n for n in done.refreshed}
            changes.update({n.id: None for n in done.rescinded})
            changes.update({n.id: n for n in done.issued})
            drafts = [notice_rescinded(n) for n in done.rescinded]
            drafts += [notice_issued(n) for n in done.issued]
            try:
                self._save(self.state, self.actors, events=drafts, notices=changes)
            except StoreError as exc:
                log.warning("notices not saved (tried again next pass): %s", exc)
                return
        self.notices = dict(done.held)
        self._notices_stale = False

    def answer_notice(
        self,
        notice_id: str,
        verdict: Verdict,
        *,
        reason: str,
        expected_completion: float | None,
        who: str,
    ) -> Notice:
        """Record an owner's answer to the notice ``notice_id`` (the latest one counts),
        written with its ``notice.answered`` event before it is held. Raises ``KeyError``
        for a notice not in force and :class:`StoreError` (nothing changed)."""
        notice = self.notices[notice_id]
        answered = notice.answered(
            Answer(
                verdict=verdict,
                reason=reason,
                who=who,
                at=self.clock.now(),
                expected_completion=expected_completion,
            )
        )
        self._save(
            self.state,
            self.actors,
            events=[notice_answered(answered)],
            notices={notice_id: answered},
        )
        self.notices = {**self.notices, notice_id: answered}  # a new dict: see _accepted
        return answered

    def _calls(self, address: str, node: str, actor: str) -> AgentCalls:
        return AgentCalls.over(self.link, address, node=node, actor=actor)

    async def _act(self, plan: MachinePlan, step: Step) -> None:
        """Carry out ``step`` (:func:`~nodeagent.master._drains.decide`) for the machine:
        the calls to its node, then its record written."""
        assert plan.node is not None
        address = plan.node.address or ""
        actor = self.actors.get(plan.key, "operator")
        action = _ACTIONS[type(step)]
        try:
            if isinstance(step, Start):
                # Until phase 1's reply is recorded, the node's ad may already show the
                # pending request: the plan reads it as the master's, not someone else's.
                self._starting.add(plan.key)
                await self._start(plan, step, address, actor)
            elif isinstance(step, Escalate):
                await self._escalate(plan, step, address, actor)
            elif isinstance(step, Withdraw | Postpone):
                await self._relax(plan, step, address, actor)
            elif isinstance(step, Down):
                await self._down(plan, address, actor)
            elif isinstance(step, MarkDown):
                self.drains[plan.key] = self.drains[plan.key].noted(plan.key, down=True)
                self.save()
            elif isinstance(step, BringUp):
                self._bring_up(plan, step)
            elif isinstance(step, Refresh):
                entry = await self.fetch_ad(plan.node)
                record = self.drains.get(plan.key)
                if record is None or ad_knows(record, entry):
                    self.wake()  # else the next periodic pass looks again
        except (AgentCallFailed, InvalidRequest, ValueError) as exc:
            self._failed(plan.key, f"{action} of {plan.node.name}", exc)
        except StoreError as exc:
            self._unsaved(plan.key, f"{action} of {plan.node.name}", exc)
        else:
            self._backoff.pop(plan.key, None)
            self._last_failure.pop(plan.key, None)
        finally:
            self._busy.discard(plan.key)
            self._starting.discard(plan.key)
            self._acted.set()
            self._acted = trio.Event()

    async def _start(self, plan: MachinePlan, step: Start, address: str, actor: str) -> None:
        """Start the machine's drain as ``step`` says (:class:`~nodeagent.master._drains.Start`:
        before the window graceful, with ``quick`` its deadline the window start; once the
        window has opened, the escalation's own schedule at once), recorded before its
        commit (:meth:`drain_transaction`); ``escalated`` when the commit found work on a
        drain that is not graceful."""
        now = self.clock.now()
        key = plan.key
        template = step.record(node=plan.node_name, address=address, actor=actor, now=now)
        calls = self._calls(address, template.node_name, actor)
        phase1, committed = await self.drain_transaction(key, calls, step.body(now), template)
        completion = phase1.completion
        if (
            step.schedule == "graceful"
            and completion is not None
            and completion > plan.window_start
        ):
            log.warning(
                "%s: graceful drain ends at %s, %s after its window starts at %s",
                plan.node_name,
                iso_time(completion),
                in_words(completion - plan.window_start),
                iso_time(plan.window_start),
            )
        escalated = step.escalated(committed.state)
        self.drains[key] = self.drains[key].noted(key, escalated=escalated)
        self.counters.drains_started += 1
        if escalated:
            self.counters.drains_escalated += 1
        self.save()
        if step.opened:
            log.info(
                "%s: window open since %s (%s ago): started %s drain %s for %s%s",
                plan.node_name,
                iso_time(plan.window_start),
                in_words(now - plan.window_start),
                step.schedule,
                committed.request_id,
                actor,
                " (escalated)" if escalated else "",
            )
        elif step.accepted:
            assert plan.drain_start is not None
            log.info(
                "%s: every job group on it accepted its notice: started graceful drain %s "
                "for %s now, %s before its just-in-time start at %s",
                plan.node_name,
                committed.request_id,
                actor,
                in_words(plan.drain_start - now),
                iso_time(plan.drain_start),
            )
        else:
            log.info(
                "%s: started graceful drain %s for %s",
                plan.node_name,
                committed.request_id,
                actor,
            )

    async def _escalate(self, plan: MachinePlan, step: Escalate, address: str, actor: str) -> None:
        """The window has opened: the node evicts now (its drain in force already does,
        or is replaced by one of the escalation's schedule, :meth:`_replace`), then the
        record says ``escalated``. A failed call leaves it false: a later pass acts again."""
        key = plan.key
        record = self.drains[key]
        assert plan.node is not None
        machine = plan.node.machine
        if step.replace_with is None:
            how = f"{machine.get('DrainSchedule')} drain {record.request_id}"
            if machine.get("DrainSchedule") == "graceful":
                deadline = machine.get("DrainingDeadline")
                shown = iso_time(deadline) if isinstance(deadline, int | float) else deadline
                how += f", deadline {shown}"
        else:
            body = DrainBody(schedule=step.replace_with, reason=REASON, ttl=30)
            await self._replace(key, self._calls(address, record.node_name, actor), record, body)
            how = (
                f"drain {record.request_id} replaced by {step.replace_with} drain "
                f"{self.drains[key].request_id}"
            )
        self.drains[key] = self.drains[key].noted(key, escalated=True)
        self.counters.drains_escalated += 1
        self.events.stage(
            escalation(
                node=record.node_name,
                machine=plan.node.hostname,
                request_id=self.drains[key].request_id,
                how=how,
                cuts=self._cuts(plan),
                groups=_groups(plan.node),
            )
        )
        self.save()
        log.info("%s: at its window: escalated (%s)", plan.node_name, how)

    def _cuts(self, plan: MachinePlan) -> list[dict[str, Any]]:
        """The promises an escalation at the machine's window cuts: as its plan row says,
        or as the node's ad shows them cut already (it evicted at its drain's deadline)."""
        now = self.clock.now()
        state = row_state(
            plan,
            is_lost=self.ads.lost_at(now),
            with_blockers=False,
            window_since=None,
            escalation=self.policy.escalation,
        )
        planned = row_figures(plan, state, now).cuts
        if planned or plan.node is None:
            return planned
        # The node evicted at its drain's deadline before this pass: the cuts are done.
        return evicted_cuts(plan.node.slots)

    async def _relax(
        self, plan: MachinePlan, step: Withdraw | Postpone, address: str, actor: str
    ) -> None:
        """The machine's window moved later after the master started its drain, whose
        deadline (the old window start) would now cut promises the new window keeps.

        Not due yet under the new window (:class:`~nodeagent.master._drains.Withdraw`):
        the drain is cancelled by its id and the record forgotten; the node takes work
        again until a later pass starts the drain the new window requires. Due already
        (:class:`~nodeagent.master._drains.Postpone`): the drain is replaced by a graceful
        one whose deadline is the new window start (:meth:`_replace`). Either way, between
        the cancel and a new commit the node is open for a round trip.
        """
        key = plan.key
        record = self.drains[key]
        calls = self._calls(address, record.node_name, actor)
        if isinstance(step, Withdraw):
            if step.request_id is not None:
                await calls.cancel(step.request_id)
            record.forgotten(key)
            del self.drains[key]
            self.events.stage(
                self._drain_event(
                    "cancelled",
                    record,
                    f"cancelled: the window moved later, due again at {iso_time(step.due_at)}",
                    {"due_at": step.due_at},
                )
            )
            self.save()
            log.info(
                "%s: window moved later: drain %s cancelled, due again at %s (in %s)",
                plan.node_name,
                step.request_id,
                iso_time(step.due_at),
                in_words(step.due_at - self.clock.now()),
            )
            return
        await self._replace(key, calls, record, step.body(self.clock.now()))
        self.drains[key] = self.drains[key].noted(key, window_start=step.window_start)
        self.save()
        log.info(
            "%s: window moved later: drain %s replaced by drain %s, deadline the new window",
            plan.node_name,
            record.request_id,
            self.drains[key].request_id,
        )

    async def _replace(
        self, key: str, calls: AgentCalls, record: DrainRecord, body: DrainBody
    ) -> None:
        """Cancel the master's drain on the node and commit ``body`` instead.

        A drain in force cannot be changed and a node holds one request at a time, so
        the drain is cancelled (by its id: never someone else's; already gone is fine)
        and a new one goes through the two-phase transaction, recorded before its
        commit. A phase 1 refused leaves the record with the old request id: if the
        cancel went through, the next pass finds no drain on the node and starts one as
        the open window requires; a commit failed leaves the new one ``pending``, settled
        by the next pass (:meth:`_settle`).
        """
        if record.request_id is not None:
            await calls.cancel(record.request_id)
        await self.drain_transaction(key, calls, body, record)

    async def drain_transaction(
        self, key: str, calls: AgentCalls, body: DrainBody, record: DrainRecord
    ) -> tuple[Phase1, Committed]:
        """The two-phase drain of ``body`` on the node of ``calls``, recorded before it is
        committed (the master's, and a rolling operation's).

        Phase 1 (the agent's estimate) returns the request id; ``record`` then takes it
        in phase ``pending`` and is saved as the machine's (``key``) drain record; then
        the commit, whose reply moves it to ``committed`` (with the node's
        ``committed_at``; saving that is the caller's). Returns both replies; raises what
        :class:`~nodeagent._agent_calls.AgentCalls` raises (:class:`AgentCallFailed`).
        A phase 1 refused leaves the records as they were; a record that cannot be saved
        (:class:`StoreError`) cancels the pending request (it expires on the agent after
        its ``ttl`` otherwise); a failed commit leaves the record ``pending``, for the
        next pass to settle with the node (:meth:`_settle`).
        """
        async with calls.transaction(body) as tx:
            pending = record.started(key, request_id=tx.request_id, body=body, now=self.clock.now())
            self.drains[key] = pending
            what = f"{body.schedule} drain for {body.reason}"
            if body.deadline is not None:
                what += f", deadline in {in_words(body.deadline)}"
            facts = {"schedule": body.schedule, "reason": body.reason, "actor": pending.requester}
            self.save(events=[self._drain_event("recorded", pending, f"recorded: {what}", facts)])
            event = self._drain_event("committed", pending, f"committed: {what}", facts)
            node = pending.node_name
            self._committing[node] = (tx.request_id, event)
            try:
                committed = await tx.commit()
            finally:
                # not staged yet unless an ad showed the drain begun meanwhile
                unstaged = self._committing.get(node, (None, None))[1] is event
                if unstaged:
                    del self._committing[node]
        self.drains[key] = pending.committed(key, committed_at=committed.committed_at)
        if unstaged:
            self.events.stage(event)
        return tx.phase1, committed

    def _drain_event(
        self, kind: str, record: DrainRecord, what: str, facts: Mapping[str, Any] | None = None
    ) -> Draft:
        """A ``drain.*`` event of the master's own, about ``record``'s node."""
        node = record.node_name
        entry = self.ads.get(node)
        return drain_event(
            kind,
            node=node,
            machine=node if entry is None else entry.hostname,
            request_id=record.request_id,
            what=what,
            groups=() if entry is None else _groups(entry),
            **(facts or {}),
        )

    async def _settle(self, key: str) -> None:
        """Settle a record left ``pending`` with the node: fetch its ad and look for the
        request there (:func:`~nodeagent.master._drains.settle`).

        Committed: the drain is adopted as the master's (``committed``; escalated at the
        window like any other). Still pending: cancelled by its id, and the record
        forgotten. Gone (expired, cancelled, never made): the record is forgotten. Either
        way a later pass starts the drain the window then requires. The node is asked at
        the record's address (a restarted master holds no ad yet), else at its ad's; a
        failure is retried with backoff.
        """
        record = self.drains[key]
        name = record.node_name
        what = f"settling drain {record.request_id} of {name}"
        try:
            address = record.address
            if not address:
                entry = self.ads.get(name)
                address = None if entry is None else entry.address
            if address:
                await self._settle_with(key, record, address)
            else:
                self._failed(key, what, "no address known")
                return
        except (AgentCallFailed, InvalidRequest) as exc:
            self._failed(key, what, exc)
        except StoreError as exc:
            self._unsaved(key, what, exc)
        else:
            self._backoff.pop(key, None)
            self.wake()
        finally:
            self._busy.discard(key)

    async def _look_up(self, key: str) -> None:
        """Fetch, once, the ad of the node of a drain record loaded from the store, so
        that a restarted master, or a new leader, acts on its own drains (at their window)
        from an ad that knows them, without waiting for the node's next push."""
        record = self.drains[key]
        self._unseen.discard(key)
        try:
            ad = await self._node_ad(record.address or "", record.node_name)
            self._take_ad(ad, self.clock.now())
        except (AgentCallFailed, InvalidRequest) as exc:
            log.warning("%s: ad not fetched (its next push will do): %s", record.node, exc)
        else:
            self.wake()
        finally:
            self._busy.discard(key)

    async def _settle_with(self, key: str, record: DrainRecord, address: str) -> None:
        name = record.node_name
        request_id = record.request_id
        ad = await self._node_ad(address, name)
        machine = self._take_ad(ad, self.clock.now()).machine
        settled = settle(record, machine, key=key)
        if settled.adopted:
            assert settled.record is not None
            self.drains[key] = settled.record
            self.counters.drains_started += 1
            self.save()
            log.info("%s: drain %s adopted: committed, the master's own", name, request_id)
            return
        how = "gone from the node"
        if settled.cancel and request_id is not None:
            await self._calls(address, name, record.requester).cancel(request_id)
            how = "pending: cancelled"
        if settled.record is None:
            del self.drains[key]
        else:
            # A rolling operation's: back to its drain to be started (the operation's engine
            # starts it again); kept, so that no pass starts a drain of its own meanwhile.
            self.drains[key] = settled.record
        self.save()
        log.info("%s: drain %s forgotten (%s)", name, request_id, how)

    def _unsaved(self, key: str, what: str, exc: StoreError) -> None:
        """The store refused a change made for machine ``key`` (a full disk): the machine's
        drain record goes back to what the store holds, so memory never says what the disk
        does not, and the work is retried with the usual backoff. A drain committed on the
        node whose record could not say so stays ``pending`` on disk, settled later
        (:meth:`_settle`); a phase 1 whose record could not be written was never committed,
        and is cancelled (or expires on the node)."""
        try:
            stored = self._stored_drains().get(key)
        except StoreError:
            stored = self.drains.get(key)  # unreadable too: keep what is known
        if stored is None:
            self.drains.pop(key, None)
        else:
            self.drains[key] = stored
        log.error("%s: the state could not be written: %s", what, exc)
        self._failed(key, what, exc)

    def _failed(self, key: str, what: str, why: object) -> None:
        """A call for machine ``key`` failed: counted, and retried after 2, 4, 8 … passes."""
        self.counters.drain_failures += 1
        self._last_failure[key] = f"{what} failed: {why}"
        failures = self._backoff.get(key, (0, 0.0))[0] + 1
        delay = min(_MAX_BACKOFF, self.reconcile_interval * 2**failures)
        self._backoff[key] = (failures, self.clock.now() + delay)
        log.warning("%s failed (retry in %s): %s", what, in_words(delay), why)

    def _bring_up(self, plan: MachinePlan, step: BringUp) -> None:
        """``[master] up_after_window``: the DOWN machine's window has ended and its node
        is healthy, so it goes UP as ``POST /machine/up`` would (:meth:`machines_up`, as
        the master); the next pass cancels its drain. Raises
        :class:`~nodeagent._store.StoreError`, changing nothing; a machine no longer DOWN
        (an operator's change since the pass decided) is left as it is."""
        try:
            self.machines_up((plan.machine.id,), actor="master")
        except MaintenanceError as exc:
            log.info("%s: not brought up after its window: %s", plan.node_name, exc)
            return
        log.info(
            "%s: window ended %s ago and the node is healthy: brought UP (up_after_window)",
            plan.node_name,
            in_words(self.clock.now() - step.window_end),
        )

    async def _down(self, plan: MachinePlan, address: str, actor: str) -> None:
        """Replace whatever drain the node has by a fast one that keeps it closed.

        A DOWN machine is the operator's, whoever's drain it had: the drain in force is
        cancelled, then a ``fast`` drain goes through the two-phase transaction, recorded
        before its commit (:meth:`drain_transaction`), so a master that dies between the
        commit and the save adopts it when it comes back (:meth:`_settle`) instead of
        draining the node again.
        """
        key = plan.key
        held = self.drains.get(key)
        if held is None:
            record = dataclasses.replace(ABSENT, node=plan.node_name, actor=actor, address=address)
        else:
            record = self.drains[key] = held.noted(key, address=address)
        calls = self._calls(address, record.node_name, actor)
        await calls.cancel_any()
        await self.drain_transaction(key, calls, Down.body(), record)
        self.drains[key] = self.drains[key].noted(key, down=True)
        self.counters.down_drains += 1
        self.events.stage(
            self._drain_event("down", self.drains[key], "(fast): the machine is DOWN, kept closed")
        )
        self.save()
        log.info("%s: down: fast drain %s", plan.node_name, self.drains[key].request_id)

    async def _release(self, key: str) -> None:
        """The machine left the schedule (up, or dropped): cancel the master's drain.

        The drain is cancelled by its id (never someone else's) unless the node's ad,
        not older than the record, shows it gone; a record left ``pending`` is settled
        first (:meth:`_settle`); see :func:`~nodeagent.master._drains.release`.
        """
        record = self.drains[key]
        entry = self.ads.get(record.node_name)
        let_go = release(record, entry, key=key)
        if let_go is None:
            self._busy.discard(key)
            return
        try:
            try:
                request_id = record.request_id
                address = (entry.address if entry is not None else None) or record.address
                if address and request_id is not None and let_go.cancel:
                    calls = self._calls(address, record.node_name, record.requester)
                    if await calls.cancel(request_id):
                        self.counters.drains_cancelled += 1
                        log.info("%s: up: drain %s cancelled", record.node, request_id)
                        self.events.stage(
                            self._drain_event(
                                "cancelled", record, "cancelled: the machine left its window"
                            )
                        )
                del self.drains[key]
                self.save()
                self._last_failure.pop(key, None)
            except AgentCallFailed as exc:
                self._last_failure[key] = (
                    f"cancel of drain {record.request_id} on {record.node} failed: {exc}"
                )
                log.warning("cancel on %s failed: %s", record.node, exc)
        except StoreError as exc:
            self._unsaved(key, f"releasing drain {record.request_id}", exc)
        finally:
            self._busy.discard(key)
            self._released.set()
            self._released = trio.Event()


#: The name of each step in the logs.
_ACTIONS: dict[type, str] = {
    Start: "start",
    Escalate: "escalate",
    Withdraw: "relax",
    Postpone: "relax",
    Down: "down",
    MarkDown: "mark-down",
    Refresh: "refresh",
    BringUp: "up",
}


#: The attributes of a node's ad whose change makes an event (see ``node_changes``).
_WATCHED = (
    "DrainState",
    "DrainingRequestId",
    "DrainHookState",
    "DrainHookRequestId",
    "HealthState",
    "HealthFailures",
)


def _watched(machine: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(machine.get(name) for name in _WATCHED)


def _notice_machine(plan: MachinePlan) -> str:
    """The machine a notice names: its hostname as scheduled (else its IP, its key)."""
    return plan.machine.name


def _groups(entry: AdEntry) -> list[str]:
    """The job groups with a job on the node (its slots' ``JobGroup``)."""
    groups = {slot.get("JobGroup") for slot in entry.slots if isinstance(slot, dict)}
    return sorted(g for g in groups if isinstance(g, str))
