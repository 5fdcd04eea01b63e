"""After the window: a real master and a real agent.

``n1.test``'s window opens now and lasts 3 s; the machine goes DOWN (its node confirms
the fast drain). Once the window has ended, Mesos's rule holds (``up_after_window``
false): the machine stays DOWN, and ``master status`` and ``master plan`` say that its
window has ended and which command brings it back. The master's configuration then
turns ``up_after_window`` on (SIGHUP): the master brings the machine UP by itself (the
node runs no health check) and cancels its drain.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.harness import AgentProcess, MasterProcess, wait_for
from tests.integration.test_cli_master import cli
from tests.integration.test_master import drain_of, window

pytestmark = pytest.mark.integration

SETTINGS = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}


def test_a_machine_down_after_its_window_is_named_with_its_command_then_brought_up(
    tmp_path: Path,
) -> None:
    with (
        MasterProcess(tmp_path / "master", settings=SETTINGS) as master,
        AgentProcess(
            tmp_path / "n1",
            hostname="n1.test",
            master=master.agent_settings(tmp_path / "n1", node="n1.test", update_interval=0.5),
        ) as n1,
    ):
        wait_for(lambda: master.call("GET", "/v1/ads").json()["ads"])
        master.call("POST", "/maintenance/schedule", json=window(["n1.test"], time.time(), 3))
        down = cli(master, "down", "--yes", "n1.test")
        assert down.returncode == 0, down.stdout + down.stderr
        assert drain_of(n1)["schedule"] == "fast"

        status = wait_for(lambda: (s := cli(master, "status").stdout) * ("ended" in s))
        assert "window ended: 1 machine still out of service" in status
        assert "n1.test/127.0.0.1  DOWN, its window ended " in status
        assert "bring them back: nodeagent master up n1.test/127.0.0.1" in status
        plan = cli(master, "plan").stdout
        assert "bring them back: nodeagent master up n1.test/127.0.0.1" in plan
        timeline = cli(master, "plan", "--all").stdout
        (row,) = [line for line in timeline.splitlines() if line.startswith("n1.test ")]
        assert row.rstrip().endswith("window ended"), timeline
        reply = master.call("GET", "/v1/maintenance/plan").json()
        assert [m["mode"] for m in reply["after_window"]] == ["DOWN"]
        # Mesos's rule: it stays DOWN (the passes since the end brought nothing back).
        assert master.call("GET", "/maintenance/status").json()["down_machines"]

        text = master.config_path.read_text()
        master.config_path.write_text(text + "up_after_window = true\n")
        assert master.proc is not None
        master.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: master.call("GET", "/maintenance/status").json() == {}, timeout=30)
        wait_for(lambda: drain_of(n1)["state"] == "none", timeout=30)
        assert "brought UP (up_after_window)" in master.log_path.read_text()
        assert "no machine is in maintenance" in cli(master, "status").stdout
        schedule = master.call("GET", "/maintenance/schedule").json()
        assert not schedule.get("windows")
