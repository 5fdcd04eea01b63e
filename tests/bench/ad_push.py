"""Cost of one ad push on the agent's side: the peer client against a client per push.

A master runs as a subprocess (``python -m nodeagent master run``) on a loopback TCP port.
This process pushes one real agent ad (8 running claims, ≈ 13 KiB, made as in
``ad_ingest.py``) ``--pushes`` times, one after the other, with a DAEMON token, three ways:

* ``client_per_push``: a new ``httpx.AsyncClient`` for every push (its own TLS context
  and connection), as the agent pushed before :mod:`nodeagent._peer`;
* ``connection_per_push``: the agent's :class:`~nodeagent._peer.PeerClient` outside a
  session, so every push opens a connection but the TLS context is shared. That is what a
  periodic push costs: pushes a minute apart (``update_interval``) outlive the master's
  5 s idle timeout, so the kept connection is gone by the next one;
* ``kept_connection``: the same client in a session (as :meth:`MasterLink.run` holds it):
  one connection for every push, as for the pushes that follow state changes.

For each: this process's CPU time per push (``time.process_time``) and the latency
p50/p99 from the request to the parsed reply. ``--pushes`` warm-up pushes come first.
Prints one JSON document. Usage: ``python tests/bench/ad_push.py [--pushes 200]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._auth import Scope, create_token, load_key
from nodeagent._peer import PeerClient
from tests.bench._benchlib import summary_ms
from tests.bench.ad_ingest import node_ad, stop_master, template_ads
from tests.harness import MasterProcess

Push = Callable[[], Awaitable[Any]]


async def measure(push: Push, pushes: int) -> dict[str, Any]:
    """``pushes`` pushes after as many warm-up ones: CPU per push and latency."""
    for _ in range(pushes):
        await push()
    latencies = []
    cpu = time.process_time()
    for _ in range(pushes):
        start = time.perf_counter()
        reply = await push()
        latencies.append(time.perf_counter() - start)
        assert isinstance(reply, dict), reply
        assert "mode" in reply, reply
    return {
        "cpu_ms_per_push": round((time.process_time() - cpu) / pushes * 1000, 3),
        "latency_ms": summary_ms(latencies),
    }


async def bench(master: MasterProcess, pushes: int) -> dict[str, Any]:
    ad = node_ad(template_ads(time.time())[0], "push.bench", "10.0.0.1")
    token = create_token(
        load_key(master.key_file),
        subject="agent@push.bench",
        scope=Scope.DAEMON,
        lifetime_s=3600,
        now=time.time(),
        node="push.bench",
    )
    url = master.url + "/v1/ads"
    headers = {"Authorization": f"Bearer {token}"}

    async def client_per_push() -> Any:
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.post(url, json=ad, headers=headers)
        response.raise_for_status()
        return response.json()

    class Token:
        def token(self) -> str:
            return token

        def renew(self) -> bool:
            return False

    peer = PeerClient("master")

    async def through_peer() -> Any:
        return await peer.request("POST", url, json=ad, credentials=Token())

    result = {
        "ad_bytes": len(json.dumps(ad)),
        "pushes": pushes,
        "client_per_push": await measure(client_per_push, pushes),
        "connection_per_push": await measure(through_peer, pushes),
    }
    async with peer:
        result["kept_connection"] = await measure(through_peer, pushes)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pushes", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        master = MasterProcess(Path(tmp) / "master")
        master.start()
        try:
            result = trio.run(bench, master, args.pushes)
        finally:
            stop_master(master)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
