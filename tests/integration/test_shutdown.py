"""The machine's own shutdown on real agents: a real dbus-daemon on a private socket, a
stand-in login manager on it (tests/logind.py), logind's delay lock, the shutdown drain,
its cancel, the hard kill at logind's limit, and the node reopening after a reboot (a
new boot id in the file ``boot_id_file`` names)."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess, job_script, wait_for
from tests.logind import StandIn, dbus_daemon, private_bus

#: A job that, on SIGTERM, writes ``<record>`` and exits once ``<go>`` exists.
_WAITING_JOB = r"""
import os, signal, sys, time
record, go = sys.argv[1], sys.argv[2]
def on_term(signum, frame):
    open(record, "w").close()
    while not os.path.exists(go):
        time.sleep(0.02)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(record + ".started", "w").close()
while True:
    time.sleep(3600)
"""


@pytest.fixture(scope="module")
def logind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    if dbus_daemon() is None:
        if os.environ.get("CI"):
            pytest.fail("dbus-daemon is missing in CI: scripts/ensure-dbus should install it")
        pytest.skip(
            "dbus-daemon is not installed (Debian package dbus-daemon; scripts/ensure-dbus)"
        )
    with private_bus(tmp_path_factory.mktemp("bus")) as address:
        stand_in = StandIn(address)
        try:
            yield stand_in
        finally:
            stand_in.close()


def agent_on(
    root: Path, logind: StandIn, *, boot: str = "boot-1", extra: str = "", **kwargs: Any
) -> AgentProcess:
    root.mkdir(parents=True, exist_ok=True)
    boot_file = root / "boot_id"
    boot_file.write_text(boot + "\n")
    return AgentProcess(
        root,
        system_bus=logind.address,
        extra=f'boot_id_file = "{boot_file}"\n{extra}',
        **kwargs,
    )


def machine_ad(agent: AgentProcess) -> dict[str, Any]:
    ad: dict[str, Any] = agent.call("GET", "/v1/ad").json()["machine"]
    return ad


def log_text(agent: AgentProcess) -> str:
    return agent.log_path.read_text()


def audit(agent: AgentProcess) -> list[dict[str, Any]]:
    path = agent.root / "state" / "audit.log"
    return [json.loads(line) for line in path.read_text().splitlines()]


def shut_down_empty(agent: AgentProcess, logind: StandIn) -> None:
    """PrepareForShutdown(true) on an empty node: drained at once, the lock released."""
    held = logind.held()
    logind.emit(True)
    wait_for(lambda: machine_ad(agent).get("DrainState") == "drained")
    wait_for(lambda: logind.held() == held - 1)


def test_the_lock_is_released_once_the_last_job_is_gone_and_not_before(
    tmp_path: Path, logind: StandIn
) -> None:
    logind.set_limit(60)
    before = len(logind.locks())
    with agent_on(tmp_path / "a", logind) as agent:
        wait_for(lambda: len(logind.locks()) == before + 1)
        assert logind.locks()[-1][1] is None  # taken at start, held
        record, go = tmp_path / "term", tmp_path / "go"
        agent.claim([sys.executable, "-c", _WAITING_JOB, str(record), str(go)])
        wait_for((tmp_path / "term.started").exists)
        emitted = logind.emit(True)
        wait_for(lambda: machine_ad(agent).get("ShuttingDown") is True)
        ad = machine_ad(agent)
        assert ad["Start"] is False
        assert (ad["DrainReason"], ad["DrainSchedule"], ad["DrainOnCompletion"]) == (
            "shutdown",
            "quick",
            "none",
        )
        wait_for(record.exists)  # the quick drain's soft kill
        # The job still runs: the lock is held, and the node takes no claim.
        assert agent.jobs_alive()
        assert logind.locks()[-1][1] is None
        refused = agent.call("POST", "/v1/claims", json={"command": ["/bin/true"]})
        assert refused.status_code == 409, refused.text
        go.touch()
        released = wait_for(lambda: logind.locks()[-1][1])
        assert not agent.jobs_alive()
        assert released - emitted < 60
        assert machine_ad(agent)["DrainState"] == "drained"
        assert "released logind's delay lock" in log_text(agent)
        (shutdown,) = [r for r in audit(agent) if r["action"] == "drain.shutdown"]
        assert shutdown["details"]["schedule"] == "quick"


def test_a_cancelled_shutdown_reopens_the_node_and_takes_a_new_lock(
    tmp_path: Path, logind: StandIn
) -> None:
    logind.set_limit(60)
    with agent_on(tmp_path / "a", logind) as agent:
        wait_for(lambda: logind.held() >= 1)
        taken = len(logind.locks())
        shut_down_empty(agent, logind)
        assert machine_ad(agent)["ShuttingDown"] is True
        logind.emit(False)
        wait_for(lambda: "ShuttingDown" not in machine_ad(agent))
        ad = machine_ad(agent)
        assert (ad["DrainState"], ad["Start"]) == ("none", True)
        wait_for(lambda: len(logind.locks()) == taken + 1)
        assert logind.locks()[-1][1] is None
        assert any(
            r["action"] == "drain.cancel" and r["details"]["why"] == "shutdown cancelled"
            for r in audit(agent)
        )


def test_a_job_whose_vacate_time_exceeds_the_limit_is_killed_in_time(
    tmp_path: Path, logind: StandIn
) -> None:
    logind.set_limit(8)
    with agent_on(tmp_path / "a", logind, policy={"machine_max_vacate_time": 600}) as agent:
        wait_for(lambda: logind.held() >= 1)
        assert "InhibitDelayMaxSec (8 s) is shorter than the longest vacate time" in log_text(agent)
        argv, record = job_script(tmp_path, "stubborn", term_delay=-1)  # ignores SIGTERM
        agent.claim(argv)
        wait_for(record.with_name(record.name + ".started").exists)
        emitted = logind.emit(True)
        wait_for(record.exists)
        released = wait_for(lambda: logind.locks()[-1][1], timeout=30)
        assert not agent.jobs_alive()
        assert released - emitted < 8
        assert "hard-killed before the machine goes down" in log_text(agent)


@pytest.mark.parametrize(
    ("admin", "boot_after", "reopens"),
    [
        (False, "boot-2", True),  # rebooted after a completed shutdown drain
        (False, "boot-1", False),  # the agent restarted alone
        (True, "boot-2", False),  # an administrator's drain stays until cancelled
    ],
)
def test_after_a_reboot_a_completed_shutdown_drain_reopens_the_node(
    tmp_path: Path, logind: StandIn, admin: bool, boot_after: str, reopens: bool
) -> None:
    logind.set_limit(60)
    root = tmp_path / "a"
    with agent_on(root, logind) as agent:
        wait_for(lambda: logind.held() >= 1)
        if admin:
            response = agent.call(
                "POST", "/v1/drain", json={"schedule": "quick", "commit": True, "reason": "rma"}
            )
            assert response.status_code == 201, response.text
        shut_down_empty(agent, logind)
        agent.stop()
    with agent_on(root, logind, boot=boot_after) as again:
        ad = machine_ad(again)
        assert "ShuttingDown" not in ad
        if reopens:
            assert (ad["DrainState"], ad["Start"]) == ("none", True)
            assert "the machine rebooted (boot boot-2), the node reopens" in log_text(again)
            assert any(
                r["action"] == "drain.cancel" and r["details"]["why"] == "rebooted"
                for r in audit(again)
            )
        else:
            assert (ad["DrainState"], ad["Start"]) == ("drained", False)
            assert ad["DrainReason"] == ("rma" if admin else "shutdown")


def test_after_a_reboot_the_node_reopens_through_the_health_gate(
    tmp_path: Path, logind: StandIn
) -> None:
    logind.set_limit(60)
    root, flag = tmp_path / "a", tmp_path / "healthy"
    check = tmp_path / "health.sh"
    check.write_text(f'#!/bin/sh\ntest -e "{flag}"\n')
    check.chmod(0o755)
    health = f'[health]\ncommand = ["{check}"]\ntimeout = "5s"\ninterval = 0.3\npasses = 1\n'
    with agent_on(root, logind, extra=health) as agent:
        wait_for(lambda: logind.held() >= 1)
        shut_down_empty(agent, logind)
        agent.stop()
    with agent_on(root, logind, boot="boot-2", extra=health) as again:
        ad = machine_ad(again)
        assert (ad["DrainState"], ad["Start"]) == ("none", False)
        assert ad["HealthState"] != "passing"
        flag.touch()
        wait_for(lambda: machine_ad(again)["Start"] is True)


def test_without_a_bus_the_agent_starts_and_says_so_once(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a") as agent:
        assert agent.call("GET", "/v1/ad").status_code == 200
        assert log_text(agent).count("no system D-Bus") == 1
        assert "ShuttingDown" not in machine_ad(agent)


def test_without_logind_on_the_bus_the_agent_starts_and_says_so_once(tmp_path: Path) -> None:
    if dbus_daemon() is None:
        pytest.skip("dbus-daemon is not installed (scripts/ensure-dbus)")
    with (
        private_bus(tmp_path / "bus") as address,
        AgentProcess(tmp_path / "a", system_bus=address) as agent,
    ):
        assert agent.call("GET", "/v1/ad").status_code == 200
        text = log_text(agent)
        assert text.count("no login manager on the system D-Bus") == 1
        assert "ServiceUnknown" in text


def test_a_restart_of_the_agent_alone_leaves_its_jobs_running(
    tmp_path: Path, logind: StandIn
) -> None:
    logind.set_limit(60)
    root = tmp_path / "a"
    argv, record = job_script(tmp_path, "job")
    with agent_on(root, logind) as agent:
        wait_for(lambda: logind.held() >= 1)
        taken = len(logind.locks())
        claim = agent.claim(argv)["id"]
        agent.stop()
        # The lock went with the agent; the job runs on, undisturbed.
        wait_for(lambda: logind.locks()[taken - 1][1])
        assert agent.jobs_alive()
        agent.start()
        wait_for(lambda: len(logind.locks()) == taken + 1)
        ad = machine_ad(agent)
        assert "ShuttingDown" not in ad
        assert (ad["DrainState"], ad["Start"]) == ("none", True)
        assert [c["id"] for c in agent.call("GET", "/v1/claims").json()["claims"]] == [claim]
        assert agent.jobs_alive()
        assert not record.exists()  # never signalled


def test_disabled_the_agent_leaves_logind_alone(tmp_path: Path, logind: StandIn) -> None:
    taken = len(logind.locks())
    extra = "[shutdown]\nenabled = false\n"
    with agent_on(tmp_path / "a", logind, extra=extra) as agent:
        assert agent.call("GET", "/v1/ad").status_code == 200
        assert len(logind.locks()) == taken
        assert "D-Bus" not in log_text(agent)
        assert "delay lock" not in log_text(agent)


def test_a_reloaded_schedule_drains_the_next_shutdown(tmp_path: Path, logind: StandIn) -> None:
    logind.set_limit(60)
    extra = '[shutdown]\nschedule = "quick"\n'
    with agent_on(tmp_path / "a", logind, extra=extra) as agent:
        wait_for(lambda: logind.held() >= 1)
        text = agent.config_path.read_text()
        agent.config_path.write_text(text.replace('schedule = "quick"', 'schedule = "fast"'))
        assert agent.proc is not None
        agent.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloaded: shutdown.schedule" in log_text(agent))
        shut_down_empty(agent, logind)
        assert machine_ad(agent)["DrainSchedule"] == "fast"


def test_a_signal_from_another_connection_than_loginds_is_ignored(
    tmp_path: Path, logind: StandIn
) -> None:
    logind.set_limit(60)
    with agent_on(tmp_path / "a", logind) as agent:
        wait_for(lambda: logind.held() >= 1)
        held = logind.held()
        logind.forge(True)
        wait_for(lambda: "ignored a PrepareForShutdown signal from" in log_text(agent))
        ad = machine_ad(agent)
        assert "ShuttingDown" not in ad
        assert (ad["DrainState"], ad["Start"]) == ("none", True)
        assert logind.held() == held
