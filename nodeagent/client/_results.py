"""The clients' results: frozen dataclasses that mirror the API's JSON field for field, and
the one place JSON becomes them (the ``_*_from_json`` functions, through :func:`_decode`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from nodeagent.client._errors import BadResponse

__all__ = [
    "Admission",
    "Blocker",
    "Claim",
    "ClaimResources",
    "DrainRequest",
    "DrainStatus",
    "Estimate",
    "Health",
    "HealthStatus",
    "HookRun",
    "Job",
    "Leadership",
    "Notice",
    "NoticeAnswer",
    "NoticeChange",
    "NoticeClaim",
    "NoticeWindow",
    "OnCompletion",
    "Schedule",
    "admission",
]

Schedule = Literal["graceful", "quick", "fast"]
"""How a drain empties the node (DESIGN §3.3)."""

OnCompletion = str
"""What the agent does once the node is drained (DESIGN §3.3): ``"none"``, ``"resume"``,
``"exit"``, ``"restart"``, or ``"hook:NAME"``, a hook of the agent's configuration (a
request names a hook; it never supplies a command): :class:`NoSuchHook` when the agent has
none of that name."""
_T = TypeVar("_T")


@dataclass(frozen=True, kw_only=True, slots=True)
class Blocker:
    """A job a drain waits for: ``evict_at`` is its soft kill, ``gone_by`` its hard kill.

    Times are epoch seconds; ``run``, ``retirement_remaining`` and ``vacate`` are seconds.
    """

    claim_id: str
    slot: str
    job_id: str
    owner: str
    cpus: int
    activity: str
    run: int
    retirement_remaining: int
    vacate: int
    evict_at: int | None
    gone_by: int
    accepted_while_draining: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """A schedule's expected completion (epoch s) and badput (core-s) as of ``now``.

    Blockers come latest ``gone_by`` first: the first ones set the completion time.
    """

    schedule: str
    now: int
    completion: int
    badput: int
    blockers: tuple[Blocker, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class HookRun:
    """A drain's completion hook as it ran. ``state``: pending, running, succeeded, failed
    or interrupted; ``exit_status`` negative: killed by that signal; ``message`` says how it
    ended; ``output`` is the end of its stdout and stderr. Times are epoch seconds."""

    name: str
    state: str
    reboots: bool
    pid: int | None
    started_at: float | None
    ended_at: float | None
    exit_status: int | None
    message: str | None
    output: str


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthStatus:
    """The agent's health gate (when it has a health check): ``state`` passing (open),
    pending or failing (closed: the node takes no work until ``passes_needed`` checks in
    a row have passed)."""

    state: str
    reason: str | None
    since: float | None
    passes: int
    passes_needed: int
    failures: int
    last_check: float | None
    next_check: float | None
    message: str | None
    output: str


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainRequest:
    """One drain request. ``state``: pending, draining, drained, hook_pending,
    hook_running, hook_failed, cancelled or completed.

    Times are epoch seconds; ``deadline`` is seconds after commit. ``estimate`` is the live
    estimate of the request in force, ``None`` for a request that has ended. ``hook`` is
    its completion hook's run, once due (``on_completion`` ``hook:NAME``).
    """

    id: str
    state: str
    schedule: str
    reason: str
    on_completion: str
    deadline: float | None
    start: str | None
    requested_by: str | None
    created_at: float | None
    expires_at: float | None
    committed_at: float | None
    deadline_at: float | None
    drained_at: float | None
    ended_at: float | None
    estimate: Estimate | None = None
    hook: HookRun | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainStatus:
    """``GET /v1/drain``: the request in force (``current``), or the last one that ended;
    ``accepting`` is ``Start`` (``None`` from an agent that does not say), ``health`` the
    health gate (``None`` without a health check)."""

    current: DrainRequest | None
    last: DrainRequest | None = None
    accepting: bool | None = None
    health: HealthStatus | None = None

    @property
    def state(self) -> str:
        """``none`` when no request is in force, else the current request's state."""
        return "none" if self.current is None else self.current.state


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimResources:
    """A dynamic slot's resources: cores, memory MiB, disk KiB, GPUs."""

    cpus: int
    memory: int
    disk: int
    gpus: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """The job of a claim. ``run`` and ``suspended`` are seconds; ``started_at`` epoch s;
    ``retirement_shortened_by`` the seconds its retirement promise was cut at admission to
    end at the machine's maintenance window (``None``: not cut)."""

    job_id: str | None
    owner: str
    max_job_retirement_time: int | None
    job_max_vacate_time: int | None
    kill_signal: str
    group: str | None
    started_at: float | None
    run: float
    suspended: float
    pid: int | None
    argv: tuple[str, ...] | None
    retirement_shortened_by: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """A claim: a dynamic slot and its job."""

    id: str
    slot: str
    state: str
    activity: str
    resources: ClaimResources
    job: Job
    accepted_while_draining: bool
    evicted_at: float | None
    hard_kill_at: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Health:
    """``GET /healthz``."""

    status: str
    version: str


