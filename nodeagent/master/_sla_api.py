"""The master's SLA endpoints: the policies of job groups and the probe.

* ``GET /v1/sla/policies`` and ``GET /v1/sla/policies/{group}`` (READ): the policies in
  force, each with its ``source`` (``api`` or ``file``); an unknown group is 404
  ``sla.no_such_policy``.
* ``PUT /v1/sla/policies/{group}`` (ADMINISTRATOR): set the API's policy of ``group``;
  written before the reply (a store that fails: 503 ``store.error``, nothing changes;
  503 ``store.outcome_unknown``: not known whether it was written, read it back);
  bad input: 422 ``sla.invalid_policy``. ``DELETE`` removes it (404 when the API holds
  none for the group; the file's policy, if any, is then in force again). Both audited
  (``sla.policy.put``, ``sla.policy.delete``), refusals included.
* ``GET /v1/sla/probe?hosts=h1,h2`` or ``?constraint=EXPR`` (READ), with ``grouping``
  (``host``, or an ad attribute such as ``Rack``; none: all the hosts as one group): per
  host group, whether taking it down now keeps every affected group's SLA, the groups it
  would break and why, and the wait time to SLA. The constraint is evaluated over the node
  ads by the bounded evaluator of ``/v1/ads`` (422 ``expression.*`` past its budget).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from nodeagent._auth import Principal, Scope, require
from nodeagent._expressions._evaluator import Evaluator
from nodeagent._serving._http import error_body
from nodeagent._store import StoreError, unwritten
from nodeagent.master._master import Master
from nodeagent.master._sla import (
    NodeAds,
    Probe,
    group_hosts,
    instances,
    policy_from_json,
    verdict_json,
)
from nodeagent.master._sla_policies import SlaBook
from slots import ATTRIBUTE_NAME, InvalidRequest

__all__ = ["add_sla_routes", "probe_json"]

_MAX_HOSTS = 10_000

_POLICY_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The group's SLA policy (docs/master-api.md)",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["kind"],
                    "additionalProperties": False,
                    "properties": {
                        "kind": {"enum": ["percentage", "count", "coordinator"]},
                        "percentage": {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
                        "count": {"type": "integer", "minimum": 1},
                        "duration": {"type": "number", "minimum": 0},
                        "url": {"type": "string"},
                        "size": {"type": "integer", "minimum": 1},
                    },
                }
            }
        },
    }
}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _policy_document(body: bytes) -> Any:
    """The JSON of a policy's body; raises ValueError (not UTF-8, not JSON, ``NaN`` or
    ``Infinity``) or RecursionError (nested too deep)."""
    return json.loads(body, parse_constant=_no_constant)


def probe_json(key: str, result: Probe) -> dict[str, Any]:
    """One host group's probe as the API returns it."""
    wait = result.wait
    return {
        "key": key,
        "hosts": list(result.hosts),
        "unknown": list(result.unknown),
        "safe": result.safe,
        "wait": None if wait is None else math.ceil(wait * 1000) / 1000,
        "broken": [g.group for g in result.broken],
        "groups": [verdict_json(g) for g in result.groups],
    }


