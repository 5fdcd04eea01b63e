"""Replies read from peers are capped: a peer that streams a body forever, or declares a
huge one, fails the call with its reason once past the cap, and the daemon stops reading
(the peer's writes stop: what it sent is what the kernels' buffers hold)."""

from __future__ import annotations

import pytest
import trio

from nodeagent._ha._etcd import REPLY_LIMIT, AsyncEtcd, EtcdSettings, EtcdUnavailable, SyncEtcd
from nodeagent._peer import (
    AGENT_REPLY_LIMIT,
    MASTER_ADS_REPLY_LIMIT,
    MASTER_REPLY_LIMIT,
    PeerCallFailed,
    PeerClient,
)
from nodeagent.master._coordinators import (
    COORDINATOR_REPLY_LIMIT,
    ask_coordinators,
    coordinator_client,
)
from nodeagent.master._sla import Question
from tests.loopback import EndlessReply, serving

MIB = 1 << 20


def test_the_caps_leave_a_wide_margin_over_what_peers_send() -> None:
    assert COORDINATOR_REPLY_LIMIT == 64 << 10  # an answer is a yes and 200 characters
    assert AGENT_REPLY_LIMIT >= 32 * 200 << 10  # an ad with 128 claims is ~200 KiB
    assert MASTER_REPLY_LIMIT >= 1 << 20
    assert MASTER_ADS_REPLY_LIMIT >= 5 * (50 << 20)  # 10,000 nodes' slot ads, ~50 MB


@pytest.mark.parametrize("declared", [None, 10 * MIB])
async def test_a_reply_past_the_cap_fails_the_call_and_is_not_read(declared: int | None) -> None:
    peer = EndlessReply(declared=declared)
    client = PeerClient("coordinator", max_reply=64 << 10)
    async with serving(peer), client:
        with pytest.raises(PeerCallFailed) as failed:
            await client.request("POST", peer.url + "/may", json={})
        assert failed.value.code == "coordinator.bad_reply"
        assert "too large (over 65536 bytes)" in failed.value.message
        await peer.wait_ended(1)  # the client closed the connection
    assert peer.sent < 16 * MIB  # what the buffers took, not the endless body


async def test_a_call_may_take_a_larger_cap_than_its_clients() -> None:
    peer = EndlessReply(declared=3 * 65536)  # ends (the server stops at the close)
    client = PeerClient("master", max_reply=65536)
    async with serving(peer), client:
        with pytest.raises(PeerCallFailed, match="too large"):
            await client.request("GET", peer.url + "/v1/ads")
        with pytest.raises(PeerCallFailed) as failed:  # read whole: a cut JSON document
            await client.request("GET", peer.url + "/v1/ads", max_reply=4 * 65536)
        assert "too large" not in failed.value.message


async def test_a_coordinator_streaming_forever_is_a_no_that_says_why() -> None:
    peer = EndlessReply()
    async with serving(peer):
        question = Question(group="web", url=peer.url + "/may", hosts=("a",), instances=())
        answers = await ask_coordinators([question], client=coordinator_client(5.0), within=5.0)
    assert answers["web"].allow is False
    assert answers["web"].reason.startswith("coordinator.bad_reply")
    assert "too large" in answers["web"].reason
    assert peer.sent < 16 * MIB


async def test_etcd_replies_are_capped_too() -> None:
    assert REPLY_LIMIT == 256 << 20
    peer = EndlessReply(declared=REPLY_LIMIT + 1)
    async with serving(peer):
        etcd = AsyncEtcd(EtcdSettings(endpoints=(peer.url,), timeout=5.0))
        try:
            with pytest.raises(EtcdUnavailable, match="ReplyTooLarge"):
                await etcd.call("kv/range", {"key": "eA=="})
        finally:
            await etcd.aclose()

        def blocking() -> None:
            sync = SyncEtcd(EtcdSettings(endpoints=(peer.url,), timeout=5.0))
            try:
                with pytest.raises(EtcdUnavailable, match="ReplyTooLarge"):
                    sync.call("kv/range", {"key": "eA=="})
            finally:
                sync.close()

        await trio.to_thread.run_sync(blocking)
    assert peer.sent < 16 * MIB