def _blocker_from_json(d: Mapping[str, Any]) -> Blocker:
    return Blocker(
        claim_id=d["claim_id"],
        slot=d["slot"],
        job_id=d["job_id"],
        owner=d["owner"],
        cpus=d["cpus"],
        activity=d["activity"],
        run=d["run"],
        retirement_remaining=d["retirement_remaining"],
        vacate=d["vacate"],
        evict_at=d["evict_at"],
        gone_by=d["gone_by"],
        accepted_while_draining=d["accepted_while_draining"],
    )


def _estimate_from_json(d: Mapping[str, Any]) -> Estimate:
    return Estimate(
        schedule=d["schedule"],
        now=d["now"],
        completion=d["completion"],
        badput=d["badput"],
        blockers=tuple(_blocker_from_json(b) for b in d["blockers"]),
    )


def _hook_from_json(d: Mapping[str, Any]) -> HookRun:
    return HookRun(
        name=d["name"],
        state=d["state"],
        reboots=d["reboots"],
        pid=d["pid"],
        started_at=d["started_at"],
        ended_at=d["ended_at"],
        exit_status=d["exit_status"],
        message=d["message"],
        output=d["output"],
    )


def _health_from_json(d: Mapping[str, Any]) -> HealthStatus:
    return HealthStatus(
        state=d["state"],
        reason=d["reason"],
        since=d["since"],
        passes=d["passes"],
        passes_needed=d["passes_needed"],
        failures=d["failures"],
        last_check=d["last_check"],
        next_check=d["next_check"],
        message=d["message"],
        output=d["output"],
    )


def _request_from_json(d: Mapping[str, Any]) -> DrainRequest:
    estimate = d.get("estimate")
    hook = d.get("hook")
    return DrainRequest(
        id=d["id"],
        state=d["state"],
        schedule=d["schedule"],
        reason=d["reason"],
        on_completion=d["on_completion"],
        deadline=d["deadline"],
        start=d["start"],
        requested_by=d["requested_by"],
        created_at=d["created_at"],
        expires_at=d["expires_at"],
        committed_at=d["committed_at"],
        deadline_at=d["deadline_at"],
        drained_at=d["drained_at"],
        ended_at=d["ended_at"],
        estimate=None if estimate is None else _estimate_from_json(estimate),
        hook=None if hook is None else _hook_from_json(hook),
    )


def _status_from_json(d: Mapping[str, Any]) -> DrainStatus:
    """The drain body: a request (in force) or ``{"state": "none", "last": ...}``, with
    ``accepting`` and ``health``."""
    health = None if d.get("health") is None else _health_from_json(d["health"])
    accepting = d.get("accepting")
    if d["state"] == "none":
        last = d.get("last")
        return DrainStatus(
            current=None,
            last=None if last is None else _request_from_json(last),
            accepting=accepting,
            health=health,
        )
    return DrainStatus(current=_request_from_json(d), accepting=accepting, health=health)


