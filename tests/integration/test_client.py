"""The Python client against real agent daemons, over the Unix socket and TCP."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import trio

from nodeagent.client import (
    AgentClient,
    DrainInProgress,
    Forbidden,
    NotAccepting,
    SyncAgentClient,
    TransactionExpired,
    Unauthorized,
    Unreachable,
)
from tests.harness import AgentProcess, job_script, wait_for

POLICY = {"max_job_retirement_time": 2, "machine_max_vacate_time": 1}


@pytest.fixture(scope="module")
def shared_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    with AgentProcess(tmp_path_factory.mktemp("shared") / "a", policy=POLICY) as process:
        yield process


@pytest.fixture
def agent(shared_agent: AgentProcess) -> Iterator[AgentProcess]:
    """The module's agent, idle when the test begins and made idle again after it."""
    shared_agent.make_idle()
    yield shared_agent
    shared_agent.make_idle()


async def eventually(predicate: Callable[[], Awaitable[bool]], *, within: float = 20) -> None:
    """Poll ``predicate`` (a real process changes state on its own) until it holds."""
    with trio.fail_after(within):
        while True:
            if await predicate():
                return
            await trio.sleep(0.02)


async def wait_started(record: Path) -> None:
    await eventually(trio.Path(f"{record}.started").exists)


async def test_committing_the_transaction_drains_the_node(
    agent: AgentProcess, tmp_path: Path
) -> None:
    argv, _ = job_script(tmp_path, "job")
    claim = agent.claim(argv, cpus=2, job_id="42.0")
    async with AgentClient(socket=agent.socket) as client:
        async with client.start_draining("graceful", reason="kernel") as txn:
            assert txn.request.state == "pending"
            assert txn.request.reason == "kernel"
            [blocker] = txn.estimate.blockers
            assert (blocker.claim_id, blocker.job_id, blocker.cpus) == (claim["id"], "42.0", 2)
            assert txn.estimate.completion >= txn.estimate.now
            committed = await txn.commit()
        assert committed.schedule == "graceful"
        status = await client.drain()
        assert status.current is not None
        assert (status.current.id, status.current.state) == (txn.request_id, "draining")
        machine = (await client.ad())["machine"]
        assert machine["Start"] is False
        assert machine["DrainingRequestId"] == txn.request_id
        classad = (await client.ad_classad()).splitlines()
        assert f'DrainingRequestId = "{txn.request_id}"' in classad
        assert "Start = false" in classad


async def test_leaving_without_commit_cancels(agent: AgentProcess) -> None:
    async with AgentClient(socket=agent.socket) as client:
        async with client.start_draining("quick") as txn:
            assert (await client.drain()).state == "pending"
        status = await client.drain()
    assert status.state == "none"
    assert status.last is not None
    assert (status.last.id, status.last.state) == (txn.request_id, "cancelled")


async def test_an_exception_in_the_block_cancels_and_propagates(agent: AgentProcess) -> None:
    async with AgentClient(socket=agent.socket) as client:
        with pytest.raises(RuntimeError, match="changed my mind"):
            async with client.start_draining() as txn:
                raise RuntimeError("changed my mind")
        status = await client.drain()
    assert status.state == "none"
    assert status.last is not None
    assert (status.last.id, status.last.state) == (txn.request_id, "cancelled")


async def test_a_second_transaction_is_refused_with_condor_code_10001(
    agent: AgentProcess,
) -> None:
    async with AgentClient(socket=agent.socket) as client:
        async with client.start_draining() as first:
            with pytest.raises(DrainInProgress) as caught:
                async with client.start_draining():
                    pytest.fail("a second transaction opened")
            assert (caught.value.condor_code, caught.value.status) == (10001, 409)
            assert caught.value.code == "drain.in_progress"
            current = (await client.drain()).current
            assert current is not None
            assert (current.id, current.state) == (first.request_id, "pending")
        assert (await client.drain()).state == "none"


async def test_commit_after_the_ttl_is_transaction_expired(agent: AgentProcess) -> None:
    async with AgentClient(socket=agent.socket) as client:
        async with client.start_draining(ttl=0.2) as txn:
            await trio.sleep(0.5)
            with pytest.raises(TransactionExpired) as caught:
                await txn.commit()
        assert caught.value.code == "drain.transaction_expired"
        status = await client.drain()
    assert status.state == "none"
    assert status.last is not None
    assert (status.last.id, status.last.state) == (txn.request_id, "cancelled")


