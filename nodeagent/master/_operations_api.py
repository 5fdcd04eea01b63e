"""The master's endpoints of rolling maintenance operations (``/v1/maintenance/operations``).

``POST /v1/maintenance/operations`` (ADMINISTRATOR) starts one: ``hosts`` (node names) or
a ClassAd ``constraint`` over the node ads (resolved to the matching nodes now), its
``grouping``, ``batches`` at once, ``schedule``, ``hook``, ``budget`` and ``sla_wait``. Bad
input is 422 with a stable code (``request.invalid``, ``operation.*``) and changes nothing;
a state that cannot be written is 503 ``store.error`` and changes nothing (503
``store.outcome_unknown``: etcd could not say whether it was written; read it back). ``GET`` lists
them or shows one (READ); ``POST …/{id}/pause|resume|cancel`` (ADMINISTRATOR) act at once.
Every state-changing request is audited, refusals included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from nodeagent._auth import Principal, Scope, require
from nodeagent._expressions._evaluator import Evaluator
from nodeagent._serving._http import error_body
from nodeagent._store import StoreError, unwritten
from nodeagent.master._operations import (
    MAX_HOST_LENGTH,
    MAX_HOSTS,
    MAX_SLA_WAIT,
    OperationError,
    OperationSpec,
    progress,
)
from nodeagent.master._rolling import Operations
from slots import (
    ATTRIBUTE_NAME,
    HOOK_NAME,
    InvalidRequest,
    SlotsError,
    check_hook_name,
)

__all__ = ["OperationRequest", "add_operation_routes"]


def _hook(name: str) -> str:
    """The agents' own rule for a hook's name (:func:`slots.check_hook_name`)."""
    try:
        return check_hook_name(name)
    except InvalidRequest as exc:
        raise ValueError(exc.message) from None


def _host(name: str) -> str:
    if not name.isprintable() or any(c.isspace() for c in name):
        raise ValueError(f"{name[:80]!r} is not a host name: printable, without spaces")
    return name


_HostName = Annotated[
    str,
    Field(min_length=1, max_length=MAX_HOST_LENGTH, json_schema_extra={"pattern": r"^\S+$"}),
    AfterValidator(_host),
]
_HookName = Annotated[
    str, Field(json_schema_extra={"pattern": f"^{HOOK_NAME.pattern}$"}), AfterValidator(_hook)
]


class OperationRequest(BaseModel):
    """The body of ``POST /v1/maintenance/operations``: strict JSON types (no ``true``
    for a number, no ``2.0`` for a whole one) within the bounds of
    :func:`~nodeagent.master._operations.new_operation`, which checks them again."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    hosts: list[_HostName] | None = Field(default=None, min_length=1, max_length=MAX_HOSTS)
    constraint: str | None = None  # bounded by the evaluator (422 expression.*)
    grouping: str = Field(default="host", pattern=f"^(?:host|{ATTRIBUTE_NAME.pattern})$")
    batches: int = Field(default=1, ge=1, le=MAX_HOSTS)
    schedule: Literal["graceful", "quick", "fast"] = "graceful"
    hook: _HookName
    budget: float | None = Field(default=None, ge=0)
    sla_wait: float = Field(default=3600.0, ge=0, le=MAX_SLA_WAIT)


def _refusal(code: str, message: str, status: int = 422) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status)


