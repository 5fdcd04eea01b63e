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

A daemon that cannot start raises before anything answers, with one exception whose text
is one line naming the file or address and what to do; :func:`start_failure` gives its
exit status (``docs/cli.md``, ``docs/systemd.md``)::

    status  raised                                  what
    2       ConfigError, KeyFileError               the configuration file, the pool key,
                                                    the TLS certificate or key
    7       StateUnusable                           a directory, the store (its StoreError
                                                    at open or build) or the audit log
                                                    cannot be used until the operator acts
                                                    (corrupt, read-only, permissions)
    8       StateLost                               the store is empty but the daemon's other
                                                    files show a previous life (agent)
    9       AddressUnavailable, StateInUse,         not to be had now, a restart may do:
            StateFull                               the Unix socket, a TCP listener or the
                                                    state directory is taken (another daemon,
                                                    a port in use), an address cannot be
                                                    bound, the state's file system is full

Jobs and other processes are never touched on the way out.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import json
import logging
import os
import signal
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

import trio
from starlette.types import ASGIApp

from nodeagent import _sdnotify
from nodeagent._audit import AuditLog
from nodeagent._auth import KeyFileError, generate_key, load_key
from nodeagent._serving._http import trusted
from nodeagent._serving._http11 import READ_TIMEOUT, ListenerShare, serve_http, serve_unix_http
from nodeagent._serving._hypercorn import (
    SHUTDOWN_GRACE,
    free_stale_socket,
    serve,
    write_runtime_info,
)
from nodeagent._settings import (
    ConfigChanges,
    ConfigError,
    _DaemonSettings,
    merge_reloadable,
    reloadable_changes,
)
from nodeagent._store import StoreError, StoreFull, StoreUnavailable

__all__ = [
    "EXIT_CONFIG",
    "EXIT_STATE",
    "EXIT_STATE_LOST",
    "EXIT_UNAVAILABLE",
    "AddressUnavailable",
    "DaemonSpec",
    "Listening",
    "Opened",
    "Program",
    "StartFailed",
    "StateFull",
    "StateInUse",
    "StateLost",
    "StateUnreachable",
    "StateUnusable",
    "reload_config",
    "reload_daemon",
    "serve_daemon",
    "start_failure",
    "tls_files",
]

#: Exit status of a daemon whose configuration (file, pool key, TLS files) is unusable.
EXIT_CONFIG = 2
#: Exit status of a daemon whose state (a directory, the store, the audit log) is unusable.
EXIT_STATE = 7
#: Exit status of a daemon that found its store empty after a previous life.
EXIT_STATE_LOST = 8
#: Exit status of a daemon that cannot have now what it needs (its socket, a TCP address,
#: its state directory, room on the state's file system): a restart may succeed.
EXIT_UNAVAILABLE = 9


class StartFailed(Exception):
    """A daemon cannot start; the text is one line naming the file or address and what
    to do, ``exit_status`` the daemon's exit status. Nothing listens yet."""

    exit_status: ClassVar[int] = EXIT_STATE


class StateUnusable(StartFailed):
    """A directory of the daemon, its store or its audit log cannot be used until the
    operator acts: not creatable or writable, not a sound database, a state this version
    cannot read."""

    exit_status: ClassVar[int] = EXIT_STATE


class StateLost(StartFailed):
    """The store holds nothing, yet the daemon's other files show a previous life: the
    operator decides how to start (the agent's ``--recover`` or ``--fresh``)."""

    exit_status: ClassVar[int] = EXIT_STATE_LOST


class AddressUnavailable(StartFailed):
    """The Unix socket or a TCP listener cannot be bound: another daemon answers on the
    socket, the port is in use, the address is not on this host."""

    exit_status: ClassVar[int] = EXIT_UNAVAILABLE


class StateInUse(StartFailed):
    """Another daemon of the same kind runs on this state directory (it holds the lock)."""

    exit_status: ClassVar[int] = EXIT_UNAVAILABLE


class StateFull(StartFailed):
    """The store cannot be opened because its file system is full (a restart may succeed
    once space is freed)."""

    exit_status: ClassVar[int] = EXIT_UNAVAILABLE


class StateUnreachable(StartFailed):
    """The store cannot be reached now (etcd: no endpoint answered); a restart may
    succeed once it answers."""

    exit_status: ClassVar[int] = EXIT_UNAVAILABLE


def start_failure(exc: BaseException) -> tuple[int, str] | None:
    """The exit status and the one line for ``exc`` when it says why a daemon cannot
    start; ``None`` otherwise (a failure while it ran, such as a store that cannot be
    written, or a bug: its traceback shows, and its unit restarts it). An exception group
    holding one such error is that error."""
    if isinstance(exc, BaseExceptionGroup):
        exc = _only(exc)
    if isinstance(exc, StartFailed):
        return exc.exit_status, str(exc)
    if isinstance(exc, ConfigError | KeyFileError):
        return EXIT_CONFIG, str(exc)
    return None


