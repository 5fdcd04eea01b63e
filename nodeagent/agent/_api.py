"""The agent's HTTP API (v1, JSON), DESIGN §4.

Served twice by the daemon: on the Unix socket, where whoever may open the socket is
ADMINISTRATOR (:func:`trusted`), and on TCP, where a bearer token is required.
Errors are ``{"error": {"code", "message", "condor_code"?}}`` with a stable code.
Every state-changing request is written to the audit log, with its result, before
the reply leaves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

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
from nodeagent._http import _UNIX, auth_error_response, error_body, request_peer
from nodeagent._store import StoreError
from nodeagent.agent._agent import Agent, ClaimRequest
from nodeagent.agent._metrics import AgentMetrics
from nodeagent.agent._processes import ProcessError
from nodeagent.agent._schemas import ClaimBody, DrainBody, claim_json, drain_json
from slots import SlotsError, render_long

__all__ = ["agent_openapi", "build_app"]

log = logging.getLogger("nodeagent.api")


def _error(status: int, code: str, message: str, condor_code: int | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message, condor_code), status_code=status)


def build_app(
    agent: Agent,
    *,
    key: bytes | None,
    audit: AuditLog | None,
    metrics: AgentMetrics,
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

    def principal(request: Request) -> Principal:
        if request.scope.get(_UNIX):
            return Principal(subject="local", scope=AuthScope.ADMINISTRATOR, via="unix")
        if key is None:
            raise Unauthenticated("this listener accepts no tokens (no pool key)")
        return principal_from_authorization(
            request.headers.get("authorization"), key, agent.clock.now()
        )

    def allowed(request: Request, scope: AuthScope) -> Principal:
        who = principal(request)
        require(who, scope)
        return who

    peer = request_peer

    async def audited(
        request: Request,
        action: str,
        operation: Callable[[Principal], Awaitable[tuple[int, dict[str, Any]]]],
        *,
        request_id: str | None = None,
    ) -> JSONResponse:
        who = allowed(request, AuthScope.ADMINISTRATOR)
        try:
            status, body = await operation(who)
        except (SlotsError, ProcessError, StoreError) as exc:
            if audit is not None:
                await audit.record_async(
                    subject=who.subject,
                    peer=peer(request),
                    action=action,
                    result=exc.code,
                    request_id=request_id,
                )
            raise
        if audit is not None:
            rid = request_id or body.get("id")
            await audit.record_async(
                subject=who.subject,
                peer=peer(request),
                action=action,
                result="ok",
                request_id=None if rid is None else str(rid),
            )
        return JSONResponse(body, status_code=status)

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
        log.error("store failure: %s", exc)
        return _error(500, exc.code, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}"
            for e in exc.errors()
        )
        return _error(422, "request.invalid", problems or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {404: "http.not_found", 405: "http.method_not_allowed"}
        return _error(exc.status_code, codes.get(exc.status_code, "http.error"), str(exc.detail))

    @app.middleware("http")
    async def _timing(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics.observe_request(request.method, path, response.status_code, started)
        return response

    # ------------------------------------------------------------------ reads

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, Any]:
        """Liveness: answers as long as the daemon's event loop runs. No auth."""
        return {"status": "ok", "version": __version__}

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    async def prometheus(request: Request) -> Response:
        """Prometheus text format: slots by state, drain state, estimates, totals, latency."""
        if metrics.require_auth:
            allowed(request, AuthScope.READ)
        payload, content_type = metrics.render()
        return Response(payload, media_type=content_type)

    @app.get("/v1/ad", tags=["ads"])
    async def get_ad(request: Request, format: str = "json") -> Response:
        """The machine ad and every slot ad; ``?format=classad`` gives ClassAd long format."""
        allowed(request, AuthScope.READ)
        ad = agent.ad()
        if format == "classad":
            return PlainTextResponse(render_long([ad["machine"], *ad["slots"]]))
        if format != "json":
            return _error(422, "request.invalid", "format must be 'json' or 'classad'")
        return JSONResponse(ad)

    @app.get("/v1/drain", tags=["drain"])
    async def get_drain(request: Request) -> dict[str, Any]:
        """The drain request in force with its live estimate and blockers, or state none."""
        allowed(request, AuthScope.READ)
        drain, estimate = agent.drain_view()
        return drain_json(drain, estimate, current=agent.machine.request is not None)

    @app.get("/v1/claims", tags=["claims"])
    async def list_claims(request: Request) -> dict[str, Any]:
        """Every claim (dynamic slot) and its job."""
        allowed(request, AuthScope.READ)
        return {"claims": [claim_json(c, agent.process(c.claim_id)) for c in agent.claims()]}

    @app.get("/v1/claims/{claim_id}", tags=["claims"])
    async def get_claim(request: Request, claim_id: str) -> dict[str, Any]:
        """One claim and its job."""
        allowed(request, AuthScope.READ)
        return claim_json(agent.claim(claim_id), agent.process(claim_id))

    # ------------------------------------------------------------------ drains

    @app.post("/v1/drain", tags=["drain"], status_code=201)
    async def post_drain(request: Request, body: DrainBody) -> JSONResponse:
        """Phase 1: a pending request with a fresh estimate (201); one-shot with ``commit``."""

        async def operation(who: Principal) -> tuple[int, dict[str, Any]]:
            drain, estimate = agent.start_draining(
                schedule=body.schedule,
                reason=body.reason,
                on_completion=body.on_completion,
                deadline=body.deadline,
                start=body.start,
                check=body.check,
                commit=body.commit,
                ttl=body.ttl,
                requested_by=who.subject,
            )
            return 201, drain_json(drain, estimate, current=True)

        return await audited(request, "drain.start", operation)

    @app.post("/v1/drain/{request_id}/commit", tags=["drain"])
    async def commit_drain(request: Request, request_id: str) -> JSONResponse:
        """Phase 2: commit; the drain starts now. Returns the estimate at commit time."""

        async def operation(who: Principal) -> tuple[int, dict[str, Any]]:
            drain, estimate = agent.commit_draining(request_id)
            return 200, drain_json(drain, estimate, current=True)

        return await audited(request, "drain.commit", operation, request_id=request_id)

    @app.post("/v1/drain/{request_id}/cancel", tags=["drain"])
    async def cancel_drain(request: Request, request_id: str) -> JSONResponse:
        """Cancel a pending or active request."""

        async def operation(who: Principal) -> tuple[int, dict[str, Any]]:
            ended = agent.cancel_draining(request_id)
            return 200, drain_json(ended, None, current=False)

        return await audited(request, "drain.cancel", operation, request_id=request_id)

    @app.delete("/v1/drain", tags=["drain"])
    async def delete_drain(request: Request) -> JSONResponse:
        """Cancel whatever request is in force; a no-op (200) when there is none."""

        async def operation(who: Principal) -> tuple[int, dict[str, Any]]:
            ended = agent.cancel_draining(None)
            return 200, drain_json(ended, None, current=False)

        return await audited(request, "drain.cancel", operation)

    # ------------------------------------------------------------------ claims

    @app.post("/v1/claims", tags=["claims"], status_code=201)
    async def post_claim(request: Request, body: ClaimBody) -> JSONResponse:
        """A new dynamic slot running ``command`` or adopting ``pid`` (201).

        Waits while a drain transaction is pending. ``409 machine.not_accepting`` when
        Start is false; ``409 resources.insufficient`` when the job does not fit.
        """

        async def operation(who: Principal) -> tuple[int, dict[str, Any]]:
            info = await agent.create_claim(
                ClaimRequest(
                    resources=body.resources(),
                    spec=body.spec(default_owner=who.subject),
                    argv=None if body.command is None else tuple(body.command),
                    env=body.env,
                    cwd=body.cwd,
                    user=body.user,
                    pid=body.pid,
                )
            )
            return 201, claim_json(info, agent.process(info.claim_id))

        return await audited(request, "claim.create", operation)

    @app.delete("/v1/claims/{claim_id}", tags=["claims"])
    async def delete_claim(request: Request, claim_id: str) -> JSONResponse:
        """Vacate: soft-kill the job now, hard-kill it after its vacate time."""

        async def operation(who: Principal) -> tuple[int, dict[str, Any]]:
            info = await agent.release(claim_id)
            return 200, claim_json(info, agent.process(claim_id))

        return await audited(request, "claim.release", operation, request_id=claim_id)

    @app.post("/v1/claims/{claim_id}/suspend", tags=["claims"])
    async def suspend_claim(request: Request, claim_id: str) -> JSONResponse:
        """SIGSTOP the job's process group; its run time stops accruing."""

        async def operation(who: Principal) -> tuple[int, dict[str, Any]]:
            info = await agent.suspend(claim_id)
            return 200, claim_json(info, agent.process(claim_id))

        return await audited(request, "claim.suspend", operation, request_id=claim_id)

    @app.post("/v1/claims/{claim_id}/continue", tags=["claims"])
    async def continue_claim(request: Request, claim_id: str) -> JSONResponse:
        """SIGCONT the job's process group."""

        async def operation(who: Principal) -> tuple[int, dict[str, Any]]:
            info = await agent.continue_(claim_id)
            return 200, claim_json(info, agent.process(claim_id))

        return await audited(request, "claim.continue", operation, request_id=claim_id)

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
