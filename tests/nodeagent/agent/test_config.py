"""Loading, validating and reloading the agent's configuration."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import pytest
from pydantic import BaseModel

from nodeagent._durations import parse_duration
from nodeagent._settings import ConfigError, reloadable_changes
from nodeagent.agent._config import (
    AgentConfig,
    MachineResources,
    load_agent_config,
    machine_resources,
)
from nodeagent.agent._daemon import machine_policy
from slots import BeforeWindow

USER = 1000


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def load(
    env: dict[str, str],
    *,
    text: str | None = None,
    tmp_path: Path,
    uid: int = USER,
) -> AgentConfig:
    path = None
    if text is not None:
        path = tmp_path / "nodeagent.toml"
        path.write_text(text)
    return load_agent_config(path, env, uid=uid, default_path=tmp_path / "absent.toml")


# --- durations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90", 90.0),
        ("1.5", 1.5),
        (".5", 0.5),
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1h30m15s", 5415.0),
        ("1d2h", 93600.0),
        ("1.5h", 5400.0),
        (" 15M ", 900.0),
        ("0s", 0.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid duration"),
        ("   ", "invalid duration"),
        ("-5", "negative"),
        ("-5s", "negative"),
        ("abc", "invalid duration"),
        ("5x", "invalid duration"),
        ("5ms", "invalid duration"),
        ("30m1h", "invalid duration"),  # units out of order
        ("1h1h", "invalid duration"),
        ("1h 30m", "invalid duration"),
        ("h", "invalid duration"),
        ("1e3", "invalid duration"),
        ("inf", "invalid duration"),
        ("nan", "invalid duration"),
    ],
)
def test_parse_duration_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


# --- defaults -----------------------------------------------------------------------------


def test_defaults_with_no_file(tmp_path: Path, home: Path) -> None:
    config = load({"HOME": str(home)}, tmp_path=tmp_path)
    state = home / ".local" / "state" / "nodeagent"
    runtime = Path(f"/tmp/nodeagent-{USER}")
    assert config.hostname == socket.getfqdn()
    ipaddress.ip_address(config.ip)
    assert config.state_dir == state
    assert config.runtime_dir == runtime
    assert config.execute_dir == state / "execute"
    assert config.socket == runtime / "nodeagent.sock"
    assert config.key_file == state / "pool.key"
    assert config.audit_log == state / "audit.log"
    assert config.listen == ("127.0.0.1:9621",)
    assert config.tls_cert is None
    assert config.tls_key is None
    assert config.metrics_require_auth is True
    assert (config.resources.cpus, config.resources.memory_mib) == (None, None)
    assert (config.resources.disk_kib, config.resources.gpus) == (None, None)
    assert config.policy.max_job_retirement_time == 0
    assert config.policy.machine_max_vacate_time == 600
    assert config.policy.start == "true"
    assert config.policy.suspended_jobs_on_drain == "keep"
    assert config.policy.transaction_ttl == 30
    assert config.policy.before_window == "refuse"
    assert config.master.url is None
    assert config.master.token_file is None
    assert config.master.update_interval == 60
    assert config.master.ad_debounce == 0.25


@pytest.mark.parametrize(
    ("env", "uid", "state_dir", "runtime_dir"),
    [
        pytest.param(
            {"HOME": "/home/u"},
            USER,
            "/home/u/.local/state/nodeagent",
            f"/tmp/nodeagent-{USER}",
            id="user",
        ),
        pytest.param(
            {"HOME": "/home/u", "XDG_STATE_HOME": "/xs", "XDG_RUNTIME_DIR": "/run/user/1000"},
            USER,
            "/xs/nodeagent",
            "/run/user/1000/nodeagent",
            id="user-xdg",
        ),
        pytest.param(
            {"HOME": "/root", "XDG_STATE_HOME": "/xs", "XDG_RUNTIME_DIR": "/run/user/0"},
            0,
            "/var/lib/nodeagent",
            "/run/nodeagent",
            id="root",
        ),
        pytest.param(
            {
                "HOME": "/root",
                "STATE_DIRECTORY": "/var/lib/na:/var/lib/other",
                "RUNTIME_DIRECTORY": "/run/na",
            },
            0,
            "/var/lib/na",
            "/run/na",
            id="systemd-root",
        ),
        pytest.param(
            {"HOME": "/home/u", "STATE_DIRECTORY": "/s", "RUNTIME_DIRECTORY": "/r"},
            USER,
            "/s",
            "/r",
            id="systemd-user",
        ),
    ],
)
def test_directory_defaults(
    tmp_path: Path, env: dict[str, str], uid: int, state_dir: str, runtime_dir: str
) -> None:
    env = {"NODEAGENT_HOSTNAME": "h", "NODEAGENT_IP": "10.0.0.1", **env}
    config = load(env, tmp_path=tmp_path, uid=uid)
    assert config.state_dir == Path(state_dir)
    assert config.runtime_dir == Path(runtime_dir)
    assert config.execute_dir == Path(state_dir) / "execute"
    assert config.socket == Path(runtime_dir) / "nodeagent.sock"


def test_default_path_is_read_when_present(tmp_path: Path, home: Path) -> None:
    default = tmp_path / "nodeagent.toml"
    default.write_text('hostname = "from-default-file"\n')
    config = load_agent_config(None, {"HOME": str(home)}, uid=USER, default_path=default)
    assert config.hostname == "from-default-file"


def test_explicit_path_must_exist(tmp_path: Path, home: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_agent_config(tmp_path / "missing.toml", {"HOME": str(home)}, uid=USER)
    assert info.value.code == "config.invalid"


def test_explicit_path_must_be_a_file(tmp_path: Path, home: Path) -> None:
    with pytest.raises(ConfigError, match="not a file"):
        load_agent_config(tmp_path, {"HOME": str(home)}, uid=USER)


# --- TOML and environment -----------------------------------------------------------------

FULL = """
hostname = "node7.example.org"
ip = "10.1.2.7"
state_dir = "/srv/na/state"
runtime_dir = "/srv/na/run"
listen = ["0.0.0.0:9000", "[::1]:9001"]
tls_cert = "/etc/na/cert.pem"
tls_key = "/etc/na/key.pem"
metrics_require_auth = false

