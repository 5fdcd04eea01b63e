"""The etcd client, store and election against a real etcd on loopback.

What the masters on etcd stand on: documents written in fenced transactions (a writer
without a fence, or fenced out, writes nothing), collections written member by member,
a second store following the first through a watch, endpoints tried in turn, etcd's users,
and one leader among candidates, which stops leading when etcd goes away.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from nodeagent._ha._etcd import AsyncEtcd, EtcdError, EtcdSettings, EtcdUnavailable, SyncEtcd
from nodeagent._ha._leadership import Election, Fence, LeadershipLost, NotLeading
from nodeagent._ha._store import EtcdStore
from nodeagent._store import Fixed, Members, OutcomeUnknown, StoreError
from tests.etcd import EtcdServer, etcd_server, free_port
from tests.harness import TLS_CONTEXT

__all__ = ["etcd_server"]

pytestmark = pytest.mark.integration

PREFIX = "/test/master/"


def settings(server: EtcdServer, **kwargs: object) -> EtcdSettings:
    return EtcdSettings(endpoints=(server.url,), timeout=2.0, **kwargs)  # type: ignore[arg-type]


def keys(server: EtcdServer) -> dict[str, str]:
    """Every key etcd holds, with its value (as text)."""
    reply = httpx.post(
        f"{server.url}/v3/kv/range",
        json={"key": base64.b64encode(b"\0").decode(), "range_end": "AA=="},
        verify=TLS_CONTEXT,
    ).json()
    return {
        base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode(
            errors="replace"
        )
        for kv in reply.get("kvs", ())
    }


@pytest.fixture
async def etcd(etcd_server: EtcdServer) -> AsyncIterator[AsyncEtcd]:
    client = AsyncEtcd(settings(etcd_server))
    try:
        yield client
    finally:
        await client.aclose()


async def lead_key(etcd: AsyncEtcd, key: bytes) -> Fence:
    """Take ``key`` as a leader would (a lease of 10 s)."""
    from nodeagent._ha._etcd import created_at, put, revision_of

    lease = await etcd.grant(10)
    held, reply = await etcd.txn([created_at(key, 0)], [put(key, b"{}", lease=lease)])
    assert held
    return Fence(key=key, revision=revision_of(reply), lease=lease)


async def test_documents_are_written_whole_and_collections_member_by_member(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    store = EtcdStore(settings(etcd_server), PREFIX, collections={"drains"})
    try:
        store.fence = await lead_key(etcd, PREFIX.encode() + b"leader")
        store.save(maintenance={"schedule": [1, 2]}, drains={"a": {"phase": "pending"}, "b": {}})
        held = keys(etcd_server)
        assert held[PREFIX + "docs/maintenance"] == '{"schedule":[1,2]}'
        assert held[PREFIX + "sets/drains/a"] == '{"phase":"pending"}'
        revision = store.revision
        # One member changes, one goes: two operations, the rest is not written again.
        store.save(maintenance={"schedule": [1, 2]}, drains={"a": {"phase": "committed"}})
        held = keys(etcd_server)
        assert held[PREFIX + "sets/drains/a"] == '{"phase":"committed"}'
        assert PREFIX + "sets/drains/b" not in held
        assert store.revision == revision + 1
        # Nothing changed: no transaction at all.
        store.save(maintenance={"schedule": [1, 2]}, drains={"a": {"phase": "committed"}})
        assert store.revision == revision + 1
        # Another store (another master) reads what was written.
        other = EtcdStore(settings(etcd_server), PREFIX, collections={"drains"})
        assert other.load("maintenance") == {"schedule": [1, 2]}
        assert other.load("drains") == {"a": {"phase": "committed"}}
        assert other.load("counters") is None
        other.close()
        # Members: those written (one key each), the others neither read nor written.
        revision = store.revision
        store.save(drains=Members(put={"c": {"phase": "operation"}}, delete=("a", "z")))
        held = keys(etcd_server)
        assert held[PREFIX + "sets/drains/c"] == '{"phase":"operation"}'
        assert PREFIX + "sets/drains/a" not in held
        assert store.revision == revision + 1
        assert store.load("drains") == {"c": {"phase": "operation"}}
        with pytest.raises(TypeError):
            store.save(maintenance=Members(put={"x": 1}))
        # A Fixed document: encoded once, written when etcd holds another.
        revision = store.revision
        schedule = {"schedule": [3]}
        store.save(maintenance=Fixed(schedule))
        store.save(maintenance=Fixed(schedule))
        assert store.revision == revision + 1
        assert keys(etcd_server)[PREFIX + "docs/maintenance"] == '{"schedule":[3]}'
        store.save(maintenance={"schedule": [4]})
        store.save(maintenance=Fixed(schedule))  # the same object, etcd holds another
        assert store.load("maintenance") == schedule
        assert store.revision == revision + 3
        with pytest.raises(TypeError):
            store.save(drains=Fixed({}))
    finally:
        store.close()


async def test_a_writer_without_a_fence_or_fenced_out_writes_nothing(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    store = EtcdStore(settings(etcd_server), PREFIX, collections={"drains"})
    try:
        with pytest.raises(NotLeading):
            store.save(counters={"drains_started": 1})
        assert keys(etcd_server) == {}
        leader = PREFIX.encode() + b"leader"
        store.fence = await lead_key(etcd, leader)
        store.save(counters={"drains_started": 1})
        # The term ends behind the store's back (its lease revoked: the key goes) and
        # another candidate takes the key: the old leader's write is refused.
        await etcd.revoke(store.fence.lease)
        await lead_key(etcd, leader)
        with pytest.raises(LeadershipLost):
            store.save(counters={"drains_started": 2}, drains={"x": {}})
        after: Fence | None = store.fence  # save() ended the term
        assert after is None
        held = keys(etcd_server)
        assert held[PREFIX + "docs/counters"] == '{"drains_started":1}'
        assert PREFIX + "sets/drains/x" not in held
        assert store.load("counters") == {"drains_started": 1}
    finally:
        store.close()


async def test_a_follower_sees_each_change_through_its_watch(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    writer = EtcdStore(settings(etcd_server), PREFIX, collections={"drains"})
    reader = EtcdStore(settings(etcd_server), PREFIX, collections={"drains"})
    seen: list[set[str]] = []
    arrived = trio.Event()

    def changed(names: set[str]) -> None:
        seen.append(names)
        arrived.set()

    try:
        writer.fence = await lead_key(etcd, PREFIX.encode() + b"leader")
        async with trio.open_nursery() as nursery:
            await nursery.start(reader.follow, etcd, changed)
            writer.save(drains={"a": {"phase": "pending"}}, counters={"n": 1})
            with trio.fail_after(5):
                while reader.load("drains") != {"a": {"phase": "pending"}}:
                    await arrived.wait()
                    arrived = trio.Event()
            assert set().union(*seen) == {"drains", "counters"}
            writer.save(drains={})
            with trio.fail_after(5):
                while reader.load("drains"):
                    await arrived.wait()
                    arrived = trio.Event()
            nursery.cancel_scope.cancel()
        assert reader.load("counters") == {"n": 1}
    finally:
        writer.close()
        reader.close()


async def test_endpoints_are_tried_in_turn_and_a_dead_etcd_fails_within_the_timeout(
    etcd_server: EtcdServer,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client = SyncEtcd(EtcdSettings(endpoints=(dead, etcd_server.url), timeout=2.0))
    try:
        revision, kvs = client.range_prefix(b"/nothing/")
        assert revision >= 1
        assert kvs == []
    finally:
        client.close()
    alone = SyncEtcd(EtcdSettings(endpoints=(dead,), timeout=0.5))
    try:
        with pytest.raises(EtcdUnavailable, match=dead):
            alone.range_prefix(b"/x/")
    finally:
        alone.close()
    with pytest.raises(EtcdUnavailable):
        EtcdStore(EtcdSettings(endpoints=(dead,), timeout=0.5), PREFIX)


async def test_etcd_users_log_in_and_a_wrong_password_is_refused(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    await etcd.call("auth/user/add", {"name": "root", "password": "secret"})
    await etcd.call("auth/user/grant", {"user": "root", "role": "root"})
    await etcd.call("auth/enable", {})
    good = SyncEtcd(settings(etcd_server, user="root", password="secret"))
    bad = SyncEtcd(settings(etcd_server, user="root", password="wrong"))
    anonymous = SyncEtcd(settings(etcd_server))
    try:
        assert good.range_prefix(b"/x/")[1] == []
        with pytest.raises(EtcdError, match="log in"):
            bad.range_prefix(b"/x/")
        with pytest.raises(EtcdError):
            anonymous.range_prefix(b"/x/")
    finally:
        good.close()
        bad.close()
        anonymous.close()


async def test_one_candidate_leads_and_the_next_takes_over_when_it_stops(
    etcd_server: EtcdServer,
) -> None:
    clients = [AsyncEtcd(settings(etcd_server)) for _ in range(2)]
    key = PREFIX.encode() + b"leader"
    elections = [
        Election(etcd=c, key=key, ttl=5, identity={"url": f"http://m{i}"})
        for i, c in enumerate(clients)
    ]
    terms: list[str] = []

    def leader_of(i: int):  # type: ignore[no-untyped-def]
        async def lead(fence: Fence) -> None:
            terms.append(f"m{i}")
            await trio.sleep_forever()

        return lead

    try:
        async with trio.open_nursery() as nursery:
            scopes = []
            for i, election in enumerate(elections):
                scope = trio.CancelScope()
                scopes.append(scope)

                async def candidate(
                    election: Election = election,
                    scope: trio.CancelScope = scope,
                    i: int = i,
                ) -> None:
                    with scope:
                        await election.run(leader_of(i))

                nursery.start_soon(candidate)
            with trio.fail_after(5):
                while not terms:
                    await elections[0].changed()
            first = int(terms[0][1])
            assert elections[first].leading
            assert not elections[1 - first].leading
            with trio.fail_after(5):
                while elections[1 - first].leader is None:
                    await elections[1 - first].changed()
            assert elections[1 - first].leader == {"url": f"http://m{first}"}
            stopped = trio.current_time()
            scopes[first].cancel()  # a master stopped: it gives its lease back
            with trio.fail_after(5):
                while not elections[1 - first].leading:
                    await elections[1 - first].changed()
            assert terms[1] == f"m{1 - first}"
            assert trio.current_time() - stopped < 2.5  # well within the ttl of 5 s
            nursery.cancel_scope.cancel()
    finally:
        for c in clients:
            await c.aclose()


async def test_a_leader_stops_acting_within_its_ttl_when_etcd_goes_and_leads_again_after(
    tmp_path: Path,
) -> None:
    from tests.etcd import have_etcd

    have_etcd()
    server = EtcdServer(tmp_path / "etcd").start()
    client = AsyncEtcd(EtcdSettings(endpoints=(server.url,), timeout=0.5))
    election = Election(etcd=client, key=b"/t/leader", ttl=2, identity={"url": "http://m"})
    acting: list[tuple[str, float]] = []

    async def lead(fence: Fence) -> None:
        acting.append(("start", trio.current_time()))
        try:
            await trio.sleep_forever()
        finally:
            acting.append(("stop", trio.current_time()))

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(election.run, lead)
            with trio.fail_after(5):
                while not election.leading:
                    await election.changed()
            stopped_at = trio.current_time()
            server.stop()
            with trio.fail_after(5):
                while election.leading:
                    await election.changed()
            assert acting[-1][0] == "stop"  # type: ignore[unreachable]  # a task ended it
            assert acting[-1][1] - stopped_at <= 2.0 + 0.5  # the ttl, and one call's timeout
            await trio.sleep(0.5)
            assert not election.leading  # no etcd: nobody leads
            server.start()
            with trio.fail_after(10):
                while not election.leading:
                    await election.changed()
            assert [what for what, _ in acting] == ["start", "stop", "start"]
            nursery.cancel_scope.cancel()
    finally:
        await client.aclose()
        server.stop()


async def test_a_write_to_an_etcd_that_does_not_answer_gives_up_within_its_limit(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    """A member that takes the connection and never answers (a partition, a hung
    process): the store's write, then its seal, each give up within the write timeout,
    well before the calls' own timeout; etcd could not say whether the write was applied,
    so the store says so and ends its term (its copy unchanged)."""
    import socket
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        store = EtcdStore(settings(etcd_server), PREFIX, write_timeout=0.3)
        store.fence = await lead_key(etcd, PREFIX.encode() + b"leader")
        store._sync.close()  # from now on etcd "is" the silent member
        store._sync = SyncEtcd(EtcdSettings(endpoints=(url,), timeout=5.0))
        began = time.monotonic()
        with pytest.raises(OutcomeUnknown, match="could not say"):
            store.save(counters={"n": 1})
        assert time.monotonic() - began < 2.5  # twice the write's limit, not the 5 s of the calls
        after: Fence | None = store.fence  # the term ends
        assert after is None
        assert store.load("counters") is None
        assert keys(etcd_server) == {PREFIX + "leader": "{}"}
        store.close()
    finally:
        silent.close()


class Unanswered(SyncEtcd):
    """etcd whose answer to the next transaction is lost: with ``deliver`` it is sent and
    applied (the reply lost on its way back), without it is kept in :attr:`held`, still
    on its way (a member stopped before it read it), for the test to deliver later."""

    def __init__(self, settings: EtcdSettings, *, deliver: bool) -> None:
        super().__init__(settings)
        self.deliver = deliver
        self.held: list[tuple[list[Any], list[Any], list[Any]]] = []
        self.lost = 0

    def txn(
        self,
        compare: Sequence[Mapping[str, Any]],
        success: Sequence[Mapping[str, Any]],
        failure: Sequence[Mapping[str, Any]] = (),
        *,
        limit: float | None = None,
    ) -> tuple[bool, dict[str, Any]]:
        if self.lost:
            return super().txn(compare, success, failure, limit=limit)
        self.lost += 1
        if self.deliver:
            super().txn(compare, success, failure, limit=limit)
        else:
            self.held.append((list(compare), list(success), list(failure)))
        raise EtcdUnavailable("etcd is unavailable (ReadTimeout): the reply was lost")


async def test_a_write_whose_reply_was_lost_but_was_applied_is_a_write(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    """The store learns from ``last-write`` that its write landed: the save returns, its
    copy holds the change, and the next write goes on from it."""
    store = EtcdStore(settings(etcd_server), PREFIX)
    try:
        store.fence = await lead_key(etcd, PREFIX.encode() + b"leader")
        store.save(counters={"n": 1})
        store._sync.close()
        store._sync = lossy = Unanswered(settings(etcd_server), deliver=True)
        store.save(counters={"n": 2})
        assert lossy.lost == 1
        assert keys(etcd_server)[PREFIX + "docs/counters"] == '{"n":2}'
        assert store.load("counters") == {"n": 2}
        assert store.fence is not None  # the term goes on
        store.save(counters={"n": 3})
        assert keys(etcd_server)[PREFIX + "docs/counters"] == '{"n":3}'
    finally:
        store.close()


async def test_a_write_still_on_its_way_is_sealed_out_before_it_is_called_refused(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    """A write held on its way to etcd when the store gives up on it: the store seals
    ``last-write`` first, so that the write, delivered after its refusal, changes nothing."""
    store = EtcdStore(settings(etcd_server), PREFIX)
    try:
        store.fence = await lead_key(etcd, PREFIX.encode() + b"leader")
        store.save(counters={"n": 1})
        store._sync.close()
        store._sync = lossy = Unanswered(settings(etcd_server), deliver=False)
        with pytest.raises(StoreError, match="no longer can be") as refused:
            store.save(counters={"n": 2})
        assert type(refused.value) is StoreError  # not unknown, not the end of the term
        assert store.load("counters") == {"n": 1}
        assert store.fence is not None  # the term goes on
        ((compare, success, failure),) = lossy.held
        applied, _ = await etcd.txn(compare, success, failure)  # the write arrives at last
        assert not applied
        assert keys(etcd_server)[PREFIX + "docs/counters"] == '{"n":1}'
        store.save(counters={"n": 3})  # the store knows where last-write is
        assert keys(etcd_server)[PREFIX + "docs/counters"] == '{"n":3}'
    finally:
        store.close()


async def test_a_candidate_gives_back_its_own_key_left_from_an_earlier_term(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    """etcd was unreachable when its term ended, so the key it held (its lease of 30 s)
    is still there: it gives it back and leads at once instead of waiting out the lease.
    Another candidate's key is waited for."""
    from nodeagent._ha._etcd import created_at, put

    key = PREFIX.encode() + b"leader"
    me = {"url": "http://m1", "host": "h", "pid": 1}
    lease = await etcd.grant(30)
    held, _ = await etcd.txn([created_at(key, 0)], [put(key, json.dumps(me).encode(), lease=lease)])
    assert held
    election = Election(etcd=etcd, key=key, ttl=2, identity=me)

    async def lead(fence: Fence) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        await nursery.start(election.run, lead)
        with trio.fail_after(3):  # not the 30 s of the old lease
            while not election.leading:
                await election.changed()
        nursery.cancel_scope.cancel()
    other = Election(etcd=etcd, key=key, ttl=2, identity={"url": "http://m2"})
    lease = await etcd.grant(30)
    held, _ = await etcd.txn([created_at(key, 0)], [put(key, json.dumps(me).encode(), lease=lease)])
    assert held
    async with trio.open_nursery() as nursery:
        await nursery.start(other.run, lead)
        with trio.move_on_after(2):
            while not other.leading:
                await other.changed()
        assert not other.leading
        assert other.leader == me
        nursery.cancel_scope.cancel()


