"""The SQLite document store's collections: one row per member, written member by member
(:class:`~nodeagent._store.Members`), a collection saved whole by an earlier version split
into rows when the file opens, and the rows carried over when the file is replaced; a
:class:`~nodeagent._store.Fixed` document written once per object and file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nodeagent._store import (
    DocumentStore,
    Fixed,
    Members,
    OutcomeUnknown,
    StoreError,
    StoreFull,
    unwritten,
)


def rows(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT member, doc FROM members WHERE name = 'ops'"))


def test_members_are_written_one_row_each_and_the_others_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "master.db"
    store = DocumentStore(path, collections=("ops",))
    try:
        assert store.load("ops") == {}
        store.save(ops={"1": {"n": 1}, "2": {"n": 2}}, counters={"x": 1})
        with sqlite3.connect(path) as db:
            db.execute("UPDATE members SET saved_at = 0")
        store.save(ops=Members(put={"3": {"n": 3}}, delete=("2",)))
        assert store.load("ops") == {"1": {"n": 1}, "3": {"n": 3}}
        assert store.load("counters") == {"x": 1}
        with sqlite3.connect(path) as db:
            saved = dict(db.execute("SELECT member, saved_at FROM members"))
        assert saved["1"] == 0  # not written again
        assert saved["3"] > 0
        # a whole document replaces every row
        store.save(ops={"4": {"n": 4}})
        assert rows(path) == {"4": '{"n":4}'}
        with pytest.raises(TypeError):
            store.save(counters=Members(put={"y": 1}))
    finally:
        store.close()


def test_a_collection_saved_whole_before_is_split_into_rows_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "master.db"
    before = DocumentStore(path)  # as an earlier version kept it: one document
    before.save(ops={"1": {"n": 1}, "2": {"n": 2}})
    before.close()
    store = DocumentStore(path, collections=("ops",))
    try:
        assert store.load("ops") == {"1": {"n": 1}, "2": {"n": 2}}
        assert store.load_document("ops") is None
        store.save(ops=Members(put={"3": {"n": 3}}))
    finally:
        store.close()
    assert rows(path) == {"1": '{"n":1}', "2": '{"n":2}', "3": '{"n":3}'}


def test_a_replaced_file_gets_the_collection_rows_of_the_file_it_had_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "master.db"
    store = DocumentStore(path, collections=("ops",))
    try:
        store.save(ops={"1": {"n": 1}, "2": {"n": 2}}, counters={"x": 1})
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        store.save(ops=Members(put={"2": {"n": 20}}), counters={"x": 2})
        assert "was deleted or replaced" in caplog.text
    finally:
        store.close()
    assert rows(path) == {"1": '{"n":1}', "2": '{"n":20}'}


def documents(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT name, doc FROM documents"))


def test_a_fixed_document_is_written_once_per_object_and_again_to_a_new_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "master.db"
    store = DocumentStore(path, collections=("ops",))
    schedule, other = {"machines": [1, 2]}, {"machines": [3]}
    try:
        store.save(maintenance=Fixed(schedule), counters={"x": 1})
        assert store.load("maintenance") == schedule
        with sqlite3.connect(path) as db:  # what is on disk, marked
            db.execute("UPDATE documents SET doc = '\"marked\"' WHERE name = 'maintenance'")
        store.save(maintenance=Fixed(schedule), counters={"x": 2})
        assert documents(path) == {"maintenance": '"marked"', "counters": '{"x":2}'}  # not again
        store.save(maintenance=Fixed(other))  # another object: written
        assert store.load("maintenance") == other
        # A write that fails records nothing: the next writes the document.
        with pytest.raises(TypeError):
            store.save(maintenance=Fixed(schedule), counters={"x": object()})
        assert store.load("maintenance") == other
        with sqlite3.connect(path) as db:
            db.execute("UPDATE documents SET doc = '\"marked\"' WHERE name = 'maintenance'")
        store.save(maintenance=Fixed(schedule))
        assert store.load("maintenance") == schedule
        # A new file gets it, the same object or not.
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        store.save(maintenance=Fixed(schedule), counters={"x": 3})
        assert documents(path) == {"maintenance": '{"machines":[1,2]}', "counters": '{"x":3}'}
        # Given as its JSON (made by the writer): the text, compared by identity.
        text = '{"machines":[4]}'
        store.save(maintenance=Fixed(text=text))
        assert store.load("maintenance") == {"machines": [4]}
        with sqlite3.connect(path) as db:
            db.execute("UPDATE documents SET doc = '\"marked\"' WHERE name = 'maintenance'")
        store.save(maintenance=Fixed(text=text))
        assert store.load("maintenance") == "marked"
        with pytest.raises(TypeError):
            store.save(ops=Fixed({}))
    finally:
        store.close()


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (StoreError("disk error"), "the state could not be written; nothing changed: disk error"),
        (StoreFull("full"), "the state could not be written; nothing changed: full"),
        (
            OutcomeUnknown("etcd timed out"),
            "the state may or may not have been written: etcd timed out; read it back",
        ),
    ],
)
def test_the_message_of_a_write_the_store_failed(exc: StoreError, said: str) -> None:
    assert unwritten(exc).startswith(said)
