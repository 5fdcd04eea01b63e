"""The command line's pure parts: durations, the default socket, targets, error mapping,
and the human rendering. (The entry point's parser: test_cli_parser.py.)"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import UTC, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from nodeagent import _durations, _paths
from nodeagent._auth import Scope, create_token, generate_key
from nodeagent._durations import parse_duration
from nodeagent._paths import default_socket
from nodeagent._settings import ConfigError
from nodeagent.agent import _config
from nodeagent.cli._common import duration
from nodeagent.cli._errors import AgentError, AgentFailed, Refused, Unauthorized, UsageError
from nodeagent.cli._http import Reply, Target, check, resolve_target
from nodeagent.cli._join import master_urls
from nodeagent.cli._locate import (
    agent_key_file,
    defrag_socket,
    master_advertise_url,
    master_key_file,
    master_listen,
)
from nodeagent.cli._render import (
    format_core_hours,
    format_duration,
    format_local_time,
    format_relative,
    progress_line,
    render_drain,
    render_status,
)
from nodeagent.defrag._config import load_defrag_config

# --- durations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("90", 90.0),
        ("0.5", 0.5),
        (" 2H ", 7200.0),
        ("0s", 0.0),
    ],
)
def test_durations_accept_units(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "5x", "-3s", "15m2h", "2 h", "1h1h", "inf", "nan"])
def test_bad_durations_are_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"invalid duration .*") as info:
        parse_duration(text)
    if not text.startswith("-"):
        assert "90s, 15m, 2h" in str(info.value)


def test_the_command_line_reads_durations_with_the_configurations_parser() -> None:
    assert duration("--deadline", "1h30m") == parse_duration("1h30m") == 5400.0
    assert duration("--deadline", None) is None
    with pytest.raises(UsageError) as info:
        duration("--deadline", "5x")
    assert info.value.code == "cli.bad_duration"
    with pytest.raises(ValueError, match=r"invalid duration") as parsed:
        _durations.parse_duration("5x")
    assert info.value.message == f"--deadline: {parsed.value}"
    with pytest.raises(UsageError, match="not whole seconds"):
        duration("--vacate", "1.5", whole=True)


# --- the default socket -------------------------------------------------------------------

ENVS: list[dict[str, str]] = [
    {"HOME": "/home/u"},
    {"XDG_RUNTIME_DIR": "/run/user/1000"},
    {"RUNTIME_DIRECTORY": "/run/nodeagent-unit:/run/other", "XDG_RUNTIME_DIR": "/x"},
    {"NODEAGENT_RUNTIME_DIR": "/srv/run"},
    {"NODEAGENT_SOCKET": "/srv/agent.sock", "NODEAGENT_RUNTIME_DIR": "/srv/run"},
    {"nodeagent_socket": "/srv/lower.sock"},
]


@pytest.mark.parametrize("uid", [0, 1000])
@pytest.mark.parametrize("env", ENVS)
def test_without_options_the_target_is_the_daemons_socket(env: dict[str, str], uid: int) -> None:
    target = resolve_target(host=None, token_file=None, socket_path=None, env=env, uid=uid)
    assert target == Target(unix=_paths.default_socket(env, uid))


@pytest.mark.parametrize("uid", [0, 1000])
@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize(
    "toml",
    [
        None,
        'runtime_dir = "/from/file"',
        'socket = "/file/agent.sock"\nruntime_dir = "/from/file"',
        'hostname = "n1"\n[policy]\nstart = "true"',
    ],
)
def test_default_socket_is_where_the_daemon_listens(
    env: dict[str, str], uid: int, toml: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "nodeagent.toml"
    if toml is not None:
        path.write_text(toml + "\n")
    daemon = _config.load_agent_config(None, env, uid=uid, default_path=path)
    assert default_socket(env, uid, config_path=path) == daemon.socket


def test_default_socket_reads_the_file_named_by_nodeagent_config(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('runtime_dir = "/elsewhere"\n')
    env = {"NODEAGENT_CONFIG": str(path)}
    assert default_socket(env, 1000) == Path("/elsewhere/nodeagent.sock")
    assert _config.load_agent_config(path, env, uid=1000).socket == default_socket(env, 1000)


def test_an_unreadable_configuration_falls_back_to_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("socket = [unterminated\n")
    assert default_socket({}, 1000, config_path=path) == Path("/tmp/nodeagent-1000/nodeagent.sock")


# --- what a command reads from a daemon's configuration -----------------------------------

DEFRAG_ENVS: list[dict[str, str]] = [
    {"HOME": "/home/u"},
    {"XDG_RUNTIME_DIR": "/run/user/1000"},
    {"RUNTIME_DIRECTORY": "/run/unit:/run/other"},
    {"NODEAGENT_RUNTIME_DIR": "/srv/run"},
    {"nodeagent_runtime_dir": "/srv/lower"},
]


@pytest.mark.parametrize("uid", [0, 1000])
@pytest.mark.parametrize("env", DEFRAG_ENVS)
@pytest.mark.parametrize("toml", [None, "", 'runtime_dir = "/from/file"\ninterval = 60'])
def test_defrag_socket_is_where_the_defrag_daemon_listens(
    env: dict[str, str], uid: int, toml: str | None, tmp_path: Path
) -> None:
    config = None
    if toml is not None:
        config = tmp_path / "defrag.toml"
        config.write_text(toml + "\n")
    daemon = load_defrag_config(config, env, uid=uid)
    assert defrag_socket(config, env, uid) == daemon.runtime_dir / "defrag.sock"


AGENT_ENVS: list[dict[str, str]] = [
    {"HOME": "/home/u"},
    {"XDG_STATE_HOME": "/xdg/state"},
    {"STATE_DIRECTORY": "/var/lib/unit:/var/lib/other"},
    {"NODEAGENT_STATE_DIR": "/srv/state"},
    {"NODEAGENT_KEY_FILE": "/srv/pool.key", "NODEAGENT_STATE_DIR": "/srv/state"},
    {"nodeagent_key_file": "/srv/lower.key"},
]


@pytest.mark.parametrize("uid", [0, 1000])
@pytest.mark.parametrize("env", AGENT_ENVS)
@pytest.mark.parametrize(
    "toml",
    [
        None,
        'state_dir = "/from/file"',
        'key_file = "/file/pool.key"\nstate_dir = "/from/file"',
        'hostname = "n1"\n[policy]\nstart = "true"',
    ],
)
def test_agent_key_file_is_the_daemons(
    env: dict[str, str], uid: int, toml: str | None, tmp_path: Path
) -> None:
    env = dict(env)
    if toml is not None:
        config = tmp_path / "nodeagent.toml"
        config.write_text(toml + "\n")
        env["NODEAGENT_CONFIG"] = str(config)
    daemon = _config.load_agent_config(None if toml is None else config, env, uid=uid)
    assert agent_key_file(env, uid) == daemon.key_file


@pytest.mark.parametrize("uid", [0, 1000])
@pytest.mark.parametrize("env", AGENT_ENVS)
@pytest.mark.parametrize(
    "toml",
    [
        None,
        'state_dir = "/from/file"',
        'key_file = "/file/pool.key"\nstate_dir = "/from/file"\nlisten = ["10.0.0.5:9622"]',
        'listen = ["0.0.0.0:9622"]\nadvertise_url = "https://m1.example:9622"',
    ],
)
def test_master_key_file_and_listen_are_the_masters(
    env: dict[str, str], uid: int, toml: str | None, tmp_path: Path
) -> None:
    from nodeagent.master._config import load_master_config

    env = dict(env)
    config = None
    if toml is not None:
        config = tmp_path / "master.toml"
        config.write_text(toml + "\n")
        env["NODEAGENT_MASTER_CONFIG"] = str(config)
    daemon = load_master_config(config, env, uid=uid, default_path=tmp_path / "none.toml")
    assert master_key_file(env, uid) == daemon.key_file
    assert master_listen(env) == tuple(daemon.listen)
    assert master_advertise_url(env) == daemon.advertise_url


@pytest.mark.parametrize(
    ("given", "listen", "advertised", "urls"),
    [
        (None, ("10.0.0.5:9622",), None, ["http://10.0.0.5:9622"]),
        (None, ("127.0.0.1:9622", "master.example:9622"), None, ["http://master.example:9622"]),
        ("m1:9622, https://m2:9622/", None, None, ["http://m1:9622", "https://m2:9622"]),
        (None, ("0.0.0.0:9622",), "https://m1.example:9622/", ["https://m1.example:9622"]),
        (None, ("10.0.0.5:9622",), "http://127.0.0.1:9622", ["http://10.0.0.5:9622"]),
        ("m2:9622", ("10.0.0.5:9622",), "https://m1.example:9622", ["http://m2:9622"]),
        (None, ("127.0.0.1:9622",), None, "cli.master_url"),
        (None, ("0.0.0.0:9622",), "http://localhost:9622", "cli.master_url"),
        (None, None, None, "cli.master_url"),
        ("ftp://m1", None, None, "cli.bad_url"),
    ],
)
def test_the_masters_urls_a_node_is_given(
    given: str | None, listen: tuple[str, ...] | None, advertised: str | None, urls: list[str] | str
) -> None:
    if isinstance(urls, str):
        with pytest.raises(UsageError) as refused:
            master_urls(given, listen, advertised)
        assert refused.value.code == urls
    else:
        assert master_urls(given, listen, advertised) == urls


def test_a_configuration_the_daemon_would_refuse_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    broken = tmp_path / "broken.toml"
    broken.write_text("runtime_dir = [unterminated\n")
    for config in (missing, broken):
        with pytest.raises(ConfigError) as daemon:
            load_defrag_config(config, {})
        with pytest.raises(UsageError) as cli:
            defrag_socket(config, {}, 1000)
        assert (cli.value.code, cli.value.message) == ("cli.config", str(daemon.value))
        with pytest.raises(UsageError) as key:
            agent_key_file({"NODEAGENT_CONFIG": str(config)}, 1000)
        assert key.value.code == "cli.config"


# --- targets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("node1", ("http", "node1", 9621, "")),
        ("node1:8000", ("http", "node1", 8000, "")),
        ("http://10.0.0.1:9000", ("http", "10.0.0.1", 9000, "")),
        ("https://node1.example/agent/", ("https", "node1.example", 9621, "/agent")),
        ("[::1]:9621", ("http", "::1", 9621, "")),
    ],
)
def test_host_forms(host: str, expected: tuple[str, str, int, str]) -> None:
    t = resolve_target(host=host, token_file=None, socket_path=None, env={}, uid=1000)
    assert (t.scheme, t.host, t.port, t.base_path) == expected
    assert t.unix is None


@pytest.mark.parametrize("host", ["ftp://node1", "http://", "node1:notaport", "http://u@h:1"])
def test_bad_hosts_are_usage_errors(host: str) -> None:
    with pytest.raises(UsageError) as info:
        resolve_target(host=host, token_file=None, socket_path=None, env={}, uid=1000)
    assert info.value.code == "cli.bad_url"
    assert info.value.exit_status == 2


def test_options_fall_back_to_their_variables(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc.def.ghi\n")
    env = {"NODEAGENT_HOST": "node9:1234", "NODEAGENT_TOKEN_FILE": str(token)}
    t = resolve_target(host=None, token_file=None, socket_path=None, env=env, uid=1000)
    assert (t.host, t.port, t.token) == ("node9", 1234, "abc.def.ghi")
    t = resolve_target(host="other", token_file=None, socket_path=None, env=env, uid=1000)
    assert t.host == "other"
    t = resolve_target(
        host=None, token_file=None, socket_path=None, env={"NODEAGENT_SOCKET": "/s"}, uid=1000
    )
    assert t == Target(unix=Path("/s"))
    t = resolve_target(host=None, token_file=None, socket_path="/given", env={}, uid=1000)
    assert t.unix == Path("/given")


@pytest.mark.parametrize("content", [None, "", "two tokens"])
def test_unusable_token_files_are_usage_errors(content: str | None, tmp_path: Path) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError) as info:
        resolve_target(host="h", token_file=str(path), socket_path=None, env={}, uid=1000)
    assert info.value.code == "cli.token_file"


def test_a_token_given_for_its_file_is_refused_without_being_shown(tmp_path: Path) -> None:
    key = generate_key(tmp_path / "pool.key")
    token = create_token(key, subject="ops", scope=Scope.ADMINISTRATOR, lifetime_s=60, now=0.0)
    with pytest.raises(UsageError) as info:
        resolve_target(host="h", token_file=token, socket_path=None, env={}, uid=1000)
    assert info.value.code == "cli.token_file"
    assert "is a token itself" in str(info.value)
    assert token not in str(info.value)
    for part in token.split("."):
        assert part not in str(info.value)


# --- replies to errors --------------------------------------------------------------------


def _reply(status: int, body: Any) -> Reply:
    text = json.dumps(body)
    return Reply(status=status, text=text, data=body, content_type="application/json")


@pytest.mark.parametrize(
    ("status", "cls", "exit_status"),
    [
        (409, Refused, 1),
        (404, Refused, 1),
        (422, Refused, 1),
        (401, Unauthorized, 4),
        (403, Unauthorized, 4),
        (500, AgentFailed, 5),
        (503, AgentFailed, 5),
    ],
)
def test_error_replies_map_to_exit_statuses(
    status: int, cls: type[AgentError], exit_status: int
) -> None:
    body = {"error": {"code": "drain.in_progress", "message": "busy", "condor_code": 10001}}
    with pytest.raises(cls) as info:
        check(_reply(status, body))
    assert info.value.exit_status == exit_status
    assert (info.value.code, info.value.message) == ("drain.in_progress", "busy")
    assert info.value.condor_code == 10001


def test_a_reply_without_the_error_shape_still_has_a_code() -> None:
    with pytest.raises(AgentFailed) as info:
        check(Reply(status=502, text="Bad Gateway\n", content_type="text/plain"))
    assert (info.value.code, info.value.message) == ("agent.error", "HTTP 502: Bad Gateway")
    assert check(_reply(201, {"id": "1"})).data == {"id": "1"}


# --- the entry point ---------------------------------------------------------------------


def test_the_hot_path_imports_no_heavy_stack(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.argv = ['nodeagent', 'status', '--json', '--socket', sys.argv[1]]\n"
        "from nodeagent.cli import _main\n"
        "try:\n"
        "    _main.main(end=sys.exit)\n"
        "except SystemExit as exc:\n"
        "    print(exc.code)\n"
        "heavy = ('pydantic', 'httpx', 'httpcore', 'trio', 'fastapi', 'rich', 'jwt', 'psutil',\n"
        "         'slots', 'nodeagent._settings', 'nodeagent._auth', 'typer',\n"
        "         'nodeagent.cli._app')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "no.sock")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("_NODEAGENT")},
    )
    assert result.stdout.splitlines() == ["3", "[]"], result.stderr
    assert result.stderr.startswith("agent.unreachable: ")


# --- rendering ----------------------------------------------------------------------------

NOW = 1_800_000_000  # 2027-01-15 08:00:00 UTC


def _text(render: Any, *args: Any, **kwargs: Any) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None, force_terminal=False)
    render(console, *args, **kwargs)
    return out.getvalue()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.4, "0s"),
        (45, "45s"),
        (59.6, "1m"),
        (90, "1m30s"),
        (125, "2m05s"),
        (2520, "42m"),
        (3600, "1h"),
        (3900, "1h05m"),
        (86400 + 3 * 3600, "1d3h"),
        (-5, "0s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_relative_and_local_times() -> None:
    assert format_relative(NOW + 2520, NOW) == "in 42m"
    assert format_relative(NOW - 180, NOW) == "3m ago"
    assert format_relative(NOW + 0.2, NOW) == "now"
    assert format_local_time(NOW + 60, NOW, UTC) == "08:01:00 UTC"
    assert format_local_time(NOW + 86400, NOW, UTC) == "2027-01-16 08:00:00 UTC"
    cet = timezone(timedelta(hours=1), "CET")
    assert format_local_time(NOW, NOW, cet) == "09:00:00 CET"


def test_badput_in_core_hours() -> None:
    assert format_core_hours(4500) == "1.25 core-hours (4500 core-seconds)"
    assert format_core_hours(0) == "0.00 core-hours (0 core-seconds)"


def _blocker(slot: str, *, evict_at: int | None, gone_by: int, activity: str) -> dict[str, Any]:
    return {
        "claim_id": slot[-1],
        "slot": f"slot1_{slot[-1]}@n1",
        "job_id": f"job{slot[-1]}",
        "owner": "alice",
        "cpus": 4,
        "activity": activity,
        "run": 600,
        "retirement_remaining": 2400,
        "vacate": 120,
        "evict_at": evict_at,
        "gone_by": gone_by,
        "accepted_while_draining": False,
    }


PENDING = {
    "id": "7",
    "state": "pending",
    "schedule": "graceful",
    "reason": "kernel update",
    "on_completion": "resume",
    "deadline": 3600.0,
    "start": None,
    "expires_at": NOW + 30.0,
    "deadline_at": None,
    "estimate": {
        "schedule": "graceful",
        "now": NOW,
        "completion": NOW + 2520,
        "badput": 4500,
        "blockers": [
            _blocker("s1", evict_at=NOW + 2400, gone_by=NOW + 2520, activity="Busy"),
            _blocker("s2", evict_at=NOW + 60, gone_by=NOW + 180, activity="Busy"),
        ],
    },
}


def test_drain_summary_shows_completion_badput_and_blockers() -> None:
    text = _text(render_drain, PENDING, heading="Drain estimate", tz=UTC)
    assert "Drain estimate: request 7 pending (graceful, on completion resume)" in text
    assert "completion  08:42:00 UTC (in 42m)" in text
    assert "badput      1.25 core-hours (4500 core-seconds)" in text
    assert "deadline    1h after commit" in text
    assert "expires     08:00:30 UTC (in 30s) unless committed" in text
    rows = [line for line in text.splitlines() if "slot1_" in line]
    assert [row.split()[1] for row in rows] == ["slot1_1@n1", "slot1_2@n1"]
    assert "08:01:00 UTC (in 1m)" in rows[1]


def test_an_empty_node_has_no_blockers_table() -> None:
    body = {**PENDING, "estimate": {**PENDING["estimate"], "blockers": [], "badput": 0}}  # type: ignore[dict-item]
    text = _text(render_drain, body, heading="Drain committed", tz=UTC)
    assert "the node is empty now" in text
    assert "Blockers" not in text


def test_progress_names_busy_slots_next_eviction_and_time_left() -> None:
    body = {**PENDING, "state": "draining"}
    line = progress_line(body, UTC)
    assert line == (
        "request 7 draining · 2 slots busy · next eviction slot1_2@n1 in 1m"
        " · time left 42m (empty by 08:42:00 UTC)"
    )
    vacating = {
        **body,
        "estimate": {
            **PENDING["estimate"],  # type: ignore[dict-item]
            "blockers": [_blocker("s1", evict_at=None, gone_by=NOW + 20, activity="Vacating")],
            "completion": NOW + 20,
        },
    }
    assert progress_line(vacating, UTC) == (
        "request 7 draining · 1 slot busy · 1 being evicted · time left 20s (empty by 08:00:20 UTC)"
    )


def test_status_has_a_machine_line_and_a_slot_table() -> None:
    common = {"MyCurrentTime": NOW, "TotalCpus": 8, "Start": False, "DrainState": "draining"}
    machine = {
        "Name": "n1",
        **common,
        "DrainingRequestId": "7",
        "DrainSchedule": "graceful",
        "DrainReason": "kernel update",
        "ExpectedMachineGracefulDrainingCompletion": NOW + 2520,
        "ExpectedMachineGracefulDrainingBadput": 4500,
    }
    slots = [
        {
            "Name": "slot1@n1",
            "SlotType": "Partitionable",
            "State": "Drained",
            "Activity": "Retiring",
        }
        | {"Cpus": 4, "Memory": 1024},
        {"Name": "slot1_1@n1", "SlotType": "Dynamic", "State": "Claimed", "Activity": "Retiring"}
        | {"Cpus": 4, "Memory": 512, "JobId": "j1", "RemoteOwner": "alice"}
        | {"TotalJobRunTime": 600, "RetirementTimeRemaining": 2400},
    ]
    text = _text(render_status, {"machine": machine, "slots": slots}, tz=UTC)
    lines = text.splitlines()
    assert lines[0] == (
        "n1  Start=false  draining (request 7, graceful, reason 'kernel update')"
        "  cpus 4/8 claimed  1 job"
    )
    assert "empty 08:42:00 UTC (in 42m), badput 1.25 core-hours" in lines[1]
    going = _text(render_status, {"machine": machine | {"ShuttingDown": True}, "slots": slots})
    assert going.splitlines()[0].endswith("1 job  the machine is shutting down")
    header = "Slot State Activity Cpus Mem Job Owner Run Retire in"
    assert lines[2].split() == header.split(" ")
    assert lines[4].split() == [
        "slot1_1@n1", "Claimed", "Retiring", "4", "512", "j1", "alice", "10m", "40m",
    ]  # fmt: skip


def test_an_idle_nodes_drain_now_is_never_in_the_past() -> None:
    # An idle node's estimates were computed at its last ad, 12 s before MyCurrentTime.
    machine = {"Name": "n1", "MyCurrentTime": NOW, "TotalCpus": 8, "Start": True}
    for name in ("Graceful", "Quick", "Fast"):
        machine[f"ExpectedMachine{name}DrainingCompletion"] = NOW - 12
        machine[f"ExpectedMachine{name}DrainingBadput"] = 0
    text = _text(render_status, {"machine": machine, "slots": []}, tz=UTC)
    assert "a drain now: graceful now (0.00 core-h), quick now (0.00 core-h), fast now" in text
    assert "ago" not in text
