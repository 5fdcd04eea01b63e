"""The daemons' durable state in SQLite (WAL, synchronous=FULL).

Each daemon keeps one file (the agent's ``agent.db``, the master's ``master.db``, the
defrag daemon's ``defrag.db``), written in one transaction before a state-changing
request is acknowledged. A crash at any moment leaves either the previous state or the
new one, never a mix.

A database that cannot be used is a :class:`StoreError` whose message is one line naming
the file and what to do (:func:`open_database`). A file deleted or replaced while its
daemon runs is noticed at the next write (:class:`FileIdentity`), which then goes to a
new file at the same path: the daemon's memory holds the whole state.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

__all__ = [
    "DocumentStore",
    "Documents",
    "FileIdentity",
    "Fixed",
    "Members",
    "OutcomeUnknown",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "open_database",
    "store_text",
    "unknown_outcome",
    "unwritten",
]

log = logging.getLogger("nodeagent.store")


class StoreError(Exception):
    """The database cannot be opened, read or written, or holds something this version
    cannot read. The message names the file and, at start, what to do."""

    code = "store.error"
    http_status = 500


class StoreUnavailable(StoreError):
    """The store cannot be had now, and a later start may succeed (its file system is
    full, etcd cannot be reached)."""


class OutcomeUnknown(StoreError):
    """A write may or may not have been applied: it was sent, and the store could not say
    in time whether it holds it (etcd, cut off mid-write; SQLite never raises it). The
    daemon that made it does not go on with the state it holds in memory: it stops
    writing (its term of leadership ends) and takes the state from the store again. A
    client reads the state back before it sends the write again."""

    code = "store.outcome_unknown"
    http_status = 503


def unknown_outcome(exc: OutcomeUnknown) -> str:
    """The message of the API's 503 ``store.outcome_unknown``: what happened, what to do."""
    return (
        f"the state may or may not have been written: {exc}; read it back (from any master, "
        "once one leads) before sending the request again"
    )


def unwritten(exc: StoreError) -> str:
    """The message of the API's 503 for a write the store failed (``exc``): that nothing
    changed, or (:class:`OutcomeUnknown`) :func:`unknown_outcome`."""
    if isinstance(exc, OutcomeUnknown):
        return unknown_outcome(exc)
    return f"the state could not be written; nothing changed: {exc}"


class StoreFull(StoreUnavailable):
    """The database cannot be opened because its file system is full: a condition that
    passes once space is freed (a restart may then succeed)."""


#: What to do with a file that is not a database the daemon can read.
_MOVE_ASIDE = (
    "move it aside (with its -wal and -shm files, if any) to start without it, or put back a backup"
)


def _directory_problem(directory: Path) -> str | None:
    """Why the daemon cannot create files in ``directory``, or ``None``."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return f"{directory} is on a read-only file system: make it writable"
    except OSError as exc:
        return f"{directory}: {exc.strerror}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{directory} is not writable by this user: fix its owner or mode"
    return None


#: Less free space than this where the database lives reads as a full file system: SQLite
#: needs a few pages to open a database in WAL mode (its -wal and -shm files).
_NEARLY_FULL = 256 * 1024


def _full(directory: Path) -> bool:
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < _NEARLY_FULL


def _open_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """Why ``path`` could not be opened, and what to do, in one line."""
    name = getattr(exc, "sqlite_errorname", "")
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
        return StoreError(
            f"{path} is not a SQLite database this daemon can read ({exc}): {_MOVE_ASIDE}"
        )
    if name == "SQLITE_FULL" or _full(path.parent):
        return StoreFull(
            f"cannot open the state database {path} ({exc}): its file system is full: "
            "free some space"
        )
    problem = _directory_problem(path.parent)
    if problem is not None:
        return StoreError(f"cannot open the state database {path}: {problem}")
    return StoreError(
        f"cannot open the state database {path} ({exc}): check the file, the permissions "
        "of its directory and the free space"
    )


def open_database(path: Path, schema: str) -> sqlite3.Connection:
    """Open (creating) a SQLite file in WAL mode with ``synchronous=FULL`` and ``schema``.

    A write is durable once its statement returns (autocommit). The file must pass
    SQLite's ``quick_check`` (a damaged page is found now, not by a later request).
    Raises :class:`StoreError`, whose message names the file and what to do, when the
    directory cannot be created or written, or the file is not a sound SQLite database
    (:class:`StoreFull` when its file system is full); nothing is left open then.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the state directory {path.parent}: {exc.strerror}"
        ) from exc
    try:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise _open_error(path, exc) from exc
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=5000")
        _quick_check(db, path)
        db.executescript(schema)
    except sqlite3.Error as exc:
        db.close()
        raise _open_error(path, exc) from exc
    except BaseException:
        db.close()
        raise
    return db


