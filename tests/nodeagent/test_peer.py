"""The peer client (:mod:`nodeagent._peer`) against loopback servers that count connections.

Connection reuse is read on the server side (connections accepted, requests on each);
token reuse from the tokens the server received, with a clock the test moves.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypercorn.config import Config as HypercornConfig

from nodeagent import client as agent_client
from nodeagent._auth import Scope, WrongAudience, generate_key, load_key, verify_token
from nodeagent._peer import (
    KEEPALIVE_EXPIRY_S,
    RENEW_AHEAD,
    TOKEN_LIFETIME_S,
    AgentCallFailed,
    HttpAgentLink,
    PeerCallFailed,
    PeerClient,
    TokenFile,
    TokenMint,
    kept_alive,
)
from nodeagent._serving._http11 import KEEP_ALIVE_TIMEOUT
from nodeagent.agent._agent import Agent
from nodeagent.agent._config import MasterLinkConfig
from nodeagent.agent._push import MasterLink
from nodeagent.agent._store import Store
from nodeagent.cli import _http as cli_http
from nodeagent.defrag._policy import DefragPolicy
from nodeagent.defrag._service import DefragService, HttpDefragLink, MasterCallFailed
from nodeagent.testing import FakeBehaviour, FakeRunner
from slots import Machine, MachinePolicy, Resources
from tests.loopback import LoopbackPeer, Reply, Seen, json_reply, listening_socket, serving

EPOCH = 1_800_000_000.0


class SetClock:
    """A wall clock the test sets."""

    def __init__(self, now: float) -> None:
        self.t = now

    def now(self) -> float:
        return self.t


async def ok(seen: Seen) -> Reply:
    return json_reply(200, {"path": seen.target, "n": seen.connection})


@pytest.fixture
def key(tmp_path: Path) -> bytes:
    generate_key(tmp_path / "pool.key")
    return load_key(tmp_path / "pool.key")


# --- connections ----------------------------------------------------------------------------


async def test_consecutive_calls_in_a_session_share_one_connection() -> None:
    peer = LoopbackPeer(ok)
    client = PeerClient("master")
    async with serving(peer), client:
        for n in range(5):
            reply = await client.request("POST", peer.url + "/v1/ads", json={"n": n})
            assert reply == {"path": "/v1/ads", "n": 1}
        assert (peer.connections, len(peer.requests), client.kept) == (1, 5, 1)
        assert [json.loads(seen.body) for seen in peer.requests] == [{"n": n} for n in range(5)]


async def test_each_agent_has_its_own_kept_connection(key: bytes) -> None:
    one, two = LoopbackPeer(ok), LoopbackPeer(ok)
    link = HttpAgentLink(key)
    async with serving(one), serving(two), link:
        for _ in range(3):
            await link.call(one.url, "GET", "/v1/ad", node="n1.test", actor="master")
            await link.call(two.url, "GET", "/v1/drain", node="n1.test", actor="master")
        assert (one.connections, len(one.requests)) == (1, 3)
        assert (two.connections, len(two.requests)) == (1, 3)
        assert link.peers.kept == 2


async def test_leaving_the_session_closes_every_connection(key: bytes) -> None:
    peer = LoopbackPeer(ok)
    link = HttpAgentLink(key)
    async with serving(peer):
        async with link:
            await link.call(peer.url, "GET", "/v1/ad", node="n1.test", actor="master")
            assert peer.ended == 0
        with trio.fail_after(5):
            await peer.wait_until(lambda: peer.ended == 1)
        assert link.peers.kept == 0


async def test_a_call_outside_a_session_opens_and_closes_its_own_connection() -> None:
    peer = LoopbackPeer(ok)
    client = PeerClient("agent")
    async with serving(peer):
        for _ in range(3):
            await client.request("GET", peer.url + "/v1/ad")
            assert client.kept == 0
        with trio.fail_after(5):
            await peer.wait_until(lambda: peer.ended == 3)
        assert peer.connections == 3


async def test_aclose_ends_the_session_and_later_calls_keep_nothing() -> None:
    peer = LoopbackPeer(ok)
    client = PeerClient("agent")
    async with serving(peer):
        async with client:
            await client.request("GET", peer.url + "/a")
            await client.aclose()
            assert client.kept == 0
            await client.request("GET", peer.url + "/b")
            assert client.kept == 0
        with trio.fail_after(5):
            await peer.wait_until(lambda: peer.ended == 2)


async def test_requests_to_one_peer_are_capped_and_share_that_many_connections() -> None:
    release = trio.Event()

    async def slow(seen: Seen) -> Reply:
        await release.wait()
        return json_reply(200, {})

    peer = LoopbackPeer(slow)
    client = PeerClient("agent", max_in_flight=2)
    async with serving(peer), client, trio.open_nursery() as callers:
        for _ in range(6):
            callers.start_soon(client.request, "GET", peer.url + "/v1/ad")
        with trio.fail_after(5):
            await peer.wait_until(lambda: peer.in_flight == 2)
        await trio.testing.wait_all_tasks_blocked()
        assert (peer.in_flight, len(peer.requests)) == (2, 2)
        release.set()
    assert (peer.most_in_flight, peer.connections, len(peer.requests)) == (2, 2, 6)


async def test_idle_peers_beyond_the_bound_are_closed_least_recently_used_first() -> None:
    first, second, third = LoopbackPeer(ok), LoopbackPeer(ok), LoopbackPeer(ok)
    client = PeerClient("agent", max_idle_peers=2)
    async with serving(first), serving(second), serving(third), client:
        await client.request("GET", first.url + "/")
        await client.request("GET", second.url + "/")
        await client.request("GET", first.url + "/")
        await client.request("GET", third.url + "/")  # second is the least recently used
        with trio.fail_after(5):
            await second.wait_until(lambda: second.ended == 1)
        assert (first.ended, third.ended, client.kept) == (0, 0, 2)
        await client.request("GET", first.url + "/")
        assert first.connections == 1


async def test_a_peer_that_is_down_is_unreachable_and_the_next_call_reconnects(
    key: bytes,
) -> None:
    link = HttpAgentLink(key)
    sock = listening_socket()
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    async with link:
        first = LoopbackPeer(ok)
        async with serving(first, sock):
            await link.call(url, "GET", "/v1/ad", node="n1.test", actor="master")
        with pytest.raises(AgentCallFailed) as down:
            await link.call(url, "GET", "/v1/ad", node="n1.test", actor="master")
        assert (down.value.code, down.value.status) == ("agent.unreachable", None)
        assert down.value.message.startswith(f"cannot reach the agent at {url}: ")
        again = LoopbackPeer(ok)
        async with serving(again, listening_socket(port)):
            for _ in range(3):
                await link.call(url, "GET", "/v1/ad", node="n1.test", actor="master")
            assert (again.connections, len(again.requests)) == (1, 3)


async def test_an_address_that_is_not_http_is_unreachable(key: bytes) -> None:
    link = HttpAgentLink(key)
    with pytest.raises(PeerCallFailed) as failed:
        await link.call(
            "unix:///run/nodeagent/nodeagent.sock", "GET", "/v1/ad", node="n1.test", actor="m"
        )
    assert failed.value.code == "agent.unreachable"


async def test_the_timeout_is_settable_and_the_next_call_uses_it(key: bytes) -> None:
    answer = trio.Event()

    async def stalls(seen: Seen) -> Reply:
        if seen.target == "/stall":
            await answer.wait()
        return json_reply(200, {})

    peer = LoopbackPeer(stalls)
    link = HttpAgentLink(key, timeout=30.0)
    async with serving(peer), link:
        link.timeout = 0.05
        with pytest.raises(PeerCallFailed) as late:
            await link.call(peer.url, "GET", "/stall", node="n1.test", actor="master")
        assert (late.value.code, late.value.status) == ("agent.timeout", None)
        answer.set()
        link.timeout = 30.0
        assert await link.call(peer.url, "GET", "/stall", node="n1.test", actor="master") == {}


def test_kept_connections_expire_before_the_servers_close_them() -> None:
    """A request never goes out on a connection the server is closing as idle."""
    assert KEEPALIVE_EXPIRY_S < KEEP_ALIVE_TIMEOUT
    assert HypercornConfig().keep_alive_timeout > KEEPALIVE_EXPIRY_S


# --- credentials ----------------------------------------------------------------------------


async def test_a_token_is_minted_once_and_renewed_ahead_of_its_expiry(key: bytes) -> None:
    peer = LoopbackPeer(ok)
    clock = SetClock(EPOCH)
    link = HttpAgentLink(key, subject_prefix="defrag", clock=clock)
    renew_at = EPOCH + TOKEN_LIFETIME_S * (1 - RENEW_AHEAD)
    async with serving(peer), link:
        for _ in range(10):
            await link.call(peer.url, "GET", "/v1/ad", node="n1.test", actor="alice")
        clock.t = renew_at - 1
        await link.call(peer.url, "GET", "/v1/ad", node="n1.test", actor="alice")
        assert link.mint.minted == 1
        clock.t = renew_at
        await link.call(peer.url, "GET", "/v1/ad", node="n1.test", actor="alice")
        await link.call(peer.url, "GET", "/v1/ad", node="n1.test", actor="bob")
    tokens = [seen.token for seen in peer.requests]
    assert len(set(tokens[:11])) == 1
    assert tokens[11] != tokens[0]
    assert link.mint.minted == 3
    first = verify_token(key, str(tokens[0]), now=renew_at - 1, audience="n1.test")
    assert (first.subject, first.scope) == ("defrag:alice", Scope.READ)
    assert first.expires_at == EPOCH + TOKEN_LIFETIME_S
    renewed = verify_token(key, str(tokens[11]), now=EPOCH + TOKEN_LIFETIME_S, audience="n1.test")
    assert renewed.subject == "defrag:alice"
    assert verify_token(key, str(tokens[12]), now=renew_at, audience="n1.test").subject == (
        "defrag:bob"
    )


async def test_each_token_is_bound_to_its_node_and_no_stronger_than_the_call(key: bytes) -> None:
    """A read carries a READ token, a write an ADMINISTRATOR one, each for one node only:
    minted per (node, actor, scope), short-lived, refused by any other receiver."""
    peer = LoopbackPeer(ok)
    link = HttpAgentLink(key, clock=SetClock(EPOCH))
    async with serving(peer), link:
        for _ in range(2):
            await link.call(peer.url, "GET", "/v1/ad", node="a.test", actor="master")
            await link.call(peer.url, "POST", "/v1/drain", node="a.test", actor="master")
            await link.call(peer.url, "GET", "/v1/ad", node="b.test", actor="master")
    read_a, write_a, read_b = (str(seen.token) for seen in peer.requests[:3])
    assert [str(seen.token) for seen in peer.requests[3:]] == [read_a, write_a, read_b]
    assert link.mint.minted == 3
    now = EPOCH + 1
    for token, node, scope in ((read_a, "a.test", "READ"), (write_a, "a.test", "ADMINISTRATOR")):
        principal = verify_token(key, token, now=now, audience=node)
        assert (principal.scope, principal.expires_at) == (Scope(scope), EPOCH + 60)
        for elsewhere in ("b.test", None):  # another agent; a receiver without a name
            with pytest.raises(WrongAudience):
                verify_token(key, token, now=now, audience=elsewhere)
    assert verify_token(key, read_b, now=now, audience="b.test").scope is Scope.READ
    # sent while at least 30 s are left: a receiver's clock may run 30 s ahead
    assert TOKEN_LIFETIME_S * RENEW_AHEAD >= 30


def test_the_mint_keeps_a_bounded_number_of_tokens(key: bytes) -> None:
    clock = SetClock(EPOCH)
    mint = TokenMint(key, clock=clock, max_tokens=3)
    first = mint.token("master:master", audience="n0.test")
    for n in range(1, 10):
        mint.token("master:master", audience=f"n{n}.test")
        assert mint.kept == min(n + 1, 3)
    assert mint.minted == 10
    mint.token("master:master", audience="n9.test")  # kept: reused
    assert mint.minted == 10
    # the least recently used went first: n0's token is signed anew (the same claims in
    # the same second: the same text)
    assert mint.token("master:master", audience="n0.test") == first
    assert (mint.minted, mint.kept) == (11, 3)


async def test_an_address_that_is_not_a_plain_origin_is_never_called(key: bytes) -> None:
    """The link calls the origin of ``MyAddress`` only: an address with a path, query,
    fragment or user is refused before anything is sent, and a plain one gets the caller's
    own path."""
    peer = LoopbackPeer(ok)
    link = HttpAgentLink(key)
    async with serving(peer), link:
        for tail in ("/x?target=", "/", "?q=1", "#f"):
            with pytest.raises(PeerCallFailed) as refused:
                await link.call(peer.url + tail, "GET", "/v1/ad", node="n1.test", actor="m")
            assert refused.value.code == "agent.unreachable"
        user = peer.url.replace("http://", "http://user:pw@")
        with pytest.raises(PeerCallFailed):
            await link.call(user, "GET", "/v1/ad", node="n1.test", actor="m")
        assert peer.requests == []
        reply = await link.call(peer.url, "GET", "/v1/ad", node="n1.test", actor="m")
    assert reply["path"] == "/v1/ad"


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, "auth.unauthenticated"),  # the token expired, or the pool key changed
        (403, "auth.wrong_node"),  # a token made for another node: the operator mints anew
    ],
)
async def test_a_token_file_is_read_once_and_again_after_a_refusal(
    tmp_path: Path, status: int, code: str
) -> None:
    expected = ["old"]

    async def wants(seen: Seen) -> Reply:
        if seen.token != expected[0]:
            return json_reply(status, {"error": {"code": code, "message": "no"}})
        return json_reply(200, {})

    token_file = tmp_path / "daemon.token"
    token_file.write_text("old\n")
    credentials = TokenFile(token_file, peer="master")
    peer = LoopbackPeer(wants)
    client = PeerClient("master")
    async with serving(peer), client:
        for _ in range(3):
            await client.request("POST", peer.url + "/v1/ads", credentials=credentials)
        assert credentials.reads == 1
        expected[0] = "new"  # the master now wants a renewed token, not yet in the file
        with pytest.raises(PeerCallFailed) as refused:
            await client.request("POST", peer.url + "/v1/ads", credentials=credentials)
        assert (refused.value.code, refused.value.status) == (code, status)
        assert credentials.reads == 2  # read again, unchanged: not sent twice
        token_file.write_text("new\n")
        await client.request("POST", peer.url + "/v1/ads", credentials=credentials)
        await client.request("POST", peer.url + "/v1/ads", credentials=credentials)
        assert credentials.reads == 3
    # The file's change is seen before the call: the new token goes at once, never refused.
    assert [seen.token for seen in peer.requests] == [*["old"] * 3, "old", "new", "new"]
    assert peer.connections == 1


async def test_a_replaced_token_file_is_read_at_the_next_call(tmp_path: Path) -> None:
    """No refusal needed (a master that still takes the old token, during a migration): the
    file replaced, the next call carries the new token; unchanged, it is not read again."""
    token_file = tmp_path / "daemon.token"
    token_file.write_text("old\n")
    credentials = TokenFile(token_file, peer="master")
    peer = LoopbackPeer(ok)
    client = PeerClient("master")
    async with serving(peer), client:
        await client.request("POST", peer.url + "/v1/ads", credentials=credentials)
        await client.request("POST", peer.url + "/v1/ads", credentials=credentials)
        replacement = tmp_path / "daemon.token.new"
        replacement.write_text("new\n")
        replacement.replace(token_file)  # as an installer does: a new file renamed over
        await client.request("POST", peer.url + "/v1/ads", credentials=credentials)
        await client.request("POST", peer.url + "/v1/ads", credentials=credentials)
    assert [seen.token for seen in peer.requests] == ["old", "old", "new", "new"]
    assert credentials.reads == 2


async def test_an_unreadable_token_file_fails_before_any_request(tmp_path: Path) -> None:
    peer = LoopbackPeer(ok)
    client = PeerClient("master")
    credentials = TokenFile(tmp_path / "missing.token", peer="master")
    async with serving(peer), client:
        with pytest.raises(PeerCallFailed) as failed:
            await client.request("GET", peer.url + "/v1/ads", credentials=credentials)
    assert (failed.value.code, failed.value.status) == ("master.token_file", None)
    assert "missing.token" in failed.value.message
    assert peer.requests == []


# --- errors ---------------------------------------------------------------------------------


def cli_report(url: str) -> str:
    """What the command line prints on stderr for ``GET /v1/drain`` at ``url``'s reply."""
    target = cli_http.Target(host="127.0.0.1", port=int(url.rsplit(":", 1)[1]))
    try:
        cli_http.request(target, "GET", "/v1/drain")
    except Exception as exc:  # the command line's error tree: str() is "code: message"
        return str(exc)
    raise AssertionError("the command line took an error reply for a success")