def add_sla_routes(
    app: FastAPI,
    master: Master,
    book: SlaBook,
    *,
    principal: Callable[[Request], Principal],
    administrator: Callable[[Request, str], Awaitable[Principal]],
    record: Callable[[Request, str, str, str], Awaitable[None]],
    constraints: Evaluator,
    errors: Callable[..., dict[int | str, dict[str, Any]]],
) -> None:
    """Add the SLA endpoints to the master's ``app``; ``administrator`` is the caller of a
    change, refused and audited unless ADMINISTRATOR; ``errors(*statuses)`` makes the
    OpenAPI ``responses`` of their error statuses (the app's own)."""

    def allowed(request: Request, scope: Scope) -> Principal:
        who = principal(request)
        require(who, scope)
        return who

    @app.get("/v1/sla/policies", tags=["sla"], responses=errors(401, 403))
    async def list_policies(request: Request) -> JSONResponse:
        """Every SLA policy in force, by group, with its source (``api`` or ``file``)."""
        allowed(request, Scope.READ)
        found = book.policies()
        return JSONResponse({"policies": [book.policy_json(found[g]) for g in sorted(found)]})

    @app.get("/v1/sla/policies/{group:path}", tags=["sla"], responses=errors(401, 403, 404))
    async def get_policy(request: Request, group: str) -> JSONResponse:
        """One group's SLA policy in force (404 ``sla.no_such_policy``)."""
        allowed(request, Scope.READ)
        policy = book.policies().get(group)
        if policy is None:
            return JSONResponse(error_body("sla.no_such_policy", f"no policy for {group!r}"), 404)
        return JSONResponse(book.policy_json(policy))

    @app.put(
        "/v1/sla/policies/{group:path}",
        tags=["sla"],
        responses=errors(307, 401, 403, 404, 413, 422, 503),  # 404: a group with a line break
        openapi_extra=_POLICY_BODY,
    )
    async def put_policy(request: Request, group: str) -> JSONResponse:
        """Set ``group``'s policy (ADMINISTRATOR): written before the reply."""
        action = "sla.policy.put"
        who = await administrator(request, action)
        try:
            policy = policy_from_json(group, _policy_document(await request.body()))
        except (ValueError, RecursionError):
            await record(request, who.subject, action, "sla.invalid_policy")
            message = "the body is not JSON (UTF-8, no NaN or Infinity, nested at most a little)"
            return JSONResponse(error_body("sla.invalid_policy", message), 422)
        except InvalidRequest as exc:
            await record(request, who.subject, action, "sla.invalid_policy")
            return JSONResponse(error_body("sla.invalid_policy", exc.message), 422)
        try:
            book.put(policy)
        except StoreError as exc:
            await record(request, who.subject, action, exc.code)
            return JSONResponse(error_body(exc.code, unwritten(exc)), 503)
        await record(request, who.subject, action, "ok")
        return JSONResponse(book.policy_json(policy))

    @app.delete(
        "/v1/sla/policies/{group:path}", tags=["sla"], responses=errors(307, 401, 403, 404, 503)
    )
    async def delete_policy(request: Request, group: str) -> JSONResponse:
        """Remove ``group``'s API policy (ADMINISTRATOR); the file's, if any, applies again."""
        action = "sla.policy.delete"
        who = await administrator(request, action)
        try:
            deleted = book.delete(group)
        except StoreError as exc:
            await record(request, who.subject, action, exc.code)
            return JSONResponse(error_body(exc.code, unwritten(exc)), 503)
        if not deleted:
            await record(request, who.subject, action, "sla.no_such_policy")
            message = f"the API holds no policy for {group!r}"
            return JSONResponse(error_body("sla.no_such_policy", message), 404)
        await record(request, who.subject, action, "ok")
        found = book.policies().get(group)
        in_force = None if found is None else book.policy_json(found)
        return JSONResponse({"group": group, "in_force": in_force})

    @app.get("/v1/sla/probe", tags=["sla"], responses=errors(401, 403, 422))
    async def sla_probe(
        request: Request,
        *,
        hosts: str | None = None,
        constraint: str | None = None,
        grouping: str | None = None,
    ) -> JSONResponse:
        """Whether each host group may go now, the groups it would break, the wait time."""
        allowed(request, Scope.READ)
        if (hosts is None) == (constraint is None):
            message = "give exactly one of 'hosts' and 'constraint'"
            return JSONResponse(error_body("request.invalid", message), 422)
        now = master.clock.now()
        entries: list[NodeAds] = [e for e in master.ads.entries() if e.my_type == "Machine"]
        if hosts is not None:
            chosen = sorted({h.strip() for h in hosts.split(",") if h.strip()})
        else:
            assert constraint is not None
            ads = master.ads.query(now, slots=False, my_type="Machine")
            matching = await constraints.select(constraint, ads)
            chosen = sorted(str(ad["Name"]) for ad, m in zip(ads, matching, strict=True) if m)
        if not chosen and hosts is not None:
            return JSONResponse(error_body("request.invalid", "'hosts' names no host"), 422)
        if len(chosen) > _MAX_HOSTS:
            message = f"at most {_MAX_HOSTS} hosts at once"
            return JSONResponse(error_body("request.invalid", message), 422)
        if grouping is not None and grouping != "host" and not ATTRIBUTE_NAME.fullmatch(grouping):
            message = "grouping is 'host' or an attribute name"
            return JSONResponse(error_body("request.invalid", message), 422)
        lost_at = master.ads.lost_at(now)
        # its instances are down: a node lost, or one whose machine shuts down or reboots
        lost = {e.name for e in master.ads.entries() if e.shutting_down or lost_at(e)}
        split = group_hosts(entries, chosen, grouping)
        found = instances(entries)  # once for every host group
        results: list[dict[str, Any]] = [{} for _ in split]

        async def one(index: int, key: str, members: tuple[str, ...]) -> None:
            await trio.lowlevel.checkpoint()  # each probe takes its slice (≈ 3 ms at 2k nodes)
            verdict = await book.check(entries, members, now, lost=lost, found=found)
            results[index] = probe_json(key, verdict)

        async with trio.open_nursery() as nursery:  # coordinators asked at once, bounded
            for index, (key, members) in enumerate(split):
                nursery.start_soon(one, index, key, members)
        return JSONResponse(
            {
                "now": now,
                "grouping": grouping,
                "hosts": chosen,
                "safe": all(r["safe"] for r in results),
                "host_groups": results,
            }
        )
