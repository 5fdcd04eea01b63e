"""The agent's HTTP API (v1, JSON), DESIGN §4.

Served twice by the daemon: on the Unix socket, where whoever may open the socket is
ADMINISTRATOR (:func:`trusted`), and on TCP, where every path but ``/healthz`` needs a
bearer token. Errors are ``{"error": {"code", "message", "condor_code"?}}`` with a
stable code.

Every request passes the gate (:class:`_Gate`, raw ASGI in front of FastAPI) in this order,
each step refusing before the next one runs:

1. the route is matched (method and path);
2. the caller is authenticated (401) and its scope checked (403), from the headers alone;
3. an unknown path is 404, a known path with another method 405 with ``Allow``;
4. the body is read, at most :data:`BODY_LIMIT` bytes: 413 ``request.too_large`` from
   ``Content-Length`` before reading, or as soon as a chunked body passes the cap;
5. a body must be UTF-8 JSON the parser can hold: 422 ``request.invalid``;
6. the endpoint runs; a state write that fails is 503 ``store.error`` and changes nothing.

Every request to a state-changing endpoint, accepted or refused at any of these steps, is
written to the audit log with its result (``ok`` or the error code) before its reply leaves.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nodeagent import __version__
from nodeagent._audit import AuditLog
from nodeagent._auth import (
    AuthError,
    Principal,
    Unauthenticated,
    principal_from_authorization,
    require,
)
from nodeagent._auth import (
    Scope as AuthScope,
)
from nodeagent._http import (
    _UNIX,
    BodyTooLarge,
    auth_error_response,
    error_body,
    read_body,
    replay_body,
    send_error,
)
from nodeagent._store import StoreError
from nodeagent.agent._agent import Agent, ClaimRequest
from nodeagent.agent._metrics import AgentMetrics
from nodeagent.agent._processes import ProcessError
from nodeagent.agent._schemas import (
    ClaimBody,
    DrainBody,
    ErrorBody,
    claim_json,
    drain_json,
    health_json,
)
from slots import SlotsError, render_long

__all__ = ["BODY_LIMIT", "agent_openapi", "build_app"]

log = logging.getLogger("nodeagent.api")

BODY_LIMIT = 1 << 20
"""Largest request body the agent reads (1 MiB); a claim or a drain needs a few hundred bytes."""

_PRINCIPAL = "nodeagent.principal"
_ANONYMOUS = "anonymous"


def _error(
    status: int,
    code: str,
    message: str,
    condor_code: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, condor_code), status_code=status, headers=headers)


# ---------------------------------------------------------------------------------- the gate


@dataclass(frozen=True, kw_only=True)
class _Rule:
    """Who may call a route: ``scope`` (``None``: anyone, even without a token), only when
    ``when()`` says so if given; ``action`` names a state-changing route in the audit log."""

    scope: AuthScope | None
    action: str | None = None
    when: Callable[[], bool] | None = None

    def required(self) -> AuthScope | None:
        if self.scope is None or (self.when is not None and not self.when()):
            return None
        return self.scope


#: What an unknown path or method needs on TCP: a valid token (only /healthz is anonymous).
_ANY_CALLER = _Rule(scope=AuthScope.READ)


@dataclass(frozen=True, kw_only=True)
class _Match:
    route: BaseRoute | None
    rule: _Rule
    params: dict[str, Any]
    allowed: frozenset[str]  # the methods of the path, when the method did not match


class _Reply:
    """The ``send`` handed to the app: notes the status, and holds the reply when asked."""

    def __init__(self, send: Send, *, hold: bool) -> None:
        self._send = send
        self._hold = hold
        self.held: list[Message] = []
        self.status = 500
        self.sent = False
        self.abandoned = False  # the client went away before its body was read

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        if self._hold:
            self.held.append(message)
        else:
            self.sent = True
            await self._send(message)

    async def release(self) -> None:
        for message in self.held:
            await self._send(message)
        self.sent = bool(self.held)

    def body(self) -> Any:
        raw = b"".join(m.get("body", b"") for m in self.held if m["type"] == "http.response.body")
        try:
            return json.loads(raw)
        except ValueError:
            return None


def _json_problem(body: bytes) -> str | None:
    """Why ``body`` is not a JSON document the API can read, or ``None``."""
    try:
        json.loads(body)
    except RecursionError:
        return "the body is nested too deeply"
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    except ValueError as exc:
        return f"the body is not JSON: {exc}"
    return None


def _result(status: int, body: Any) -> str:
    if status < 400:
        return "ok"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        if isinstance(code, str):
            return code
    return f"http.{status}"


def _audited_id(params: dict[str, Any], status: int, body: Any) -> str | None:
    """The drain request or claim an audited request is about."""
    for name in ("request_id", "claim_id"):
        if name in params:
            return str(params[name])
    if status < 400 and isinstance(body, dict):
        if body.get("id") is not None:
            return str(body["id"])
        last = body.get("last")
        if isinstance(last, dict) and last.get("id") is not None:
            return str(last["id"])
    return None


class _Gate:
    """Raw ASGI in front of the API: authenticate, cap and check the body, audit, time.

    See the module docstring for the order of the checks.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: list[BaseRoute],
        rules: dict[tuple[str, str], _Rule],
        key: bytes | None,
        audit: AuditLog | None,
        metrics: AgentMetrics,
        now: Callable[[], float],
        body_limit: int,
    ) -> None:
        self.app = app
        self.routes = routes
        self.rules = rules
        self.key = key
        self.audit = audit
        self.metrics = metrics
        self.now = now
        self.body_limit = body_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        found = self._match(scope)
        path = getattr(found.route, "path", "unmatched")
        reply = _Reply(send, hold=found.rule.action is not None)
        who: Principal | None = None
        try:
            who = self._authenticate(scope, found)
            required = found.rule.required()
            if who is not None and required is not None:
                require(who, required)
            if found.route is None and not found.allowed:
                await self._refuse(reply, 404, "http.not_found", "no such path")
            elif found.allowed:
                allow = ", ".join(sorted(found.allowed))
                await self._refuse(
                    reply,
                    405,
                    "http.method_not_allowed",
                    f"{scope['method']} is not allowed here (allowed: {allow})",
                    headers=[("Allow", allow)],
                )
            else:
                await self._serve(scope, receive, reply, found, who)
        except AuthError as exc:
            headers = [("WWW-Authenticate", "Bearer")] if isinstance(exc, Unauthenticated) else []
            await self._refuse(reply, exc.http_status, exc.code, str(exc), headers)
        if found.rule.action is not None:
            await self._audit(scope, found, who, reply)
            await reply.release()
        self.metrics.observe_request(scope["method"], path, reply.status, started)

    def _match(self, scope: Scope) -> _Match:
        allowed: set[str] = set()
        for route in self.routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                path = getattr(route, "path", "")
                rule = self.rules.get((scope["method"], path), _ANY_CALLER)
                params = dict(child.get("path_params", {}))
                return _Match(route=route, rule=rule, params=params, allowed=frozenset())
            if match is Match.PARTIAL:
                allowed.update(getattr(route, "methods", None) or ())
        # No route, or (``allowed``) the path exists with other methods only.
        return _Match(route=None, rule=_ANY_CALLER, params={}, allowed=frozenset(allowed))

    def _authenticate(self, scope: Scope, found: _Match) -> Principal | None:
        """The caller, from the headers alone (``None``: an anonymous call the route allows).

        Raises :class:`Unauthenticated` when the route needs a token and it is missing or bad.
        """
        if scope.get(_UNIX):
            return Principal(subject="local", scope=AuthScope.ADMINISTRATOR, via="unix")
        if found.rule.required() is None:
            return None
        if self.key is None:
            raise Unauthenticated("this listener accepts no tokens (no pool key)")
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        return principal_from_authorization(header, self.key, self.now())

    async def _serve(
        self, scope: Scope, receive: Receive, reply: _Reply, found: _Match, who: Principal | None
    ) -> None:
        try:
            body = await read_body(scope, receive, self.body_limit)
        except BodyTooLarge as exc:
            await self._refuse(reply, exc.http_status, exc.code, str(exc))
            return
        if body is None:  # the client went away
            reply.abandoned = True
            return
        if body:
            problem = _json_problem(body)
            if problem is not None:
                await self._refuse(reply, 422, "request.invalid", problem)
                return
        inner = {**scope, _PRINCIPAL: who}
        try:
            await self.app(inner, replay_body(body, receive), reply.send)
        except Exception:
            log.exception("unhandled error in %s %s", scope["method"], scope["path"])
            if reply.sent:
                raise
            reply.held.clear()
            await self._refuse(reply, 500, "internal.error", "internal error; see the agent's log")

    @staticmethod
    async def _refuse(
        reply: _Reply,
        status: int,
        code: str,
        message: str,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        await send_error(reply.send, status, code, message, headers=headers or ())

    async def _audit(
        self, scope: Scope, found: _Match, who: Principal | None, reply: _Reply
    ) -> None:
        if self.audit is None or found.rule.action is None:
            return
        body = reply.body()
        if scope.get(_UNIX):
            peer = "unix"
        else:
            client = scope.get("client")
            peer = f"{client[0]}:{client[1]}" if client else "unknown"
        result = "request.abandoned" if reply.abandoned else _result(reply.status, body)
        try:
            await self.audit.record_async(
                subject=who.subject if who is not None else _ANONYMOUS,
                peer=peer,
                action=found.rule.action,
                result=result,
                request_id=_audited_id(found.params, reply.status, body),
            )
        except (OSError, ValueError) as exc:
            # The reply still goes: the request happened (or was refused) either way.
            log.error("audit record of %s (%s) not written: %s", found.rule.action, result, exc)


# ---------------------------------------------------------------------------------- the app

_DESCRIPTIONS = {
    401: "No, bad or expired token (TCP)",
    403: "The token lacks the scope",
    404: "No such resource",
    409: "Conflicts with the machine's state",
    410: "The transaction expired before its commit",
    412: "The one-shot's check expression is not true",
    413: f"Body over {BODY_LIMIT} bytes",
    422: "Malformed body, bad values or expressions",
    503: "The state could not be written; nothing changed",
}


def _errors(*statuses: int, **specific: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for error statuses; ``specific`` overrides a description by
    status (``s404="..."``)."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted(statuses):
        description = specific.get(f"s{status}", _DESCRIPTIONS[status])
        out[status] = {"model": ErrorBody, "description": description}
    return out


_READ_ERRORS = (401, 403)
_WRITE_ERRORS = (401, 403, 413, 422, 503)


def build_app(
    agent: Agent,
    *,
    key: bytes | None,
    audit: AuditLog | None,
    metrics: AgentMetrics,
    body_limit: int = BODY_LIMIT,
) -> FastAPI:
    """The agent API bound to ``agent``. ``key`` verifies tokens (``None``: TCP refuses all)."""
    app = FastAPI(
        title="nodeagent agent API",
        version=__version__,
        summary="Drain a node: two-phase drain transactions, claims, ads.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    rules: dict[tuple[str, str], _Rule] = {
        ("GET", "/healthz"): _Rule(scope=None),
        ("GET", "/metrics"): _Rule(scope=AuthScope.READ, when=lambda: metrics.require_auth),
        ("GET", "/v1/openapi.json"): _Rule(scope=AuthScope.READ),
    }

    def rule(method: str, path: str, scope: AuthScope, action: str | None = None) -> None:
        rules[(method, path)] = _Rule(scope=scope, action=action)

    def drain_reply(
        drain: Any, estimate: Any, *, current: bool, status_code: int = 200
    ) -> JSONResponse:
        machine = agent.machine
        gated = machine.policy.health is not None
        body = drain_json(
            drain,
            estimate,
            current=current,
            accepting=machine.accepting() if gated else None,
            health=health_json(machine.health, machine.policy.health),
        )
        return JSONResponse(body, status_code=status_code)

    def caller(request: Request) -> Principal:
        who = request.scope.get(_PRINCIPAL)
        assert isinstance(who, Principal), "the gate lets no unauthorized request through"
        return who

    # ------------------------------------------------------------------ errors

    @app.exception_handler(SlotsError)
    async def _slots_error(request: Request, exc: SlotsError) -> JSONResponse:
        return _error(exc.http_status, exc.code, exc.message, exc.condor_code)

    @app.exception_handler(ProcessError)
    async def _process_error(request: Request, exc: ProcessError) -> JSONResponse:
        return _error(exc.http_status, exc.code, str(exc))

    app.add_exception_handler(AuthError, auth_error_response)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError) -> JSONResponse:
        return _error(503, exc.code, f"the state could not be written; nothing changed: {exc}")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}"
            for e in exc.errors()
        )
        return _error(422, "request.invalid", problems or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {
            400: "request.invalid",
            404: "http.not_found",
            405: "http.method_not_allowed",
            413: "request.too_large",
        }
        status = 422 if exc.status_code == 400 else exc.status_code
        return _error(
            status, codes.get(exc.status_code, "http.error"), str(exc.detail), headers=exc.headers
        )

    # ------------------------------------------------------------------ reads

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, Any]:
        """Liveness: answers as long as the daemon's event loop runs. No auth."""
        return {"status": "ok", "version": __version__}

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=PlainTextResponse,
        responses={status: {"description": _DESCRIPTIONS[status]} for status in _READ_ERRORS},
    )
    async def prometheus(request: Request) -> Response:
        """Prometheus text format: slots by state, drain state, estimates, totals, latency.

        Needs READ when ``metrics_require_auth`` is on (the default)."""
        payload, content_type = metrics.render()
        return Response(payload, media_type=content_type)

    rule("GET", "/v1/ad", AuthScope.READ)

    @app.get(
        "/v1/ad",
        tags=["ads"],
        responses={
            200: {
                "description": "JSON, or ClassAd long format with ``?format=classad``",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            **_errors(*_READ_ERRORS, 422),
        },
    )
    async def get_ad(request: Request, format: Literal["json", "classad"] = "json") -> Response:
        """The machine ad and every slot ad; ``?format=classad`` gives ClassAd long format."""
        ad = agent.ad()
        if format == "classad":
            return PlainTextResponse(render_long([ad["machine"], *ad["slots"]]))
        return JSONResponse(ad)

    rule("GET", "/v1/drain", AuthScope.READ)

    @app.get("/v1/drain", tags=["drain"], responses=_errors(*_READ_ERRORS))
    async def get_drain(request: Request) -> JSONResponse:
        """The drain request in force with its live estimate and blockers, or state none;
        with a health check configured, ``accepting`` (Start) and ``health`` (the gate)."""
        drain, estimate = agent.drain_view()
        return drain_reply(drain, estimate, current=agent.machine.request is not None)

    rule("GET", "/v1/claims", AuthScope.READ)

    @app.get("/v1/claims", tags=["claims"], responses=_errors(*_READ_ERRORS))
    async def list_claims(request: Request) -> dict[str, Any]:
        """Every claim (dynamic slot) and its job."""
        return {"claims": [claim_json(c, agent.process(c.claim_id)) for c in agent.claims()]}

    rule("GET", "/v1/claims/{claim_id}", AuthScope.READ)

    @app.get(
        "/v1/claims/{claim_id}",
        tags=["claims"],
        responses=_errors(*_READ_ERRORS, 404, 422, s404="No such claim (claim.no_such_claim)"),
    )
    async def get_claim(request: Request, claim_id: str) -> dict[str, Any]:
        """One claim and its job."""
        return claim_json(agent.claim(claim_id), agent.process(claim_id))

    # ------------------------------------------------------------------ drains

    rule("POST", "/v1/drain", AuthScope.ADMINISTRATOR, "drain.start")

    @app.post(
        "/v1/drain",
        tags=["drain"],
        status_code=201,
        responses=_errors(
            *_WRITE_ERRORS,
            409,
            412,
            s409="A drain request already exists (drain.in_progress, 10001)",
            s412="The one-shot's check is not true (drain.check_failed, 10003)",
            s422="Invalid body (request.invalid), a hook the agent's configuration does not "
            "hold (drain.no_such_hook), or a check costlier than its time budget "
            "(expression.too_costly)",
            s503="The state could not be written (store.error), or no expression worker "
            "could start (expression.unavailable); nothing changed",
        ),
    )
    async def post_drain(request: Request, body: DrainBody) -> JSONResponse:
        """Phase 1: a pending request with a fresh estimate (201); one-shot with ``commit``.

        A one-shot's ``check`` is evaluated off the event loop within a time budget:
        ``422 expression.too_costly`` past it, nothing changed."""
        check_result = await agent.evaluate_check(body.check, commit=body.commit)
        on_completion, hook = body.completion()
        drain, estimate = agent.start_draining(
            schedule=body.schedule,
            reason=body.reason,
            on_completion=on_completion,
            hook=hook,
            deadline=body.deadline,
            start=body.start,
            check=body.check,
            check_result=check_result,
            commit=body.commit,
            ttl=body.ttl,
            requested_by=caller(request).subject,
        )
        return drain_reply(drain, estimate, current=True, status_code=201)

    rule("POST", "/v1/drain/{request_id}/commit", AuthScope.ADMINISTRATOR, "drain.commit")

    @app.post(
        "/v1/drain/{request_id}/commit",
        tags=["drain"],
        responses=_errors(
            *_WRITE_ERRORS,
            404,
            409,
            410,
            s404="No request with that id is in force (drain.no_such_request, 10002)",
            s409="The request is not pending (drain.not_pending)",
            s410="It expired before the commit (drain.transaction_expired)",
        ),
    )
    async def commit_drain(request: Request, request_id: str) -> JSONResponse:
        """Phase 2: commit; the drain starts now. Returns the estimate at commit time."""
        drain, estimate = agent.commit_draining(request_id)
        return drain_reply(drain, estimate, current=True)

    rule("POST", "/v1/drain/{request_id}/cancel", AuthScope.ADMINISTRATOR, "drain.cancel")

    @app.post(
        "/v1/drain/{request_id}/cancel",
        tags=["drain"],
        responses=_errors(
            *_WRITE_ERRORS,
            404,
            409,
            s404="No request with that id is in force (drain.no_such_request, 10002)",
            s409="Its completion hook is running (drain.hook_running)",
        ),
    )
    async def cancel_drain(request: Request, request_id: str) -> JSONResponse:
        """Cancel a pending or active request. A node the drain had emptied stays closed
        until its health check passes (``health.state`` not ``passing``, ``accepting``
        false), when the agent has one."""
        ended = agent.cancel_draining(request_id)
        return drain_reply(ended, None, current=False)

    rule("DELETE", "/v1/drain", AuthScope.ADMINISTRATOR, "drain.cancel")

    @app.delete(
        "/v1/drain",
        tags=["drain"],
        responses=_errors(
            *_WRITE_ERRORS, 409, s409="Its completion hook is running (drain.hook_running)"
        ),
    )
    async def delete_drain(request: Request) -> JSONResponse:
        """Cancel whatever request is in force; a no-op (200) when there is none. As the
        cancel of one request, the node may stay closed until healthy."""
        ended = agent.cancel_draining(None)
        return drain_reply(ended, None, current=False)

    # ------------------------------------------------------------------ claims

    rule("POST", "/v1/claims", AuthScope.ADMINISTRATOR, "claim.create")

    @app.post(
        "/v1/claims",
        tags=["claims"],
        status_code=201,
        responses=_errors(
            *_WRITE_ERRORS,
            404,
            409,
            s403="The token lacks the scope, or running as another user needs root "
            "(job.permission_refused)",
            s404="The pid to adopt does not exist (job.no_such_process)",
            s409="Start is false (machine.not_accepting), the job does not fit "
            "(resources.insufficient), or the pid already runs a claim (job.already_claimed)",
            s422="Invalid body (request.invalid), a command that cannot start "
            "(job.launch_failed), a pid that may not be adopted (job.not_adoptable), or a "
            "drain's start expression costlier than its time budget (expression.too_costly)",
            s503="The state could not be written (store.error), or no expression worker "
            "could start (expression.unavailable); nothing changed",
        ),
    )
    async def post_claim(request: Request, body: ClaimBody) -> JSONResponse:
        """A new dynamic slot running ``command`` or adopting ``pid`` (201).

        Waits while a drain transaction is pending. ``409 machine.not_accepting`` when
        Start is false; ``409 resources.insufficient`` when the job does not fit.
        """
        info = await agent.create_claim(
            ClaimRequest(
                resources=body.resources(),
                spec=body.spec(default_owner=caller(request).subject),
                argv=None if body.command is None else tuple(body.command),
                env=body.env,
                cwd=body.cwd,
                user=body.user,
                pid=body.pid,
            )
        )
        return JSONResponse(claim_json(info, agent.process(info.claim_id)), status_code=201)

    claim_errors = _errors(
        *_WRITE_ERRORS,
        404,
        409,
        s404="No such claim (claim.no_such_claim)",
        s409="The job is in the wrong activity (claim.not_active)",
    )

    rule("DELETE", "/v1/claims/{claim_id}", AuthScope.ADMINISTRATOR, "claim.release")

    @app.delete("/v1/claims/{claim_id}", tags=["claims"], responses=claim_errors)
    async def delete_claim(request: Request, claim_id: str) -> JSONResponse:
        """Vacate: soft-kill the job now, hard-kill it after its vacate time."""
        info = await agent.release(claim_id)
        return JSONResponse(claim_json(info, agent.process(claim_id)))

    rule("POST", "/v1/claims/{claim_id}/suspend", AuthScope.ADMINISTRATOR, "claim.suspend")

    @app.post("/v1/claims/{claim_id}/suspend", tags=["claims"], responses=claim_errors)
    async def suspend_claim(request: Request, claim_id: str) -> JSONResponse:
        """SIGSTOP the job's process group; its run time stops accruing."""
        info = await agent.suspend(claim_id)
        return JSONResponse(claim_json(info, agent.process(claim_id)))

    rule("POST", "/v1/claims/{claim_id}/continue", AuthScope.ADMINISTRATOR, "claim.continue")

    @app.post("/v1/claims/{claim_id}/continue", tags=["claims"], responses=claim_errors)
    async def continue_claim(request: Request, claim_id: str) -> JSONResponse:
        """SIGCONT the job's process group."""
        info = await agent.continue_(claim_id)
        return JSONResponse(claim_json(info, agent.process(claim_id)))

    app.add_middleware(
        _Gate,
        routes=app.router.routes,
        rules=rules,
        key=key,
        audit=audit,
        metrics=metrics,
        now=agent.clock.now,
        body_limit=body_limit,
    )
    return app


def agent_openapi() -> dict[str, Any]:
    """The agent API's OpenAPI document (what ``GET /v1/openapi.json`` serves)."""
    from pathlib import Path  # noqa: PLC0415

    from nodeagent._clock import WallClock  # noqa: PLC0415
    from nodeagent.agent._processes import OsProcessRunner  # noqa: PLC0415
    from nodeagent.agent._store import Store  # noqa: PLC0415
    from slots import Machine, MachinePolicy, Resources  # noqa: PLC0415

    clock = WallClock()
    machine = Machine(host="example", total=Resources(cpus=1), policy=MachinePolicy(), now=0.0)
    agent = Agent(
        machine=machine,
        store=Store(Path(":memory:")),
        runner=OsProcessRunner(),
        clock=clock,
        execute_dir=Path("/nonexistent"),
    )
    app = build_app(agent, key=None, audit=None, metrics=AgentMetrics(agent.ad))
    return app.openapi()


if __name__ == "__main__":
    import json
    import sys

    json.dump(agent_openapi(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
