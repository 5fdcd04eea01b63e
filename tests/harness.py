"""Real agent daemons for integration tests: each in its own temporary directory.

:class:`AgentProcess` starts ``python -m nodeagent run`` as a subprocess (forked by the
test process's launcher, :mod:`tests.launcher`) on a Unix socket and a loopback TCP port
chosen by the kernel, waits until it is ready, and on exit stops it and kills every job
process it started (by the PIDs it recorded), so no test leaves a process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx

from tests.launcher import LaunchedProcess, launch

__all__ = [
    "TLS_CONTEXT",
    "AgentProcess",
    "DaemonProcess",
    "MasterProcess",
    "agents",
    "costly_expression",
    "job_script",
    "running",
    "start_together",
    "wait_for",
]

#: The TLS context every client the tests make shares: the default one, its CA bundle loaded
#: once. httpx builds one per client otherwise, which costs tens of milliseconds of CPU, and
#: the polls of :func:`wait_for` make a client per request (a poll would spend more CPU
#: building contexts than the daemon spends answering).
TLS_CONTEXT = httpx.create_ssl_context()

#: A job that records the instant it receives SIGTERM, then exits after ``delay``.
_JOB = r"""
import os, signal, sys, time
record, delay = sys.argv[1], float(sys.argv[2])
def on_term(signum, frame):
    with open(record, "a") as f:
        f.write(f"{time.time()!r}\n")
    if delay >= 0:
        time.sleep(delay)
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
with open(record + ".started", "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(3600)
"""


def job_script(tmp: Path, name: str, *, term_delay: float = 0.0) -> tuple[list[str], Path]:
    """argv of a job that writes the time of each SIGTERM to the returned file.

    ``term_delay`` < 0: the job ignores SIGTERM (only SIGKILL ends it).
    """
    record = tmp / f"{name}.term"
    return [sys.executable, "-c", _JOB, str(record), str(term_delay)], record


def costly_expression(levels: int) -> str:
    """A ClassAd expression that costs about 0.05 × 2**``levels`` seconds to evaluate on a
    quiet machine (more on a loaded one) and passes the callers' caps (characters,
    operators and brackets): a record whose attributes each take the one before twice, so
    that its last one evaluates a backtracking regexp (false after about 0.05 s) 2**levels
    times. Its value is false."""
    steps = "; ".join(f"a{i} = a{i - 1} || a{i - 1}" for i in range(1, levels + 1))
    return f'[a0 = regexp("^(a+)+$", "{"a" * 21}!"); {steps}].a{levels}'


def running(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (a zombie has ended)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def wait_for(predicate: Any, *, timeout: float = 20.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy (tests only)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)


class DaemonProcess:
    """What every daemon subprocess shares: start until ready, stop, HTTP, tokens.

    Subclasses set ``command`` (the ``nodeagent`` words before ``--config``), ``info``
    (the runtime file naming its pid and URLs), ``socket``, ``key_file``, ``log_path``
    and ``config_path``.
    """

    command: tuple[str, ...]
    info_name: str
    root: Path
    config_path: Path
    socket: Path
    key_file: Path
    log_path: Path

    def __init__(self) -> None:
        self.proc: LaunchedProcess | subprocess.Popen[bytes] | None = None
        self.url = ""
        #: Variables added to the daemon's environment.
        self.env: dict[str, str] = {}

    def start(self) -> Self:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it (:meth:`wait_ready` does)."""
        with contextlib.suppress(FileNotFoundError):
            (self.root / "run" / self.info_name).unlink()
        with self.log_path.open("ab") as log:
            self.proc = launch(
                [*self.command, "--config", str(self.config_path)],
                stdout=log.fileno(),
                env={**os.environ, "NOTIFY_SOCKET": "", **self.env},
            )

    def wait_ready(self) -> Self:
        """Wait until the launched daemon has written its runtime file (it serves)."""
        info = self.root / "run" / self.info_name

        def ready() -> dict[str, Any] | None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited early:\n{self.log_path.read_text()}")
            try:
                data: dict[str, Any] = json.loads(info.read_text())
            except (FileNotFoundError, ValueError):
                return None
            return data if data["pid"] == self.proc.pid else None

        data = wait_for(ready)
        self.url = next(u for u in data["urls"] if not u.startswith("http://unix"))
        return self

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Signal the daemon and wait for it; returns its exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self._before_stop()
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=20)

    def _before_stop(self) -> None:
        """Called while the daemon still runs, just before it is signalled."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self._before_stop()
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=20)

    def client(self, token: str | None = None) -> httpx.Client:
        """An HTTP client: over the Unix socket, or over TCP with ``token``."""
        if token is None:
            return httpx.Client(
                transport=httpx.HTTPTransport(uds=str(self.socket), verify=TLS_CONTEXT),
                base_url="http://daemon",
                timeout=30,
                verify=TLS_CONTEXT,
            )
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
            verify=TLS_CONTEXT,
        )

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request over the Unix socket, with a client of its own."""
        with self.client() as c:
            return c.request(method, path, **kwargs)

    def token(
        self,
        scope: str,
        *,
        subject: str = "tester",
        lifetime: float = 3600,
        age: float = 0,
        node: str | None = None,
        audience: str | None = None,
    ) -> str:
        """A token signed with this daemon's pool key, issued ``age`` seconds ago; a DAEMON
        token names ``node`` (``None``: a pool-wide one, which a master refuses unless
        ``allow_pool_daemon_tokens``), ``audience`` binds it to one receiver."""
        from nodeagent._auth import Scope, create_token, load_key

        return create_token(
            load_key(self.key_file),
            subject=subject,
            scope=Scope(scope),
            lifetime_s=lifetime,
            now=time.time() - age,
            node=node,
            audience=audience,
        )


