"""Completion hooks and the health gate in the model: tables, moves, the ad, restarts."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from slots import (
    HEALTH_MOVES,
    AwaitHook,
    DrainState,
    HealthEvent,
    HealthPolicy,
    HealthState,
    HookRunning,
    HookState,
    IllegalHealthTransition,
    InvalidRequest,
    JobSpec,
    Machine,
    MachinePolicy,
    NoSuchHook,
    NoSuchRequest,
    NotAccepting,
    OnCompletion,
    Publish,
    Resources,
    RunHealthCheck,
    RunHook,
    Schedule,
    SlotsError,
    ad_text,
    check_health_move,
    kept_output,
    outcome_message,
    parse_long,
    printable_tail,
    render_long,
)

T0 = 1_000_000.0
TOTAL = Resources(cpus=4, memory=8192)
HOOKS = frozenset({"reboot", "firmware"})


def policy(*, passes: int | None = 2, interval: float = 30.0) -> MachinePolicy:
    health = None if passes is None else HealthPolicy(passes=passes, interval=interval)
    return MachinePolicy(hooks=HOOKS, health=health)


def machine(*, passes: int | None = 2) -> Machine:
    return Machine(host="node1", total=TOTAL, policy=policy(passes=passes), now=T0)


def drain_with_hook(m: Machine, *, now: float = T0 + 1, hook: str = "reboot") -> list[Any]:
    _, _, actions = m.start_draining(
        now, schedule=Schedule.QUICK, on_completion=OnCompletion.HOOK, hook=hook, commit=True
    )
    return actions


def start_hook(
    m: Machine, *, now: float = T0 + 2, boot: str = "boot-1", reboots: bool = True
) -> None:
    m.hook_started(
        now, "1", pid=4242, process_start=now, boot_id=boot, reboots=reboots, timeout=600
    )


def restart(m: Machine, now: float, new_policy: MachinePolicy | None = None) -> Machine:
    document = json.loads(json.dumps(m.snapshot()))
    return Machine.restore(
        document, host=m.host, total=m.total, policy=new_policy or m.policy, now=now
    )


def machine_ad(m: Machine, now: float) -> dict[str, Any]:
    ad: dict[str, Any] = m.ad(now)["machine"]
    return ad


# --------------------------------------------------------------------- the health gate's table

HEALTH_LEGAL = {
    ("passing", "close", "pending"),
    ("pending", "close", "pending"),
    ("failing", "close", "failing"),
    ("pending", "pass", "pending"),
    ("failing", "pass", "pending"),
    ("pending", "fail", "failing"),
    ("failing", "fail", "failing"),
    ("pending", "healthy", "passing"),
    ("failing", "healthy", "passing"),
    ("pending", "disable", "passing"),
    ("failing", "disable", "passing"),
    ("passing", "restore", "passing"),
    ("pending", "restore", "pending"),
    ("failing", "restore", "failing"),
}


def test_the_health_table_is_exactly_the_documented_moves() -> None:
    assert {(str(a), str(e), str(b)) for a, e, b in HEALTH_MOVES} == HEALTH_LEGAL


@pytest.mark.parametrize(
    ("current", "event", "new"), list(itertools.product(HealthState, HealthEvent, HealthState))
)
def test_every_health_move(current: HealthState, event: HealthEvent, new: HealthState) -> None:
    if (str(current), str(event), str(new)) in HEALTH_LEGAL:
        check_health_move(current, event, new)
    else:
        with pytest.raises(IllegalHealthTransition, match=r"health gate: .* cannot move") as e:
            check_health_move(current, event, new)
        assert (e.value.code, e.value.http_status) == ("health.illegal_transition", 409)


def test_only_a_health_check_or_its_removal_opens_the_gate() -> None:
    opening = {(a, e) for a, e, b in HEALTH_MOVES if b is HealthState.PASSING and a is not b}
    assert {e for _, e in opening} == {HealthEvent.HEALTHY, HealthEvent.DISABLE}


# --------------------------------------------------------------------- asking for a hook


def test_a_drain_naming_an_unknown_hook_is_refused_and_changes_nothing() -> None:
    m = machine()
    before = m.snapshot()
    with pytest.raises(
        NoSuchHook, match=r"no hook named .reimage.*configured: firmware, reboot"
    ) as e:
        m.start_draining(
            T0 + 1, schedule=Schedule.GRACEFUL, on_completion=OnCompletion.HOOK, hook="reimage"
        )
    assert (e.value.code, e.value.http_status) == ("drain.no_such_hook", 422)
    assert m.snapshot() == before


@pytest.mark.parametrize(
    ("on_completion", "hook", "message"),
    [
        (OnCompletion.HOOK, None, "needs the hook's name"),
        (OnCompletion.NONE, "reboot", "goes with on_completion hook"),
        (OnCompletion.HOOK, "/sbin/reboot", "is not a hook name"),
        (OnCompletion.HOOK, "reboot now", "is not a hook name"),
        (OnCompletion.HOOK, "", "is not a hook name"),
        (OnCompletion.HOOK, "x" * 65, "is not a hook name"),
    ],
)
def test_a_malformed_hook_request_is_invalid(
    on_completion: OnCompletion, hook: str | None, message: str
) -> None:
    m = machine()
    before = m.snapshot()
    with pytest.raises(InvalidRequest, match=message):
        m.start_draining(T0 + 1, schedule=Schedule.GRACEFUL, on_completion=on_completion, hook=hook)
    assert m.snapshot() == before


def test_a_policy_refuses_a_malformed_hook_name() -> None:
    with pytest.raises(InvalidRequest, match="is not a hook name"):
        MachinePolicy(hooks=frozenset({"rm -rf"}))


def test_on_completion_is_shown_as_on_the_wire() -> None:
    m = machine()
    request, _, _ = m.start_draining(
        T0 + 1, schedule=Schedule.GRACEFUL, on_completion=OnCompletion.HOOK, hook="firmware"
    )
    assert request.completion == "hook:firmware"
    assert machine_ad(m, T0 + 1)["DrainOnCompletion"] == "hook:firmware"


# --------------------------------------------------------------------- the hook's life


def test_the_hook_is_due_only_once_the_last_job_is_gone() -> None:
    m = machine()
    claim, _ = m.claim(T0, resources=Resources(cpus=1), spec=JobSpec())
    actions = drain_with_hook(m)
    assert not any(isinstance(a, RunHook) for a in actions)
    assert str(m.drain_state) == "draining"
    actions = m.job_exited(T0 + 5, claim.claim_id)
    assert [a for a in actions if isinstance(a, RunHook)] == [
        RunHook(request_id="1", name="reboot")
    ]
    assert m.drain_state is DrainState.HOOK_PENDING
    assert (m.ad(T0 + 5)["machine"]["DrainHookState"], m.accepting()) == ("pending", False)


def test_an_empty_node_has_its_hook_due_at_commit() -> None:
    m = machine()
    actions = drain_with_hook(m)
    assert RunHook(request_id="1", name="reboot") in actions
    assert m.drain_state is DrainState.HOOK_PENDING


@pytest.mark.parametrize("stage", ["pending", "running", "failed"])
def test_the_node_stays_closed_while_a_hook_is_due_runs_or_failed(stage: str) -> None:
    m = machine()
    drain_with_hook(m)
    if stage != "pending":
        start_hook(m)
    if stage == "failed":
        m.hook_ended(T0 + 3, "1", exit_status=1)
    ad = machine_ad(m, T0 + 4)
    assert (ad["Start"], ad["DrainState"], ad["Draining"]) == (False, "drained", True)
    assert ad["DrainHookState"] == stage
    assert m.drain_state is DrainState(f"hook_{stage}")
    with pytest.raises(NotAccepting):
        m.claim(T0 + 4, resources=Resources(cpus=1), spec=JobSpec())


def test_a_hook_that_ends_well_completes_the_drain_and_the_node_opens_only_when_healthy() -> None:
    m = machine(passes=2)
    drain_with_hook(m)
    start_hook(m)
    actions = m.hook_ended(T0 + 60, "1", exit_status=0, output="updated\nbye\n")
    assert RunHealthCheck() in actions
    assert m.request is None
    last = m.last_request
    assert last is not None
    assert last.state is DrainState.COMPLETED
    assert last.hook_run is not None
    assert last.hook_run.state is HookState.SUCCEEDED
    ad = machine_ad(m, T0 + 60)
    assert ad["Start"] is False
    assert ad["HealthState"] == "pending"
    assert ad["HealthReason"] == "drain request 1 completed (hook:reboot)"
    assert (ad["DrainHookExitStatus"], ad["DrainHookMessage"]) == (0, "exit status 0")
    assert ad["DrainHookOutput"] == "updated\\nbye"
    # First pass: still closed; the second is due one interval later.
    assert m.health_result(T0 + 61, passed=True, message="passed") == [Publish()]
    assert (m.accepting(), m.next_wakeup()) == (False, T0 + 91)
    assert m.tick(T0 + 90.5) == []
    assert m.tick(T0 + 91) == [RunHealthCheck(), Publish()]
    m.health_result(T0 + 92, passed=True, message="passed")
    assert m.accepting() is True
    assert machine_ad(m, T0 + 92)["HealthState"] == "passing"


@pytest.mark.parametrize(
    ("status", "timed_out", "message"),
    [
        (3, False, "exit status 3"),
        (-9, False, "killed by SIGKILL"),
        (-15, True, "timed out after 600 s (SIGTERM, then SIGKILL)"),
        (None, False, "exit status unknown"),
    ],
)
def test_a_failed_hook_keeps_the_node_closed_with_the_failure_shown(
    status: int | None, timed_out: bool, message: str
) -> None:
    m = machine()
    drain_with_hook(m)
    start_hook(m)
    actions = m.hook_ended(T0 + 9, "1", exit_status=status, timed_out=timed_out, output="oops")
    assert actions == [Publish()]
    assert m.drain_state is DrainState.HOOK_FAILED
    ad = machine_ad(m, T0 + 9)
    assert (ad["Start"], ad["DrainHookState"], ad["DrainHookMessage"]) == (False, "failed", message)
    assert ad.get("DrainHookExitStatus") == status
    assert (ad["DrainHookStartTime"], ad["DrainHookEndTime"]) == (T0 + 2, T0 + 9)
    assert ad["HealthState"] == "passing"  # the gate is not the reason: the drain is


def test_a_hook_that_cannot_start_fails_without_a_start_time() -> None:
    m = machine()
    drain_with_hook(m)
    m.hook_not_started(T0 + 2, "1", "the state could not be written: disk full")
    ad = machine_ad(m, T0 + 2)
    assert ad["DrainHookState"] == "failed"
    assert ad["DrainHookMessage"] == "not started: the state could not be written: disk full"
    assert "DrainHookStartTime" not in ad
    assert m.drain_state is DrainState.HOOK_FAILED


def test_a_running_hook_cannot_be_cancelled_and_nothing_changes() -> None:
    m = machine()
    drain_with_hook(m)
    start_hook(m)
    before = m.snapshot()
    for request_id in ("1", None):
        with pytest.raises(HookRunning, match="its hook 'reboot' is running") as e:
            m.cancel_draining(T0 + 3, request_id)
        assert (e.value.code, e.value.http_status) == ("drain.hook_running", 409)
    assert m.snapshot() == before


@pytest.mark.parametrize("stage", ["pending", "failed"])
def test_cancelling_a_due_or_failed_hook_checks_health_before_service(stage: str) -> None:
    m = machine(passes=1)
    drain_with_hook(m)
    if stage == "failed":
        start_hook(m)
        m.hook_ended(T0 + 3, "1", exit_status=2)
    actions = m.cancel_draining(T0 + 4)
    assert RunHealthCheck() in actions
    assert m.request is None
    assert m.accepting() is False
    ad = machine_ad(m, T0 + 4)
    assert ad["HealthReason"] == "drain request 1 cancelled"
    with pytest.raises(NotAccepting, match="not yet healthy"):
        m.claim(T0 + 4, resources=Resources(cpus=1), spec=JobSpec())
    m.health_result(T0 + 5, passed=True, message="passed")
    assert m.accepting() is True


def test_the_shell_must_not_start_a_hook_whose_drain_was_cancelled() -> None:
    m = machine(passes=None)
    drain_with_hook(m)
    m.cancel_draining(T0 + 2)
    assert m.accepting() is True  # no health check: opens at once, as before
    with pytest.raises(NoSuchRequest):
        start_hook(m)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.hook_ended(T0 + 3, "1", exit_status=0), "not hook_running"),
        (lambda m: m.hook_lost(T0 + 3, "1", boot_id="x"), "not hook_running"),
    ],
)
def test_a_step_out_of_turn_is_refused(call: Any, message: str) -> None:
    m = machine()
    drain_with_hook(m)
    before = m.snapshot()
    with pytest.raises(InvalidRequest, match=message):
        call(m)
    assert m.snapshot() == before


def test_without_a_health_check_a_hook_that_ends_well_opens_the_node_at_once() -> None:
    m = machine(passes=None)
    drain_with_hook(m)
    start_hook(m)
    actions = m.hook_ended(T0 + 9, "1", exit_status=0)
    assert RunHealthCheck() not in actions
    assert m.accepting() is True
    assert "HealthState" not in machine_ad(m, T0 + 9)


# --------------------------------------------------------------------- health checks


def test_a_failing_check_keeps_the_node_closed_and_is_retried_at_the_interval() -> None:
    m = machine(passes=2)
    drain_with_hook(m)
    m.cancel_draining(T0 + 2)
    m.health_result(T0 + 3, passed=False, message="exit status 1", output="disk /scratch missing\n")
    ad = machine_ad(m, T0 + 3)
    assert (ad["HealthState"], ad["HealthFailures"], ad["Start"]) == ("failing", 1, False)
    assert (ad["HealthMessage"], ad["HealthOutput"]) == ("exit status 1", "disk /scratch missing")
    assert ad["HealthNextCheck"] == T0 + 33
    assert m.tick(T0 + 33) == [RunHealthCheck(), Publish()]
    m.health_result(T0 + 34, passed=False, message="exit status 1")
    assert machine_ad(m, T0 + 34)["HealthFailures"] == 2
    # A pass after failures starts the count again: two in a row are needed.
    m.tick(T0 + 64)
    m.health_result(T0 + 65, passed=True, message="passed")
    assert machine_ad(m, T0 + 65)["HealthState"] == "pending"
    assert m.accepting() is False
    m.tick(T0 + 95)
    m.health_result(T0 + 96, passed=False, message="exit status 1")
    m.tick(T0 + 126)
    m.health_result(T0 + 127, passed=True, message="passed")
    m.tick(T0 + 157)
    m.health_result(T0 + 158, passed=True, message="passed")
    assert m.accepting() is True
    assert machine_ad(m, T0 + 158)["HealthFailures"] == 0


def test_no_second_check_is_asked_for_while_one_runs() -> None:
    m = machine()
    drain_with_hook(m)
    assert RunHealthCheck() in m.cancel_draining(T0 + 2)
    assert m.next_wakeup() is None
    assert m.tick(T0 + 500) == []


def test_a_result_asked_for_before_the_gate_closed_again_does_not_count() -> None:
    m = machine(passes=1)
    drain_with_hook(m)
    m.cancel_draining(T0 + 2)  # a check runs from T0 + 2
    drain_with_hook(m, now=T0 + 3)
    m.cancel_draining(T0 + 4, "2")  # closed again: that check says nothing of now
    actions = m.health_result(T0 + 5, passed=True, message="passed")
    assert actions == [RunHealthCheck(), Publish()]
    assert m.accepting() is False
    m.health_result(T0 + 6, passed=True, message="passed")
    assert m.accepting() is True


@pytest.mark.parametrize("action", ["resume", "exit", "restart"])
def test_every_completion_of_a_drained_node_closes_the_gate(action: str) -> None:
    m = machine(passes=1)
    m.start_draining(
        T0 + 1, schedule=Schedule.FAST, on_completion=OnCompletion(action), commit=True
    )
    assert m.request is None
    assert machine_ad(m, T0 + 1)["HealthReason"] == f"drain request 1 completed ({action})"
    assert m.accepting() is False


def test_cancelling_a_drain_that_never_emptied_the_node_opens_it_at_once() -> None:
    m = machine(passes=1)
    m.claim(T0, resources=Resources(cpus=1), spec=JobSpec())
    m.start_draining(T0 + 1, schedule=Schedule.GRACEFUL, commit=True)
    actions = m.cancel_draining(T0 + 2)
    assert RunHealthCheck() not in actions
    assert m.accepting() is True


def test_a_new_drain_may_be_requested_while_the_gate_is_closed() -> None:
    m = machine(passes=1)
    drain_with_hook(m)
    m.cancel_draining(T0 + 2)
    request, _, _ = m.start_draining(T0 + 3, schedule=Schedule.FAST, commit=True)
    assert request.state is DrainState.DRAINED


def test_unconfiguring_the_health_check_opens_a_closed_gate() -> None:
    m = machine(passes=3)
    drain_with_hook(m)
    m.cancel_draining(T0 + 2)
    m.set_policy(T0 + 3, policy(passes=None))
    assert m.accepting() is True
    assert m.health_result(T0 + 4, passed=False, message="late") == []
    assert m.accepting() is True


def test_a_result_with_no_check_asked_for_changes_nothing() -> None:
    m = machine()
    before = m.snapshot()
    assert m.health_result(T0 + 1, passed=False, message="stray") == []
    assert m.snapshot() == before


# --------------------------------------------------------------------- restarts


def test_a_restart_starts_a_due_hook_it_had_not_started() -> None:
    m = machine()
    drain_with_hook(m)
    restored = restart(m, T0 + 50)
    assert restored.restarted(T0 + 50, boot_id="boot-1") == [RunHook(request_id="1", name="reboot")]


def test_a_reboot_during_a_reboots_hook_counts_as_its_success_then_health() -> None:
    m = machine(passes=1)
    drain_with_hook(m)
    start_hook(m, boot="boot-1", reboots=True)
    restored = restart(m, T0 + 300)
    actions = restored.restarted(T0 + 300, boot_id="boot-2")
    assert RunHealthCheck() in actions
    last = restored.last_request
    assert last is not None
    assert last.hook_run is not None
    assert (last.state, last.hook_run.state) == (DrainState.COMPLETED, HookState.SUCCEEDED)
    assert last.hook_run.message == "the machine rebooted during the hook"
    assert restored.accepting() is False
    restored.health_result(T0 + 301, passed=True, message="passed")
    assert restored.accepting() is True


def test_the_same_boot_means_the_daemon_waits_for_the_hook_and_never_reruns_it() -> None:
    m = machine(passes=1)
    drain_with_hook(m)
    start_hook(m, now=T0 + 2, boot="boot-1")
    restored = restart(m, T0 + 30)
    actions = restored.restarted(T0 + 30, boot_id="boot-1")
    assert actions == [
        AwaitHook(
            request_id="1",
            name="reboot",
            pid=4242,
            process_start=T0 + 2,
            deadline_at=T0 + 602,
        )
    ]
    assert not any(isinstance(a, RunHook) for a in actions)
    actions = restored.hook_lost(T0 + 40, "1", boot_id="boot-1", output="half done")
    assert RunHealthCheck() in actions
    last = restored.last_request
    assert last is not None
    assert last.hook_run is not None
    assert last.hook_run.state is HookState.INTERRUPTED
    assert "agent restarted while the hook ran" in (last.hook_run.message or "")
    assert last.hook_run.output == "half done"


@pytest.mark.parametrize(("boot", "reboots"), [("boot-1", True), ("boot-2", False)])
def test_an_interrupted_hook_without_a_health_check_fails(boot: str, reboots: bool) -> None:
    m = machine(passes=None)
    drain_with_hook(m)
    start_hook(m, boot="boot-1", reboots=reboots)
    restored = restart(m, T0 + 30)
    restored.restarted(T0 + 30, boot_id=boot)
    if boot == "boot-1":
        restored.hook_lost(T0 + 31, "1", boot_id=boot)
    assert restored.drain_state is DrainState.HOOK_FAILED
    ad = machine_ad(restored, T0 + 31)
    assert (ad["DrainHookState"], ad["Start"]) == ("interrupted", False)


def test_a_closed_gate_survives_a_restart_with_its_check_due_at_once() -> None:
    m = machine(passes=2)
    drain_with_hook(m)
    m.cancel_draining(T0 + 2)
    m.health_result(T0 + 3, passed=True, message="passed")
    restored = restart(m, T0 + 10)
    assert restored.accepting() is False
    assert restored.health.passes == 1
    assert restored.restarted(T0 + 10, boot_id=None) == [RunHealthCheck(), Publish()]


def test_a_closed_gate_opens_at_a_restart_with_no_health_check_configured() -> None:
    m = machine(passes=2)
    drain_with_hook(m)
    m.cancel_draining(T0 + 2)
    restored = restart(m, T0 + 10, policy(passes=None))
    assert restored.accepting() is True


def test_a_version_1_snapshot_is_read_with_an_open_gate() -> None:
    m = machine()
    document = m.snapshot()
    document["version"] = 1
    del document["health"]
    assert restart_document(document).health.state is HealthState.PASSING


def restart_document(document: dict[str, Any]) -> Machine:
    return Machine.restore(document, host="node1", total=TOTAL, policy=policy(), now=T0 + 1)


# --------------------------------------------------------------------- ads and outputs


def test_the_ad_with_a_hook_and_health_reads_back_unchanged() -> None:
    m = machine()
    drain_with_hook(m)
    start_hook(m)
    m.hook_ended(
        T0 + 9, "1", exit_status=1, output='line "one"\r\nback\\slash\ttab\x1b[31m\u2028end\n'
    )
    m.cancel_draining(T0 + 10)
    m.health_result(T0 + 11, passed=False, message="exit status 2", output="a\nb")
    ad = m.ad(T0 + 12)
    text = render_long([ad["machine"], *ad["slots"]])
    assert parse_long(text) == [ad["machine"], *ad["slots"]]
    assert ad["machine"]["DrainHookOutput"] == 'line "one"\\nback\\slash tab?[31m?end'


def test_outputs_are_printable_bounded_tails() -> None:
    assert printable_tail("a\x00b\r\nc\x7fd\u2028") == "a?b\nc?d?"
    assert printable_tail("x" * 5000 + "end", 10) == "xxxxxxxend"
    assert ad_text("") is None
    assert ad_text("a\nb\n\n") == "a\\nb"
    assert len(ad_text("y" * 3000) or "") == 1024


@pytest.mark.parametrize(
    ("output", "dropped", "limit", "kept"),
    [
        ("abc", 0, 10, ("abc", 0)),
        ("abc", 7, 10, ("abc", 7)),
        ("0123456789", 5, 4, ("6789", 11)),
        ("é" * 6, 0, 4, ("éééé", 4)),  # counted in UTF-8 bytes
        ("a\r\nb", 0, 2, ("\nb", 1)),  # as printed: "\r\n" is one newline
        ("", -3, 4, ("", 0)),
    ],
)
def test_what_is_kept_of_an_output_and_how_much_is_not(
    output: str, dropped: int, limit: int, kept: tuple[str, int]
) -> None:
    assert kept_output(output, dropped=dropped, limit=limit) == kept


def test_the_bytes_not_kept_of_a_hook_and_a_check_are_shown_and_survive_a_restart() -> None:
    m = machine()
    drain_with_hook(m)
    start_hook(m)
    m.hook_ended(T0 + 9, "1", exit_status=1, output="x" * 5000, output_dropped=100)
    m.cancel_draining(T0 + 10)
    m.health_result(
        T0 + 11, passed=False, message="exit status 1", output="y" * 1030, output_dropped=9
    )
    for seen in (m, restart(m, T0 + 12)):
        ad = machine_ad(seen, T0 + 12)
        assert (ad["DrainHookOutputDropped"], ad["HealthOutputDropped"]) == (100 + 904, 9 + 6)
        assert seen.health.output == "y" * 1024
    quiet = machine()
    drain_with_hook(quiet)
    start_hook(quiet)
    quiet.hook_ended(T0 + 9, "1", exit_status=0, output="fine\n")
    ad = machine_ad(quiet, T0 + 10)
    assert "DrainHookOutputDropped" not in ad  # none dropped: absent, as undefined


@pytest.mark.parametrize(
    ("status", "timed_out", "expected"),
    [
        (0, None, "exit status 0"),
        (-6, None, "killed by SIGABRT"),
        (-99, None, "killed by signal 99"),
        (1, 2.5, "timed out after 2.5 s (SIGTERM, then SIGKILL)"),
    ],
)
def test_outcome_messages(status: int, timed_out: float | None, expected: str) -> None:
    assert outcome_message(status, timed_out=timed_out) == expected


def test_every_error_here_leaves_a_stable_code() -> None:
    for error in (NoSuchHook, HookRunning, IllegalHealthTransition):
        assert issubclass(error, SlotsError)
        assert error.code.count(".") == 1