async def test_a_term_whose_first_reads_fail_ends_and_the_candidate_campaigns_again(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    """etcd going away just as a term starts (the leader's first read of the state fails)
    ends the term, not the daemon: it campaigns again."""
    election = Election(etcd=etcd, key=b"/t/leader", ttl=2, identity={"url": "http://m"})
    terms: list[int] = []

    async def lead(fence: Fence) -> None:
        terms.append(fence.revision)
        if len(terms) == 1:
            raise EtcdUnavailable("etcd is unavailable (a test)")
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        await nursery.start(election.run, lead)
        with trio.fail_after(5):
            while len(terms) < 2 or not election.leading:
                await election.changed()
        assert election.terms == 2
        assert terms[1] > terms[0]  # a new term, a new fence
        nursery.cancel_scope.cancel()


class StallingProxy:
    """Forwards TCP connections to etcd; :meth:`stall` makes the connections open now
    go silent (nothing more reaches the client, nothing is closed), as a partition that
    drops packets does; later connections flow."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.opened = 0
        self._stalled_upto = 0

    def stall(self) -> None:
        self._stalled_upto = self.opened

    async def serve(self, client: trio.SocketStream) -> None:
        self.opened += 1
        number = self.opened
        upstream = await trio.open_tcp_stream(*self.upstream)

        async def pump(source: trio.SocketStream, sink: trio.SocketStream, to_client: bool) -> None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                while data := await source.receive_some(65536):
                    if to_client and number <= self._stalled_upto:
                        await trio.sleep_forever()
                    await sink.send_all(data)

        async with upstream, client, trio.open_nursery() as nursery:
            nursery.start_soon(pump, client, upstream, False)
            nursery.start_soon(pump, upstream, client, True)


async def test_a_watch_gone_silent_is_made_anew(
    etcd_server: EtcdServer, etcd: AsyncEtcd, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodeagent._ha import _store as etcd_store

    monkeypatch.setattr(etcd_store, "WATCH_RENEWAL", 1.0)
    proxy = StallingProxy(("127.0.0.1", etcd_server.client_port))
    writer = EtcdStore(settings(etcd_server), PREFIX)
    reader = EtcdStore(settings(etcd_server), PREFIX)
    try:
        writer.fence = await lead_key(etcd, PREFIX.encode() + b"leader")
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(trio.serve_tcp, proxy.serve, 0)
            port = listeners[0].socket.getsockname()[1]
            via = AsyncEtcd(EtcdSettings(endpoints=(f"http://127.0.0.1:{port}",), timeout=2.0))
            arrived = trio.Event()

            def changed(names: set[str]) -> None:
                nonlocal arrived
                arrived.set()
                arrived = trio.Event()

            async def until(value: dict[str, int]) -> None:
                while reader.load("counters") != value:
                    await arrived.wait()

            await nursery.start(reader.follow, via, changed)
            writer.save(counters={"n": 1})
            with trio.fail_after(5):
                await until({"n": 1})
            proxy.stall()  # the watch's connection goes silent
            writer.save(counters={"n": 2})
            with trio.fail_after(5):  # the renewed watch brings it
                await until({"n": 2})
            nursery.cancel_scope.cancel()
        await via.aclose()
    finally:
        writer.close()
        reader.close()


async def test_a_large_document_is_stored_compressed_and_read_back_by_every_store(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    """The schedule of a large pool: over etcd's default request size as JSON (1.5 MiB),
    written compressed, read back as it was by a store that opens later and by one that
    follows."""
    schedule = {"machines": [{"hostname": f"node{i:05d}.example.org"} for i in range(60_000)]}
    assert len(json.dumps(schedule)) > 1_600_000
    writer = EtcdStore(settings(etcd_server), PREFIX)
    reader = EtcdStore(settings(etcd_server), PREFIX)
    arrived = trio.Event()
    try:
        writer.fence = await lead_key(etcd, PREFIX.encode() + b"leader")
        async with trio.open_nursery() as nursery:
            await nursery.start(reader.follow, etcd, lambda names: arrived.set())
            writer.save(maintenance=schedule, counters={"n": 1})
            with trio.fail_after(5):
                await arrived.wait()
            nursery.cancel_scope.cancel()
        _, held = await etcd.get(f"{PREFIX}docs/maintenance".encode())
        assert held is not None
        assert held.value[:2] == b"x\x9c"  # zlib
        assert len(held.value) < 1_000_000
        assert keys(etcd_server)[PREFIX + "docs/counters"] == '{"n":1}'  # small: plain JSON
        assert reader.load("maintenance") == schedule
        later = EtcdStore(settings(etcd_server), PREFIX)
        assert later.load("maintenance") == schedule
        later.close()
    finally:
        writer.close()
        reader.close()


async def test_a_leader_whose_loop_is_held_past_its_ttl_keeps_its_lease(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    """Long work in the event loop (a cold plan of a large pool on a busy machine) does
    not cost the leader its lease: the keep-alives go on from a thread of their own."""
    import time

    key = b"/t/leader"
    election = Election(etcd=etcd, key=key, ttl=2, identity={"url": "http://m"})

    async def lead(fence: Fence) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        await nursery.start(election.run, lead)
        with trio.fail_after(5):
            while not election.leading:
                await election.changed()
        fence = election.fence
        assert fence is not None
        await trio.sleep(0.1)  # the term under way (its keep-alive started)
        time.sleep(3.5)  # the loop held for longer than the lease (2 s)  # noqa: ASYNC251
        await trio.sleep(1.0)
        assert election.fence == fence
        assert election.terms == 1
        _, held = await etcd.get(key)
        assert held is not None
        assert held.create_revision == fence.revision
        nursery.cancel_scope.cancel()
