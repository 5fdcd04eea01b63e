"""The master API's edges, in process: costly constraints refused while the loop stays
free, bad input as clean 4xx, every refused Mesos change audited.

The app (with the ad fast path in front, as the daemon serves it) runs over
``httpx.ASGITransport``, which raises what the app does not handle: a 500 fails here.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import trio

from nodeagent._audit import AuditLog
from nodeagent._auth import Scope, create_token
from nodeagent._clock import TrioClock
from nodeagent._expressions._evaluator import Evaluator
from nodeagent._ha._leadership import Election, Fence
from nodeagent._moving_values import split_slots
from nodeagent._peer import AgentCallFailed, AgentLink
from nodeagent._serving._http import trusted
from nodeagent._store import DocumentStore, StoreError
from nodeagent.master import _api, _metrics
from nodeagent.master._adstore import AdStore
from nodeagent.master._api import build_master_app, with_ad_fast_path
from nodeagent.master._fleet import NodeLedger
from nodeagent.master._ingest import FRAME, Push, decode_worker_frame, encode_push
from nodeagent.master._leader import LeaderView
from nodeagent.master._maintenance import MaintenanceSchedule
from nodeagent.master._master import Master
from nodeagent.master._metrics import MasterMetrics
from nodeagent.master._plan import PlanPolicy
from slots import JobSpec, Machine, MachinePolicy, Resources

#: The hooks the simulated nodes hold (their ads list them: DrainHookNames).
HOOKS = frozenset({"reboot", "fw", "r", "x"})

EPOCH = 1_800_000_000.0
KEY = b"k" * 32
RUNAWAY = 'regexp("^(a+)+$", "' + "a" * 40 + '!")'
MACHINE = {"hostname": "n1", "ip": "10.0.0.1"}
SCHEDULE = {
    "windows": [
        {
            "machine_ids": [MACHINE],
            "unavailability": {"start": {"nanoseconds": 2 * 10**18}},
        }
    ]
}


class UnreachableLink:
    async def call(
        self, address: str, method: str, path: str, *, node: str, actor: str, body: Any = None
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        raise AgentCallFailed("agent.unreachable", f"{address}: connection refused")


@dataclass
class Api:
    master: Master
    evaluator: Evaluator
    audit_path: Path
    local: httpx.AsyncClient  # as over the Unix socket: ADMINISTRATOR
    tcp: httpx.AsyncClient  # as over TCP: tokens needed

    def token(
        self, scope: Scope, subject: str = "tester", *, node: str | None = None
    ) -> dict[str, str]:
        token = create_token(
            KEY, subject=subject, scope=scope, lifetime_s=3600, now=EPOCH, node=node
        )
        return {"Authorization": f"Bearer {token}"}

    def audited(self) -> list[tuple[str, str, str]]:
        if not self.audit_path.exists():
            return []
        records = map(json.loads, self.audit_path.read_text().splitlines())
        return [(r["subject"], r["action"], r["result"]) for r in records]

    async def push(
        self, ad: Any, *, raw: bytes | None = None, node: str | None = None
    ) -> httpx.Response:
        """Push ``ad`` (or the bytes ``raw``) with the DAEMON token of ``node``, by default
        the node the ad names."""
        body = raw if raw is not None else json.dumps(ad).encode()
        machine = ad.get("machine") if isinstance(ad, dict) else None
        name = machine.get("Name") if isinstance(machine, dict) else None
        if node is None:
            node = name if isinstance(name, str) and name else "n1.test"
        headers = self.token(Scope.DAEMON, f"agent@{node}", node=node)
        return await self.tcp.post("/v1/ads", content=body, headers=headers)


class FailingStore(DocumentStore):
    """A :class:`DocumentStore` whose ``save`` raises :class:`StoreError` while ``failing``
    is set, as on a full disk."""

    failing = False

    def save(self, **documents: Any) -> None:
        if self.failing:
            raise StoreError(f"cannot write {self.path}: database or disk is full")
        super().save(**documents)


class AnsweringLink:
    """Agents that answer ``GET /v1/ad`` with ``answers[address]``; each call is kept as
    (address, path, node, actor)."""

    def __init__(self, answers: dict[str, dict[str, Any]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str, str, str]] = []

    async def call(
        self, address: str, method: str, path: str, *, node: str, actor: str, body: Any = None
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        self.calls.append((address, path, node, actor))
        return self.answers[address]


@asynccontextmanager
async def api(
    tmp_path: Path,
    *,
    budget: float = 0.5,
    link: AgentLink | None = None,
    leader: LeaderView | None = None,
) -> AsyncIterator[Api]:
    master = Master(
        store=FailingStore(tmp_path / "master.db"),
        link=UnreachableLink() if link is None else link,
        clock=TrioClock(EPOCH),
        ads=AdStore(lifetime=10_000),
    )
    audit_path = tmp_path / "audit.log"
    metrics = MasterMetrics(master, require_auth=True)
    try:
        async with Evaluator(budget=budget, workers=1) as evaluator:
            with AuditLog(audit_path) as audit:
                app = with_ad_fast_path(
                    build_master_app(
                        master,
                        key=KEY,
                        audit=audit,
                        metrics=metrics,
                        evaluator=evaluator,
                        leader=leader,
                    ),
                    master,
                    key=KEY,
                    metrics=metrics,
                )
                async with (
                    httpx.AsyncClient(
                        transport=httpx.ASGITransport(app=trusted(app)), base_url="http://unix"
                    ) as local,
                    httpx.AsyncClient(
                        transport=httpx.ASGITransport(app=app, client=("192.0.2.7", 40000)),
                        base_url="http://tcp",
                    ) as tcp,
                ):
                    yield Api(master, evaluator, audit_path, local, tcp)
    finally:
        master.store.close()


def node_ad(name: str, *, cpus: int = 4) -> dict[str, Any]:
    machine = Machine(
        host=name,
        ip="10.0.0.1",
        address=f"http://{name}:9621",
        total=Resources(cpus=cpus),
        policy=MachinePolicy(max_job_retirement_time=60, hooks=HOOKS),
        now=EPOCH,
    )
    machine.claim(EPOCH, resources=Resources(cpus=1), spec=JobSpec())
    return machine.ad(EPOCH)


def error_code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


# ------------------------------------------------------------------ constraints


async def test_a_costly_constraint_is_refused_while_the_loop_answers_others(
    tmp_path: Path,
) -> None:
    async with api(tmp_path, budget=2.0) as a:
        for i in range(50):
            assert (await a.push(node_ad(f"n{i:02}"))).status_code == 200
        replies: list[httpx.Response] = []

        async def costly() -> None:
            replies.append(await a.local.get("/v1/ads", params={"constraint": RUNAWAY}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(costly)
            # Polling on purpose: each turn here is one the loop was free to give.
            while a.evaluator.running == 0:  # noqa: ASYNC110
                await trio.sleep(0.005)
            health = await a.tcp.get("/healthz")
            listed = await a.local.get("/v1/ads", params={"projection": "Name"})
            # Both answered while the costly query was still being evaluated.
            assert (a.evaluator.running, replies) == (1, [])
        assert health.status_code == 200
        assert len(listed.json()["ads"]) == 50
        (reply,) = replies
        assert error_code(reply) == (422, "expression.too_costly")
        assert "budget of 2 s" in reply.json()["error"]["message"]
        # Within budget, a constraint over all 50 ads answers.
        cheap = await a.local.get(
            "/v1/ads", params={"constraint": 'Name >= "n48"', "projection": "Name"}
        )
        assert cheap.json() == {"ads": [{"Name": "n48"}, {"Name": "n49"}]}


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        ("true\x00", "control character U+0000"),
        ('Name == "a\nb\x1b"', "control character U+001B"),
        ("(" * 65 + "1" + ")" * 65, "nested 65 deep"),
        ("Cpus > 1 || " * 1000 + "true", "characters: at most 8192"),
        ("Cpus >", "not a ClassAd expression"),
    ],
)
async def test_a_bad_constraint_is_422_request_invalid(
    tmp_path: Path, constraint: str, message: str
) -> None:
    async with api(tmp_path) as a:
        await a.push(node_ad("n1"))
        reply = await a.local.get("/v1/ads", params={"constraint": constraint})
        assert error_code(reply) == (422, "request.invalid")
        assert message in reply.json()["error"]["message"]


async def test_constraints_projection_and_formats(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        await a.push(node_ad("n1", cpus=4))
        await a.push(node_ad("n2", cpus=8))
        big = await a.local.get(
            "/v1/ads", params={"constraint": "TotalCpus >= 8", "projection": "Name,TotalCpus"}
        )
        assert big.json() == {"ads": [{"Name": "n2", "TotalCpus": 8}]}
        slot_ads = await a.local.get(
            "/v1/ads", params={"slots": "true", "constraint": 'SlotType == "Dynamic"'}
        )
        assert [s["Name"] for s in slot_ads.json()["ads"]] == ["slot1_1@n1", "slot1_1@n2"]
        text = await a.local.get(
            "/v1/ads", params={"constraint": "true", "projection": "Name", "format": "classad"}
        )
        assert text.text == 'Name = "n1"\n\nName = "n2"\n'
        bad = await a.local.get("/v1/ads", params={"constraint": RUNAWAY, "format": "xml"})
        assert error_code(bad) == (422, "request.invalid")
        assert a.evaluator.started == 1  # the bad format was refused before evaluating


# ------------------------------------------------------------------ ads


@pytest.mark.parametrize(
    ("where", "change", "message"),
    [
        ("slot", {"DrainSuspendedJobs": []}, "DrainSuspendedJobs must be a string"),
        ("slot", {"State": ["Claimed"]}, "State must be a string"),
        ("slot", {"Cpus": None}, "Cpus must be absent rather than null"),
        ("machine", {"TotalMachineDrainingBadput": "x"}, "must be a finite number"),
        # beyond a float's range: no 64-bit integer, read by Python's json (not a 500)
        ("machine", {"TotalMachineDrainingBadput": 10**400}, "must be a finite number"),
        ("slot", {"TotalJobRunTime": -(10**309)}, "must be a finite number"),
    ],
)
async def test_an_ad_with_values_the_master_cannot_read_is_422(
    tmp_path: Path, where: str, change: dict[str, Any], message: str
) -> None:
    async with api(tmp_path) as a:
        ad = node_ad("n1")
        (ad["machine"] if where == "machine" else ad["slots"][-1]).update(change)
        reply = await a.push(ad)
        assert error_code(reply) == (422, "request.invalid")
        assert message in reply.json()["error"]["message"]
        assert a.master.ads.get("n1") is None
        plan = await a.local.get("/v1/maintenance/plan")
        assert plan.status_code == 200


@pytest.mark.parametrize("depth", [100, 5_000, 100_000])
async def test_a_deeply_nested_ad_body_is_422(tmp_path: Path, depth: int) -> None:
    async with api(tmp_path) as a:
        deep = (
            b'{"machine": {"Name": "n1", "X": ' + b"[" * depth + b"]" * depth + b'}, "slots": []}'
        )
        reply = await a.push(None, raw=deep, node="n1")
        assert error_code(reply) == (422, "request.invalid")
        assert a.master.ads.get("n1") is None


@pytest.mark.parametrize(
    "escaped",
    [
        b'"DrainReason": "\\ud800"',  # a value
        b'"DrainReason": ["a", {"\\udfff": 1}]',  # a key in a record
        b'"\\udbff": "x"',  # an attribute's name
    ],
)
async def test_an_ad_with_a_lone_surrogate_is_422_and_changes_nothing(
    tmp_path: Path, escaped: bytes
) -> None:
    """Python's json reads a lone surrogate (orjson does not): taken, the ad could not be
    written back as UTF-8, and every read of it would fail."""
    async with api(tmp_path) as a:
        ad = node_ad("n1")
        ad["machine"]["DrainReason"] = "x"
        body = json.dumps(ad).encode().replace(b'"DrainReason": "x"', escaped)
        reply = await a.push(None, raw=body, node="n1")
        assert error_code(reply) == (422, "request.invalid")
        assert "lone UTF-16 surrogate" in reply.json()["error"]["message"]
        assert a.master.ads.get("n1") is None
        assert (await a.local.get("/v1/ads")).status_code == 200


async def test_a_fresh_ad_from_an_unreachable_node_is_502(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        await a.push(node_ad("n1"))
        reply = await a.local.get("/v1/ads/n1", params={"fresh": "true"})
        assert error_code(reply) == (502, "agent.unreachable")
        assert (await a.local.get("/v1/ads/n1")).json()["machine"]["Name"] == "n1"


# ------------------------------------------------------------------ ads moved on


def moved_on(ad: dict[str, Any], digest: str, *, by: int = 60) -> dict[str, Any]:
    """``ad`` ``by`` seconds later, pushed with its slot ads' moving values alone."""
    later = copy.deepcopy(ad)
    for part in (later["machine"], *later["slots"]):
        part["MyCurrentTime"] += by
        if part.get("Activity") == "Busy":
            part["TotalJobRunTime"] += by
    _, moving = split_slots(later["slots"])
    return {"machine": later["machine"], "moved_on": {"slots_digest": digest, "moving": moving}}


