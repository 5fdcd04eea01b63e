"""The agent's HTTP API (v1, JSON), DESIGN §4.

Served twice by the daemon: on the Unix socket, where whoever may open the socket is
ADMINISTRATOR (:func:`trusted`), and on TCP, where every path but ``/healthz`` needs a
bearer token. Errors are ``{"error": {"code", "message", "condor_code"?}}`` with a
stable code.

Every request passes the gate (:class:`nodeagent._serving._gate.Gate`, raw ASGI in front of FastAPI)
in this order, each step refusing before the next one runs:

1. the route is matched (method and path);
2. the caller is authenticated (401) and its scope checked (403), from the headers alone;
   a token bound to a receiver (``aud``: a daemon minted it to call one node) is accepted
   only when it names this agent (its advertised host name), else 401
   ``auth.wrong_audience``;
3. an unknown path is 404, a known path with another method 405 with ``Allow``;
4. the body is read, at most :data:`BODY_LIMIT` bytes: 413 ``request.too_large`` from
   ``Content-Length`` before reading, or as soon as a chunked body passes the cap;
5. a body must be UTF-8 JSON the parser can hold: 422 ``request.invalid``;
6. the endpoint runs; a state write that fails is 503 ``store.error`` and changes nothing.

A refusal before the body was read is answered at once and closes the connection once the
rest of the body is read and dropped (see :mod:`nodeagent._serving._gate`).

Every request to a state-changing endpoint, accepted or refused at any of these steps, is
written to the audit log with its result (``ok`` or the error code) before its reply leaves.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from nodeagent import __version__
from nodeagent._audit import AuditLog
from nodeagent._auth import (
    AuthError,
    Principal,
    principal_from_authorization,
)
from nodeagent._auth import (
    Scope as AuthScope,
)
from nodeagent._serving._gate import AUDIT_DETAILS, PRINCIPAL, Audited, Gate, Rule
from nodeagent._serving._http import auth_error_response, error_body, validation_message
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


def _error(
    status: int,
    code: str,
    message: str,
    condor_code: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, condor_code), status_code=status, headers=headers)


# ---------------------------------------------------------------------------------- the gate


def _audited_id(params: Mapping[str, Any], status: int, body: Any) -> str | None:
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


def _claim_details(body: ClaimBody) -> dict[str, Any]:
    """A claim's parameters for its audit record: the environment's names, never its
    values (they may hold secrets)."""
    details = body.model_dump(mode="json", exclude_none=True)
    if body.env is not None:
        details["env"] = sorted(body.env)
    return details


def _auditor(audit: AuditLog | None) -> Callable[[Audited], Awaitable[None]] | None:
    """How the gate writes an audited request (accepted or refused) before its reply."""
    if audit is None:
        return None

    async def write(done: Audited) -> None:
        result = done.result()
        try:
            await audit.record_async(
                subject=done.subject,
                peer=done.peer,
                action=done.action,
                result=result,
                request_id=_audited_id(done.params, done.status, done.body),
                details=done.details,
            )
        except (OSError, ValueError) as exc:
            # The reply still goes: the request happened (or was refused) either way.
            log.error("audit record of %s (%s) not written: %s", done.action, result, exc)

    return write


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
    rules: dict[tuple[str, str], Rule] = {
        ("GET", "/healthz"): Rule(scope=None),
        ("GET", "/metrics"): Rule(scope=AuthScope.READ, when=lambda: metrics.require_auth),
        ("GET", "/v1/openapi.json"): Rule(scope=AuthScope.READ),
    }

    def rule(method: str, path: str, scope: AuthScope, action: str | None = None) -> None:
        rules[(method, path)] = Rule(scope=scope, action=action)

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

    def retirement() -> float:
        return float(agent.machine.policy.max_job_retirement_time)

    def caller(request: Request) -> Principal:
        who = request.scope.get(PRINCIPAL)
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
        return _error(422, "request.invalid", validation_message(exc.errors()))

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
        return {
            "claims": [
                claim_json(c, agent.process(c.claim_id), machine_retirement=retirement())
                for c in agent.claims()
            ]
        }

    rule("GET", "/v1/claims/{claim_id}", AuthScope.READ)

    @app.get(
        "/v1/claims/{claim_id}",
        tags=["claims"],
        responses=_errors(*_READ_ERRORS, 404, 422, s404="No such claim (claim.no_such_claim)"),
    )
    async def get_claim(request: Request, claim_id: str) -> dict[str, Any]:
        """One claim and its job."""
        return claim_json(
            agent.claim(claim_id), agent.process(claim_id), machine_retirement=retirement()
        )

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
        request.scope[AUDIT_DETAILS] = body.model_dump(mode="json")
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
        drain, estimate = agent.commit_draining(request_id, by=caller(request).subject)
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
        ended = agent.cancel_draining(request_id, by=caller(request).subject)
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
        ended = agent.cancel_draining(None, by=caller(request).subject)
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
            "(resources.insufficient), its retirement promise would end after the machine's "
            "maintenance window starts (machine.window_ahead), or the pid already runs a "
            "claim (job.already_claimed)",
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
        Start is false; ``409 resources.insufficient`` when the job does not fit;
        ``409 machine.window_ahead`` when its retirement promise would end after the
        machine's maintenance window starts (``[policy] before_window = "refuse"``; with
        ``shorten`` it is admitted and ``job.retirement_shortened_by`` says by how much
        its promise was cut).
        """
        request.scope[AUDIT_DETAILS] = _claim_details(body)
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
        return JSONResponse(
            claim_json(info, agent.process(info.claim_id), machine_retirement=retirement()),
            status_code=201,
        )

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
        return JSONResponse(
            claim_json(info, agent.process(claim_id), machine_retirement=retirement())
        )

    rule("POST", "/v1/claims/{claim_id}/suspend", AuthScope.ADMINISTRATOR, "claim.suspend")

    @app.post("/v1/claims/{claim_id}/suspend", tags=["claims"], responses=claim_errors)
    async def suspend_claim(request: Request, claim_id: str) -> JSONResponse:
        """SIGSTOP the job's process group; its run time stops accruing."""
        info = await agent.suspend(claim_id)
        return JSONResponse(
            claim_json(info, agent.process(claim_id), machine_retirement=retirement())
        )

    rule("POST", "/v1/claims/{claim_id}/continue", AuthScope.ADMINISTRATOR, "claim.continue")

    @app.post("/v1/claims/{claim_id}/continue", tags=["claims"], responses=claim_errors)
    async def continue_claim(request: Request, claim_id: str) -> JSONResponse:
        """SIGCONT the job's process group."""
        info = await agent.continue_(claim_id)
        return JSONResponse(
            claim_json(info, agent.process(claim_id), machine_retirement=retirement())
        )

    def verify(authorization: str | None) -> Principal:
        assert key is not None
        return principal_from_authorization(
            authorization, key, agent.clock.now(), audience=agent.machine.host
        )

    app.add_middleware(
        Gate,
        routes=app.router.routes,
        rules=rules,
        verify=None if key is None else verify,
        body_limit=body_limit,
        audit=_auditor(audit),
        audit_replies=True,
        observe=metrics.observe_request,
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
