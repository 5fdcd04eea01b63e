"""The tests' launcher (:mod:`tests.launcher`) makes a daemon as ``python -m nodeagent``
would: its output, environment, working directory and exit status are the command's, and
a daemon whose interpreter would start otherwise is the real command."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.harness import AgentProcess, MasterProcess, running, wait_for
from tests.launcher import LaunchedProcess, _Launcher, launch

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        bool(os.environ.get("NODEAGENT_TEST_EXEC")), reason="every daemon is the real command"
    ),
]


def test_a_refused_start_exits_with_the_command_s_status_and_says_why(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with log.open("ab") as out:
        proc = launch(["run", "--config", str(tmp_path / "none.toml")], stdout=out.fileno(),
                      env=dict(os.environ))  # fmt: skip
    assert isinstance(proc, LaunchedProcess)
    assert proc.wait(timeout=30) == 2
    assert "does not exist or is not a file" in log.read_text()
    assert proc.poll() == 2


def test_a_master_serves_and_ends_as_the_command_does(tmp_path: Path) -> None:
    with MasterProcess(tmp_path / "master") as master:
        assert isinstance(master.proc, LaunchedProcess)
        with pytest.raises(subprocess.TimeoutExpired):
            master.proc.wait(timeout=0.1)
        assert Path(f"/proc/{master.proc.pid}/cwd").resolve() == Path.cwd().resolve()
        assert master.call("GET", "/healthz").status_code == 200
        assert master.stop() == 0  # SIGTERM: a clean stop
    assert "nodeagent master stopping" in master.log_path.read_text()


def test_an_agent_has_the_environment_it_was_given(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "agent")
    agent.env["LAUNCHER_TEST_MARK"] = "launched"
    seen = tmp_path / "seen"
    with agent:
        assert isinstance(agent.proc, LaunchedProcess)
        agent.claim(["/bin/sh", "-c", f'echo "$LAUNCHER_TEST_MARK" > {seen}; exec sleep 60'])
        wait_for(lambda: seen.exists() and seen.read_text())
    assert seen.read_text() == "launched\n"  # a job has its agent's environment


def test_a_killed_agent_is_minus_nine_and_a_signal_after_its_end_goes_nowhere(
    tmp_path: Path,
) -> None:
    with AgentProcess(tmp_path / "agent") as agent:
        assert isinstance(agent.proc, LaunchedProcess)
        assert agent.stop(signal.SIGKILL) == -signal.SIGKILL
        agent.proc.send_signal(signal.SIGTERM)  # ended: nothing is signalled
        assert agent.proc.poll() == -signal.SIGKILL


def test_an_environment_that_changes_the_interpreter_gets_the_real_command(
    tmp_path: Path,
) -> None:
    master = MasterProcess(tmp_path / "master")
    master.env["PYTHONWARNINGS"] = "ignore"
    with master:
        assert isinstance(master.proc, subprocess.Popen)
        cmdline = Path(f"/proc/{master.proc.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[1:5] == [b"-m", b"nodeagent", b"master", b"run"]
        wait_for(lambda: master.call("GET", "/healthz").status_code == 200)


def test_the_daemons_end_with_their_test_process_s_launcher(tmp_path: Path) -> None:
    """A test process that ends (its launcher's socket closed) leaves no daemon behind."""
    master = MasterProcess(tmp_path / "master")
    launcher = _Launcher()
    try:
        with master.log_path.open("ab") as out:
            pid = launcher.fork(
                [*master.command, "--config", str(master.config_path)],
                env={**os.environ, "NOTIFY_SOCKET": ""},
                cwd=os.getcwd(),
                fds=[0, out.fileno(), out.fileno()],
            )
        wait_for((master.root / "run" / master.info_name).exists)
        assert running([pid]) == [pid]
    finally:
        launcher.close()
    assert running([pid]) == []
