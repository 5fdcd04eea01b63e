"""Real agents running real hook and health-check scripts.

Each test writes its shell scripts in its temporary directory and names them in the
agent's configuration. A hook appends one line to a record file each time it runs, so
"exactly once" is a line count. Everything a test starts it ends by pid: the agents (the
harness), the jobs (the harness, by the pids it recorded); the hooks and health checks
end by themselves within a second.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess, MasterProcess, job_script, running, wait_for

NS = 1_000_000_000


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def toml_value(value: Any) -> str:
    """A TOML value: strings, booleans and lists as JSON writes them; tables inline."""
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
        )
    return json.dumps(value)


def config(
    tmp: Path,
    *,
    hooks: dict[str, dict[str, Any]],
    health_flag: Path | None = None,
    boot_id: Path | None = None,
) -> str:
    """The top-level keys and tables an agent gets in ``extra``."""
    lines = []
    if boot_id is not None:
        lines.append(f'boot_id_file = "{boot_id}"')
    for name, hook in hooks.items():
        lines.append(f"[hooks.{name}]")
        for key, value in hook.items():
            lines.append(f"{key} = {toml_value(value)}")
    if health_flag is not None:
        check = script(
            tmp / "health.sh",
            f'test -e "{health_flag}" || {{ echo "{health_flag} missing"; exit 1; }}\n',
        )
        lines += [
            "[health]",
            f"command = {toml_value([str(check)])}",
            'timeout = "5s"',
            "interval = 0.3",
            "passes = 1",
        ]
    return "\n".join(lines) + "\n"


def machine_ad(agent: AgentProcess) -> dict[str, Any]:
    ad: dict[str, Any] = agent.call("GET", "/v1/ad").json()["machine"]
    return ad


def cli(agent: AgentProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", *args, "--socket", str(agent.socket)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def audit(agent: AgentProcess) -> list[dict[str, Any]]:
    path = agent.root / "state" / "audit.log"
    return [json.loads(line) for line in path.read_text().splitlines()]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def fast_drain_with_hook(agent: AgentProcess, hook: str) -> None:
    """Commit a fast drain of ``agent`` whose completion runs ``hook``."""
    response = agent.call(
        "POST",
        "/v1/drain",
        json={"schedule": "fast", "on_completion": f"hook:{hook}", "commit": True},
    )
    assert response.status_code == 201, response.text


@pytest.fixture
def flag(tmp_path: Path) -> Path:
    return tmp_path / "healthy"


# ------------------------------------------------------------------- a hook, start to end


def test_a_hook_runs_once_after_the_last_job_is_gone_and_its_end_is_shown_everywhere(
    tmp_path: Path, flag: Path
) -> None:
    record = tmp_path / "hook.record"
    hook = script(
        tmp_path / "firmware.sh",
        'echo "$(date +%s.%N) $NODEAGENT_HOOK $NODEAGENT_DRAIN_REQUEST_ID '
        '$NODEAGENT_DRAIN_SCHEDULE $NODEAGENT_NODE [$NODEAGENT_DRAIN_REASON] $SITE" '
        f'>> "{record}"\n'
        'echo "flashing firmware 2.1"\n'
        'echo "device busy" >&2\n'
        "exit 3\n",
    )
    extra = config(
        tmp_path,
        hooks={"fw": {"command": [str(hook)], "timeout": "30s", "environment": {"SITE": "lab"}}},
        health_flag=flag,
    )
    with AgentProcess(tmp_path / "agent", extra=extra) as agent:
        argv, term = job_script(tmp_path, "job", term_delay=1.0)
        agent.claim(argv)
        wait_for(lambda: Path(str(term) + ".started").exists())
        result = cli(agent, "drain", "--quick", "--then", "fw", "--yes", "--reason", "firmware 2.1")
        assert result.returncode == 0, result.stderr
        wait_for(lambda: machine_ad(agent).get("DrainHookState") == "failed")
        # Never before the last job is gone: the job ended a second after its SIGTERM.
        [line] = lines(record)
        started = float(line.split()[0])
        [term_time] = [float(t) for t in lines(term)]
        assert started >= term_time + 1.0
        assert line.split()[1:] == ["fw", "1", "quick", "node1.test", "[firmware", "2.1]", "lab"]
        ad = machine_ad(agent)
        assert ad["DrainState"] == "drained"
        assert (ad["DrainHookName"], ad["DrainHookRequestId"]) == ("fw", "1")
        assert (ad["DrainHookExitStatus"], ad["DrainHookMessage"]) == (3, "exit status 3")
        assert ad["DrainHookOutput"] == "flashing firmware 2.1\\ndevice busy"
        assert ad["DrainHookStartTime"] >= int(term_time)
        assert ad["Start"] is False
        # nodeagent status shows it.
        status = cli(agent, "status")
        assert status.returncode == 0, status.stderr
        assert "hook fw (drain 1): failed" in status.stdout
        assert "exit status 3" in status.stdout
        assert "    | flashing firmware 2.1\n    | device busy" in status.stdout
        assert "nodeagent cancel 1" in status.stdout
        # The audit log has its start and its end.
        records = [r for r in audit(agent) if r["action"].startswith("hook.")]
        assert [(r["action"], r["result"], r["request_id"]) for r in records] == [
            ("hook.start", "ok", "1"),
            ("hook.end", "hook.failed", "1"),
        ]
        assert records[0]["details"]["command"] == [str(hook)]
        end = records[1]["details"]
        assert (end["exit_status"], end["output"]) == (3, "flashing firmware 2.1\ndevice busy\n")
        # The failed hook holds the node; a cancel hands it to the health check.
        time.sleep(0.5)
        assert len(lines(record)) == 1
        cancelled = cli(agent, "cancel")
        assert cancelled.returncode == 0, cancelled.stderr
        assert "the node stays closed until its health check passes" in cancelled.stdout
        wait_for(lambda: machine_ad(agent).get("HealthState") == "failing")
        assert machine_ad(agent)["Start"] is False
        assert machine_ad(agent)["HealthOutput"] == f"{flag} missing"
        flag.touch()
        wait_for(lambda: machine_ad(agent)["Start"] is True)
        assert machine_ad(agent)["HealthState"] == "passing"
        assert len(lines(record)) == 1  # exactly once


def test_a_hook_that_succeeds_opens_the_node_when_healthy_and_wait_says_so(
    tmp_path: Path, flag: Path
) -> None:
    record = tmp_path / "hook.record"
    hook = script(tmp_path / "ok.sh", f'echo run >> "{record}"\necho done\n')
    extra = config(tmp_path, hooks={"ok": {"command": [str(hook)]}}, health_flag=flag)
    with AgentProcess(tmp_path / "agent", extra=extra) as agent:
        result = cli(agent, "drain", "--fast", "--then", "ok", "--yes", "--wait")
        assert result.returncode == 0, result.stderr
        assert "drained: request 1 completed (on completion hook:ok: exit status 0)" in (
            result.stdout
        )
        assert "the node stays closed until its health check passes" in result.stdout
        assert machine_ad(agent)["Start"] is False
        flag.touch()
        wait_for(lambda: machine_ad(agent)["Start"] is True)
        assert lines(record) == ["run"]


# ------------------------------------------------------------------- what a hook leaves behind

#: Shell lines that leave processes behind, each writing its pid to "$PIDS" first: one in
#: the program's own process group, one in a session of its own (setsid), one double
#: forked (its parent gone at once), and one both, which takes a moment to die on SIGTERM.
LEAVE_CHILDREN = """
: >> "$PIDS"
sh -c 'echo $$ >> "$PIDS"; exec sleep 300' &
setsid sh -c 'echo $$ >> "$PIDS"; exec sleep 301' &
( sh -c 'echo $$ >> "$PIDS"; exec sleep 302' & )
( setsid sh -c 'echo $$ >> "$PIDS"; trap "sleep 0.3; exit 0" TERM; while :; do sleep 0.05; done' & )
while [ "$(wc -l < "$PIDS")" -lt "$((${SEEN:-0} + 4))" ]; do sleep 0.01; done
"""

#: Appends to "$ALIVE" each pid of "$PIDS" that still runs (a zombie has ended).
RECORD_ALIVE = """
for p in $(cat "$PIDS" 2>/dev/null); do
    state=$(cut -d')' -f2 "/proc/$p/stat" 2>/dev/null | cut -d' ' -f2)
    if [ -n "$state" ] && [ "$state" != Z ]; then echo "$p" >> "$ALIVE"; fi
