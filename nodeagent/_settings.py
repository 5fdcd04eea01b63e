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
process. :func:`reloadable_changes` splits the differences between two configurations;
:func:`merge_reloadable` makes the configuration a daemon runs with after a reload (its own
fixed values, the file's reloadable ones). ``nodeagent._lifecycle`` applies them on SIGHUP.

Adding another daemon's configuration: subclass :class:`_DaemonSettings`, declare its fields
(sections as :class:`_Section` models), override ``_computed_defaults`` for
environment-dependent values, and load with :func:`_load_settings`.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Self, TypeVar, get_args

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
from nodeagent._paths import default_runtime_dir, default_state_dir

__all__ = [
    "ENV_PREFIX",
    "READ_TIMEOUT",
    "ConfigChanges",
    "ConfigError",
    "Duration",
    "ListenAddress",
    "default_ip",
    "merge_reloadable",
    "reloadable_changes",
]

ENV_PREFIX = "NODEAGENT_"

#: The default ``read_timeout`` of every daemon's listeners (seconds): a connection whose
#: request (its head or its body) stalls this long is closed.
READ_TIMEOUT = 30.0


_NESTED_DELIMITER = "__"


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


def _field(default: Any, *, reload: bool, description: str, **constraints: Any) -> Any:
    """A field whose schema records whether SIGHUP applies it."""
    return Field(
        default, description=description, json_schema_extra={"reloadable": reload}, **constraints
    )


def _is_reloadable(info: FieldInfo) -> bool:
    extra = info.json_schema_extra
    return isinstance(extra, dict) and extra.get("reloadable") is True


#: A listener's host: a name or an IPv4 address, or an IPv6 address in brackets; nothing
#: that would give the URL advertised from it (the agent's ``MyAddress``) a path, query,
#: fragment or user.
_LISTEN_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+")


def _check_listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not 'host:port' (IPv6 hosts in brackets)")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError(f"{value!r} has an unbalanced IPv6 bracket")
    if not _LISTEN_HOST.fullmatch(host):
        raise ValueError(
            f"{value!r}: the host is a name or an IP address, with nothing else "
            "(no scheme, path, query or user)"
        )
    return value


def _check_ip(value: str) -> str:
    return str(ipaddress.ip_address(value))


def _check_url(value: str | None) -> str | None:
    if value is not None and not re.match(r"https?://[^/\s]+", value):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value


ListenAddress = Annotated[str, AfterValidator(_check_listen)]


def _master_urls(
    url: str | None, urls: tuple[str, ...], *, one: str, several: str
) -> tuple[str, ...]:
    """The masters a daemon's configuration names: the key ``one`` (one URL, a shorthand)
    or the key ``several`` (a list), never both; each without its trailing ``/``.

    Raises ValueError (which the model reports under its own name) when both are given or
    the list names a master twice.
    """
    if url is not None and urls:
        raise ValueError(
            f"give {one} (one master) or {several} (several masters), not both: "
            f'write {several} = ["{url}", ...] to name them all'
        )
    found = (url,) if url is not None else urls
    masters = tuple(each.rstrip("/") for each in found)
    twice = sorted({each for each in masters if masters.count(each) > 1})
    if twice:
        raise ValueError(f"{several} names {', '.join(twice)} more than once")
    return masters


class _Section(BaseModel):
    """A TOML table of a daemon's configuration: immutable, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
_M = TypeVar("_M", bound=BaseModel)


def _env_var_for(loc: tuple[int | str, ...], environ: Mapping[str, str]) -> str | None:
    keys = [str(part) for part in loc if isinstance(part, str)]
    present = {k.upper() for k in environ}
    for n in range(len(keys), 0, -1):
        name = ENV_PREFIX + _NESTED_DELIMITER.join(keys[:n]).upper()
        if name in present:
            return name
    return None


def _sections_with(model: type[BaseModel], name: str) -> list[str]:
    """The sections (``[policy]``) of ``model`` that hold a setting called ``name``."""
    found = []
    for section, info in model.model_fields.items():
        for inner in (info.annotation, *get_args(info.annotation)):  # a section may be optional
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                if name in inner.model_fields:
                    found.append(f"[{section}]")
                break
    return sorted(found)


def _describe(
    error: ErrorDetails, environ: Mapping[str, str], model: type[BaseModel] | None = None
) -> str:
    loc = error["loc"]
    key = ".".join(str(part) for part in loc) or "(configuration)"
    var = _env_var_for(loc, environ)
    where = f" (from {var})" if var else ""
    if error["type"] == "extra_forbidden":
        # A key written above the header of the section it belongs to, or below a header
        # when it belongs at the top.
        hint = ""
        if model is not None and len(loc) == 1:
            sections = _sections_with(model, str(loc[0]))
            hint = f" (it belongs under {' or '.join(sections)})" if sections else ""
        elif model is not None and len(loc) == 2 and str(loc[1]) in model.model_fields:
            hint = " (it belongs at the top, before any [section])"
        return f"{key}{where}: unknown setting{hint}"
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
        problems = tuple(_describe(e, environ, cls) for e in exc.errors())
        raise ConfigError(
            f"invalid configuration ({source}): " + "; ".join(problems), problems=problems
        ) from None


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


def _merged(old: _M, new: _M) -> _M:
    update: dict[str, object] = {}
    for name, info in type(old).model_fields.items():
        a, b = getattr(old, name), getattr(new, name)
        if a == b:
            continue
        if isinstance(a, _Section) and isinstance(b, _Section):
            update[name] = _merged(a, b)
        elif _is_reloadable(info):
            update[name] = b
    return old.model_copy(update=update) if update else old


def merge_reloadable(old: _S, new: _S) -> _S:
    """``old`` with the reloadable values of ``new``: what a daemon runs with after a reload.

    Every key that needs a restart keeps its value from ``old`` (so the directories,
    sockets and runtime file stay the ones the daemon is using), every reloadable key takes
    its value from ``new``, sections key by key. Both are validated configurations and no
    validator relates a reloadable key to a fixed one, so the result is valid as well.
    Returns ``old`` itself when nothing reloadable changed.
    """
    if type(old) is not type(new):
        raise TypeError(f"cannot merge {type(new).__name__} into {type(old).__name__}")
    return _merged(old, new)
