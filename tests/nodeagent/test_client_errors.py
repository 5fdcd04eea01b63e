"""The client without a daemon: error mapping, transaction exits and limits over
``httpx.MockTransport``, the exported names, the default socket path."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from nodeagent import client as client_module
from nodeagent.agent._config import load_agent_config
from nodeagent.client import (
    CANCEL_GRACE_S,
    AgentClient,
    AgentError,
    BadResponse,
    CheckFailed,
    DrainInProgress,
    Forbidden,
    HookRunning,
    InvalidRequest,
    NoSuchClaim,
    NoSuchHook,
    NoSuchRequest,
    NotAccepting,
    NotPending,
    OutcomeUnknown,
    RedirectNotFollowed,
    Refused,
    ResourcesInsufficient,
    TransactionExpired,
    Unauthorized,
    Unreachable,
    default_socket_path,
)

Handler = (
    Callable[[httpx.Request], httpx.Response]
    | Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]
)


def mock_client(handler: Handler, **kwargs: Any) -> AgentClient:
    return AgentClient(transport=httpx.MockTransport(handler), **kwargs)


def error_reply(status: int, code: str, message: str = "no", condor: int | None = None) -> Any:
    error: dict[str, Any] = {"code": code, "message": message}
    if condor is not None:
        error["condor_code"] = condor
    return lambda request: httpx.Response(status, json={"error": error})


def request_json(rid: str = "7", state: str = "pending", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": rid,
        "state": state,
        "schedule": "graceful",
        "reason": "",
        "on_completion": "none",
        "deadline": None,
        "start": None,
        "requested_by": "local",
        "created_at": 100.0,
        "expires_at": 130.0,
        "committed_at": None,
        "deadline_at": None,
        "drained_at": None,
        "ended_at": None,
    }
    body.update(changes)
    return body


ESTIMATE = {"schedule": "graceful", "now": 100, "completion": 100, "badput": 0, "blockers": []}


# --------------------------------------------------------------------------- the module


def isort_order(name: str) -> tuple[int, str]:
    """Constants, then classes, then functions: the order ruff keeps ``__all__`` in."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_names_every_public_member() -> None:
    exported = client_module.__all__
    assert exported == sorted(exported, key=isort_order)
    defined = {
        name
        for name, value in vars(client_module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", client_module.__name__) == client_module.__name__
    }
    assert {"AgentClient", "CANCEL_GRACE_S", "default_socket_path"} <= defined
    assert defined <= set(exported)
    assert all(hasattr(client_module, name) for name in exported)


def test_every_exported_exception_is_an_agent_error() -> None:
    errors = [
        v
        for v in (getattr(client_module, n) for n in client_module.__all__)
        if isinstance(v, type) and issubclass(v, BaseException)
    ]
    assert len(errors) == 21
    assert all(issubclass(e, AgentError) for e in errors)
    assert {e for e in errors if not issubclass(e, Refused)} == {
        AgentError,
        BadResponse,
        OutcomeUnknown,
        RedirectNotFollowed,
        Unreachable,
    }


# --------------------------------------------------------------------------- error replies

REPLIES = [
    (409, "drain.in_progress", 10001, DrainInProgress),
    (404, "drain.no_such_request", 10002, NoSuchRequest),
    (412, "drain.check_failed", 10003, CheckFailed),
    (410, "drain.transaction_expired", None, TransactionExpired),
    (409, "drain.not_pending", None, NotPending),
    (422, "request.invalid", None, InvalidRequest),
    (409, "machine.not_accepting", None, NotAccepting),
    (409, "resources.insufficient", None, ResourcesInsufficient),
    (404, "claim.no_such_claim", None, NoSuchClaim),
    (422, "drain.no_such_hook", None, NoSuchHook),
    (409, "drain.hook_running", None, HookRunning),
    (401, "auth.unauthenticated", None, Unauthorized),
    (403, "auth.forbidden", None, Forbidden),
    # known status, code without a class of its own: a plain Refused, not Forbidden
    (403, "job.permission_refused", None, Refused),
    (409, "drain.transaction_pending", None, Refused),
    (500, "store.error", None, Refused),
    (404, "http.not_found", None, Refused),
]


@pytest.mark.parametrize(("status", "code", "condor", "cls"), REPLIES)
async def test_error_body_maps_by_code(
    status: int, code: str, condor: int | None, cls: type[AgentError]
) -> None:
    async with mock_client(error_reply(status, code, "the reason", condor)) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.drain()
    assert type(caught.value) is cls
    assert (caught.value.code, caught.value.status, caught.value.condor_code) == (
        code,
        status,
        condor,
    )
    assert caught.value.message == "the reason"
    assert str(caught.value) == "the reason"


@pytest.mark.parametrize(
    ("status", "cls", "code"),
    [
        (401, Unauthorized, "auth.unauthenticated"),
        (403, Forbidden, "auth.forbidden"),
        (502, Refused, "http.error"),
        (404, Refused, "http.error"),
    ],
)
async def test_error_without_a_body_maps_by_status(
    status: int, cls: type[AgentError], code: str
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, text="<html>Bad Gateway</html>")

    async with mock_client(handler) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.ad()
    assert type(caught.value) is cls
    assert (caught.value.code, caught.value.status) == (code, status)
    assert "Bad Gateway" in caught.value.message


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"code": 12, "message": "m"}},
        {"error": {"code": "x", "message": "m", "condor_code": "10001"}},
        {"error": "flat"},
        ["not", "an", "object"],
    ],
)
async def test_malformed_error_bodies_still_give_a_refusal(body: Any) -> None:
    async with mock_client(lambda r: httpx.Response(409, json=body)) as agent:
        with pytest.raises(Refused) as caught:
            await agent.ad()
    assert (type(caught.value), caught.value.code, caught.value.status) == (
        Refused,
        "http.error",
        409,
    )


