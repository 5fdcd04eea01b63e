"""Named JSON documents in etcd, shared by several daemons, written by their leader.

The same contract as the SQLite :class:`~nodeagent._store.DocumentStore` (see
:class:`~nodeagent._store.Documents`): ``save`` replaces the documents it is given in one
transaction, durable (in etcd's raft log, on a quorum of its members) when it returns.

Keys, under the store's prefix (``/nodeagent/master/`` by default):

* ``docs/<name>``: a document, its JSON text;
* ``sets/<name>/<member>``: one member of a *collection* (a document that is a JSON
  object whose members change one at a time, such as the master's drain records): a save
  writes only the members that changed, so a reconcile pass that records one drain
  writes one key, whatever the size of the pool. A collection saved as
  :class:`~nodeagent._store.Members` writes those members and reads none of the others
  (the master's operations: creating one is one key, whatever their number).

Values are JSON; one of :data:`COMPRESS_FROM` bytes or more (the schedule of a large pool) is
stored zlib-compressed, which its first byte, 0x78, tells apart from JSON.

Reads come from a copy of every key held in memory (:meth:`EtcdStore.load` costs no round
trip): read whole when the store opens and when its daemon starts to lead
(:meth:`EtcdStore.refresh`), and kept up to date by a watch (:meth:`EtcdStore.follow`),
which tells its daemon which documents another writer changed.

A write is a blocking call, like the SQLite store's (its caller's state stays consistent: no
other task runs between a change and its write), bounded by ``write_timeout`` (twice that
for a write that got no reply, settled as below): the masters give it a third of the
leader's lease, the interval of its keep-alives, so that a leader cut off from etcd blocks
its loop no longer than it takes to learn that it no longer leads.

Writes are fenced: with a :class:`~nodeagent._ha._leadership.Fence` set (:attr:`EtcdStore.fence`),
each transaction holds only while that term of leadership lasts; a refused one raises
:class:`~nodeagent._ha._leadership.LeadershipLost` and writes nothing. Without a fence a save
raises :class:`~nodeagent._ha._leadership.NotLeading`: only the leader writes.

**A write without a reply is settled before the save returns.** A write that timed out,
or whose connection was lost once it was sent, or that a member answered "unavailable"
(etcd's own "request timed out" is one: the proposal may still be applied), may be applied
by etcd afterwards: a request still on its way to a stopped member is applied when the
member goes on, after any read that found it absent. Reading back is therefore not
enough; the store makes sure the write *can no longer land* before it says it did not.

Each write is serialised with every other by one key, ``last-write`` under the prefix:
a write's transaction holds only if ``last-write`` was last modified at the revision the
store knows (:func:`~nodeagent._ha._etcd.modified_at`, besides the fence), and it puts there a
nonce of its own. etcd applies transactions one at a time, in revision order, so of all
the transactions conditioned on one revision of ``last-write`` at most one ever succeeds,
whenever it arrives: the first applied moves ``last-write`` on, and every later one — the
same write sent to the next endpoint, or arriving late at a member that was stopped —
fails its compare and changes nothing.

After a write without a reply the store sends a *seal*: a transaction under the same two
compares that only puts a nonce of its own in ``last-write`` (again until one is answered,
within ``write_timeout``). Every failed transaction reads the leader key and ``last-write``
back (its failure branch). The verdict (:func:`verdict`):

* the seal succeeded, or ``last-write`` holds an earlier seal's nonce: a seal won, so the
  write was not applied before it and can never be: :class:`~nodeagent._store.StoreError`
  (nothing changed);
* ``last-write`` holds the write's nonce: it was applied, at that key's revision: the copy
  takes it and the save returns as any write does;
* ``last-write`` is still at the revision the store knew: the transaction failed on the
  fence alone, and the write, which needs the fence too, can never land (a leader key is
  never created at the same revision again): nothing changed, the term is over
  (:class:`~nodeagent._ha._leadership.LeadershipLost`);
* anything else (no seal answered in time; the fence gone and ``last-write`` written
  since by a successor, which hides whether the write came first):
  :class:`~nodeagent._store.OutcomeUnknown`. The store then drops its fence and ends the
  term (:meth:`EtcdStore.hold` raises), so that its daemon never goes on writing from a
  state etcd may not hold: it takes the state again (its copy, which the watch keeps
  up to date, when the term ends; a whole read when it next leads, after which the write,
  fenced on a leader key that is gone, can no longer land).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import time
import zlib
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, Literal

import trio

from nodeagent._ha._etcd import (
    AsyncEtcd,
    EtcdError,
    EtcdSettings,
    KeyValue,
    SyncEtcd,
    delete,
    get,
    modified_at,
    put,
    revision_of,
)
from nodeagent._ha._leadership import Fence, LeadershipLost, NotLeading
from nodeagent._store import Fixed, Members, OutcomeUnknown, StoreError, store_text

__all__ = ["COMPRESS_FROM", "LAST_WRITE", "WATCH_RENEWAL", "EtcdStore", "Verdict", "verdict"]

log = logging.getLogger("nodeagent.store")

#: Seconds a watch is kept before it is made anew (see :meth:`EtcdStore.follow`).
WATCH_RENEWAL = 30.0
#: What etcd allows in one transaction by default (``--max-txn-ops``).
MAX_TXN_OPS = 128
_DOCS = b"docs/"
_SETS = b"sets/"
#: The key under the prefix that every write compares and replaces (see the module
#: docstring): its last writer's nonce.
LAST_WRITE = b"last-write"
#: What :func:`verdict` finds of a write: applied (at a revision), not applied and never to
#: be (the revision ``last-write`` is at now, 0 if not known), or not known.
Verdict = tuple[Literal["landed", "not landed", "unknown"], int]
#: One document's entries: member ("" for a whole document) → (mod revision, JSON text;
#: ``None`` once deleted, kept so that an older event cannot bring it back).
_Entries = dict[str, tuple[int, bytes | None]]


def _dumps(value: Any) -> bytes:
    return store_text(value).encode()


#: A value at least this long is written compressed (zlib): the schedule of 10,000 machines
#: is 1.4 MB of JSON, near etcd's default limit of a request (``--max-request-bytes``,
#: 1.5 MiB), and 110 kB compressed.
COMPRESS_FROM = 64 * 1024
#: The first byte of a zlib stream (deflate, a 32 KiB window); JSON never starts with it.
_ZLIB = 0x78


def _stored(text: bytes) -> bytes:
    """What is written to etcd for a document's JSON ``text``."""
    return zlib.compress(text, 6) if len(text) >= COMPRESS_FROM else text