async def test_a_read_token_reads_but_may_not_write(agent: AgentProcess) -> None:
    async with AgentClient(url=agent.url, token=agent.token("READ")) as client:
        assert (await client.ad())["machine"]["Machine"] == "node1.test"
        assert (await client.drain()).state == "none"
        assert await client.claims() == []
        with pytest.raises(Forbidden) as caught:
            async with client.start_draining():
                pytest.fail("a READ token opened a transaction")
    assert (caught.value.status, caught.value.code) == (403, "auth.forbidden")
    async with AgentClient(url=agent.url, token=agent.token("ADMINISTRATOR")) as client:
        request = await client.drain_now("fast", reason="admin")
        assert request.state in ("draining", "drained")
        ended = await client.cancel_draining()
    assert ended is not None
    assert (ended.id, ended.state) == (request.id, "cancelled")


async def test_tcp_without_a_token_is_unauthorized(agent: AgentProcess) -> None:
    async with AgentClient(url=agent.url) as client:
        assert (await client.healthz()).status == "ok"
        with pytest.raises(Unauthorized) as caught:
            await client.ad()
    assert (caught.value.status, caught.value.code) == (401, "auth.unauthenticated")


async def test_a_missing_socket_is_unreachable(tmp_path: Path) -> None:
    missing = tmp_path / "run" / "nodeagent.sock"
    async with AgentClient(socket=missing) as client:
        with pytest.raises(Unreachable) as caught:
            await client.healthz()
    assert caught.value.code == "client.unreachable"
    assert caught.value.status is None
    assert str(missing) in caught.value.message


async def test_create_and_release_a_claim(agent: AgentProcess, tmp_path: Path) -> None:
    argv, record = job_script(tmp_path, "job")
    async with AgentClient(socket=agent.socket) as client:
        claim = await client.create_claim(
            argv, cpus=2, memory=512, owner="alice", job_id="7.0", job_max_vacate_time=1
        )
        assert claim.job.pid is not None
        agent.job_pids.add(claim.job.pid)
        assert (claim.resources.cpus, claim.resources.memory) == (2, 512)
        assert (claim.job.owner, claim.job.job_id, claim.job.argv) == ("alice", "7.0", tuple(argv))
        assert [c.id for c in await client.claims()] == [claim.id]
        assert (await client.claim(claim.id)).slot == claim.slot
        await wait_started(record)
        released = await client.release(claim.id)
        assert released.id == claim.id
        assert released.evicted_at is not None

        async def no_claims() -> bool:
            return not await client.claims()

        await eventually(no_claims)
    assert record.exists()
    assert agent.jobs_alive() == []


async def test_wait_drained_returns_once_the_last_job_exits(
    agent: AgentProcess, tmp_path: Path
) -> None:
    argv, record = job_script(tmp_path, "job", term_delay=0.3)
    async with AgentClient(socket=agent.socket) as client:
        claim = await client.create_claim(argv, max_job_retirement_time=1)
        assert claim.job.pid is not None
        agent.job_pids.add(claim.job.pid)
        await wait_started(record)
        async with client.start_draining("graceful") as txn:
            await txn.commit()
        with pytest.raises(NotAccepting):
            await client.create_claim(argv)
        with trio.fail_after(20):
            drained = await client.wait_drained(txn.request_id, poll=0.05)
        assert drained is not None
        assert (drained.id, drained.state) == (txn.request_id, "drained")
        assert drained.drained_at is not None
        assert await client.claims() == []
    assert record.exists()
    assert agent.jobs_alive() == []


def test_the_sync_client_runs_a_whole_transaction(agent: AgentProcess, tmp_path: Path) -> None:
    argv, record = job_script(tmp_path, "job")
    client = SyncAgentClient(socket=agent.socket)
    claim = client.create_claim(argv, max_job_retirement_time=0, job_max_vacate_time=1)
    assert claim.job.pid is not None
    agent.job_pids.add(claim.job.pid)
    wait_for(lambda: Path(f"{record}.started").exists())
    with client.start_draining("graceful", reason="sync") as txn:
        assert [b.claim_id for b in txn.estimate.blockers] == [claim.id]
        assert client.drain().state == "pending"
        estimate = txn.commit()
    assert estimate.schedule == "graceful"
    drained = client.wait_drained(poll=0.05, timeout=20)
    assert drained is not None
    assert (drained.id, drained.state) == (txn.request_id, "drained")
    assert client.cancel_draining() is not None
    assert client.drain().state == "none"
    assert record.exists()
