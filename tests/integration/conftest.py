"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness import MasterProcess


@pytest.fixture(scope="module")
def shared_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    """One master (SQLite, passes every 0.2 s) for the tests of a module that share it:
    each test empties it first (:meth:`MasterProcess.make_empty`)."""
    root = tmp_path_factory.mktemp("shared") / "master"
    with MasterProcess(root, settings={"reconcile_interval": 0.2}) as m:
        yield m
