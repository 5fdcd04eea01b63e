"""The one lifecycle and its one reload, for the agent, the master and the defrag daemon.

Each test is written once and runs against the three daemons as real processes in
temporary directories: SIGHUP applies a reloadable key (the master's ``agent_timeout``
on its next call to an agent, against a loopback stand-in that answers slower than the
new timeout and faster than the old one), reports a changed ``runtime_dir`` as needing a
restart and still cleans up the directory it runs in, changes nothing for an invalid
file or for values the daemon refuses; and ``listen = []`` serves on the Unix socket only.
Every daemon a test starts is stopped by its pid; the stand-ins are threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProcess, wait_for

pytestmark = pytest.mark.integration

NS = 1_000_000_000


# ----------------------------------------------------------------------- loopback stand-ins


@dataclass
class StandIn:
    """A loopback HTTP peer answering every request after ``delay`` seconds.

    ``replies`` maps ``"METHOD /path"`` to a JSON reply (``{}`` otherwise); ``requests``
    records ``"METHOD /path"`` of each request as it arrives.
    """

    replies: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0
    requests: list[str] = field(default_factory=list)
    url: str = ""

    def count(self, request: str) -> int:
        return sum(1 for r in list(self.requests) if r == request)


@contextlib.contextmanager
def stand_in(peer: StandIn) -> Iterator[StandIn]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            request = f"{self.command} {self.path.partition('?')[0]}"
            peer.requests.append(request)
            time.sleep(peer.delay)
            body = json.dumps(peer.replies.get(request, {})).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            """A caller that gave up (timed out) before the reply: not the test's concern."""

    server = Server(("127.0.0.1", 0), Handler)
    peer.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield peer
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# ----------------------------------------------------------------------- the three daemons


def _toml(settings: dict[str, Any], extra: str = "") -> str:
    """Top-level keys and the raw ``extra`` lines first, then one table per dict value;
    values written as JSON, which TOML reads the same for strings, numbers and lists."""
    top = [f"{k} = {json.dumps(v)}\n" for k, v in settings.items() if not isinstance(v, dict)]
    tables = [
        f"[{k}]\n" + "".join(f"{kk} = {json.dumps(vv)}\n" for kk, vv in v.items())
        for k, v in settings.items()
        if isinstance(v, dict)
    ]
    return "".join(top) + extra + "".join(tables)


