"""A private D-Bus and a stand-in login manager on it, for the shutdown tests.

:func:`private_bus` starts a real ``dbus-daemon`` on a Unix socket in a temporary
directory (a minimal configuration that allows everything) and ends it by its pid.
:class:`StandIn` runs this file as a program on that bus: it owns
``org.freedesktop.login1`` and answers as logind does what the agent asks —
``Inhibit`` hands out the write end of a pipe (its read end seeing EOF is the release),
``org.freedesktop.DBus.Properties.Get`` of ``InhibitDelayMaxUSec`` — and takes orders on
``org.nodeagent.test.Logind``: ``Emit(b)`` sends ``PrepareForShutdown(b)``,
``SetLimit(t)`` sets the limit (microseconds), ``Locks()`` lists each lock taken as
``(taken_at, released_at)`` (wall-clock seconds; released_at -1 while held).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jeepney import (
    DBusAddress,
    HeaderFields,
    MessageType,
    new_error,
    new_method_call,
    new_method_return,
    new_signal,
)
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection

LOGIND = "org.freedesktop.login1"
PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"
CONTROL = "org.nodeagent.test.Logind"

_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"""


def dbus_daemon() -> str | None:
    """The ``dbus-daemon`` program (Debian package dbus-daemon; scripts/ensure-dbus)."""
    return shutil.which("dbus-daemon") or (
        "/usr/bin/dbus-daemon" if Path("/usr/bin/dbus-daemon").exists() else None
    )


@contextlib.contextmanager
def private_bus(directory: Path) -> Iterator[str]:
    """A ``dbus-daemon`` listening in ``directory``; yields its address, ends it by pid."""
    program = dbus_daemon()
    assert program is not None, "dbus-daemon is missing (scripts/ensure-dbus)"
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "bus.conf"
    config.write_text(_CONFIG.format(socket=directory / "bus"))
    with (directory / "bus.log").open("ab") as log:
        proc = subprocess.Popen(
            [program, f"--config-file={config}", "--print-address", "--nofork", "--nopidfile"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        assert address, "dbus-daemon printed no address"
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if proc.stdout is not None:
            proc.stdout.close()


class StandIn:
    """The stand-in login manager as a subprocess on ``address``, and its orders."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.proc = subprocess.Popen(
            [sys.executable, __file__, address],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"
        self._conn = open_dbus_connection(address)

    def _call(self, member: str, signature: str | None = None, body: tuple[Any, ...] = ()) -> Any:
        control = DBusAddress(PATH, bus_name=LOGIND, interface=CONTROL)
        reply = self._conn.send_and_get_reply(
            new_method_call(control, member, signature, body), timeout=20
        )
        assert reply.header.message_type is MessageType.method_return, reply.body
        return reply.body

    def emit(self, starting: bool) -> float:
        """Send ``PrepareForShutdown(starting)``; returns the wall-clock time before."""
        before = time.time()
        self._call("Emit", "b", (starting,))
        return before

    def forge(self, starting: bool) -> None:
        """Send ``PrepareForShutdown(starting)`` from another connection than logind's."""
        self._conn.send(
            new_signal(DBusAddress(PATH, interface=MANAGER), "PrepareForShutdown", "b", (starting,))
        )

    def set_limit(self, seconds: float) -> None:
        self._call("SetLimit", "t", (int(seconds * 1e6),))

    def locks(self) -> list[tuple[float, float | None]]:
        """Each lock taken: (taken_at, released_at or None while held)."""
        (locks,) = self._call("Locks")
        return [(taken, None if released < 0 else released) for taken, released in locks]

    def held(self) -> int:
        return sum(1 for _, released in self.locks() if released is None)

    def close(self) -> None:
        self._conn.close()
        self.proc.terminate()
        self.proc.wait(timeout=20)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# ------------------------------------------------------------------ the stand-in itself


def _serve(address: str) -> None:
    conn = open_dbus_connection(address, enable_fds=True)
    conn.send_and_get_reply(message_bus.RequestName(LOGIND))
    lock = threading.Lock()
    locks: list[list[float]] = []
    limit = [5_000_000]

    def watch(read_end: int, entry: list[float]) -> None:
        while os.read(read_end, 64):
            pass
        with lock:
            entry[1] = time.time()
        os.close(read_end)

    print("ready", flush=True)
    while True:
        try:
            msg = conn.receive()
        except OSError:
            return  # the bus is gone
        if msg.header.message_type is not MessageType.method_call:
            continue
        interface = msg.header.fields.get(HeaderFields.interface)
        member = msg.header.fields.get(HeaderFields.member)
        if (interface, member) == (MANAGER, "Inhibit"):
            read_end, write_end = os.pipe()
            entry = [time.time(), -1.0]
            with lock:
                locks.append(entry)
            threading.Thread(target=watch, args=(read_end, entry), daemon=True).start()
            conn.send(new_method_return(msg, "h", (write_end,)))
            os.close(write_end)
        elif (interface, member) == ("org.freedesktop.DBus.Properties", "Get"):
            if msg.body == (MANAGER, "InhibitDelayMaxUSec"):
                conn.send(new_method_return(msg, "v", (("t", limit[0]),)))
            else:
                conn.send(new_error(msg, "org.freedesktop.DBus.Error.UnknownProperty"))
        elif (interface, member) == (CONTROL, "Emit"):
            conn.send(
                new_signal(
                    DBusAddress(PATH, interface=MANAGER), "PrepareForShutdown", "b", msg.body
                )
            )
            conn.send(new_method_return(msg))
        elif (interface, member) == (CONTROL, "SetLimit"):
            limit[0] = msg.body[0]
            conn.send(new_method_return(msg))
        elif (interface, member) == (CONTROL, "Locks"):
            with lock:
                body = [(taken, released) for taken, released in locks]
            conn.send(new_method_return(msg, "a(dd)", (body,)))
        else:
            conn.send(new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod"))


if __name__ == "__main__":
    _serve(sys.argv[1])