async def test_an_ad_moved_on_is_taken_for_the_slot_ads_held_and_refused_otherwise(
    tmp_path: Path,
) -> None:
    """A push's reply gives the digest of the slot ads' static part; the node's next ad,
    pushed with its moving values alone for that digest, is the node's ad as a whole push
    of it would be. For slot ads the master does not hold (another digest, a node it never
    heard, other slots), 409 ``ad.slots_unknown``; for values that are not finite
    numbers, 422; for another node, 403: each changes nothing."""
    async with api(tmp_path) as a:
        whole = node_ad("n1")
        reply = await a.push(whole)
        assert reply.status_code == 200
        digest = reply.json()["slots_digest"]
        assert re.fullmatch("[0-9a-f]{32}", digest)
        pushed = moved_on(whole, digest)
        reply = await a.push(pushed)
        assert reply.status_code == 200, reply.text
        assert reply.json()["slots_digest"] == digest
        assert a.master.ads.moved_on_ads == 1
        held = a.master.ads.get("n1")
        assert held is not None
        expected = copy.deepcopy(whole)
        for part in (expected["machine"], *expected["slots"]):
            part["MyCurrentTime"] += 60
            if part.get("Activity") == "Busy":
                part["TotalJobRunTime"] += 60
        assert (held.machine, list(held.slots)) == (expected["machine"], expected["slots"])
        served = (await a.local.get("/v1/ads/n1")).json()
        assert [s["MyCurrentTime"] for s in served["slots"]] == [EPOCH + 60] * len(whole["slots"])

        other_digest = moved_on(whole, "0" * 32, by=120)
        fewer = moved_on(whole, digest, by=120)
        fewer["moved_on"]["moving"].pop()
        other_names = moved_on(whole, digest, by=120)
        moving = other_names["moved_on"]["moving"]
        moving[0] = dict(moving[-1])  # a claim's moving attributes for the partitionable slot
        assert list(moving[0]) != list(split_slots(whole["slots"])[1][0])
        text = moved_on(whole, digest, by=120)
        text["moved_on"]["moving"][0]["MyCurrentTime"] = "later"
        flag = moved_on(whole, digest, by=120)
        flag["moved_on"]["moving"][0]["MyCurrentTime"] = True
        static = moved_on(whole, digest, by=120)
        static["moved_on"]["moving"][0]["State"] = "Owner"
        short = moved_on(whole, digest[:30], by=120)
        both = {**moved_on(whole, digest, by=120), "slots": whole["slots"]}
        defrag = moved_on(whole, digest, by=120)
        defrag["machine"]["MyType"] = "Defrag"
        bad_machine = moved_on(whole, digest, by=120)
        bad_machine["machine"]["State"] = 3
        cases = [
            (other_digest, "n1", (409, "ad.slots_unknown")),
            (moved_on(node_ad("n2"), digest), "n2", (409, "ad.slots_unknown")),
            (fewer, "n1", (409, "ad.slots_unknown")),
            (other_names, "n1", (409, "ad.slots_unknown")),
            (text, "n1", (422, "request.invalid")),
            (flag, "n1", (422, "request.invalid")),
            (static, "n1", (422, "request.invalid")),
            (short, "n1", (422, "request.invalid")),
            (both, "n1", (422, "request.invalid")),
            (defrag, "n1", (422, "request.invalid")),
            (bad_machine, "n1", (422, "request.invalid")),
            (moved_on(whole, digest, by=120), "n2", (403, "auth.wrong_node")),
        ]
        for body, node, expected_error in cases:
            reply = await a.push(body, node=node)
            assert error_code(reply) == expected_error, (body, reply.text)
            assert a.master.ads.get("n1") is held
            assert a.master.ads.get("n2") is None


