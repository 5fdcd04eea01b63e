"""The one table of legal drain request moves, and the machine keeping to it."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slots import (
    FINISHED,
    REQUEST_MOVES,
    DrainError,
    DrainInProgress,
    DrainState,
    IllegalDrainTransition,
    InvalidRequest,
    JobSpec,
    Machine,
    MachinePolicy,
    NotPending,
    OnCompletion,
    RequestEvent,
    Resources,
    Schedule,
    SlotsError,
    TransactionExpired,
    check_request_move,
    request_number,
)

T0 = 1_000_000.0
TOTAL = Resources(cpus=8, memory=16384, disk=1_000_000)
POLICY = MachinePolicy(
    max_job_retirement_time=600, machine_max_vacate_time=60, hooks=frozenset({"reboot"})
)

LEGAL = {
    ("none", "start", "pending"),
    ("pending", "commit", "draining"),
    ("pending", "expire", "cancelled"),
    ("pending", "cancel", "cancelled"),
    ("draining", "last_job_gone", "drained"),
    ("draining", "cancel", "cancelled"),
    ("drained", "cancel", "cancelled"),
    ("drained", "complete", "completed"),
    ("drained", "hook_due", "hook_pending"),
    ("hook_pending", "hook_start", "hook_running"),
    ("hook_pending", "hook_fail", "hook_failed"),
    ("hook_pending", "cancel", "cancelled"),
    ("hook_running", "complete", "completed"),
    ("hook_running", "hook_fail", "hook_failed"),
    ("hook_failed", "cancel", "cancelled"),
    ("pending", "restore", "pending"),
    ("draining", "restore", "draining"),
    ("drained", "restore", "drained"),
    ("hook_pending", "restore", "hook_pending"),
    ("hook_running", "restore", "hook_running"),
    ("hook_failed", "restore", "hook_failed"),
}

Move = tuple[DrainState, RequestEvent, DrainState]

#: Every event but a restart's.
LIVE = frozenset(RequestEvent) - {RequestEvent.RESTORE}


def test_table_is_exactly_the_documented_moves() -> None:
    assert {(str(a), str(e), str(b)) for a, e, b in REQUEST_MOVES} == LEGAL


@pytest.mark.parametrize(
    ("current", "event", "new"), list(itertools.product(DrainState, RequestEvent, DrainState))
)
def test_every_move(current: DrainState, event: RequestEvent, new: DrainState) -> None:
    if (str(current), str(event), str(new)) in LEGAL:
        check_request_move(current, event, new, request="7")
    else:
        with pytest.raises(IllegalDrainTransition, match=r"drain request 7: .* cannot move") as e:
            check_request_move(current, event, new, request="7")
        assert (e.value.code, e.value.http_status) == ("drain.illegal_transition", 409)
        assert isinstance(e.value, DrainError)


def test_finished_states_are_exactly_those_no_move_leaves() -> None:
    left = {current for current, _, _ in REQUEST_MOVES}
    assert {s for s in DrainState if s not in left} == FINISHED
    assert DrainState.NONE not in {new for _, _, new in REQUEST_MOVES}  # nothing un-creates


def test_every_state_is_reached_from_none_by_live_moves() -> None:
    reached = _reachable(DrainState.NONE)
    assert reached == set(DrainState) - {DrainState.NONE}


# --------------------------------------------------------------------- the machine's moves


def _machine() -> Machine:
    return Machine(host="node1", total=TOTAL, policy=POLICY, now=T0)


def _claim(m: Machine, now: float) -> str:
    info, _ = m.claim(now, resources=Resources(cpus=1, memory=100), spec=JobSpec())
    return info.claim_id


def _state(m: Machine, request_id: str) -> DrainState:
    """Where request ``request_id`` stands as the machine shows it (none: not yet)."""
    for request in (m.request, m.last_request):
        if request is not None and request.id == request_id:
            return request.state
    return DrainState.NONE


def _restart(m: Machine, now: float) -> Machine:
    document = json.loads(json.dumps(m.snapshot()))
    return Machine.restore(document, host=m.host, total=m.total, policy=m.policy, now=now)


def _start(m: Machine, *, commit: bool = False, on_completion: str = "none") -> None:
    kind, _, hook = on_completion.partition(":")
    m.start_draining(
        T0 + 1,
        schedule=Schedule.GRACEFUL,
        commit=commit,
        ttl=30,
        on_completion=OnCompletion(kind),
        hook=hook or None,
    )


def _hook_due(m: Machine) -> None:
    """A one-shot drain of an empty machine completing with the hook: due at once."""
    _start(m, commit=True, on_completion="hook:reboot")


def _hook_running(m: Machine) -> None:
    _hook_due(m)
    m.hook_started(
        T0 + 2, "1", pid=4242, process_start=T0 + 2, boot_id="b1", reboots=True, timeout=60
    )


def _hook_failed(m: Machine) -> None:
    _hook_running(m)
    m.hook_ended(T0 + 3, "1", exit_status=3)


# A scenario: the setup, then the one call under test and the moves it makes, in order.
Scenario = tuple[Callable[[Machine], object], Callable[[Machine], Machine], list[Move]]

_D, _E = DrainState, RequestEvent


def _commit_expired(m: Machine) -> Machine:
    with pytest.raises(TransactionExpired):  # the API's error, as before
        m.commit_draining(T0 + 31, "1")
    return m


def _returning(call: Callable[[Machine], object]) -> Callable[[Machine], Machine]:
    def run(m: Machine) -> Machine:
        call(m)
        return m

    return run


def _busy_then_start(m: Machine, **kwargs: Any) -> None:
    _claim(m, T0)
    _start(m, **kwargs)


def _completing(action: str) -> Callable[[Machine], None]:
    """A committed drain of a busy machine, to end with the completion ``action``."""
    return lambda m: _busy_then_start(m, commit=True, on_completion=action)


SCENARIOS: dict[str, Scenario] = {
    "phase 1": (
        lambda m: None,
        _returning(_start),
        [(_D.NONE, _E.START, _D.PENDING)],
    ),
    "commit": (
        _busy_then_start,
        _returning(lambda m: m.commit_draining(T0 + 2, "1")),
        [(_D.PENDING, _E.COMMIT, _D.DRAINING)],
    ),
    "one-shot": (
        lambda m: _claim(m, T0),
        _returning(lambda m: _start(m, commit=True)),
        [(_D.NONE, _E.START, _D.PENDING), (_D.PENDING, _E.COMMIT, _D.DRAINING)],
    ),
    "commit with nothing running": (
        _start,
        _returning(lambda m: m.commit_draining(T0 + 2, "1")),
        [(_D.PENDING, _E.COMMIT, _D.DRAINING), (_D.DRAINING, _E.LAST_JOB_GONE, _D.DRAINED)],
    ),
    "expiry on the timer": (
        _start,
        _returning(lambda m: m.tick(T0 + 31)),
        [(_D.PENDING, _E.EXPIRE, _D.CANCELLED)],
    ),
    "expiry at a late commit": (
        _start,
        _commit_expired,
        [(_D.PENDING, _E.EXPIRE, _D.CANCELLED)],
    ),
    "cancel pending": (
        _start,
        _returning(lambda m: m.cancel_draining(T0 + 2, "1")),
        [(_D.PENDING, _E.CANCEL, _D.CANCELLED)],
    ),
    "cancel draining": (
        lambda m: _busy_then_start(m, commit=True),
        _returning(lambda m: m.cancel_draining(T0 + 2)),
        [(_D.DRAINING, _E.CANCEL, _D.CANCELLED)],
    ),
    "last job gone": (
        lambda m: _busy_then_start(m, commit=True),
        _returning(lambda m: m.job_exited(T0 + 2, "1")),
        [(_D.DRAINING, _E.LAST_JOB_GONE, _D.DRAINED)],
    ),
    "cancel drained": (
        lambda m: _start(m, commit=True),
        _returning(lambda m: m.cancel_draining(T0 + 2, "1")),
        [(_D.DRAINED, _E.CANCEL, _D.CANCELLED)],
    ),
    **{
        f"last job gone, then {action}": (
            _completing(action),
            _returning(lambda m: m.job_exited(T0 + 2, "1")),
            [
                (_D.DRAINING, _E.LAST_JOB_GONE, _D.DRAINED),
                (_D.DRAINED, _E.COMPLETE, _D.COMPLETED),
            ],
        )
        for action in ("resume", "exit", "restart")
    },
    "last job gone, then a hook is due": (
        _completing("hook:reboot"),
        _returning(lambda m: m.job_exited(T0 + 2, "1")),
        [
            (_D.DRAINING, _E.LAST_JOB_GONE, _D.DRAINED),
            (_D.DRAINED, _E.HOOK_DUE, _D.HOOK_PENDING),
        ],
    ),
    "a due hook's start recorded": (
        _hook_due,
        _returning(
            lambda m: m.hook_started(
                T0 + 2, "1", pid=1, process_start=T0, boot_id=None, reboots=False, timeout=9
            )
        ),
        [(_D.HOOK_PENDING, _E.HOOK_START, _D.HOOK_RUNNING)],
    ),
    "a due hook cannot start": (
        _hook_due,
        _returning(lambda m: m.hook_not_started(T0 + 2, "1", "no such file")),
        [(_D.HOOK_PENDING, _E.HOOK_FAIL, _D.HOOK_FAILED)],
    ),
    "cancel a due hook": (
        _hook_due,
        _returning(lambda m: m.cancel_draining(T0 + 2)),
        [(_D.HOOK_PENDING, _E.CANCEL, _D.CANCELLED)],
    ),
    "a hook ends well": (
        _hook_running,
        _returning(lambda m: m.hook_ended(T0 + 3, "1", exit_status=0)),
        [(_D.HOOK_RUNNING, _E.COMPLETE, _D.COMPLETED)],
    ),
    "a hook fails": (
        _hook_running,
        _returning(lambda m: m.hook_ended(T0 + 3, "1", exit_status=1)),
        [(_D.HOOK_RUNNING, _E.HOOK_FAIL, _D.HOOK_FAILED)],
    ),
    "cancel a failed hook": (
        _hook_failed,
        _returning(lambda m: m.cancel_draining(T0 + 4, "1")),
        [(_D.HOOK_FAILED, _E.CANCEL, _D.CANCELLED)],
    ),
    **{
        f"restart while {name}": (
            setup,
            lambda m: _restart(m, T0 + 9),
            [(state, _E.RESTORE, state)],
        )
        for name, setup, state in (
            ("a hook is due", _hook_due, _D.HOOK_PENDING),
            ("a hook runs", _hook_running, _D.HOOK_RUNNING),
            ("a hook failed", _hook_failed, _D.HOOK_FAILED),
        )
    },
    "restart while pending": (
        _start,
        lambda m: _restart(m, T0 + 2),
        [(_D.PENDING, _E.RESTORE, _D.PENDING)],
    ),
    "restart while draining": (
        lambda m: _busy_then_start(m, commit=True),
        lambda m: _restart(m, T0 + 2),
        [(_D.DRAINING, _E.RESTORE, _D.DRAINING)],
    ),
    "restart while drained": (
        lambda m: _start(m, commit=True),
        lambda m: _restart(m, T0 + 2),
        [(_D.DRAINED, _E.RESTORE, _D.DRAINED)],
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_machine_moves_a_request_along_the_table(name: str) -> None:
    setup, call, moves = SCENARIOS[name]
    m = _machine()
    setup(m)
    assert _state(m, "1") is moves[0][0]
    after = call(m)
    assert _state(after, "1") is moves[-1][2]
    for move in moves:
        assert move in REQUEST_MOVES
    assert all(a[2] is b[0] for a, b in itertools.pairwise(moves))


def test_every_move_in_the_table_is_one_the_machine_makes() -> None:
    made = {move for _, _, moves in SCENARIOS.values() for move in moves}
    assert made == REQUEST_MOVES


@pytest.mark.parametrize("setup", ["draining", "drained"])
def test_the_machines_own_refusals_come_before_the_table(setup: str) -> None:
    m = _machine()
    if setup == "draining":
        _claim(m, T0)
    _start(m, commit=True)
    assert _state(m, "1") is DrainState(setup)
    before = m.snapshot()
    with pytest.raises(NotPending) as not_pending:
        m.commit_draining(T0 + 2, "1")
    with pytest.raises(DrainInProgress):
        _start(m)
    assert not_pending.value.code == "drain.not_pending"
    assert m.snapshot() == before


@pytest.mark.parametrize("state", ["none", "cancelled", "completed"])
def test_restore_refuses_a_request_in_force_that_cannot_be(state: str) -> None:
    m = _machine()
    _start(m)
    document = m.snapshot()
    document["request"]["state"] = state
    kept = copy.deepcopy(document)
    with pytest.raises(IllegalDrainTransition, match=f"restore cannot move it from {state}"):
        Machine.restore(document, host="node1", total=TOTAL, policy=POLICY, now=T0 + 2)
    assert document == kept


@pytest.mark.parametrize("state", ["none", "pending", "draining", "drained"])
def test_restore_refuses_a_last_request_that_has_not_ended(state: str) -> None:
    m = _machine()
    _start(m)
    m.cancel_draining(T0 + 2)
    document = m.snapshot()
    document["last_request"]["state"] = state
    with pytest.raises(InvalidRequest, match=f"last drain request 1 is {state}"):
        Machine.restore(document, host="node1", total=TOTAL, policy=POLICY, now=T0 + 3)


# --------------------------------------------------------------------- any sequence


def _reachable(start: DrainState, events: frozenset[RequestEvent] = LIVE) -> set[DrainState]:
    """The states that moves by ``events`` lead to from ``start``, in one or more."""
    reached: set[DrainState] = set()
    frontier = [start]
    while frontier:
        state = frontier.pop()
        for current, event, new in REQUEST_MOVES:
            if current is state and event in events and new not in reached:
                reached.add(new)
                frontier.append(new)
    return reached


_FINISHING = frozenset({_E.LAST_JOB_GONE, _E.COMPLETE, _E.HOOK_DUE})

#: The events each operation may bring about (a drain finishing counts wherever the
#: machine can find its last job gone).
EVENTS: dict[str, frozenset[RequestEvent]] = {
    "claim": frozenset(),
    "release": frozenset(),
    "suspend": _FINISHING,
    "continue": _FINISHING,
    "exit": _FINISHING,
    "drain": frozenset({_E.START, _E.COMMIT}) | _FINISHING,
    "commit": frozenset({_E.COMMIT, _E.EXPIRE}) | _FINISHING,
    "cancel": frozenset({_E.CANCEL}),
    "wait": frozenset({_E.EXPIRE}) | _FINISHING,
    "restart": frozenset({_E.RESTORE, _E.COMPLETE, _E.HOOK_FAIL}),
    "hook": frozenset({_E.HOOK_START, _E.HOOK_FAIL, _E.COMPLETE}),
}


operations = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.integers(1, 4)),
        st.tuples(st.just("exit"), st.integers(1, 6)),
        st.tuples(st.just("release"), st.integers(1, 12)),
        st.tuples(st.just("suspend"), st.integers(1, 12)),
        st.tuples(st.just("continue"), st.integers(1, 12)),
        st.tuples(
            st.just("drain"),
            st.sampled_from(list(Schedule)),
            st.booleans(),
            st.sampled_from([*(str(c) for c in OnCompletion), "hook:reboot", "hook:nope"]),
            st.none() | st.integers(0, 900),
        ),
        st.tuples(
            st.just("hook"),
            st.sampled_from(["start", "not started", "exit 0", "exit 1", "timeout"]),
        ),
        st.tuples(st.just("commit"), st.integers(0, 1)),
        st.tuples(st.just("cancel"), st.sampled_from([None, "current", "last", "99"])),
        st.tuples(st.just("wait"), st.floats(0, 1500, allow_nan=False)),
        st.tuples(st.just("restart"), st.sampled_from(["b1", "b2", None])),
    ),
    max_size=30,
)


def _apply(m: Machine, now: float, op: tuple[Any, ...]) -> tuple[Machine, float]:
    """Carry out one operation; the model's refusals are part of the game, except the
    table's: an :class:`IllegalDrainTransition` fails the property."""
    kind = op[0]
    current = m.request.id if m.request is not None else None
    last = m.last_request.id if m.last_request is not None else None
    try:
        if kind == "claim":
            m.claim(
                now,
                resources=Resources(cpus=op[1], memory=100),
                spec=JobSpec(max_job_retirement_time=300),
            )
        elif kind == "exit":
            m.job_exited(now, str(op[1]))
        elif kind == "release":
            m.release(now, str(op[1]))
        elif kind == "suspend":
            m.suspend(now, str(op[1]))
        elif kind == "continue":
            m.continue_(now, str(op[1]))
        elif kind == "drain":
            _, schedule, commit, on_completion, deadline = op
            kind_, _, hook = on_completion.partition(":")
            m.start_draining(
                now,
                schedule=schedule,
                commit=commit,
                on_completion=OnCompletion(kind_),
                hook=hook or None,
                deadline=deadline,
                ttl=3,
            )
        elif kind == "hook" and current is not None:
            if op[1] == "start":
                m.hook_started(
                    now, current, pid=7, process_start=now, boot_id="b1", reboots=True, timeout=5
                )
            elif op[1] == "not started":
                m.hook_not_started(now, current, "cannot")
            else:
                status = 0 if op[1] == "exit 0" else 1
                m.hook_ended(now, current, exit_status=status, timed_out=op[1] == "timeout")
        elif kind == "commit":
            target = current if op[1] == 0 else last
            if target is not None:
                m.commit_draining(now, target)
        elif kind == "cancel":
            chosen = {None: None, "current": current, "last": last, "99": "99"}[op[1]]
            if op[1] is None or chosen is not None:
                m.cancel_draining(now, chosen)
        elif kind == "wait":
            target_time = now + float(op[1])
            while (wake := m.next_wakeup()) is not None and wake <= target_time:
                now = max(now, wake)
                m.tick(now)
            now = target_time
            m.tick(now)
        elif kind == "restart":
            m = _restart(m, now)
            m.restarted(now, boot_id=op[1])
    except IllegalDrainTransition:
        raise
    except SlotsError:
        pass
    return m, now


