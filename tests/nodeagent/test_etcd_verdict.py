"""What the etcd store concludes of a write from ``last-write`` as a failed transaction
read it (:func:`nodeagent._ha._store.verdict`): a write is called not applied only when
it can no longer be."""

from __future__ import annotations

import pytest

from nodeagent._ha._etcd import KeyValue
from nodeagent._ha._store import LAST_WRITE, Verdict, verdict

KNOWN = 40  # the revision of last-write the write (and its seals) were conditioned on


def last(value: bytes, revision: int) -> KeyValue:
    return KeyValue(key=LAST_WRITE, value=value, create_revision=1, mod_revision=revision)


@pytest.mark.parametrize(
    ("seen", "seals", "expected"),
    [
        # The write's own nonce: it was applied, at that revision.
        (last(b"w", 41), (b"s1",), ("landed", 41)),
        # Still at the revision known: the failed transaction's compare on last-write held,
        # so its fence failed, and the write, which needs the fence too, never can land.
        (last(b"before", KNOWN), (), ("not landed", KNOWN)),
        # A seal whose reply was lost won: the write's compare can never hold again.
        (last(b"s1", 41), (b"s1", b"s2"), ("not landed", 41)),
        # Written by someone else since (a successor): whether the write came first is
        # hidden.
        (last(b"other", 45), (b"s1",), ("unknown", 0)),
        # Never written: the first write of a pool, failed on its fence.
        (None, (), ("not landed", 0)),
    ],
)
def test_the_verdict_on_a_write(
    seen: KeyValue | None, seals: tuple[bytes, ...], expected: Verdict
) -> None:
    known = 0 if seen is None else KNOWN
    assert verdict(known=known, nonce=b"w", seals=seals, last=seen) == expected