_D = TypeVar("_D", bound=DaemonProcess)


class AgentProcess(DaemonProcess):
    """One agent daemon subprocess; use as a context manager."""

    command: tuple[str, ...] = ("run",)
    info_name = "nodeagent.json"

    def __init__(
        self,
        root: Path,
        *,
        hostname: str = "node1.test",
        cpus: int = 8,
        memory_mib: int = 16384,
        policy: dict[str, Any] | None = None,
        master: dict[str, Any] | None = None,
        extra: str = "",
        system_bus: str | None = None,
    ) -> None:
        """``system_bus``: the D-Bus address the agent takes for the system bus (its
        logind lock); by default a socket that does not exist, so that no test agent
        talks to the host's logind."""
        super().__init__()
        self.root = root
        self.hostname = hostname
        self.env["DBUS_SYSTEM_BUS_ADDRESS"] = system_bus or f"unix:path={root / 'no-bus'}"
        root.mkdir(parents=True, exist_ok=True)
        self.config_path = root / "nodeagent.toml"
        policy_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in (policy or {}).items())
        master_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in (master or {}).items())
        self.config_path.write_text(
            f'hostname = "{hostname}"\nip = "127.0.0.1"\n'
            f'state_dir = "{root / "state"}"\nruntime_dir = "{root / "run"}"\n'
            f'listen = ["127.0.0.1:0"]\n{extra}\n'
            f"[resources]\ncpus = {cpus}\nmemory_mib = {memory_mib}\ndisk_kib = 1000000\n"
            f"[policy]\n{policy_lines}\n[master]\n{master_lines}\n"
        )
        self.socket = root / "run" / "nodeagent.sock"
        self.key_file = root / "state" / "pool.key"
        self.log_path = root / "agent.log"
        self.job_pids: set[int] = set()

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    def wait_exit(self, timeout: float = 20) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for pid in self.job_pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    def _before_stop(self) -> None:
        self._remember_jobs()

    def claim(self, argv: list[str], **fields: Any) -> dict[str, Any]:
        with self.client() as c:
            response = c.post("/v1/claims", json={"command": argv, **fields})
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        self.job_pids.add(body["job"]["pid"])
        return body

    def _remember_jobs(self) -> None:
        with self.client() as c:
            claims = c.get("/v1/claims", timeout=2).json()["claims"]
        self.job_pids.update(c["job"]["pid"] for c in claims if c["job"]["pid"])

    def make_idle(self) -> None:
        """Back to idle, for an agent tests share: no drain (nor the record of the last
        one), no claim, every job it ran ended; their pids are forgotten once gone, so that
        :meth:`jobs_alive` speaks of the next test's jobs only (pids are reused)."""
        with self.client() as c:
            c.delete("/v1/drain").raise_for_status()
            for claim in c.get("/v1/claims").json()["claims"]:
                if claim["job"]["pid"]:
                    self.job_pids.add(claim["job"]["pid"])
                if claim["state"] != "Preempting":
                    c.delete(f"/v1/claims/{claim['id']}")
            wait_for(lambda: c.get("/v1/claims").json()["claims"] == [])
            c.delete("/v1/drain").raise_for_status()
            assert c.get("/v1/drain").json()["state"] == "none"
        wait_for(lambda: self.jobs_alive() == [])
        self.job_pids.clear()

    def jobs_alive(self) -> list[int]:
        """Job pids still running (a zombie waiting for its reaper counts as gone)."""
        alive = []
        for pid in sorted(self.job_pids):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            if state not in ("Z", "X"):
                alive.append(pid)
        return alive