@pytest.mark.parametrize(
    "reply",
    [
        httpx.Response(200, text="not json"),
        httpx.Response(200, json=[1, 2]),
        httpx.Response(200, json={"state": "pending"}),  # a drain body lacking its fields
        httpx.Response(200, json={"state": "none", "last": {"id": "1"}}),
    ],
)
async def test_a_success_reply_of_the_wrong_shape_is_a_bad_response(reply: httpx.Response) -> None:
    async with mock_client(lambda r: reply) as agent:
        with pytest.raises(BadResponse) as caught:
            await agent.drain()
    assert caught.value.code == "client.bad_response"


# --------------------------------------------------------------------------- no reply


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), "client.unreachable"),
        (httpx.RemoteProtocolError("Server disconnected"), "client.unreachable"),
        (httpx.ReadTimeout("timed out"), "client.timeout"),
        (httpx.ConnectTimeout("timed out"), "client.timeout"),
    ],
)
async def test_transport_failures_are_unreachable(failure: httpx.HTTPError, code: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise failure

    async with mock_client(handler, url="http://node1.test:9621", token="t") as agent:
        with pytest.raises(Unreachable) as caught:
            await agent.healthz()
    assert caught.value.code == code
    assert caught.value.status is None
    assert caught.value.__cause__ is failure
    assert "http://node1.test:9621" in caught.value.message


async def test_a_token_is_sent_as_a_bearer_header() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"status": "ok", "version": "1"})

    async with mock_client(handler, url="http://n:1", token="abc") as agent:
        health = await agent.healthz()
    assert (health.status, seen) == ("ok", ["Bearer abc"])


async def test_calls_outside_the_context_manager_are_refused() -> None:
    agent = mock_client(error_reply(500, "x"))
    with pytest.raises(RuntimeError, match="async with"):
        await agent.ad()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"socket": "/s", "url": "http://h:1"},
        {"socket": "/s", "token": "t"},
        {"token": "t", "socket": None},
        {"url": "ftp://h/"},
        {"url": "http://h:1", "timeout": 0},
        {"url": "http://h:1", "max_concurrency": 0},
    ],
)
def test_contradictory_arguments_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"."):
        AgentClient(**kwargs)


async def test_concurrency_is_capped_per_client(autojump_clock: trio.abc.Clock) -> None:
    in_flight = peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await trio.sleep(1)
        in_flight -= 1
        return httpx.Response(200, json={"status": "ok", "version": "1"})

    async with mock_client(handler, max_concurrency=3) as agent:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(9):
                nursery.start_soon(agent.healthz)
    assert peak == 3
    assert trio.current_time() - start == pytest.approx(3)


# --------------------------------------------------------------------------- transactions


class FakeDrains:
    """Answers phase 1, commit, cancel and GET /v1/drain like an agent; records the calls."""

    def __init__(self, *, commit: Handler | None = None, cancel: Handler | None = None) -> None:
        self.calls: list[str] = []
        self.last: dict[str, Any] | None = None
        self._commit = commit
        self._cancel = cancel

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls.append(f"{request.method} {path}")
        if request.method == "POST" and path == "/v1/drain":
            body = json.loads(request.content)
            return httpx.Response(
                201, json={**request_json(reason=body["reason"]), **{"estimate": ESTIMATE}}
            )
        if path.endswith("/commit"):
            if self._commit is not None:
                return await _call(self._commit, request)
            return httpx.Response(
                200,
                json={**request_json(state="draining", committed_at=101.0), "estimate": ESTIMATE},
            )
        if path.endswith("/cancel"):
            if self._cancel is not None:
                return await _call(self._cancel, request)
            self.last = request_json(state="cancelled", ended_at=102.0)
            return httpx.Response(200, json={"state": "none", "last": self.last})
        if request.method == "GET" and path == "/v1/drain":
            return httpx.Response(200, json={"state": "none", "last": self.last})
        return httpx.Response(404, json={"error": {"code": "http.not_found", "message": path}})


