"""The command line and completion hooks: --then, the status view, --wait's end, cancel."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from nodeagent.cli import _agent
from nodeagent.cli._errors import UsageError
from nodeagent.cli._render import render_drain_end, status_view
from slots import HealthPolicy, Machine, MachinePolicy, OnCompletion, Resources, Schedule

T0 = 1_800_000_000.0


def _text(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None, markup=False, highlight=False).print(renderable)
    return out.getvalue()


def _machine() -> Machine:
    return Machine(
        host="node17",
        total=Resources(cpus=4),
        policy=MachinePolicy(hooks=frozenset({"reboot"}), health=HealthPolicy(passes=2)),
        now=T0,
    )


@pytest.fixture
def failed_hook() -> Machine:
    m = _machine()
    m.start_draining(
        T0 + 1, schedule=Schedule.FAST, on_completion=OnCompletion.HOOK, hook="reboot", commit=True
    )
    m.hook_started(T0 + 2, "1", pid=77, process_start=T0 + 2, boot_id="b", reboots=True, timeout=60)
    m.hook_ended(T0 + 9, "1", exit_status=3, output="step 1 ok\nstep 2: device busy\n")
    return m


def test_status_shows_a_failed_hook_its_output_and_what_to_do(failed_hook: Machine) -> None:
    text = _text(status_view(failed_hook.ad(T0 + 20)))
    assert "Start=false" in text
    assert "hook reboot (drain 1): failed" in text
    assert ": exit status 3" in text
    assert "    | step 1 ok\n    | step 2: device busy" in text
    assert "nodeagent cancel 1" in text
    assert "health: passing" in text


def test_status_says_how_much_of_an_output_was_not_kept() -> None:
    m = _machine()
    m.start_draining(
        T0 + 1, schedule=Schedule.FAST, on_completion=OnCompletion.HOOK, hook="reboot", commit=True
    )
    m.hook_started(T0 + 2, "1", pid=77, process_start=T0 + 2, boot_id="b", reboots=True, timeout=60)
    m.hook_ended(T0 + 9, "1", exit_status=1, output="the end\n", output_dropped=104_853_504)
    text = _text(status_view(m.ad(T0 + 20)))
    assert "    | [… 104,853,504 earlier bytes not kept]\n    | the end" in text


def test_status_shows_a_node_waiting_for_its_health_check(failed_hook: Machine) -> None:
    failed_hook.cancel_draining(T0 + 30)
    failed_hook.health_result(T0 + 31, passed=False, message="exit status 1", output="no /scratch")
    text = _text(status_view(failed_hook.ad(T0 + 40)))
    assert "not draining" in text
    assert (
        "health: failing (not yet healthy: 0/2 passes, 1 failed in a row) "
        "since drain request 1 cancelled"
    ) in text
    assert "exit status 1; next in 51s" in text
    assert "    | no /scratch" in text
    # The hook's record stays, dimmed: its drain is over.
    assert "hook reboot (drain 1): failed" in text
    assert "nodeagent cancel" not in text


def test_status_of_a_running_hook() -> None:
    m = _machine()
    m.start_draining(
        T0 + 1, schedule=Schedule.FAST, on_completion=OnCompletion.HOOK, hook="reboot", commit=True
    )
    m.hook_started(T0 + 2, "1", pid=77, process_start=T0 + 2, boot_id="b", reboots=True, timeout=60)
    text = _text(status_view(m.ad(T0 + 62)))
    assert "drained (request 1, fast)" in text
    assert "hook reboot (drain 1): running since" in text
    assert "(1m ago)" in text


def _drain_args(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "graceful": False, "quick": False, "fast": False, "reason": "", "on_completion": "none",
        "then": None, "deadline": None, "start": None, "check": None, "yes": True,
        "dry_run": False, "wait": False, "json_output": True, "host": None, "token": None,
        "socket_path": "/nonexistent/agent.sock",
    }  # fmt: skip
    args.update(overrides)
    return args


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"then": "reboot", "on_completion": "exit"}, "--then HOOK is --on-completion hook:HOOK"),
        ({"then": "/sbin/reboot"}, "a hook name is 1 to 64"),
        ({"on_completion": "later"}, "choose none, resume, exit, restart or hook:NAME"),
        ({"on_completion": "EXIT"}, "choose none, resume, exit, restart or hook:NAME"),
        ({"on_completion": "hook:"}, "choose none, resume, exit, restart or hook:NAME"),
    ],
)
def test_drain_refuses_bad_completions_before_asking_the_agent(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message) as e:
        _agent.drain(**_drain_args(**overrides))
    assert e.value.exit_status == 2


@pytest.mark.parametrize(
    ("body", "finished"),
    [
        ({"id": "1", "state": "hook_pending"}, False),
        ({"id": "1", "state": "hook_running"}, False),
        ({"id": "1", "state": "hook_failed"}, True),
        ({"state": "none", "last": {"id": "1", "state": "completed"}}, True),
    ],
)
def test_wait_goes_on_through_the_hook(body: dict[str, Any], finished: bool) -> None:
    assert _agent._drain_finished(body, "1") is finished


def test_the_end_of_a_wait_says_the_node_waits_for_its_health_check() -> None:
    body = {
        "state": "none",
        "last": {
            "id": "1",
            "state": "completed",
            "on_completion": "hook:reboot",
            "hook": {"message": "exit status 0"},
        },
        "accepting": False,
        "health": {"state": "pending"},
    }
    out = io.StringIO()
    render_drain_end(Console(file=out, width=200, color_system=None), body, "1")
    assert out.getvalue().splitlines() == [
        "drained: request 1 completed (on completion hook:reboot: exit status 0)",
        "the node stays closed until its health check passes (pending; `nodeagent status` "
        "shows it)",
    ]
