"""A daemon that cannot start: the lifecycle's errors, their exit statuses, the one line.

The lifecycle is driven with the toy daemon of ``test_lifecycle``; the command line's
``run_daemon`` runs in a subprocess, where it configures logging as a daemon does.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
import trio

from nodeagent._auth import KeyFileError
from nodeagent._lifecycle import (
    EXIT_CONFIG,
    EXIT_STATE,
    EXIT_STATE_LOST,
    EXIT_UNAVAILABLE,
    AddressUnavailable,
    DaemonSpec,
    StateFull,
    StateInUse,
    StateLost,
    StateUnusable,
    serve_daemon,
    start_failure,
)
from nodeagent._serving._http11 import ListenerShare
from nodeagent._settings import ConfigError
from nodeagent._store import DocumentStore, StoreError, open_database
from tests.nodeagent.test_lifecycle import Toy, serving, toy


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ConfigError("bad file"), EXIT_CONFIG),
        (KeyFileError("bad key"), EXIT_CONFIG),
        (StateUnusable("bad directory"), EXIT_STATE),
        (StateLost("a previous life"), EXIT_STATE_LOST),
        (StateInUse("another daemon"), EXIT_UNAVAILABLE),
        (StateFull("no room"), EXIT_UNAVAILABLE),
        (AddressUnavailable("port in use"), EXIT_UNAVAILABLE),
        (ExceptionGroup("one", [ExceptionGroup("in", [StateUnusable("wrapped")])]), EXIT_STATE),
    ],
)
def test_each_start_failure_has_its_status_and_line(error: Exception, status: int) -> None:
    failure = start_failure(error)
    assert failure is not None
    assert failure[0] == status
    assert "\n" not in failure[1]


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("a bug"),
        StoreError("a state that cannot be written while the daemon runs"),
        ExceptionGroup("two", [StateUnusable("a"), StateUnusable("b")]),
    ],
)
def test_anything_else_is_not_a_start_failure(error: Exception) -> None:
    assert start_failure(error) is None


@pytest.mark.parametrize("http_server", ["hypercorn", "h11"])
async def test_a_port_in_use_is_address_unavailable_and_leaves_nothing(
    tmp_path: Path, http_server: Literal["hypercorn", "h11"]
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        daemon = toy(tmp_path, listen=[f"127.0.0.1:{port}"])
        daemon.http_server = http_server
        with pytest.raises(AddressUnavailable, match=f"127.0.0.1:{port}: Address already in use"):
            await serve_daemon(daemon, stop=trio.Event(), handle_signals=False)
    # hypercorn leaves the socket it could not bind to the collector: collect it here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    spec = daemon.spec()
    assert not spec.socket.exists()
    assert not spec.runtime_file.exists()
    assert daemon.store is not None
    assert daemon.store.closed


@pytest.mark.parametrize("where", ["runtime_dir", "relay"])
async def test_a_unix_socket_path_too_long_says_to_shorten_runtime_dir(
    tmp_path: Path, where: str
) -> None:
    long = "d" * 110
    if where == "runtime_dir":  # the daemon's own socket
        (tmp_path / long).mkdir()
        daemon = toy(tmp_path / long)
        named = f"unix:{tmp_path / long / 'run' / 'toy.sock'}"
    else:  # the relay socket of listeners shared with workers
        daemon = toy(tmp_path, listen=["127.0.0.1:0"])
        daemon.http_server = "h11"
        daemon.share = ListenerShare(tmp_path / long / "relay.sock")
        (tmp_path / long).mkdir()
        named = f"127.0.0.1:0, unix:{tmp_path / long / 'relay.sock'}"
    with pytest.raises(AddressUnavailable) as caught:
        await serve_daemon(daemon, stop=trio.Event(), handle_signals=False)
    # hypercorn leaves the socket it could not bind to the collector: collect it here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    assert str(caught.value) == (
        f"cannot listen on {named}: AF_UNIX path too long: a Unix socket's path holds at "
        "most 107 bytes: give a shorter runtime_dir"
    )


async def test_a_second_daemon_on_the_same_state_is_refused_before_it_opens_anything(
    tmp_path: Path,
) -> None:
    first = toy(tmp_path)
    async with serving(first):
        second = toy(tmp_path)
        with pytest.raises(StateInUse, match=f"pid {os.getpid()}"):
            await serve_daemon(second, stop=trio.Event(), handle_signals=False)
        assert second.events == []
        assert first.spec().socket.exists()
        assert first.spec().runtime_file.exists()
    # Let go at the end: the next one starts.
    async with serving(toy(tmp_path)):
        pass


@dataclass
class TlsToy(Toy):
    """The toy with TLS files on its listeners."""

    tls: tuple[Path, Path] | None = None

    def spec(self) -> DaemonSpec:
        return dataclasses.replace(super().spec(), tls=self.tls)


async def test_tls_files_that_do_not_load_are_a_configuration_error(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate\n")
    key.write_text("not a key\n")
    plain = toy(tmp_path)
    daemon = TlsToy(config=plain.config, path=plain.path, tls=(cert, key))
    with pytest.raises(ConfigError, match="tls_cert"):
        await serve_daemon(daemon, stop=trio.Event(), handle_signals=False)
    assert daemon.events == []


async def test_an_audit_log_that_cannot_be_opened_is_state_unusable(tmp_path: Path) -> None:
    daemon = toy(tmp_path)
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "audit.log").mkdir()  # a directory where the file should be
    with pytest.raises(StateUnusable, match="cannot open the audit log"):
        await serve_daemon(daemon, stop=trio.Event(), handle_signals=False)


async def test_a_directory_that_cannot_be_created_is_state_unusable(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file, not a directory")
    daemon = toy(tmp_path, state_dir=str(tmp_path / "blocker" / "state"))
    with pytest.raises(StateUnusable, match="cannot create the directory"):
        await serve_daemon(daemon, stop=trio.Event(), handle_signals=False)


# --- the store ------------------------------------------------------------------------------


def test_a_file_that_is_not_a_database_is_named_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    path.write_bytes(b"junk" * 1000)
    with pytest.raises(StoreError, match="not a SQLite database") as caught:
        open_database(path, "CREATE TABLE IF NOT EXISTS t (x);")
    assert str(path) in str(caught.value)
    assert "move it aside" in str(caught.value)


def test_a_document_store_deleted_under_a_running_daemon_is_written_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "d.db"
    store = DocumentStore(path)
    try:
        store.save(a={"n": 1}, b=[1, 2])
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        store.save(a={"n": 2}, b=[3])
        assert "was deleted or replaced" in caplog.text
        assert store.load("a") == {"n": 2}
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        rows = dict(db.execute("SELECT name, doc FROM documents"))
    assert rows == {"a": '{"n":2}', "b": "[3]"}


# --- run_daemon -----------------------------------------------------------------------------

_RUN = textwrap.dedent(
    """
    import logging, sys
    import typer
    from nodeagent.cli._common import run_daemon
    from nodeagent._lifecycle import StateUnusable

    def run(config):
        logging.getLogger("nodeagent.test").warning("a name\\nwith a forged line")
        if sys.argv[1] == "fail":
            raise StateUnusable("cannot open /x/agent.db\\u2028: move it aside")
        return 75

    try:
        run_daemon(run, None, "info")
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    """
)


@pytest.mark.parametrize(("how", "status"), [("fail", 7), ("ok", 75)])
def test_run_daemon_escapes_log_lines_and_ends_a_failure_in_one_line(how: str, status: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, how],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NOTIFY_SOCKET": ""},
        check=False,
    )
    assert done.returncode == status, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].endswith("nodeagent.test: a name\\nwith a forged line")
    if how == "fail":
        assert lines[1:] == ["nodeagent: cannot open /x/agent.db\\u2028: move it aside"]
    else:
        assert lines[1:] == []