def _quick_check(db: sqlite3.Connection, path: Path) -> None:
    """Raise :class:`StoreError` unless SQLite's ``quick_check`` finds ``path`` sound."""
    verdict = [str(row[0]) for row in db.execute("PRAGMA quick_check")]
    if verdict != ["ok"]:
        found = "; ".join(verdict[:3])
        raise StoreError(f"{path} is damaged (SQLite's quick check: {found}): {_MOVE_ASIDE}")


@dataclass(frozen=True, kw_only=True)
class FileIdentity:
    """Which file a path names (device and inode), to notice it deleted or replaced."""

    device: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> Self | None:
        """The identity of the file at ``path`` now; ``None`` when there is none."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return cls(device=st.st_dev, inode=st.st_ino)


@dataclass(frozen=True, kw_only=True)
class Members:
    """A change of some members of a *collection* (a document that is a JSON object kept
    one member per row or key, such as the master's operations), given to
    :meth:`Documents.save` in place of the whole document: ``put`` writes these members
    (each replaced whole), ``delete`` removes these; the others are left as they are, not
    read nor written. A collection of a thousand operations costs one row to change one."""

    put: Mapping[str, Any] = field(default_factory=dict)
    delete: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Fixed:
    """A whole document given to :meth:`Documents.save` by a writer that never changes it
    once given (a change of it is another object, such as the master's schedule and
    modes, 5 MB of JSON for 100,000 machines): ``doc``, or ``text``, its JSON
    (:func:`store_text`) when the writer made it already (off the event loop; the writer
    then need not keep the document). A store encodes it once, and
    :class:`DocumentStore` writes it again only when given another object (:attr:`held`),
    or when it writes to a new file. Every write of a drain thus no longer costs the whole
    schedule. Not for a collection."""

    doc: Any = None
    text: str | None = None

    @property
    def held(self) -> object:
        """What a store compares by identity: ``text`` when given, else ``doc``."""
        return self.doc if self.text is None else self.text

    def json(self) -> str:
        """The document's JSON: ``text``, or ``doc`` encoded (:func:`store_text`)."""
        return store_text(self.doc) if self.text is None else self.text


class Documents(Protocol):
    """Named JSON documents, each replaced whole: :class:`DocumentStore` (SQLite) or
    :class:`~nodeagent._ha._store.EtcdStore` (etcd, shared by several masters).

    ``save`` writes the documents it is given in one transaction, durable when it
    returns, or raises :class:`StoreError` having written none of them; ``load`` returns
    what was saved under a name (``None``: nothing); ``load_after`` the members of a
    collection whose keys sort after ``member``. ``where`` names the store in messages.
    A document the store keeps as a collection (given when it is made) may be saved as
    :class:`Members`: only those members are written; its ``load`` is the object of all
    its members (``{}`` for none). Another document may be given as :class:`Fixed`.
    """

    #: The documents kept one member per row or key (see :class:`Members`).
    collections: frozenset[str]

    @property
    def where(self) -> str: ...

    def load(self, name: str) -> Any: ...

    def load_after(self, name: str, member: str) -> dict[str, Any]: ...

    def save(self, **documents: Any) -> None: ...

    def close(self) -> None: ...


class DocumentStore:
    """A SQLite file holding named JSON documents, each replaced whole and durably.

    ``collections`` names the documents kept one row per member (table ``members``), which
    :meth:`save` takes as :class:`Members` too; a file written before they were kept so
    holds such a document whole: its members are moved to their rows when the file opens.

    A file deleted or replaced while the store is open is noticed by :meth:`save`, which
    then writes to a new file at the same path: the documents the daemons save whole in
    each call, and the collections' rows carried over from the file it had open (an
    unlinked file stays readable while it is open).
    """

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS documents ("
        "name TEXT PRIMARY KEY, saved_at REAL NOT NULL, doc TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS members ("
        "name TEXT NOT NULL, member TEXT NOT NULL, saved_at REAL NOT NULL, doc TEXT NOT NULL,"
        " PRIMARY KEY (name, member));"
    )

    def __init__(self, path: Path, *, collections: Iterable[str] = ()) -> None:
        self._db = open_database(path, self._SCHEMA)
        self._identity = FileIdentity.of(path)
        self.path = path
        self.collections = frozenset(collections)
        #: A replaced file's collection rows, until a save has written them to the new one.
        self._carried: list[tuple[str, str, str]] = []
        #: The :class:`Fixed` documents this file holds, by name.
        self._fixed: dict[str, Any] = {}
        try:
            self._split_collections()
        except BaseException:
            self._db.close()
            raise

    def _split_collections(self) -> None:
        """Move a collection saved whole (by an earlier version) to one row per member."""
        for name in sorted(self.collections):
            whole = self.load_document(name)
            if whole is None:
                continue
            if not isinstance(whole, dict):
                raise StoreError(
                    f"document {name!r} in {self.path} is not a JSON object: {_MOVE_ASIDE}"
                )
            try:
                with self._db:
                    self._db.execute("BEGIN IMMEDIATE")
                    self._put_members(name, whole)
                    self._db.execute("DELETE FROM documents WHERE name = ?", (name,))
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write the state to {self.path}: {exc}") from exc
            log.info("%s: %s moved to one row per member (%d)", self.path, name, len(whole))

    @property
    def where(self) -> str:
        return str(self.path)

    def close(self) -> None:
        self._db.close()

    def load(self, name: str) -> Any:
        """The document saved under ``name``, or ``None`` (a collection: its members as an
        object); raises :class:`StoreError`."""
        if name in self.collections:
            return self._load_members(name)
        return self.load_document(name)

    def _load_members(self, name: str, after: str | None = None) -> dict[str, Any]:
        """The members of collection ``name`` (only those whose keys sort after ``after``,
        when given)."""
        query = "SELECT member, doc FROM members WHERE name = ?"
        params: tuple[str, ...] = (name,)
        if after is not None:
            query, params = query + " AND member > ?", (name, after)
        try:
            rows = self._db.execute(query, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read {name!r} in {self.path} ({exc}): {_MOVE_ASIDE}") from exc
        try:
            return {member: json.loads(doc) for member, doc in rows}
        except ValueError as exc:
            raise StoreError(
                f"unreadable member of {name!r} in {self.path} ({exc}): {_MOVE_ASIDE}"
            ) from exc

    def load_after(self, name: str, member: str) -> dict[str, Any]:
        """The members of collection ``name`` whose keys sort after ``member``."""
        return self._load_members(name, after=member)

    def load_document(self, name: str) -> Any:
        """The whole document saved under ``name`` (not a collection's rows), or ``None``."""
        try:
            row = self._db.execute("SELECT doc FROM documents WHERE name = ?", (name,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read {name!r} in {self.path} ({exc}): {_MOVE_ASIDE}") from exc
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError as exc:
            raise StoreError(
                f"unreadable document {name!r} in {self.path} ({exc}): {_MOVE_ASIDE}"
            ) from exc

    def save(self, **documents: Any) -> None:
        """Replace the given documents in one transaction; durable when this returns. A
        collection's document is given whole (its rows replaced by its members) or as
        :class:`Members` (only those rows written); :class:`Members` for another
        document is a ``TypeError``.

        Raises :class:`StoreError` when the write fails (a full disk, an I/O error); the
        documents saved before are then still the saved ones.
        """
        for name, doc in documents.items():
            if isinstance(doc, Members) and name not in self.collections:
                raise TypeError(f"{name!r} is not a collection of this store")
            if isinstance(doc, Fixed) and name in self.collections:
                raise TypeError(f"{name!r} is a collection of this store: not Fixed")
        if FileIdentity.of(self.path) != self._identity:
            log.error(
                "%s was deleted or replaced while this daemon ran: its state goes to a new file",
                self.path,
            )
            with contextlib.suppress(sqlite3.Error):  # kept until a save has written them
                self._carried += self._db.execute(
                    "SELECT name, member, doc FROM members"
                ).fetchall()
            self._db.close()
            self._db = open_database(self.path, self._SCHEMA)
            self._identity = FileIdentity.of(self.path)
            self._fixed = {}
        fixed = {n: d.held for n, d in documents.items() if isinstance(d, Fixed)}
        try:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                if self._carried:
                    self._db.executemany(
                        "INSERT OR IGNORE INTO members (name, member, saved_at, doc) "
                        "VALUES (?, ?, ?, ?)",
                        [(name, member, time.time(), doc) for name, member, doc in self._carried],
                    )
                for name, given in documents.items():
                    if isinstance(given, Fixed):
                        if self._fixed.get(name) is not given.held:  # else this file holds it
                            self._put_text(name, given.json())
                        continue
                    doc = given
                    if isinstance(doc, Members):
                        self._put_members(name, doc.put)
                        self._db.executemany(
                            "DELETE FROM members WHERE name = ? AND member = ?",
                            [(name, member) for member in doc.delete],
                        )
                    elif name in self.collections:
                        self._db.execute("DELETE FROM members WHERE name = ?", (name,))
                        self._put_members(name, doc)
                    else:
                        self._put_text(name, store_text(doc))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write the state to {self.path}: {exc}") from exc
        self._carried = []
        self._fixed.update(fixed)

    def _put_text(self, name: str, text: str) -> None:
        self._db.execute(
            "INSERT INTO documents (name, saved_at, doc) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET saved_at = excluded.saved_at, doc = excluded.doc",
            (name, time.time(), text),
        )

    def _put_members(self, name: str, members: Mapping[str, Any]) -> None:
        now = time.time()
        self._db.executemany(
            "INSERT INTO members (name, member, saved_at, doc) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name, member) DO UPDATE SET saved_at = excluded.saved_at, "
            "doc = excluded.doc",
            [(name, str(member), now, store_text(doc)) for member, doc in members.items()],
        )


def store_text(doc: Any) -> str:
    """A document's JSON as the stores write it."""
    return json.dumps(doc, separators=(",", ":"))