def _text(value: bytes) -> bytes:
    """A document's JSON text from what etcd holds; raises :class:`StoreError`."""
    if value[:1] != bytes([_ZLIB]):
        return value
    try:
        return zlib.decompress(value)
    except zlib.error as exc:
        raise EtcdError(f"a value in etcd is neither JSON nor zlib ({exc})") from None


def verdict(
    *, known: int, nonce: bytes, seals: Collection[bytes], last: KeyValue | None
) -> Verdict:
    """What a transaction that failed its compares tells of a write (the module docstring
    gives the argument): ``known`` is the revision of ``last-write`` the write was
    conditioned on, ``nonce`` the write's, ``seals`` the nonces of the seals sent since,
    ``last`` the ``last-write`` key the failed transaction read (``None``: absent)."""
    if last is not None and last.value == nonce:
        return "landed", last.mod_revision
    now = 0 if last is None else last.mod_revision
    if now == known:  # its compare on last-write held: it failed on the fence, for good
        return "not landed", now
    if last is not None and last.value in seals:
        return "not landed", now
    return "unknown", 0


class EtcdStore:
    """See the module docstring. ``collections`` names the documents kept one key per
    member. Opening reads every key under ``prefix``; raises
    :class:`~nodeagent._store.StoreError` (:class:`~nodeagent._ha._etcd.EtcdUnavailable`)
    when etcd cannot be reached."""

    def __init__(
        self,
        settings: EtcdSettings,
        prefix: str,
        *,
        collections: Iterable[str] = (),
        write_timeout: float | None = None,
    ) -> None:
        self.prefix = prefix.encode()
        #: How long a write may block its caller (the daemon's event loop, as a SQLite
        #: write does): at most ``settings.timeout``.
        self.write_timeout = min(write_timeout or settings.timeout, settings.timeout)
        self.settings = settings
        self.collections = frozenset(collections)
        self.fence: Fence | None = None
        self._fenced_out = trio.Event()
        self._ended = ""
        self.revision = 0
        #: The revision ``last-write`` was last modified at, as known (0: absent).
        self.last_write = 0
        #: The revision of the last whole read: events up to it are in the copy already.
        self._floor = 0
        self._docs: dict[str, _Entries] = {}
        #: The :class:`~nodeagent._store.Fixed` documents given last and their JSON, by name.
        self._encoded: dict[str, tuple[Any, bytes]] = {}
        self._sync = SyncEtcd(settings)
        try:
            self.refresh()
        except BaseException:
            self._sync.close()
            raise

    @property
    def where(self) -> str:
        return f"etcd ({self.settings.describe()}) under {self.prefix.decode()}"

    def close(self) -> None:
        self._sync.close()

    # ------------------------------------------------------------------ reading

    def refresh(self) -> set[str]:
        """Read every key again (blocking, within the etcd timeout); the names of the
        documents that changed."""
        revision, kvs = self._sync.range_prefix(self.prefix)
        return self._replace(revision, kvs)

    async def refresh_async(self, etcd: AsyncEtcd) -> set[str]:
        """:meth:`refresh` through an async client."""
        revision, kvs = await etcd.range_prefix(self.prefix)
        return self._replace(revision, kvs)

    def _replace(self, revision: int, kvs: list[KeyValue]) -> set[str]:
        docs: dict[str, _Entries] = {}
        for kv in kvs:
            if kv.key == self.prefix + LAST_WRITE:
                self.last_write = max(self.last_write, kv.mod_revision)
            place = self._place(kv.key)
            if place is not None:
                docs.setdefault(place[0], {})[place[1]] = (kv.mod_revision, _text(kv.value))
        changed = {
            name
            for name in docs.keys() | self._docs.keys()
            if _values(docs.get(name, {})) != _values(self._docs.get(name, {}))
        }
        self._docs, self.revision = docs, max(self.revision, revision)
        self._floor = max(self._floor, revision)
        return changed

    def _place(self, key: bytes) -> tuple[str, str] | None:
        """(document, member) of one of the store's keys; ``None`` for any other key."""
        if not key.startswith(self.prefix):
            return None
        rest = key[len(self.prefix) :]
        if rest.startswith(_DOCS):
            return rest[len(_DOCS) :].decode(), ""
        if rest.startswith(_SETS):
            name, _, member = rest[len(_SETS) :].partition(b"/")
            return name.decode(), member.decode()
        return None

    def _key(self, name: str, member: str) -> bytes:
        if name in self.collections:
            return self.prefix + _SETS + f"{name}/{member}".encode()
        return self.prefix + _DOCS + name.encode()

    def load(self, name: str) -> Any:
        """The document saved under ``name`` (a collection: its members as an object), or
        ``None``; raises :class:`~nodeagent._store.StoreError` for one that is not JSON."""
        entries = self._docs.get(name, {})
        try:
            if name in self.collections:
                return {m: json.loads(v) for m, (_, v) in entries.items() if v is not None}
            _, text = entries.get("", (0, None))
            return None if text is None else json.loads(text)
        except ValueError as exc:
            raise StoreError(f"unreadable document {name!r} in {self.where} ({exc})") from exc

    def load_after(self, name: str, member: str) -> dict[str, Any]:
        """The members of collection ``name`` whose keys sort after ``member`` (only
        those are decoded)."""
        entries = self._docs.get(name, {})
        try:
            return {
                key: json.loads(text)
                for key, (_, text) in entries.items()
                if key > member and text is not None
            }
        except ValueError as exc:
            raise StoreError(f"unreadable member of {name!r} in {self.where} ({exc})") from exc

    # ------------------------------------------------------------------ writing

    async def hold(self, fence: Fence, *services: Callable[..., Awaitable[None]]) -> None:
        """A term of leadership: write under ``fence`` while ``services`` (each started as
        ``nursery.start`` does) run, until the term is cancelled or a write is fenced out
        (:class:`~nodeagent._ha._leadership.LeadershipLost`); the fence is dropped after."""
        self.fence = fence
        self._fenced_out = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                for service in services:
                    await nursery.start(service)
                await self._fenced_out.wait()
                raise LeadershipLost(self._ended)
        finally:
            self.fence = None

    def save(self, **documents: Any) -> None:
        """Write what changed in ``documents`` in one fenced transaction (see the module
        docstring); nothing to write: no transaction. Returns once etcd holds the change
        (a write that got no reply but was applied included: the copy holds it then).

        Raises, having written nothing (and the write can no longer be applied):
        :class:`~nodeagent._ha._leadership.NotLeading` (no fence),
        :class:`~nodeagent._ha._leadership.LeadershipLost` (fenced out: the term ends) or
        :class:`~nodeagent._store.StoreError` (etcd unreachable, or the change is over
        etcd's transaction limit). Raises :class:`~nodeagent._store.OutcomeUnknown` when
        etcd could not say whether it was applied: the fence is dropped and the term ends
        (:meth:`hold`), the copy unchanged (the watch brings the write if it lands)."""
        changes: list[tuple[str, str, bytes | None]] = []
        for name, doc in documents.items():
            entries = self._docs.get(name, {})
            if isinstance(doc, Fixed):  # encoded once: compared with the copy all the same
                if name in self.collections:
                    raise TypeError(f"{name!r} is a collection of this store: not Fixed")
                encoded = self._encoded.get(name)
                if encoded is None or encoded[0] is not doc.held:
                    encoded = self._encoded[name] = (doc.held, doc.json().encode())
                if entries.get("", (0, None))[1] != encoded[1]:
                    changes.append((name, "", encoded[1]))
                continue
            if isinstance(doc, Members):
                if name not in self.collections:
                    raise TypeError(f"{name!r} is not a collection of this store")
                for member, value in doc.put.items():
                    text = _dumps(value)
                    if entries.get(str(member), (0, None))[1] != text:
                        changes.append((name, str(member), text))
                for member in doc.delete:
                    if entries.get(member, (0, None))[1] is not None:
                        changes.append((name, member, None))
                continue
            wanted = (
                {str(m): _dumps(v) for m, v in doc.items()}
                if name in self.collections
                else {"": _dumps(doc)}
            )
            for member, text in wanted.items():
                if entries.get(member, (0, None))[1] != text:
                    changes.append((name, member, text))
            for member, (_, held) in entries.items():
                if held is not None and member not in wanted:
                    changes.append((name, member, None))
        if not changes:
            return
        fence = self.fence
        if fence is None:
            raise NotLeading(f"only the leader writes the state ({self.where})")
        if len(changes) + 1 > MAX_TXN_OPS:
            raise StoreError(
                f"one change of {len(changes)} keys is over etcd's {MAX_TXN_OPS} operations "
                f"per transaction, the store's own key included ({self.where})"
            )
        last_write = self.prefix + LAST_WRITE
        known, nonce = self.last_write, _nonce(fence)
        ops = [
            put(self._key(n, m), _stored(v)) if v is not None else delete(self._key(n, m))
            for n, m, v in changes
        ]
        ops.append(put(last_write, nonce))
        compare = [fence.compare(), modified_at(last_write, known)]
        reads = [get(fence.key), get(last_write)]
        try:
            kept, reply = self._sync.txn(compare, ops, reads, limit=self.write_timeout)
        except EtcdError as exc:
            revision = self._settle(fence, known, nonce, exc)
        else:
            revision = revision_of(reply) if kept else self._failed(fence, known, nonce, reply)
        self.last_write = max(self.last_write, revision)
        for name, member, written in changes:
            self._docs.setdefault(name, {})[member] = (revision, written)
        self.revision = max(self.revision, revision)

    def _failed(self, fence: Fence, known: int, nonce: bytes, reply: dict[str, Any]) -> int:
        """The revision a write whose transaction failed its compares was applied at
        (an earlier attempt of it, on another endpoint, was); raises as :meth:`save`."""
        leader, last = _reads(reply)
        found, revision = verdict(known=known, nonce=nonce, seals=(), last=last)
        return self._decide(fence, leader, (found, revision), "its transaction failed")

    def _settle(self, fence: Fence, known: int, nonce: bytes, exc: EtcdError) -> int:
        """A write that got no reply (``exc``): seal ``last-write`` at ``known`` (see the
        module docstring), within ``write_timeout``; the revision the write was applied
        at, or raises as :meth:`save` (:class:`OutcomeUnknown` when etcd did not say)."""
        last_write = self.prefix + LAST_WRITE
        deadline = time.monotonic() + self.write_timeout
        seals: list[bytes] = []
        why = str(exc)
        while (left := deadline - time.monotonic()) > 0.01:
            seals.append(_nonce(fence))
            try:
                kept, reply = self._sync.txn(
                    [fence.compare(), modified_at(last_write, known)],
                    [put(last_write, seals[-1])],
                    [get(fence.key), get(last_write)],
                    limit=left,
                )
            except EtcdError as again:
                why = str(again)
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                continue
            if kept:
                self.last_write = max(self.last_write, revision_of(reply))
                raise StoreError(
                    f"cannot write the state to {self.where}: {exc} (it was not applied, "
                    "and no longer can be)"
                )
            leader, last = _reads(reply)
            found = verdict(known=known, nonce=nonce, seals=seals, last=last)
            return self._decide(fence, leader, found, f"{exc}")
        self._end(f"the outcome of a write to {self.where} is unknown")
        raise OutcomeUnknown(
            f"a write to {self.where} got no reply, and etcd could not say within "
            f"{self.write_timeout:.1f} s whether it was applied ({why}): this master stops "
            "leading and takes the state from etcd again"
        )

    def _decide(self, fence: Fence, leader: KeyValue | None, found: Verdict, why: str) -> int:
        """Act on a write's :func:`verdict`: its revision if it was applied; raises
        otherwise. The term ends when the fence is gone or the outcome is unknown."""
        outcome, revision = found
        fenced_out = leader is None or leader.create_revision != fence.revision
        if outcome != "unknown":
            self.last_write = max(self.last_write, revision)
        if outcome == "unknown":
            self._end(f"the outcome of a write to {self.where} is unknown")
            raise OutcomeUnknown(
                f"a write to {self.where} may or may not have been applied ({why}; another "
                "leader has written since): this master stops leading and takes the state "
                "from etcd again"
            )
        if fenced_out:
            self._end(f"a write to {self.where} was fenced out")
        if outcome == "landed":
            return revision
        if fenced_out:
            raise LeadershipLost(
                f"the state was not written: this daemon no longer leads ({self.where})"
            )
        raise StoreError(
            f"cannot write the state to {self.where}: {why} (it was not applied, and no "
            "longer can be)"
        )

    def _end(self, why: str) -> None:
        """Write no more in this term: drop the fence, and let :meth:`hold` end the term."""
        self.fence = None
        self._ended = why
        self._fenced_out.set()

    # ------------------------------------------------------------------ following

    async def follow(
        self,
        etcd: AsyncEtcd,
        changed: Callable[[set[str]], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep the copy up to date with what others write, forever; call ``changed``
        with the names of the documents each batch of changes touched. A watch that ends
        is made again from the last revision seen; one that etcd cancels (its history
        compacted) is replaced by a whole read. A watch is also made anew every
        :data:`WATCH_RENEWAL` seconds: a connection that went silent (a partition that
        dropped it without a word) cannot leave the copy behind for longer."""
        task_status.started()
        failures = 0
        while True:
            try:
                with trio.move_on_after(WATCH_RENEWAL):
                    watch = etcd.watch(self.prefix, self.revision + 1)
                    async with contextlib.aclosing(watch) as batches:
                        async for events in batches:
                            failures = 0
                            names = self._apply(events)
                            if names:
                                changed(names)
            except EtcdError as exc:
                failures += 1
                if failures == 1 or failures % 30 == 0:  # not at every retry
                    log.warning(
                        "the watch of %s ended (%d times in a row): %s", self.where, failures, exc
                    )
                await trio.sleep(min(2.0, 0.1 * 2**failures))
                try:
                    names = await self.refresh_async(etcd)
                except EtcdError:
                    continue
                if names:
                    changed(names)
            else:
                await trio.sleep(0.1)

    def _apply(self, events: Iterable[Any]) -> set[str]:
        names: set[str] = set()
        for event in events:
            kv: KeyValue = event.kv
            self.revision = max(self.revision, kv.mod_revision)
            if kv.key == self.prefix + LAST_WRITE:
                self.last_write = max(self.last_write, kv.mod_revision)
            place = self._place(kv.key)
            if place is None or kv.mod_revision <= self._floor:
                continue  # not a document, or read since by a whole read
            name, member = place
            entries = self._docs.setdefault(name, {})
            held = entries.get(member)
            if held is not None and held[0] >= kv.mod_revision:
                continue  # this store wrote it (or saw it) already
            text = None if event.deleted else _text(kv.value)
            entries[member] = (kv.mod_revision, text)
            if held is None or held[1] != text:
                names.add(name)
        return names


def _nonce(fence: Fence) -> bytes:
    """What one write (or seal) puts in ``last-write``: its term's revision and 64 random
    bits, unique to it."""
    return f"{fence.revision}:{secrets.token_hex(8)}".encode()


def _reads(reply: dict[str, Any]) -> tuple[KeyValue | None, KeyValue | None]:
    """The leader key and ``last-write`` as a failed transaction read them (its failure
    branch: the two ``get``)."""
    found: list[KeyValue | None] = []
    for response in reply.get("responses", ())[:2]:
        kvs = response.get("response_range", {}).get("kvs", ())
        found.append(KeyValue.of(kvs[0]) if kvs else None)
    if len(found) != 2:
        raise EtcdError(f"etcd's reply to a failed transaction lacks its reads: {reply}")
    return found[0], found[1]


def _values(entries: _Entries) -> dict[str, bytes]:
    return {m: v for m, (_, v) in entries.items() if v is not None}
