"""Daemons calling each other over kept-alive connections, seen from the server side.

A real master (a subprocess) is reached through a :class:`~tests.loopback.CountingProxy`,
which counts the TCP connections and the requests sent over them; the agents the master
and the defrag link call are :class:`~tests.loopback.LoopbackPeer` servers that serve a
real node ad and record the tokens they receive.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from nodeagent._auth import Scope, load_key, verify_token
from nodeagent.defrag._service import HttpDefragLink
from slots import Machine, MachinePolicy, Resources
from tests.harness import AgentProcess, MasterProcess
from tests.loopback import CountingProxy, LoopbackPeer, Reply, Seen, json_reply, serving

pytestmark = pytest.mark.integration


@pytest.fixture
def master(tmp_path: Path) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as m:
        yield m


def upstream(master: MasterProcess) -> tuple[str, int]:
    host, port = master.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def fake_agent(hostname: str) -> LoopbackPeer:
    """An agent that serves a real ad of an idle 4-core node, naming itself as MyAddress."""

    async def serve(seen: Seen) -> Reply:
        if (seen.method, seen.target) != ("GET", "/v1/ad"):
            return json_reply(404, {"error": {"code": "http.not_found", "message": "no"}})
        return json_reply(200, node_ad(hostname, peer.url))

    peer = LoopbackPeer(serve)
    return peer


def node_ad(hostname: str, address: str) -> dict[str, object]:
    now = time.time()
    machine = Machine(
        host=hostname,
        total=Resources(cpus=4, memory=4096, disk=1_000_000),
        policy=MachinePolicy(max_job_retirement_time=60, machine_max_vacate_time=5),
        now=now - 60,
        address=address,
        ip="127.0.0.1",
    )
    return machine.ad(now)


async def test_an_agent_pushes_consecutive_ads_to_the_master_over_one_connection(
    master: MasterProcess, tmp_path: Path
) -> None:
    proxy = CountingProxy(upstream(master))
    async with serving(proxy):
        settings = master.agent_settings(tmp_path / "push", node="push.test", update_interval=0.2)
        agent = AgentProcess(
            tmp_path / "push", hostname="push.test", master={**settings, "url": proxy.url}
        )
        await trio.to_thread.run_sync(agent.start)
        try:
            with trio.fail_after(20):
                await proxy.wait_until(lambda: len(proxy.requests) >= 6)
            reply = await trio.to_thread.run_sync(master.call, "GET", "/v1/ads/push.test")
            assert reply.status_code == 200
            assert proxy.connections == 1
        finally:
            await trio.to_thread.run_sync(agent.stop)
        with trio.fail_after(10):  # the agent closed it when it stopped
            await proxy.wait_until(lambda: proxy.ended == 1)
    assert proxy.connections == 1  # the push at shutdown went over it too
    assert {(seen.method, seen.target) for seen in proxy.requests} == {("POST", "/v1/ads")}


async def test_the_master_calls_each_agent_over_one_connection_with_one_token(
    master: MasterProcess,
) -> None:
    one, two = fake_agent("fake1.test"), fake_agent("fake2.test")
    async with serving(one), serving(two):
        for agent, name in ((one, "fake1.test"), (two, "fake2.test")):
            push = master.token("DAEMON", subject=f"agent@{name}", node=name)
            with master.client(push) as http:
                response = await trio.to_thread.run_sync(
                    partial(http.post, "/v1/ads", json=node_ad(name, agent.url))
                )
            assert response.status_code == 200, response.text
        for _ in range(3):
            for name in ("fake1.test", "fake2.test"):
                reply = await trio.to_thread.run_sync(
                    partial(master.call, "GET", f"/v1/ads/{name}", params={"fresh": "true"})
                )
                assert reply.status_code == 200, reply.text
                assert reply.json()["machine"]["Name"] == name
    key = load_key(master.key_file)
    for agent, name in ((one, "fake1.test"), (two, "fake2.test")):
        assert (agent.connections, len(agent.requests)) == (1, 3)
        tokens = {seen.token for seen in agent.requests}
        assert len(tokens) == 1
        # reading an ad: READ, bound to the node read
        principal = verify_token(key, str(tokens.pop()), audience=name)
        assert (principal.subject, principal.scope) == ("master:master", Scope.READ)


async def test_the_defrag_link_keeps_one_connection_to_the_master_and_to_each_agent(
    master: MasterProcess, tmp_path: Path
) -> None:
    proxy = CountingProxy(upstream(master))
    agent = fake_agent("fake1.test")
    token_file = tmp_path / "defrag.token"
    token_file.write_text(master.token("DAEMON", subject="defrag", node="defrag-itest"))
    key = load_key(master.key_file)
    async with serving(proxy), serving(agent):
        link = HttpDefragLink(master_url=proxy.url, token_file=token_file, key=key, name="itest")
        async with link:
            for _ in range(3):
                await link.slot_ads()
                await link.publish({"MyType": "Defrag", "Name": "defrag-itest"})
                ad = await link.agent(agent.url, node="fake1.test").ad()
                assert ad["machine"]["Name"] == "fake1.test"
        with trio.fail_after(10):  # leaving the session closed both
            await proxy.wait_until(lambda: proxy.ended == 1)
            await agent.wait_until(lambda: agent.ended == 1)
    assert (proxy.connections, len(proxy.requests)) == (1, 6)
    assert (agent.connections, len(agent.requests)) == (1, 3)
    tokens = {seen.token for seen in agent.requests}
    assert len(tokens) == 1
    principal = verify_token(key, str(tokens.pop()), audience="fake1.test")
    assert (principal.subject, principal.scope) == ("defrag:defrag-itest", Scope.READ)