ERROR_BODIES = [
    (409, {"error": {"code": "drain.in_progress", "message": "r7", "condor_code": 10001}}),
    (401, {"error": {"code": "auth.unauthenticated", "message": "bad token"}}),
    (404, {"error": {"code": "drain.no_such_request", "message": "no 9"}}),
    (500, {"error": {"code": "store.error", "message": "disk full"}}),
]


@pytest.mark.parametrize(("status", "body"), ERROR_BODIES)
async def test_an_error_body_maps_to_the_same_code_everywhere(
    key: bytes, status: int, body: dict[str, Any]
) -> None:
    async def refuses(seen: Seen) -> Reply:
        return json_reply(status, body)

    peer = LoopbackPeer(refuses)
    code, message = body["error"]["code"], body["error"]["message"]
    async with serving(peer):
        with pytest.raises(PeerCallFailed) as by_link:
            await HttpAgentLink(key).call(
                peer.url, "GET", "/v1/drain", node="n1.test", actor="master"
            )
        async with agent_client.AgentClient(url=peer.url, token="t") as client:
            with pytest.raises(agent_client.AgentError) as by_client:
                await client.drain()
        by_cli = await trio.to_thread.run_sync(cli_report, peer.url)
    assert (by_link.value.code, by_link.value.message, by_link.value.status) == (
        code,
        message,
        status,
    )
    assert (by_client.value.code, by_client.value.message, by_client.value.status) == (
        code,
        message,
        status,
    )
    assert by_cli == f"{code}: {message}"


