"""The Python client follows the masters' redirects to the leader (:class:`MasterClient`).

Real HTTP servers on loopback and on a Unix socket (those of the command line's redirect
tests, :mod:`tests.nodeagent.cli.test_cli_redirect`): a follower answers ``307`` with the
leader's URL, as a master that does not lead does; the leader records what arrives. What
needs a scheme or a clock the servers cannot give (``https://``, ``Retry-After`` waited
out) runs over :class:`httpx.MockTransport`, on virtual time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from nodeagent.client import (
    MAX_REDIRECTS,
    BadResponse,
    InvalidMaintenance,
    InvalidRequest,
    Leadership,
    MasterClient,
    NoLeader,
    OutcomeUnknown,
    RedirectNotFollowed,
    Refused,
    SyncMasterClient,
    Unreachable,
)
from tests.etcd import free_port
from tests.nodeagent.cli.test_cli_redirect import (
    Answer,
    Arrived,
    leader_answer,
    redirect_to,
    serving,
)

BODY = {"windows": [{"machine_ids": [{"hostname": "n1", "ip": "10.0.0.1"}]}]}
IDS = [{"hostname": "n1", "ip": "10.0.0.1"}]


def no_leader(seen: Arrived) -> Answer:
    body = {"error": {"code": "master.no_leader", "message": "no master leads now"}}
    return 503, {"Retry-After": "1"}, json.dumps(body).encode()


# --------------------------------------------------------------------------- redirects


WRITES: list[tuple[str, str, Callable[[MasterClient], Any], Any]] = [
    ("POST", "/maintenance/schedule", lambda m: m.set_schedule(BODY), BODY),
    ("POST", "/machine/up", lambda m: m.up(IDS), IDS),
    ("PUT", "/v1/sla/policies/www/prod", lambda m: m.set_sla_policy("www/prod", {"kind": "x"}),
     {"kind": "x"}),
    ("DELETE", "/v1/sla/policies/www", lambda m: m.delete_sla_policy("www"), None),
    ("POST", "/v1/maintenance/operations/7/pause", lambda m: m.pause_operation("7"), None),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "write", "body"), WRITES)
@pytest.mark.parametrize("status", [307, 308])
async def test_a_write_to_a_follower_reaches_the_leader(
    method: str, path: str, write: Callable[[MasterClient], Any], body: Any, status: int
) -> None:
    with serving(leader_answer) as leader, serving(redirect_to(lambda: leader.url, status)) as f:
        async with MasterClient(urls=[f.url, leader.url], token="tok") as master:
            await write(master)
    [first] = f.arrived
    [arrived] = leader.arrived
    assert arrived == first  # the same method, path, body and headers
    assert (arrived.method, arrived.path) == (method, path)
    assert (None if not arrived.body else json.loads(arrived.body)) == body
    assert arrived.authorization == "Bearer tok"
    if body is not None:
        assert arrived.content_type == "application/json"


async def test_the_query_goes_along() -> None:
    with serving(leader_answer) as leader, serving(redirect_to(lambda: leader.url)) as f:
        async with MasterClient(urls=[f.url, leader.url], token="tok") as master:
            # a read a master would answer itself; the rule is the same for every method
            await master.plan(late=True, limit=5, blockers=False)
    assert f.arrived[0].path == leader.arrived[0].path
    assert leader.arrived[0].path == "/v1/maintenance/plan?late=true&blockers=false&limit=5"


async def test_three_redirects_in_a_row_are_followed_and_a_fourth_is_not() -> None:
    with (
        serving(leader_answer) as leader,
        serving(redirect_to(lambda: leader.url)) as f3,
        serving(redirect_to(lambda: f3.url)) as f2,
        serving(redirect_to(lambda: f2.url)) as f1,
        serving(redirect_to(lambda: f1.url)) as f0,
    ):
        assert MAX_REDIRECTS == 3
        pool = [leader.url, f3.url, f2.url, f1.url]
        async with MasterClient(urls=[f1.url, *pool], token="tok") as master:
            await master.down(IDS)
        assert len(leader.arrived) == 1
        async with MasterClient(urls=[f0.url, *pool], token="tok") as master:
            with pytest.raises(RedirectNotFollowed) as looped:
                await master.down(IDS)
        assert len(leader.arrived) == 1  # the fourth redirect is not followed
    error = looped.value
    assert error.code == "client.too_many_redirects"
    assert error.location == leader.url + "/machine/down"
    assert f0.url in error.message
    assert leader.url + "/machine/down" in error.message
    assert "do not agree on who leads" in error.message


async def test_two_followers_pointing_at_each_other_end_in_the_error() -> None:
    urls: dict[str, str] = {}
    with (
        serving(redirect_to(lambda: urls["b"])) as a,
        serving(redirect_to(lambda: urls["a"])) as b,
    ):
        urls.update(a=a.url, b=b.url)
        async with MasterClient(urls=[a.url, b.url], token="tok") as master:
            with pytest.raises(RedirectNotFollowed, match="do not agree on who leads"):
                await master.cancel_operation("7")
        assert len(a.arrived) + len(b.arrived) == MAX_REDIRECTS + 1


async def test_from_the_unix_socket_a_redirect_is_refused(tmp_path: Path) -> None:
    """The socket names no TCP master: a redirect from it goes nowhere, token or not."""
    socket_path = tmp_path / "master.sock"
    with (
        serving(leader_answer) as leader,
        serving(redirect_to(lambda: leader.url), unix=socket_path) as follower,
    ):
        errors = []
        for token in (None, "tok"):
            async with MasterClient(socket=socket_path, token=token) as master:
                with pytest.raises(RedirectNotFollowed) as refused:
                    await master.down(IDS)
            errors.append(refused.value)
        assert leader.arrived == []  # nothing sent there
        assert len(follower.arrived) == 2
    for error in errors:
        assert (error.code, error.location) == (
            "client.redirect_refused",
            leader.url + "/machine/down",
        )
        assert f"the master at unix:{socket_path}" in error.message
        assert "urls=[...]" in error.message
    # The socket needs no token and is sent none.
    assert follower.arrived[-1].authorization is None


async def test_a_redirect_to_a_master_not_given_is_refused_and_gets_no_token() -> None:
    """A lone master (or anything answering at its address) sends the request elsewhere,
    here to another loopback address: nothing is sent there; a master given is followed."""
    with (
        serving(leader_answer, host="127.0.0.2") as elsewhere,
        serving(leader_answer) as given,
        serving(redirect_to(lambda: elsewhere.url)) as master,
    ):
        for urls in ([master.url], [master.url, given.url]):
            async with MasterClient(urls=urls, token="tok") as client:
                with pytest.raises(RedirectNotFollowed) as refused:
                    await client.set_schedule(BODY)
            error = refused.value
            assert (error.code, error.location) == (
                "client.redirect_refused",
                elsewhere.url + "/maintenance/schedule",
            )
            assert "not one of the masters this client was given" in error.message
        assert elsewhere.arrived == []
        assert given.arrived == []
        assert len(master.arrived) == 2
        # Named among the masters, the same address is followed.
        async with MasterClient(urls=[master.url, elsewhere.url], token="tok") as client:
            await client.set_schedule(BODY)
        assert [a.authorization for a in elsewhere.arrived] == ["Bearer tok"]


def test_the_sync_client_refuses_a_master_not_given_too() -> None:
    with (
        serving(leader_answer, host="127.0.0.2") as elsewhere,
        serving(redirect_to(lambda: elsewhere.url)) as master,
    ):
        with pytest.raises(RedirectNotFollowed) as refused:
            SyncMasterClient(url=master.url, token="tok").set_schedule(BODY)
        assert refused.value.code == "client.redirect_refused"
        assert elsewhere.arrived == []
        SyncMasterClient(urls=[master.url, elsewhere.url], token="tok").set_schedule(BODY)
        assert [a.authorization for a in elsewhere.arrived] == ["Bearer tok"]


async def test_a_redirect_to_the_same_origin_is_followed() -> None:
    def answer(seen: Arrived) -> Answer:
        if seen.path.startswith("/v2/"):
            return leader_answer(seen)
        return redirect_to(lambda: master.url + "/v2")(seen)

    with serving(answer) as master:
        async with MasterClient(url=master.url, token="tok") as client:
            await client.down(IDS)
    assert [a.path for a in master.arrived] == ["/machine/down", "/v2/machine/down"]


@pytest.mark.parametrize(
    ("location", "followed"),
    [("https://leader.test", True), ("http://leader.test", False)],
)
async def test_from_https_to_http_the_token_is_not_sent(location: str, followed: bool) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "follower.test":
            return httpx.Response(
                307, headers={"Location": location + request.url.raw_path.decode()}
            )
        return httpx.Response(200)

    transport = httpx.MockTransport(handler)
    urls = ["https://follower.test", "https://leader.test", "http://leader.test"]
    async with MasterClient(urls=urls, token="t", transport=transport) as m:
        if followed:
            await m.set_schedule(BODY)
        else:
            with pytest.raises(RedirectNotFollowed) as refused:
                await m.set_schedule(BODY)
            assert refused.value.code == "client.insecure_redirect"
            assert "without TLS" in refused.value.message
    assert [str(r.url) for r in seen][1:] == (
        [location + "/maintenance/schedule"] if followed else []
    )
    assert all(r.headers["authorization"] == "Bearer t" for r in seen)


@pytest.mark.parametrize("location", [None, "/machine/down", "ftp://127.0.0.1/x", "http://u@h/"])
async def test_a_redirect_without_a_usable_location_is_the_masters_refusal(
    location: str | None,
) -> None:
    def follower(seen: Arrived) -> Answer:
        status, _, body = redirect_to(lambda: "http://127.0.0.1:9")(seen)
        return status, {} if location is None else {"Location": location}, body

    with serving(follower) as master:
        async with MasterClient(url=master.url, token="tok") as client:
            with pytest.raises(Refused) as refused:
                await client.down(IDS)
        assert len(master.arrived) == 1
    assert (refused.value.code, refused.value.status) == ("master.not_leader", 307)


# --------------------------------------------------------------------------- no leader


def flaky(replies: list[httpx.Response]) -> tuple[httpx.MockTransport, list[float]]:
    """A transport answering ``replies`` in turn (then 200), noting when each request came."""
    times: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        times.append(trio.current_time())
        return replies.pop(0) if replies else httpx.Response(200, json={"ok": True})

    return httpx.MockTransport(handler), times


def no_leader_reply(retry_after: str | None = "2") -> httpx.Response:
    body = {"error": {"code": "master.no_leader", "message": "no master leads"}}
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    return httpx.Response(503, json=body, headers=headers)


async def test_no_leader_is_an_error_of_its_own_by_default(autojump_clock: trio.abc.Clock) -> None:
    transport, times = flaky([no_leader_reply("2")])
    async with MasterClient(url="http://m.test", token="t", transport=transport) as master:
        with pytest.raises(NoLeader) as caught:
            await master.set_schedule(BODY)
    assert (caught.value.code, caught.value.status) == ("master.no_leader", 503)
    assert caught.value.retry_after == 2.0
    assert len(times) == 1


async def test_no_leader_is_retried_after_retry_after(autojump_clock: trio.abc.Clock) -> None:
    transport, times = flaky([no_leader_reply("2"), no_leader_reply(None)])
    async with MasterClient(
        url="http://m.test", token="t", transport=transport, retry_no_leader=10
    ) as master:
        start = trio.current_time()
        await master.set_schedule(BODY)
    assert [t - start for t in times] == [0.0, 2.0, 3.0]  # Retry-After 2, then the default 1


async def test_no_leader_retries_stop_at_retry_no_leader(autojump_clock: trio.abc.Clock) -> None:
    transport, times = flaky([no_leader_reply("2") for _ in range(10)])
    async with MasterClient(
        url="http://m.test", token="t", transport=transport, retry_no_leader=5
    ) as master:
        start = trio.current_time()
        with pytest.raises(NoLeader):
            await master.up(IDS)
        assert trio.current_time() - start == 5.0
    assert [t - start for t in times] == [0.0, 2.0, 4.0, 5.0]


async def test_no_leader_from_every_master_names_each_and_is_retried() -> None:
    with serving(no_leader) as a, serving(no_leader) as b:
        async with MasterClient(urls=[a.url, b.url], token="tok") as master:
            with pytest.raises(NoLeader) as caught:
                await master.set_schedule(BODY)
    assert caught.value.message.startswith("no master answered: ")
    assert a.url in caught.value.message
    assert b.url in caught.value.message
    assert (len(a.arrived), len(b.arrived)) == (1, 1)


# --------------------------------------------------------------------------- several masters


async def test_with_several_urls_the_first_that_answers_is_used() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with serving(leader_answer) as leader:
        redirect = redirect_to(lambda: leader.url)

        def reads_itself(seen: Arrived) -> Answer:
            return leader_answer(seen) if seen.method == "GET" else redirect(seen)

        with serving(reads_itself) as follower:
            urls = [dead, follower.url, leader.url]
            async with MasterClient(urls=urls, token="tok") as master:
                assert await master.status() == {"took": "GET"}
                await master.set_schedule(BODY)
    assert [a.method for a in follower.arrived] == ["GET", "POST"]
    assert [(a.method, a.path) for a in leader.arrived] == [("POST", "/maintenance/schedule")]


async def test_every_master_unreachable_names_each() -> None:
    urls = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    async with MasterClient(urls=urls, token="tok") as master:
        with pytest.raises(Unreachable) as caught:
            await master.schedule()
    assert all(url in caught.value.message for url in urls)


def by_host(replies: dict[str, Callable[[], httpx.Response]]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        return replies[request.url.host]()

    return httpx.MockTransport(handler)


def timing_out() -> httpx.Response:
    raise httpx.ReadTimeout("slow")


def refusing(status: int) -> Callable[[], httpx.Response]:
    return lambda: httpx.Response(status, json={"error": {"code": "x.y", "message": "m"}})


@pytest.mark.parametrize(
    ("first", "write_goes_on", "read_goes_on"),
    [
        (timing_out, False, True),  # a write may have been applied: not sent again
        (refusing(503), True, True),  # 503: nothing changed
        (refusing(500), False, True),
        (refusing(422), False, False),  # a refusal is the answer
    ],
)
async def test_when_the_next_master_is_asked(
    first: Callable[[], httpx.Response], write_goes_on: bool, read_goes_on: bool
) -> None:
    ok = lambda: httpx.Response(200, json={"ads": []})  # noqa: E731
    transport = by_host({"a.test": first, "b.test": ok})
    urls = ["http://a.test", "http://b.test"]
    async with MasterClient(urls=urls, token="t", transport=transport) as master:
        for goes_on, call in ((write_goes_on, master.clear_schedule), (read_goes_on, master.ads)):
            if goes_on:
                await call()
            else:
                with pytest.raises((Unreachable, Refused)):
                    await call()


# --------------------------------------------------------------------------- replies


async def test_a_mesos_400_is_invalid_maintenance_with_mesoss_message() -> None:
    message = "Machine 'n1' appears more than once in the schedule"
    transport = httpx.MockTransport(lambda r: httpx.Response(400, text=message))
    async with MasterClient(url="http://m.test", token="t", transport=transport) as master:
        with pytest.raises(InvalidRequest) as caught:
            await master.set_schedule(BODY)
        assert type(caught.value) is InvalidMaintenance
        assert (caught.value.code, caught.value.status) == ("maintenance.invalid", 400)
        assert caught.value.message == message
        # elsewhere a plain-text 400 (a proxy's) is no Mesos message
        with pytest.raises(Refused) as other:
            await master.operations()
        assert (type(other.value), other.value.code) == (Refused, "http.error")


async def test_a_mesos_503_in_plain_text_is_the_store_error() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(503, text="cannot write"))
    async with MasterClient(url="http://m.test", token="t", transport=transport) as master:
        with pytest.raises(Refused) as caught:
            await master.down(IDS)
    assert (caught.value.code, caught.value.status, caught.value.message) == (
        "store.error",
        503,
        "cannot write",
    )


async def test_an_unknown_outcome_is_no_refusal_and_is_not_sent_on() -> None:
    """503 ``store.outcome_unknown`` (a Mesos endpoint's too, in JSON): the write may have
    been applied, so it is neither a :class:`Refused` nor sent to the next master."""
    body = {"error": {"code": "store.outcome_unknown", "message": "may or may not"}}
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.host)
        return httpx.Response(503, json=body)

    urls = ["http://a.test", "http://b.test"]
    transport = httpx.MockTransport(handler)
    async with MasterClient(urls=urls, token="t", transport=transport) as master:
        for call in (lambda: master.set_schedule(BODY), lambda: master.pause_operation("op-1")):
            asked.clear()
            with pytest.raises(OutcomeUnknown) as caught:
                await call()
            assert not isinstance(caught.value, Refused)
            assert (caught.value.code, caught.value.status) == ("store.outcome_unknown", 503)
            assert caught.value.message == "may or may not"
            assert asked == ["a.test"]


LEADER = {
    "leader": "http://m1:9622",
    "self": "http://m2:9622",
    "leading": False,
    "store": "etcd",
    "lease_ttl": 5,
    "leading_for": None,
    "terms": 0,
    "term": 7,
}


async def test_results() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        answers: dict[str, Any] = {
            "/v1/leader": LEADER,
            "/v1/ads": {"ads": [{"Name": "n1"}]},
            "/v1/maintenance/operations": {"operations": [{"id": "1"}]},
            "/v1/maintenance/operations/1": {"id": "1", "state": "running"},
            "/v1/sla/policies": {"policies": [{"group": "g"}]},
        }
        return httpx.Response(200, json=answers[request.url.path])

    async with MasterClient(
        url="http://m2:9622", token="t", transport=httpx.MockTransport(handler)
    ) as master:
        assert await master.leader() == Leadership(
            leader="http://m1:9622",
            url="http://m2:9622",
            leading=False,
            store="etcd",
            lease_ttl=5,
            leading_for=None,
            terms=0,
            term=7,
        )
        assert await master.ads(constraint="Cpus > 1", projection=["Name", "Cpus"]) == [
            {"Name": "n1"}
        ]
        assert await master.operations() == [{"id": "1"}]
        assert (await master.operation("1"))["state"] == "running"
        assert await master.sla_policies() == [{"group": "g"}]


@pytest.mark.parametrize(
    "reply",
    [
        httpx.Response(200, json={**LEADER, "leading": "no"}),
        httpx.Response(200, json={"leader": None}),
        httpx.Response(200, json=[LEADER]),
        httpx.Response(200, text="<html>"),
    ],
)
async def test_a_leader_reply_of_the_wrong_shape_is_a_bad_response(reply: httpx.Response) -> None:
    transport = httpx.MockTransport(lambda r: reply)
    async with MasterClient(url="http://m.test", transport=transport) as master:
        with pytest.raises(BadResponse):
            await master.leader()


def test_the_sync_client_follows_too() -> None:
    seen: list[tuple[str, str, bytes, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(
            (
                request.method,
                str(request.url),
                request.content,
                request.headers.get("authorization"),
            )
        )
        if request.url.host == "follower.test":
            return httpx.Response(307, headers={"Location": "http://leader.test/machine/up"})
        return httpx.Response(200, json={"machines": []})

    master = SyncMasterClient(
        urls=["http://follower.test", "http://leader.test"],
        token="t",
        transport=httpx.MockTransport(handler),
    )
    assert master.up(IDS) == {"machines": []}
    body = json.dumps(IDS, separators=(",", ":")).encode()
    assert seen == [
        ("POST", "http://follower.test/machine/up", body, "Bearer t"),
        ("POST", "http://leader.test/machine/up", body, "Bearer t"),
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"url": "http://a", "urls": ["http://b"]},
        {"socket": "/x.sock", "url": "http://a"},
        {"socket": "/x.sock", "transport": httpx.MockTransport(lambda r: httpx.Response(200))},
        {"url": "ftp://a"},
        {"urls": ["http://a", "unix:/x"]},
        {"url": "http://a", "retry_no_leader": -1},
        {"url": "http://a", "timeout": 0},
    ],
)
def test_contradictory_arguments_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"give|url|seconds"):
        MasterClient(**kwargs)


@pytest.mark.parametrize("group", ["", "a//b", "../x", "a/."])
async def test_a_group_that_is_no_path_is_refused(group: str) -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json={}))
    async with MasterClient(url="http://m.test", transport=transport) as master:
        with pytest.raises(ValueError, match="not a job group's name"):
            await master.delete_sla_policy(group)