def _claim_from_json(d: Mapping[str, Any]) -> Claim:
    r, j = d["resources"], d["job"]
    return Claim(
        id=d["id"],
        slot=d["slot"],
        state=d["state"],
        activity=d["activity"],
        resources=ClaimResources(
            cpus=r["cpus"], memory=r["memory"], disk=r["disk"], gpus=r["gpus"]
        ),
        job=Job(
            job_id=j["job_id"],
            owner=j["owner"],
            max_job_retirement_time=j["max_job_retirement_time"],
            job_max_vacate_time=j["job_max_vacate_time"],
            kill_signal=j["kill_signal"],
            group=j.get("group"),
            retirement_shortened_by=j.get("retirement_shortened_by"),
            started_at=j["started_at"],
            run=j["run"],
            suspended=j["suspended"],
            pid=j["pid"],
            argv=None if j["argv"] is None else tuple(j["argv"]),
        ),
        accepted_while_draining=d["accepted_while_draining"],
        evicted_at=d["evicted_at"],
        hard_kill_at=d["hard_kill_at"],
    )


def _decode(
    convert: Callable[[Mapping[str, Any]], _T], body: Any, what: str, *, peer: str = "agent"
) -> _T:
    """``convert(body)``, with a shape mismatch reported as :class:`BadResponse`."""
    try:
        return convert(body)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadResponse(f"the {peer}'s {what} reply lacks or mistypes {exc}") from exc


@dataclass(frozen=True, kw_only=True, slots=True)
class Leadership:
    """``GET /v1/leader``: who leads (``leader``, its URL; ``None`` while no master does),
    the master asked (``url``, the JSON's ``self``) and whether it leads, its ``store``
    (``sqlite``: the one master, which always leads; ``etcd``: several), the lease's TTL
    (seconds, ``None`` with SQLite), how long it has led (seconds, ``None`` when it does
    not lead or there is no election), how many terms it has led, and the pool's ``term``
    (the etcd revision that created the current leader's key, the same on every master;
    ``None`` with SQLite, while no master leads, or from a master that does not say it)."""

    leader: str | None
    url: str
    leading: bool
    store: str
    lease_ttl: float | None
    leading_for: float | None
    terms: int
    term: int | None = None