class _Closeable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_DaemonSettings)
S = TypeVar("S", bound=_Closeable)
P = TypeVar("P", bound="Program[Any, Any]")


@dataclass(frozen=True, kw_only=True)
class DaemonSpec:
    """A daemon's parameters to the lifecycle, from the configuration it started with.

    ``name`` begins its log lines and its ``STATUS=``; ``log`` is its logger.
    ``directories`` are created with mode 0700 and must be writable; the first is the
    state directory, where the daemon holds ``<runtime file's stem>.lock`` locked for its
    whole life, so that no two daemons of a kind share a state. The pool key at
    ``key_file`` is made when missing if ``create_key``, else a missing key is a
    :class:`~nodeagent._auth.KeyFileError`. ``audit_log``: none for a daemon that audits
    nothing. ``runtime_file`` gets ``{"pid", "urls", "socket", **runtime_info}``.
    ``http_server``: what serves the Unix socket and the TCP listeners: hypercorn's trio
    worker, or :mod:`nodeagent._serving._http11` for many small requests and for loaded
    daemons (a request takes fewer turns of the event loop there: fewer waits behind the
    other tasks' steps). ``finish_requests``: at shutdown, requests in flight get
    :data:`~nodeagent._serving._hypercorn.SHUTDOWN_GRACE` to be answered; otherwise they are cut at
    once (right for a daemon that saves its state before every reply). ``read_timeout``:
    every listener closes a connection whose request stalls this many seconds. ``share``:
    the h11 server's TCP listeners are shared with worker processes
    (:class:`~nodeagent._serving._http11.ListenerShare`).
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
    http_server: Literal["hypercorn", "h11"] = "hypercorn"
    finish_requests: bool = False
    read_timeout: float = READ_TIMEOUT
    share: ListenerShare | None = None


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
    _stop: trio.Event

    def stop(self) -> None:
        """Ask the daemon to stop (the agent's jobs keep running)."""
        self._stop.set()

    def reload(self) -> ConfigChanges | None:
        """What SIGHUP does: :func:`reload_daemon`."""
        return reload_daemon(self)

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

        Shielded from cancellation and cut after
        :data:`~nodeagent._serving._hypercorn.SHUTDOWN_GRACE`.
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
    (not another daemon's), the store and the audit log closed and the state lock let go.

    Raises before anything listens (see the module docstring for the exit statuses): a
    directory that cannot be created or written, the audit log that cannot be opened
    (:class:`StateUnusable`); another daemon on the state directory
    (:class:`StateInUse`); a pool key that cannot be read (``KeyFileError``), TLS files
    that do not load (:class:`ConfigError`); another daemon on the socket, a TCP address
    that cannot be bound (:class:`AddressUnavailable`); a ``StoreError`` of
    :meth:`Program.open_store` or :meth:`Program.build` (a store that cannot be opened or
    whose state cannot be read) as :class:`StateUnusable`, or as :class:`StateFull` when
    its file system is full; any other error of :meth:`Program.build` as itself.
    """
    spec = program.spec()
    for directory in spec.directories:
        _make_directory(directory)
    with contextlib.ExitStack() as opened:
        opened.enter_context(_state_lock(spec))
        if spec.create_key and not spec.key_file.exists():
            generate_key(spec.key_file)
            spec.log.info("generated a new pool key in %s", spec.key_file)
        key = load_key(spec.key_file)
        if spec.tls is not None:
            _check_tls(*spec.tls)
        try:
            free_stale_socket(spec.socket)
        except RuntimeError as exc:  # the one error it raises: a daemon answers there
            raise AddressUnavailable(
                f"{exc}: stop that daemon first, or give this one another runtime_dir"
            ) from None
        except OSError as exc:
            raise AddressUnavailable(
                f"cannot use the socket {spec.socket}: {exc.strerror}"
            ) from exc
        try:
            store = program.open_store()
        except StoreFull as exc:
            raise StateFull(str(exc)) from exc
        except StoreUnavailable as exc:
            raise StateUnreachable(str(exc)) from exc
        except StoreError as exc:
            raise StateUnusable(str(exc)) from exc
        opened.callback(store.close)
        audit = None
        if spec.audit_log is not None:
            audit = opened.enter_context(_open_audit(spec.audit_log))
        try:
            app = program.build(Opened(key=key, store=store, audit=audit))
        except StoreError as exc:  # a saved state it cannot read
            raise StateUnusable(str(exc)) from exc
        try:
            await _serve(
                program,
                spec=spec,
                app=app,
                stop=stop,
                handle_signals=handle_signals,
                task_status=task_status,
            )
        except BaseExceptionGroup as group:
            # Bound in a nursery: a failure to listen arrives wrapped; raise it as itself.
            failure = _only(group)
            if isinstance(failure, StartFailed):
                raise failure from None
            raise
        finally:
            for leftover in (spec.runtime_file, spec.socket):
                if _ours(leftover):
                    with contextlib.suppress(FileNotFoundError):
                        leftover.unlink()


def _only(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a group holds, through nested groups; else the group itself."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _ours(path: Path) -> bool:
    """Whether this run may remove ``path``: the socket it bound (another daemon's was
    refused before), or a runtime file naming this process (not one that another daemon
    sharing the runtime directory wrote)."""
    if path.suffix != ".json":
        return True
    try:
        return bool(json.loads(path.read_text()).get("pid") == os.getpid())
    except (OSError, ValueError, AttributeError):
        return False


@contextlib.contextmanager
def _state_lock(spec: DaemonSpec) -> Iterator[None]:
    """Hold ``<state directory>/<runtime file's stem>.lock`` (``flock``, exclusive) while
    the daemon runs; raises :class:`StateInUse` when another process holds it."""
    path = spec.directories[0] / f"{spec.runtime_file.stem}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StateUnusable(f"cannot open the lock file {path}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise StateInUse(
                f"another daemon (pid {holder}) runs on the state directory "
                f"{spec.directories[0]}: stop it first, or give this one another state_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _make_directory(directory: Path) -> None:
    """Create ``directory`` (0700) if missing; it must be writable. Raises
    :class:`StateUnusable` naming it and what to do."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise StateUnusable(
            f"cannot create the directory {directory}: {exc.strerror}: create it, or name "
            "another one in the configuration"
        ) from exc
    try:
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError as exc:
        raise StateUnusable(f"cannot use the directory {directory}: {exc.strerror}") from exc
    if read_only:
        raise StateUnusable(
            f"the directory {directory} is on a read-only file system: remount it "
            "read-write, or name another directory in the configuration"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StateUnusable(
            f"the directory {directory} is not writable by this user: fix its owner or mode"
        )


def _open_audit(path: Path) -> AuditLog:
    try:
        return AuditLog(path)
    except OSError as exc:
        raise StateUnusable(
            f"cannot open the audit log {path}: {exc.strerror}: fix the file's owner or mode, "
            "or name another audit_log"
        ) from exc


def _check_tls(cert: Path, key: Path) -> None:
    """Load the TLS certificate and key once, so that a bad pair is a configuration error
    before anything listens."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except OSError as exc:
        what = exc.strerror or str(exc)
        raise ConfigError(
            f"tls_cert {cert} / tls_key {key}: {what}: name a readable PEM certificate and its key"
        ) from exc


def _address_failure(binds: list[str], exc: OSError) -> AddressUnavailable:
    """One line for a listener that cannot be bound, with what to do."""
    where = ", ".join(binds)
    advice = {
        errno.EADDRINUSE: "another process listens there: stop it, or change listen",
        errno.EADDRNOTAVAIL: "no such address on this host: change listen",
        errno.EACCES: "a port below 1024 needs root or CAP_NET_BIND_SERVICE: change listen",
    }.get(exc.errno or 0, "change listen")
    if exc.errno is None and "AF_UNIX path too long" in str(exc):
        advice = "a Unix socket's path holds at most 107 bytes: give a shorter runtime_dir"
    return AddressUnavailable(f"cannot listen on {where}: {exc.strerror or exc}: {advice}")


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
            binds = [f"unix:{spec.socket}"]
            try:
                wait = spec.read_timeout
                if spec.http_server == "h11":
                    unix = await serve_unix_http(
                        servers, trusted(app), spec.socket, read_timeout=wait
                    )
                else:
                    unix = await serve(
                        servers,
                        trusted(app),
                        binds,
                        shutdown=stop.wait,
                        unix=True,
                        read_timeout=wait,
                    )
                listen = list(spec.listen)
                # the relay socket is bound with the TCP listeners
                relay = [] if spec.share is None else [f"unix:{spec.share.relay}"]
                binds = listen + relay
                if spec.http_server == "h11":
                    tcp = await serve_http(
                        servers, app, listen, tls=spec.tls, read_timeout=wait, share=spec.share
                    )
                else:
                    tcp = await serve(
                        servers, app, listen, shutdown=stop.wait, tls=spec.tls, read_timeout=wait
                    )
            except OSError as exc:
                raise _address_failure(binds, exc) from exc
            except BaseExceptionGroup as group:  # hypercorn binds inside its own nurseries
                if isinstance(leaf := _only(group), OSError):
                    raise _address_failure(binds, leaf) from leaf
                raise
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
