"""The notice endpoints in process: listed with filters, answered by the groups' owners
(a token's ``groups``) or an administrator, refused for another group, a bad body, an
unknown notice or a store that fails, every outcome audited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from nodeagent._auth import Scope, create_token
from nodeagent.master._master import Master
from slots import JobSpec, Machine, MachinePolicy, Resources
from tests.nodeagent.master.test_master_api import EPOCH, KEY, FailingStore, api, error_code

SCHEDULE = {
    "windows": [
        {
            "machine_ids": [{"hostname": "n1.test", "ip": "10.0.0.1"}],
            "unavailability": {"start": {"nanoseconds": int((EPOCH + 86_400) * 1e9)}},
        }
    ]
}


def node_ad(groups: list[str]) -> dict[str, Any]:
    machine = Machine(
        host="n1.test",
        ip="10.0.0.1",
        address="http://n1.test:9621",
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=60),
        now=EPOCH,
    )
    for group in groups:
        machine.claim(EPOCH, resources=Resources(cpus=1), spec=JobSpec(group=group))
    return machine.ad(EPOCH)


def owner(*groups: str, scope: Scope = Scope.READ) -> dict[str, str]:
    token = create_token(
        KEY, subject="owner", scope=scope, lifetime_s=3600, now=EPOCH, groups=groups
    )
    return {"Authorization": f"Bearer {token}"}


def verdict(master: Master, notice_id: str) -> str | None:
    answer = master.notices[notice_id].answer
    return None if answer is None else answer.verdict.value


def answered_at(master: Master, notice_id: str) -> float:
    answer = master.notices[notice_id].answer
    assert answer is not None
    return answer.at


async def one_pass(master: Master) -> None:
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        nursery.cancel_scope.cancel()


async def test_notices_listed_and_answered(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        assert (await a.push(node_ad(["a/p/x", "b/q/y"]))).status_code == 200
        reply = await a.local.post("/maintenance/schedule", json=SCHEDULE)
        assert reply.status_code == 200, reply.text
        await one_pass(a.master)

        listed = (await a.tcp.get("/v1/notices", headers=owner())).json()["notices"]
        assert [n["group"] for n in listed] == ["a/p/x", "b/q/y"]
        assert all(n["machine"] == "n1.test" and n["answer"] is None for n in listed)
        only = await a.tcp.get("/v1/notices", params={"group": "b/q/y"}, headers=owner())
        assert [n["group"] for n in only.json()["notices"]] == ["b/q/y"]
        other = await a.tcp.get("/v1/notices", params={"machine": "n2"}, headers=owner())
        assert other.json() == {"notices": []}
        ida, idb = listed[0]["id"], listed[1]["id"]

        # a READ token of a/* answers for a/p/x …
        body = {"reason": "our batch ends first", "expected_completion": EPOCH + 600}
        ok = await a.tcp.post(f"/v1/notices/{ida}/accept", json=body, headers=owner("a/*"))
        assert ok.status_code == 200, ok.text
        assert ok.json()["answer"]["verdict"] == "accept"
        assert ok.json()["answer"]["who"] == "owner"
        assert a.master.notices[ida].answer is not None
        # … not for b/q/y, and changes nothing
        wrong = await a.tcp.post(f"/v1/notices/{idb}/decline", json=body, headers=owner("a/*"))
        assert error_code(wrong) == (403, "auth.wrong_group")
        plain = await a.tcp.post(f"/v1/notices/{idb}/decline", json=body, headers=owner())
        assert error_code(plain) == (403, "auth.wrong_group")
        assert a.master.notices[idb].answer is None
        # ADMINISTRATOR answers for any group
        admin = await a.local.post(f"/v1/notices/{idb}/decline", json={"reason": "month end"})
        assert admin.status_code == 200, admin.text
        assert admin.json()["answer"]["verdict"] == "decline"

        bad = await a.tcp.post(
            f"/v1/notices/{ida}/decline", json={"reason": "a\tb"}, headers=owner("a/*")
        )
        assert error_code(bad) == (422, "notice.bad_reason")
        bad = await a.tcp.post(f"/v1/notices/{ida}/decline", content=b"{", headers=owner("a/*"))
        assert error_code(bad) == (422, "notice.bad_body")
        gone = await a.tcp.post("/v1/notices/n-nope/accept", json=body, headers=owner("a/*"))
        assert error_code(gone) == (404, "notice.no_such_notice")
        assert verdict(a.master, ida) == "accept"

        assert isinstance(a.master.store, FailingStore)
        a.master.store.failing = True
        failed = await a.tcp.post(f"/v1/notices/{ida}/decline", json=body, headers=owner("a/*"))
        assert failed.status_code == 503
        a.master.store.failing = False
        assert verdict(a.master, ida) == "accept"

        status = (await a.tcp.get("/maintenance/status", headers=owner())).json()
        assert status == {
            "draining_machines": [
                {
                    "id": {"hostname": "n1.test", "ip": "10.0.0.1"},
                    "statuses": [
                        {
                            "status": "ACCEPT",
                            "framework_id": {"value": "a/p/x"},
                            "timestamp": {"nanoseconds": round(answered_at(a.master, ida) * 1e9)},
                        },
                        {
                            "status": "DECLINE",
                            "framework_id": {"value": "b/q/y"},
                            "timestamp": {"nanoseconds": round(answered_at(a.master, idb) * 1e9)},
                        },
                    ],
                }
            ]
        }

        audited = [r for r in a.audited() if r[1].startswith("notice.")]
        assert audited == [
            ("owner", f"notice.accept {ida}", "ok"),
            ("owner", f"notice.decline {idb}", "auth.wrong_group"),
            ("owner", f"notice.decline {idb}", "auth.wrong_group"),
            ("local", f"notice.decline {idb}", "ok"),
            ("owner", f"notice.decline {ida}", "notice.bad_reason"),
            ("owner", f"notice.decline {ida}", "notice.bad_body"),
            ("owner", "notice.accept n-nope", "notice.no_such_notice"),
            ("owner", f"notice.decline {ida}", "store.error"),
        ]


async def test_an_expected_completion_after_the_window_or_in_another_unit_is_refused(
    tmp_path: Path,
) -> None:
    start = EPOCH + 86_400
    hour = {
        "windows": [
            {
                "machine_ids": [{"hostname": "n1.test", "ip": "10.0.0.1"}],
                "unavailability": {
                    "start": {"nanoseconds": int(start * 1e9)},
                    "duration": {"nanoseconds": 3600 * 10**9},
                },
            }
        ]
    }
    async with api(tmp_path) as a:
        assert (await a.push(node_ad(["a/p/x"]))).status_code == 200
        assert (await a.local.post("/maintenance/schedule", json=hour)).status_code == 200
        await one_pass(a.master)
        (listed,) = (await a.tcp.get("/v1/notices", headers=owner())).json()["notices"]
        url = f"/v1/notices/{listed['id']}/decline"
        events = len(a.master.events.log.after(0)[1])
        for expected, said in [
            (start + 3601, "is after the window ends"),
            ((EPOCH + 600) * 1000, "— milliseconds?"),
            (int((EPOCH + 600) * 1e9), "— nanoseconds?"),
        ]:
            body = {"reason": "month end", "expected_completion": expected}
            refused = await a.tcp.post(url, json=body, headers=owner("a/*"))
            assert error_code(refused) == (422, "notice.bad_expected_completion")
            assert said in refused.json()["error"]["message"]
        # nothing changed: no answer, no event
        assert a.master.notices[listed["id"]].answer is None
        assert len(a.master.events.log.after(0)[1]) == events
        body = {"reason": "month end", "expected_completion": start + 3600}
        ok = await a.tcp.post(url, json=body, headers=owner("a/*"))
        assert ok.status_code == 200, ok.text
        assert ok.json()["answer"]["expected_completion"] == start + 3600
        audited = [r[2] for r in a.audited() if r[1].startswith("notice.")]
        assert audited == ["notice.bad_expected_completion"] * 3 + ["ok"]
