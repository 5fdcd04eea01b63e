"""Several real masters sharing one real etcd, and agents that report to all of them.

:class:`Masters` starts ``count`` master daemons with ``store = "etcd"`` (one pool key, one
key prefix), each in its own directory on a loopback port the kernel chooses; it finds
the leader by asking each ``GET /v1/leader``. Everything is ended by pid on exit (the
harness).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.etcd import EtcdServer
from tests.harness import AgentProcess, MasterProcess, wait_for

__all__ = ["Masters", "masters_on"]


class Masters:
    """``count`` masters on ``etcd`` under one prefix; ``settings`` go to each."""

    def __init__(self, root: Path, etcd: EtcdServer, count: int = 3, **settings: Any) -> None:
        self.root = root
        self.etcd = etcd
        base = {
            "store": "etcd",
            "etcd_endpoints": [etcd.url],
            # the test's own (its directory's name is unique in the run): tests may share
            # one etcd
            "etcd_prefix": f"/pool-{root.parent.name}-{root.name}/",
            "leader_ttl": 2,
            "etcd_timeout": 1,
            **settings,
        }
        self.prefix: str = base["etcd_prefix"]
        self.all: list[MasterProcess] = []
        for i in range(count):
            master = MasterProcess(root / f"master{i}", settings=base)
            if self.all:
                master.key_file.write_bytes(self.all[0].key_file.read_bytes())
            self.all.append(master)

    def start(self) -> None:
        """Start every master at once, then wait until each is ready (:meth:`close` ends
        them, whether or not they got there)."""
        for master in self.all:
            master.launch()
        for master in self.all:
            master.wait_ready()

    def running(self) -> list[MasterProcess]:
        return [m for m in self.all if m.proc is not None and m.proc.poll() is None]

    def leader_doc(self, master: MasterProcess) -> dict[str, Any]:
        try:
            reply: dict[str, Any] = master.call("GET", "/v1/leader", timeout=2).json()
        except httpx.HTTPError:
            return {}
        return reply

    def leader(self, timeout: float = 20.0) -> MasterProcess:
        """The master that leads (waits for one)."""
        leader: MasterProcess = wait_for(
            lambda: next((m for m in self.running() if self.leader_doc(m).get("leading")), None),
            timeout=timeout,
        )
        return leader

    def followers(self) -> list[MasterProcess]:
        leader = self.leader()
        return [m for m in self.running() if m is not leader]

    def kill(self, master: MasterProcess) -> float:
        """SIGKILL ``master``; the time it was sent."""
        sent = time.time()
        master.stop(signal.SIGKILL)
        return sent

    def agent_settings(
        self, root: Path, *, node: str, update_interval: float = 0.5
    ) -> dict[str, Any]:
        """What the agent ``node`` needs to report to every master."""
        one = MasterProcess.agent_settings(
            self.all[0], root, node=node, update_interval=update_interval
        )
        one.pop("url")
        return {**one, "urls": [m.url for m in self.all]}

    def agent(self, root: Path, name: str, **kwargs: Any) -> AgentProcess:
        return AgentProcess(
            root / name, hostname=name, master=self.agent_settings(root / name, node=name), **kwargs
        )

    def close(self) -> None:
        for master in self.all:
            master.__exit__(None, None, None)


@contextlib.contextmanager
def masters_on(
    root: Path, etcd: EtcdServer, *, count: int = 3, **settings: Any
) -> Iterator[Masters]:
    masters = Masters(root, etcd, count, **settings)
    try:
        masters.start()
        yield masters
    finally:
        masters.close()
