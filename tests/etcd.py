"""A real etcd server for tests: one member on loopback, its data in a temporary directory.

:class:`EtcdServer` starts Debian's ``etcd`` (installed by ``scripts/ensure-etcd``) on two
free loopback ports, waits until it answers, and ends it by its pid; :meth:`EtcdServer.stop`
and :meth:`EtcdServer.start` again keep its data (etcd going away and coming back). The
``etcd_server`` fixture skips a test when etcd is not installed, except in CI (``$CI``
set), where it fails.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Self

import httpx
import pytest

from tests.harness import TLS_CONTEXT

__all__ = ["EtcdServer", "etcd_server", "free_port", "shared_etcd"]


def free_port() -> int:
    """A loopback TCP port free now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EtcdServer:
    """One etcd member; use as a context manager (ends it, by pid, on exit). ``args``: more
    of etcd's own flags (``--max-request-bytes=…``)."""

    def __init__(self, root: Path, *, args: Sequence[str] = ()) -> None:
        self.root = root
        self.args = tuple(args)
        root.mkdir(parents=True, exist_ok=True)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = root / "etcd.log"

    def start(self) -> Self:
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                "etcd",
                "--name=test",
                f"--data-dir={self.root / 'data'}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=test={peer}",
                "--log-level=warn",
                "--logger=zap",
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 20
        with httpx.Client(verify=TLS_CONTEXT) as client:  # one client for every poll
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"etcd exited early:\n{self.log_path.read_text()}")
                with contextlib.suppress(httpx.HTTPError):
                    reply = client.post(f"{self.url}/v3/kv/range", json={"key": "AA=="})
                    if reply.status_code == 200:
                        return self
                if time.monotonic() > deadline:
                    raise TimeoutError(f"etcd did not answer:\n{self.log_path.read_text()}")
                time.sleep(0.05)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """End the member (its data stays)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(signal.SIGKILL)


def have_etcd() -> None:
    """Skip (fail in CI) when etcd is not installed."""
    if shutil.which("etcd") is None:
        if os.environ.get("CI"):
            pytest.fail("etcd is missing in CI: scripts/ensure-etcd should install it")
        pytest.skip("etcd is not installed (Debian package etcd-server; scripts/ensure-etcd)")


@pytest.fixture
def etcd_server(tmp_path: Path) -> Iterator[EtcdServer]:
    """A running etcd member, ended after the test."""
    have_etcd()
    with EtcdServer(tmp_path / "etcd") as server:
        yield server


@pytest.fixture(scope="module")
def shared_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A running etcd member for the tests of a module that neither stop it nor change
    its users or its data outside a key prefix of their own; ended after the module."""
    have_etcd()
    with EtcdServer(tmp_path_factory.mktemp("etcd")) as server:
        yield server
