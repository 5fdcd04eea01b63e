"""Admission before a maintenance window (``before_window``), with explicit ``now``."""

from __future__ import annotations

import dataclasses

import pytest

from slots import (
    BeforeWindow,
    JobSpec,
    Machine,
    MachinePolicy,
    NotAccepting,
    Resources,
    Schedule,
    WindowAhead,
    admit_before_window,
    window_start,
)

T0 = 1_000_000.0
START = 1_000_600  # the window starts 600 s after T0
REFUSE, SHORTEN, ADMIT = BeforeWindow.REFUSE, BeforeWindow.SHORTEN, BeforeWindow.ADMIT

# (policy, promise remaining, window start, now) -> the cut (None: admitted as asked),
# or "refused"
RULE = [
    # a promise that ends before the window
    (REFUSE, 120, START, T0, None),
    (SHORTEN, 120, START, T0, None),
    (ADMIT, 120, START, T0, None),
    # one that ends exactly at its start
    (REFUSE, 600, START, T0, None),
    (SHORTEN, 600, START, T0, None),
    (ADMIT, 600, START, T0, None),
    # one that ends after it
    (REFUSE, 1200, START, T0, "refused"),
    (SHORTEN, 1200, START, T0, 600),
    (ADMIT, 1200, START, T0, None),
    # a second past it; a fraction of a second before now rounds the longest down
    (REFUSE, 601, START, T0, "refused"),
    (SHORTEN, 601, START, T0 + 0.5, 599),
    # a promise of 0 always fits
    (REFUSE, 0, START, T0, None),
    (SHORTEN, 0, START, START - 0.5, None),
    (REFUSE, 0, START, START - 0.5, None),
    # no window
    (REFUSE, 1200, None, T0, None),
    (SHORTEN, 1200, None, T0, None),
    # a window that has started: the master's drain handles the machine
    (REFUSE, 1200, START, START, None),
    (SHORTEN, 1200, START, START + 60, None),
    (ADMIT, 1200, START, START + 60, None),
]


@pytest.mark.parametrize(("policy", "remaining", "start", "now", "expected"), RULE)
def test_the_rule(
    policy: BeforeWindow, remaining: int, start: int | None, now: float, expected: object
) -> None:
    if expected == "refused":
        with pytest.raises(WindowAhead) as caught:
            admit_before_window(now, remaining=remaining, start=start, policy=policy)
        assert caught.value.code == "machine.window_ahead"
        assert caught.value.http_status == 409
        assert start is not None
        assert caught.value.window_start == start
        assert caught.value.longest == int(start - now)
    else:
        assert admit_before_window(now, remaining=remaining, start=start, policy=policy) == expected


def test_the_refusal_names_the_window_and_the_longest_promise() -> None:
    with pytest.raises(WindowAhead) as caught:
        admit_before_window(T0 + 0.25, remaining=1200, start=START, policy=REFUSE)
    assert caught.value.message == (
        "the machine's maintenance window starts at 1970-01-12T13:56:40Z: a retirement "
        "promise of 1200 s would end after it; the longest it can accept now is 599 s"
    )
    assert caught.value.longest == 599


@pytest.mark.parametrize(
    ("unavailability", "expected"),
    [
        (None, None),
        ({"Start": START}, START),
        ({"Start": START, "Duration": 60}, START),
        ({}, None),
    ],
)
def test_window_start(unavailability: dict[str, int] | None, expected: int | None) -> None:
    assert window_start(unavailability) == expected


def machine(policy: BeforeWindow, *, mjrt: int = 3600, start: str = "true") -> Machine:
    m = Machine(
        host="node1",
        total=Resources(cpus=8, memory=4096),
        policy=MachinePolicy(max_job_retirement_time=mjrt, before_window=policy, start=start),
        now=T0,
    )
    m.set_maintenance("DRAINING", {"Start": START, "Duration": 3600})
    return m


def claim(m: Machine, now: float, promise: int | None, **kw: object) -> str:
    info, _ = m.claim(
        now,
        resources=Resources(cpus=1),
        spec=JobSpec(max_job_retirement_time=promise),
        **kw,  # type: ignore[arg-type]
    )
    return info.claim_id


# (policy, the job's promise, the machine's MaxJobRetirementTime) -> the promise granted
# and by how much it was shortened, or "refused"
MACHINE = [
    (REFUSE, 120, 3600, (120, None)),
    (REFUSE, 1200, 3600, "refused"),
    (REFUSE, 1200, 300, (300, None)),  # the machine's lower promise is the one that counts
    (REFUSE, None, 3600, "refused"),  # no promise of its own: the machine's whole one
    (REFUSE, None, 600, (600, None)),
    (REFUSE, 0, 3600, (0, None)),
    (SHORTEN, 1200, 3600, (600, 600)),
    (SHORTEN, None, 3600, (600, 3000)),
    (SHORTEN, 120, 3600, (120, None)),
    (ADMIT, 1200, 3600, (1200, None)),
]