@pytest.mark.parametrize(
    ("status", "text", "code", "message"),
    [
        (502, b"<html>Bad Gateway</html>", "agent.error", "HTTP 502: <html>Bad Gateway</html>"),
        (404, b"not found\nat all", "agent.bad_reply", "HTTP 404: not found"),
        (503, b"", "agent.error", "HTTP 503"),
    ],
)
async def test_a_reply_without_an_error_body_gets_the_command_lines_code(
    key: bytes, status: int, text: bytes, code: str, message: str
) -> None:
    async def proxy_page(seen: Seen) -> Reply:
        return status, text

    peer = LoopbackPeer(proxy_page)
    async with serving(peer):
        with pytest.raises(PeerCallFailed) as by_link:
            await HttpAgentLink(key).call(
                peer.url, "GET", "/v1/drain", node="n1.test", actor="master"
            )
        by_cli = await trio.to_thread.run_sync(cli_report, peer.url)
    assert (by_link.value.code, by_link.value.message, by_link.value.status) == (
        code,
        message,
        status,
    )
    assert by_cli.startswith(f"{code}: ")


async def test_a_success_that_is_not_a_json_object_is_a_bad_reply(key: bytes) -> None:
    async def odd(seen: Seen) -> Reply:
        return (200, b"[1, 2]") if seen.target == "/list" else (200, b"<html></html>")

    peer = LoopbackPeer(odd)
    link = HttpAgentLink(key)
    async with serving(peer), link:
        for path in ("/list", "/html"):
            with pytest.raises(PeerCallFailed) as bad:
                await link.call(peer.url, "GET", path, node="n1.test", actor="master")
            assert bad.value.code == "agent.bad_reply"
        assert peer.connections == 1  # a bad reply leaves the connection usable