@given(sequence=operations)
def test_any_sequence_of_operations_keeps_to_the_table(sequence: list[tuple[Any, ...]]) -> None:
    m = _machine()
    now = T0
    seen: dict[str, DrainState] = {}
    for op in sequence:
        m, now = _apply(m, now, op)
        now += 1
        shown = [r for r in (m.request, m.last_request) if r is not None]
        for request in shown:
            before = seen.get(request.id, DrainState.NONE)
            if request.state is not before:
                reached = _reachable(before, EVENTS[op[0]])
                assert request.state in reached, (before, request.state, op)
            elif op[0] == "restart" and before not in FINISHED:
                assert (before, RequestEvent.RESTORE, request.state) in REQUEST_MOVES
            seen[request.id] = request.state
        # A request in force is one that can be; the last one has ended; none vanish.
        if m.request is not None:
            assert m.request.state not in FINISHED | {DrainState.NONE}
        if m.last_request is not None:
            assert m.last_request.state in FINISHED
        in_view = {r.id for r in shown}
        assert all(s in FINISHED for rid, s in seen.items() if rid not in in_view)


@pytest.mark.parametrize(
    ("request_id", "number"),
    [
        ("1", 1),
        ("0042", 42),
        (7, 7),
        (True, None),  # a bool is no id, though Python counts it an int
        ("", None),
        ("-1", None),
        ("1.5", None),
        (1.0, None),
        (None, None),
        ("٣", None),  # a decimal digit, but not an id an agent gives
    ],
)
def test_request_number(request_id: Any, number: int | None) -> None:
    assert request_number(request_id) == number
