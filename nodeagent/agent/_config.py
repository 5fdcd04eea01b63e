"""The agent's configuration (``nodeagent run``)."""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from nodeagent._paths import DEFAULT_AGENT_CONFIG_PATH, default_runtime_dir, default_state_dir
from nodeagent._settings import (
    READ_TIMEOUT,
    ConfigError,
    Duration,
    ListenAddress,
    _as_path,
    _check_ip,
    _check_url,
    _DaemonSettings,
    _field,
    _load_settings,
    _master_urls,
    _Section,
    default_ip,
)
from slots import InvalidRequest, check_hook_name, check_site_attributes

__all__ = [
    "BOOT_ID_FILE",
    "DEFAULT_AGENT_CONFIG_PATH",
    "AgentConfig",
    "HealthConfig",
    "HookConfig",
    "MachineResources",
    "MasterLinkConfig",
    "PolicyConfig",
    "ResourcesConfig",
    "ShutdownConfig",
    "check_hook_users",
    "load_agent_config",
    "machine_resources",
]

#: Where Linux says which boot this is (a new random UUID at every boot).
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


class ResourcesConfig(_Section):
    """``[resources]``: overrides of the detected machine resources (None = detect).

    Not reloadable: the partitionable slot is sized once.
    """

    cpus: int | None = _field(None, reload=False, description="Cpus; default: logical CPUs", ge=1)
    memory_mib: int | None = _field(
        None, reload=False, description="Memory in MiB; default: physical memory", ge=1
    )
    disk_kib: int | None = _field(
        None, reload=False, description="Disk in KiB; default: free space of execute_dir", ge=0
    )
    gpus: int | None = _field(None, reload=False, description="GPUs; default: 0", ge=0)


class PolicyConfig(_Section):
    """``[policy]``: the machine policy (HTCondor's names in the descriptions). Reloadable."""

    max_job_retirement_time: Duration = _field(
        0.0, reload=True, description="MaxJobRetirementTime (seconds)", ge=0
    )
    machine_max_vacate_time: Duration = _field(
        600.0, reload=True, description="MachineMaxVacateTime (seconds)", ge=0
    )
    start: str = _field(
        "true", reload=True, description="START, a ClassAd expression", min_length=1
    )
    suspended_jobs_on_drain: Literal["keep", "evict", "resume"] = _field(
        "keep", reload=True, description="How a drain treats suspended jobs"
    )
    transaction_ttl: Duration = _field(
        30.0, reload=True, description="Lifetime of a pending drain transaction (seconds)", gt=0
    )
    before_window: Literal["refuse", "shorten", "admit"] = _field(
        "refuse",
        reload=True,
        description="A claim whose retirement promise would end after the maintenance "
        "window starts: refuse it, shorten its promise, or admit it",
    )


class MasterLinkConfig(_Section):
    """``[master]``: where this agent pushes its ad. Reloadable (applied at the next push).

    ``url`` names one master; ``urls`` several (masters sharing their state, one of them
    leading), each of which gets every push. One or the other, not both:
    :attr:`masters` is the list either way.
    """

    url: Annotated[str | None, AfterValidator(_check_url)] = _field(
        None, reload=True, description="The master's base URL; none: no master"
    )
    urls: tuple[Annotated[str, AfterValidator(_check_url)], ...] = _field(
        (), reload=True, description="The base URLs of several masters; each gets every push"
    )
    token_file: Path | None = _field(
        None, reload=True, description="File holding the DAEMON token for the masters"
    )
    update_interval: Duration = _field(
        60.0, reload=True, description="Seconds between periodic ad pushes", gt=0
    )
    ad_debounce: Duration = _field(
        0.25, reload=True, description="Delay coalescing state changes into one push", ge=0
    )

    @model_validator(mode="after")
    def _one_or_several(self) -> Self:
        _master_urls(self.url, self.urls, one="url", several="urls")
        return self

    @property
    def masters(self) -> tuple[str, ...]:
        """The masters' base URLs, without a trailing ``/`` (empty: no master)."""
        return _master_urls(self.url, self.urls, one="url", several="urls")


def _argv(value: object) -> object:
    """A command is an argv list; a string would need a shell, which a hook never gets."""
    if isinstance(value, str):
        raise ValueError(  # noqa: TRY004 (pydantic reports ValueError only)
            "must be a list of arguments (argv), not a shell string: write it as "
            '["/usr/sbin/reboot"] or ["/usr/local/sbin/update-firmware", "--yes"]'
        )
    return value


def _argument(value: str) -> str:
    if "\0" in value:
        raise ValueError("an argument must not hold a NUL byte")
    return value


Argv = Annotated[
    list[Annotated[str, Field(min_length=1), AfterValidator(_argument)]],
    BeforeValidator(_argv),
    Field(min_length=1),
]


def _environment(value: dict[str, str]) -> dict[str, str]:
    for name, text in value.items():
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"{name!r} is not an environment variable name")
        if "\0" in text:
            raise ValueError(f"the value of {name} holds a NUL byte")
    return value


