"""The one lifecycle of the three daemons (agent, master, defrag), and their one reload.

Modelled on hypercorn's trio worker (``hypercorn/trio/run.py``): one function,
:func:`serve_daemon`, with nested nurseries, readiness reported through
``task_status.started``, a shutdown deadline for in-flight requests and shielded, bounded
final work. A daemon supplies what differs as parameters (its :class:`DaemonSpec`) and
hooks (the methods of :class:`Program`)::

    serve_daemon(program)
    ├─ directories (0700); the pool key (made if missing, when the spec says so)
    ├─ program.open_store(), the audit log            closed at the end, always
    ├─ program.build(opened) → the ASGI app           its errors are raised as themselves
    └─ services nursery
       ├─ program.start(services)                     e.g. the agent re-adopts its jobs
       ├─ servers nursery
       │  ├─ the Unix socket (0660, every caller ADMINISTRATOR), the TCP listeners
       │  │  (optional TLS; ``listen = []``: none)
       │  ├─ program.serving(services, listening)     e.g. the master's reconcile loop
       │  ├─ signals (SIGTERM/SIGINT: stop, SIGHUP: reload), the watchdog
       │  ├─ the runtime file; READY=1, STATUS        the file is removed at the end, always
       │  └─ stop: STOPPING=1; requests in flight get SHUTDOWN_GRACE, or are cut at once
       ├─ program.finish()                            shielded, SHUTDOWN_GRACE at most
       └─ the services are cancelled

Reload (:func:`reload_daemon`, on SIGHUP): the file is read again; an invalid file is
logged and changes nothing. Otherwise the keys that need a restart keep their running
values (and are logged as such), the reloadable ones go to :meth:`Program.reconfigure`,
which may refuse them (then nothing changes either), and ``READY=1`` follows.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar

import trio
from starlette.types import ASGIApp

from nodeagent import _sdnotify
from nodeagent._audit import AuditLog
from nodeagent._auth import generate_key, load_key
from nodeagent._http import trusted
from nodeagent._http11 import serve_http
from nodeagent._serving import SHUTDOWN_GRACE, free_stale_socket, serve, write_runtime_info
from nodeagent._settings import (
    ConfigChanges,
    ConfigError,
    _DaemonSettings,
    merge_reloadable,
    reloadable_changes,
)

__all__ = [
    "DaemonSpec",
    "Listening",
    "Opened",
    "Program",
    "reload_config",
    "reload_daemon",
    "serve_daemon",
    "tls_files",
]


class _Closeable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_DaemonSettings)
S = TypeVar("S", bound=_Closeable)
P = TypeVar("P", bound="Program[Any, Any]")


@dataclass(frozen=True, kw_only=True)
class DaemonSpec:
    """A daemon's parameters to the lifecycle, from the configuration it started with.

    ``name`` begins its log lines and its ``STATUS=``; ``log`` is its logger.
    ``directories`` are created with mode 0700. The pool key at ``key_file`` is made when
    missing if ``create_key``, else a missing key is a
    :class:`~nodeagent._auth.KeyFileError`. ``audit_log``: none for a daemon that audits
    nothing. ``runtime_file`` gets ``{"pid", "urls", "socket", **runtime_info}``.
    ``tcp_server``: hypercorn's trio worker, or :mod:`nodeagent._http11` for many small
    requests. ``finish_requests``: at shutdown, requests in flight get
    :data:`~nodeagent._serving.SHUTDOWN_GRACE` to be answered; otherwise they are cut at
    once (right for a daemon that saves its state before every reply).
    """

    name: str
    log: logging.Logger
    directories: tuple[Path, ...]
    key_file: Path
    create_key: bool
    audit_log: Path | None
    socket: Path
    runtime_file: Path
    runtime_info: Mapping[str, str] = field(default_factory=dict)
    listen: tuple[str, ...]
    tls: tuple[Path, Path] | None
    tcp_server: Literal["hypercorn", "h11"] = "hypercorn"
    finish_requests: bool = False


def tls_files(cert: Path | None, key: Path | None) -> tuple[Path, Path] | None:
    """``(cert, key)`` when both are given (the configurations require both or neither)."""
    return None if cert is None or key is None else (cert, key)


@dataclass(frozen=True, kw_only=True)
class Opened(Generic[S]):
    """What the lifecycle opened for the daemon, and closes after it: key, store, audit log."""

    key: bytes
    store: S
    audit: AuditLog | None


@dataclass(frozen=True, kw_only=True)
class Listening:
    """The bound URLs: the Unix socket's, then the TCP listeners' (in ``listen`` order)."""

    unix: tuple[str, ...]
    tcp: tuple[str, ...]

    @property
    def urls(self) -> list[str]:
        return [*self.unix, *self.tcp]


class Program(abc.ABC, Generic[C, S]):
    """What one daemon adds to the lifecycle: the hooks its class defines.

    ``config`` is the running configuration: the lifecycle replaces it after a reload
    (keys that need a restart keep their values). ``urls`` is set once the daemon listens.
    Every hook reads ``self.config``.
    """

    config: C
    urls: list[str]

    @abc.abstractmethod
    def spec(self) -> DaemonSpec:
        """The lifecycle's parameters (from the fixed keys of ``config``)."""

    @abc.abstractmethod
    def load_config(self) -> C:
        """Read the configuration file again; raises :class:`ConfigError`."""

    @abc.abstractmethod
    def open_store(self) -> S:
        """Open the daemon's state store; the lifecycle closes it at the end."""

    @abc.abstractmethod
    def build(self, opened: Opened[S]) -> ASGIApp:
        """Make the daemon's objects from its saved state; returns its API.

        Runs outside the nurseries, so an error (:class:`ConfigError`, say) reaches the
        caller as itself; nothing is listening yet.
        """

    async def start(self, services: trio.Nursery) -> None:
        """Start in ``services`` what must run before the daemon listens (default: nothing)."""

    @abc.abstractmethod
    async def serving(self, services: trio.Nursery, listening: Listening) -> None:
        """Start in ``services`` what needs the bound addresses; then the daemon is ready."""

    async def finish(self) -> None:
        """Last work once the servers have stopped, such as a final push (default: none).

        Shielded from cancellation and cut after :data:`~nodeagent._serving.SHUTDOWN_GRACE`.
        """

    @abc.abstractmethod
    def reconfigure(self, running: C, changes: ConfigChanges) -> None:
        """Apply the reloadable keys of ``running`` (``changes.applied`` names the changed
        ones) to the running daemon.

        Raises :class:`ConfigError` to refuse the new values, having changed nothing. Called
        only when a reloadable key changed; ``config`` is still the previous configuration.
        """