# ------------------------------------------------------------------ node restriction


async def test_an_ad_under_another_nodes_name_is_403_and_changes_nothing(tmp_path: Path) -> None:
    """A node's DAEMON token pushes that node's ad only: an ad under another ``Name``, or
    naming another machine in ``Machine`` or in a slot ad, is 403 ``auth.wrong_node``;
    the other node's ad is held unchanged, and its fresh fetches still go to it."""
    link = AnsweringLink({"http://n1:9621": node_ad("n1")})
    async with api(tmp_path, link=link) as a:
        assert (await a.push(node_ad("n1"))).status_code == 200
        held = a.master.ads.get("n1")
        forged = node_ad("n1")
        forged["machine"]["MyAddress"] = forged["slots"][0]["MyAddress"] = "http://127.0.0.1:1"
        reply = await a.push(forged, node="n2")
        assert error_code(reply) == (403, "auth.wrong_node")
        assert "'n1' is not 'n2'" in reply.json()["error"]["message"]
        own_name_other_machine = node_ad("n2")
        own_name_other_machine["machine"]["Machine"] = "n1"
        other_slot = node_ad("n2")
        other_slot["slots"][-1]["Machine"] = "n1"
        nameless_slot = node_ad("n2")
        del nameless_slot["slots"][-1]["Machine"]
        nameless_slot["slots"][-1]["Name"] = "slot1_1@n1"
        huge = node_ad("n2")
        huge["machine"]["Name"] = "n" * 1_000_000
        for ad in (own_name_other_machine, other_slot, nameless_slot, huge):
            reply = await a.push(ad, node="n2")
            assert error_code(reply) == (403, "auth.wrong_node")
            assert len(reply.content) < 500  # what came from the network is cut
        assert a.master.ads.get("n1") is held
        assert a.master.ads.get("n2") is None
        fresh = await a.local.get("/v1/ads/n1", params={"fresh": "true"})
        assert fresh.status_code == 200
        assert link.calls == [("http://n1:9621", "/v1/ad", "n1", "master")]


