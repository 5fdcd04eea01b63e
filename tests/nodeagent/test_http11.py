"""The h11 server: ASGI requests, keep-alive, bounded bodies, malformed input."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio
from starlette.types import Receive, Scope, Send

from nodeagent._serving._http11 import serve_http


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    reply = json.dumps(
        {
            "method": scope["method"],
            "path": scope["path"],
            "query": scope["query_string"].decode(),
            "body": len(body),
            "client": scope["client"][0],
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": reply})


@asynccontextmanager
async def server(max_body: int = 1024 * 1024) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        (url,) = await serve_http(nursery, echo, ["127.0.0.1:0"], max_body=max_body)
        yield url
        nursery.cancel_scope.cancel()


async def test_requests_and_keep_alive() -> None:
    async with server() as url, httpx.AsyncClient(base_url=url) as client:
        for i in range(5):
            reply = await client.post(f"/v1/ads?n={i}", content=b"x" * (1000 * i))
            assert reply.json() == {
                "method": "POST",
                "path": "/v1/ads",
                "query": f"n={i}",
                "body": 1000 * i,
                "client": "127.0.0.1",
            }
        assert (await client.get("/a%20b")).json()["path"] == "/a b"


async def test_a_body_too_large_is_413() -> None:
    async with server(max_body=100) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/", content=b"x" * 101)).status_code == 413
        assert (await client.post("/", content=b"x" * 100)).status_code == 200


async def test_malformed_requests_are_400() -> None:
    async with server() as url:
        host, port = url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
            reply = b""
            with trio.fail_after(5):
                while chunk := await stream.receive_some():
                    reply += chunk
        assert reply.startswith(b"HTTP/1.1 400 ")