def add_operation_routes(
    app: FastAPI,
    operations: Operations,
    *,
    principal: Callable[[Request], Principal],
    administrator: Callable[[Request, str], Awaitable[Principal]],
    record: Callable[[Request, str, str, str], Any],
    constraints: Evaluator,
    errors: Callable[..., dict[int | str, dict[str, Any]]],
) -> None:
    """Add the operations' endpoints to the master's ``app`` (see the module docstring).
    ``administrator`` is the caller of a change, refused and audited unless ADMINISTRATOR;
    ``record`` audits a change (subject, action, result); ``constraints`` evaluates a
    ``constraint`` over the node ads; ``errors`` makes the OpenAPI ``responses`` of
    error statuses (the master API's)."""
    body_schema = {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": OperationRequest.model_json_schema()}},
        }
    }
    master = operations.master

    async def spec_of(request: Request) -> OperationSpec | tuple[str, str, int]:
        """The operation a request's body asks for (its constraint resolved to the node
        names it matches now), or why not: its code, message and status (422)."""
        try:
            body = OperationRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            return ("request.invalid", f"{where}: {first['msg']}", 422)
        if (body.hosts is None) == (body.constraint is None):
            return ("request.invalid", "give either hosts or a constraint", 422)
        hosts = body.hosts
        if body.constraint is not None:
            ads = master.ads.query(master.clock.now())
            try:
                matching = await constraints.select(body.constraint, ads)
            except SlotsError as exc:
                return (exc.code, exc.message, exc.http_status)
            hosts = [str(ad["Name"]) for ad, hit in zip(ads, matching, strict=True) if hit]
        assert hosts is not None
        return OperationSpec(
            hosts=tuple(hosts),
            constraint=body.constraint,
            grouping=body.grouping,
            batches=body.batches,
            schedule=body.schedule,
            hook=body.hook,
            budget=body.budget,
            sla_wait=body.sla_wait,
        )

    @app.post(
        "/v1/maintenance/operations/preview",
        tags=["operations"],
        openapi_extra=body_schema,
        responses=errors(401, 403, 413, 422),
    )
    async def preview_operation(request: Request) -> JSONResponse:
        """What ``POST /v1/maintenance/operations`` with this body would start, and when
        it would be done: its batches in order, each batch's SLA verdict now, each node's
        expected drain, hook and health times, and the ETA. Saves nothing; the same 422s."""
        who = principal(request)
        require(who, Scope.READ)
        spec = await spec_of(request)
        if isinstance(spec, tuple):
            return _refusal(*spec)
        try:
            preview = await operations.preview(spec, actor=who.subject)
        except OperationError as exc:
            return _refusal(exc.code, exc.message)
        return JSONResponse(preview)

    @app.post(
        "/v1/maintenance/operations",
        tags=["operations"],
        status_code=201,
        openapi_extra=body_schema,
        responses=errors(307, 401, 403, 413, 422, 503),
    )
    async def start_operation(request: Request) -> JSONResponse:
        """Start a rolling maintenance operation; its progress document."""
        action = "operation.start"
        who = await administrator(request, action)
        assert isinstance(who, Principal)
        spec = await spec_of(request)
        if isinstance(spec, tuple):
            await record(request, who.subject, action, spec[0])
            return _refusal(*spec)
        try:
            op = operations.create(spec, actor=who.subject)
        except OperationError as exc:
            await record(request, who.subject, action, exc.code)
            return _refusal(exc.code, exc.message)
        except StoreError as exc:
            await record(request, who.subject, action, exc.code)
            return _refusal(exc.code, unwritten(exc), 503)
        await record(request, who.subject, f"{action} {op.id}", "ok")
        return JSONResponse(progress(op), status_code=201)

    @app.get("/v1/maintenance/operations", tags=["operations"], responses=errors(401, 403))
    async def list_operations(request: Request) -> JSONResponse:
        """Every operation's progress document, newest first."""
        require(principal(request), Scope.READ)
        ops = sorted(operations.ops.values(), key=lambda op: op.created_at, reverse=True)
        return JSONResponse({"operations": [progress(op) for op in ops]})

    @app.get(
        "/v1/maintenance/operations/{op_id}", tags=["operations"], responses=errors(401, 403, 404)
    )
    async def get_operation(request: Request, op_id: str) -> JSONResponse:
        """One operation's progress document (404 ``operation.no_such_operation``)."""
        require(principal(request), Scope.READ)
        try:
            return JSONResponse(progress(operations.get(op_id)))
        except OperationError as exc:
            return _refusal(exc.code, exc.message, 404)

    def change(verb: str) -> Callable[..., Any]:
        act: dict[str, Callable[..., Any]] = {
            "pause": operations.pause,
            "resume": operations.resume,
            "cancel": operations.cancel,
        }

        async def endpoint(request: Request, op_id: str) -> JSONResponse:
            action = f"operation.{verb} {op_id}"
            who = await administrator(request, action)
            assert isinstance(who, Principal)
            try:
                op = act[verb](op_id, actor=who.subject)
            except OperationError as exc:
                await record(request, who.subject, action, exc.code)
                status = 404 if exc.code == "operation.no_such_operation" else 409
                return _refusal(exc.code, exc.message, status)
            except StoreError as exc:
                await record(request, who.subject, action, exc.code)
                return _refusal(exc.code, unwritten(exc), 503)
            await record(request, who.subject, action, "ok")
            return JSONResponse(progress(op))

        endpoint.__doc__ = f"{verb.capitalize()} the operation at once (audited)."
        endpoint.__name__ = f"{verb}_operation"
        return endpoint

    for verb in ("pause", "resume", "cancel"):
        app.post(
            f"/v1/maintenance/operations/{{op_id}}/{verb}",
            tags=["operations"],
            responses={
                **errors(307, 401, 403, 404, 503),
                409: {"description": "Not in that state"},
            },
        )(change(verb))
