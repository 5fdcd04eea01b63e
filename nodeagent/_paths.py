"""Where the daemons keep state and sockets: the one copy of the directory rules.

Standard library only: the command line and the client use it too.
"""

from __future__ import annotations

import pwd
from collections.abc import Mapping
from pathlib import Path

TYPE_CHECKING = False  # not typing's: the command line's plain commands import this module
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "DEFAULT_AGENT_CONFIG_PATH",
    "DEFAULT_DEFRAG_CONFIG_PATH",
    "DEFAULT_MASTER_CONFIG_PATH",
    "default_master_socket",
    "default_runtime_dir",
    "default_socket",
    "default_state_dir",
]

_APP = "nodeagent"

DEFAULT_AGENT_CONFIG_PATH = Path("/etc/nodeagent/nodeagent.toml")
"""The agent's default configuration file (``nodeagent run`` reads it when it exists)."""

DEFAULT_MASTER_CONFIG_PATH = Path("/etc/nodeagent/master.toml")
"""The master's default configuration file (``nodeagent master run`` reads it when it exists)."""

DEFAULT_DEFRAG_CONFIG_PATH = Path("/etc/nodeagent/defrag.toml")
"""The defrag daemon's default configuration file."""


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


# --- where a running daemon listens ------------------------------------------------------


def _setting(env: Mapping[str, str], key: str) -> str | None:
    """``NODEAGENT_<KEY>``, matched without regard to case as the daemon does; empty = unset."""
    wanted = ("NODEAGENT_" + key).upper()
    for name, value in env.items():
        if name.upper() == wanted and value:
            return value
    return None


def _file_settings(path: Path) -> dict[str, Any]:
    """The top-level keys of the daemon's TOML file; ``{}`` when it is absent or unreadable
    (a daemon cannot have started with an unreadable file either)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return {}
    import tomllib  # noqa: PLC0415  (only when a configuration file exists)

    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _path_setting(value: object) -> Path | None:
    return Path(value) if isinstance(value, str) and value else None


def default_socket(env: Mapping[str, str], uid: int, *, config_path: Path | None = None) -> Path:
    """The Unix socket a daemon started with the same environment listens on.

    The daemon's precedence, key by key: ``socket`` from ``NODEAGENT_SOCKET``, else from
    the configuration file; otherwise ``<runtime_dir>/nodeagent.sock`` with ``runtime_dir``
    from ``NODEAGENT_RUNTIME_DIR``, else from the file, else :func:`default_runtime_dir`.
    The file is ``config_path``, else ``$NODEAGENT_CONFIG``, else
    :data:`DEFAULT_AGENT_CONFIG_PATH` when it exists. Reads no other global state.
    """
    explicit = _path_setting(_setting(env, "SOCKET"))
    if explicit is not None:
        return explicit
    if config_path is None:
        config_path = _path_setting(env.get("NODEAGENT_CONFIG")) or DEFAULT_AGENT_CONFIG_PATH
    settings = _file_settings(config_path)
    from_file = _path_setting(settings.get("socket"))
    if from_file is not None:
        return from_file
    runtime_dir = (
        _path_setting(_setting(env, "RUNTIME_DIR"))
        or _path_setting(settings.get("runtime_dir"))
        or default_runtime_dir(env, uid)
    )
    return runtime_dir / "nodeagent.sock"


def default_master_socket(
    env: Mapping[str, str], uid: int, *, config_path: Path | None = None
) -> Path:
    """The Unix socket a master started with the same environment listens on.

    ``NODEAGENT_MASTER_SOCKET`` when set; otherwise ``<runtime_dir>/master.sock``, with
    ``runtime_dir`` by the master's precedence: ``NODEAGENT_RUNTIME_DIR``, else the
    configuration file (``config_path``, else ``$NODEAGENT_MASTER_CONFIG``, else
    :data:`DEFAULT_MASTER_CONFIG_PATH` when it exists), else
    ``default_runtime_dir(env, uid, "nodeagent-master")``.
    """
    explicit = _path_setting(_setting(env, "MASTER_SOCKET"))
    if explicit is not None:
        return explicit
    if config_path is None:
        config_path = (
            _path_setting(env.get("NODEAGENT_MASTER_CONFIG")) or DEFAULT_MASTER_CONFIG_PATH
        )
    runtime_dir = (
        _path_setting(_setting(env, "RUNTIME_DIR"))
        or _path_setting(_file_settings(config_path).get("runtime_dir"))
        or default_runtime_dir(env, uid, f"{_APP}-master")
    )
    return runtime_dir / "master.sock"
