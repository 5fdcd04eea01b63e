"""A rolling operation's preview (:mod:`nodeagent.master._operation_preview`), as tables
with explicit ``now``: the order of its batches, when each runs and when it ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeagent.master._operation_preview import (
    NodeTimes,
    hook_durations,
    node_times,
    observed_hook_seconds,
    preview_operation,
)
from nodeagent.master._operations import (
    Decline,
    NodeView,
    OperationSpec,
    SlaVerdict,
    new_operation,
)

NOW = 1_000.0
RACKS = {"a": "r1", "b": "r1", "c": "r2", "d": "r3"}


def times(name: str, drain: float | None = 0.0, hook: float | None = 10.0) -> NodeTimes:
    return NodeTimes(name=name, drain=drain, hook=hook, hook_source="declared", health=0.0)


@dataclass(frozen=True)
class Row:
    name: str
    at_once: int
    empties: dict[str, float]  # when each node empties (its estimate), absolute
    hooks: dict[str, float | None]
    verdicts: dict[tuple[str, ...], SlaVerdict] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    spans: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    eta: float | None = None
    skipped: tuple[str, ...] = ()
    unknown: int = 0
    declines: dict[tuple[str, ...], tuple[Decline, ...]] = field(default_factory=dict)


STEP = 1.0
SLA_WAIT = 3600.0
DECLINE = Decline(
    host="c", notice="n-1", machine="c.test", group="etl", reason="month-end", who="o", at=NOW
)
ROWS = [
    Row("one at a time, soonest empty first",
        1, {"a": NOW + 5, "b": NOW, "c": NOW, "d": NOW + 20}, {},
        order=("r2", "r1", "r3"),
        spans={"r2": (NOW, NOW + 11), "r1": (NOW + 11, NOW + 27), "r3": (NOW + 27, NOW + 58)},
        eta=NOW + 58),
    Row("two at once",
        2, {"a": NOW, "b": NOW, "c": NOW, "d": NOW}, {},
        order=("r1", "r2", "r3"),
        spans={"r1": (NOW, NOW + 11), "r2": (NOW, NOW + 11), "r3": (NOW + 11, NOW + 22)},
        eta=NOW + 22),
    Row("an SLA that allows a batch later holds it until then",
        1, {"a": NOW, "b": NOW, "c": NOW, "d": NOW}, {},
        verdicts={("c",): SlaVerdict(safe=False, groups=("web",), until=NOW + 100)},
        order=("r1", "r2", "r3"),
        spans={"r1": (NOW, NOW + 11), "r2": (NOW + 100, NOW + 111), "r3": (NOW + 111, NOW + 122)},
        eta=NOW + 122),
    Row("a batch that can never go by waiting takes no place, and is skipped after sla_wait",
        1, {"a": NOW, "b": NOW, "c": NOW, "d": NOW}, {},
        verdicts={("c",): SlaVerdict(safe=False, groups=("web",), never=True)},
        order=("r1", "r2", "r3"),
        spans={"r1": (NOW, NOW + 11), "r2": None, "r3": (NOW + 11, NOW + 22)},
        eta=NOW + 3600, skipped=("r2",)),
    Row("a hook of unknown length: no ETA, and it says why",
        1, {"a": NOW, "b": NOW, "c": NOW, "d": NOW}, {"c": None},
        order=("r1", "r2", "r3"), eta=None, unknown=1),
    Row("a declined batch is listed with its declines, and counted held sla_wait at most",
        1, {"a": NOW, "b": NOW, "c": NOW, "d": NOW}, {},
        declines={("c",): (DECLINE,)},
        order=("r1", "r2", "r3"),
        spans={"r1": (NOW, NOW + 11), "r2": (NOW + 11 + SLA_WAIT, NOW + 22 + SLA_WAIT),
               "r3": (NOW + 22 + SLA_WAIT, NOW + 33 + SLA_WAIT)},
        eta=NOW + 33 + SLA_WAIT),
    Row("a coordinator's no: no ETA",
        1, {"a": NOW, "b": NOW, "c": NOW, "d": NOW}, {},
        verdicts={("d",): SlaVerdict(safe=False, groups=("svc",))},
        order=("r1", "r2", "r3"), eta=None, unknown=1),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_the_preview_of_an_operation(row: Row) -> None:
    spec = OperationSpec(
        hosts=tuple(RACKS), grouping="Rack", hook="reboot", batches=row.at_once, sla_wait=SLA_WAIT
    )
    op = new_operation("preview", spec, RACKS, actor="admin", now=NOW)
    views = {name: NodeView(completion=when) for name, when in row.empties.items()}
    node = {
        name: times(name, drain=row.empties[name] - NOW, hook=row.hooks.get(name, 10.0))
        for name in RACKS
    }
    preview = preview_operation(
        op, views, node, row.verdicts, NOW, step=STEP, declines=row.declines
    )
    assert tuple(b["name"] for b in preview["batches"]) == row.order
    for batch in preview["batches"]:
        listed = row.declines.get(tuple(batch["hosts"]), ())
        assert batch["declines"] == [d.to_json() for d in listed]
    for batch in preview["batches"]:
        if batch["name"] in row.spans:
            span = row.spans[batch["name"]]
            got = None if batch["starts_at"] is None else (batch["starts_at"], batch["ends_at"])
            assert got == span, batch["name"]
    assert preview["eta"] == row.eta
    assert preview["seconds"] == (None if row.eta is None else row.eta - NOW)
    assert tuple(preview["skipped"]) == row.skipped
    assert len(preview["unknown"]) == row.unknown


@pytest.mark.parametrize(
    ("machine", "hook", "expected"),
    [
        ({}, "reboot", (None, None, 0.0)),
        ({"DrainHookDurations": "patch=600,reboot=90"}, "reboot", (90.0, "declared", 0.0)),
        ({"DrainHookDurations": "patch=600"}, "reboot", (45.0, "observed", 0.0)),
        ({"HealthPassesNeeded": 3, "HealthInterval": 30.0}, "x", (45.0, "observed", 60.0)),
        ({"DrainHookDurations": "garbled"}, "reboot", (45.0, "observed", 0.0)),
    ],
)
def test_a_node_s_times(machine: dict[str, Any], hook: str, expected: tuple[Any, ...]) -> None:
    observed = None if not machine else 45.0
    got = node_times(
        "n",
        machine=machine,
        view=NodeView(completion=NOW + 7),
        hook=hook,
        observed=observed,
        now=NOW,
    )
    assert (got.hook, got.hook_source, got.health) == expected
    assert got.drain == 7.0
    assert node_times("n", machine=None, view=None, hook=hook, observed=None, now=NOW).drain is None


def test_what_the_pool_has_seen_a_hook_take() -> None:
    ran = [
        {"DrainHookName": "reboot", "DrainHookState": "succeeded",
         "DrainHookStartTime": 100, "DrainHookEndTime": 100 + took}
        for took in (30, 90, 60)
    ]  # fmt: skip
    failed = {"DrainHookName": "reboot", "DrainHookState": "failed",
              "DrainHookStartTime": 0, "DrainHookEndTime": 1000}  # fmt: skip
    other = {**ran[0], "DrainHookName": "patch"}
    assert observed_hook_seconds([*ran, failed, other], "reboot") == 60.0
    assert observed_hook_seconds([failed], "reboot") is None
    assert hook_durations({"DrainHookDurations": "a=1.5,b=x,c=600"}) == {"a": 1.5, "c": 600.0}
