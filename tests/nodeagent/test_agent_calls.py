"""The agent's API as the daemons speak it (:mod:`nodeagent._agent_calls`): the paths and
bodies each call sends, and the two-phase drain's rule — what is not committed is
cancelled, a failed commit never is."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent._agent_calls import AgentCalls, DrainBody, is_gone
from nodeagent._peer import PeerCallFailed


class FakeAgent:
    """Records each request; answers from ``replies`` by (method, path), or raises the
    exception found there."""

    def __init__(self, replies: dict[tuple[str, str], Any]) -> None:
        self.replies = replies
        self.sent: list[tuple[str, str, dict[str, Any] | None]] = []

    async def __call__(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        self.sent.append((method, path, body))
        reply = self.replies.get((method, path), {})
        if isinstance(reply, BaseException):
            raise reply
        return dict(reply)


PHASE1 = {"id": "7", "estimate": {"completion": 120.0, "badput": 3}, "created_at": 100}
BODY = DrainBody(schedule="graceful", reason="maintenance", deadline=60.0)


def test_body_sends_only_what_is_set() -> None:
    assert BODY.to_json() == {
        "schedule": "graceful",
        "reason": "maintenance",
        "ttl": 30,
        "deadline": 60.0,
    }
    hooked = DrainBody(schedule="quick", reason="r", ttl=2.5, on_completion="hook:fw", start="x")
    assert hooked.to_json() == {
        "schedule": "quick",
        "reason": "r",
        "ttl": 2.5,
        "on_completion": "hook:fw",
        "start": "x",
    }


async def test_a_committed_transaction_sends_phase1_then_commit() -> None:
    agent = FakeAgent(
        {
            ("POST", "/v1/drain"): PHASE1,
            ("POST", "/v1/drain/7/commit"): {"state": "draining", "committed_at": 101},
        }
    )
    async with AgentCalls(agent).transaction(BODY) as tx:
        assert tx.phase1.request_id == "7"
        assert tx.phase1.completion == 120.0
        assert tx.phase1.created_at == 100.0
        committed = await tx.commit()
    assert (committed.state, committed.committed_at) == ("draining", 101.0)
    assert [(m, p) for m, p, _ in agent.sent] == [
        ("POST", "/v1/drain"),
        ("POST", "/v1/drain/7/commit"),
    ]
    assert agent.sent[0][2] == BODY.to_json()


async def test_a_block_left_uncommitted_cancels_the_pending_request() -> None:
    agent = FakeAgent({("POST", "/v1/drain"): PHASE1})
    async with AgentCalls(agent).transaction(BODY):
        pass  # declined: no commit
    with pytest.raises(RuntimeError, match="disk full"):
        async with AgentCalls(agent).transaction(BODY):
            raise RuntimeError("disk full")
    assert [p for _, p, _ in agent.sent] == [
        "/v1/drain",
        "/v1/drain/7/cancel",
        "/v1/drain",
        "/v1/drain/7/cancel",
    ]


async def test_a_failed_commit_is_never_cancelled() -> None:
    lost = PeerCallFailed("agent.timeout", "no reply")
    agent = FakeAgent({("POST", "/v1/drain"): PHASE1, ("POST", "/v1/drain/7/commit"): lost})
    with pytest.raises(PeerCallFailed):
        async with AgentCalls(agent).transaction(BODY) as tx:
            await tx.commit()
    assert [p for _, p, _ in agent.sent] == ["/v1/drain", "/v1/drain/7/commit"]


async def test_a_cancel_that_fails_leaves_the_block_s_own_outcome() -> None:
    down = PeerCallFailed("agent.unreachable", "refused")
    agent = FakeAgent({("POST", "/v1/drain"): PHASE1, ("POST", "/v1/drain/7/cancel"): down})
    async with AgentCalls(agent).transaction(BODY):
        pass  # the agent expires the request at its ttl
    assert agent.sent[-1][1] == "/v1/drain/7/cancel"


async def test_cancel_says_whether_the_request_was_still_there() -> None:
    gone = PeerCallFailed("drain.no_such_request", "no such request", 404)
    agent = FakeAgent({("POST", "/v1/drain/a%2Fb/cancel"): gone})
    calls = AgentCalls(agent)
    assert await calls.cancel("a/b") is False
    assert await calls.cancel("8") is True
    assert is_gone(gone)
    assert not is_gone(PeerCallFailed("agent.timeout", "x"))
    agent.replies[("POST", "/v1/drain/9/cancel")] = PeerCallFailed("auth.forbidden", "no", 403)
    with pytest.raises(PeerCallFailed):
        await calls.cancel("9")


async def test_a_phase1_reply_without_an_id_is_refused() -> None:
    agent = FakeAgent({("POST", "/v1/drain"): {"estimate": {}}})
    with pytest.raises(ValueError, match="no request id"):
        async with AgentCalls(agent).transaction(BODY):
            pass  # pragma: no cover
    assert len(agent.sent) == 1


async def test_over_a_link_binds_the_node_and_the_actor() -> None:
    seen: list[tuple[str, str, str, str, str]] = []

    class Link:
        async def call(
            self,
            address: str,
            method: str,
            path: str,
            *,
            node: str,
            actor: str,
            body: dict[str, Any] | None = None,
        ) -> dict[str, Any]:
            seen.append((address, method, path, node, actor))
            return {"machine": {"Name": node}}

    calls = AgentCalls.over(Link(), "http://127.0.0.1:1", node="n1.test", actor="ops")
    assert (await calls.ad())["machine"]["Name"] == "n1.test"
    await calls.cancel_any()
    assert seen == [
        ("http://127.0.0.1:1", "GET", "/v1/ad", "n1.test", "ops"),
        ("http://127.0.0.1:1", "DELETE", "/v1/drain", "n1.test", "ops"),
    ]
