"""Daemon configuration: a TOML file, environment overrides and embedded defaults.

Sources, highest priority first:

1. environment variables ``NODEAGENT_<KEY>``; ``__`` separates a section from its key
   (``NODEAGENT_POLICY__START='Cpus >= 4'``); lists are JSON (``NODEAGENT_LISTEN='[]'``);
2. the TOML file (``/etc/nodeagent/nodeagent.toml`` when it exists, or an explicit path
   that must exist);
3. computed defaults: host name, address and directories derived from the environment and
   the user (:func:`default_state_dir`, :func:`default_runtime_dir`), and paths derived from
   the directories the higher sources chose (``execute_dir`` defaults to
   ``<state_dir>/execute`` even when ``state_dir`` comes from the file);
4. the constant defaults declared on the fields.

So a host with no file at all gets a working agent. Unknown keys are errors, in the file
and in ``NODEAGENT_<SECTION>__<KEY>`` variables alike; every problem is reported in one
:class:`ConfigError` naming the dotted key and, when it came from the environment, the
variable. Paths are taken literally (no ``~`` expansion).

Durations accept a number of seconds (``90``, ``1.5``) or a string with units d, h, m, s
in that order (``"90s"``, ``"15m"``, ``"2h"``, ``"1h30m"``); see :func:`parse_duration`.

Reloading: every field states in its schema (``json_schema_extra={"reloadable": ...}``)
whether a SIGHUP applies a new value. Policy values, the START expression, the master link
and ``metrics_require_auth`` are reloadable; identity (hostname, ip), directories, sockets,
listeners, TLS files, the key and audit files, and resources are fixed for the life of the
process. :func:`reloadable_changes` splits the differences between two configurations.

Adding another daemon's configuration: subclass :class:`_DaemonSettings`, declare its fields
(sections as :class:`_Section` models), override ``_computed_defaults`` for
environment-dependent values, and load with :func:`_load_settings`.
"""

from __future__ import annotations

import ipaddress
import math
import os
import pwd
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from nodeagent._durations import parse_duration

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo
    from pydantic_core import ErrorDetails

__all__ = [
    "DEFAULT_AGENT_CONFIG_PATH",
    "DEFAULT_DEFRAG_CONFIG_PATH",
    "DEFAULT_MASTER_CONFIG_PATH",
    "ENV_PREFIX",
    "AgentConfig",
    "ClassAdExpression",
    "ConfigChanges",
    "ConfigError",
    "DefragConfig",
    "MachineResources",
    "MasterConfig",
    "MasterLinkConfig",
    "PolicyConfig",
    "ResourcesConfig",
    "default_ip",
    "default_runtime_dir",
    "default_state_dir",
    "load_agent_config",
    "load_defrag_config",
    "load_master_config",
    "machine_resources",
    "parse_duration",
    "reloadable_changes",
]

DEFAULT_AGENT_CONFIG_PATH = Path("/etc/nodeagent/nodeagent.toml")
DEFAULT_MASTER_CONFIG_PATH = Path("/etc/nodeagent/master.toml")
ENV_PREFIX = "NODEAGENT_"
_NESTED_DELIMITER = "__"
_APP = "nodeagent"


class ConfigError(Exception):
    """The configuration cannot be loaded; nothing was applied.

    ``problems`` lists one readable line per defect (``"policy.start (from
    NODEAGENT_POLICY__START): ..."``); the message joins them. A problem that is not about
    one key (missing file, TOML syntax) is the message itself.
    """

    code: ClassVar[str] = "config.invalid"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, *, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems or (message,)


# --- durations ----------------------------------------------------------------------------