done
"""


@pytest.fixture
def left_behind(tmp_path: Path) -> Iterator[Path]:
    """The file the processes a test's programs leave write their pids to; whatever of
    them still runs at the end is killed."""
    pids = tmp_path / "left.pids"
    yield pids
    for pid in [int(p) for p in lines(pids)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def test_what_a_hook_leaves_running_ends_before_its_end_is_reported_and_the_node_opens(
    tmp_path: Path, left_behind: Path
) -> None:
    alive = tmp_path / "alive"
    files = f'export PIDS="{left_behind}" ALIVE="{alive}"\n'
    hook = script(tmp_path / "detach.sh", f"{files}echo leaving children\n{LEAVE_CHILDREN}")
    check = script(tmp_path / "health.sh", files + RECORD_ALIVE)
    extra = config(tmp_path, hooks={"detach": {"command": [str(hook)]}})
    extra += f'[health]\ncommand = {toml_value([str(check)])}\ninterval = 0.2\ntimeout = "30s"\n'
    with AgentProcess(tmp_path / "agent", extra=extra) as agent:
        fast_drain_with_hook(agent, "detach")

        def ended() -> dict[str, Any] | None:
            ad = machine_ad(agent)
            return ad if ad.get("DrainHookState") not in (None, "pending", "running") else None

        ad = ended() or wait_for(ended)
        pids = [int(p) for p in lines(left_behind)]
        assert len(pids) == 4
        # Its end is reported only once nothing it started runs...
        assert running(pids) == []
        assert ad["DrainHookState"] == "succeeded"
        assert ad["DrainHookOutput"].startswith("leaving children")
        # ...and the node opens after that: the health check, which runs before it
        # opens, saw none of them.
        wait_for(lambda: machine_ad(agent)["Start"] is True)
        assert lines(alive) == []


def test_what_a_hook_left_when_it_timed_out_ends_before_its_end_is_reported(
    tmp_path: Path, left_behind: Path
) -> None:
    files = f'export PIDS="{left_behind}"\n'
    hook = script(tmp_path / "stuck.sh", f'{files}{LEAVE_CHILDREN}echo $$ >> "$PIDS"\nsleep 300\n')
    extra = config(tmp_path, hooks={"stuck": {"command": [str(hook)], "timeout": "1s"}})
    with AgentProcess(tmp_path / "agent", extra=extra) as agent:
        fast_drain_with_hook(agent, "stuck")
        ad = wait_for(lambda: (a := machine_ad(agent)).get("DrainHookState") == "failed" and a)
        pids = [int(p) for p in lines(left_behind)]
        assert len(pids) == 5  # the hook too
        assert running(pids) == []
        assert ad["DrainHookMessage"] == "timed out after 1 s (SIGTERM, then SIGKILL)"
        assert ad["Start"] is False


def test_what_a_health_check_leaves_running_ends_with_each_check(
    tmp_path: Path, left_behind: Path
) -> None:
    alive, runs = tmp_path / "alive", tmp_path / "checks"
    files = f'export PIDS="{left_behind}" ALIVE="{alive}"\n'
    check = script(
        tmp_path / "health.sh",
        f'{files}echo run >> "{runs}"\n{RECORD_ALIVE}'
        f'SEEN=$(wc -l < "$PIDS" 2>/dev/null || echo 0)\n{LEAVE_CHILDREN}'
        f'[ "$(wc -l < "{runs}")" -ge 4 ]\n',
    )
    extra = f'[health]\ncommand = {toml_value([str(check)])}\ninterval = 0.1\ntimeout = "30s"\n'
    with AgentProcess(tmp_path / "agent", extra=extra) as agent:
        # A drained node whose drain is cancelled returns through the health check,
        # which fails three times (each leaving four processes), then passes.
        response = agent.call("POST", "/v1/drain", json={"schedule": "fast", "commit": True})
        assert response.status_code == 201, response.text
        wait_for(lambda: machine_ad(agent)["DrainState"] == "drained")
        assert agent.call("DELETE", "/v1/drain").status_code == 200
        wait_for(lambda: machine_ad(agent)["Start"] is True)
        pids = [int(p) for p in lines(left_behind)]
        assert len(lines(runs)) == 4
        assert len(pids) == 16
        assert running(pids) == []
        # No check saw one left by an earlier one.
        assert lines(alive) == []


def test_a_hook_outliving_its_agent_is_awaited_and_what_it_left_still_ends(
    tmp_path: Path, left_behind: Path
) -> None:
    release = tmp_path / "release"
    files = f'export PIDS="{left_behind}"\n'
    hook = script(
        tmp_path / "long.sh",
        f"{files}echo started\n{LEAVE_CHILDREN}"
        f'while [ ! -e "{release}" ]; do sleep 0.02; done\necho finished\n',
    )
    extra = config(tmp_path, hooks={"long": {"command": [str(hook)]}})
    with AgentProcess(tmp_path / "agent", extra=extra) as agent:
        fast_drain_with_hook(agent, "long")
        wait_for(lambda: len(lines(left_behind)) == 4)
        agent.kill9()
        agent.start()  # the same state and runtime directories
        wait_for(lambda: "still runs from before the restart" in agent.log_path.read_text())
        assert machine_ad(agent)["DrainHookState"] == "running"
        release.touch()
        ad = wait_for(lambda: (a := machine_ad(agent)).get("DrainHookState") == "interrupted" and a)
        assert running([int(p) for p in lines(left_behind)]) == []
        # What the hook wrote before and after the restart, from the reaper's file.
        assert ad["DrainHookOutput"].startswith("started\\nfinished")


@pytest.fixture
def small_state_dir(tmp_path: Path) -> Iterator[Path]:
    """``agent/state`` under ``tmp_path`` on a 16 MiB file system of its own (a tmpfs,
    unmounted at the end); skipped where mounting one is refused."""
    state = tmp_path / "agent" / "state"
    state.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(state)],
        check=False,
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"a 16 MiB tmpfs cannot be mounted here: {mounted.stderr.strip()}")
    try:
        yield state
    finally:
        subprocess.run(["umount", "--lazy", str(state)], check=False)


def test_100_mb_of_hook_output_on_a_small_state_file_system_leaves_the_store_working(
    tmp_path: Path, small_state_dir: Path
) -> None:
    hook = script(
        tmp_path / "chatty.sh",
        "yes 0123456789 | head -c 100000000\necho\necho the end\nexit 1\n",
    )
    extra = config(tmp_path, hooks={"chatty": {"command": [str(hook)], "timeout": "5m"}})
    with AgentProcess(tmp_path / "agent", extra=extra) as agent:
        fast_drain_with_hook(agent, "chatty")
        wait_for(lambda: machine_ad(agent).get("DrainHookState") == "failed", timeout=120)
        run = agent.call("GET", "/v1/drain").json()["hook"]
        # The state's file system has room: the store takes the cancel.
        cancelled = agent.call("POST", "/v1/drain/1/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert os.statvfs(small_state_dir).f_bfree > 0
        assert run["message"] == "exit status 1"
        # The tail is kept, with the count of the bytes before it that are not.
        assert run["output"].endswith("\n0123456789\n0\nthe end\n")
        assert len(run["output"]) == 4096
        assert run["output_dropped"] == 100_000_000 + len("\nthe end\n") - 4096
        ad = machine_ad(agent)
        assert ad["DrainHookOutput"].endswith("6789\\n0\\nthe end")
        assert ad["DrainHookOutputDropped"] == run["output_dropped"]
        [end] = [r for r in audit(agent) if r["action"] == "hook.end"]
        assert end["details"]["output_dropped"] == run["output_dropped"]
        wait_for(lambda: machine_ad(agent)["Start"] is True)


# ------------------------------------------------------------------- the agent killed mid-hook


@pytest.mark.parametrize("boot", ["same boot", "new boot"])
def test_a_hook_that_kills_the_agent_is_never_run_again_and_health_decides(
    tmp_path: Path, flag: Path, boot: str
) -> None:
    record = tmp_path / "hook.record"
    pidfile = tmp_path / "agent.pid"
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("boot-A\n")
    hook = script(
        tmp_path / "reboot.sh",
        f'echo "$NODEAGENT_DRAIN_REQUEST_ID" >> "{record}"\nkill -9 "$(cat "{pidfile}")"\n',
    )
    extra = config(
        tmp_path,
        hooks={"reboot": {"command": [str(hook)], "reboots": True}},
        health_flag=flag,
        boot_id=boot_id,
    )
    with AgentProcess(tmp_path / "agent", extra=extra) as agent:
        assert agent.proc is not None
        pidfile.write_text(str(agent.proc.pid))
        fast_drain_with_hook(agent, "reboot")
        assert agent.wait_exit() == -signal.SIGKILL  # the hook killed it
        assert lines(record) == ["1"]
        if boot == "new boot":
            boot_id.write_text("boot-B\n")
        agent.start()  # the same state directory
        expected = "succeeded" if boot == "new boot" else "interrupted"
        wait_for(lambda: machine_ad(agent).get("DrainHookState") == expected)
        ad = machine_ad(agent)
        if boot == "new boot":
            assert ad["DrainHookMessage"] == "the machine rebooted during the hook"
        else:
            assert "the agent restarted while the hook ran" in ad["DrainHookMessage"]
        # The health check runs and fails: closed.
        wait_for(lambda: machine_ad(agent).get("HealthState") == "failing")
        assert machine_ad(agent)["Start"] is False
        assert agent.call("GET", "/v1/drain").json()["last"]["state"] == "completed"
        flag.touch()
        wait_for(lambda: machine_ad(agent)["Start"] is True)
        assert lines(record) == ["1"]  # never run again


# ------------------------------------------------------------------- the master's /machine/up


def test_machine_up_from_a_real_master_leaves_an_unhealthy_node_closed_until_healthy(
    tmp_path: Path, flag: Path
) -> None:
    with MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as master:
        extra = config(tmp_path, hooks={}, health_flag=flag)
        settings = master.agent_settings(tmp_path / "agent", node="n1.test", update_interval=0.5)
        with AgentProcess(
            tmp_path / "agent", hostname="n1.test", master=settings, extra=extra
        ) as agent:
            machine = {"hostname": "n1.test", "ip": "127.0.0.1"}
            far = time.time() + 10_000
            schedule = {
                "windows": [
                    {
                        "machine_ids": [machine],
                        "unavailability": {"start": {"nanoseconds": int(far * NS)}},
                    }
                ]
            }
            assert master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
            assert master.call("POST", "/machine/down", json=[machine]).status_code == 200
            wait_for(lambda: machine_ad(agent)["DrainState"] == "drained", timeout=30)
            assert master.call("POST", "/machine/up", json=[machine]).status_code == 200
            wait_for(lambda: agent.call("GET", "/v1/drain").json()["state"] == "none", timeout=30)
            wait_for(lambda: machine_ad(agent).get("HealthState") == "failing")
            time.sleep(1)  # several checks: still closed
            ad = machine_ad(agent)
            assert (ad["Start"], ad["HealthState"]) == (False, "failing")
            assert ad["HealthFailures"] >= 2
            assert ad["HealthReason"].startswith("drain request 1 cancelled")

            def seen_by_master() -> Any:
                ads = master.call("GET", "/v1/ads").json()["ads"]
                return [a for a in ads if a.get("HealthState") == "failing"]

            wait_for(seen_by_master)
            flag.touch()
            wait_for(lambda: machine_ad(agent)["Start"] is True)
            assert machine_ad(agent)["HealthState"] == "passing"


# ------------------------------------------------------------------- refusals


def _hooked_agent(tmp: Path) -> AgentProcess:
    hook = script(tmp / "true.sh", "exit 0\n")
    extra = config(tmp, hooks={"reboot": {"command": [str(hook)]}})
    return AgentProcess(tmp / "agent", extra=extra)


@pytest.fixture
def hooked_agent(tmp_path: Path) -> Iterator[AgentProcess]:
    with _hooked_agent(tmp_path) as agent:
        yield agent


@pytest.fixture(scope="module")
def refusing_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """A hooked agent the refusals share: none of them changes it (each checks so)."""
    with _hooked_agent(tmp_path_factory.mktemp("refusals")) as agent:
        yield agent


def test_a_drain_naming_an_unknown_hook_is_refused_and_changes_nothing(
    hooked_agent: AgentProcess,
) -> None:
    agent = hooked_agent
    before = machine_ad(agent)
    result = cli(agent, "drain", "--then", "reimage", "--yes")
    assert result.returncode == 1
    assert result.stderr.startswith("drain.no_such_hook: ")
    assert "no hook named 'reimage'" in result.stderr
    after = machine_ad(agent)
    assert {k: v for k, v in after.items() if k != "MyCurrentTime"} == {
        k: v for k, v in before.items() if k != "MyCurrentTime"
    }
    # The next drain still gets id 1: nothing was used up.
    response = agent.call("POST", "/v1/drain", json={"on_completion": "hook:reboot"})
    assert (response.status_code, response.json()["id"]) == (201, "1")


@pytest.mark.parametrize(
    "body",
    [
        {"on_completion": "hook:reboot", "command": ["/bin/touch", "/tmp/pwned"]},
        {"on_completion": "hook:/bin/touch /tmp/pwned"},
        {"on_completion": {"hook": "reboot", "command": ["/bin/true"]}},
    ],
)
def test_a_hook_command_cannot_be_set_over_the_api(
    refusing_agent: AgentProcess, body: dict[str, Any]
) -> None:
    response = refusing_agent.call("POST", "/v1/drain", json={**body, "commit": True})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "request.invalid"
    assert refusing_agent.call("GET", "/v1/drain").json() == {"state": "none", "last": None}
    assert not (refusing_agent.root / "run" / "hooks").exists()


# ------------------------------------------------------------------- reload


def test_sighup_adds_a_hook_and_refuses_one_the_agent_may_not_run(tmp_path: Path) -> None:
    record = tmp_path / "hook.record"
    hook = script(tmp_path / "new.sh", f'echo run >> "{record}"\n')
    with AgentProcess(tmp_path / "agent") as agent:
        assert agent.proc is not None
        refused = agent.call("POST", "/v1/drain", json={"on_completion": "hook:new"})
        assert refused.json()["error"]["code"] == "drain.no_such_hook"
        text = agent.config_path.read_text()
        # A user the agent may not switch to (another user without root, or none at all):
        # the reload is refused and changes nothing.
        user = "root" if os.geteuid() != 0 else "no-such-user-h14"
        bad = config(tmp_path, hooks={"new": {"command": [str(hook)], "user": user}})
        agent.config_path.write_text(text + bad)
        agent.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in agent.log_path.read_text())
        assert "hooks.new.user" in agent.log_path.read_text()
        again = agent.call("POST", "/v1/drain", json={"on_completion": "hook:new"})
        assert again.json()["error"]["code"] == "drain.no_such_hook"
        agent.config_path.write_text(
            text + config(tmp_path, hooks={"new": {"command": [str(hook)]}})
        )
        agent.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloaded: hooks" in agent.log_path.read_text())
        done = agent.call(
            "POST",
            "/v1/drain",
            json={"schedule": "fast", "on_completion": "hook:new", "commit": True},
        )
        assert done.status_code == 201, done.text
        wait_for(lambda: machine_ad(agent).get("DrainHookState") == "succeeded")
        assert lines(record) == ["run"]
        assert machine_ad(agent)["Start"] is True  # no health check: open at once
