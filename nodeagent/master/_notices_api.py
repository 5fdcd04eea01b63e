"""The master's notice endpoints (Mesos's inverse offers and their answers).

* ``GET /v1/notices?group=G&machine=M`` (READ): the notices in force, each with its latest
  answer, sorted by machine and group; ``group`` and ``machine`` (comma-separated, exact)
  keep those of these groups or machines.
* ``POST /v1/notices/{id}/accept`` and ``/decline``: an owner's answer, JSON
  ``{"reason": TEXT, "expected_completion": EPOCH_S}`` (``expected_completion``
  optional). Who may answer: ADMINISTRATOR for any group, a token whose ``groups`` claim
  grants the notice's group (:meth:`~nodeagent._auth.Principal.answers_for`); another:
  403 ``auth.wrong_group``. A notice not in force (unknown, or rescinded): 404
  ``notice.no_such_notice``; a bad body: 422 (``notice.bad_body``, ``notice.bad_reason``,
  ``notice.bad_expected_completion``). The answer is written (with its
  ``notice.answered`` event) before the reply: a store that fails is 503 ``store.error``
  and nothing changes. Every outcome is audited (``notice.accept ID``,
  ``notice.decline ID``), refusals included. Only the leader answers (307 to it).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from nodeagent._auth import AuthError, Principal, Scope, WrongGroup, require
from nodeagent._serving._http import error_body
from nodeagent._store import StoreError, unwritten
from nodeagent.master._leader import NotLeader
from nodeagent.master._master import Master
from nodeagent.master._notices import BadAnswer, Verdict, check_answer

__all__ = ["add_notice_routes"]

_ANSWER_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The answer: why, and when the group expects to be gone (optional)",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["reason"],
                    "additionalProperties": False,
                    "properties": {
                        "reason": {"type": "string", "minLength": 1, "maxLength": 1024},
                        "expected_completion": {"type": ["number", "null"]},
                    },
                }
            }
        },
    }
}


def _items(text: str | None) -> set[str]:
    return {item.strip() for item in (text or "").split(",") if item.strip()}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def add_notice_routes(
    app: FastAPI,
    master: Master,
    *,
    principal: Callable[[Request], Principal],
    leadership: Callable[[], None],
    record: Callable[[Request, str, str, str], Awaitable[None]],
    errors: Callable[..., dict[int | str, dict[str, Any]]],
) -> None:
    """Add the notice endpoints to the master's ``app``; ``leadership()`` raises
    :class:`NotLeader` on a master that does not lead; ``record`` audits a write."""

    @app.get("/v1/notices", tags=["notices"], responses=errors(401, 403))
    async def list_notices(
        request: Request, group: str | None = None, machine: str | None = None
    ) -> JSONResponse:
        """The notices in force, with their latest answers (filtered by group, machine)."""
        require(principal(request), Scope.READ)
        groups, machines = _items(group), _items(machine)
        found = [
            n.to_json()
            for n in sorted(master.notices.values(), key=lambda n: (n.machine, n.group))
            if (not groups or n.group in groups) and (not machines or n.machine in machines)
        ]
        return JSONResponse({"notices": found})

    def answer_route(verdict: Verdict) -> None:
        verb = verdict.value

        @app.post(
            f"/v1/notices/{{notice_id}}/{verb}",
            tags=["notices"],
            responses=errors(307, 401, 403, 404, 413, 422, 503),
            openapi_extra=_ANSWER_BODY,
            name=f"notice_{verb}",
        )
        async def answer(request: Request, notice_id: str) -> JSONResponse:
            action = f"notice.{verb} {notice_id}"
            try:
                who = principal(request)
            except AuthError as exc:
                await record(request, "anonymous", action, exc.code)
                raise
            try:
                leadership()
                notice = master.notices.get(notice_id)
                if notice is not None and not who.answers_for(notice.group):
                    raise WrongGroup(f"{who.subject} may not answer for job group {notice.group!r}")
            except (AuthError, NotLeader) as exc:
                await record(request, who.subject, action, exc.code)
                raise
            if notice is None:
                await record(request, who.subject, action, "notice.no_such_notice")
                message = f"no notice {notice_id!r} in force (unknown, or rescinded)"
                return JSONResponse(error_body("notice.no_such_notice", message), 404)
            try:
                body = json.loads(await request.body(), parse_constant=_no_constant)
                reason, expected = check_answer(body, window=notice.window, now=master.clock.now())
            except BadAnswer as exc:
                await record(request, who.subject, action, exc.code)
                return JSONResponse(error_body(exc.code, str(exc)), 422)
            except (ValueError, RecursionError):
                await record(request, who.subject, action, "notice.bad_body")
                message = "the body is not JSON (UTF-8, no NaN or Infinity)"
                return JSONResponse(error_body("notice.bad_body", message), 422)
            try:
                answered = master.answer_notice(
                    notice_id,
                    verdict,
                    reason=reason,
                    expected_completion=expected,
                    who=who.subject,
                )
            except KeyError:  # rescinded while its body was read
                await record(request, who.subject, action, "notice.no_such_notice")
                message = f"notice {notice_id!r} was rescinded"
                return JSONResponse(error_body("notice.no_such_notice", message), 404)
            except StoreError as exc:
                await record(request, who.subject, action, exc.code)
                return JSONResponse(error_body(exc.code, unwritten(exc)), 503)
            await record(request, who.subject, action, "ok")
            return JSONResponse(answered.to_json())

    for verdict in Verdict:
        answer_route(verdict)