async def serve_daemon(
    program: P,
    *,
    stop: trio.Event,
    handle_signals: bool = True,
    task_status: trio.TaskStatus[P] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``program`` until ``stop`` is set (or SIGTERM/SIGINT, with ``handle_signals``).

    Reports ``program`` as started once it serves (and ``READY=1``). ``handle_signals`` is
    off when the daemon is embedded in another trio program, whose signals they are. On the
    way out, however it ends, the runtime file and the socket this run bound are removed
    and the store and the audit log closed. A pool key that cannot be read, a store that
    cannot be opened, an error of :meth:`Program.build` or another daemon on the socket
    raise before anything listens.
    """
    spec = program.spec()
    for directory in spec.directories:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if spec.create_key and not spec.key_file.exists():
        generate_key(spec.key_file)
        spec.log.info("generated a new pool key in %s", spec.key_file)
    key = load_key(spec.key_file)
    with contextlib.ExitStack() as opened:
        store = program.open_store()
        opened.callback(store.close)
        audit = None
        if spec.audit_log is not None:
            audit = opened.enter_context(AuditLog(spec.audit_log))
        app = program.build(Opened(key=key, store=store, audit=audit))
        free_stale_socket(spec.socket)
        try:
            await _serve(
                program,
                spec=spec,
                app=app,
                stop=stop,
                handle_signals=handle_signals,
                task_status=task_status,
            )
        finally:
            for leftover in (spec.runtime_file, spec.socket):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()


async def _serve(
    program: P,
    *,
    spec: DaemonSpec,
    app: ASGIApp,
    stop: trio.Event,
    handle_signals: bool,
    task_status: trio.TaskStatus[P],
) -> None:
    async with trio.open_nursery() as services:
        await program.start(services)
        async with trio.open_nursery() as servers:
            unix = await serve(
                servers, trusted(app), [f"unix:{spec.socket}"], shutdown=stop.wait, unix=True
            )
            if spec.tcp_server == "h11":
                tcp = await serve_http(servers, app, list(spec.listen), tls=spec.tls)
            else:
                tcp = await serve(servers, app, list(spec.listen), shutdown=stop.wait, tls=spec.tls)
            listening = Listening(unix=tuple(unix), tcp=tuple(tcp))
            program.urls = listening.urls
            await program.serving(services, listening)
            if handle_signals:
                await services.start(_signals, program, stop)
            await services.start(_sdnotify.run_watchdog)
            # Last: whoever finds the runtime file finds a daemon that answers and that
            # takes its signals (a SIGHUP before the receiver is open would end it).
            write_runtime_info(
                spec.runtime_file, listening.urls, socket=str(spec.socket), **spec.runtime_info
            )
            shown = ", ".join(listening.urls)
            _sdnotify.ready()
            _sdnotify.status(f"{spec.name} serving on {shown}")
            spec.log.info("%s ready on %s", spec.name, shown)
            task_status.started(program)
            await stop.wait()
            _sdnotify.stopping()
            spec.log.info("%s stopping", spec.name)
            if spec.finish_requests:
                # The servers return once their requests in flight are answered
                # (hypercorn's graceful timeout is SHUTDOWN_GRACE); this is the backstop.
                servers.cancel_scope.deadline = trio.current_time() + SHUTDOWN_GRACE + 1
            else:
                servers.cancel_scope.cancel()
        with trio.move_on_after(SHUTDOWN_GRACE, shield=True):
            await program.finish()
        services.cancel_scope.cancel()


async def _signals(
    program: Program[Any, Any],
    stop: trio.Event,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """SIGTERM/SIGINT set ``stop``, SIGHUP reloads; started once the signals are caught."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as received:
        task_status.started()
        async for signum in received:
            if signum == signal.SIGHUP:
                reload_daemon(program)
            else:
                program.spec().log.info("received %s", signal.Signals(signum).name)
                stop.set()


def reload_daemon(program: Program[C, Any]) -> ConfigChanges | None:
    """SIGHUP: read the file again and apply it with :func:`reload_config`.

    Sends ``RELOADING=1`` first and ``READY=1`` at the end, whatever happened. Returns the
    changes, or None when the reload was refused (logged; nothing changed).
    """
    log = program.spec().log
    _sdnotify.reloading()
    try:
        try:
            new = program.load_config()
        except ConfigError as exc:
            log.error("reload refused, configuration unchanged: %s", exc)
            return None
        return reload_config(program, new)
    finally:
        _sdnotify.ready()


def reload_config(program: Program[C, Any], new: C) -> ConfigChanges | None:
    """Apply the reloadable keys of ``new`` to the running ``program``.

    The changed keys that need a restart keep their running values and are logged as such,
    so the daemon goes on with (and at shutdown cleans up) the directories, sockets and
    runtime file it started with. When :meth:`Program.reconfigure` refuses the new values,
    the refusal is logged, ``program.config`` is left as it was and None is returned;
    otherwise ``program.config`` becomes the merged configuration and the changes are
    returned.
    """
    log = program.spec().log
    old = program.config
    changes = reloadable_changes(old, new)
    if changes.applied:
        running = merge_reloadable(old, new)
        try:
            program.reconfigure(running, changes)
        except ConfigError as exc:
            log.error("reload refused, configuration unchanged: %s", exc)
            return None
        program.config = running
    if changes.ignored:
        log.warning(
            "reload: changed keys that take effect only after a restart: %s",
            ", ".join(changes.ignored),
        )
    log.info("reloaded: %s", ", ".join(changes.applied) or "nothing changed")
    return changes
