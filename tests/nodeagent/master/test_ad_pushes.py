"""The master's verified tokens (:class:`~nodeagent.master._ad_pushes.Principals`): a remembered
token is answered without its signature checked again, but never past its expiry, nor when
the clock went back past its verification, and a pool's every node keeps its token
remembered."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeagent._auth import Principal, Scope, Unauthenticated, create_token
from nodeagent._store import DocumentStore
from nodeagent.master._ad_pushes import Principals
from nodeagent.master._adstore import AdStore
from nodeagent.master._master import Master

EPOCH = 1_800_000_000.0
KEY = b"k" * 32
OTHER_KEY = b"o" * 32


class StepClock:
    """Wall-clock time that moves only when told."""

    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


class Link:
    async def call(self, *args: object, **kwargs: object) -> dict[str, object]:
        raise AssertionError("no agent is called here")


def bearer(node: str, *, lifetime_s: float = 60, key: bytes = KEY) -> str:
    token = create_token(
        key,
        subject=f"agent@{node}",
        scope=Scope.DAEMON,
        node=node,
        lifetime_s=lifetime_s,
        now=EPOCH,
    )
    return f"Bearer {token}"


@dataclass(frozen=True, kw_only=True)
class Ask:
    """The token of ``node`` asked at ``at`` seconds after it was issued."""

    node: str
    at: float
    key: bytes = KEY


@dataclass(frozen=True, kw_only=True)
class Case:
    asks: tuple[Ask, ...]
    #: Each ask's answer: the node of the principal, or the refusal's message.
    answers: tuple[str, ...]
    #: Signatures checked over the asks (the others answered from those remembered).
    verifications: int
    limit: int = Principals.LIMIT


CASES = {
    "remembered while valid": Case(
        asks=(Ask(node="a", at=0), Ask(node="a", at=30), Ask(node="a", at=59.9)),
        answers=("a", "a", "a"),
        verifications=1,
    ),
    "refused once expired, remembered or not": Case(
        asks=(Ask(node="a", at=0), Ask(node="a", at=60), Ask(node="a", at=61)),
        answers=("a", "token has expired", "token has expired"),
        verifications=3,
    ),
    "the clock back past its verification: checked again, issued in the future": Case(
        asks=(Ask(node="a", at=0), Ask(node="a", at=-61)),
        answers=("a", "token is issued in the future"),
        verifications=2,
    ),
    "the clock back within the skew: checked again, taken": Case(
        asks=(Ask(node="a", at=10), Ask(node="a", at=5)),
        answers=("a", "a"),
        verifications=2,
    ),
    "a token of another key is never taken, however often asked": Case(
        asks=(Ask(node="a", at=0, key=OTHER_KEY), Ask(node="a", at=1, key=OTHER_KEY)),
        answers=("token signature does not match the pool key",) * 2,
        verifications=2,
    ),
    "nodes in turn, as many as the limit: each verified once": Case(
        asks=tuple(Ask(node=n, at=t) for t in (0, 10) for n in "abc"),
        answers=tuple("abc" * 2),
        verifications=3,
        limit=3,
    ),
    "nodes in turn, more than the limit: none found again": Case(
        asks=tuple(Ask(node=n, at=t) for t in (0, 10) for n in "abc"),
        answers=tuple("abc" * 2),
        verifications=6,
        limit=2,
    ),
}


def answer(principals: Principals, authorization: str) -> str:
    try:
        who: Principal = principals(authorization, unix=False)
    except Unauthenticated as exc:
        return str(exc)
    return str(who.node)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_remembered_tokens(tmp_path: Path, case: Case) -> None:
    clock = StepClock(EPOCH)
    master = Master(
        store=DocumentStore(tmp_path / "master.db"),
        link=Link(),
        clock=clock,
        ads=AdStore(lifetime=300),
    )
    try:
        principals = Principals(master.clock.now, KEY, limit=case.limit)
        answers = []
        for ask in case.asks:
            clock.t = EPOCH + ask.at
            answers.append(answer(principals, bearer(ask.node, key=ask.key)))
        assert tuple(answers) == case.answers
        assert principals.verifications == case.verifications
    finally:
        master.store.close()


def test_a_pool_of_100000_nodes_keeps_every_nodes_token_remembered() -> None:
    """Each of 100,000 nodes pushes once a minute with its token, and renews it: twice as
    many tokens as nodes fit (with fewer than its nodes, a pool that goes through its nodes
    in turn finds none remembered: the previous case)."""
    assert Principals.LIMIT >= 2 * 100_000
