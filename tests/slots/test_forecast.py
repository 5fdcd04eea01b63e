"""DrainForecast: exactly drain_estimates and ad_blockers, at any later instant."""

from __future__ import annotations

from array import array
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slots import (
    EXPECTED_ATTRIBUTES,
    DrainForecast,
    Escalation,
    InvalidRequest,
    MachinePolicy,
    Schedule,
    SuspendPolicy,
    ad_blockers,
    check_estimate_inputs,
    drain_estimates,
    drain_verdicts,
    line_pairs,
    packed_ints,
)
from slots._ads import jobs_flat, jobs_flat_packed, jobs_from_flat, jobs_of

from .test_properties import TOTAL, _step, ops, policies
from .world import World

T0 = 1_000_000

_PAIRS = [
    ("Claimed", "Busy"),
    ("Claimed", "Retiring"),
    ("Claimed", "Suspended"),
    ("Preempting", "Vacating"),
    ("Preempting", "Killing"),
    ("Unclaimed", "Idle"),  # not active: left out of both
]


@st.composite
def slot_ads(draw: st.DrawFn, span: int = 6000) -> list[dict[str, Any]]:
    """A partitionable slot and dynamic slots in any active pair, with ads of any age.

    Times are drawn within ``span`` seconds, so a small span packs the instants where the
    arithmetic changes course close together.
    """
    seconds = st.integers(0, span)
    machine: dict[str, Any] = {
        "SlotType": "Partitionable",
        "PartitionableSlot": True,
        "State": "Unclaimed",
        "Activity": "Idle",
        "MachineMaxVacateTime": draw(st.integers(0, span // 6)),
        "DrainSuspendedJobs": draw(st.sampled_from(["keep", "evict", "resume"])),
        "DrainState": draw(st.sampled_from(["none", "draining", "drained"])),
    }
    if draw(st.booleans()):
        machine["DrainingDeadline"] = T0 + draw(st.integers(-span // 3, span))
    ads = [machine]
    for n in range(draw(st.integers(0, 6))):
        state, activity = draw(st.sampled_from(_PAIRS))
        ad: dict[str, Any] = {
            "Name": f"slot1_{n + 1}@h",
            "SlotType": "Dynamic",
            "State": state,
            "Activity": activity,
            "Cpus": draw(st.integers(1, 4)),
            "TotalJobRunTime": draw(seconds),
            "MaxJobRetirementTime": draw(seconds),
            "VacateTimeRemaining": draw(st.integers(0, span // 6)),
            "AcceptedWhileDraining": draw(st.booleans()),
            "JobId": f"{n}.0",
            "ClaimId": f"c{n}",
            "RemoteOwner": "alice",
        }
        if draw(st.booleans()):
            ad["MyCurrentTime"] = T0 - draw(seconds) // 2 + draw(st.integers(0, 50))
        if draw(st.booleans()):
            ad["JobMaxVacateTime"] = draw(st.integers(0, span // 3))
        ads.append(ad)
    return ads


def previous_values(span: int = 9000) -> st.SearchStrategy[dict[str, Any] | None]:
    """Last published completions (the idle rule), near ``T0`` or up to ``span`` after."""
    return st.none() | st.fixed_dictionaries(
        {
            f"ExpectedMachine{s}DrainingCompletion": st.none() | st.integers(T0 - 50, T0 + span)
            for s in ("Graceful", "Quick", "Fast")
        }
    )


# Mostly forward, as a plan's clock goes, with some steps back and long jumps.
instants = st.lists(st.integers(-100, 400) | st.integers(-5000, 9000), min_size=1, max_size=25)


#: A node's ads, its last completions, the instants a plan reads it at, its window and the
#: escalation applied there.
reads_for_a_window = {
    "ads": slot_ads(),
    "previous": previous_values(),
    "steps": instants,
    "window": st.integers(-3000, 9000),
    "escalation": st.sampled_from(list(Escalation)),
}


def _assert_agrees(
    forecast: DrainForecast, ads: list[dict[str, Any]], previous: Any, now: float
) -> None:
    assert forecast.estimates(now) == drain_estimates(ads, now, previous)
    assert forecast.blockers(now) == ad_blockers(ads, now, Schedule.GRACEFUL)


@settings(max_examples=150)
@given(ads=slot_ads(span=120), previous=previous_values(150), start=st.integers(-130, 0))
def test_forecast_equals_the_direct_functions_second_by_second(
    ads: list[dict[str, Any]], previous: Any, start: int
) -> None:
    """Every second across the span: a piece that outlives its horizon by one shows."""
    forecast = DrainForecast(ads, previous)
    for now in range(T0 + start, T0 + 260):
        _assert_agrees(forecast, ads, previous, now)


@settings(max_examples=300)
@given(ads=slot_ads(), previous=previous_values(), steps=instants, fraction=st.floats(0, 0.999))
def test_forecast_equals_the_direct_functions_at_any_instant(
    ads: list[dict[str, Any]], previous: Any, steps: list[int], fraction: float
) -> None:
    forecast = DrainForecast(ads, previous)
    now = T0
    for step in steps:
        now += step
        _assert_agrees(forecast, ads, previous, now + fraction)


@given(policy=policies, sequence=ops, steps=instants)
def test_forecast_of_a_model_machines_ad(
    policy: MachinePolicy, sequence: list[tuple[object, ...]], steps: list[int]
) -> None:
    world = World.make(cpus=TOTAL.cpus, policy=policy)
    now = world.now
    for op in sequence:
        now = _step(world.machine, now, op)
    ad = world.machine.ad(now)
    check_estimate_inputs([ad["machine"], *ad["slots"]])  # a master takes every agent ad
    previous = {k: ad["machine"][k] for k in EXPECTED_ATTRIBUTES}
    forecast = DrainForecast(ad["slots"], previous)
    for step in steps:
        now += step
        _assert_agrees(forecast, ad["slots"], previous, now)


def busy() -> list[dict[str, Any]]:
    world = World.make(
        now=float(T0),
        policy=MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=120),
    )
    world.claim(cpus=2, started_ago=600)
    world.claim(cpus=1, retirement=600, vacate=300, started_ago=100)
    world.claim(cpus=3, started_ago=4000, owner="bob")
    slots: list[dict[str, Any]] = world.machine.ad(T0)["slots"]
    return slots


@pytest.mark.parametrize(
    ("later", "graceful", "quick_badput"),
    [
        # In retirement: the graceful end is the latest promise, whatever `now` is.
        (0, T0 + 3000, 2 * (600 + 120) + (100 + 300) + 3 * (4000 + 120)),
        (1000, T0 + 3000, 2 * (1600 + 120) + (1100 + 120) + 3 * (5000 + 120)),
        # Past every promise: `now` + the machine's vacate time.
        (5000, T0 + 5120, 2 * (5600 + 120) + (5100 + 120) + 3 * (9000 + 120)),
    ],
)
def test_a_stale_ad_is_brought_forward(later: int, graceful: int, quick_badput: int) -> None:
    forecast = DrainForecast(busy())
    out = forecast.estimates(T0 + later)
    assert out["ExpectedMachineGracefulDrainingCompletion"] == graceful
    assert out["ExpectedMachineQuickDrainingBadput"] == quick_badput
    assert [b["gone_by"] for b in forecast.blockers(T0 + later)] == sorted(
        (b["gone_by"] for b in forecast.blockers(T0 + later)), reverse=True
    )


@pytest.mark.parametrize("later", [0, 1000, 5000])
def test_a_frame_reads_as_the_blocker_at_its_base_and_is_a_new_dict_each_time(
    later: int,
) -> None:
    forecast = DrainForecast(busy())
    lines = forecast.lines(T0 + later, window_start=0.0, escalation=Escalation.NONE)
    assert lines is not None
    assert lines.blockers is not None
    at_base = ad_blockers(busy(), T0 + later - lines.d)
    assert [frame.at_base for frame in lines.blockers] == at_base
    assert [list(frame.at_base) for frame in lines.blockers] == [list(b) for b in at_base]
    frame = lines.blockers[0]
    frame.at_base["slot"] = "changed"
    assert frame.at_base == at_base[0]


class _Opaque:
    """A value a library caller may put in an ad that marshal does not write."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Opaque)

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    "names",
    [
        # what JSON brings: any of its values where a name is expected
        {"Name": ["slot", 1], "JobId": 7.5, "ClaimId": None, "RemoteOwner": {"a": [True]}},
        {"Name": "slot1_1@h", "JobId": -0.0, "ClaimId": "", "RemoteOwner": "é\u2028"},
        # a library caller's own object: the frames are kept as they are
        {"Name": _Opaque(), "JobId": "1.0", "ClaimId": "c", "RemoteOwner": "alice"},
    ],
)
def test_frames_read_back_every_value_as_it_was(names: dict[str, Any]) -> None:
    """A piece's frames are kept packed; what they read back is the blocker as
    :func:`ad_blockers` gives it, whatever its values (a run beyond 64 bits included)."""
    ads = busy()
    ads[1].update(names)
    ads[2]["TotalJobRunTime"] = 10**30
    forecast = DrainForecast(ads)
    for later in (0, 700, 4000):
        assert forecast.blockers(T0 + later) == ad_blockers(ads, T0 + later)
        lines = forecast.lines(T0 + later, window_start=T0 + 9000, escalation=Escalation.QUICK)
        assert lines is not None
        assert lines.blockers is not None
        assert len(lines.blockers) == len(ad_blockers(ads, T0))
        assert list(lines.blockers.flat()[1::2]) == [frame.moving for frame in lines.blockers]


@pytest.mark.parametrize("later", [0, 1000, 5000])
def test_the_lines_hold_from_their_base_to_their_last_second(later: int) -> None:
    """``PieceLines`` read at ``now`` give the values :meth:`read` gives at every whole
    second from ``now − d`` to ``last``, and a second after ``last`` is another piece."""
    forecast = DrainForecast(busy())
    window, escalation = T0 + 4000.0, Escalation.QUICK
    lines = forecast.lines(T0 + later, window_start=window, escalation=escalation)
    assert lines is not None
    base = T0 + later - lines.d
    assert lines.last >= T0 + later
    last = int(min(lines.last, base + 100_000))
    for whole in sorted({base, T0 + later, (base + last) // 2, last}):
        values, verdicts = DrainForecast(busy()).read(
            whole, window_start=window, escalation=escalation
        )
        d = whole - base
        assert values == tuple(at + slope * d for at, slope in line_pairs(lines.estimates))
        assert verdicts.promise_completion == lines.verdicts[0] + lines.verdicts[1] * d
    if lines.last < base + 100_000:
        after = forecast.lines(lines.last + 1, window_start=window, escalation=escalation)
        assert after is not None
        assert after.piece is not lines.piece
        assert after.d == 0


def test_a_deadline_that_is_not_a_whole_second_is_served_directly() -> None:
    ads = busy()
    ads[0] = {**ads[0], "DrainState": "draining", "DrainingDeadline": T0 + 700.5}
    forecast = DrainForecast(ads)
    for now in (T0, T0 + 350.25, T0 + 701):
        _assert_agrees(forecast, ads, None, now)
    # The first job is cut short at the deadline: soft kill at 700.5, gone 120 s later.
    assert forecast.estimates(T0)["ExpectedMachineGracefulDrainingCompletion"] == T0 + 820


def test_an_idle_machine_keeps_the_moment_it_became_drainable() -> None:
    idle = [{"SlotType": "Partitionable", "State": "Unclaimed", "Activity": "Idle"}]
    previous = dict.fromkeys(EXPECTED_ATTRIBUTES, T0 + 10)
    forecast = DrainForecast(idle, previous)
    completions = [
        forecast.estimates(T0 + d)["ExpectedMachineFastDrainingCompletion"] for d in (0, 9, 10, 99)
    ]
    assert completions == [T0, T0 + 9, T0 + 10, T0 + 10]
    assert forecast.blockers(T0) == []


@pytest.mark.parametrize("previous", [T0 + 10, T0 + 10.5, T0 - 3, None])
def test_an_idle_forecast_second_by_second(previous: float | None) -> None:
    idle = [{"SlotType": "Partitionable", "State": "Unclaimed", "Activity": "Idle"}]
    values = dict.fromkeys(EXPECTED_ATTRIBUTES, previous)
    forecast = DrainForecast(idle, values)
    for now in range(T0 - 2, T0 + 20):
        assert forecast.estimates(now) == drain_estimates(idle, now, values)


def test_a_forecast_is_ready_where_its_piece_holds() -> None:
    forecast = DrainForecast(busy())
    assert not forecast.ready(T0)
    forecast.prepare(T0)
    # The second job borrows vacate time: its soft kill is due at T0 + 200 (500 s of
    # retirement left, 300 s to vacate). From then on it is `now`: the piece ends there.
    assert forecast.ready(T0 + 100.5)
    assert forecast.ready(T0 + 200)
    assert not forecast.ready(T0 + 201)
    assert not forecast.ready(T0 - 1)
    assert forecast.estimates(T0 + 100) == drain_estimates(busy(), T0 + 100)


@pytest.mark.parametrize(
    ("window", "escalation"),
    [(None, Escalation.NONE), (T0 + 7200, Escalation.QUICK)],
    ids=["no window", "a window"],
)
def test_a_read_before_the_piece_held_leaves_it_to_the_reads_that_move_on(
    window: int | None, escalation: Escalation
) -> None:
    """A long read keeps its ``now`` (a preview, a streamed plan) while the passes read at
    the time: the older read gets a piece of its own, exact, and the piece held stays."""
    forecast = DrainForecast(busy())
    forecast.prepare(T0 + 300, window_start=window, escalation=escalation)  # at the time
    held = forecast.made_until(window_start=window, escalation=escalation)
    assert held >= T0 + 300
    assert forecast.estimates(T0 + 100) == drain_estimates(busy(), T0 + 100)
    if window is not None:
        assert forecast.verdicts(
            T0 + 100, window_start=window, escalation=escalation
        ) == drain_verdicts(busy(), T0 + 100, window_start=window, escalation=escalation)
    assert forecast.made_until(window_start=window, escalation=escalation) == held
    assert forecast.ready(T0 + 300, window_start=window, escalation=escalation)
    assert not forecast.ready(T0 + 100, window_start=window, escalation=escalation)


@pytest.mark.parametrize(
    ("attribute", "value", "ok"),
    [
        ("TotalJobRunTime", 600, True),
        ("TotalJobRunTime", 600.5, True),
        ("JobMaxVacateTime", None, True),
        ("TotalJobRunTime", "600", False),
        ("MaxJobRetirementTime", True, False),
        ("MyCurrentTime", float("inf"), False),
        ("DrainingDeadline", float("nan"), False),
        ("DrainSuspendedJobs", "resume", True),
        ("DrainSuspendedJobs", "ignore", False),
    ],
)
def test_check_estimate_inputs(attribute: str, value: Any, ok: bool) -> None:
    ads = busy()
    ads[1] = {**ads[1], attribute: value}
    if ok:
        check_estimate_inputs(ads)
        drain_estimates(ads, T0)
    else:
        with pytest.raises(InvalidRequest, match=attribute):
            check_estimate_inputs(ads)


@settings(max_examples=200)
@given(**reads_for_a_window)
def test_read_is_the_values_and_the_verdicts(
    ads: list[dict[str, Any]],
    previous: Any,
    steps: list[int],
    window: int,
    escalation: Escalation,
) -> None:
    """What a plan reads of every node in one call equals the two reads it stands for."""
    forecast, other = DrainForecast(ads, previous), DrainForecast(ads, previous)
    window_start = T0 + window + 0.5
    now = T0
    for step in steps:
        now += step
        values, verdicts = forecast.read(now, window_start=window_start, escalation=escalation)
        assert verdicts == other.verdicts(now, window_start=window_start, escalation=escalation)
        assert values == other.values(now)
        expected = drain_estimates(ads, now, previous)
        assert values == tuple(expected[name] for name in EXPECTED_ATTRIBUTES)


@pytest.mark.parametrize(
    ("values", "kept_as"),
    [
        ([1_800_000_000, -3, 0, 0], array),
        ([-(2**63), 2**63 - 1], array),
        ([2**63, 1], tuple),  # beyond 64 bits: kept as they are
        ([-(2**63) - 1, 1], tuple),
        ([Fraction(1, 2), 1], tuple),  # not an int
        ([], array),
    ],
)
def test_whole_numbers_are_packed_in_machine_words_when_they_fit(
    values: list[int], kept_as: type
) -> None:
    packed = packed_ints(values)
    assert type(packed) is kept_as
    assert list(packed) == values
    assert list(line_pairs(packed)) == list(zip(values[::2], values[1::2], strict=True))


def test_lines_kept_flat_are_read_as_pairs_of_at_and_slope_and_an_odd_count_is_refused() -> None:
    assert list(line_pairs(packed_ints([5, 1, 7, -2]))) == [(5, 1), (7, -2)]
    with pytest.raises(ValueError, match="zip"):
        list(line_pairs((1, 2, 3)))


@settings(max_examples=200)
@given(
    ads=slot_ads(span=120),
    previous=previous_values(150),
    reads=st.lists(st.tuples(st.integers(-130, 260), st.booleans()), min_size=1, max_size=30),
    window=st.integers(-60, 300),
    escalation=st.sampled_from(list(Escalation)),
)
def test_blockers_made_when_first_read_agree_with_the_pieces_made_without_them(
    ads: list[dict[str, Any]],
    previous: Any,
    reads: list[tuple[int, bool]],
    window: int,
    escalation: Escalation,
) -> None:
    """A read that lists no blockers makes a piece without their frames, whose lines hold
    to its last second; a read that lists them gives the piece its frames (a piece that
    may end sooner). In any order, every read is the direct functions'."""
    forecast = DrainForecast(ads, previous)
    window_start = T0 + window
    for offset, blockers in reads:
        now = T0 + offset
        lines = forecast.lines(
            now, window_start=window_start, escalation=escalation, blockers=blockers
        )
        if lines is None:  # a deadline that is not a whole second: served directly
            continue
        assert lines.blockers is not None or not blockers
        base = now - lines.d
        for whole in {now, int(min(lines.last, now + 300))}:
            values, verdicts = DrainForecast(ads, previous).read(
                whole, window_start=window_start, escalation=escalation
            )
            d = whole - base
            assert values == tuple(at + slope * d for at, slope in line_pairs(lines.estimates))
            assert verdicts.promise_completion == lines.verdicts[0] + lines.verdicts[1] * d
        if blockers:
            assert forecast.blockers(
                now, window_start=window_start, escalation=escalation
            ) == ad_blockers(ads, now, window_start=window_start, escalation=escalation)
        assert forecast.verdicts(
            now, window_start=window_start, escalation=escalation
        ) == drain_verdicts(
            ads, now, window_start=window_start, escalation=escalation, previous=previous
        )


def test_a_piece_gets_its_blockers_when_they_are_first_read() -> None:
    """The passes make pieces without blockers (about half the cost); the first read
    that lists them makes them, and the piece read then has them until it ends."""
    window, escalation = T0 + 7200.0, Escalation.QUICK
    forecast = DrainForecast(busy())
    forecast.prepare(T0, window_start=window, escalation=escalation)
    assert forecast.ready(T0, window_start=window, escalation=escalation)
    assert not forecast.ready(T0, window_start=window, escalation=escalation, blockers=True)
    lazy = forecast.lines(T0, window_start=window, escalation=escalation, blockers=False)
    assert lazy is not None
    assert lazy.blockers is None
    listed = forecast.blockers(T0 + 50, window_start=window, escalation=escalation)
    assert listed == ad_blockers(busy(), T0 + 50, window_start=window, escalation=escalation)
    assert forecast.ready(T0 + 50, window_start=window, escalation=escalation, blockers=True)
    framed = forecast.lines(T0 + 50, window_start=window, escalation=escalation)
    assert framed is not None
    assert framed.blockers is not None
    assert framed.piece is not lazy.piece
    assert framed.last <= lazy.last  # the frames' order holds for a while of its own
    # what the frames were made with: the same lines
    assert (framed.estimates, framed.verdicts) == (lazy.estimates, lazy.verdicts)
    # and a pass that makes them ahead makes the piece with them at once
    ahead = DrainForecast(busy())
    ahead.prepare(T0, window_start=window, escalation=escalation, blockers=True)
    assert ahead.ready(T0, window_start=window, escalation=escalation, blockers=True)
    # as does a row that asks which piece it would read, to read its blockers next; a
    # piece held is left as it is (the read of the blockers gives it them)
    row = DrainForecast(busy())
    assert row.piece_at(T0, window_start=window, escalation=escalation, blockers=True)
    assert row.ready(T0, window_start=window, escalation=escalation, blockers=True)
    held = DrainForecast(busy())
    held.prepare(T0, window_start=window, escalation=escalation)
    assert held.piece_at(T0, window_start=window, escalation=escalation, blockers=True)
    assert not held.ready(T0, window_start=window, escalation=escalation, blockers=True)


def test_a_piece_lets_go_of_its_blockers_and_reads_as_before() -> None:
    """A reader that listed the blockers once (a whole plan of a large pool) lets go of
    their frames: the piece's lines and last second stay, every read is what it was, and
    the next read that lists the blockers makes them again."""
    window, escalation = T0 + 7200.0, Escalation.QUICK
    forecast = DrainForecast(busy())
    listed = forecast.blockers(T0, window_start=window, escalation=escalation)
    framed = forecast.lines(T0 + 30, window_start=window, escalation=escalation)
    assert framed is not None
    assert framed.blockers is not None
    forecast.let_go_blockers()
    assert forecast.ready(T0 + 30, window_start=window, escalation=escalation)
    assert not forecast.ready(T0 + 30, window_start=window, escalation=escalation, blockers=True)
    assert forecast.made_until(window_start=window, escalation=escalation) == framed.last
    bare = forecast.lines(T0 + 30, window_start=window, escalation=escalation, blockers=False)
    assert bare is not None
    assert bare.blockers is None
    assert (bare.d, bare.last, bare.estimates, bare.verdicts) == (
        framed.d,
        framed.last,
        framed.estimates,
        framed.verdicts,
    )
    assert forecast.blockers(T0, window_start=window, escalation=escalation) == listed
    assert forecast.ready(T0, window_start=window, escalation=escalation, blockers=True)
    forecast.let_go_blockers()  # a piece without them: nothing to let go
    forecast.let_go_blockers()
    assert forecast.read(T0 + 30, window_start=window, escalation=escalation) == DrainForecast(
        busy()
    ).read(T0 + 30, window_start=window, escalation=escalation)
    fresh = DrainForecast(busy())
    fresh.let_go_blockers()  # no piece yet: none made by it
    assert not fresh.ready(T0, window_start=window, escalation=escalation)


def test_a_forecast_given_the_machines_inputs_reads_them_and_not_the_ads() -> None:
    """A caller that read the machine's inputs where it parsed the ads gives them; the
    forecast takes them as the ads' own."""
    machine = {
        "SlotType": "Partitionable",
        "PartitionableSlot": True,
        "State": "Unclaimed",
        "Activity": "Idle",
        "MachineMaxVacateTime": 300,
    }
    job = {
        "SlotType": "Dynamic",
        "State": "Claimed",
        "Activity": "Busy",
        "Cpus": 2,
        "TotalJobRunTime": 100,
        "MaxJobRetirementTime": 1000,
        "MyCurrentTime": T0,
    }
    told = DrainForecast([machine, job], machine=(30, SuspendPolicy.EVICT, T0 + 400))
    as_told = [{**machine, "MachineMaxVacateTime": 30, "DrainSuspendedJobs": "evict"}, job]
    as_told[0] |= {"DrainState": "draining", "DrainingDeadline": T0 + 400}
    for now in (T0, T0 + 200, T0 + 390, T0 + 700):
        assert told.estimates(now) == drain_estimates(as_told, now)
        assert told.estimates(now) != drain_estimates([machine, job], now)


class _Counted(list[dict[str, Any]]):
    """Slot ads that count how often they are read through."""

    reads = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().__iter__()


@settings(max_examples=150)
@given(**reads_for_a_window)
def test_a_forecast_given_its_jobs_inputs_reads_as_one_made_of_the_ads(
    ads: list[dict[str, Any]],
    previous: Any,
    steps: list[int],
    window: int,
    escalation: Escalation,
) -> None:
    """A caller that read the active jobs' inputs where it parsed the ads gives them
    (written flat, as an ingest worker's frame carries them): every read is the one a
    forecast of the ads makes, and the ads are read again for blockers' frames alone."""
    flat = jobs_flat(jobs_of(ads))
    assert jobs_flat_packed(flat) is not None
    assert jobs_from_flat(flat) == jobs_of(ads)
    counted = _Counted(ads)
    told, made = DrainForecast(counted, previous, jobs=flat), DrainForecast(ads, previous)
    counted.reads = 0  # the machine's inputs were read when it was made
    window_start = T0 + window + 0.5
    now = T0
    for step in steps:
        now += step
        read = told.read(now, window_start=window_start, escalation=escalation)
        assert read == made.read(now, window_start=window_start, escalation=escalation)
        assert told.estimates(now) == made.estimates(now)
    assert counted.reads == 0  # no piece read the ads
    assert told.blockers(now) == made.blockers(now) == ad_blockers(ads, now, Schedule.GRACEFUL)


def test_a_forecast_reads_the_jobs_inputs_it_is_given() -> None:
    """The jobs' inputs given are those its pieces are made of (here, a job's run time
    other than its ad's: a caller must give the ads' own)."""
    job = {
        "SlotType": "Dynamic",
        "State": "Claimed",
        "Activity": "Busy",
        "Cpus": 2,
        "TotalJobRunTime": 100,
        "MaxJobRetirementTime": 1000,
        "MyCurrentTime": T0,
    }
    other = jobs_flat(jobs_of([{**job, "TotalJobRunTime": 400}]))
    told = DrainForecast([job], jobs=other)
    assert told.estimates(T0) == drain_estimates([{**job, "TotalJobRunTime": 400}], T0)
    assert told.estimates(T0) != drain_estimates([job], T0)


def test_jobs_written_flat_that_no_job_writes_are_not_well_formed() -> None:
    busy = jobs_flat(jobs_of([{"State": "Claimed", "Activity": "Busy", "SlotType": "Dynamic"}]))
    assert jobs_flat_packed(busy) == array("q", busy)
    assert jobs_flat_packed([]) == array("q")  # no job: an empty array, not None
    assert jobs_flat_packed(busy[:-1]) is None
    assert jobs_flat_packed([9, *busy[1:]]) is None  # no such activity
    assert jobs_flat_packed([busy[0], 8, *busy[2:]]) is None  # no such flag
    assert jobs_flat_packed([*busy[:3], 2**63, *busy[4:]]) is None
    assert jobs_flat_packed([*busy[:3], True, *busy[4:]]) is None