class Daemon(DaemonProcess):
    """One daemon of ``kind`` as a subprocess in ``root`` (TCP optional: ``listen = []``)."""

    def __init__(self, kind: Kind, root: Path, settings: dict[str, Any]) -> None:
        super().__init__()
        self.kind = kind
        self.command = kind.command
        self.info_name = kind.info_name
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.config_path = root / "daemon.toml"
        self.socket = root / "run" / kind.socket_name
        self.key_file = root / "state" / "pool.key"
        self.log_path = root / "daemon.log"
        self.settings = {
            "state_dir": str(root / "state"),
            "runtime_dir": str(root / "run"),
            "listen": ["127.0.0.1:0"],
            **settings,
        }
        self.write(self.settings)
        if not kind.creates_key:
            from nodeagent._auth import generate_key

            self.key_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            generate_key(self.key_file)

    @property
    def info(self) -> Path:
        return self.root / "run" / self.info_name

    def write(self, settings: dict[str, Any], *, extra: str = "") -> None:
        self.config_path.write_text(_toml(settings, extra))

    def start(self) -> Daemon:
        """Start, and wait until the runtime file names this process (``url``: TCP or "")."""
        with contextlib.suppress(FileNotFoundError):
            self.info.unlink()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "nodeagent",
                    *self.command,
                    "--config",
                    str(self.config_path),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "NOTIFY_SOCKET": ""},
            )
        data = wait_for(self._started)
        self.url = next((u for u in data["urls"] if not u.startswith("http://unix")), "")
        return self

    def _started(self) -> dict[str, Any] | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"daemon exited early:\n{self.log_path.read_text()}")
        try:
            data: dict[str, Any] = json.loads(self.info.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return data if data["pid"] == self.proc.pid else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def reload(self, settings: dict[str, Any], *, extra: str = "") -> str:
        """Write ``settings`` (+ raw TOML ``extra``), SIGHUP, wait for the outcome's log line."""
        before = len(self._outcomes())
        self.write(settings, extra=extra)
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

        def outcome() -> str | None:
            done = self._outcomes()[before:]
            return done[-1] if done else None

        line: str = wait_for(outcome)
        return line

    def _outcomes(self) -> list[str]:
        return [x for x in self.log().splitlines() if "reloaded: " in x or "reload refused" in x]

    def healthy(self) -> bool:
        return bool(self.call("GET", "/healthz").json()["status"] == "ok")


@dataclass(frozen=True)
class Kind:
    """What the tests need to know of one daemon."""

    name: str
    command: tuple[str, ...]
    info_name: str
    socket_name: str
    creates_key: bool
    #: A request over the socket that the daemon serves (a real endpoint, not /healthz).
    endpoint: str
    #: Its settings for the tests, given the stand-in that plays its peer.
    settings: Callable[[StandIn], dict[str, Any]]

    def __str__(self) -> str:
        return self.name


AGENT = Kind(
    "agent",
    ("run",),
    "nodeagent.json",
    "nodeagent.sock",
    creates_key=True,
    endpoint="/v1/ad",
    settings=lambda peer: {
        "hostname": "node1.test",
        "ip": "127.0.0.1",
        "resources": {"cpus": 4, "memory_mib": 4096, "disk_kib": 1_000_000},
        "policy": {"max_job_retirement_time": 2},
    },
)
MASTER = Kind(
    "master",
    ("master", "run"),
    "master.json",
    "master.sock",
    creates_key=True,
    endpoint="/v1/maintenance/plan",
    settings=lambda peer: {"reconcile_interval": 0.1, "drain_margin": 60},
)
DEFRAG = Kind(
    "defrag",
    ("defrag", "run"),
    "defrag.json",
    "defrag.sock",
    creates_key=False,
    endpoint="/v1/stats",
    settings=lambda peer: {"master_url": peer.url, "interval": 0.2, "update_interval": 0.5},
)
KINDS = pytest.mark.parametrize("kind", [AGENT, MASTER, DEFRAG], ids=str)


def quiet_peer() -> StandIn:
    """A peer with nothing to say: a master without ads (only the defrag daemon calls it)."""
    return StandIn(replies={"GET /v1/ads": {"ads": []}})


@contextlib.contextmanager
def running(kind: Kind, root: Path, peer: StandIn, **overrides: Any) -> Iterator[Daemon]:
    """A stand-in peer and the daemon, both ended on the way out (the daemon by pid)."""
    with stand_in(peer), Daemon(kind, root, {**kind.settings(peer), **overrides}) as daemon:
        yield daemon


def _stop(daemon: Daemon) -> None:
    assert daemon.stop() == 0, daemon.log()


# ----------------------------------------------------------------------- (a) reloadable keys


def _agent_policy_reloads(tmp_path: Path) -> None:
    with running(AGENT, tmp_path / "agent", quiet_peer()) as agent:

        def retirement() -> Any:
            return agent.call("GET", "/v1/ad").json()["machine"]["MaxJobRetirementTime"]

        assert retirement() == 2
        settings = {**agent.settings, "policy": {"max_job_retirement_time": 77}}
        assert "reloaded: policy.max_job_retirement_time" in agent.reload(settings)
        assert retirement() == 77
        _stop(agent)


def _standin_ad(address: str) -> dict[str, Any]:
    """The ad of a node whose API is the stand-in at ``address`` (one job running)."""
    from slots import JobSpec, Machine, MachinePolicy, Resources

    now = time.time()
    machine = Machine(
        host="standin.test",
        ip="127.0.0.1",
        address=address,
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=60),
        now=now,
    )
    machine.claim(now, resources=Resources(cpus=1), spec=JobSpec())
    return machine.ad(now)


