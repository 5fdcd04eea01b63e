"""The ``[hooks.NAME]`` and ``[health]`` tables: what loads, what is refused and why."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from nodeagent._settings import ConfigError, reloadable_changes
from nodeagent.agent._config import AgentConfig, check_hook_users, load_agent_config
from nodeagent.agent._daemon import check_config, machine_policy
from nodeagent.agent._hooks import health_spec, hook_specs
from slots import HealthPolicy

GOOD = """
[hooks.reboot]
command = ["/usr/bin/systemctl", "reboot"]
reboots = true
timeout = "15m"

[hooks."fw-2.1"]
command = ["update-firmware", "--yes"]
environment = { REPO = "https://repo.example.org", EMPTY = "" }

[health]
command = ["/usr/local/sbin/node-health-check", "--quick"]
timeout = "2m"
interval = "30s"
passes = 3
"""


def load(tmp_path: Path, text: str) -> AgentConfig:
    path = tmp_path / "nodeagent.toml"
    path.write_text(text)
    return load_agent_config(
        path, {"HOME": str(tmp_path)}, uid=1000, default_path=tmp_path / "absent.toml"
    )


def test_hooks_and_health_load_as_the_agent_runs_them(tmp_path: Path) -> None:
    config = load(tmp_path, GOOD)
    specs = hook_specs(config)
    assert sorted(specs) == ["fw-2.1", "reboot"]
    reboot = specs["reboot"]
    assert (reboot.command, reboot.timeout, reboot.reboots) == (
        ("/usr/bin/systemctl", "reboot"),
        900.0,
        True,
    )
    firmware = specs["fw-2.1"]
    assert (firmware.timeout, firmware.reboots, firmware.user) == (3600.0, False, None)
    assert firmware.environment == {"REPO": "https://repo.example.org", "EMPTY": ""}
    health = health_spec(config)
    assert health is not None
    assert (health.command, health.timeout, health.interval, health.passes) == (
        ("/usr/local/sbin/node-health-check", "--quick"),
        120.0,
        30.0,
        3,
    )
    policy = machine_policy(config)
    assert policy.hooks == frozenset({"reboot", "fw-2.1"})
    assert policy.health == HealthPolicy(passes=3, interval=30.0)


def test_no_tables_no_hooks_and_no_health_check(tmp_path: Path) -> None:
    config = load(tmp_path, "")
    assert (config.hooks, config.health) == ({}, None)
    assert machine_policy(config).health is None
    assert config.boot_id_file == Path("/proc/sys/kernel/random/boot_id")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '[hooks.reboot]\ncommand = "systemctl reboot"\n',
            "hooks.reboot.command: must be a list of arguments (argv), not a shell string",
        ),
        ("[hooks.reboot]\ncommand = []\n", "hooks.reboot.command: "),
        ('[hooks.reboot]\ncommand = [""]\n', "hooks.reboot.command.0: "),
        ('[hooks.reboot]\ncommand = ["x\\u0000y"]\n', "must not hold a NUL byte"),
        ("[hooks.reboot]\ntimeout = 5\n", "hooks.reboot.command: Field required"),
        ('[hooks.reboot]\ncommand = ["x"]\ntimeout = 0\n', "hooks.reboot.timeout: "),
        ('[hooks.reboot]\ncommand = ["x"]\ntimeout = "soon"\n', "hooks.reboot.timeout: "),
        ('[hooks.reboot]\ncommand = ["x"]\nshell = true\n', "hooks.reboot.shell: unknown setting"),
        ('[hooks."a b"]\ncommand = ["x"]\n', "'a b' is not a hook name"),
        ('[hooks."-x"]\ncommand = ["x"]\n', "'-x' is not a hook name"),
        ('[hooks.x]\ncommand = ["x"]\nenvironment = { "A=B" = "1" }\n', "is not an environment"),
        ('[hooks.x]\ncommand = ["x"]\nuser = ""\n', "is not a user name"),
        ('[health]\ncommand = "true"\n', "health.command: must be a list of arguments"),
        ('[health]\ncommand = ["true"]\npasses = 0\n', "health.passes: "),
        ('[health]\ncommand = ["true"]\ninterval = 0\n', "health.interval: "),
        ('[health]\ncommand = ["true"]\ntimeout = -1\n', "health.timeout: "),
    ],
)
def test_a_bad_table_is_refused_with_the_key_named(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text)
    assert any(problem in line for line in e.value.problems), e.value.problems


def _other_user() -> str:
    me = os.geteuid()
    for entry in pwd.getpwall():
        if entry.pw_uid != me:
            return entry.pw_name
    pytest.skip("no other user on this host")


def test_a_hook_user_needs_root_unless_it_is_the_agents_own(tmp_path: Path) -> None:
    own = pwd.getpwuid(os.geteuid()).pw_name
    other = _other_user()
    mine = load(tmp_path, f'[hooks.x]\ncommand = ["x"]\nuser = "{own}"\n')
    check_hook_users(mine, os.geteuid())
    theirs = load(tmp_path, f'[hooks.x]\ncommand = ["x"]\nuser = "{other}"\n')
    check_hook_users(theirs, 0)  # root may switch to anyone
    if os.geteuid() != 0:
        with pytest.raises(ConfigError, match=r"hooks\.x\.user: running a hook as .* needs"):
            check_hook_users(theirs, os.geteuid())
        with pytest.raises(ConfigError, match="needs an agent running as root"):
            check_config(theirs)


def test_a_hook_user_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    config = load(tmp_path, '[hooks.x]\ncommand = ["x"]\nuser = "no-such-user-here"\n')
    with pytest.raises(ConfigError, match=r"hooks\.x\.user: no such user 'no-such-user-here'"):
        check_hook_users(config, 0)


def test_hooks_and_health_are_reloadable(tmp_path: Path) -> None:
    before = load(tmp_path, "")
    after = load(tmp_path, GOOD)
    changes = reloadable_changes(before, after)
    assert set(changes.applied) == {"hooks", "health"}
    assert changes.ignored == ()
    moved = load(tmp_path, 'boot_id_file = "/tmp/boot"\n')
    assert reloadable_changes(before, moved).ignored == ("boot_id_file",)


def test_the_references_name_every_hook_and_health_attribute_and_key() -> None:
    from slots import Machine, MachinePolicy, OnCompletion, Resources, Schedule

    docs = Path(__file__).parents[3] / "docs"
    m = Machine(
        host="h",
        total=Resources(cpus=1),
        policy=MachinePolicy(
            hooks=frozenset({"x"}), hook_durations=(("x", 30.0),), health=HealthPolicy()
        ),
        now=0.0,
    )
    m.start_draining(1.0, schedule=Schedule.FAST, on_completion=OnCompletion.HOOK, hook="x")
    m.commit_draining(1.0, "1")
    m.hook_started(2.0, "1", pid=9, process_start=2.0, boot_id="b", reboots=False, timeout=9)
    m.hook_ended(3.0, "1", exit_status=1, output="out")
    m.cancel_draining(4.0)
    m.health_result(5.0, passed=False, message="exit status 1", output="bad")
    names = {n for n in m.ad(6.0)["machine"] if n.startswith(("DrainHook", "Health"))}
    assert len(names) == 21
    text = (docs / "attributes.md").read_text()
    assert sorted(n for n in names if f"`{n}`" not in text) == []
    configuration = (docs / "configuration.md").read_text()
    keys = ("command", "timeout", "reboots", "user", "environment", "expected_duration")
    for key in (*keys, "interval", "passes"):
        assert f"| `{key}` |" in configuration
