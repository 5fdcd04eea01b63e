"""Node restriction, end to end: one node's DAEMON token is worth that node alone.

A real master and real agents on loopback. The attacker holds the DAEMON token of one node
(``x.test``, an agent of the pool) and a listener of its own. Its ad with a ``MyAddress``
carrying a path and a query is refused; an ad under another node's name is refused and
leaves that node's ad, and its fresh fetches, alone; an ad with a plain origin of its
listener is taken, and a fresh fetch then sends the listener a token — READ, short-lived,
bound to ``x.test`` — which another agent refuses, ``x.test`` itself takes only for reads,
and the master refuses too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from nodeagent._auth import Scope, load_key, verify_token
from tests.harness import AgentProcess, MasterProcess, wait_for

pytestmark = pytest.mark.integration

NAMES = ("x.test", "a.test", "b.test")


class _Listener(BaseHTTPRequestHandler):
    """The attacker's listener: keeps what each request brought, answers 404."""

    seen: ClassVar[list[tuple[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization", "")))
        body = b'{"error": {"code": "x", "message": "x"}}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def listener() -> Iterator[str]:
    _Listener.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Listener)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def pool(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MasterProcess, dict[str, AgentProcess]]]:
    """A master and the agents x.test, a.test, b.test, each with its own node's token; they
    push at start and then once a minute (so a test's own pushes are not overwritten)."""
    root = tmp_path_factory.mktemp("pool")
    with ExitStack() as stack:
        master = stack.enter_context(MasterProcess(root / "master"))
        agents = {}
        for name in NAMES:
            settings = {
                **master.agent_settings(root / name, node=name, update_interval=60),
                "ad_debounce": 60,
            }
            agents[name] = stack.enter_context(
                AgentProcess(root / name, hostname=name, master=settings)
            )
        wait_for(lambda: held(master) == set(NAMES))
        yield master, agents


def held(master: MasterProcess) -> set[str]:
    return {ad["Name"] for ad in master.call("GET", "/v1/ads").json()["ads"]}


def ad_of(agent: AgentProcess) -> dict[str, Any]:
    reply: dict[str, Any] = agent.call("GET", "/v1/ad").json()
    return reply


def with_address(ad: dict[str, Any], address: str) -> dict[str, Any]:
    for one in (ad["machine"], *ad["slots"]):
        one["MyAddress"] = address
    return ad


def test_one_nodes_token_is_worth_that_node_alone(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    master, agents = pool
    stolen = master.token("DAEMON", subject="agent@x.test", node="x.test")
    a_before = master.call("GET", "/v1/ads/a.test").json()["machine"]
    with listener() as evil, master.client(stolen) as attacker:
        # The reproduction: a MyAddress with a path and a query is refused.
        smuggled = with_address(ad_of(agents["x.test"]), f"{evil}/x?target=")
        refused = attacker.post("/v1/ads", json=smuggled)
        assert (refused.status_code, refused.json()["error"]["code"]) == (422, "request.invalid")
        assert "MyAddress" in refused.json()["error"]["message"]

        # Another node's ad, pointing at the listener: 403, and a.test's ad is unchanged.
        forged = with_address(ad_of(agents["a.test"]), evil)
        foreign = attacker.post("/v1/ads", json=forged)
        assert (foreign.status_code, foreign.json()["error"]["code"]) == (403, "auth.wrong_node")
        assert master.call("GET", "/v1/ads/a.test").json()["machine"] == a_before
        fresh_a = attacker.get("/v1/ads/a.test", params={"fresh": "true"})
        assert fresh_a.status_code == 200, fresh_a.text
        assert fresh_a.json()["machine"]["MyAddress"] == agents["a.test"].url
        assert _Listener.seen == []  # a.test's fresh fetch went to a.test

        # Its own node's ad with a plain origin of its listener is taken; a fresh fetch
        # (the token holds READ) sends the listener the master's token, on the master's path.
        own = with_address(ad_of(agents["x.test"]), evil)
        assert attacker.post("/v1/ads", json=own).status_code == 200
        fetched = attacker.get("/v1/ads/x.test", params={"fresh": "true"})
        assert (fetched.status_code, fetched.json()["error"]["code"]) == (502, "x")
    [(path, authorization)] = _Listener.seen
    assert path == "/v1/ad"
    captured = authorization.removeprefix("Bearer ")

    # What it caught: READ, a minute at most, bound to x.test.
    principal = verify_token(load_key(master.key_file), captured, audience="x.test")
    assert (principal.subject, principal.scope) == ("master:master", Scope.READ)
    replayed = {"Authorization": f"Bearer {captured}"}
    for name in ("a.test", "b.test"):  # every other agent refuses it
        for method, path in (("GET", "/v1/ad"), ("POST", "/v1/drain"), ("POST", "/v1/claims")):
            reply = httpx.request(
                method, agents[name].url + path, headers=replayed, json={}, timeout=10
            )
            assert (reply.status_code, reply.json()["error"]["code"]) == (
                401,
                "auth.wrong_audience",
            ), (name, path)
    x = agents["x.test"].url
    assert httpx.get(x + "/v1/ad", headers=replayed, timeout=10).status_code == 200
    drain = httpx.post(x + "/v1/drain", headers=replayed, json={"schedule": "fast"}, timeout=10)
    assert (drain.status_code, drain.json()["error"]["code"]) == (403, "auth.forbidden")
    assert ad_of(agents["x.test"])["machine"]["DrainState"] == "none"
    schedule: dict[str, Any] = {"windows": []}
    at_master = httpx.post(
        master.url + "/maintenance/schedule", headers=replayed, json=schedule, timeout=10
    )
    assert (at_master.status_code, at_master.json()["error"]["code"]) == (
        401,
        "auth.wrong_audience",
    )


def test_a_pool_wide_daemon_token_is_refused_and_a_per_node_token_works(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    master, agents = pool
    ad = ad_of(agents["b.test"])
    with master.client(master.token("DAEMON", subject="agents")) as pooled:
        reply = pooled.post("/v1/ads", json=ad)
    assert (reply.status_code, reply.json()["error"]["code"]) == (403, "auth.pool_daemon_token")
    assert "--node" in reply.json()["error"]["message"]
    with master.client(master.token("DAEMON", subject="b", node="b.test")) as own:
        assert own.post("/v1/ads", json=ad).status_code == 200


def test_pool_wide_daemon_tokens_for_a_migration_are_taken_counted_and_logged(
    tmp_path: Path,
) -> None:
    settings = {"allow_pool_daemon_tokens": True}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        assert "allow_pool_daemon_tokens is on" in master.log_path.read_text()
        pooled = master.token("DAEMON", subject="old-agents")
        with master.client(pooled) as client:
            for name in ("m1.test", "m2.test"):
                ad = {"machine": {"Name": name, "MyAddress": "http://127.0.0.1:1"}, "slots": []}
                assert client.post("/v1/ads", json=ad).status_code == 200, name
        assert held(master) == {"m1.test", "m2.test"}
        metrics = master.call("GET", "/metrics").text
        assert "nodeagent_master_pool_token_ads_total 2.0" in metrics
        log = master.log_path.read_text()
        assert log.count("old-agents's pool-wide DAEMON token") == 1
