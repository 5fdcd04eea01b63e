"""sd_notify against real datagram sockets; the watchdog service on virtual time."""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from nodeagent._sdnotify import (
    notify,
    ready,
    reloading,
    run_watchdog,
    status,
    stopping,
    watchdog,
    watchdog_interval,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


def _bound(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.setblocking(False)
    return sock


@pytest.fixture(params=["path", "abstract"])
def manager(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket playing the service manager, and its NOTIFY_SOCKET value."""
    if request.param == "path":
        path = str(tmp_path / "notify.sock")
        with _bound(path) as sock:
            yield sock, path
    else:
        name = f"nodeagent-test-{secrets.token_hex(8)}"
        with _bound("\0" + name) as sock:
            yield sock, "@" + name


def received(sock: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


@pytest.mark.parametrize(
    ("send", "expected"),
    [
        (ready, "READY=1"),
        (stopping, "STOPPING=1"),
        (watchdog, "WATCHDOG=1"),
    ],
)
def test_messages(
    manager: tuple[socket.socket, str], send: Callable[..., bool], expected: str
) -> None:
    sock, address = manager
    assert send(env={"NOTIFY_SOCKET": address}) is True
    assert received(sock) == [expected]


def test_notify_and_status(manager: tuple[socket.socket, str]) -> None:
    sock, address = manager
    env = {"NOTIFY_SOCKET": address}
    assert notify("READY=1\nSTATUS=serving", env=env) is True
    assert status("draining: 3 jobs left", env=env) is True
    assert received(sock) == ["READY=1\nSTATUS=serving", "STATUS=draining: 3 jobs left"]


def test_reloading_carries_the_monotonic_clock(manager: tuple[socket.socket, str]) -> None:
    sock, address = manager
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert reloading(env={"NOTIFY_SOCKET": address}) is True
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    [message] = received(sock)
    m = re.fullmatch(r"RELOADING=1\nMONOTONIC_USEC=(\d+)", message)
    assert m is not None
    assert before <= int(m.group(1)) <= after


@pytest.mark.parametrize(
    "env",
    [{}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "vsock:2:1234"}, {"NOTIFY_SOCKET": "@"}],
    ids=["unset", "empty", "unsupported", "bare-at"],
)
def test_not_configured(env: dict[str, str]) -> None:
    assert notify("READY=1", env=env) is False
    assert ready(env=env) is False


def test_nobody_listening(tmp_path: Path) -> None:
    assert ready(env={"NOTIFY_SOCKET": str(tmp_path / "gone.sock")}) is False


def test_full_queue_does_not_block(tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with _bound(path):
        results = [watchdog(env={"NOTIFY_SOCKET": path}) for _ in range(1000)]
    assert results[0] is True
    assert results[-1] is False  # dropped, not blocked


@pytest.mark.parametrize(("state", "send"), [("", notify), ("a\nb", status)])
def test_bad_messages(state: str, send: Callable[..., bool]) -> None:
    with pytest.raises(ValueError, match="sd_notify"):
        send(state, env={"NOTIFY_SOCKET": "/nonexistent"})


@pytest.mark.parametrize(
    ("env", "interval"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "30000000"}, 30.0),
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": str(os.getpid())}, 0.5),
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": str(os.getpid() + 1)}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "-5"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({"WATCHDOG_USEC": "1000", "WATCHDOG_PID": "me"}, None),
    ],
)
def test_watchdog_interval(env: dict[str, str], interval: float | None) -> None:
    assert watchdog_interval(env=env) == interval


async def test_watchdog_pings_at_half_the_interval(
    manager: tuple[socket.socket, str], autojump_clock: trio.testing.MockClock
) -> None:
    sock, address = manager
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "4000000"}  # 4 s: a ping every 2 s
    pings: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(_collect, sock, pings)
        start = trio.current_time()
        with trio.move_on_after(61):
            await run_watchdog(env=env)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert [t - start for t in pings] == [2.0 * n for n in range(31)]  # 0, 2, …, 60


async def _collect(
    sock: socket.socket,
    pings: list[float],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    tsock = trio.socket.from_stdlib_socket(sock.dup())
    with tsock:
        task_status.started()
        while True:
            message = await tsock.recv(4096)
            assert message == b"WATCHDOG=1"
            pings.append(trio.current_time())


async def test_watchdog_returns_at_once_without_a_watchdog(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: run_watchdog(env={}, task_status=task_status))
    assert trio.current_time() == 0.0