def _user(value: str | None) -> str | None:
    if value is not None and (not value or "\0" in value or not value.isprintable()):
        raise ValueError(f"{value!r} is not a user name")
    return value


class HookConfig(_Section):
    """``[hooks.NAME]``: a command a drain may complete with (``on_completion =
    "hook:NAME"``). Never a command from the network: a request names a hook, nothing
    more. Reloadable, except for a hook that is running (it keeps what it started with).
    """

    command: Argv = _field(
        ..., reload=True, description="The hook's argv (a list; never a shell string)"
    )
    timeout: Duration = _field(
        3600.0,
        reload=True,
        description="Seconds before the hook is ended (SIGTERM, then SIGKILL); it failed",
        gt=0,
    )
    reboots: bool = _field(
        False,
        reload=True,
        description="The hook reboots the machine: a reboot while it runs is its success",
    )
    expected_duration: Duration | None = _field(
        None,
        reload=True,
        description="How long the hook usually takes (published: the master's estimate of a "
        "rolling operation's end); default: what the master has seen it take",
        gt=0,
    )
    user: Annotated[str | None, AfterValidator(_user)] = _field(
        None, reload=True, description="Run as this user (needs root); default: the agent's"
    )
    environment: Annotated[dict[str, str], AfterValidator(_environment)] = _field(
        {}, reload=True, description="Variables added to the hook's environment"
    )


class HealthConfig(_Section):
    """``[health]``: the check a node passes before it takes work again after a drain
    emptied it (a hook, a cancel, the master's ``/machine/up``). Reloadable."""

    command: Argv = _field(
        ..., reload=True, description="The check's argv; exit status 0 is a pass"
    )
    timeout: Duration = _field(
        60.0, reload=True, description="Seconds before a check is ended; it failed", gt=0
    )
    interval: Duration = _field(
        60.0, reload=True, description="Seconds between checks while the node waits", gt=0
    )
    passes: int = _field(
        1, reload=True, description="Checks in a row that must pass before the node opens", ge=1
    )


class ShutdownConfig(_Section):
    """``[shutdown]``: the machine's own shutdown (logind's delay inhibitor lock): the node
    closes and drains before the machine goes down, and reopens by itself after the
    reboot. ``enabled`` needs a restart; ``schedule`` is reloadable (read when a shutdown
    begins)."""

    enabled: bool = _field(
        True,
        reload=False,
        description="Hold logind's delay lock and drain the node when the machine shuts down",
    )
    schedule: Literal["quick", "graceful", "fast"] = _field(
        "quick", reload=True, description="The shutdown drain's schedule"
    )


def _hook_names(value: dict[str, HookConfig]) -> dict[str, HookConfig]:
    """Every name by the one rule of hook names (:func:`slots.check_hook_name`), which the
    master applies to the hook an operation names."""
    for name in value:
        try:
            check_hook_name(name)
        except InvalidRequest as exc:
            raise ValueError(exc.message) from None
    return value


def _site_attributes(
    value: dict[str, str | int | bool],
) -> dict[str, str | int | bool]:
    """The ``[attributes]`` table as :func:`slots.check_site_attributes` accepts it."""
    try:
        check_site_attributes(value)
    except InvalidRequest as err:
        raise ValueError(err.message) from None
    return value