async def test_a_pool_wide_daemon_token_is_refused_unless_allowed(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        pool = a.token(Scope.DAEMON, "agents")  # names no node
        body = json.dumps(node_ad("n1")).encode()
        refused = await a.tcp.post("/v1/ads", content=body, headers=pool)
        assert error_code(refused) == (403, "auth.pool_daemon_token")
        assert a.master.ads.get("n1") is None
        a.master.allow_pool_daemon_tokens = True  # [master] allow_pool_daemon_tokens
        for _ in range(2):
            assert (await a.tcp.post("/v1/ads", content=body, headers=pool)).status_code == 200
        assert a.master.ads.get("n1") is not None
        assert a.master.pool_token_ads == 2
        metrics = (await a.local.get("/metrics")).text
        assert "nodeagent_master_pool_token_ads_total 2.0" in metrics


async def test_a_workers_push_is_stored_by_the_pusher_it_names_and_refused_as_the_masters_own(
    tmp_path: Path,
) -> None:
    """What an ingest worker hands on (the subject and node of the token it verified) is
    answered as the master's own fast path answers the token: a node's push stored, a
    pool-wide pusher refused unless allowed, the ad of another node refused by the node
    named (a body the master makes ready itself)."""
    async with api(tmp_path) as a:
        answer = _api.push_answer(a.master, MasterMetrics(a.master, require_auth=True))

        def push(subject: str, node: str | None, ad: dict[str, Any]) -> _api.AdReply:
            frame = encode_push(1, 0.0, subject, node, body=json.dumps(ad).encode())
            decoded = decode_worker_frame(frame[FRAME.size :])
            assert isinstance(decoded, Push)
            reply = answer(decoded)
            assert reply is not None
            return reply

        pooled = push("agents", None, node_ad("n1"))
        assert (pooled.status, json.loads(pooled.body)["error"]["code"]) == (
            403,
            "auth.pool_daemon_token",
        )
        foreign = push("agent@n2", "n2", node_ad("n1"))
        assert (foreign.status, json.loads(foreign.body)["error"]["code"]) == (
            403,
            "auth.wrong_node",
        )
        assert a.master.ads.get("n1") is None
        assert push("agent@n1", "n1", node_ad("n1")).status == 200
        assert a.master.ads.get("n1") is not None
        a.master.allow_pool_daemon_tokens = True
        assert push("agents", None, node_ad("n2")).status == 200
        assert a.master.pool_token_ads == 1


async def test_the_forecasts_waiting_show_in_the_master_ad_and_the_metrics(
    tmp_path: Path,
) -> None:
    """A pass whose budget is spent leaves a forecast waiting; the master's ad and /metrics
    say how many, and 0 once a pass made it."""

    async def shown() -> tuple[int, bool]:
        ad = (await a.local.get("/v1/ad")).json()
        metrics = (await a.local.get("/metrics")).text
        return ad["MasterForecastsWaiting"], "nodeagent_master_forecasts_waiting 1.0" in metrics

    async with api(tmp_path) as a:
        assert (await a.push(node_ad("n1"))).status_code == 200
        assert (await a.local.post("/maintenance/schedule", json=SCHEDULE)).status_code == 200
        a.master.forecasts_per_pass = 0
        async with trio.open_nursery() as nursery:
            a.master.reconcile(nursery)
            assert await shown() == (1, True)
            a.master.forecasts_per_pass = 1
            a.master.reconcile(nursery)
            assert await shown() == (0, False)
            nursery.cancel_scope.cancel()


async def test_a_scrape_takes_the_nodes_again_in_parts_the_loop_served_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 nodes' ads to take again, 4 a part: a scrape takes 13 parts and more, another
    task runs between each two, and the figures count every node; a scrape with nothing
    new takes one part. Once scraped, the master takes the next ads in the background
    (``keep_totals``), and the next scrape finds nothing left."""
    monkeypatch.setattr(_metrics, "NODES_A_SLICE", 4)
    monkeypatch.setattr(_metrics, "SCRAPE_NODES_WITHIN", math.inf)  # parts, not the clock
    turns = 0
    seen: list[int] = []
    left: list[int] = []  # the nodes left to take after each part
    bring_part = NodeLedger.bring_part

    def counted(self: NodeLedger, now: float, changed: set[str], *args: Any) -> bool:
        seen.append(turns)
        whole = bring_part(self, now, changed, *args)
        left.append(len(changed))
        return whole

    monkeypatch.setattr(NodeLedger, "bring_part", counted)

    async def elsewhere() -> None:
        nonlocal turns
        while True:
            turns += 1
            await trio.lowlevel.checkpoint()

    async with api(tmp_path) as a:
        for i in range(50):
            assert (await a.push(node_ad(f"n{i:02}"))).status_code == 200
        async with trio.open_nursery() as nursery:
            nursery.start_soon(elsewhere)
            text = (await a.local.get("/metrics")).text
            assert 'nodeagent_master_nodes{state="live"} 50.0' in text
            assert "nodeagent_master_nodes_behind 0.0" in text
            assert len(seen) >= 13
            # the other task ran between the parts (a round's order is trio's to choose)
            assert seen == sorted(seen)
            assert seen[-1] > seen[0] + len(seen) // 2
            seen.clear()
            assert (await a.local.get("/metrics")).status_code == 200
            assert len(seen) == 1
            # after a scrape the master keeps the figures current with the plan's totals
            for i in range(50, 60):
                assert (await a.push(node_ad(f"n{i:02}"))).status_code == 200
            left.clear()
            async with trio.open_nursery() as keeping:
                await keeping.start(a.master.keep_totals)
                with trio.fail_after(30):
                    while not left or left[-1]:  # noqa: ASYNC110 (a task of its own)
                        await trio.sleep(0.01)
                keeping.cancel_scope.cancel()
            assert left[:3] == [6, 2, 0]  # 10 nodes, 4 a part
            seen.clear()
            text = (await a.local.get("/metrics")).text
            assert 'nodeagent_master_nodes{state="live"} 60.0' in text
            assert len(seen) == 1  # nothing left for the scrape to take
            nursery.cancel_scope.cancel()


def _drain_state_counts(text: str) -> float:
    """The nodes a scrape's ``nodeagent_master_nodes_by_drain_state`` counts, in all."""
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("nodeagent_master_nodes_by_drain_state{")
    )


