"""The plan streamed as JSON lines by a real master, over TCP and its Unix socket: a
head, a line a row and an end; filtered by window and machine, paged with cursors; bad
filters and stale cursors refused with their codes. (A plan made within one slice, as
these are, goes as one body; the slices are tested in process: test_plan_json.py.)"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from nodeagent.client import InvalidRequest, MasterClient, Refused
from slots import JobSpec, Machine, MachinePolicy, Resources
from tests.harness import MasterProcess

NS = 1_000_000_000
#: Machine n → its window's start, in two windows (n4 has no node).
HOSTS = {f"n{n}.test": (0 if n % 2 else 1) for n in range(5)}
NOW = time.time()
#: The windows' starts in nanoseconds (the second one's at a fraction of a second) and
#: in seconds, as the rows show them.
STARTS_NS = (round(NOW + 7200) * NS, round(NOW + 10800) * NS + 295_841_500)
STARTS = tuple(ns / NS for ns in STARTS_NS)
#: The schedule's order: window by window.
ORDER = ["n1.test", "n3.test", "n0.test", "n2.test", "n4.test"]


def _schedule() -> dict[str, Any]:
    return {
        "windows": [
            {
                "machine_ids": [
                    {"hostname": h, "ip": f"127.0.0.{n + 1}"}
                    for n, (h, w) in enumerate(HOSTS.items())
                    if w == which
                ],
                "unavailability": {
                    "start": {"nanoseconds": start},
                    "duration": {"nanoseconds": 3600 * NS},
                },
            }
            for which, start in enumerate(STARTS_NS)
        ]
    }


def _ad(n: int, name: str) -> dict[str, Any]:
    now = time.time()
    machine = Machine(
        host=name,
        ip=f"127.0.0.{n + 1}",
        address="http://127.0.0.1:1",
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=3600 * 5),
        now=now,
    )
    machine.claim(now, resources=Resources(cpus=1), spec=JobSpec(), started_at=now)
    return machine.ad(now)


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path_factory.mktemp("plan") / "master") as m:
        assert m.call("POST", "/maintenance/schedule", json=_schedule()).status_code == 200
        for n, name in enumerate(list(HOSTS)[:4]):
            with m.client(m.token("DAEMON", subject=f"agent@{name}", node=name)) as tcp:
                assert tcp.post("/v1/ads", json=_ad(n, name)).status_code == 200
        yield m


@pytest.fixture(params=["tcp", "unix"])
def client(request: pytest.FixtureRequest, master: MasterProcess) -> Iterator[httpx.Client]:
    token = master.token("READ") if request.param == "tcp" else None
    with master.client(token) as c:
        yield c


def _stream(client: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    with client.stream("GET", "/v1/maintenance/plan", params={**params, "format": "jsonl"}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"] == "application/x-ndjson"
        return [orjson.loads(line) for line in r.iter_lines() if line]


def _hosts(rows: list[dict[str, Any]]) -> list[str]:
    return [row["machine_id"]["hostname"] for row in rows]


def test_the_streamed_plan_is_the_plan_in_lines(client: httpx.Client) -> None:
    reply = client.get("/v1/maintenance/plan")
    assert reply.headers["content-type"] == "application/json"
    whole = reply.json()
    lines = _stream(client)
    assert list(lines[0]) == ["plan"]
    assert lines[0]["plan"]["policy"] == whole["policy"]
    end = lines[-1]["end"]
    rows = [line["row"] for line in lines[1:-1]]
    assert _hosts(rows) == _hosts(whole["machines"]) == ORDER
    assert [r["window"] for r in rows] == [r["window"] for r in whole["machines"]]
    assert (end["matched"], end["next"], end["after_window"]) == (5, None, [])
    assert end["totals"]["machines"] == whole["totals"]["machines"] == 5


@pytest.mark.parametrize("jsonl", [False, True])
def test_a_window_or_a_machine_selects_the_rows_and_the_totals(
    client: httpx.Client, jsonl: bool
) -> None:
    cases = [
        ({"window": [str(STARTS[1])]}, ["n0.test", "n2.test", "n4.test"]),
        ({"window": [str(int(STARTS[1]))]}, ["n0.test", "n2.test", "n4.test"]),  # its second
        ({"window": [str(int(STARTS[0]))]}, ["n1.test", "n3.test"]),
        ({"window": [str(STARTS[0]), str(STARTS[1])]}, ORDER),
        ({"machine": ["n1.test", "127.0.0.3"]}, ["n1.test", "n2.test"]),
        ({"window": [str(STARTS[0])], "machine": ["n1.test", "n2.test"]}, ["n1.test"]),
    ]
    for params, hosts in cases:
        if jsonl:
            lines = _stream(client, **params)
            rows, end = [line["row"] for line in lines[1:-1]], lines[-1]["end"]
        else:
            end = client.get("/v1/maintenance/plan", params=params).json()
            rows = end["machines"]
        assert _hosts(rows) == hosts
        assert end["totals"]["machines"] == len(hosts)
        assert end["next"] is None


@pytest.mark.parametrize("jsonl", [False, True])
def test_pages_follow_their_cursors_to_the_last_row(client: httpx.Client, jsonl: bool) -> None:
    hosts: list[str] = []
    after: str | None = ""
    pages = 0
    while after is not None:
        params = {"limit": "2", "after": after}
        if jsonl:
            lines = _stream(client, **params)
            rows, end = [line["row"] for line in lines[1:-1]], lines[-1]["end"]
        else:
            end = client.get("/v1/maintenance/plan", params=params).json()
            rows = end["machines"]
        hosts += _hosts(rows)
        after = end["next"]
        pages += 1
    assert (hosts, pages) == (ORDER, 3)


def _cursor(key: str, start: float) -> str:
    return base64.urlsafe_b64encode(json.dumps([key, start]).encode()).rstrip(b"=").decode()


@pytest.mark.parametrize("jsonl", [False, True])
@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"window": "soon"}, 422, "plan.bad_window"),
        ({"window": str(int(STARTS[1]) + 1)}, 422, "plan.unknown_window"),
        ({"window": str(int(STARTS[1]) + 0.5)}, 422, "plan.unknown_window"),
        ({"machine": ""}, 422, "plan.bad_machine"),
        ({"after": "not a cursor"}, 422, "plan.bad_cursor"),
        ({"after": _cursor("gone.test|", STARTS[0])}, 409, "plan.cursor_stale"),
        ({"format": "xml"}, 422, "request.invalid"),
    ],
)
def test_bad_filters_and_stale_cursors_are_refused_with_their_codes(
    client: httpx.Client, params: dict[str, str], status: int, code: str, jsonl: bool
) -> None:
    query = {"format": "jsonl", **params} if jsonl else params
    reply = client.get("/v1/maintenance/plan", params=query)
    assert reply.status_code == status
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["error"]["code"] == code


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"limit": "-1"}, "query.limit: Input should be greater than or equal to 0"),
        ({"limit": "20 rows"}, "query.limit: Input should be a valid integer"),
        ({"format": "xml"}, "query.format: Input should be 'json' or 'jsonl'"),
    ],
)
def test_a_value_refused_names_its_parameter_and_nothing_of_the_server(
    client: httpx.Client, params: dict[str, str], said: str
) -> None:
    reply = client.get("/v1/maintenance/plan", params=params)
    assert reply.status_code == 422
    error = reply.json()["error"]
    assert error["code"] == "request.invalid"
    assert said in error["message"]
    assert ".py" not in error["message"]  # no file nor line of the master's code
    assert "Traceback" not in error["message"]


@pytest.mark.parametrize(
    ("window", "said"),
    [
        (int(STARTS[1]) * NS, f"reads as nanoseconds; the start in seconds is {int(STARTS[1])}"),
        (int(STARTS[1]) + 1, f"(the windows start at {int(STARTS[0])}, {STARTS[1]!r})"),
    ],
    ids=["nanoseconds", "the second after"],  # the values are the clock's: not in the ids
)
def test_a_window_no_machine_is_scheduled_at_is_said_with_what_was_meant(
    client: httpx.Client, window: int, said: str
) -> None:
    reply = client.get("/v1/maintenance/plan", params={"window": str(window)})
    assert reply.status_code == 422
    error = reply.json()["error"]
    assert error["code"] == "plan.unknown_window"
    assert said in error["message"]


async def test_the_client_iterates_the_streamed_rows_and_pages(master: MasterProcess) -> None:
    async with MasterClient(socket=master.socket) as client:
        async with contextlib.aclosing(client.plan_lines(windows=[STARTS[1]])) as lines:
            got = [line async for line in lines]
        assert list(got[0]) == ["plan"]
        assert _hosts([line["row"] for line in got[1:-1]]) == ["n0.test", "n2.test", "n4.test"]
        assert got[-1]["end"]["totals"]["machines"] == 3
        page = await client.plan(windows=[int(STARTS[1])])  # the second the window starts in
        assert _hosts(page["machines"]) == ["n0.test", "n2.test", "n4.test"]
        page = await client.plan(machines="n1.test,n0.test", limit=1, after="")
        assert _hosts(page["machines"]) == ["n1.test"]
        page = await client.plan(machines=["n1.test", "n0.test"], limit=1, after=page["next"])
        assert (_hosts(page["machines"]), page["next"]) == (["n0.test"], None)
        with pytest.raises(InvalidRequest) as invalid:
            await client.plan(after="nope")
        assert invalid.value.code == "plan.bad_cursor"
        stale_lines = client.plan_lines(after=_cursor("gone.test|", STARTS[0]))
        with pytest.raises(Refused) as stale:
            await stale_lines.__anext__()
        assert (stale.value.status, stale.value.code) == (409, "plan.cursor_stale")