@pytest.mark.parametrize(("policy", "promise", "mjrt", "expected"), MACHINE)
def test_a_claim_before_the_window(
    policy: BeforeWindow, promise: int | None, mjrt: int, expected: tuple[int, int | None] | str
) -> None:
    m = machine(policy, mjrt=mjrt)
    if expected == "refused":
        before = m.snapshot()
        with pytest.raises(WindowAhead):
            claim(m, T0, promise)
        assert m.snapshot() == before
        with pytest.raises(WindowAhead):
            m.check_claim(
                T0, resources=Resources(cpus=1), spec=JobSpec(max_job_retirement_time=promise)
            )
        return
    claim_id = claim(m, T0, promise)
    assert isinstance(expected, tuple)
    granted, shortened_by = expected
    info = m.claim_info(claim_id, T0)
    assert info.retirement_shortened_by == shortened_by
    slot = next(s for s in m.ad(T0)["slots"] if s.get("ClaimId") == claim_id)
    assert slot["MaxJobRetirementTime"] == granted
    assert slot["RetirementTimeRemaining"] == granted
    assert slot.get("RetirementShortenedBy") == shortened_by
    # the promise holds: a graceful drain now has it gone by the window's start
    estimate = m.drain_estimate(T0, Schedule.GRACEFUL)
    assert (estimate.completion <= START) is (policy is not ADMIT)


def test_a_shortened_promise_survives_a_restart() -> None:
    m = machine(SHORTEN)
    claim_id = claim(m, T0, 1200)
    again = Machine.restore(m.snapshot(), host="node1", total=m.total, policy=m.policy, now=T0 + 1)
    assert again.claim_info(claim_id, T0 + 1).retirement_shortened_by == 600


def test_a_job_that_ran_already_is_shortened_by_what_remains() -> None:
    m = machine(SHORTEN)
    claim_id = claim(m, T0, 1200, started_at=T0 - 100)
    slot = next(s for s in m.ad(T0)["slots"] if s.get("ClaimId") == claim_id)
    assert slot["MaxJobRetirementTime"] == 700
    assert slot["RetirementTimeRemaining"] == 600
    assert slot["RetirementShortenedBy"] == 500


def test_the_window_moved_later_admits_what_it_refused() -> None:
    m = machine(REFUSE)
    with pytest.raises(WindowAhead):
        claim(m, T0, 1200)
    m.set_maintenance("DRAINING", {"Start": START + 1800, "Duration": 3600})
    claim(m, T0, 1200)
    m.set_maintenance(None, None)
    claim(m, T0, 3600)


def test_the_window_is_flat_in_the_ad_and_only_while_there_is_one() -> None:
    m = machine(REFUSE)
    ad = m.ad(T0)
    assert ad["machine"]["Unavailability"] == {"Start": START, "Duration": 3600}
    assert ad["machine"]["UnavailabilityStart"] == START
    assert ad["machine"]["UnavailabilityDuration"] == 3600
    m.set_maintenance("DRAINING", {"Start": START})
    assert "UnavailabilityDuration" not in m.ad(T0)["machine"]
    m.set_maintenance(None, None)
    ad = m.ad(T0)
    assert not {"Unavailability", "UnavailabilityStart", "UnavailabilityDuration"} & set(
        ad["machine"]
    )


#: A site's own rule: no new work within a day of a window (``time()`` is the real clock).
GUARD = "MY.UnavailabilityStart is undefined || MY.UnavailabilityStart - time() > 86400"


def test_start_reads_the_window() -> None:
    m = machine(ADMIT, start=GUARD)  # a window in 1970: long begun, as time() goes
    assert m.ad(T0)["machine"]["Start"] is False
    with pytest.raises(NotAccepting):
        claim(m, T0, 0)
    m.set_maintenance("DRAINING", {"Start": 4_000_000_000})  # in 2096
    assert m.ad(T0)["machine"]["Start"] is True
    claim(m, T0, 0)
    m.set_maintenance(None, None)
    assert m.ad(T0)["machine"]["Start"] is True
    claim(m, T0, 0)


def test_a_new_policy_applies_to_the_next_claim() -> None:
    m = machine(REFUSE)
    with pytest.raises(WindowAhead):
        claim(m, T0, 1200)
    m.set_policy(T0, dataclasses.replace(m.policy, before_window=SHORTEN))
    claim_id = claim(m, T0, 1200)
    assert m.claim_info(claim_id, T0).retirement_shortened_by == 600
    m.set_policy(T0, dataclasses.replace(m.policy, before_window=ADMIT))
    claim_id = claim(m, T0, 1200)
    assert m.claim_info(claim_id, T0).retirement_shortened_by is None


@pytest.mark.parametrize("policy", [REFUSE, SHORTEN, ADMIT])
def test_the_ad_says_how_the_node_admits_before_a_window(policy: BeforeWindow) -> None:
    m = machine(policy)
    ad = m.ad(T0)
    assert ad["machine"]["BeforeWindow"] == str(policy)
    assert {slot["BeforeWindow"] for slot in ad["slots"]} == {str(policy)}
