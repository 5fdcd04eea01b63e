"""What a client command needs from a daemon's configuration, read with the standard library.

The daemons load their configuration with pydantic (:mod:`nodeagent._settings`), which
costs a command line ≈ 150 ms; these rules read only the keys they need, with the
daemon's precedence (its ``NODEAGENT_*`` variable, else its TOML file, else its default),
so the command imports no pydantic. (The agent's and the master's sockets have theirs in
:mod:`nodeagent._paths`.) A tests checks each rule against the daemon's own loader.

Unlike the daemon, a rule does not check the rest of the file: only a configuration file
that is named but missing, unreadable or not TOML is refused
(:class:`~nodeagent.cli._errors.UsageError`, ``cli.config``, exit 2), with the daemon's
message.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodeagent._paths import (
    DEFAULT_AGENT_CONFIG_PATH,
    DEFAULT_DEFRAG_CONFIG_PATH,
    DEFAULT_MASTER_CONFIG_PATH,
    default_runtime_dir,
    default_state_dir,
)
from nodeagent.cli._errors import UsageError

__all__ = ["agent_key_file", "defrag_socket", "master_key_file", "master_listen"]


def _variable(env: Mapping[str, str], key: str) -> str | None:
    """``NODEAGENT_<KEY>``, matched without regard to case as the daemons do; empty = unset."""
    wanted = f"NODEAGENT_{key}".upper()
    for name, value in env.items():
        if name.upper() == wanted and value:
            return value
    return None


def _file_settings(config: Path | None, default: Path) -> dict[str, Any]:
    """The top-level keys of ``config`` (which must be a file), else of ``default`` when it
    exists, else ``{}``. Raises ``cli.config`` as the daemon's loader would."""
    if config is not None and not config.is_file():
        raise UsageError(
            "cli.config", f"configuration file {config} does not exist or is not a file"
        )
    path = config or default
    if not path.is_file():
        return {}
    import tomllib  # noqa: PLC0415  (only when a configuration file exists)

    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise UsageError("cli.config", f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError("cli.config", f"{path}: not valid TOML: {exc}") from None


def _path(value: object) -> Path | None:
    return Path(value) if isinstance(value, str) and value else None


def defrag_socket(config: Path | None, env: Mapping[str, str], uid: int) -> Path:
    """The Unix socket ``nodeagent defrag run`` listens on with ``config`` and ``env``.

    ``<runtime_dir>/defrag.sock``, ``runtime_dir`` from ``NODEAGENT_RUNTIME_DIR``, else
    from the configuration file (``config``, else
    :data:`~nodeagent._paths.DEFAULT_DEFRAG_CONFIG_PATH` when it exists), else
    ``default_runtime_dir(env, uid, "nodeagent-defrag")``.
    """
    settings = _file_settings(config, DEFAULT_DEFRAG_CONFIG_PATH)
    runtime_dir = (
        _path(_variable(env, "RUNTIME_DIR"))
        or _path(settings.get("runtime_dir"))
        or default_runtime_dir(env, uid, "nodeagent-defrag")
    )
    return runtime_dir / "defrag.sock"


def agent_key_file(env: Mapping[str, str], uid: int) -> Path:
    """The pool key ``nodeagent run`` uses with ``env``: its ``key_file``.

    ``NODEAGENT_KEY_FILE``, else ``key_file`` in the configuration file
    (``$NODEAGENT_CONFIG``, else :data:`~nodeagent._paths.DEFAULT_AGENT_CONFIG_PATH` when
    it exists), else ``<state_dir>/pool.key`` with ``state_dir`` from
    ``NODEAGENT_STATE_DIR``, else the file, else :func:`~nodeagent._paths.default_state_dir`.
    """
    config = _path(env.get("NODEAGENT_CONFIG"))
    settings = _file_settings(config, DEFAULT_AGENT_CONFIG_PATH)
    return _key_file(env, settings, default_state_dir(env, uid))


def _key_file(env: Mapping[str, str], settings: Mapping[str, Any], default: Path) -> Path:
    """A daemon's pool key: ``NODEAGENT_KEY_FILE``, else its file's ``key_file``, else
    ``<state_dir>/pool.key`` (``NODEAGENT_STATE_DIR``, else the file's, else ``default``)."""
    explicit = _path(_variable(env, "KEY_FILE")) or _path(settings.get("key_file"))
    if explicit is not None:
        return explicit
    state_dir = _path(_variable(env, "STATE_DIR")) or _path(settings.get("state_dir")) or default
    return state_dir / "pool.key"


def _master_settings(env: Mapping[str, str]) -> dict[str, Any]:
    config = _path(env.get("NODEAGENT_MASTER_CONFIG"))
    return _file_settings(config, DEFAULT_MASTER_CONFIG_PATH)


def master_key_file(env: Mapping[str, str], uid: int) -> Path:
    """The pool key ``nodeagent master run`` uses with ``env``: its ``key_file``.

    ``NODEAGENT_KEY_FILE``, else ``key_file`` in the master's configuration file
    (``$NODEAGENT_MASTER_CONFIG``, else :data:`~nodeagent._paths.DEFAULT_MASTER_CONFIG_PATH`
    when it exists), else ``<state_dir>/pool.key`` with ``state_dir`` from
    ``NODEAGENT_STATE_DIR``, else the file, else ``default_state_dir(env, uid,
    "nodeagent-master")``.
    """
    return _key_file(env, _master_settings(env), default_state_dir(env, uid, "nodeagent-master"))


def master_advertise_url(env: Mapping[str, str]) -> str | None:
    """The URL the master advertises (``advertise_url``: ``NODEAGENT_ADVERTISE_URL``, else
    its configuration file's), ``None`` when it sets none."""
    given = _variable(env, "ADVERTISE_URL") or _master_settings(env).get("advertise_url")
    return given if isinstance(given, str) and given else None


def master_listen(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The ``host:port`` addresses the master listens on, from its configuration file
    (its default, ``127.0.0.1:9622``, without one); ``None`` when ``NODEAGENT_LISTEN``
    sets them (not read here: a command that needs them asks for them instead)."""
    if _variable(env, "LISTEN") is not None:
        return None
    listen = _master_settings(env).get("listen", ["127.0.0.1:9622"])
    if isinstance(listen, str):
        return (listen,)
    return tuple(str(item) for item in listen) if isinstance(listen, list) else None
