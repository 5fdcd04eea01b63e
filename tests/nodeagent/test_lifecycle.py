"""The one daemon lifecycle and its diff-based reload, with a toy daemon in this process.

The toy serves a greeting (reloadable) over a real Unix socket, optionally TCP, in a
temporary directory; the tests read what the lifecycle owns: directories, key, store,
runtime file, sd_notify messages, signals, the shutdown deadline and the reload.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import socket
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
import trio
import trio.testing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from nodeagent._lifecycle import (
    AddressUnavailable,
    DaemonSpec,
    Listening,
    Opened,
    Program,
    reload_config,
    reload_daemon,
    serve_daemon,
)
from nodeagent._serving._http11 import ListenerShare
from nodeagent._serving._hypercorn import SHUTDOWN_GRACE
from nodeagent._settings import (
    ConfigChanges,
    ConfigError,
    ListenAddress,
    _DaemonSettings,
    _field,
    _load_settings,
    _Section,
    merge_reloadable,
    reloadable_changes,
)

# --- a toy daemon -------------------------------------------------------------------------


class Mood(_Section):
    tone: str = _field("warm", reload=True, description="reloadable")
    volume: int = _field(1, reload=False, description="fixed")


class ToyConfig(_DaemonSettings):
    state_dir: Path = _field(..., reload=False, description="state")
    runtime_dir: Path = _field(..., reload=False, description="runtime")
    key_file: Path = _field(..., reload=False, description="pool key")
    listen: tuple[ListenAddress, ...] = _field((), reload=False, description="TCP")
    greeting: str = _field("hello", reload=True, description="what GET / answers")
    mood: Mood = _field(Mood(), reload=True, description="a section")


def write_config(path: Path, root: Path, **settings: Any) -> Path:
    values = {
        "state_dir": str(root / "state"),
        "runtime_dir": str(root / "run"),
        "key_file": str(root / "state" / "pool.key"),
        **settings,
    }
    path.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in values.items()))
    return path


def _toml(value: Any) -> str:
    """A TOML value: a dict as an inline table, anything else as JSON (the same in TOML)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def load_toy(path: Path) -> ToyConfig:
    return _load_settings(ToyConfig, path, default_path=path, environ={}, uid=os.geteuid())


class ToyStore:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@dataclass
class Toy(Program[ToyConfig, ToyStore]):
    config: ToyConfig
    path: Path
    http_server: Literal["hypercorn", "h11"] = "hypercorn"
    finish_requests: bool = False
    urls: list[str] = field(default_factory=list)
    greeting: str = ""
    store: ToyStore | None = None
    opened: Opened[ToyStore] | None = None
    events: list[str] = field(default_factory=list)
    reconfigured: trio.Event = field(default_factory=trio.Event)
    in_flight: trio.Event = field(default_factory=trio.Event)
    finish_forever: bool = False
    fail_build: bool = False
    share: ListenerShare | None = None

    def spec(self) -> DaemonSpec:
        c = self.config
        return DaemonSpec(
            name="toy",
            log=logging.getLogger("tests.toy"),
            directories=(c.state_dir, c.runtime_dir),
            key_file=c.key_file,
            create_key=True,
            audit_log=c.state_dir / "audit.log",
            socket=c.runtime_dir / "toy.sock",
            runtime_file=c.runtime_dir / "toy.json",
            runtime_info={"flavour": "toy"},
            listen=c.listen,
            tls=None,
            http_server=self.http_server,
            finish_requests=self.finish_requests,
            share=self.share,
        )

    def load_config(self) -> ToyConfig:
        return load_toy(self.path)

    def open_store(self) -> ToyStore:
        self.store = ToyStore()
        self.events.append("open")
        return self.store

    def build(self, opened: Opened[ToyStore]) -> ASGIApp:
        if self.fail_build:
            raise ConfigError("the toy refuses to start")
        self.opened = opened
        self.greeting = self.config.greeting
        self.events.append("build")

        async def greet(request: Request) -> PlainTextResponse:
            trusted = "yes" if request.scope.get("nodeagent.unix") else "no"
            return PlainTextResponse(self.greeting, headers={"x-trusted": trusted})

        async def slow(request: Request) -> PlainTextResponse:
            self.in_flight.set()
            await trio.sleep(0.5)
            return PlainTextResponse("late")

        return Starlette(routes=[Route("/", greet), Route("/slow", slow)])

    async def start(self, services: trio.Nursery) -> None:
        self.events.append("start")

    async def serving(self, services: trio.Nursery, listening: Listening) -> None:
        self.events.append(f"serving {len(listening.unix)}+{len(listening.tcp)}")

    async def finish(self) -> None:
        self.events.append("finish")
        if self.finish_forever:
            await trio.sleep_forever()

    def reconfigure(self, running: ToyConfig, changes: ConfigChanges) -> None:
        if running.greeting == "refuse":
            raise ConfigError("the toy refuses that greeting")
        self.greeting = running.greeting
        self.events.append("reconfigure " + ",".join(changes.applied))
        self.reconfigured.set()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


