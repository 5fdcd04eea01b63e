"""The preview of a rolling operation, against a real master and six real agents in three
racks whose hook takes a known time: its ETA against the operation's real duration, a hook
no node has refused before anything starts, and ``maintain start`` asking first."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import wait_for
from tests.integration.test_operations import RACKS, Site

pytestmark = pytest.mark.integration

HOOK_SECONDS = 2.0


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """Agents whose reboot hook takes HOOK_SECONDS and says so."""
    declared = f'expected_duration = "{HOOK_SECONDS:g}s"\n'
    s = Site(tmp_path, RACKS, hook_seconds=HOOK_SECONDS, reboot_extra=declared)
    with contextlib.ExitStack() as stack:
        stack.enter_context(s.master)
        s.start_agents(stack)
        wait_for(lambda: len(s.master.call("GET", "/v1/ads").json()["ads"]) == len(RACKS))
        yield s


def preview(s: Site, body: dict[str, Any]) -> Any:
    return s.master.call("POST", "/v1/maintenance/operations/preview", json=body)


def test_the_preview_says_when_the_operation_will_be_done(site: Site) -> None:
    s = site
    body = {"hosts": list(RACKS), "grouping": "Rack", "hook": "reboot"}
    # An unknown hook is refused, before anything starts, by the preview and the start.
    for path in ("/v1/maintenance/operations/preview", "/v1/maintenance/operations"):
        refused = s.master.call("POST", path, json={**body, "hook": "reboto"})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "operation.unknown_hook"
        assert error["message"].startswith("no hook 'reboto' on 6 of the 6 hosts (n1, n2, ")
    assert s.master.call("GET", "/v1/maintenance/operations").json()["operations"] == []
    assert all(s.commits(name) == [] for name in RACKS)
    # Without a terminal and --yes, maintain start shows the preview and starts nothing.
    asked = s.cli("maintain", "start", "--hosts", ",".join(RACKS), "--grouping", "Rack",
                  "--hook", "reboot")  # fmt: skip
    assert asked.returncode == 6, asked.stderr
    assert asked.stderr.startswith("cli.no_terminal: no operation was started: ")
    assert "3 batches, 1 at once: done in " in asked.stdout
    assert s.master.call("GET", "/v1/maintenance/operations").json()["operations"] == []

    seen = preview(s, body).json()
    assert [b["order"] for b in seen["batches"]] == [1, 2, 3]
    assert sorted(b["name"] for b in seen["batches"]) == ["r1", "r2", "r3"]
    for batch in seen["batches"]:
        assert batch["sla"]["safe"] is True
        for node in batch["nodes"]:
            assert (node["hook_seconds"], node["hook_source"]) == (HOOK_SECONDS, "declared")
            assert node["drain_seconds"] == 0  # nothing runs: empty at once
    assert seen["unknown"] == []
    predicted = seen["seconds"]
    started = s.cli("maintain", "start", "--hosts", ",".join(RACKS), "--grouping", "Rack",
                    "--hook", "reboot", "--yes", "--json")  # fmt: skip
    assert started.returncode == 0, started.stderr
    op_id = json.loads(started.stdout)["id"]
    wait_for(lambda: s.operation(op_id)["ended_at"] is not None, timeout=120, interval=0.2)
    doc = s.operation(op_id)
    assert doc["state"] == "completed", doc
    real = doc["ended_at"] - doc["created_at"]
    error = abs(predicted - real) / real
    assert error <= 0.2, f"predicted {predicted:.1f} s, took {real:.1f} s ({error:.0%} off)"
