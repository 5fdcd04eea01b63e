"""What the benchmarks of masters on etcd share: the etcd they start, the master's keys
for it, and how many requests etcd served meanwhile.

Not a benchmark itself (``run_all`` runs only the scripts whose names do not start
with an underscore). The etcd is :class:`tests.etcd.EtcdServer`: a real member on
loopback, its data in the benchmark's temporary directory, ended by its pid.
"""

from __future__ import annotations

import base64
import re
import shutil
import time
from typing import Any

import httpx
import psutil

from tests.etcd import EtcdServer
from tests.harness import MasterProcess

__all__ = [
    "EtcdMeter",
    "etcd_requests",
    "etcd_settings",
    "master_values",
    "requests_between",
    "require_etcd",
    "wait_leading",
]

_STARTED = re.compile(
    r'^grpc_server_started_total\{grpc_method="(?P<method>[^"]+)",'
    r'grpc_service="(?P<service>[^"]+)",grpc_type="[^"]+"\} (?P<count>\S+)$'
)


def require_etcd() -> None:
    """Raise SystemExit with a plain message when the ``etcd`` binary is not installed."""
    if shutil.which("etcd") is None:
        raise SystemExit(
            "etcd is not installed (Debian package etcd-server: scripts/ensure-etcd installs it)"
        )


def etcd_settings(etcd: EtcdServer, prefix: str, *, ttl: float = 2) -> dict[str, Any]:
    """A master's configuration keys for ``store = "etcd"`` on ``etcd`` under ``prefix``."""
    return {
        "store": "etcd",
        "etcd_endpoints": [etcd.url],
        "etcd_prefix": prefix,
        "leader_ttl": ttl,
        "etcd_timeout": 2,
    }


def etcd_requests(etcd: EtcdServer) -> dict[str, int]:
    """The gRPC calls etcd started so far, by method (``Range``, ``Txn``, ``LeaseKeepAlive``,
    ``Watch`` …): its ``grpc_server_started_total``. The JSON gateway's requests are gRPC
    calls inside etcd, so each one counts here."""
    text = httpx.get(f"{etcd.url}/metrics", timeout=10).text
    counts: dict[str, int] = {}
    for line in text.splitlines():
        found = _STARTED.match(line)
        if found is not None and found["service"].startswith("etcdserverpb."):
            count = int(float(found["count"]))
            if count:
                counts[found["method"]] = counts.get(found["method"], 0) + count
    return counts


def requests_between(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The calls started between two :func:`etcd_requests` readings (methods with none left
    out)."""
    return {
        method: after[method] - before.get(method, 0)
        for method in sorted(after)
        if after[method] != before.get(method, 0)
    }


class EtcdMeter:
    """The calls etcd served (:func:`etcd_requests`) and the CPU it used, from
    :meth:`start` to :meth:`since`."""

    def __init__(self, etcd: EtcdServer) -> None:
        if etcd.proc is None:
            raise RuntimeError("etcd is not running")
        self.etcd = etcd
        self.process = psutil.Process(etcd.proc.pid)
        self.calls: dict[str, int] = {}
        self.cpu = 0.0

    def _cpu(self) -> float:
        times = self.process.cpu_times()
        return float(times.user + times.system)

    def start(self) -> None:
        self.calls, self.cpu = etcd_requests(self.etcd), self._cpu()

    def since(self, elapsed: float) -> dict[str, Any]:
        """``etcd_requests`` (by method) and ``etcd_cpu_percent`` over ``elapsed`` s."""
        cpu = self._cpu() - self.cpu
        return {
            "etcd_requests": requests_between(self.calls, etcd_requests(self.etcd)),
            "etcd_cpu_percent": round(100 * cpu / elapsed, 1),
        }


def master_values(etcd: EtcdServer, prefix: str) -> dict[str, int]:
    """The size in bytes of each value stored under the master's keys
    (``<prefix>master/``), by key relative to that prefix."""
    keys = f"{prefix.rstrip('/')}/master/".encode()
    end = bytearray(keys)
    end[-1] += 1
    reply = httpx.post(
        f"{etcd.url}/v3/kv/range",
        json={
            "key": base64.b64encode(keys).decode(),
            "range_end": base64.b64encode(bytes(end)).decode(),
        },
        timeout=10,
    ).json()
    sizes = {}
    for kv in reply.get("kvs", []):
        key = base64.b64decode(kv["key"])[len(keys) :].decode()
        sizes[key] = len(base64.b64decode(kv.get("value", "")))
    return sizes


def wait_leading(master: MasterProcess, timeout: float = 20.0) -> dict[str, Any]:
    """Wait until ``master`` says it leads (``GET /v1/leader``); its reply."""
    deadline = time.monotonic() + timeout
    with master.client() as client:
        while True:
            try:
                reply: dict[str, Any] = client.get("/v1/leader", timeout=2).json()
            except httpx.HTTPError:
                reply = {}
            if reply.get("leading"):
                return reply
            if time.monotonic() > deadline:
                raise TimeoutError(f"{master.url} did not lead within {timeout} s: {reply}")
            time.sleep(0.05)
