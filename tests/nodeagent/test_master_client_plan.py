""":meth:`nodeagent.client.MasterClient.plan_lines` against scripted masters
(:class:`httpx.MockTransport`): the query it sends, the lines it yields, a plan that fails
midway or ends without its end line, and a master that cannot be reached. Against a real
master: tests/integration/test_plan_stream.py."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import orjson
import pytest

from nodeagent.client import BadResponse, MasterClient

HEAD = {"plan": {"now": 1.0, "policy": {}}}
ROW = {"row": {"machine_id": {"hostname": "a"}}}
END = {"end": {"matched": 1, "totals": {}, "after_window": [], "next": None}}


def _lines(*lines: Any) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


async def _read(body: bytes | None, **kwargs: Any) -> tuple[list[dict[str, Any]], list[str]]:
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.url.host}{request.url.raw_path.decode()}")
        if body is None or request.url.host == "down.test":
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, headers={"Content-Type": "application/x-ndjson"}, content=body)

    found: list[dict[str, Any]] = []
    urls = kwargs.pop("urls", ["http://a.test"])
    transport = httpx.MockTransport(handle)
    async with (
        MasterClient(urls=urls, token="t", transport=transport) as client,
        contextlib.aclosing(client.plan_lines(**kwargs)) as lines,
    ):
        found.extend([line async for line in lines])
    return found, asked


async def test_the_lines_are_yielded_with_the_query_asked() -> None:
    found, asked = await _read(
        _lines(HEAD, ROW, END),
        windows=[1800000000],
        machines="a,b",
        after="",
        limit=2,
        urls=["http://down.test", "http://a.test"],
    )
    assert found == [HEAD, ROW, END]
    query = (
        "/v1/maintenance/plan?late=false&blockers=true&limit=2&window=1800000000.0"
        "&machine=a&machine=b&after=&format=jsonl"
    )
    assert asked == ["down.test" + query, "a.test" + query]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_lines(HEAD, ROW, {"error": {"code": "plan.failed", "message": "boom"}}), "boom"),
        (_lines(HEAD, ROW), "ended before its end line"),
        (_lines(HEAD, {"id": 3}), "not the plan's"),
        (b"not json\n", "not the plan's"),
    ],
)
async def test_a_plan_that_fails_midway_or_is_cut_short_is_a_bad_response(
    body: bytes, message: str
) -> None:
    with pytest.raises(BadResponse, match=message):
        await _read(body)
