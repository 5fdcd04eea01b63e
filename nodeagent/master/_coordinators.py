"""Asking the coordinators of job groups whether hosts may go (``coordinator`` SLA policies).

A coordinator is the service's own HTTP endpoint, named by its group's policy (never
anything else: the master calls only the URL of a policy). The master sends::

    POST <url>
    {"group": "www-data/prod/web", "hosts": ["node3", "node4"],
     "instances": [{"node": "node3", "slot": "slot1_2@node3", "up_since": 1700000000.0}]}

and reads a 2xx JSON reply ``{"allow": true|false, "reason": "..."}`` (``reason``
optional), of at most :data:`COORDINATOR_REPLY_LIMIT` bytes. Anything else is a no whose
reason says what happened: the coordinator unreachable, slower than the timeout, an error
status, a reply too large (it is not read past the cap), a reply that is not that object.
Each question is bounded by ``within`` seconds (connecting and the whole exchange); the questions
of one check are asked at once, so a check takes at most ``within`` whatever their number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from nodeagent._peer import PeerCallFailed, PeerClient
from nodeagent.master._sla import Answer, Question

__all__ = ["COORDINATOR_REPLY_LIMIT", "ask_coordinators", "coordinator_client", "question_json"]

#: The largest reply read from a coordinator (64 KiB): its answer is a yes or a no and a
#: short reason (of which 200 characters are kept).
COORDINATOR_REPLY_LIMIT = 64 << 10


def coordinator_client(timeout: float) -> PeerClient:
    """The client the master asks coordinators with (peer role ``coordinator``)."""
    return PeerClient(
        "coordinator", timeout=timeout, max_in_flight=4, max_reply=COORDINATOR_REPLY_LIMIT
    )


def question_json(question: Question) -> dict[str, Any]:
    """What a coordinator is sent."""
    return {
        "group": question.group,
        "hosts": list(question.hosts),
        "instances": [
            {"node": i.node, "slot": i.slot, "up_since": round(i.up_since, 3)}
            for i in question.instances
        ],
    }


def _answer(reply: object) -> Answer:
    if not isinstance(reply, dict) or not isinstance(reply.get("allow"), bool):
        return Answer(allow=False, reason='the reply is not {"allow": true|false, ...}')
    reason = reply.get("reason")
    text = reason[:200] if isinstance(reason, str) and reason.isprintable() else ""
    return Answer(allow=reply["allow"], reason=text or ("yes" if reply["allow"] else "no"))


async def _ask(question: Question, client: PeerClient, within: float) -> Answer:
    with trio.move_on_after(within):
        try:
            reply = await client.request("POST", question.url, json=question_json(question))
        except PeerCallFailed as exc:
            return Answer(allow=False, reason=f"{exc.code}: {exc.message}"[:300])
        return _answer(reply)
    return Answer(allow=False, reason=f"coordinator.timeout: no answer within {within:g} s")


async def ask_coordinators(
    questions: Sequence[Question], *, client: PeerClient, within: float
) -> dict[str, Answer]:
    """Every question's answer, by group; all asked at once, each within ``within``
    seconds (the client's own timeout bounds each read and write too). Never raises for a
    coordinator's failure: that is a no with its reason."""
    answers: dict[str, Answer] = {}

    async def one(question: Question) -> None:
        answers[question.group] = await _ask(question, client, within)

    async with trio.open_nursery() as nursery:
        for question in questions:
            nursery.start_soon(one, question)
    return answers