def toy(root: Path, **settings: Any) -> Toy:
    path = write_config(root / "toy.toml", root, **settings)
    return Toy(config=load_toy(path), path=path)


@asynccontextmanager
async def serving(daemon: Toy, *, handle_signals: bool = False) -> AsyncIterator[trio.Event]:
    """The daemon served in this process; yields its stop event, sets it on the way out."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(serve_daemon, daemon, stop=stop, handle_signals=handle_signals)
        )
        try:
            yield stop
        finally:
            stop.set()


async def get(daemon: Toy, url: str | None = None, path: str = "/") -> httpx.Response:
    if url is None:
        transport = httpx.AsyncHTTPTransport(uds=str(daemon.spec().socket))
        async with httpx.AsyncClient(transport=transport, base_url="http://toy") as client:
            return await client.get(path)
    async with httpx.AsyncClient(base_url=url) as client:
        return await client.get(path)


@pytest.fixture
def notify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket playing the service manager (``$NOTIFY_SOCKET``)."""
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.setblocking(False)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        yield sock


def messages(sock: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode().split("\n")[0])
        except BlockingIOError:
            return out


# --- the lifecycle ------------------------------------------------------------------------


@pytest.mark.parametrize("http_server", ["hypercorn", "h11"])
@pytest.mark.parametrize("listen", [[], ["127.0.0.1:0"]], ids=["no-tcp", "tcp"])
async def test_serves_on_the_socket_and_its_listeners_then_cleans_up(
    root: Path, notify: socket.socket, http_server: Literal["hypercorn", "h11"], listen: list[str]
) -> None:
    daemon = toy(root, listen=listen)
    daemon.http_server = http_server
    spec = daemon.spec()
    async with serving(daemon):
        assert daemon.events == ["open", "build", "start", f"serving 1+{len(listen)}"]
        for directory in (root / "state", root / "run"):
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_IMODE(spec.key_file.stat().st_mode) == 0o600
        assert daemon.opened is not None
        assert daemon.opened.audit is not None
        assert stat.S_IMODE(spec.socket.stat().st_mode) == 0o660
        info = json.loads(spec.runtime_file.read_text())
        assert info == {
            "pid": os.getpid(),
            "urls": daemon.urls,
            "socket": str(spec.socket),
            "flavour": "toy",
        }
        assert len(daemon.urls) == 1 + len(listen)
        assert daemon.urls[0].startswith("http://unix")
        over_socket = await get(daemon)
        assert (over_socket.text, over_socket.headers["x-trusted"]) == ("hello", "yes")
        if listen:
            over_tcp = await get(daemon, daemon.urls[1])
            assert (over_tcp.text, over_tcp.headers["x-trusted"]) == ("hello", "no")
        assert messages(notify) == ["READY=1", f"STATUS=toy serving on {', '.join(daemon.urls)}"]
    assert messages(notify) == ["STOPPING=1"]
    assert daemon.events[-1] == "finish"
    assert daemon.store is not None
    assert daemon.store.closed
    assert not spec.socket.exists()
    assert not spec.runtime_file.exists()
    assert spec.key_file.exists()


async def test_an_error_at_build_is_raised_as_itself_and_leaves_nothing(root: Path) -> None:
    daemon = toy(root)
    daemon.fail_build = True
    with pytest.raises(ConfigError, match="refuses to start"):
        await serve_daemon(daemon, stop=trio.Event(), handle_signals=False)
    assert daemon.store is not None
    assert daemon.store.closed
    assert not daemon.spec().socket.exists()
    assert not daemon.spec().runtime_file.exists()


async def test_another_daemon_on_the_socket_is_left_alone(root: Path) -> None:
    daemon = toy(root)
    spec = daemon.spec()
    (root / "run").mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(spec.socket))
        other.listen()
        spec.runtime_file.write_text('{"pid": 1}')
        with pytest.raises(AddressUnavailable, match="another daemon is listening"):
            await serve_daemon(daemon, stop=trio.Event(), handle_signals=False)
        assert spec.socket.exists()
        assert spec.runtime_file.read_text() == '{"pid": 1}'