def start_together(stack: contextlib.ExitStack, daemons: list[_D]) -> list[_D]:
    """Start ``daemons`` at once and wait until each is ready; ``stack`` ends each of them
    (by pid, as its context manager does). Their start-ups overlap instead of following
    one another."""
    for daemon in daemons:
        stack.push(daemon.__exit__)
        daemon.launch()
    for daemon in daemons:
        daemon.wait_ready()
    return daemons


@contextlib.contextmanager
def agents(root: Path, count: int, **kwargs: Any) -> Iterator[list[AgentProcess]]:
    """``count`` agents named node1.test … nodeN.test, started and cleaned up together."""
    with contextlib.ExitStack() as stack:
        yield start_together(
            stack,
            [
                AgentProcess(root / f"node{i}", hostname=f"node{i}.test", **kwargs)
                for i in range(1, count + 1)
            ],
        )


class MasterProcess(DaemonProcess):
    """One master daemon subprocess; use as a context manager."""

    command = ("master", "run")
    info_name = "master.json"

    def __init__(self, root: Path, *, settings: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.config_path = root / "master.toml"
        lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in (settings or {}).items())
        self.config_path.write_text(
            f'state_dir = "{root / "state"}"\nruntime_dir = "{root / "run"}"\n'
            f'listen = ["127.0.0.1:0"]\n{lines}\n'
        )
        self.key_file = root / "state" / "pool.key"
        self.socket = root / "run" / "master.sock"
        self.log_path = root / "master.log"
        if not self.key_file.exists():
            from nodeagent._auth import generate_key

            self.key_file.parent.mkdir(parents=True, exist_ok=True)
            generate_key(self.key_file)

    def make_empty(self) -> None:
        """Back to empty, for a master tests share: no machine down, nothing scheduled, no
        SLA policy set through the API (checked)."""
        down = self.call("GET", "/maintenance/status").json().get("down_machines", [])
        if down:
            self.call("POST", "/machine/up", json=down).raise_for_status()
        self.call("POST", "/maintenance/schedule", json={}).raise_for_status()
        for policy in self.call("GET", "/v1/sla/policies").json()["policies"]:
            self.call("DELETE", f"/v1/sla/policies/{policy['group']}").raise_for_status()
        assert self.call("GET", "/maintenance/status").json() == {}
        assert self.call("GET", "/v1/sla/policies").json()["policies"] == []

    def agent_settings(
        self, root: Path, *, node: str, update_interval: float = 1.0
    ) -> dict[str, Any]:
        """What the agent ``node`` (its hostname) under ``root`` needs to report here: the
        pool key and its own node's DAEMON token."""
        state = root / "state"
        state.mkdir(parents=True, exist_ok=True)
        key = state / "pool.key"
        key.write_bytes(self.key_file.read_bytes())
        key.chmod(0o600)
        token_file = root / "daemon.token"
        token_file.write_text(self.token("DAEMON", subject=f"agent@{node}", node=node))
        return {
            "url": self.url,
            "token_file": str(token_file),
            "update_interval": update_interval,
            "ad_debounce": 0.05,
        }