class AgentConfig(_DaemonSettings):
    """The configuration of ``nodeagent run``. Load with :func:`load_agent_config`."""

    hostname: str = _field(
        ..., reload=False, description="Advertised host name; default: FQDN", min_length=1
    )
    ip: Annotated[str, AfterValidator(_check_ip)] = _field(
        ..., reload=False, description="Advertised address; default: primary address"
    )
    state_dir: Path = _field(..., reload=False, description="Durable state directory")
    runtime_dir: Path = _field(..., reload=False, description="Runtime directory (sockets)")
    execute_dir: Path = _field(
        ..., reload=False, description="Jobs' scratch space; default: <state_dir>/execute"
    )
    socket: Path = _field(
        ..., reload=False, description="Unix socket; default: <runtime_dir>/nodeagent.sock"
    )
    listen: tuple[ListenAddress, ...] = _field(
        ("127.0.0.1:9621",), reload=False, description="TCP listeners 'host:port'; [] = none"
    )
    read_timeout: Duration = _field(
        READ_TIMEOUT,
        reload=False,
        description="A connection whose request stalls this long (head or body) is closed",
        gt=0,
    )
    tls_cert: Path | None = _field(None, reload=False, description="TLS certificate (PEM)")
    tls_key: Path | None = _field(None, reload=False, description="TLS private key (PEM)")
    key_file: Path = _field(
        ..., reload=False, description="Pool key; default: <state_dir>/pool.key"
    )
    audit_log: Path = _field(
        ..., reload=False, description="Audit log; default: <state_dir>/audit.log"
    )
    metrics_require_auth: bool = _field(
        True, reload=True, description="Whether /metrics needs a READ token"
    )
    resources: ResourcesConfig = _field(
        ResourcesConfig(), reload=False, description="Resource overrides"
    )
    policy: PolicyConfig = _field(PolicyConfig(), reload=True, description="Machine policy")
    master: MasterLinkConfig = _field(
        MasterLinkConfig(), reload=True, description="Link to the master"
    )
    shutdown: ShutdownConfig = _field(
        ShutdownConfig(), reload=True, description="The machine's own shutdown"
    )
    hooks: Annotated[dict[str, HookConfig], AfterValidator(_hook_names)] = _field(
        {}, reload=True, description="Completion hooks by name ([hooks.NAME] tables)"
    )
    health: HealthConfig | None = _field(
        None, reload=True, description="The health check before service; none: no check"
    )
    attributes: Annotated[
        dict[str, StrictStr | StrictInt | StrictBool], AfterValidator(_site_attributes)
    ] = _field(
        {},
        reload=True,
        description="Site attributes the machine ad publishes (STARTD_ATTRS), e.g. Rack",
    )
    boot_id_file: Path = _field(
        BOOT_ID_FILE,
        reload=False,
        description="Where the boot id is read (tells a reboot during a hook from a restart)",
    )

    @classmethod
    def _computed_defaults(
        cls, state: Mapping[str, Any], environ: Mapping[str, str], uid: int
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "hostname" not in state:
            out["hostname"] = socket.getfqdn()
        if "ip" not in state:
            out["ip"] = default_ip()
        state_dir = _as_path(state.get("state_dir")) or default_state_dir(environ, uid)
        runtime_dir = _as_path(state.get("runtime_dir")) or default_runtime_dir(environ, uid)
        derived = {
            "state_dir": state_dir,
            "runtime_dir": runtime_dir,
            "execute_dir": state_dir / "execute",
            "socket": runtime_dir / "nodeagent.sock",
            "key_file": state_dir / "pool.key",
            "audit_log": state_dir / "audit.log",
        }
        out.update({k: v for k, v in derived.items() if k not in state})
        return out


def load_agent_config(
    path: Path | None,
    env: Mapping[str, str] = os.environ,
    *,
    uid: int | None = None,
    default_path: Path = DEFAULT_AGENT_CONFIG_PATH,
) -> AgentConfig:
    """Load the agent's configuration.

    ``path`` must name an existing file; with ``None``, ``default_path`` is read when it
    exists. ``env`` supplies the ``NODEAGENT_`` overrides and the variables the computed
    defaults use (``HOME``, ``XDG_*``, ``STATE_DIRECTORY``, ``RUNTIME_DIRECTORY``); ``uid``
    (default: the effective uid) selects root's system directories. Reads no other global
    state. Raises :class:`ConfigError`.
    """
    return _load_settings(
        AgentConfig,
        path,
        default_path=default_path,
        environ=env,
        uid=os.geteuid() if uid is None else uid,
    )


def check_hook_users(config: AgentConfig, euid: int) -> None:
    """Raise :class:`ConfigError` for a hook whose ``user`` does not exist, or names
    another user than the agent's own while the agent does not run as root (``euid``)."""
    problems = []
    for name, hook in sorted(config.hooks.items()):
        if hook.user is None:
            continue
        try:
            uid = pwd.getpwnam(hook.user).pw_uid
        except KeyError:
            problems.append(f"hooks.{name}.user: no such user {hook.user!r}")
            continue
        if euid not in (0, uid):
            problems.append(
                f"hooks.{name}.user: running a hook as {hook.user!r} needs an agent running "
                "as root (leave user out to run it as the agent's user)"
            )
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems), problems=tuple(problems))


@dataclass(frozen=True, kw_only=True)
class MachineResources:
    """The machine's resources in HTCondor units (Memory MiB, Disk KiB)."""

    cpus: int
    memory_mib: int
    disk_kib: int
    gpus: int


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def machine_resources(config: AgentConfig) -> MachineResources:
    """The configured resources, detecting the unset ones with psutil.

    Cpus: logical CPUs; Memory: total physical memory; Disk: free space (HTCondor's
    meaning) of the file system holding ``execute_dir`` (or its nearest existing parent);
    GPUs: 0.
    """
    import psutil  # noqa: PLC0415  (heavy; only the daemon needs it)

    r = config.resources
    cpus = r.cpus if r.cpus is not None else int(psutil.cpu_count(logical=True) or 1)
    memory = (
        r.memory_mib
        if r.memory_mib is not None
        else int(psutil.virtual_memory().total // (1024 * 1024))
    )
    disk = (
        r.disk_kib
        if r.disk_kib is not None
        else int(psutil.disk_usage(str(_existing_ancestor(config.execute_dir))).free // 1024)
    )
    return MachineResources(
        cpus=cpus, memory_mib=memory, disk_kib=disk, gpus=r.gpus if r.gpus is not None else 0
    )