def _leadership_from_json(d: Mapping[str, Any]) -> Leadership:
    leading = d["leading"]
    if not isinstance(leading, bool):
        raise TypeError("'leading' is not a boolean")
    return Leadership(
        leader=d["leader"],
        url=d["self"],
        leading=leading,
        store=d["store"],
        lease_ttl=d["lease_ttl"],
        leading_for=d["leading_for"],
        terms=int(d["terms"]),
        term=None if d.get("term") is None else int(d["term"]),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    """Whether a job with a given retirement promise could start on a node now and keep
    its promise (:meth:`~nodeagent.client.MasterClient.admissions`).

    ``admits``: the node takes new work (``Start``, not lost) and the promise, as the
    node would hold it (the lower of the job's and the machine's
    ``MaxJobRetirementTime``), ends no later than the node's window starts.
    ``longest_promise``: the longest promise it could keep if started now (seconds,
    whole; ``None``: no window ahead, any); ``window_start``: when its window starts
    (epoch s; ``None``: none); ``why``: why not, for people (``None`` when it admits).
    """

    node: str
    admits: bool
    longest_promise: int | None
    window_start: float | None
    why: str | None


def admission(
    ad: Mapping[str, Any], window_start: float | None, promise: float, now: float
) -> Admission:
    """The :class:`Admission` of a job promising ``promise`` seconds on the node of
    ``ad`` (its machine ad as the master serves it) whose window starts at
    ``window_start``, at ``now``."""
    node = str(ad.get("Name"))
    machine_promise = ad.get("MaxJobRetirementTime")
    held = (
        promise if not isinstance(machine_promise, int | float) else min(promise, machine_promise)
    )
    longest = None if window_start is None else max(0, int(window_start - now))
    why = None
    if ad.get("Lost"):
        why = "lost: no recent ad"
    elif ad.get("Start") is False:
        why = "closed: it takes no new work (Start is false)"
    elif longest is not None and held > longest:
        why = (
            f"its window starts in {longest} s: a promise of {round(held)} s would end "
            f"{round(held - longest)} s into it"
        )
    return Admission(
        node=node,
        admits=why is None,
        longest_promise=longest,
        window_start=window_start,
        why=why,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class NoticeWindow:
    """The window a notice is about: ``start`` (epoch s) and ``duration`` (s; ``None``
    for an open-ended window)."""

    start: float
    duration: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class NoticeClaim:
    """One of the group's claims on the machine: its slot, its job, and when its
    retirement promise ends (epoch s; ``None`` when the node's ad does not say)."""

    slot: str
    job_id: str | None
    promise_end: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class NoticeAnswer:
    """An owner's latest answer to a notice: ``verdict`` (``accept`` or ``decline``),
    ``reason``, ``expected_completion`` (epoch s, the owner's word; ``None``), ``who``
    answered (the token's subject) and ``at`` (epoch s)."""

    verdict: str
    reason: str
    expected_completion: float | None
    who: str
    at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Notice:
    """A notice (Mesos's inverse offer): the ``machine``, the job ``group`` with claims
    there, the ``window``, the group's ``claims``, when it was ``issued`` (epoch s), when
    it was ``rescinded`` (``None`` while in force, and for a notice seen gone after a
    gap), and the latest ``answer`` (``None``: not answered)."""

    id: str
    machine: str
    group: str
    window: NoticeWindow
    claims: tuple[NoticeClaim, ...]
    issued: float
    rescinded: float | None
    answer: NoticeAnswer | None


@dataclass(frozen=True, kw_only=True, slots=True)
class NoticeChange:
    """What happened to a notice, as :meth:`~nodeagent.client.MasterClient.notices`
    follows them: ``kind`` ``listed`` (in force when the listing was made: first, or
    again after a gap), ``issued``, ``answered`` or ``rescinded``; the ``notice`` after
    the change; and the event that told (``event_id`` and its ``time``, epoch s; ``None``
    for a listing)."""

    kind: Literal["listed", "issued", "answered", "rescinded"]
    notice: Notice
    event_id: int | None = None
    time: float | None = None


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name!r} is not a number")
    return float(value)


def _optional_number(value: Any, name: str) -> float | None:
    return None if value is None else _number(value, name)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name!r} is not a string")
    return value


def _notice_from_json(d: Mapping[str, Any]) -> Notice:
    window, answer = d["window"], d.get("answer")
    return Notice(
        id=_text(d["id"], "id"),
        machine=_text(d["machine"], "machine"),
        group=_text(d["group"], "group"),
        window=NoticeWindow(
            start=_number(window["start"], "start"),
            duration=_optional_number(window.get("duration"), "duration"),
        ),
        claims=tuple(
            NoticeClaim(
                slot=_text(c["slot"], "slot"),
                job_id=c.get("job_id"),
                promise_end=_optional_number(c.get("promise_end"), "promise_end"),
            )
            for c in d["claims"]
        ),
        issued=_number(d["issued"], "issued"),
        rescinded=_optional_number(d.get("rescinded"), "rescinded"),
        answer=None
        if answer is None
        else NoticeAnswer(
            verdict=_text(answer["verdict"], "verdict"),
            reason=_text(answer["reason"], "reason"),
            expected_completion=_optional_number(
                answer.get("expected_completion"), "expected_completion"
            ),
            who=_text(answer["who"], "who"),
            at=_number(answer["at"], "at"),
        ),
    )
