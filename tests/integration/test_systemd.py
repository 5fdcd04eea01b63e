"""The systemd units, the tmpfiles.d and sysusers.d snippets and the example configurations.

``systemd-analyze verify`` exits 0 on warnings, so any output on stderr fails a test. The
units name ``/usr/local/bin/nodeagent``, which need not exist where the tests run, and
``verify`` reports a missing executable; so each unit is verified as a copy in which only
that path is replaced by the entry point of the installed package (the test checks that
the replacement happened exactly once, on ``ExecStart=``). Everything else is verified as
shipped.

The tools come with Debian's ``systemd`` package (``scripts/ensure-systemd`` installs it).
Without them the tests skip, except in CI (``$CI`` set), where they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from nodeagent._lifecycle import EXIT_CONFIG, EXIT_STATE, EXIT_STATE_LOST
from nodeagent.agent._config import DEFAULT_AGENT_CONFIG_PATH, load_agent_config
from nodeagent.agent._daemon import RESTART_EXIT_STATUS
from nodeagent.defrag._config import DEFAULT_DEFRAG_CONFIG_PATH, load_defrag_config
from nodeagent.master._config import DEFAULT_MASTER_CONFIG_PATH, load_master_config

pytestmark = pytest.mark.integration

SYSTEMD_DIR = Path(__file__).parents[2] / "systemd"
SHIPPED_EXECUTABLE = "/usr/local/bin/nodeagent"


@dataclass(frozen=True)
class Daemon:
    unit: str
    example: str
    load: Callable[..., BaseModel]
    default_config: Path
    # Highest accepted `systemd-analyze security` exposure (Debian's systemd 252 scores
    # 6.7 for the agent, 1.1 for the others). Newer systemd versions add checks; raise a
    # threshold only together with a reason in the unit.
    max_exposure: float
    # Keys the example sets to something other than the built-in default.
    example_overrides: frozenset[str] = frozenset()


DAEMONS = [
    Daemon(
        "nodeagent.service",
        "nodeagent.toml.example",
        load_agent_config,
        DEFAULT_AGENT_CONFIG_PATH,
        max_exposure=6.8,
    ),
    Daemon(
        "nodeagent-master.service",
        "master.toml.example",
        load_master_config,
        DEFAULT_MASTER_CONFIG_PATH,
        max_exposure=1.2,
    ),
    Daemon(
        "nodeagent-defrag.service",
        "defrag.toml.example",
        load_defrag_config,
        DEFAULT_DEFRAG_CONFIG_PATH,
        max_exposure=1.2,
        example_overrides=frozenset({"master_url"}),
    ),
]
BY_UNIT = pytest.mark.parametrize("daemon", DAEMONS, ids=lambda d: d.unit)


# --- helpers ------------------------------------------------------------------------------


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing in CI: scripts/ensure-systemd should install it")
        pytest.skip(f"{name} is not installed (Debian package systemd; scripts/ensure-systemd)")
    return path


def _run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60, cwd=cwd)


def _unit_settings(path: Path) -> dict[str, list[tuple[str, str]]]:
    """``{section: [(key, value), …]}`` of a unit file, continuation lines joined."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    logical = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith(("#", ";"))):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        line, logical = logical + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
        else:
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: not a setting: {line!r}"
            current.append((key.strip(), value.strip()))
    return sections


def _service(daemon: Daemon) -> dict[str, str]:
    """The [Service] settings of a unit, the last value of each key."""
    return dict(_unit_settings(SYSTEMD_DIR / daemon.unit)["Service"])


def _verifiable_copy(daemon: Daemon, directory: Path) -> Path:
    """The unit with the shipped entry point replaced by the installed one."""
    installed = Path(sys.executable).with_name("nodeagent")
    if not installed.is_file():
        found = shutil.which("nodeagent")
        assert found is not None, "the nodeagent entry point is not installed"
        installed = Path(found)
    text = (SYSTEMD_DIR / daemon.unit).read_text()
    shipped = f"ExecStart={SHIPPED_EXECUTABLE} "
    assert text.count(SHIPPED_EXECUTABLE) == 1, "only ExecStart= names the executable"
    assert text.count(shipped) == 1, f"ExecStart= runs {SHIPPED_EXECUTABLE}"
    copy = directory / daemon.unit
    copy.write_text(text.replace(shipped, f"ExecStart={installed} "))
    return copy