async def _call(handler: Handler, request: httpx.Request) -> httpx.Response:
    reply = handler(request)
    return reply if isinstance(reply, httpx.Response) else await reply


async def test_transaction_commit_returns_the_commit_estimate_and_does_not_cancel() -> None:
    fake = FakeDrains()
    async with mock_client(fake) as agent, agent.start_draining(reason="r") as txn:
        assert (txn.request_id, txn.request.state, txn.expires_at) == ("7", "pending", 130.0)
        estimate = await txn.commit()
        assert estimate.completion == 100
        assert txn.request.state == "draining"
    assert fake.calls == ["POST /v1/drain", "POST /v1/drain/7/commit"]


async def test_leaving_a_cancelled_scope_still_cancels_the_transaction() -> None:
    fake = FakeDrains()
    async with mock_client(fake) as agent:
        with trio.CancelScope() as scope:
            async with agent.start_draining() as txn:
                scope.cancel()
                await trio.sleep_forever()
    assert scope.cancelled_caught
    assert fake.calls == ["POST /v1/drain", "POST /v1/drain/7/cancel"]
    assert txn.request.state == "cancelled"


async def test_a_hanging_cancel_on_exit_is_bounded(autojump_clock: trio.abc.Clock) -> None:
    async def hang(request: httpx.Request) -> httpx.Response:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with mock_client(FakeDrains(cancel=hang)) as agent:
        start = trio.current_time()
        with pytest.raises(Unreachable) as caught:
            async with agent.start_draining():
                pass
        assert trio.current_time() - start == pytest.approx(CANCEL_GRACE_S)
    assert caught.value.code == "client.timeout"
    assert any("cancels it by itself" in note for note in caught.value.__notes__)


async def test_a_failing_cancel_does_not_hide_the_blocks_exception() -> None:
    fake = FakeDrains(cancel=error_reply(500, "store.error", "disk full"))
    async with mock_client(fake) as agent:
        with pytest.raises(KeyError) as caught:
            async with agent.start_draining():
                raise KeyError("mine")
    assert any("disk full" in note for note in caught.value.__notes__)


async def test_a_cancel_of_a_request_already_gone_is_quiet_on_exit() -> None:
    fake = FakeDrains(cancel=error_reply(404, "drain.no_such_request", "gone", 10002))
    async with mock_client(fake) as agent, agent.start_draining():
        pass
    assert fake.calls[-1] == "POST /v1/drain/7/cancel"


async def test_commit_after_the_expiry_is_transaction_expired() -> None:
    fake = FakeDrains(commit=error_reply(410, "drain.transaction_expired", "expired"))
    async with mock_client(fake) as agent, agent.start_draining() as txn:
        with pytest.raises(TransactionExpired) as caught:
            await txn.commit()
    assert caught.value.status == 410
    assert fake.calls == ["POST /v1/drain", "POST /v1/drain/7/commit"]  # no cancel after


async def test_commit_of_a_request_cancelled_before_its_expiry_is_no_such_request() -> None:
    fake = FakeDrains(commit=error_reply(404, "drain.no_such_request", "gone", 10002))
    async with mock_client(fake) as agent, agent.start_draining() as txn:
        with pytest.raises(NoSuchRequest) as caught:
            await txn.commit()
    assert type(caught.value) is NoSuchRequest
    assert caught.value.condor_code == 10002


# --------------------------------------------------------------------------- default socket

ENVIRONMENTS = [
    ({}, 1000),
    ({"XDG_RUNTIME_DIR": "/run/user/1000"}, 1000),
    ({"XDG_RUNTIME_DIR": "/run/user/0"}, 0),
    ({"RUNTIME_DIRECTORY": "/run/na:/run/other", "XDG_RUNTIME_DIR": "/x"}, 1000),
    ({"RUNTIME_DIRECTORY": "/run/na"}, 0),
    ({"NODEAGENT_RUNTIME_DIR": "/srv/run", "XDG_RUNTIME_DIR": "/x"}, 1000),
    ({"NODEAGENT_SOCKET": "/srv/agent.sock", "NODEAGENT_RUNTIME_DIR": "/srv/run"}, 0),
]


@pytest.mark.parametrize(("env", "uid"), ENVIRONMENTS)
def test_default_socket_is_where_an_unconfigured_agent_listens(
    env: dict[str, str], uid: int, tmp_path: Path
) -> None:
    full_env = {"HOME": str(tmp_path), **env}
    config = load_agent_config(None, full_env, uid=uid, default_path=tmp_path / "absent.toml")
    assert default_socket_path(full_env, uid) == config.socket


def test_importing_the_client_leaves_the_server_stack_out() -> None:
    code = (
        "import sys, nodeagent.client; "
        "print(sorted(m for m in ('pydantic', 'fastapi', 'psutil', 'slots') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