def _master_agent_timeout_reloads(tmp_path: Path) -> None:
    """The stand-in agent answers in 1.5 s: within the first timeout (5 s), not the
    reloaded one (0.5 s); then within the one reloaded again (5 s)."""
    agent = StandIn(
        replies={
            "POST /v1/drain": {"id": "7", "estimate": {"completion": None}},
            "POST /v1/drain/7/commit": {"id": "7"},
        },
        delay=1.5,
    )
    with running(
        MASTER, tmp_path / "master", agent, drain_policy="immediate", agent_timeout=5
    ) as master:
        line = master.reload({**master.settings, "agent_timeout": 0.5})
        assert "reloaded: agent_timeout" in line

        def totals() -> dict[str, Any]:
            body: dict[str, Any] = master.call("GET", "/v1/maintenance/plan").json()["totals"]
            return body

        with master.client(
            master.token("DAEMON", subject="agent@standin", node="standin.test")
        ) as pusher:
            assert pusher.post("/v1/ads", json=_standin_ad(agent.url)).status_code == 200
        machine = {"hostname": "standin.test", "ip": "127.0.0.1"}
        start = int((time.time() + 3600) * NS)
        schedule = {
            "windows": [
                {"machine_ids": [machine], "unavailability": {"start": {"nanoseconds": start}}}
            ]
        }
        assert master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
        wait_for(lambda: totals()["drain_failures"] >= 1)
        assert agent.count("POST /v1/drain") >= 1
        assert totals()["drains_started"] == 0
        assert "start of standin.test failed" in master.log()

        assert "reloaded: agent_timeout" in master.reload({**master.settings, "agent_timeout": 5})
        wait_for(lambda: totals()["drains_started"] >= 1, timeout=30)
        assert agent.count("POST /v1/drain/7/commit") >= 1
        _stop(master)


def _defrag_agent_timeout_reloads(tmp_path: Path) -> None:
    """The stand-in master answers its ads in 1 s: within the first timeout (5 s), not
    the reloaded one (0.3 s)."""
    master = StandIn(replies={"GET /v1/ads": {"ads": []}}, delay=1.0)
    with running(DEFRAG, tmp_path / "defrag", master, agent_timeout=5) as defrag:

        def stats() -> dict[str, Any]:
            body: dict[str, Any] = defrag.call("GET", "/v1/stats").json()
            return body

        wait_for(lambda: master.count("GET /v1/ads") >= 2)
        assert stats()["QueryFailures"] == 0
        assert "reloaded: agent_timeout" in defrag.reload({**defrag.settings, "agent_timeout": 0.3})
        wait_for(lambda: stats()["QueryFailures"] >= 1)
        _stop(defrag)


RELOADS: dict[str, Callable[[Path], None]] = {
    "agent": _agent_policy_reloads,
    "master": _master_agent_timeout_reloads,
    "defrag": _defrag_agent_timeout_reloads,
}


@KINDS
def test_a_reloadable_key_takes_effect(kind: Kind, tmp_path: Path) -> None:
    RELOADS[kind.name](tmp_path)


# ------------------------------------------------------------ (b) keys that need a restart


@KINDS
def test_a_changed_runtime_dir_waits_for_a_restart_and_shutdown_cleans_the_one_in_use(
    kind: Kind, tmp_path: Path
) -> None:
    with running(kind, tmp_path / kind.name, quiet_peer()) as daemon:
        elsewhere = tmp_path / "elsewhere"
        line = daemon.reload({**daemon.settings, "runtime_dir": str(elsewhere)})
        assert "reloaded: nothing changed" in line
        assert "take effect only after a restart: " in daemon.log()
        restart_line = next(
            x for x in daemon.log().splitlines() if "take effect only after a restart" in x
        )
        assert "runtime_dir" in restart_line
        assert daemon.healthy()
        assert daemon.call("GET", kind.endpoint).status_code == 200
        assert daemon.proc is not None
        assert json.loads(daemon.info.read_text())["pid"] == daemon.proc.pid
        _stop(daemon)
        assert not daemon.socket.exists()
        assert not daemon.info.exists()
        assert not elsewhere.exists()


