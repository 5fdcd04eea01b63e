"""A workload owner's decline on a real master with real agents: the schedule's preview
lists it, a rolling operation holds the batch of the declined machine with who declined,
why and when (the API and ``nodeagent master maintain status``), and lets it go once the
notice is accepted. The machine is scheduled a day ahead (announced), so that its owners
get their notice before the operation reaches it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import job_script, wait_for
from tests.integration.test_master import window
from tests.integration.test_operations import site

pytestmark = pytest.mark.integration

GROUP = "batch/dev/etl"


def test_a_declined_machine_holds_its_batch_until_accepted(tmp_path: Path) -> None:
    with site(tmp_path, {"n1": "r1", "n2": "r2"}) as s:
        master = s.master
        argv, _ = job_script(tmp_path, "job")
        s.agents["n2"].claim(argv, group=GROUP, cpus=1)
        # announced a day ahead: the owners get their notice now
        announced = window(["n2"], time.time() + 86_400)
        reply = master.call("POST", "/maintenance/schedule", json=announced)
        assert reply.status_code == 200, reply.text

        def notice() -> dict[str, Any] | None:
            found = master.call("GET", "/v1/notices", params={"group": GROUP}).json()["notices"]
            return found[0] if found else None

        issued = wait_for(notice)
        assert issued["machine"] == "n2"
        declined = master.call(
            "POST",
            f"/v1/notices/{issued['id']}/decline",
            json={"reason": "month-end run", "expected_completion": time.time() + 600},
        )
        assert declined.status_code == 200, declined.text

        # the schedule's preview lists the decline it would meet (the window kept)
        preview = master.call("POST", "/v1/maintenance/schedule/preview", json=announced).json()
        (row,) = preview["machines"]
        (decline,) = row["declines"]
        assert (decline["group"], decline["reason"], decline["reissued"]) == (
            GROUP,
            "month-end run",
            False,
        )
        assert preview["totals"]["declines"] == 1
        assert "schedule.declined" in [w["code"] for w in preview["warnings"]]
        file = tmp_path / "schedule.json"
        file.write_text(json.dumps(announced))
        shown = s.cli("schedule", "set", str(file), "--dry-run")
        assert shown.returncode == 0, shown.stderr
        assert "declined by their owners" in shown.stdout
        said = next(line for line in shown.stdout.splitlines() if f"n2 {GROUP} by " in line)
        assert ": month-end run" in said

        # the operation: n1 goes, n2 is held by the decline
        started = master.call(
            "POST",
            "/v1/maintenance/operations",
            json={"hosts": ["n1", "n2"], "hook": "reboot", "sla_wait": 3600},
        )
        assert started.status_code in (200, 201), started.text
        op_id = str(started.json()["id"])

        def batch(name: str) -> dict[str, Any]:
            return next(b for b in s.operation(op_id)["batches"] if b["name"] == name)

        held = wait_for(lambda: (b := batch("n2"))["reason"] and b)
        assert held["state"] == "waiting"
        assert held["reason"]["code"] == "declined"
        (why,) = held["reason"]["declines"]
        assert (why["machine"], why["group"], why["reason"]) == ("n2", GROUP, "month-end run")
        assert why["who"]
        assert batch("n1")["state"] != "waiting"
        status = s.cli("maintain", "status", op_id)
        assert f"{GROUP} declined on n2: month-end run" in status.stdout, status.stdout

        # accepted: the batch goes on at the next pass
        accepted = master.call(
            "POST", f"/v1/notices/{issued['id']}/accept", json={"reason": "done early"}
        )
        assert accepted.status_code == 200, accepted.text
        gone = wait_for(lambda: (b := batch("n2"))["state"] != "waiting" and b)
        assert gone["started_at"] is not None
        assert gone["reason"] is None
