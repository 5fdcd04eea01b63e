"""The master's HTTP API: ads, Mesos-compatible maintenance endpoints, the plan.

Mesos endpoints keep Mesos's contract: the same paths and JSON shapes; invalid input
is ``400`` with Mesos's plain-text message and changes nothing; a wrong method is
``405`` ("Expecting one of { 'GET', 'POST' }, but received 'PUT'"). The rest speaks
the agent API's JSON errors. Scopes: READ for queries, status and the plan;
ADMINISTRATOR for schedule, down and up; DAEMON for ad pushes. Every state-changing
request goes to the audit log.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from nodeagent import __version__
from nodeagent._api import error_body
from nodeagent._audit import AuditLog
from nodeagent._auth import (
    AuthError,
    Principal,
    Scope,
    Unauthenticated,
    principal_from_authorization,
    require,
)
from nodeagent._maintenance import (
    MaintenanceError,
    MaintenanceSchedule,
    load_json,
    parse_machine_ids,
    render_json,
)
from nodeagent._master import Master
from nodeagent._master_metrics import MasterMetrics
from slots import SlotsError, render_long

__all__ = ["build_master_app"]

_UNIX = "nodeagent.unix"
_MESOS_METHODS = {
    "/maintenance/schedule": ("GET", "POST"),
    "/maintenance/status": ("GET",),
    "/machine/down": ("POST",),
    "/machine/up": ("POST",),
}


def _mesos_json(value: Any) -> Response:
    return Response(render_json(value), media_type="application/json")


def build_master_app(
    master: Master, *, key: bytes | None, audit: AuditLog | None, metrics: MasterMetrics
) -> FastAPI:
    """The master API bound to ``master``."""
    app = FastAPI(
        title="nodeagent master API",
        version=__version__,
        summary="Node ads, the Mesos-compatible maintenance schedule, the maintenance plan.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )

    def principal(request: Request) -> Principal:
        if request.scope.get(_UNIX):
            return Principal(subject="local", scope=Scope.ADMINISTRATOR, via="unix")
        if key is None:
            raise Unauthenticated("this listener accepts no tokens (no pool key)")
        return principal_from_authorization(
            request.headers.get("authorization"), key, master.clock.now()
        )

    def allowed(request: Request, scope: Scope) -> Principal:
        who = principal(request)
        require(who, scope)
        return who

    def peer(request: Request) -> str:
        if request.scope.get(_UNIX):
            return "unix"
        client = request.client
        return f"{client.host}:{client.port}" if client else "unknown"

    async def record(request: Request, who: Principal, action: str, result: str) -> None:
        if audit is not None:
            await audit.record_async(
                subject=who.subject, peer=peer(request), action=action, result=result
            )

    async def mesos_change(
        request: Request, action: str, apply: Callable[[bytes, str], None]
    ) -> Response:
        who = allowed(request, Scope.ADMINISTRATOR)
        body = await request.body()
        try:
            apply(body, who.subject)
        except MaintenanceError as exc:
            await record(request, who, action, exc.code)
            return PlainTextResponse(exc.message, status_code=400)
        await record(request, who, action, "ok")
        return Response(status_code=200)

    # ------------------------------------------------------------------ errors

    @app.exception_handler(AuthError)
    async def _auth_error(request: Request, exc: AuthError) -> JSONResponse:
        response = JSONResponse(error_body(exc.code, str(exc)), status_code=exc.http_status)
        if isinstance(exc, Unauthenticated):
            response.headers["WWW-Authenticate"] = "Bearer"
        return response

    @app.exception_handler(SlotsError)
    async def _slots_error(request: Request, exc: SlotsError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.http_status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body("request.invalid", str(exc)), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        allowed_methods = _MESOS_METHODS.get(request.url.path)
        if exc.status_code == 405 and allowed_methods is not None:
            listed = ", ".join(f"'{m}'" for m in allowed_methods)
            return PlainTextResponse(
                f"Expecting one of {{ {listed} }}, but received '{request.method}'",
                status_code=405,
                headers={"Allow": ", ".join(allowed_methods)},
            )
        codes = {404: "http.not_found", 405: "http.method_not_allowed"}
        return JSONResponse(
            error_body(codes.get(exc.status_code, "http.error"), str(exc.detail)),
            status_code=exc.status_code,
        )

    @app.middleware("http")
    async def _timing(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        metrics.observe_request(request.method, getattr(route, "path", "unmatched"), started)
        return response

    # ------------------------------------------------------------------ health

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, Any]:
        """Liveness. No auth."""
        return {"status": "ok", "version": __version__}

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    async def prometheus(request: Request) -> Response:
        """Prometheus text: machines per mode, ads received and expired, drains."""
        if metrics.require_auth:
            allowed(request, Scope.READ)
        payload, content_type = metrics.render()
        return Response(payload, media_type=content_type)

    # ------------------------------------------------------------------ ads

    @app.post("/v1/ads", tags=["ads"])
    async def post_ad(request: Request) -> JSONResponse:
        """An agent's ad (DAEMON); the reply carries the machine's mode and window."""
        allowed(request, Scope.DAEMON)
        try:
            ad = await request.json()
        except ValueError:
            return JSONResponse(error_body("request.invalid", "not JSON"), status_code=422)
        if not isinstance(ad, dict):
            return JSONResponse(error_body("request.invalid", "an ad is an object"), 422)
        return JSONResponse(master.receive_ad(ad))

    @app.get("/v1/ads", tags=["ads"])
    async def get_ads(
        request: Request,
        constraint: str | None = None,
        projection: str | None = None,
        format: str = "json",
        slots: bool = False,
    ) -> Response:
        """Machine ads (``slots=true``: slot ads) matching a ClassAd ``constraint``."""
        allowed(request, Scope.READ)
        fields = [p.strip() for p in projection.split(",") if p.strip()] if projection else None
        ads = master.ads.query(
            master.clock.now(), constraint=constraint, projection=fields, slots=slots
        )
        if format == "classad":
            return PlainTextResponse(render_long(ads))
        if format != "json":
            return JSONResponse(
                error_body("request.invalid", "format must be 'json' or 'classad'"), 422
            )
        return JSONResponse({"ads": ads})

    @app.get("/v1/ads/{name}", tags=["ads"])
    async def get_ad(request: Request, name: str, fresh: bool = False) -> JSONResponse:
        """One node's ad; ``fresh=true`` fetches it from the node (its ``MyAddress``) now."""
        allowed(request, Scope.READ)
        entry = master.ads.get(name)
        if entry is None:
            return JSONResponse(error_body("ads.no_such_node", f"no ad for {name!r}"), 404)
        if fresh:
            entry = await master.fetch_ad(entry)
        now = master.clock.now()
        return JSONResponse(
            {
                "machine": master.ads.served(entry, now),
                "slots": entry.slots,
                "age": round(entry.age(now), 3),
            }
        )

    # ------------------------------------------------------------------ Mesos maintenance

    @app.get("/maintenance/schedule", tags=["maintenance"])
    async def get_schedule(request: Request) -> Response:
        """The maintenance schedule (Mesos JSON)."""
        allowed(request, Scope.READ)
        return _mesos_json(master.state.schedule.to_json())

    @app.post("/maintenance/schedule", tags=["maintenance"])
    async def post_schedule(request: Request) -> Response:
        """Replace the schedule (Mesos rules)."""

        def apply(body: bytes, actor: str) -> None:
            schedule = MaintenanceSchedule.from_json(load_json(body, "object"))
            master.set_schedule(schedule, actor=actor)

        return await mesos_change(request, "maintenance.schedule", apply)

    @app.post("/machine/down", tags=["maintenance"])
    async def machine_down(request: Request) -> Response:
        """DRAINING machines go DOWN, all or none (Mesos rules)."""

        def apply(body: bytes, actor: str) -> None:
            master.machines_down(parse_machine_ids(load_json(body, "array")), actor=actor)

        return await mesos_change(request, "machine.down", apply)

    @app.post("/machine/up", tags=["maintenance"])
    async def machine_up(request: Request) -> Response:
        """DOWN machines go UP and leave the schedule, all or none (Mesos rules)."""

        def apply(body: bytes, actor: str) -> None:
            master.machines_up(parse_machine_ids(load_json(body, "array")), actor=actor)

        return await mesos_change(request, "machine.up", apply)

    @app.get("/maintenance/status", tags=["maintenance"])
    async def maintenance_status(request: Request) -> Response:
        """Draining and down machines (Mesos JSON)."""
        allowed(request, Scope.READ)
        return _mesos_json(master.state.status().to_json())

    @app.get("/v1/maintenance/plan", tags=["maintenance"])
    async def plan(request: Request, blockers: bool = True) -> JSONResponse:
        """The cluster maintenance plan: per machine and totals."""
        allowed(request, Scope.READ)
        return JSONResponse(master.plan(with_blockers=blockers))

    return app