[resources]
cpus = 8
memory_mib = 16384
disk_kib = 1000000
gpus = 2

[policy]
max_job_retirement_time = "1h30m"
machine_max_vacate_time = 120
start = "Cpus >= 4"
suspended_jobs_on_drain = "evict"
transaction_ttl = "45s"
before_window = "shorten"

[master]
url = "https://master.example.org:9622"
token_file = "/etc/na/master.token"
update_interval = "5m"
ad_debounce = 0.5
"""


def test_toml_values(tmp_path: Path, home: Path) -> None:
    config = load({"HOME": str(home)}, text=FULL, tmp_path=tmp_path)
    assert config.hostname == "node7.example.org"
    assert config.ip == "10.1.2.7"
    assert config.state_dir == Path("/srv/na/state")
    assert config.execute_dir == Path("/srv/na/state/execute")  # derived from the file's value
    assert config.key_file == Path("/srv/na/state/pool.key")
    assert config.socket == Path("/srv/na/run/nodeagent.sock")
    assert config.listen == ("0.0.0.0:9000", "[::1]:9001")
    assert config.tls_cert == Path("/etc/na/cert.pem")
    assert config.metrics_require_auth is False
    assert config.resources.model_dump() == {
        "cpus": 8,
        "memory_mib": 16384,
        "disk_kib": 1000000,
        "gpus": 2,
    }
    assert config.policy.max_job_retirement_time == 5400.0
    assert config.policy.machine_max_vacate_time == 120.0
    assert config.policy.start == "Cpus >= 4"
    assert config.policy.suspended_jobs_on_drain == "evict"
    assert config.policy.transaction_ttl == 45.0
    assert config.policy.before_window == "shorten"
    assert machine_policy(config).before_window is BeforeWindow.SHORTEN
    assert config.master.url == "https://master.example.org:9622"
    assert config.master.token_file == Path("/etc/na/master.token")
    assert config.master.update_interval == 300.0
    assert config.master.ad_debounce == 0.5


def test_explicit_paths_win_over_derived_ones(tmp_path: Path, home: Path) -> None:
    text = 'state_dir = "/a"\nexecute_dir = "/b"\nkey_file = "/k"\n'
    config = load({"HOME": str(home)}, text=text, tmp_path=tmp_path)
    assert config.execute_dir == Path("/b")
    assert config.key_file == Path("/k")
    assert config.audit_log == Path("/a/audit.log")


def test_environment_overrides_the_file(tmp_path: Path, home: Path) -> None:
    env = {
        "HOME": str(home),
        "NODEAGENT_HOSTNAME": "from-env",
        "NODEAGENT_STATE_DIR": "/env/state",
        "NODEAGENT_LISTEN": "[]",
        "NODEAGENT_METRICS_REQUIRE_AUTH": "true",
        "NODEAGENT_POLICY__START": "false",
        "NODEAGENT_POLICY__TRANSACTION_TTL": "2m",
        "nodeagent_resources__cpus": "3",  # names are case-insensitive
        "NODEAGENT_MASTER__URL": "http://m:1",
    }
    config = load(env, text=FULL, tmp_path=tmp_path)
    assert config.hostname == "from-env"
    assert config.ip == "10.1.2.7"  # from the file
    assert config.state_dir == Path("/env/state")
    assert config.execute_dir == Path("/env/state/execute")
    assert config.listen == ()
    assert config.metrics_require_auth is True
    assert config.policy.start == "false"
    assert config.policy.transaction_ttl == 120.0
    assert config.policy.suspended_jobs_on_drain == "evict"  # other keys of the section kept
    assert config.resources.cpus == 3
    assert config.resources.gpus == 2
    assert config.master.url == "http://m:1"
    assert config.master.update_interval == 300.0


def test_unrelated_environment_is_ignored(tmp_path: Path, home: Path) -> None:
    env = {"HOME": str(home), "NODEAGENT_CONFIG": "/x.toml", "PATH": "/bin"}
    assert load(env, tmp_path=tmp_path).hostname == socket.getfqdn()


def test_config_is_immutable(tmp_path: Path, home: Path) -> None:
    config = load({"HOME": str(home)}, tmp_path=tmp_path)
    with pytest.raises(ValueError, match="frozen"):
        config.hostname = "other"


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "env", "fragments"),
    [
        pytest.param('hostnmae = "x"\n', {}, ["hostnmae", "unknown setting"], id="unknown-key"),
        pytest.param(
            "max_job_retirement_time = 600\n",
            {},
            ["max_job_retirement_time: unknown setting (it belongs under [policy])"],
            id="section-key-at-top-level",
        ),
        pytest.param(
            '[policy]\nhostname = "x"\n',
            {},
            ["policy.hostname: unknown setting (it belongs at the top, before any [section])"],
            id="top-level-key-in-a-section",
        ),
        pytest.param(
            "[policy]\nmax_retirement = 5\n",
            {},
            ["policy.max_retirement", "unknown setting"],
            id="unknown-nested-key",
        ),
        pytest.param("[polcy]\nstart = 'x'\n", {}, ["polcy", "unknown"], id="unknown-section"),
        pytest.param(
            None,
            {"NODEAGENT_POLICY__STRAT": "x"},
            ["policy.strat", "NODEAGENT_POLICY__STRAT", "unknown setting"],
            id="unknown-env-key",
        ),
        pytest.param(
            '[policy]\nmachine_max_vacate_time = "-5s"\n',
            {},
            ["policy.machine_max_vacate_time", "negative"],
            id="negative-duration-string",
        ),
        pytest.param(
            "[policy]\nmax_job_retirement_time = -1\n",
            {},
            ["policy.max_job_retirement_time", "greater than or equal to 0"],
            id="negative-duration-number",
        ),
        pytest.param(
            "[policy]\ntransaction_ttl = 0\n",
            {},
            ["policy.transaction_ttl", "greater than 0"],
            id="zero-ttl",
        ),
        pytest.param(
            None,
            {"NODEAGENT_MASTER__UPDATE_INTERVAL": "soon"},
            ["master.update_interval", "NODEAGENT_MASTER__UPDATE_INTERVAL", "invalid duration"],
            id="bad-env-duration",
        ),
        pytest.param(
            "[policy]\ntransaction_ttl = true\n",
            {},
            ["policy.transaction_ttl", "boolean"],
            id="boolean-duration",
        ),
        pytest.param(
            '[policy]\nsuspended_jobs_on_drain = "pause"\n',
            {},
            ["policy.suspended_jobs_on_drain"],
            id="bad-literal",
        ),
        pytest.param(
            '[policy]\nbefore_window = "wait"\n',
            {},
            ["policy.before_window", "'refuse', 'shorten' or 'admit'"],
            id="bad-before-window",
        ),
        pytest.param('listen = ["9621"]\n', {}, ["listen.0", "host:port"], id="bad-listen"),
        pytest.param('listen = ["h:70000"]\n', {}, ["listen.0"], id="bad-port"),
        pytest.param(
            'listen = ["h/x?target=:9621"]\n', {}, ["listen.0", "no scheme, path"], id="listen-path"
        ),
        pytest.param('listen = ["u@h:9621"]\n', {}, ["listen.0"], id="listen-user"),
        pytest.param('ip = "not-an-ip"\n', {}, ["ip"], id="bad-ip"),
        pytest.param('tls_cert = "/c.pem"\n', {}, ["tls_cert and tls_key"], id="tls-half"),
        pytest.param("[resources]\ncpus = 0\n", {}, ["resources.cpus"], id="zero-cpus"),
        pytest.param('[master]\nurl = "ftp://m"\n', {}, ["master.url"], id="bad-url"),
        pytest.param('hostname = "a"\nhostname = "b"\n', {}, ["not valid TOML"], id="bad-toml"),
        pytest.param(
            None,
            {"NODEAGENT_LISTEN": "a:1"},
            ["listen", "NODEAGENT_LISTEN", "JSON"],
            id="env-list-not-json",
        ),
    ],
)
def test_invalid_configuration(
    tmp_path: Path, home: Path, text: str | None, env: dict[str, str], fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        load({"HOME": str(home), **env}, text=text, tmp_path=tmp_path)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_every_problem_is_reported(tmp_path: Path, home: Path) -> None:
    text = 'hostnmae = "x"\n[policy]\ntransaction_ttl = -1\n'
    with pytest.raises(ConfigError) as info:
        load({"HOME": str(home)}, text=text, tmp_path=tmp_path)
    assert len(info.value.problems) == 2
    assert str(tmp_path / "nodeagent.toml") in str(info.value)


# --- reload -------------------------------------------------------------------------------


def _fields_without_reload_flag(model: type[BaseModel], prefix: str = "") -> list[str]:
    missing = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra
        if not isinstance(extra, dict) or not isinstance(extra.get("reloadable"), bool):
            missing.append(prefix + name)
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            missing += _fields_without_reload_flag(annotation, prefix + name + ".")
    return missing


def test_every_field_states_whether_it_reloads() -> None:
    assert _fields_without_reload_flag(AgentConfig) == []


def test_reloadable_changes(tmp_path: Path, home: Path) -> None:
    env = {"HOME": str(home), "NODEAGENT_HOSTNAME": "h", "NODEAGENT_IP": "10.0.0.1"}
    old = load(env, text=FULL, tmp_path=tmp_path)
    new_text = (
        FULL.replace('start = "Cpus >= 4"', 'start = "false"')
        .replace('update_interval = "5m"', 'update_interval = "1m"')
        .replace("cpus = 8", "cpus = 4")
        .replace('runtime_dir = "/srv/na/run"', 'runtime_dir = "/srv/na/run2"')
        .replace("metrics_require_auth = false", "metrics_require_auth = true")
    )
    new = load(env, text=new_text, tmp_path=tmp_path)
    changes = reloadable_changes(old, new)
    assert changes.applied == {
        "master.update_interval": 60.0,
        "metrics_require_auth": True,
        "policy.start": "false",
    }
    assert changes.ignored == ("resources.cpus", "runtime_dir", "socket")


def test_no_changes(tmp_path: Path, home: Path) -> None:
    env = {"HOME": str(home), "NODEAGENT_HOSTNAME": "h", "NODEAGENT_IP": "10.0.0.1"}
    a = load(env, text=FULL, tmp_path=tmp_path)
    b = load(env, text=FULL, tmp_path=tmp_path)
    changes = reloadable_changes(a, b)
    assert dict(changes.applied) == {}
    assert changes.ignored == ()


# --- resources ----------------------------------------------------------------------------


def test_machine_resources_overrides(tmp_path: Path, home: Path) -> None:
    config = load({"HOME": str(home)}, text=FULL, tmp_path=tmp_path)
    assert machine_resources(config) == MachineResources(
        cpus=8, memory_mib=16384, disk_kib=1000000, gpus=2
    )


def test_machine_resources_detected(tmp_path: Path, home: Path) -> None:
    env = {"HOME": str(home), "NODEAGENT_STATE_DIR": str(tmp_path / "not-yet-created")}
    resources = machine_resources(load(env, tmp_path=tmp_path))
    assert resources.cpus >= 1
    assert resources.memory_mib >= 1
    assert resources.disk_kib >= 0
    assert resources.gpus == 0