async def test_a_scrape_out_of_time_answers_and_says_how_many_nodes_it_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 nodes to take again, 4 a part, and a scrape whose time runs out after its first
    part: it answers with the 4 nodes it took counted by their states, the 46 others
    behind, every node live (the store's count); the next takes 4 more; the master takes
    the rest after them (``keep_totals``), and a scrape then counts them all, none
    behind."""
    monkeypatch.setattr(_metrics, "NODES_A_SLICE", 4)
    monkeypatch.setattr(_metrics, "SCRAPE_NODES_WITHIN", 0.0)
    async with api(tmp_path) as a:
        for i in range(50):
            assert (await a.push(node_ad(f"n{i:02}"))).status_code == 200
        text = (await a.local.get("/metrics")).text
        assert 'nodeagent_master_nodes{state="live"} 50.0' in text
        assert "nodeagent_master_nodes_behind 46.0" in text
        assert _drain_state_counts(text) == 4
        text = (await a.local.get("/metrics")).text  # each scrape takes a part more
        assert "nodeagent_master_nodes_behind 42.0" in text
        assert _drain_state_counts(text) == 8
        async with trio.open_nursery() as nursery:
            await nursery.start(a.master.keep_totals)
            with trio.fail_after(30):
                while "nodeagent_master_nodes_behind 0.0" not in (  # noqa: ASYNC110
                    text := (await a.local.get("/metrics")).text
                ):
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert _drain_state_counts(text) == 50
        assert 'nodeagent_master_nodes{state="live"} 50.0' in text


async def test_a_scrape_s_parts_end_while_ads_keep_coming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 nodes to take again, 4 a part, and 10 new ads between two parts (more than a
    part takes): the parts take the 20 and end; the scrape counts every node."""
    monkeypatch.setattr(_metrics, "NODES_A_SLICE", 4)
    async with api(tmp_path) as a:
        metrics = MasterMetrics(a.master, require_auth=False)
        for i in range(20):
            assert (await a.push(node_ad(f"n{i:03}"))).status_code == 200
        parts = 0
        for _ in metrics.node_slices():
            parts += 1
            assert parts < 100, "the parts never end"
            for j in range(10):
                a.master.ads.update(node_ad(f"n{20 + 10 * parts + j:03}"), EPOCH)
        assert parts == 4  # 5 parts of 4: a yield between two
        text = metrics.render()[0].decode()
        assert f'nodeagent_master_nodes{{state="live"}} {20 + 10 * parts}.0' in text


async def test_the_summary_and_the_metrics_say_how_many_machines_they_left_behind(
    tmp_path: Path,
) -> None:
    """A master whose replies may remake no share (answer limit 0): the summary and a
    scrape answer at once, counting the scheduled machine as not read; the master brings
    it in after the read (keep_totals), and both then say 0."""

    async def shown() -> tuple[int, int, bool]:
        summary = await a.local.get("/v1/maintenance/plan", params={"late": "true"})
        totals = summary.json()["totals"]
        metrics = (await a.local.get("/metrics")).text
        behind = "nodeagent_master_plan_machines_behind 1.0" in metrics
        return totals["behind"], totals["machines"], behind

    async with api(tmp_path) as a:
        a.master.policy = PlanPolicy()
        a.master.plan_view.answer_limit = 0
        assert (await a.push(node_ad("n1"))).status_code == 200
        assert (await a.local.post("/maintenance/schedule", json=SCHEDULE)).status_code == 200
        a.master._to_fetch.clear()  # the ad is the node's latest: nothing to fetch
        assert await shown() == (1, 0, True)
        async with trio.open_nursery() as nursery:
            await nursery.start(a.master.keep_totals)
            with trio.fail_after(30):
                while await shown() != (0, 1, False):  # noqa: ASYNC110 (read over HTTP)
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "address",
    [
        "http://127.0.0.1:9621/x?target=",
        "http://127.0.0.1:9621/",
        "http://127.0.0.1:9621?x=1",
        "http://127.0.0.1:9621#f",
        "http://user:pw@127.0.0.1:9621",
        "ftp://127.0.0.1:9621",
        "http://127.0.0.1:99999",
        "127.0.0.1:9621",
        7,
    ],
)
@pytest.mark.parametrize("where", ["machine", "slot"])
async def test_my_address_that_is_not_a_plain_origin_is_refused(
    tmp_path: Path, address: object, where: str
) -> None:
    async with api(tmp_path) as a:
        ad = node_ad("n1")
        (ad["machine"] if where == "machine" else ad["slots"][-1])["MyAddress"] = address
        reply = await a.push(ad)
        assert error_code(reply) == (422, "request.invalid")
        assert "MyAddress" in reply.json()["error"]["message"]
        assert a.master.ads.get("n1") is None