def _to_seconds(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("expected a duration, not a boolean")  # noqa: TRY004
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError("a duration must be finite")
        return float(value)
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError("expected a duration: a number of seconds or a string such as '15m'")


Duration = Annotated[float, BeforeValidator(_to_seconds)]
"""Seconds, accepting the forms of :func:`parse_duration`."""


# --- field helpers ------------------------------------------------------------------------


def _field(default: Any, *, reload: bool, description: str, **constraints: Any) -> Any:
    """A field whose schema records whether SIGHUP applies it."""
    return Field(
        default, description=description, json_schema_extra={"reloadable": reload}, **constraints
    )


def _is_reloadable(info: FieldInfo) -> bool:
    extra = info.json_schema_extra
    return isinstance(extra, dict) and extra.get("reloadable") is True


def _check_listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not 'host:port' (IPv6 hosts in brackets)")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError(f"{value!r} has an unbalanced IPv6 bracket")
    return value


def _check_ip(value: str) -> str:
    return str(ipaddress.ip_address(value))


def _check_url(value: str | None) -> str | None:
    if value is not None and not re.match(r"https?://[^/\s]+", value):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value


ListenAddress = Annotated[str, AfterValidator(_check_listen)]


class _Section(BaseModel):
    """A TOML table of a daemon's configuration: immutable, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --- environment-derived defaults --------------------------------------------------------


def _home(env: Mapping[str, str], uid: int) -> Path:
    home = env.get("HOME")
    if home:
        return Path(home)
    try:
        return Path(pwd.getpwuid(uid).pw_dir)
    except KeyError:
        return Path("/")


def _first_dir(value: str | None) -> Path | None:
    """systemd's ``$STATE_DIRECTORY`` and friends may list several, colon-separated."""
    if not value:
        return None
    first = value.split(":", 1)[0]
    return Path(first) if first else None


def default_state_dir(env: Mapping[str, str], uid: int, name: str = _APP) -> Path:
    """Where a daemon keeps durable state.

    In order: ``$STATE_DIRECTORY`` (systemd's ``StateDirectory=``); ``/var/lib/<name>`` for
    root; ``$XDG_STATE_HOME/<name>``; ``~/.local/state/<name>``.
    """
    explicit = _first_dir(env.get("STATE_DIRECTORY"))
    if explicit is not None:
        return explicit
    if uid == 0:
        return Path("/var/lib") / name
    xdg = env.get("XDG_STATE_HOME")
    if xdg:
        return Path(xdg) / name
    return _home(env, uid) / ".local" / "state" / name


def default_runtime_dir(env: Mapping[str, str], uid: int, name: str = _APP) -> Path:
    """Where a daemon puts sockets and other per-boot files.

    In order: ``$RUNTIME_DIRECTORY`` (systemd's ``RuntimeDirectory=``); ``/run/<name>`` for
    root; ``$XDG_RUNTIME_DIR/<name>``; ``/tmp/<name>-<uid>``.
    """
    explicit = _first_dir(env.get("RUNTIME_DIRECTORY"))
    if explicit is not None:
        return explicit
    if uid == 0:
        return Path("/run") / name
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / name
    return Path("/tmp") / f"{name}-{uid}"


def default_ip() -> str:
    """Best-effort primary IPv4 address: the source address of the default route.

    Connecting a UDP socket sends nothing. Falls back to ``127.0.0.1``.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: routed by the default route, never used
            address = str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"
    return "127.0.0.1" if address == "0.0.0.0" else address


def _as_path(value: object) -> Path | None:
    return Path(value) if isinstance(value, str | os.PathLike) and str(value) else None


# --- the settings machinery shared by the daemons ----------------------------------------


class _MappingEnvSource(EnvSettingsSource):
    """The environment source reading a given mapping instead of :data:`os.environ`."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        if self.case_sensitive:
            return dict(self._environ)
        return {k.lower(): v for k, v in self._environ.items()}


class _ComputedDefaults(PydanticBaseSettingsSource):
    """The lowest-priority source: defaults derived from the environment and higher sources."""

    def __init__(
        self, settings_cls: type[_DaemonSettings], *, environ: Mapping[str, str], uid: int
    ) -> None:
        super().__init__(settings_cls)
        self._target = settings_cls
        self._environ = environ
        self._uid = uid

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return self._target._computed_defaults(self.current_state, self._environ, self._uid)


class _DaemonSettings(BaseSettings):
    """Base of each daemon's top-level configuration.

    Build one with :func:`_load_settings`. Calling the class directly validates the keyword
    arguments and fills the computed defaults from :data:`os.environ`, but reads neither a
    file nor ``NODEAGENT_`` variables.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=_NESTED_DELIMITER,
        extra="forbid",
        frozen=True,
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> Self:
        """Every daemon's TCP listeners take TLS from a certificate and key given together."""
        if (getattr(self, "tls_cert", None) is None) != (getattr(self, "tls_key", None) is None):
            raise ValueError("tls_cert and tls_key must be given together")
        return self

    @classmethod
    def _computed_defaults(
        cls, state: Mapping[str, Any], environ: Mapping[str, str], uid: int
    ) -> dict[str, Any]:
        """Defaults for the keys missing from ``state`` (the merged higher sources)."""
        return {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _ComputedDefaults(cls, environ=os.environ, uid=os.geteuid())


_S = TypeVar("_S", bound=_DaemonSettings)


def _env_var_for(loc: tuple[int | str, ...], environ: Mapping[str, str]) -> str | None:
    keys = [str(part) for part in loc if isinstance(part, str)]
    present = {k.upper() for k in environ}
    for n in range(len(keys), 0, -1):
        name = ENV_PREFIX + _NESTED_DELIMITER.join(keys[:n]).upper()
        if name in present:
            return name
    return None


def _describe(error: ErrorDetails, environ: Mapping[str, str]) -> str:
    loc = error["loc"]
    key = ".".join(str(part) for part in loc) or "(configuration)"
    var = _env_var_for(loc, environ)
    where = f" (from {var})" if var else ""
    if error["type"] == "extra_forbidden":
        return f"{key}{where}: unknown setting"
    message = error["msg"].removeprefix("Value error, ")
    value = error.get("input")
    shown = isinstance(value, str | int | float) and repr(value) not in message
    got = f" (got {value!r})" if shown else ""
    return f"{key}{where}: {message}{got}"


def _load_settings(
    cls: type[_S],
    path: Path | None,
    *,
    default_path: Path,
    environ: Mapping[str, str],
    uid: int,
) -> _S:
    """Load ``cls`` from ``path`` (must exist) or ``default_path`` (optional), and ``environ``.

    Raises :class:`ConfigError` listing every problem.
    """
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"configuration file {path} does not exist or is not a file")
        toml_file = path
    else:
        toml_file = default_path
    source = str(toml_file) if toml_file.is_file() else "defaults and environment"
    try:
        sources: tuple[PydanticBaseSettingsSource, ...] = (
            _MappingEnvSource(cls, environ),
            TomlConfigSettingsSource(cls, toml_file=toml_file),
            _ComputedDefaults(cls, environ=environ, uid=uid),
        )
        # The settings constructor's keyword is not part of the typed dataclass signature.
        build: Callable[..., _S] = cls
        return build(_build_sources=(sources, {}))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{toml_file}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {toml_file}: {exc.strerror}") from None
    except SettingsError as exc:
        # Raised for an environment value of a list or section that is not valid JSON.
        m = re.search(r'field "(\w+)"', str(exc))
        key = m.group(1) if m else "a setting"
        var = _env_var_for((key,), environ) or "the environment"
        problem = f"{key} (from {var}): not valid JSON (lists and sections are given as JSON)"
        raise ConfigError(
            f"invalid configuration ({source}): {problem}", problems=(problem,)
        ) from None
    except ValidationError as exc:
        problems = tuple(_describe(e, environ) for e in exc.errors())
        raise ConfigError(
            f"invalid configuration ({source}): " + "; ".join(problems), problems=problems
        ) from None


# --- the agent ----------------------------------------------------------------------------


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


class MasterLinkConfig(_Section):
    """``[master]``: where this agent pushes its ad. Reloadable (applied at the next push)."""

    url: Annotated[str | None, AfterValidator(_check_url)] = _field(
        None, reload=True, description="The master's base URL; none: no master"
    )
    token_file: Path | None = _field(
        None, reload=True, description="File holding the DAEMON token for the master"
    )
    update_interval: Duration = _field(
        60.0, reload=True, description="Seconds between periodic ad pushes", gt=0
    )
    ad_debounce: Duration = _field(
        0.25, reload=True, description="Delay coalescing state changes into one push", ge=0
    )


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


# --- the master ---------------------------------------------------------------------------


def _service_defaults(
    state: Mapping[str, Any], environ: Mapping[str, str], uid: int, name: str
) -> dict[str, Any]:
    """Directory defaults of a cluster service (``name``): state, runtime, key, audit log."""
    state_dir = _as_path(state.get("state_dir")) or default_state_dir(environ, uid, name)
    runtime_dir = _as_path(state.get("runtime_dir")) or default_runtime_dir(environ, uid, name)
    derived = {
        "state_dir": state_dir,
        "runtime_dir": runtime_dir,
        "key_file": state_dir / "pool.key",
        "audit_log": state_dir / "audit.log",
    }
    return {k: v for k, v in derived.items() if k not in state}


class MasterConfig(_DaemonSettings):
    """The configuration of ``nodeagent master run``. Load with :func:`load_master_config`."""

    state_dir: Path = _field(..., reload=False, description="Durable state directory")
    runtime_dir: Path = _field(..., reload=False, description="Runtime directory")
    listen: tuple[ListenAddress, ...] = _field(
        ("127.0.0.1:9622",), reload=False, description="TCP listeners 'host:port'"
    )
    tls_cert: Path | None = _field(None, reload=False, description="TLS certificate (PEM)")
    tls_key: Path | None = _field(None, reload=False, description="TLS private key (PEM)")
    key_file: Path = _field(
        ...,
        reload=False,
        description="Pool key (shared with the agents); default: <state_dir>/pool.key",
    )
    audit_log: Path = _field(
        ..., reload=False, description="Audit log; default: <state_dir>/audit.log"
    )
    ad_lifetime: Duration = _field(
        300.0,
        reload=True,
        description="An ad not refreshed for this long shows its node as lost",
        gt=0,
    )
    drain_policy: Literal["just_in_time", "immediate"] = _field(
        "just_in_time",
        reload=True,
        description="When the master starts a scheduled machine's drain",
    )
    drain_margin: Duration = _field(
        60.0,
        reload=True,
        description="Just in time: aim to be empty this long before the window",
        ge=0,
    )
    escalation: Literal["quick", "fast", "none"] = _field(
        "quick", reload=True, description="What a node not empty when its window starts gets"
    )
    reconcile_interval: Duration = _field(
        1.0, reload=True, description="Seconds between passes over the schedule", gt=0
    )
    agent_timeout: Duration = _field(
        10.0, reload=True, description="Timeout of the master's requests to agents", gt=0
    )
    metrics_require_auth: bool = _field(
        True, reload=True, description="Whether /metrics needs a READ token"
    )

    @classmethod
    def _computed_defaults(
        cls, state: Mapping[str, Any], environ: Mapping[str, str], uid: int
    ) -> dict[str, Any]:
        return _service_defaults(state, environ, uid, "nodeagent-master")


def load_master_config(
    path: Path | None,
    env: Mapping[str, str] = os.environ,
    *,
    uid: int | None = None,
    default_path: Path = DEFAULT_MASTER_CONFIG_PATH,
) -> MasterConfig:
    """Load the master's configuration (as :func:`load_agent_config` does the agent's)."""
    return _load_settings(
        MasterConfig,
        path,
        default_path=default_path,
        environ=env,
        uid=os.geteuid() if uid is None else uid,
    )


# --- reload -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ConfigChanges:
    """The differences between two configurations, by dotted key, sorted.

    ``applied`` maps each changed reloadable key to its new value; ``ignored`` names the
    changed keys that only take effect after a restart.
    """

    applied: Mapping[str, object]
    ignored: tuple[str, ...]


def _diff(old: BaseModel, new: BaseModel, prefix: str, out: dict[str, tuple[bool, object]]) -> None:
    for name, info in type(old).model_fields.items():
        a, b = getattr(old, name), getattr(new, name)
        key = prefix + name
        if isinstance(a, _Section) and isinstance(b, _Section):
            _diff(a, b, key + ".", out)
        elif a != b:
            out[key] = (_is_reloadable(info), b)


def reloadable_changes(old: _S, new: _S) -> ConfigChanges:
    """Compare two configurations of the same daemon field by field (sections recursively)."""
    if type(old) is not type(new):
        raise TypeError(f"cannot compare {type(old).__name__} with {type(new).__name__}")
    changes: dict[str, tuple[bool, object]] = {}
    _diff(old, new, "", changes)
    return ConfigChanges(
        applied={k: v for k, (live, v) in sorted(changes.items()) if live},
        ignored=tuple(k for k, (live, _) in sorted(changes.items()) if not live),
    )


# --- resources ----------------------------------------------------------------------------


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


# --- the defrag daemon --------------------------------------------------------------------

DEFAULT_DEFRAG_CONFIG_PATH = Path("/etc/nodeagent/defrag.toml")


def _check_expression(value: str) -> str:
    from slots import SlotsError, validate_expression  # noqa: PLC0415  (loads classad2)

    try:
        validate_expression(value)
    except SlotsError as exc:
        raise ValueError(exc.message) from None
    return value


ClassAdExpression = Annotated[str, AfterValidator(_check_expression)]
"""A ClassAd expression, checked with the official parser when the configuration loads."""


class DefragConfig(_DaemonSettings):
    """The configuration of ``nodeagent defrag run``. Load with :func:`load_defrag_config`.

    The policy keys are HTCondor's ``DEFRAG_*`` knobs in snake case, with its defaults;
    ``docs/defrag.md`` says where they differ. The expressions are evaluated against the
    partitionable slot ads the master serves (``GET /v1/ads?slots=true``): they carry the
    machine-wide attributes (``TotalCpus``, ``ExpectedMachine*``, ``DrainReason``, …) and
    the free resources of the machine (``Cpus``, ``Memory``, …).
    """

    name: str = _field(
        "main",
        reload=False,
        description="DEFRAG_NAME: the daemon's drains carry the reason 'Defrag <name>'",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
    )
    interval: Duration = _field(
        600.0, reload=True, description="DEFRAG_INTERVAL: seconds between cycles", gt=0
    )
    draining_machines_per_hour: float = _field(
        0.0,
        reload=True,
        description="DEFRAG_DRAINING_MACHINES_PER_HOUR: drains started per hour; 0 = none",
        ge=0,
        allow_inf_nan=False,
    )
    max_concurrent_draining: int = _field(
        -1,
        reload=True,
        description="DEFRAG_MAX_CONCURRENT_DRAINING: machines draining at once; -1 = no limit",
        ge=-1,
    )
    max_whole_machines: int = _field(
        -1,
        reload=True,
        description="DEFRAG_MAX_WHOLE_MACHINES: stop when this many are whole; -1 = no limit",
        ge=-1,
    )
    whole_machine_expr: ClassAdExpression = _field(
        "Cpus == TotalCpus",
        reload=True,
        description="DEFRAG_WHOLE_MACHINE_EXPR, on the partitionable slot ad",
    )
    requirements: ClassAdExpression = _field(
        "PartitionableSlot && Offline =!= True",
        reload=True,
        description="DEFRAG_REQUIREMENTS: which machines may be drained",
    )
    rank: ClassAdExpression = _field(
        "-ExpectedMachineGracefulDrainingBadput",
        reload=True,
        description="DEFRAG_RANK: higher is drained first",
    )
    schedule: Literal["graceful", "quick", "fast"] = _field(
        "graceful", reload=True, description="DEFRAG_SCHEDULE: the drains' schedule"
    )
    cancel_requirements: ClassAdExpression | None = _field(
        None,
        reload=True,
        description="DEFRAG_CANCEL_REQUIREMENTS: cancel the daemon's drains that match; "
        "default: the whole machine expression",
    )
    draining_start_expr: ClassAdExpression | None = _field(
        None,
        reload=True,
        description="DEFRAG_DRAINING_START_EXPR: which jobs a machine takes while the "
        "daemon drains it (evicted as soon as the original jobs are gone); default: none",
    )
    max_badput_increase: float = _field(
        1.5,
        reload=True,
        description="Skip a candidate whose fresh badput exceeds its ad's by this factor",
        ge=1,
        allow_inf_nan=False,
    )
    update_interval: Duration = _field(
        60.0,
        reload=True,
        description="DEFRAG_UPDATE_INTERVAL: seconds between pushes of the Defrag ad",
        gt=0,
    )
    master_url: Annotated[str | None, AfterValidator(_check_url)] = _field(
        None, reload=True, description="The master's base URL (required to run)"
    )
    token_file: Path | None = _field(
        None,
        reload=True,
        description="File holding a DAEMON token for the master (reads ads, pushes the ad)",
    )
    agent_timeout: Duration = _field(
        10.0, reload=True, description="Timeout of each request to the master or an agent", gt=0
    )
    state_dir: Path = _field(..., reload=False, description="Durable state directory")
    runtime_dir: Path = _field(..., reload=False, description="Runtime directory (socket)")
    listen: tuple[ListenAddress, ...] = _field(
        ("127.0.0.1:9623",), reload=False, description="TCP listeners 'host:port'; [] = none"
    )
    tls_cert: Path | None = _field(None, reload=False, description="TLS certificate (PEM)")
    tls_key: Path | None = _field(None, reload=False, description="TLS private key (PEM)")
    key_file: Path = _field(
        ...,
        reload=False,
        description="Pool key (shared with the agents); default: <state_dir>/pool.key",
    )

    @classmethod
    def _computed_defaults(
        cls, state: Mapping[str, Any], environ: Mapping[str, str], uid: int
    ) -> dict[str, Any]:
        defaults = _service_defaults(state, environ, uid, "nodeagent-defrag")
        defaults.pop("audit_log", None)
        return defaults


def load_defrag_config(
    path: Path | None,
    env: Mapping[str, str] = os.environ,
    *,
    uid: int | None = None,
    default_path: Path = DEFAULT_DEFRAG_CONFIG_PATH,
) -> DefragConfig:
    """Load the defrag daemon's configuration (as :func:`load_agent_config` does the agent's)."""
    return _load_settings(
        DefragConfig,
        path,
        default_path=default_path,
        environ=env,
        uid=os.geteuid() if uid is None else uid,
    )