def _flat_keys(value: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for key, item in value.items():
        if isinstance(item, Mapping):
            keys |= _flat_keys(item, f"{prefix}{key}.")
        else:
            keys.add(prefix + key)
    return keys


_COMMENTED_SETTING = re.compile(r"^# ([a-z_]+ = .+)$", re.MULTILINE)


# --- the units ----------------------------------------------------------------------------


@BY_UNIT
def test_unit_verifies_without_any_warning(daemon: Daemon, tmp_path: Path) -> None:
    analyze = _tool("systemd-analyze")
    copy = _verifiable_copy(daemon, tmp_path)
    result = _run(analyze, "verify", "--man=no", str(copy), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    assert result.stdout == "", result.stdout


def test_verify_reports_a_warning_on_stderr_only(tmp_path: Path) -> None:
    """The check above has teeth: a misspelt key warns on stderr and still exits 0."""
    analyze = _tool("systemd-analyze")
    copy = _verifiable_copy(DAEMONS[0], tmp_path)
    copy.write_text(copy.read_text().replace("KillMode=process", "KillMode=process\nKilMode=x"))
    result = _run(analyze, "verify", "--man=no", str(copy), cwd=tmp_path)
    assert result.returncode == 0
    assert "KilMode" in result.stderr


@BY_UNIT
def test_unit_exposure_is_below_its_threshold(daemon: Daemon, tmp_path: Path) -> None:
    analyze = _tool("systemd-analyze")
    copy = _verifiable_copy(daemon, tmp_path)
    result = _run(analyze, "security", "--offline=true", str(copy), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    found = re.search(
        rf"Overall exposure level for {re.escape(daemon.unit)}: (\d+\.\d+)", result.stdout
    )
    assert found is not None, result.stdout
    exposure = float(found.group(1))
    assert exposure <= daemon.max_exposure, result.stdout


@BY_UNIT
def test_unit_lifecycle_contract(daemon: Daemon) -> None:
    service = _service(daemon)
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert service["WatchdogSec"]
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["Restart"] == "on-failure"
    # A configuration or a state the daemon refused at start (and the agent's lost state):
    # restarting cannot fix them.
    refused = {EXIT_CONFIG, EXIT_STATE} | ({EXIT_STATE_LOST} if daemon is DAEMONS[0] else set())
    assert set(service["RestartPreventExitStatus"].split()) == {str(s) for s in refused}


def test_agent_unit_keeps_jobs_and_honours_completion_actions() -> None:
    service = _service(DAEMONS[0])
    # Jobs outlive a stop or restart of the daemon.
    assert service["KillMode"] == "process"
    # `restart` exits 75: a success that is always restarted; `exit` exits 0: a success
    # that Restart=on-failure leaves alone.
    assert service["RestartForceExitStatus"] == str(RESTART_EXIT_STATUS)
    assert service["SuccessExitStatus"] == str(RESTART_EXIT_STATUS)
    # What jobs need from the sandbox they inherit.
    assert service["User"] == "root"
    assert service["NoNewPrivileges"] == "no"
    assert service["PrivateTmp"] == "no"
    assert service["ProtectHome"] == "no"
    assert service["TasksMax"] == "infinity"


@pytest.mark.parametrize("daemon", DAEMONS[1:], ids=lambda d: d.unit)
def test_job_free_units_run_unprivileged(daemon: Daemon) -> None:
    service = _service(daemon)
    assert service["User"] == service["Group"] == "nodeagent"
    assert service["CapabilityBoundingSet"] == ""
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"


# --- configuration as the units run it ---------------------------------------------------


@BY_UNIT
def test_example_is_named_after_the_default_configuration(daemon: Daemon) -> None:
    assert daemon.example == daemon.default_config.name + ".example"
    assert (SYSTEMD_DIR / daemon.example).is_file()


@BY_UNIT
def test_example_loads_and_shows_the_defaults(daemon: Daemon, tmp_path: Path) -> None:
    example = daemon.load(SYSTEMD_DIR / daemon.example, {}, uid=0)
    defaults = daemon.load(None, {}, uid=0, default_path=tmp_path / "absent.toml")
    differing = {
        key for key, value in example.model_dump().items() if value != defaults.model_dump()[key]
    }
    assert differing == set(daemon.example_overrides)


@BY_UNIT
def test_commented_example_settings_are_valid_and_complete(daemon: Daemon, tmp_path: Path) -> None:
    """Uncommenting every ``# key = value`` line still loads, and every key appears."""
    text = (SYSTEMD_DIR / daemon.example).read_text()
    uncommented = tmp_path / daemon.example
    uncommented.write_text(_COMMENTED_SETTING.sub(r"\1", text))
    config = daemon.load(uncommented, {}, uid=0)
    written = _flat_keys(tomllib.loads(uncommented.read_text()))
    assert written == _flat_keys(config.model_dump())


@BY_UNIT
def test_daemon_writes_only_where_its_unit_allows(daemon: Daemon) -> None:
    """With the unit's $STATE_DIRECTORY and $RUNTIME_DIRECTORY, every file the daemon
    writes lies in them: the only writable places under ProtectSystem=strict."""
    service = _service(daemon)
    state = Path("/var/lib") / service["StateDirectory"]
    runtime = Path("/run") / service["RuntimeDirectory"]
    env = {"STATE_DIRECTORY": str(state), "RUNTIME_DIRECTORY": str(runtime)}
    config = daemon.load(SYSTEMD_DIR / daemon.example, env, uid=0).model_dump()
    assert config["state_dir"] == state
    assert config["runtime_dir"] == runtime
    written = ("key_file", "audit_log", "execute_dir", "socket")
    for key in (k for k in written if k in config):
        assert config[key].is_relative_to(state) or config[key].is_relative_to(runtime), key


# --- tmpfiles.d and sysusers.d -----------------------------------------------------------


def test_sysusers_then_tmpfiles_prepare_a_root(tmp_path: Path) -> None:
    sysusers = _tool("systemd-sysusers")
    tmpfiles = _tool("systemd-tmpfiles")
    root = tmp_path / "root"
    (root / "etc" / "nodeagent").mkdir(parents=True)
    master_toml = root / "etc" / "nodeagent" / "master.toml"
    master_toml.write_text("")
    master_toml.chmod(0o644)

    created = _run(sysusers, f"--root={root}", str(SYSTEMD_DIR / "nodeagent.sysusers.conf"))
    assert created.returncode == 0, created.stderr
    assert all(line.startswith("Creating ") for line in created.stderr.splitlines()), created.stderr
    passwd = {
        line.split(":")[0]: line.split(":")
        for line in (root / "etc" / "passwd").read_text().splitlines()
    }
    assert passwd["nodeagent"][6] == "/usr/sbin/nologin"
    uid, gid = int(passwd["nodeagent"][2]), int(passwd["nodeagent"][3])

    applied = _run(
        tmpfiles, f"--root={root}", "--create", str(SYSTEMD_DIR / "nodeagent.tmpfiles.conf")
    )
    assert applied.returncode == 0, applied.stderr
    assert applied.stderr == "", applied.stderr

    def owner_mode(path: Path) -> tuple[int, int, int]:
        st = path.stat()
        return st.st_uid, st.st_gid, st.st_mode & 0o7777

    assert owner_mode(root / "etc" / "nodeagent") == (0, 0, 0o755)
    assert owner_mode(master_toml) == (0, gid, 0o640)
    assert not (root / "etc" / "nodeagent" / "defrag.toml").exists()
    for daemon in DAEMONS:
        # The same directories, owners and modes as the units' StateDirectory= settings.
        service = _service(daemon)
        expected_uid = 0 if service["User"] == "root" else uid
        expected_gid = 0 if service["User"] == "root" else gid
        state = root / "var" / "lib" / service["StateDirectory"]
        assert owner_mode(state) == (
            expected_uid,
            expected_gid,
            int(service["StateDirectoryMode"], 8),
        ), daemon.unit
