"""One leader among several daemons, elected with an etcd lease.

Each candidate campaigns on one key: it takes a lease of ``ttl`` seconds and creates the
key, bound to the lease, in a transaction that succeeds only if the key does not exist.
The one that created it leads, as long as its lease lives: it refreshes the lease every
``ttl / 3`` seconds, and **stops acting at the first refresh that fails** (its lease may
then run out, and another candidate take the key, before it could know). The others
watch the key and campaign again when it goes (its leader resigned, or its lease ran out
``ttl`` seconds after its last refresh).

Leadership is a :class:`Fence`: the key's create revision. Every write a leader makes is
a transaction that holds only if the key still has that create revision
(:func:`Fence.compare`), so a leader that lost its lease cannot write even before it
knows it lost it; a write refused that way raises :class:`LeadershipLost`, which ends its
term (:meth:`Election.run`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from nodeagent._ha._etcd import (
    AsyncEtcd,
    EtcdError,
    KeyValue,
    SyncEtcd,
    WatchEvent,
    b64,
    created_at,
    put,
    revision_of,
)

__all__ = ["Election", "EtcdTasks", "Fence", "LeadershipLost", "NotLeading", "lease_ttl"]

#: Seconds between two campaigns that failed (etcd unreachable), at most.
_MAX_RETRY = 2.0
#: A campaign that fails is logged the first time, then once every this many times.
_QUIET = 30


class NotLeading(EtcdError):
    """A write was asked of a daemon that does not lead (it changes nothing)."""

    code = "master.not_leader"


class LeadershipLost(NotLeading):
    """A leader's write was refused: its key is gone or another's (fenced out)."""


@dataclass(frozen=True, kw_only=True)
class Fence:
    """A term of leadership: the leader key, its create revision, the lease it lives by."""

    key: bytes
    revision: int
    lease: int

    def compare(self) -> dict[str, Any]:
        """The compare that makes a transaction hold only while this term lasts."""
        return created_at(self.key, self.revision)


@dataclass
class Election:
    """Campaign for ``key`` with ``identity`` (what the key holds: who leads, where).

    :meth:`run` campaigns forever; while this candidate leads, it runs ``lead(fence)``
    and cancels it when the term ends. :attr:`leader` is what the key says now (``None``:
    nobody leads, or not known yet); :attr:`fence` is set while this candidate leads.
    """

    etcd: AsyncEtcd
    key: bytes
    ttl: int
    identity: dict[str, Any]
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("nodeagent.election"))
    leader: dict[str, Any] | None = None
    fence: Fence | None = None
    #: When this candidate last became leader (trio time), for reports.
    since: float | None = None
    #: How many terms this candidate has led (this process's count).
    terms: int = 0
    #: The pool's term: the etcd revision that created the leader key of the current
    #: leader, whoever it is (``None``: nobody leads, or not known yet). It grows with each
    #: new leader of the pool, whichever process leads, and every master sees the same.
    term: int | None = None
    _changed: trio.Event = field(default_factory=trio.Event)

    @property
    def leading(self) -> bool:
        return self.fence is not None

    async def changed(self) -> None:
        """Wait for the next change of :attr:`leader` or :attr:`fence`."""
        await self._changed.wait()

    def _set(
        self, leader: dict[str, Any] | None, fence: Fence | None, term: int | None = None
    ) -> None:
        if fence is not None:
            term = fence.revision
        if leader is None:
            term = None
        if leader != self.leader or fence != self.fence or term != self.term:
            self.leader, self.fence, self.term = leader, fence, term
            self._changed.set()
            self._changed = trio.Event()

    async def run(
        self,
        lead: Callable[[Fence], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        failures = 0
        while True:
            try:
                fence = await self._campaign()
            except EtcdError as exc:
                failures += 1
                self._set(None, None)
                delay = min(_MAX_RETRY, 0.1 * 2**failures)
                if failures == 1 or failures % _QUIET == 0:  # not every retry: once a minute
                    self.log.warning(
                        "cannot campaign for leadership: %s (tried %d times; again every %.1f s"
                        " at most)",
                        exc,
                        failures,
                        _MAX_RETRY,
                    )
                await trio.sleep(delay)
                continue
            if failures:
                self.log.info("etcd answers again after %d failed campaigns", failures)
            failures = 0
            await self._lead(fence, lead)

    async def _campaign(self) -> Fence:
        """Return once this candidate leads; follow the leader until then."""
        value = orjson.dumps(self.identity)
        while True:
            lease = await self.etcd.grant(self.ttl)
            won, reply = await self.etcd.txn(
                [created_at(self.key, 0)],
                [put(self.key, value, lease=lease)],
                [{"request_range": {"key": b64(self.key)}}],
            )
            if won:
                return Fence(key=self.key, revision=revision_of(reply), lease=lease)
            with contextlib.suppress(EtcdError):
                await self.etcd.revoke(lease)
            kvs = reply["responses"][0]["response_range"].get("kvs", ())
            if not kvs:
                continue  # resigned between the two: campaign again
            holder = KeyValue.of(kvs[0])
            known = _identity(holder)
            if known == self.identity and holder.lease:
                # Its own key from a term that ended without giving it back (etcd was
                # unreachable then): give it back now rather than wait out its lease.
                with contextlib.suppress(EtcdError):
                    await self.etcd.revoke(holder.lease)
                continue
            if known != self.leader or holder.create_revision != self.term:
                self.log.info(
                    "following the leader %s (the pool's term %d)",
                    (known or {}).get("url", "(unknown)"),
                    holder.create_revision,
                )
            self._set(known, None, holder.create_revision)
            await self._until_vacant(holder)

    async def _until_vacant(self, holder: KeyValue) -> None:
        """Wait until the leader key that ``holder`` shows is deleted (or replaced).

        A watch of the key says so at once; it is re-checked with a read every ``ttl``
        seconds in case the watch went silent (a member that went away).
        """
        start = holder.mod_revision + 1

        def gone(events: list[WatchEvent]) -> bool:
            return any(e.deleted or e.kv.create_revision != holder.create_revision for e in events)

        while True:
            with trio.move_on_after(self.ttl), contextlib.suppress(EtcdError):
                if await self.etcd.watch_until(self.key, start, gone, prefix=False):
                    return
            _, now = await self.etcd.get(self.key)
            if now is None or now.create_revision != holder.create_revision:
                return
            self._set(_identity(now), None, now.create_revision)
            start = now.mod_revision + 1

    async def _lead(self, fence: Fence, lead: Callable[[Fence], Awaitable[None]]) -> None:
        """One term: ``lead(fence)`` with the lease kept alive; ends at the first refresh
        that fails, when ``lead`` returns, or when it raises :class:`LeadershipLost` or
        another :class:`~nodeagent._ha._etcd.EtcdError` (etcd went away under it)."""
        self.terms += 1
        self.since = trio.current_time()
        self._set(self.identity, fence)
        self.log.info(
            "leading: the pool's term %d (etcd revision of the leader key; this master's "
            "term %d), lease %x, ttl %d s",
            fence.revision,
            self.terms,
            fence.lease,
            self.ttl,
        )
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_alive, fence, nursery.cancel_scope)
                await lead(fence)
                nursery.cancel_scope.cancel()
        except* LeadershipLost as group:
            self.log.warning("leadership lost: %s", group.exceptions[0])
        except* EtcdError as group:  # the term's first reads or writes: etcd went away
            self.log.warning("leadership ends: %s", group.exceptions[0])
        finally:
            self._set(None, None)
            self.since = None
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(1.0),
                contextlib.suppress(EtcdError),
            ):
                await self.etcd.revoke(fence.lease)  # let another candidate lead at once

    async def _keep_alive(self, fence: Fence, term: trio.CancelScope) -> None:
        """Refresh the lease every ``ttl / 3`` seconds from a thread of its own, so that
        an event loop held by long work (a cold plan of a large pool on a busy machine)
        does not cost the daemon its lease; the first refresh that fails ends the term
        (the loop is told at once, whenever it next runs)."""
        stop = threading.Event()
        token = trio.lowlevel.current_trio_token()

        def end(why: str) -> None:
            self.log.warning("leadership ends: %s", why)
            token.run_sync_soon(term.cancel)

        def keep() -> None:
            interval = max(0.2, self.ttl / 3)
            client = SyncEtcd(self.etcd.settings)
            try:
                while not stop.wait(interval):
                    try:
                        left = client.keepalive(fence.lease, limit=interval)
                    except EtcdError as exc:
                        end(f"the lease's keep-alive failed ({exc})")
                        return
                    if left <= 0:
                        end("the lease expired")
                        return
            except trio.RunFinishedError:
                return  # the daemon is gone
            finally:
                client.close()

        try:
            await trio.to_thread.run_sync(keep, abandon_on_cancel=True)
        finally:
            stop.set()


def _identity(kv: KeyValue) -> dict[str, Any] | None:
    try:
        value = orjson.loads(kv.value)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def lease_ttl(seconds: float) -> int:
    """A lease TTL in whole seconds (etcd's unit), at least 2."""
    return max(2, math.ceil(seconds))


class EtcdTasks:
    """A daemon's tasks on etcd (its election, its store's watch) in a scope of their own,
    so that a daemon that stops ends them, and a leader gives its lease back (another
    leads at once), before it closes its etcd client (:meth:`close`)."""

    def __init__(self, etcd: AsyncEtcd) -> None:
        self.etcd = etcd
        self._scope = trio.CancelScope()
        self._done = trio.Event()

    async def run(
        self,
        tasks: Sequence[Callable[..., Awaitable[None]]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Start each of ``tasks`` (``nursery.start``-able) and run them until closed."""
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    for task in tasks:
                        await nursery.start(task)
                    task_status.started()
        finally:
            self._done.set()

    async def close(self) -> None:
        """End the tasks (each one's own cleanup included, within 2 s), then the client."""
        self._scope.cancel()
        with trio.move_on_after(2.0):
            await self._done.wait()
        await self.etcd.aclose()
