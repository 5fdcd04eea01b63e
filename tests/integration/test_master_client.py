"""The Python client against real masters on a real etcd: pointed at a follower, its
writes reach the leader (:class:`nodeagent.client.MasterClient`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from nodeagent.client import InvalidMaintenance, MasterClient, RedirectNotFollowed, Refused
from tests.etcd import EtcdServer, etcd_server, free_port
from tests.ha import masters_on
from tests.harness import MasterProcess, wait_for
from tests.integration.test_master import window

__all__ = ["etcd_server"]

pytestmark = pytest.mark.integration


def scheduled(master: MasterProcess) -> list[str]:
    """The hostnames in ``master``'s schedule, as it serves it."""
    schedule: dict[str, Any] = master.call("GET", "/maintenance/schedule").json()
    return [m["hostname"] for w in schedule.get("windows", []) for m in w["machine_ids"]]


def audited(master: MasterProcess) -> list[tuple[str, str, str]]:
    lines = (master.root / "state" / "audit.log").read_text().splitlines()
    return [(r["subject"], r["action"], r["result"]) for r in map(json.loads, lines)]


async def test_a_client_pointed_at_a_follower_writes_through_the_leader(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    with masters_on(tmp_path / "masters", etcd_server, count=2) as masters:
        leader = masters.leader()
        [follower] = masters.followers()
        token = follower.token("ADMINISTRATOR", subject="alice")
        soon = time.time() + 3600

        async with MasterClient(urls=[follower.url, leader.url], token=token) as master:
            shown = await master.leader()
            assert (shown.leader, shown.url, shown.leading, shown.store) == (
                leader.url,
                follower.url,
                False,
                "etcd",
            )
            await master.set_schedule(window(["a.test"], soon))
            for each in masters.all:
                wait_for(lambda m=each: scheduled(m) == ["a.test"])
            assert ("alice", "maintenance.schedule", "ok") in audited(leader)
            assert ("alice", "maintenance.schedule", "master.not_leader") in audited(follower)
            # Mesos's plain-text refusal comes back through the redirect as it is.
            twice = window(["a.test", "a.test"], soon)
            with pytest.raises(InvalidMaintenance) as refused:
                await master.set_schedule(twice)
            assert "a.test" in refused.value.message
            assert scheduled(leader) == ["a.test"]

        # A master that cannot be reached is passed over; the follower sends on the write.
        dead = f"http://127.0.0.1:{free_port()}"
        async with MasterClient(urls=[dead, follower.url, leader.url], token=token) as master:
            await master.set_schedule(window(["b.test"], soon))
            assert (await master.leader()).leader == leader.url
            for each in masters.all:
                wait_for(lambda m=each: scheduled(m) == ["b.test"])
            assert await master.status() == {"draining_machines": [{"id": {
                "hostname": "b.test", "ip": "127.0.0.1"}}]}  # fmt: skip

        # Given only the follower, the client sends nothing to the leader it names; the
        # follower answers a preview itself (it changes nothing).
        b_test = [{"hostname": "b.test", "ip": "127.0.0.1"}]
        async with MasterClient(url=follower.url, token=token) as master:
            preview = await master.preview_schedule(window(["b.test", "c.test"], soon))
            assert [m["change"] for m in preview["machines"]] == ["kept", "added"]
            assert [w["code"] for w in preview["warnings"]] == ["schedule.unknown_machine"] * 2
            with pytest.raises(InvalidMaintenance):
                await master.preview_schedule(twice)
            with pytest.raises(RedirectNotFollowed) as alone:
                await master.down(b_test)
        # From the follower's own socket, which names no TCP master, neither.
        async with MasterClient(socket=follower.socket, token=token) as master:
            with pytest.raises(RedirectNotFollowed) as local:
                await master.down(b_test)
        for not_followed in (alone.value, local.value):
            assert not_followed.code == "client.redirect_refused"
            assert not_followed.location == leader.url + "/machine/down"
        assert leader.call("GET", "/maintenance/status").json().get("down_machines", []) == []
        async with MasterClient(urls=[follower.url, leader.url], token=token) as master:
            await master.down(b_test)
            wait_for(
                lambda: follower.call("GET", "/maintenance/status").json().get("down_machines")
            )
            report = await master.up(b_test)
        assert [m["machine_id"] for m in report["machines"]] == b_test
        assert scheduled(leader) == []

        # A schedule applied on the version of the state its preview was made from (the
        # follower previews, the leader applies); a version since replaced changes nothing.
        async with MasterClient(urls=[follower.url, leader.url], token=token) as master:
            later = window(["c.test"], soon)
            version = (await master.preview_schedule(later))["schedule_version"]
            applied = await master.apply_schedule(later, if_version=version)
            for each in masters.all:
                wait_for(lambda m=each: scheduled(m) == ["c.test"])
            with pytest.raises(Refused) as stale:
                await master.apply_schedule({}, if_version=version)
            assert (stale.value.code, stale.value.status) == ("schedule.changed", 412)
            assert scheduled(leader) == ["c.test"]
            assert (await master.preview_schedule({}))["schedule_version"] == applied
            await master.apply_schedule({}, if_version=applied)
        assert scheduled(leader) == []