@pytest.mark.parametrize(
    "address", ["https://n1.example:443", "http://[::1]:9621", "unix:///run/nodeagent/s.sock"]
)
async def test_a_plain_origin_or_a_unix_socket_is_a_my_address(
    tmp_path: Path, address: str
) -> None:
    async with api(tmp_path) as a:
        ad = node_ad("n1")
        for one in (ad["machine"], *ad["slots"]):
            one["MyAddress"] = address
        assert (await a.push(ad)).status_code == 200


async def test_a_fresh_fetch_answered_with_another_nodes_ad_stores_nothing(
    tmp_path: Path,
) -> None:
    """What answers at a node's address must be that node: another's ad is 502
    ``agent.bad_reply`` and is not stored (no way round the push's node check)."""
    impostor = node_ad("n2")
    impostor["machine"]["MyAddress"] = "http://127.0.0.1:1"
    link = AnsweringLink({"http://n1:9621": impostor})
    async with api(tmp_path, link=link) as a:
        assert (await a.push(node_ad("n1"))).status_code == 200
        reply = await a.local.get("/v1/ads/n1", params={"fresh": "true"})
        assert error_code(reply) == (502, "agent.bad_reply")
        assert "answered another's ad" in reply.json()["error"]["message"]
        assert a.master.ads.get("n2") is None


