"""The real ``nodeagent`` command line, as a subprocess, against real agent daemons."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent._auth import Scope, load_key, verify_token
from tests.harness import AgentProcess, job_script, wait_for

pytestmark = pytest.mark.integration

FAST_POLICY = {"max_job_retirement_time": 2, "machine_max_vacate_time": 1}
TIMEOUT = 60


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NODEAGENT_", "_NODEAGENT"))}
    return base | (extra or {})


def cli(
    agent: AgentProcess | None,
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``nodeagent ARGS`` against ``agent``'s Unix socket (via ``NODEAGENT_SOCKET``)."""
    extra = {} if agent is None else {"NODEAGENT_SOCKET": str(agent.socket)}
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=_env(extra | (env or {})),
    )


def json_lines(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def get(agent: AgentProcess, path: str) -> dict[str, Any]:
    with agent.client() as c:
        body: dict[str, Any] = c.get(path).json()
    return body


def started(record: Path) -> bool:
    return Path(f"{record}.started").exists()


class Interactive:
    """``nodeagent ARGS`` with its stderr collected as it comes, for prompts and signals."""

    def __init__(self, agent: AgentProcess, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nodeagent", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env({"NODEAGENT_SOCKET": str(agent.socket)}),
        )
        self._err = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        while chunk := os.read(fd, 4096):
            self._err += chunk

    @property
    def stderr(self) -> str:
        return self._err.decode(errors="replace")

    def wait_for_stderr(self, text: str) -> None:
        wait_for(lambda: text in self.stderr or self.proc.poll() is not None, timeout=TIMEOUT)
        assert text in self.stderr, self.stderr

    def interrupt(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        status = self.proc.wait(timeout=TIMEOUT)
        self._reader.join(timeout=TIMEOUT)
        assert self.proc.stdout is not None
        out = self.proc.stdout.read().decode()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return status, out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT)
        self._reader.join(timeout=TIMEOUT)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    with AgentProcess(tmp_path / "agent", policy=FAST_POLICY) as a:
        yield a


@pytest.fixture(scope="module")
def idle_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """An agent no test changes: reads, refusals and usage errors only."""
    with AgentProcess(tmp_path_factory.mktemp("idle") / "agent", policy=FAST_POLICY) as a:
        yield a


def running_job(agent: AgentProcess, tmp_path: Path, name: str, **fields: Any) -> Path:
    argv, record = job_script(tmp_path, name)
    agent.claim(argv, **fields)
    wait_for(lambda: started(record))
    return record


# --- reading ------------------------------------------------------------------------------


def test_status_and_ad_read_the_local_agent(idle_agent: AgentProcess) -> None:
    status = cli(idle_agent, "status")
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("node1.test  Start=true  not draining  cpus 0/8 claimed")
    assert "slot1@node1.test" in status.stdout

    as_json = cli(idle_agent, "status", "--json")
    assert as_json.returncode == 0, as_json.stderr
    [ad] = json_lines(as_json)
    assert ad["machine"]["Name"] == "node1.test"
    assert [s["Name"] for s in ad["slots"]] == ["slot1@node1.test"]
    assert json_lines(cli(idle_agent, "ad", "--json"))[0].keys() == {"machine", "slots"}

    table = cli(idle_agent, "ad")
    assert table.returncode == 0
    assert table.stdout.split()[:6] == ["Name", "State", "Activity", "Cpus", "Mem", "ActvtyTime"]


def test_ad_long_is_classad_long_format(idle_agent: AgentProcess) -> None:
    import classad2

    result = cli(idle_agent, "ad", "-l")
    assert result.returncode == 0, result.stderr
    ads = list(classad2.parseAds(result.stdout, classad2.ParserType.Old))
    assert [ad["Name"] for ad in ads] == ["node1.test", "slot1@node1.test"]
    assert ads[1]["SlotType"] == "Partitionable"


def test_the_default_target_is_the_daemons_socket(idle_agent: AgentProcess) -> None:
    # No --socket, no NODEAGENT_SOCKET: the socket follows from the daemon's own file.
    env = {"NODEAGENT_CONFIG": str(idle_agent.config_path)}
    result = cli(None, "status", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json_lines(result)[0]["machine"]["Name"] == "node1.test"
    explicit = cli(None, "ad", "--json", "--socket", str(idle_agent.socket))
    assert explicit.returncode == 0, explicit.stderr


def test_status_watch_refreshes_until_ctrl_c(idle_agent: AgentProcess) -> None:
    watch = Interactive(idle_agent, "status", "--watch", "--interval", "0.1", "--json")
    try:
        assert watch.proc.stdout is not None
        first, second = watch.proc.stdout.readline(), watch.proc.stdout.readline()
        assert json.loads(first)["machine"]["Name"] == json.loads(second)["machine"]["Name"]
        status, _ = watch.interrupt()
    finally:
        watch.kill()
    assert status == 0


# --- drains -------------------------------------------------------------------------------


def test_the_prompt_accepted(agent: AgentProcess, tmp_path: Path) -> None:
    running_job(agent, tmp_path, "job", cpus=2)
    result = cli(agent, "drain", "--reason", "kernel update", stdin="y\n")
    assert result.returncode == 0, result.stderr
    assert "Commit? [y/N]" in result.stderr
    out = result.stdout
    assert "Drain estimate (not committed yet): request 1 pending (graceful" in out
    assert "reason      kernel update" in out
    assert "core-hours" in out
    assert "slot1_1@node1.test" in out
    assert out.index("pending") < out.index("Drain committed: request 1 draining")
    drain = get(agent, "/v1/drain")
    assert (drain["id"], drain["reason"]) == ("1", "kernel update")
    assert drain["state"] in ("draining", "drained")


@pytest.mark.parametrize("answer", ["n\n", "\n", "whatever\n", ""])
def test_the_prompt_declined_leaves_no_drain(
    answer: str, agent: AgentProcess, tmp_path: Path
) -> None:
    running_job(agent, tmp_path, "job")
    result = cli(agent, "drain", "--quick", stdin=answer)
    assert result.returncode == 6, result.stderr
    assert result.stderr.endswith("cli.declined: not committed; drain request 1 cancelled\n")
    drain = get(agent, "/v1/drain")
    assert drain["state"] == "none"
    assert (drain["last"]["id"], drain["last"]["state"]) == ("1", "cancelled")
    assert drain["last"]["committed_at"] is None
    assert get(agent, "/v1/ad")["machine"]["Start"] is True
    assert agent.jobs_alive() != []


def test_ctrl_c_at_the_prompt_cancels_the_transaction(agent: AgentProcess, tmp_path: Path) -> None:
    running_job(agent, tmp_path, "job")
    drain = Interactive(agent, "drain")
    try:
        drain.wait_for_stderr("Commit? [y/N]")
        assert get(agent, "/v1/drain")["state"] == "pending"
        status, _ = drain.interrupt()
    finally:
        drain.kill()
    assert status == 130, drain.stderr
    assert "cli.interrupted: not committed; drain request 1 cancelled" in drain.stderr
    after = get(agent, "/v1/drain")
    assert (after["state"], after["last"]["state"]) == ("none", "cancelled")


def test_dry_run_shows_the_estimate_and_cancels(agent: AgentProcess, tmp_path: Path) -> None:
    running_job(agent, tmp_path, "job", cpus=3)
    result = cli(agent, "drain", "--dry-run", "--deadline", "15m", "--json")
    assert result.returncode == 0, result.stderr
    phase1, cancelled = json_lines(result)
    assert (phase1["state"], phase1["deadline"]) == ("pending", 900.0)
    assert [b["cpus"] for b in phase1["estimate"]["blockers"]] == [3]
    assert (cancelled["state"], cancelled["last"]["state"]) == ("none", "cancelled")
    assert "Commit?" not in result.stderr

    human = cli(agent, "drain", "--dry-run", "--fast")
    assert human.returncode == 0, human.stderr
    assert "dry run: drain request 2 cancelled" in human.stdout
    assert get(agent, "/v1/drain")["state"] == "none"
    assert agent.jobs_alive() != []


def test_yes_json_commits_at_once(agent: AgentProcess, tmp_path: Path) -> None:
    running_job(agent, tmp_path, "job")
    result = cli(agent, "drain", "--yes", "--json", "--quick", "--reason", "r")
    assert result.returncode == 0, result.stderr
    [body] = json_lines(result)
    assert (body["id"], body["schedule"], body["reason"]) == ("1", "quick", "r")
    assert body["state"] in ("draining", "drained")
    assert body["committed_at"] is not None
    assert "Commit?" not in result.stderr
    assert get(agent, "/v1/drain")["id"] == "1"

    again = cli(agent, "drain", "--yes", "--json")
    assert again.returncode == 1
    assert again.stderr.startswith("drain.in_progress: ")
    assert json_lines(again)[0]["error"]["condor_code"] == 10001


def test_check_is_one_shot(agent: AgentProcess) -> None:
    refused = cli(agent, "drain", "--check", "TotalCpus > 100")
    assert refused.returncode == 1
    assert refused.stderr.startswith("drain.check_failed: ")
    done = cli(agent, "drain", "--check", "TotalCpus == 8", "--json")
    assert done.returncode == 0, done.stderr
    assert json_lines(done)[0]["state"] in ("drained", "completed")


def test_wait_returns_when_the_last_job_exits(tmp_path: Path) -> None:
    policy = {"max_job_retirement_time": 60, "machine_max_vacate_time": 1}
    with AgentProcess(tmp_path / "agent", policy=policy) as agent:
        ended = []
        for name, seconds in (("short", 2.0), ("long", 4.0)):
            marker = tmp_path / f"{name}.ended"
            code = "import sys, time; time.sleep(float(sys.argv[1])); open(sys.argv[2], 'w')"
            agent.claim([sys.executable, "-c", code, str(seconds), str(marker)])
            ended.append(marker)
        begin = time.monotonic()
        result = cli(agent, "drain", "--yes", "--wait")
        elapsed = time.monotonic() - begin
        assert result.returncode == 0, result.stderr
        assert all(marker.exists() for marker in ended)
        assert elapsed < 20, elapsed  # the jobs' own ends, not their 60 s retirement
        assert "2 slots busy" in result.stderr
        assert "1 slot busy" in result.stderr
        assert result.stdout.rstrip().endswith("drained: request 1")
        drain = get(agent, "/v1/drain")
        assert drain["state"] == "drained"
        assert get(agent, "/v1/ad")["machine"]["TotalMachineDrainingBadput"] == 0


def test_wait_json_ends_with_the_final_state(agent: AgentProcess, tmp_path: Path) -> None:
    record = running_job(agent, tmp_path, "job")
    result = cli(agent, "drain", "--yes", "--wait", "--json", "--on-completion", "resume")
    assert result.returncode == 0, result.stderr
    committed, final = json_lines(result)
    assert (committed["id"], committed["on_completion"]) == ("1", "resume")
    assert final == {"state": "none", "last": final["last"]}
    assert (final["last"]["id"], final["last"]["state"]) == ("1", "completed")
    assert record.exists()  # soft-killed at its retirement
    assert result.stderr == ""


def test_ctrl_c_while_waiting_leaves_the_drain_running(tmp_path: Path) -> None:
    policy = {"max_job_retirement_time": 60, "machine_max_vacate_time": 1}
    with AgentProcess(tmp_path / "agent", policy=policy) as agent:
        running_job(agent, tmp_path, "job")
        drain = Interactive(agent, "drain", "--yes", "--wait")
        try:
            drain.wait_for_stderr("1 slot busy")
            status, out = drain.interrupt()
        finally:
            drain.kill()
        assert status == 130
        assert "Drain committed: request 1 draining" in out
        assert "cli.interrupted: stopped waiting; drain request 1 goes on" in drain.stderr
        assert get(agent, "/v1/drain")["state"] == "draining"
        cancelled = cli(agent, "cancel", "1")
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout == "cancelled drain request 1 (graceful)\n"
        assert get(agent, "/v1/ad")["machine"]["Start"] is True
        nothing = cli(agent, "cancel")
        assert nothing.stdout == "no drain request in force: nothing to cancel\n"


def test_wait_fails_when_the_drain_is_cancelled(tmp_path: Path) -> None:
    policy = {"max_job_retirement_time": 60, "machine_max_vacate_time": 1}
    with AgentProcess(tmp_path / "agent", policy=policy) as agent:
        running_job(agent, tmp_path, "job")
        drain = Interactive(agent, "drain", "--yes", "--wait")
        try:
            drain.wait_for_stderr("1 slot busy")
            assert cli(agent, "cancel").returncode == 0
            status = drain.proc.wait(timeout=TIMEOUT)
        finally:
            drain.kill()
        assert status == 1
        assert drain.stderr.endswith(
            "drain.cancelled: drain request 1 was cancelled before the node drained\n"
        )


def test_wait_ends_when_the_agent_exits_as_asked(agent: AgentProcess, tmp_path: Path) -> None:
    running_job(agent, tmp_path, "job")
    result = cli(agent, "drain", "--yes", "--wait", "--on-completion", "exit")
    assert result.returncode == 0, result.stderr
    # Whichever the last poll saw: the request drained, or the agent already gone.
    last_line = result.stdout.splitlines()[-1]
    assert last_line.startswith(("drained: request 1", "the agent exited (on completion exit)"))
    assert agent.wait_exit() == 0


# --- claims -------------------------------------------------------------------------------


def test_claim_suspend_continue_release(agent: AgentProcess) -> None:
    created = cli(
        agent, "claim", "--cpus", "2", "--retirement", "1m", "--vacate", "5s", "--json",
        "--", sys.executable, "-c", "import time; time.sleep(60)",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    [claim] = json_lines(created)
    agent.job_pids.add(claim["job"]["pid"])
    assert claim["resources"]["cpus"] == 2
    assert claim["job"]["max_job_retirement_time"] == 60
    assert claim["job"]["job_max_vacate_time"] == 5
    claim_id = claim["id"]

    suspended = json_lines(cli(agent, "suspend", claim_id, "--json"))[0]
    assert suspended["activity"] == "Suspended"
    resumed = cli(agent, "continue", claim_id)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(f"continued claim {claim_id} slot1_1@node1.test Claimed/Busy")
    released = cli(agent, "release", claim_id)
    assert released.returncode == 0, released.stderr
    wait_for(lambda: get(agent, "/v1/claims")["claims"] == [])
    assert agent.jobs_alive() == []

    assert cli(agent, "suspend", "99").returncode == 1
    assert cli(agent, "claim", "--pid", "12345", "--", "true").returncode == 2
    assert cli(agent, "claim").returncode == 2


def test_a_retirement_the_machine_cuts_is_said(agent: AgentProcess) -> None:
    """The machine's max_job_retirement_time caps a job's own: the reply carries both, the
    command line says the cut."""
    argv = ["--", sys.executable, "-c", "import time; time.sleep(60)"]
    created = cli(agent, "claim", "--retirement", "1h", "--json", *argv)
    [claim] = json_lines(created)
    agent.job_pids.add(claim["job"]["pid"])
    machine = FAST_POLICY["max_job_retirement_time"]
    assert claim["job"]["max_job_retirement_time"] == 3600
    assert claim["job"]["retirement_granted"] == machine
    shown = cli(agent, "claim", "--retirement", "1h", *argv)
    assert shown.returncode == 0, shown.stderr
    agent._remember_jobs()
    assert (
        f"retirement cut from 1h to {machine}s (the machine's max_job_retirement_time)"
        in shown.stdout
    )
    kept = json_lines(cli(agent, "claim", "--retirement", "1s", "--json", *argv))[0]
    agent.job_pids.add(kept["job"]["pid"])
    assert kept["job"]["retirement_granted"] == 1


# --- exit statuses, durations, reachability -----------------------------------------------


@contextlib.contextmanager
def fake_agent(path: Path, status: str, content_type: str, body: bytes) -> Iterator[None]:
    """A Unix socket answering every request with one canned HTTP response."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    server.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                head = (
                    f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                conn.sendall(head.encode() + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def test_every_exit_status(idle_agent: AgentProcess, tmp_path: Path) -> None:
    def run(*args: str, **kwargs: Any) -> tuple[int, str]:
        result = cli(idle_agent, *args, **kwargs)
        return result.returncode, result.stderr

    assert run("status")[0] == 0
    # 1: the agent refused; its code is printed.
    code, err = run("cancel", "77")
    assert (code, err) == (1, "drain.no_such_request: no drain request '77' on node1.test\n")
    # 2: usage.
    assert run("drain", "--bogus")[0] == 2
    assert run("drain", "--quick", "--fast") == (
        2,
        "cli.usage: choose one of --graceful, --quick and --fast\n",
    )
    assert run("drain", "--dry-run", "--yes")[0] == 2
    assert run("drain", "--on-completion", "later")[0] == 2
    assert run("ad", "-l", "--json")[0] == 2
    assert run("status", "--host", "ftp://node1")[0] == 2
    assert run("status", "--host", idle_agent.url, "--token", str(tmp_path / "none"))[0] == 2
    # 3: unreachable.
    code, err = run("status", "--socket", str(tmp_path / "no.sock"))
    assert code == 3
    assert err.startswith("agent.unreachable: cannot reach the agent at unix:")
    # 4: unauthorized (401 without a token, 403 without the scope).
    code, err = run("status", "--host", idle_agent.url)
    assert (code, err) == (4, "auth.unauthenticated: a bearer token is required\n")
    read_token = tmp_path / "read.token"
    read_token.write_text(idle_agent.token("READ"))
    assert run("status", "--host", idle_agent.url, "--token", str(read_token))[0] == 0
    code, err = run("drain", "--yes", "--host", idle_agent.url, "--token", str(read_token))
    assert code == 4
    assert err.startswith("auth.forbidden: ")
    # 5: the agent failed.
    failing = tmp_path / "failing.sock"
    error = b'{"error":{"code":"store.error","message":"disk full"}}'
    with fake_agent(failing, "500 Internal Server Error", "application/json", error):
        code, err = run("status", "--socket", str(failing))
    assert (code, err) == (5, "store.error: disk full\n")
    garbled = tmp_path / "garbled.sock"
    with fake_agent(garbled, "200 OK", "application/json", b"{not json"):
        code, err = run("status", "--socket", str(garbled))
    assert code == 5
    assert err.startswith("agent.bad_reply: ")
    # 6 (declined) and 130 (Ctrl-C): see the prompt tests.
    assert get(idle_agent, "/v1/drain") == {"state": "none", "last": None}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("drain", "--deadline", "5x"), "cli.bad_duration: --deadline: invalid duration '5x'"),
        (("drain", "--deadline", "-1m"), "durations cannot be negative"),
        (("drain", "--deadline", "15m2h"), "in that order (90s, 15m, 2h, 1h30m)"),
        (("claim", "--retirement", "1.5s", "--", "true"), "'1.5s' is not whole seconds"),
        (("status", "--watch", "--interval", "soon"), "--interval: invalid duration 'soon'"),
    ],
)
def test_bad_durations(idle_agent: AgentProcess, args: tuple[str, ...], message: str) -> None:
    result = cli(idle_agent, *args)
    assert result.returncode == 2
    assert result.stderr.startswith("cli.bad_duration: ")
    assert message in result.stderr
    assert get(idle_agent, "/v1/drain") == {"state": "none", "last": None}


def test_an_unreachable_agent(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "agent", policy=FAST_POLICY) as agent:
        assert cli(agent, "status").returncode == 0
        assert agent.stop() == 0
        for args in (("status",), ("status", "--json"), ("drain", "--yes"), ("cancel",)):
            result = cli(agent, *args)
            assert result.returncode == 3, args
            assert result.stderr.startswith("agent.unreachable: cannot reach the agent at unix:")
            assert result.stdout == ""
        # A port bound and not listening refuses: the stopped agent's own port may be
        # another process's by now (on a busy machine it was, and it reset the connection).
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{closed.getsockname()[1]}"
            tcp = cli(agent, "ad", "--host", url)
        assert tcp.returncode == 3
        assert tcp.stderr.startswith(f"agent.unreachable: cannot reach the agent at {url}: ")
        assert "connection refused" in tcp.stderr


# --- tokens -------------------------------------------------------------------------------


def test_token_create_gives_remote_access(idle_agent: AgentProcess, tmp_path: Path) -> None:
    token = tmp_path / "alice.token"
    created = cli(
        None, "token", "create", "--scope", "read", "--subject", "alice",
        "--lifetime", "1h", "--key-file", str(idle_agent.key_file), "--output", str(token),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert created.stdout == ""
    assert "token for alice (READ) written to" in created.stderr
    assert stat.S_IMODE(token.stat().st_mode) == 0o600

    env = {"NODEAGENT_HOST": idle_agent.url, "NODEAGENT_TOKEN_FILE": str(token)}
    remote = cli(None, "ad", "--json", env=env)
    assert remote.returncode == 0, remote.stderr
    assert json_lines(remote)[0]["machine"]["Name"] == "node1.test"
    assert cli(None, "cancel", env=env).returncode == 4

    as_json = cli(
        None, "token", "create", "--scope", "ADMINISTRATOR", "--subject", "ops",
        "--lifetime", "90s", "--key-file", str(idle_agent.key_file), "--json",
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    [doc] = json_lines(as_json)
    assert (doc["subject"], doc["scope"]) == ("ops", "ADMINISTRATOR")
    assert abs(doc["expires_at"] - (time.time() + 90)) < 10
    admin = tmp_path / "admin.token"
    admin.write_text(doc["token"])
    nothing = cli(None, "cancel", "--host", idle_agent.url, "--token", str(admin))
    assert nothing.returncode == 0, nothing.stderr

    key = ("--key-file", str(idle_agent.key_file))
    for twice in ((), ("--lifetime", "1h")):  # plain, then through typer (an option twice)
        unbound = cli(
            None, "token", "create", "--scope", "daemon", "--subject", "n1", "--lifetime", "1h",
            *twice, *key,
        )  # fmt: skip
        assert unbound.returncode == 2
        assert unbound.stderr.startswith("cli.node_required: --scope DAEMON needs --node HOST")
        misplaced = cli(
            None, "token", "create", "--scope", "READ", "--subject", "n1", "--lifetime", "1h",
            "--node", "node1.test", *twice, *key,
        )  # fmt: skip
        assert misplaced.returncode == 2
        assert misplaced.stderr.startswith("cli.usage: ")
        bound = cli(
            None, "token", "create", "--scope", "DAEMON", "--subject", "agent@node1.test",
            "--lifetime", "1h", "--node", "node1.test", "--json", *twice, *key,
        )  # fmt: skip
        assert bound.returncode == 0, bound.stderr
        [doc] = json_lines(bound)
        assert (doc["scope"], doc["node"]) == ("DAEMON", "node1.test")
        principal = verify_token(load_key(idle_agent.key_file), doc["token"])
        assert (principal.scope, principal.node) == (Scope.DAEMON, "node1.test")

    unsafe = tmp_path / "unsafe.key"
    unsafe.write_text("x" * 64)
    unsafe.chmod(0o644)
    refused = cli(
        None, "token", "create", "--scope", "READ", "--subject", "a", "--lifetime", "1h",
        "--key-file", str(unsafe),
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.startswith("auth.key_file: ")