# --- the links that use it ------------------------------------------------------------------


async def test_kept_alive_leaves_a_link_without_connections_alone() -> None:
    class Fake:
        async def call(self, *args: object) -> dict[str, Any]:
            return {}

    fake = Fake()
    async with kept_alive(fake) as entered:
        assert entered is fake


async def test_the_defrag_service_keeps_its_connections_to_the_master_while_it_runs(
    key: bytes, tmp_path: Path
) -> None:
    async def master(seen: Seen) -> Reply:
        if seen.method == "GET":
            return json_reply(200, {"ads": []})
        return json_reply(200, {"mode": "UP"})

    peer = LoopbackPeer(master)
    token_file = tmp_path / "defrag.token"
    token_file.write_text("daemon-token")
    clock = SetClock(EPOCH)

    def count(method: str) -> int:
        return sum(seen.method == method for seen in peer.requests)

    def both_at_least(n: int) -> bool:
        return count("GET") >= n and count("POST") >= n

    async with serving(peer):
        link = HttpDefragLink(
            master_url=peer.url, token_file=token_file, key=key, name="t", clock=clock
        )
        service = DefragService(
            policy=DefragPolicy(name="t", interval=1), link=link, clock=clock, update_interval=3600
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            for cycles in (1, 2, 3):  # each cycle reads the ads, then the ad is published
                with trio.fail_after(5):
                    await peer.wait_until(partial(both_at_least, cycles))
                service.wake()
            nursery.cancel_scope.cancel()
        with trio.fail_after(5):  # stopping the service closed its connections
            await peer.wait_until(lambda: peer.ended == peer.connections)
    # The cycle and the publisher run side by side: at most one connection each, for
    # six requests or more.
    assert peer.connections <= 2
    assert count("GET") >= 3
    assert count("POST") >= 3
    assert {seen.token for seen in peer.requests} == {"daemon-token"}


async def test_the_defrag_link_reconfigured_reads_the_new_token_file(
    key: bytes, tmp_path: Path
) -> None:
    peer = LoopbackPeer(ok)
    first, second = tmp_path / "a.token", tmp_path / "b.token"
    first.write_text("a")
    second.write_text("b")
    link = HttpDefragLink(master_url="http://127.0.0.1:9", token_file=None, key=key, name="t")
    async with serving(peer), link:
        link.reconfigure(master_url=peer.url, token_file=first, timeout=10)
        await link.publish({"MyType": "Defrag"})
        link.reconfigure(master_url=peer.url + "/", token_file=second, timeout=2.5)
        await link.publish({"MyType": "Defrag"})
        assert link.timeout == 2.5
    assert [seen.token for seen in peer.requests] == ["a", "b"]
    assert peer.connections == 1


async def test_the_defrag_link_names_the_master_in_its_codes(key: bytes) -> None:
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    link = HttpDefragLink(master_url=url, token_file=None, key=key, name="t")
    with pytest.raises(MasterCallFailed) as down:
        await link.slot_ads()
    assert down.value.code == "master.unreachable"


async def test_the_agents_pushes_share_one_connection_and_a_reload_reads_the_token_again(
    tmp_path: Path,
) -> None:
    async def master(seen: Seen) -> Reply:
        return json_reply(200, {"mode": "DRAINING", "unavailability": None})

    peer = LoopbackPeer(master)
    first, second = tmp_path / "a.token", tmp_path / "b.token"
    first.write_text("a")
    second.write_text("b")
    clock = SetClock(EPOCH)
    machine = Machine(
        host="push.test", total=Resources(cpus=4, memory=4096), policy=MachinePolicy(), now=EPOCH
    )
    with Store(tmp_path / "agent.db") as store:
        agent = Agent(
            machine=machine,
            store=store,
            runner=FakeRunner(lambda spec: FakeBehaviour(), clock=clock),
            clock=clock,
            execute_dir=tmp_path / "execute",
        )
        async with serving(peer):
            config = MasterLinkConfig(url=peer.url, token_file=first, update_interval=0.01)
            link = MasterLink(agent, config, clock=clock)
            async with trio.open_nursery() as nursery:
                await nursery.start(link.run)
                with trio.fail_after(5):
                    await peer.wait_until(lambda: len(peer.requests) >= 3)
                link.reconfigure(config.model_copy(update={"token_file": second}))
                with trio.fail_after(5):
                    await peer.wait_until(lambda: peer.requests[-1].token == "b")
                    await peer.wait_until(lambda: len(peer.requests) >= 6)
                nursery.cancel_scope.cancel()
            with trio.fail_after(5):  # the link closed it when it stopped
                await peer.wait_until(lambda: peer.ended == 1)
        assert agent.ad()["machine"]["MaintenanceMode"] == "DRAINING"
    assert peer.connections == 1
    assert link.pushes >= 5  # the last reply may still be on its way when it stops
    assert link.failures == 0
    tokens = [seen.token for seen in peer.requests]
    assert tokens[: tokens.index("b")] == ["a"] * tokens.index("b")
    assert set(tokens[tokens.index("b") :]) == {"b"}