async def test_the_openapi_document_needs_read_as_every_path_but_healthz(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        anonymous = await a.tcp.get("/v1/openapi.json")
        assert error_code(anonymous) == (401, "auth.unauthenticated")
        read = await a.tcp.get("/v1/openapi.json", headers=a.token(Scope.READ))
        assert read.status_code == 200
        assert "/v1/ads" in read.json()["paths"]
        assert (await a.local.get("/v1/openapi.json")).json() == read.json()
        assert (await a.tcp.get("/healthz")).status_code == 200


# ------------------------------------------------------------------ Mesos endpoints


@pytest.mark.parametrize("depth", [101, 100_000])
async def test_a_deeply_nested_schedule_is_400_as_mesos_and_changes_nothing(
    tmp_path: Path, depth: int
) -> None:
    async with api(tmp_path) as a:
        assert (await a.local.post("/maintenance/schedule", json=SCHEDULE)).status_code == 200
        before = (await a.local.get("/maintenance/schedule")).json()
        body = '{"windows": ' + "[" * depth + "]" * depth + "}"
        reply = await a.local.post("/maintenance/schedule", content=body)
        assert reply.status_code == 400
        assert reply.headers["content-type"].startswith("text/plain")
        assert (
            reply.text == "syntax error at line 1 near: " + "[" * (depth - 100) + "]" * depth + "}"
        )
        assert (await a.local.get("/maintenance/schedule")).json() == before
        down = await a.local.post("/machine/down", content="[" * depth)
        assert down.status_code == 400
        assert a.audited() == [
            ("local", "maintenance.schedule", "ok"),
            ("local", "maintenance.schedule", "maintenance.bad_json"),
            ("local", "machine.down", "maintenance.bad_json"),
        ]


async def test_every_refused_mesos_change_is_audited(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        anonymous = await a.tcp.post("/maintenance/schedule", json=SCHEDULE)
        reader = await a.tcp.post(
            "/machine/up",
            json=[MACHINE],
            headers=a.token(Scope.READ, subject="bob"),
        )
        admin = a.token(Scope.ADMINISTRATOR, subject="alice")
        bad = await a.tcp.post("/machine/down", json=[{"hostname": "n9"}], headers=admin)
        assert [anonymous.status_code, reader.status_code, bad.status_code] == [401, 403, 400]
        assert a.audited() == [
            ("anonymous", "maintenance.schedule", "auth.unauthenticated"),
            ("bob", "machine.up", "auth.forbidden"),
            ("alice", "machine.down", "maintenance.not_scheduled"),
        ]
        assert (await a.local.get("/maintenance/status")).json() == {}


async def test_a_master_that_won_the_election_leads_once_its_term_holds_the_store(
    tmp_path: Path,
) -> None:
    """Between winning the election and holding the store (the state its predecessors
    wrote taken, its writes fenced), and after a write of its term is fenced out, a
    master does not lead: a write is 503 ``master.no_leader`` to send again (not a
    store's error), audited, and changes nothing; ``GET /v1/leader`` does not show it
    leading before it can take a write."""
    held = False
    election = Election(etcd=cast(Any, None), key=b"/nodeagent/leader", ttl=10, identity={})
    election.fence = Fence(key=b"/nodeagent/leader", revision=7, lease=1)  # won
    view = LeaderView(url="http://m1.test", store="etcd", election=election)
    view.holding = lambda: held
    async with api(tmp_path, leader=view) as a:
        for moment in ("won, state not yet taken", "fenced out, the term not yet over"):
            refused = await a.local.post("/maintenance/schedule", json=SCHEDULE)
            assert error_code(refused) == (503, "master.no_leader"), moment
            assert refused.headers["Retry-After"] == "1"
            shown = (await a.local.get("/v1/leader")).json()
            assert (shown["leading"], shown["leader"]) == (False, None), moment
            assert (await a.local.get("/maintenance/schedule")).json() == {}
            held = True
            taken = await a.local.post("/maintenance/schedule", json=SCHEDULE)
            assert taken.status_code == 200, taken.text
            shown = (await a.local.get("/v1/leader")).json()
            assert (shown["leading"], shown["leader"]) == (True, "http://m1.test")
            await a.local.post("/maintenance/schedule", json={"windows": []})
            held = False
        assert [result for _, action, result in a.audited()] == [
            "master.no_leader",
            "ok",
            "ok",
            "master.no_leader",
            "ok",
            "ok",
        ]


async def test_a_schedule_and_its_preview_are_read_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body's schedule is read (and, for a preview, checked) in a thread (a schedule
    of 100,000 machines takes seconds): reading it here asks the event loop to run
    something meanwhile, and waits for it (from the loop's own thread that raises; a read
    that held the loop would wait for ever)."""
    ran: list[bool] = []
    read = MaintenanceSchedule.from_json

    def read_while_the_loop_runs(document: Any) -> MaintenanceSchedule:
        trio.from_thread.run_sync(lambda: ran.append(True))
        return read(document)

    async with api(tmp_path) as a:
        monkeypatch.setattr(MaintenanceSchedule, "from_json", read_while_the_loop_runs)
        reply = await a.local.post("/v1/maintenance/schedule/preview", json=SCHEDULE)
        assert reply.status_code == 200, reply.text
        assert reply.json()["totals"]["added"] == 1
        assert ran == [True]
        version = reply.json()["schedule_version"]
        applied = await a.local.put(
            "/v1/maintenance/schedule", params={"if_version": version}, json=SCHEDULE
        )
        assert applied.status_code == 200, applied.text
        assert (await a.local.post("/maintenance/schedule", json={})).is_success
        assert ran == [True, True, True]
        assert (await a.local.get("/maintenance/schedule")).json() == {}


async def test_a_preview_of_the_rows_that_change_over_http(tmp_path: Path) -> None:
    """``rows=changed``: the rows of the machines added or moved; a bad value is a 422."""
    other = {"hostname": "n2", "ip": "10.0.0.2"}
    async with api(tmp_path) as a:
        assert (await a.local.post("/maintenance/schedule", json=SCHEDULE)).is_success
        grown = {"windows": [{**SCHEDULE["windows"][0], "machine_ids": [MACHINE, other]}]}
        path = "/v1/maintenance/schedule/preview"
        changed = (await a.local.post(path, params={"rows": "changed"}, json=grown)).json()
        every = (await a.local.post(path, json=grown)).json()
        assert (changed["rows"], every["rows"]) == ("changed", "all")
        assert [m["machine_id"] for m in changed["machines"]] == [other]
        assert [m["machine_id"] for m in every["machines"]] == [MACHINE, other]
        assert (changed["totals"]["kept"], changed["totals"]["added"]) == (1, 1)
        bad = await a.local.post(path, params={"rows": "some"}, json=grown)
        assert error_code(bad) == (422, "request.invalid")
        assert (await a.local.get("/maintenance/schedule")).json() == SCHEDULE  # unchanged


async def test_a_schedule_put_with_the_previews_version_applies_and_a_stale_one_changes_nothing(
    tmp_path: Path,
) -> None:
    """PUT /v1/maintenance/schedule?if_version=…: Mesos's rules, plus a precondition."""
    async with api(tmp_path) as a:
        admin = a.token(Scope.ADMINISTRATOR, subject="alice")
        seen = (await a.local.post("/v1/maintenance/schedule/preview", json=SCHEDULE)).json()
        version = seen["schedule_version"]
        # Someone else changes the schedule between the preview and the apply.
        assert (await a.local.post("/maintenance/schedule", json=SCHEDULE)).is_success
        stale = await a.tcp.put(
            "/v1/maintenance/schedule", params={"if_version": version}, json={}, headers=admin
        )
        assert stale.status_code == 412
        assert stale.json()["error"]["code"] == "schedule.changed"
        assert "preview the schedule again" in stale.json()["error"]["message"]
        assert (await a.local.get("/maintenance/schedule")).json() == SCHEDULE  # unchanged
        # Previewed again, the same change applies; the reply names the new version.
        version = (await a.local.post("/v1/maintenance/schedule/preview", json={})).json()[
            "schedule_version"
        ]
        applied = await a.tcp.put(
            "/v1/maintenance/schedule", params={"if_version": version}, json={}, headers=admin
        )
        assert applied.status_code == 200, applied.text
        assert (await a.local.get("/maintenance/schedule")).json() == {}
        assert (
            applied.json()["schedule_version"]
            == (await a.local.post("/v1/maintenance/schedule/preview", json={})).json()[
                "schedule_version"
            ]
        )
        assert applied.json()["schedule_version"] != version
        # Mesos's refusals, as POST /maintenance/schedule answers them; the scope; the
        # precondition is required.
        version = applied.json()["schedule_version"]
        bad = await a.tcp.put(
            "/v1/maintenance/schedule", params={"if_version": version}, content=b"[]", headers=admin
        )
        assert (bad.status_code, bad.text) == (400, "Unexpected JSON type parsed")
        reader = await a.tcp.put(
            "/v1/maintenance/schedule",
            params={"if_version": version},
            json=SCHEDULE,
            headers=a.token(Scope.READ, subject="bob"),
        )
        assert reader.status_code == 403
        unconditional = await a.local.put("/v1/maintenance/schedule", json=SCHEDULE)
        assert unconditional.status_code == 422
        assert (await a.local.get("/maintenance/schedule")).json() == {}
        assert a.audited() == [
            ("local", "maintenance.schedule", "ok"),
            ("alice", "maintenance.schedule", "schedule.changed"),
            ("alice", "maintenance.schedule", "ok"),
            ("alice", "maintenance.schedule", "maintenance.bad_json"),
            ("bob", "maintenance.schedule", "auth.forbidden"),
        ]


async def test_a_mesos_change_the_store_cannot_write_is_503_audited_and_changes_nothing(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        assert isinstance(a.master.store, FailingStore)
        admin = a.token(Scope.ADMINISTRATOR, subject="alice")
        assert (await a.tcp.post("/maintenance/schedule", json=SCHEDULE, headers=admin)).is_success
        before = [
            (await a.local.get(path)).json()
            for path in ("/maintenance/schedule", "/maintenance/status")
        ]
        a.master.store.failing = True
        replies = [
            await a.tcp.post(path, json=body, headers=admin)
            for path, body in (
                ("/maintenance/schedule", {"windows": []}),
                ("/machine/down", [MACHINE]),
            )
        ]
        for reply in replies:
            assert reply.status_code == 503
            assert reply.headers["content-type"].startswith("text/plain")
            assert "database or disk is full" in reply.text
        after = [
            (await a.local.get(path)).json()
            for path in ("/maintenance/schedule", "/maintenance/status")
        ]
        assert after == before
        a.master.store.failing = False
        assert (await a.tcp.post("/machine/down", json=[MACHINE], headers=admin)).is_success
        a.master.store.failing = True
        up = await a.tcp.post("/machine/up", json=[MACHINE], headers=admin)
        assert up.status_code == 503
        assert (await a.local.get("/maintenance/status")).json() == {"down_machines": [MACHINE]}
        assert a.audited() == [
            ("alice", "maintenance.schedule", "ok"),
            ("alice", "maintenance.schedule", "store.error"),
            ("alice", "machine.down", "store.error"),
            ("alice", "machine.down", "ok"),
            ("alice", "machine.up", "store.error"),
        ]


async def test_each_request_is_timed_by_its_route_with_no_task_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request histogram counts each request under its route; the app runs in the
    request's own task (no middleware's task between them), and a summary, made within
    one slice, is answered as one body (no streaming response's task either). (The slice
    is made long here: on a loaded machine the summary may take more than 10 ms.)"""
    monkeypatch.setattr(_api, "PLAN_SLICE", 60.0)
    async with api(tmp_path) as a:
        tasks: list[str] = []

        class Seen(trio.abc.Instrument):
            def task_spawned(self, task: trio.lowlevel.Task) -> None:
                tasks.append(task.name)

        instrument = Seen()
        trio.lowlevel.add_instrument(instrument)
        try:
            summary = await a.local.get("/v1/maintenance/plan", params={"late": "true"})
            assert summary.is_success
        finally:
            trio.lowlevel.remove_instrument(instrument)
        assert tasks == []
        assert summary.headers["content-length"] == str(len(summary.content))
        metrics = (await a.local.get("/metrics")).text
        labels = '{method="GET",route="/v1/maintenance/plan"}'
        assert f"nodeagent_master_http_request_seconds_count{labels} 1.0" in metrics
        for generation in (0, 1, 2):  # the interpreter's collector, by generation
            assert f'python_gc_collections_total{{generation="{generation}"}}' in metrics
