"""Every command of the command line starts without the server stack, against real daemons.

Each command runs in a fresh interpreter through the console script's entry point, with
an agent, a master and a defrag daemon on Unix sockets in a temporary directory. A tiny
wrapper runs :func:`nodeagent.cli._main.main` and, however it ends, writes which of the
heavy modules (trio, httpx, httpcore, pydantic, pydantic_core, fastapi, hypercorn) the
process imported: none, for every command but the daemons and the demo. The commands an
operator types most (``drain --graceful --yes``, ``cancel``, ``claim``, ``release``,
``status`` with or without ``--json``, ``master status``, ``master plan``, ``version``)
import none of what a one-request command does not need either (:data:`NEEDLESS`:
``http.client``, ``email``, ``ssl``, ``dataclasses``, ``typing``, ``inspect``, rich), over
the Unix socket or over ``http://``. Each command must also succeed (or fail as expected),
so a command that stops early cannot pass for a light one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess, DaemonProcess, MasterProcess, job_script, wait_for

pytestmark = pytest.mark.integration

HEAVY = ("trio", "httpx", "httpcore", "pydantic", "pydantic_core", "fastapi", "hypercorn")
NEEDLESS = ("http.client", "email", "ssl", "dataclasses", "typing", "inspect", "rich")
"""What the plain commands do without: the modules and the packages they name."""

#: Runs the entry point with the given words; writes the heavy and needless modules
#: imported (a package for any of its modules) to argv[1].
WRAPPER = f"""
import json, sys
out, sys.argv = sys.argv[1], ["nodeagent", *sys.argv[2:]]
try:
    from nodeagent.cli._main import main
    main(end=sys.exit)
finally:
    names = {{*sys.modules, *(m.partition(".")[0] for m in sys.modules)}}
    with open(out, "w") as f:
        json.dump(
            {{
                "heavy": sorted(set({HEAVY!r}) & names),
                "needless": sorted(set({NEEDLESS!r}) & names),
            }},
            f,
        )
"""


class DefragDaemon(DaemonProcess):
    """``nodeagent defrag run`` reporting to ``master``; use as a context manager."""

    command = ("defrag", "run")
    info_name = "defrag.json"

    def __init__(self, root: Path, master: MasterProcess) -> None:
        super().__init__()
        self.root = root
        (root / "state").mkdir(parents=True, exist_ok=True)
        self.key_file = root / "state" / "pool.key"
        self.key_file.write_bytes(master.key_file.read_bytes())
        self.key_file.chmod(0o600)
        token = root / "daemon.token"
        token.write_text(master.token("DAEMON", subject="defrag", node="defrag-main"))
        self.config_path = root / "defrag.toml"
        self.config_path.write_text(
            f'state_dir = "{root / "state"}"\nruntime_dir = "{root / "run"}"\n'
            f'listen = ["127.0.0.1:0"]\nmaster_url = "{master.url}"\ntoken_file = "{token}"\n'
        )
        self.socket = root / "run" / "defrag.sock"
        self.log_path = root / "defrag.log"


@dataclass(frozen=True, kw_only=True)
class Pool:
    agent: AgentProcess
    master: MasterProcess
    defrag: DefragDaemon
    tmp: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    tmp = tmp_path_factory.mktemp("cli-startup")
    with (
        AgentProcess(tmp / "agent") as agent,
        MasterProcess(tmp / "master") as master,
        DefragDaemon(tmp / "defrag", master) as defrag,
    ):
        argv, record = job_script(tmp, "job")
        agent.claim(argv, cpus=2)
        wait_for(lambda: Path(f"{record}.started").exists())
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NODEAGENT_", "_NODE"))}
        env |= {
            "NODEAGENT_SOCKET": str(agent.socket),
            "NODEAGENT_CONFIG": str(agent.config_path),
            "NODEAGENT_MASTER_SOCKET": str(master.socket),
        }
        yield Pool(agent=agent, master=master, defrag=defrag, tmp=tmp, env=env)


def light(pool: Pool, *args: str, status: int = 0, stdin: str = "", lean: bool = False) -> str:
    """Run ``nodeagent ARGS``; check its exit status and that it imported nothing heavy
    (and with ``lean``, nothing :data:`NEEDLESS` either).

    Returns its stdout."""
    out = pool.tmp / "imported.json"
    out.unlink(missing_ok=True)
    result = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(out), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=pool.env,
        check=False,
    )
    assert result.returncode == status, (args, result.stdout, result.stderr)
    imported = json.loads(out.read_text())
    assert imported["heavy"] == [], (args, result.stderr)
    if lean:
        assert imported["needless"] == [], (args, result.stderr)
    return result.stdout


def lean(pool: Pool, *args: str, status: int = 0) -> str:
    """:func:`light`, importing nothing :data:`NEEDLESS` either."""
    return light(pool, *args, status=status, lean=True)


def claim_id(pool: Pool) -> str:
    """A new claim running a job (the harness ends it with the agent)."""
    argv, _ = job_script(pool.tmp, "claimed")
    body: dict[str, Any] = pool.agent.claim(argv, cpus=1)
    return str(body["id"])


@pytest.mark.parametrize(
    "args",
    [
        ("version",),
        ("--help",),
        ("drain", "--help"),
        ("master", "--help"),
        ("master", "schedule", "--help"),
        ("defrag", "--help"),
        ("status",),
        ("status", "--json"),
        ("ad",),
        ("ad", "-l"),
        ("ad", "--json"),
        ("cancel",),
        ("master", "status"),
        ("master", "status", "--json"),
        ("master", "plan"),
        ("master", "plan", "--json"),
        ("master", "plan", "--all"),
        ("master", "schedule", "get"),
        ("master", "ads"),
        ("master", "ads", "-l"),
    ],
    ids=" ".join,
)
def test_read_only_commands(pool: Pool, args: tuple[str, ...]) -> None:
    assert light(pool, *args)


@pytest.mark.parametrize(
    "args",
    [
        ("version",),
        ("status",),
        ("status", "--json"),
        ("master", "status"),
        ("master", "status", "--json"),
        ("master", "plan"),
        ("master", "plan", "--json"),
        ("master", "events"),
        ("master", "events", "--json"),
        ("master", "notices"),
        ("master", "notices", "--json"),
        ("cancel",),
        ("cancel", "--json"),
    ],
    ids=" ".join,
)
def test_the_commands_typed_most_import_only_what_one_request_needs(
    pool: Pool, args: tuple[str, ...]
) -> None:
    assert lean(pool, *args)


def test_over_http_too(pool: Pool) -> None:
    """The same commands over ``http://`` (TCP, a token): no ``ssl`` either."""
    agent_token, master_token = pool.tmp / "agent.token", pool.tmp / "master.token"
    agent_token.write_text(pool.agent.token("ADMINISTRATOR"))
    master_token.write_text(pool.master.token("ADMINISTRATOR"))
    agent = ("--host", pool.agent.url, "--token", str(agent_token))
    master = ("--host", pool.master.url, "--token", str(master_token))
    assert json.loads(lean(pool, "status", "--json", *agent))["machine"]
    assert "Start=" in lean(pool, "status", *agent)
    assert "Drain committed" in lean(pool, "drain", "--graceful", "--yes", *agent)
    assert "cancelled drain request" in lean(pool, "cancel", *agent)
    assert lean(pool, "master", "status", *master)
    assert lean(pool, "master", "plan", *master)
    lean(pool, "status", "--host", "http://127.0.0.1:1", "--token", str(agent_token), status=3)


