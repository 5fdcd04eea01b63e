"""``nodeagent master maintain``: the view's words, why batches wait, how a wait ends."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from nodeagent.cli._errors import CliError, UsageError
from nodeagent.cli._fast import parse
from nodeagent.cli._maintain import _changes, _reason, _verdict, operation_view, start
from nodeagent.master._operations import NodeView, OperationSpec, choose, new_operation, progress

NOW = 1_800_000_000.0


def rendered(doc: dict[str, Any]) -> str:
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(operation_view(doc, now=NOW))
    return out.getvalue()


def document(batches: int = 2) -> dict[str, Any]:
    spec = OperationSpec(
        hosts=("a", "b", "c"), grouping="Rack", hook="reboot", budget=100.0, batches=batches
    )
    op = new_operation("4", spec, {"a": "r1", "b": "r1", "c": "r2"}, actor="ops", now=NOW - 90)
    views = {
        "a": NodeView(completion=NOW, badput=10),
        "b": NodeView(completion=NOW, badput=10),
        "c": NodeView(completion=NOW, badput=500),
    }
    return progress(choose(op, views, NOW - 60))


def test_the_view_shows_batches_nodes_and_why_they_wait() -> None:
    text = rendered(document())
    assert "operation 4  running  hook reboot, graceful, by Rack, 2 at once" in text
    assert "budget 100.0 core-s" in text
    assert "0/2 batches done" in text
    assert "by ops" in text
    lines = [line.split() for line in text.splitlines()]
    assert ["r1", "draining", "a", "draining"] in lines
    assert ["b", "draining"] in lines
    fresh = rendered(progress(new_operation("5", OperationSpec(hosts=("a",), hook="x"), {"a": 1},
                                            actor="ops", now=NOW)))  # fmt: skip
    assert ["a", "waiting", "a", "waiting", "next"] in [ln.split() for ln in fresh.splitlines()]
    assert ["r2", "waiting", "c", "waiting", "badput", "500", "core-s", "over", "the", "budget",
            "100.0"] in lines  # fmt: skip
    one_at_once = [line.split() for line in rendered(document(batches=1)).splitlines()]
    assert ["r2", "waiting", "c", "waiting", "waits", "for", "a", "place", "(1", "at", "once)"] in (
        one_at_once
    )


DECLINE = {
    "host": "n1",
    "notice": "n-1",
    "machine": "n1.test",
    "group": "etl",
    "reason": "month-end run",
    "who": "owner",
    "at": NOW - 120,
    "expected_completion": None,
}


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        (None, ""),
        ({"code": "badput_budget", "badput": 5400.4, "budget": 3600}, "badput 5400 core-s over"),
        ({"code": "node_unheard", "nodes": ["n1", "n2"]}, "not heard from: n1, n2"),
        ({"code": "sla", "groups": ["web/prod"], "until": NOW + 300}, "SLA of web/prod until "),
        (
            {"code": "sla", "groups": ["web"], "until": None, "skipped": True, "held_for": 3600},
            "skipped after 60m: SLA of web, not by waiting: no answer",
        ),
        (
            {"code": "sla", "groups": ["web"], "until": None, "message": "web: 2 of 4 up"},
            "SLA of web, not by waiting: web: 2 of 4 up",
        ),
        (
            {
                "code": "sla",
                "groups": ["web"],
                "until": None,
                "message": "web: 1 of 3",
                "never": True,
                "skipped": True,
                "held_for": 3600,
            },
            "skipped after 60m: SLA of web can never be met by waiting, only by new instances: "
            "web: 1 of 3",
        ),
        (
            {"code": "declined", "declines": [DECLINE], "message": "etl declined on n1.test"},
            "notice declined, until accepted or --sla-wait: etl declined on n1.test: "
            "month-end run (owner, ",
        ),
        (
            {"code": "declined", "declines": [DECLINE], "went_ahead": True, "held_for": 3600},
            "went ahead after 60m despite: etl declined on n1.test: month-end run (owner, ",
        ),
    ],
)
def test_reasons(reason: Any, text: str) -> None:
    assert _reason(reason, NOW).startswith(text)
    if reason and reason.get("until"):
        assert "(in 5m)" in _reason(reason, NOW)


SKIPS = [{"name": "r1", "state": "done"}, {"name": "r2", "state": "skipped"}]


@pytest.mark.parametrize(
    ("doc", "code", "status", "message"),
    [
        ({"state": "completed", "batches": [{"state": "done"}]}, None, 0, ""),
        (
            {"id": "3", "state": "completed_with_skips", "batches": SKIPS},
            "operation.incomplete",
            1,
            "operation 3 ended completed_with_skips: 1 of 2 batches not done (skipped)",
        ),
        (  # saved by an older master, which said completed whatever its batches became
            {"id": "3", "state": "completed", "batches": SKIPS},
            "operation.incomplete",
            1,
            "operation 3 ended completed: 1 of 2 batches not done (skipped)",
        ),
        (
            {"id": "3", "state": "failed", "batches": [{"name": "r1", "state": "failed"}]},
            "operation.failed",
            1,
            "operation 3 failed: batch r1 failed (0/1 batches done)",
        ),
        (
            {"state": "paused", "reason": "paused: n1: hook failed: exit 1", "batches": SKIPS},
            "operation.paused",
            1,
            "paused: n1: hook failed: exit 1 (1/2 batches done)",
        ),
        (
            {"state": "cancelled", "id": "3", "batches": []},
            "operation.cancelled",
            1,
            "operation 3 was cancelled (0/0 batches done)",
        ),
        (
            {"state": "running", "id": "3", "batches": SKIPS[:1]},
            "operation.running",
            10,
            "operation 3 is running: 1/1 batches done",
        ),
    ],
)
def test_how_a_status_ends(
    doc: dict[str, Any], code: str | None, status: int, message: str
) -> None:
    if code is None:
        _verdict(doc)
        return
    with pytest.raises(CliError) as caught:
        _verdict(doc)
    assert (caught.value.code, caught.value.exit_status, caught.value.message) == (
        code,
        status,
        message,
    )


def test_the_lines_of_a_wait_off_a_terminal() -> None:
    seen: dict[str, str] = {}
    doc: dict[str, Any] = {
        "id": "3",
        "state": "running",
        "batches": [
            {"name": "r1", "state": "draining", "nodes": [{"name": "n1", "phase": "draining"}]},
            {
                "name": "r2",
                "state": "waiting",
                "reason": {"code": "node_unheard", "nodes": ["n2"]},
                "nodes": [{"name": "n2", "phase": "waiting"}],
            },
        ],
    }
    first = [line.split(" ", 1)[1] for line in _changes(doc, seen, now=NOW)]
    assert first == [
        "operation 3: running",
        "batch r1: draining",
        "  n1: draining",
        "batch r2: waiting (not heard from: n2)",
        "  n2: waiting",
    ]
    assert _changes(doc, seen, now=NOW + 1) == []  # nothing changed: nothing printed
    doc["batches"][0]["state"] = "hook"
    doc["batches"][0]["nodes"][0] = {"name": "n1", "phase": "hook", "reason": "hook running"}
    assert [line.split(" ", 1)[1] for line in _changes(doc, seen, now=NOW + 2)] == [
        "batch r1: hook",
        "  n1: hook (hook running)",
    ]


def test_hosts_or_constraint() -> None:
    common: dict[str, Any] = {
        "grouping": "host",
        "batches": 1,
        "hook": "reboot",
        "schedule": "graceful",
        "budget": None,
        "sla_wait": "1h",
        "wait": False,
        "yes": True,
        "dry_run": False,
        "json_output": False,
        "host": None,
        "token": None,
        "socket_path": "/nonexistent.sock",
    }
    for hosts, constraint in ((None, None), ("a", "true")):
        with pytest.raises(UsageError):
            start(hosts=hosts, constraint=constraint, **common)
    with pytest.raises(UsageError, match="--budget"):
        start(hosts="a", constraint=None, **{**common, "budget": "lots"})
    with pytest.raises(UsageError) as caught:
        start(hosts="a", constraint=None, **{**common, "sla_wait": "soon"})
    assert caught.value.code == "cli.bad_duration"


def test_plain_command_lines() -> None:
    plain = parse(
        ["master", "maintain", "start", "--hosts", "a,b", "--grouping", "Rack", "--hook",
         "reboot", "--batches", "2", "--budget", "10", "--wait"],
        {},
    )  # fmt: skip
    assert plain is not None
    assert plain.params["hosts"] == "a,b"
    assert plain.params["batches"] == 2
    assert plain.params["schedule"] == "graceful"
    assert plain.params["sla_wait"] == "1h"
    status = parse(["master", "maintain", "status", "--wait"], {})
    assert status is not None
    assert status.params["operation_id"] is None
    assert parse(["master", "maintain", "cancel"], {}) is None  # the ID is required