async def test_final_work_is_shielded_and_cut_after_the_grace(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    daemon = toy(root)
    daemon.finish_forever = True
    async with serving(daemon) as stop:
        stop.set()
        stopped_at = trio.current_time()
    assert trio.current_time() - stopped_at == SHUTDOWN_GRACE
    assert daemon.events[-1] == "finish"
    assert not daemon.spec().socket.exists()


@pytest.mark.parametrize("finish_requests", [True, False])
async def test_requests_in_flight_at_stop_are_answered_or_cut(
    root: Path, finish_requests: bool
) -> None:
    daemon = toy(root)
    daemon.finish_requests = finish_requests
    replies: list[str] = []

    async def slow_request() -> None:
        try:
            replies.append((await get(daemon, path="/slow")).text)
        except httpx.TransportError:
            replies.append("cut")

    async with trio.open_nursery() as clients, serving(daemon) as stop:
        clients.start_soon(slow_request)
        await daemon.in_flight.wait()  # the app answers 0.5 s later
        stop.set()
    assert replies == (["late"] if finish_requests else ["cut"])


# --- the reload ---------------------------------------------------------------------------


def test_merge_keeps_fixed_keys_and_takes_reloadable_ones_key_by_key(root: Path) -> None:
    old = load_toy(write_config(root / "a.toml", root))
    new = load_toy(
        write_config(
            root / "b.toml",
            root / "elsewhere",
            greeting="bonjour",
            listen=["127.0.0.1:1"],
            mood={"tone": "cool", "volume": 9},
        )
    )
    merged = merge_reloadable(old, new)
    assert (merged.greeting, merged.mood.tone) == ("bonjour", "cool")
    assert (merged.runtime_dir, merged.listen, merged.mood.volume) == (root / "run", (), 1)
    changes = reloadable_changes(old, new)
    assert dict(changes.applied) == {"greeting": "bonjour", "mood.tone": "cool"}
    assert changes.ignored == ("key_file", "listen", "mood.volume", "runtime_dir", "state_dir")
    assert merge_reloadable(old, old) is old


async def test_reload_applies_reloadable_keys_and_reports_the_others(
    root: Path, notify: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tests.toy")
    daemon = toy(root)
    spec = daemon.spec()
    async with serving(daemon):
        messages(notify)
        write_config(daemon.path, root, greeting="bonjour", runtime_dir=str(root / "run2"))
        changes = reload_daemon(daemon)
        assert changes is not None
        assert dict(changes.applied) == {"greeting": "bonjour"}
        assert changes.ignored == ("runtime_dir",)
        assert (await get(daemon)).text == "bonjour"
        assert daemon.config.greeting == "bonjour"
        assert daemon.config.runtime_dir == root / "run"
        assert daemon.spec() == spec
        assert messages(notify) == ["RELOADING=1", "READY=1"]
        assert "reload: changed keys that take effect only after a restart: runtime_dir" in (
            caplog.text
        )
        assert "reloaded: greeting" in caplog.text
    assert not spec.socket.exists()
    assert not spec.runtime_file.exists()
    assert not (root / "run2").exists()


@pytest.mark.parametrize(
    "text",
    ['greeting = "bonjour"\nsurprise = 1\n', 'greeting = "refuse"\n', "greeting = [\n"],
    ids=["unknown key", "refused by the daemon", "not TOML"],
)
async def test_a_refused_reload_changes_nothing(
    root: Path, notify: socket.socket, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    daemon = toy(root)
    before = daemon.config
    async with serving(daemon):
        messages(notify)
        daemon.path.write_text(daemon.path.read_text() + text)
        assert reload_daemon(daemon) is None
        assert daemon.config is before
        assert (await get(daemon)).text == "hello"
        assert messages(notify) == ["RELOADING=1", "READY=1"]
        assert "reload refused, configuration unchanged" in caplog.text
        assert not [e for e in daemon.events if e.startswith("reconfigure")]


def test_reload_config_without_a_reloadable_change_calls_no_hook(root: Path) -> None:
    daemon = toy(root)
    new = load_toy(write_config(root / "b.toml", root / "elsewhere"))
    changes = reload_config(daemon, new)
    assert changes is not None
    assert dict(changes.applied) == {}
    assert daemon.events == []
    assert daemon.config.state_dir == root / "state"


async def test_signals_reload_and_stop(root: Path) -> None:
    daemon = toy(root)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(serve_daemon, daemon, stop=stop))
        write_config(daemon.path, root, greeting="hej")
        os.kill(os.getpid(), signal.SIGHUP)
        with trio.fail_after(10):
            await daemon.reconfigured.wait()
        assert (await get(daemon)).text == "hej"
        os.kill(os.getpid(), signal.SIGTERM)
        with trio.fail_after(10):
            await stop.wait()
    assert daemon.events[-1] == "finish"
    assert not daemon.spec().socket.exists()
