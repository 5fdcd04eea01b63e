"""A master on etcd whose drain records were written before DrainRecord reads them and
writes none of them again until one changes: an upgrade keeps the drains in force and
costs no transaction (etcd takes at most 128 operations in one, so rewriting every record
of a large pool at once would fail every save)."""

from __future__ import annotations

import json

import pytest

from nodeagent._clock import TrioClock
from nodeagent._ha._etcd import AsyncEtcd
from nodeagent._ha._store import EtcdStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._master import Master
from tests.etcd import EtcdServer, etcd_server
from tests.integration.test_etcd_store import PREFIX, etcd, keys, lead_key, settings
from tests.nodeagent.master.test_drains import STORED as RECORDS_V1
from tests.nodeagent.master.test_drains_upgrade import FIXTURE, KEY, STORED
from tests.nodeagent.master.test_master_unit import EPOCH, DownLink

__all__ = ["etcd", "etcd_server"]

pytestmark = pytest.mark.integration


async def test_drain_records_written_before_are_read_and_not_written_again(
    etcd_server: EtcdServer, etcd: AsyncEtcd
) -> None:
    store = EtcdStore(settings(etcd_server), PREFIX, collections={"drains", "operations"})
    try:
        store.fence = await lead_key(etcd, PREFIX.encode() + b"leader")
        # and a rolling operation's record, as its engine wrote it (its keys in its order)
        rolling = RECORDS_V1["a rolling operation's, to be started"]
        drains = {**FIXTURE["documents"]["drains"], "n2.test|10.0.0.2": rolling}
        store.save(**{**FIXTURE["documents"], "drains": drains})
        revision = store.revision
        master = Master(
            store=store, link=DownLink(), clock=TrioClock(EPOCH), ads=AdStore(lifetime=10_000)
        )
        master.load()
        record = master.drains[KEY]
        assert (record.request_id, record.phase, record.late) == ("1", "committed", True)
        master.save()
        assert store.revision == revision  # every record as it was read: nothing to write
        master.drains[KEY] = record.noted(KEY, escalated=True)
        master.save()
        assert store.revision == revision + 1
        written = json.loads(keys(etcd_server)[f"{PREFIX}sets/drains/{KEY}"])
        assert written == {**STORED, "escalated": True}
        assert json.loads(keys(etcd_server)[f"{PREFIX}sets/drains/n2.test|10.0.0.2"]) == rolling
    finally:
        store.close()