# ----------------------------------------------------------------------- (c) refusals


@dataclass(frozen=True)
class Refusal:
    """A file the daemon must refuse whole: ``settings`` plus raw TOML ``extra``."""

    name: str
    edit: Callable[[dict[str, Any]], dict[str, Any]]
    extra: str = ""

    def __str__(self) -> str:
        return self.name


#: Each refused file also changes a reloadable key, which must keep its running value.
REFUSALS = {
    "agent": [
        Refusal(
            "unknown key",
            lambda s: {**s, "policy": {"max_job_retirement_time": 77}},
            'surprise = "!"\n',
        ),
        Refusal(
            "policy refused by the model",
            lambda s: {**s, "policy": {"max_job_retirement_time": 77, "start": "(("}},
        ),
    ],
    "master": [
        Refusal("unknown key", lambda s: {**s, "drain_margin": 5}, 'surprise = "!"\n'),
        Refusal("invalid value", lambda s: {**s, "drain_margin": 5, "reconcile_interval": -1}),
    ],
    "defrag": [
        Refusal("unknown key", lambda s: {**s, "interval": 3600}, 'surprise = "!"\n'),
        Refusal(
            "no master_url",
            lambda s: {k: v for k, v in {**s, "interval": 3600}.items() if k != "master_url"},
        ),
    ],
}
#: The reloadable value each refusal tried to change, as the daemon's API shows it.
OBSERVED: dict[str, Callable[[Daemon], Any] | None] = {
    "agent": lambda d: d.call("GET", "/v1/ad").json()["machine"]["MaxJobRetirementTime"],
    "master": lambda d: d.call("GET", "/v1/maintenance/plan").json()["policy"]["drain_margin"],
    "defrag": None,  # its API shows no policy; the second reload below proves it unchanged
}


@pytest.mark.parametrize(
    ("kind", "refusal"),
    [(kind, refusal) for kind in (AGENT, MASTER, DEFRAG) for refusal in REFUSALS[kind.name]],
    ids=str,
)
def test_a_refused_file_changes_nothing(kind: Kind, refusal: Refusal, tmp_path: Path) -> None:
    with running(kind, tmp_path / kind.name, quiet_peer()) as daemon:
        observe = OBSERVED[kind.name]
        before = None if observe is None else observe(daemon)
        line = daemon.reload(refusal.edit(daemon.settings), extra=refusal.extra)
        assert "reload refused, configuration unchanged" in line
        assert daemon.healthy()
        assert daemon.call("GET", kind.endpoint).status_code == 200
        if observe is not None:
            assert observe(daemon) == before
        # The running configuration is the one it started with: the original file is no change.
        assert "reloaded: nothing changed" in daemon.reload(daemon.settings)
        _stop(daemon)
        assert not daemon.socket.exists()


# ----------------------------------------------------------------------- (d) no TCP listener


@KINDS
def test_no_tcp_listener_serves_on_the_unix_socket_only(kind: Kind, tmp_path: Path) -> None:
    with running(kind, tmp_path / kind.name, quiet_peer(), listen=[]) as daemon:
        assert daemon.url == ""
        urls = json.loads(daemon.info.read_text())["urls"]
        assert len(urls) == 1
        assert urls[0].startswith("http://unix")
        assert daemon.healthy()
        assert daemon.call("GET", kind.endpoint).status_code == 200
        assert "ready on http://unix" in daemon.log()
        _stop(daemon)
        assert not daemon.socket.exists()
        assert not daemon.info.exists()