def test_drain_and_cancel(pool: Pool) -> None:
    assert "Drain committed" in lean(pool, "drain", "--graceful", "--yes")
    assert "cancelled drain request" in lean(pool, "cancel")
    assert "Drain estimate" in light(pool, "drain", "--dry-run")
    light(pool, "drain", stdin="n\n", status=6)
    assert json.loads(light(pool, "cancel", "--json"))["state"] == "none"


def test_claim_suspend_continue_release(pool: Pool) -> None:
    sleep = shutil.which("sleep") or "/bin/sleep"
    created = json.loads(lean(pool, "claim", "--json", "--", sleep, "600"))
    pool.agent.job_pids.add(created["job"]["pid"])
    assert "created claim" in lean(pool, "claim", "--", sleep, "600")
    given = claim_id(pool)
    assert "suspended claim" in light(pool, "suspend", given)
    assert "continued claim" in light(pool, "continue", given)
    assert "releasing claim" in lean(pool, "release", given)
    lean(pool, "release", created["id"])
    lean(pool, "release", "no-such-claim", status=1)


def test_a_plan_of_one_window_streams_light_and_a_window_not_scheduled_is_said(
    pool: Pool,
) -> None:
    """``plan --all --window`` goes over the light transport, and a start no window has
    (here: nothing is scheduled) exits 1, printing nothing on stdout (the master's
    message goes to stderr: tests/nodeagent/master/test_plan_view.py words it)."""
    assert light(pool, "master", "plan", "--all", "--window", "1800000000", status=1) == ""


def test_token_create(pool: Pool) -> None:
    """The default pool key is the agent's (from NODEAGENT_CONFIG), without pydantic."""
    token = light(pool, "token", "create", "--scope", "read", "--subject", "ci", "--lifetime", "1h")
    with pool.agent.client(token.strip()) as client:
        assert client.get("/v1/ad").status_code == 200


def test_the_schedule_and_machines(pool: Pool) -> None:
    schedule = pool.tmp / "schedule.json"
    ns = 1_000_000_000
    window = {
        "machine_ids": [{"hostname": "spare.test", "ip": "10.9.0.1"}],
        "unavailability": {"start": {"nanoseconds": 2_000_000_000 * ns}},
    }
    schedule.write_text(json.dumps({"windows": [window]}))
    assert "schedule replaced" in light(pool, "master", "schedule", "set", "--yes", str(schedule))
    downed = light(pool, "master", "down", "--yes", "spare.test", status=10)  # no agent: pending
    assert "DOWN: spare.test/10.9.0.1" in downed
    assert "DOWN" in light(pool, "master", "status")
    assert "UP: spare.test/10.9.0.1" in light(pool, "master", "up", "spare.test")
    assert "schedule cleared" in light(pool, "master", "schedule", "clear")


def test_defrag_status(pool: Pool) -> None:
    config = str(pool.defrag.config_path)
    assert "drains started" in light(pool, "defrag", "status", "-c", config)
    assert "WholeMachines" in light(pool, "defrag", "status", "-c", config, "--json")
    assert "MyType" in light(pool, "defrag", "status", "--socket", str(pool.defrag.socket), "-l")


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (("status", "--socket", "/nonexistent.sock"), 3),
        (("master", "status", "--host", "ftp://x"), 2),
        (("defrag", "status", "-c", "/nonexistent.toml"), 2),
        (("drain", "--deadline", "5x", "--yes"), 2),
        (("claim", "--cpus", "0", "--", "true"), 2),
        (("bogus",), 2),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v),
)
def test_failures(pool: Pool, args: tuple[str, ...], status: int) -> None:
    light(pool, *args, status=status)
