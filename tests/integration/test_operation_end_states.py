"""How a rolling operation ends, said honestly, against a real master and real agents.

A batch whose SLA can never be met by waiting (fewer instances would be left than it
needs) says so as soon as it is held, and is skipped after ``sla_wait``: the operation ends
``completed_with_skips`` and
``maintain status`` exits 1 (``operation.incomplete``), never ``completed`` with a full
bar. A hook that fails on its node ends a one-batch operation ``failed`` (exit 1,
``operation.failed``). ``--wait`` off a terminal prints a line per change.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import wait_for
from tests.integration.test_operations import Site, _script

pytestmark = pytest.mark.integration


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """Three agents whose configuration also holds a hook ``broken`` that exits 3."""
    broken = _script(tmp_path / "broken.sh", 'echo "disk not found"; exit 3\n')
    more = f"[hooks.broken]\ncommand = {json.dumps([str(broken)])}\n"
    s = Site(tmp_path, {"n1": "r1", "n2": "r2", "n3": "r3"}, agent_extra=more)
    with contextlib.ExitStack() as stack:
        stack.enter_context(s.master)
        s.start_agents(stack)
        wait_for(lambda: len(s.master.call("GET", "/v1/ads").json()["ads"]) == 3)
        yield s


def test_a_skipped_batch_ends_completed_with_skips(site: Site, tmp_path: Path) -> None:
    s = site
    job = _script(tmp_path / "svc.sh", "while :; do sleep 0.05; done\n")
    s.agents["n1"].claim(["/bin/sh", str(job)], group="svc")
    # Two instances of svc must stay up; there is one: n1's batch can never go.
    policy = {"kind": "count", "count": 2, "duration": 0}
    assert s.master.call("PUT", "/v1/sla/policies/svc", json=policy).status_code == 200
    wait_for(
        lambda: any(
            ad.get("JobGroup") == "svc"
            for ad in s.master.call("GET", "/v1/ads?slots=true").json()["ads"]
        )
    )
    body = {"hosts": ["n1", "n2"], "grouping": "host", "hook": "reboot", "sla_wait": 2}
    reply = s.master.call("POST", "/v1/maintenance/operations", json=body)
    assert reply.status_code == 201, reply.text
    op_id = reply.json()["id"]
    waited = s.cli("maintain", "status", op_id, "--wait")
    assert waited.returncode == 1, waited.stdout + waited.stderr
    assert waited.stderr.startswith(
        f"operation.incomplete: operation {op_id} ended completed_with_skips: 1 of 2 batches "
        "not done (skipped)"
    )
    lines = waited.stdout.splitlines()
    assert any(line.endswith(f"operation {op_id}: running") for line in lines)
    # Why it waits is said as soon as it is held, before it is skipped.
    held = next(i for i, line in enumerate(lines) if "batch n1: waiting (SLA of svc" in line)
    assert "can never be met by waiting, only by new instances: svc: " in lines[held]
    skipped = next(i for i, line in enumerate(lines) if "batch n1: skipped (skipped after " in line)
    assert held < skipped
    assert any(line.endswith("n2: done") for line in lines)
    assert lines[-1] == (
        f"operation {op_id} completed_with_skips: 1 done, 1 skipped, 0 failed of 2 batches"
    )
    doc = s.operation(op_id)
    assert doc["state"] == "completed_with_skips"
    status = s.cli("maintain", "status", op_id)
    assert status.returncode == 1
    assert f"operation {op_id}  completed_with_skips" in status.stdout
    assert "1/2 batches done, 1 skipped" in status.stdout
    listed = s.cli("maintain", "list")
    assert listed.returncode == 0, listed.stderr
    assert "completed_with_skips" in listed.stdout
    assert json.loads(s.cli("maintain", "list", "--json").stdout)["operations"][0]["id"] == op_id


def test_a_failed_hook_ends_the_operation_failed(site: Site) -> None:
    s = site
    body = {"hosts": ["n3"], "grouping": "host", "hook": "broken"}
    reply = s.master.call("POST", "/v1/maintenance/operations", json=body)
    assert reply.status_code == 201, reply.text
    op_id = reply.json()["id"]
    waited = s.cli("maintain", "status", op_id, "--wait")
    assert waited.returncode == 1, waited.stdout + waited.stderr
    assert waited.stderr.startswith(
        f"operation.failed: operation {op_id} failed: batch n3 failed (0/1 batches done)"
    )
    assert "n3: failed (hook failed: " in waited.stdout
    assert s.operation(op_id)["state"] == "failed"
    status = s.cli("maintain", "status", op_id, "--json")
    assert status.returncode == 1
    assert json.loads(status.stdout)["state"] == "failed"
