"""``nodeagent master down`` says what it will kill, and never calls a node DOWN that has
not confirmed it: a real master, two real agents, a job with a promise.

``n1.test`` runs job 7 (2 cpus, promised 80 s); ``n2.test`` is stopped before its machine
goes DOWN. The preview counts job 7 and changes nothing; ``down`` of ``n2.test`` exits 10
and names it pending with the master's failure; ``master status`` shows it ``DOWN
(pending)``; once the agent is back the master's fast drain reaches it and ``status``
shows it DOWN. ``down --wait`` of ``n3.test``, stopped too, prints it pending and waits;
once ``n3.test`` is back it prints it confirmed and exits 0.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess, MasterProcess, job_script, wait_for
from tests.integration.test_cli_master import _env, cli
from tests.integration.test_master import drain_of, window

pytestmark = pytest.mark.integration

POLICY = {"max_job_retirement_time": 80, "machine_max_vacate_time": 1}


def test_down_previews_its_kills_and_a_stopped_node_stays_pending_until_it_is_back(
    tmp_path: Path,
) -> None:
    settings = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        nodes = [
            AgentProcess(
                tmp_path / name,
                hostname=name,
                policy=POLICY,
                master=master.agent_settings(tmp_path / name, node=name, update_interval=0.5),
            )
            for name in ("n1.test", "n2.test", "n3.test")
        ]
        n1, n2, n3 = nodes
        with n1, n2, n3:
            argv, _ = job_script(tmp_path, "long")
            n1.claim(argv, cpus=2, max_job_retirement_time=80, job_id="7", owner="alice")
            master.call(
                "POST",
                "/maintenance/schedule",
                json=window(["n1.test", "n2.test", "n3.test"], time.time() + 3600),
            )

            def preview() -> dict[str, Any]:
                reply = master.call(
                    "POST",
                    "/v1/maintenance/down/preview",
                    json=[{"hostname": "n1.test", "ip": "127.0.0.1"}],
                )
                assert reply.status_code == 200, reply.text
                return reply.json()  # type: ignore[no-any-return]

            seen = wait_for(lambda: (p := preview())["totals"]["jobs"] == 1 and p)
            (machine,) = seen["machines"]
            (job,) = machine["evicted_now"]
            assert (job["job_id"], job["owner"], job["cpus"]) == ("7", "alice", 2)
            assert 70 < job["cut_by"] <= 80
            assert seen["totals"]["cores"] == 2
            assert seen["totals"]["cut_core_seconds"] == 2 * job["cut_by"]
            # A short name: the preview says did you mean; Mesos's endpoint its own words.
            short = [{"hostname": "n1"}]
            meant = master.call("POST", "/v1/maintenance/down/preview", json=short)
            assert (meant.status_code, meant.text) == (
                400,
                """Machine '{"hostname":"n1"}' is not part of a maintenance schedule; """
                "did you mean n1.test/127.0.0.1?",
            )
            mesos = master.call("POST", "/machine/down", json=short)
            assert (mesos.status_code, mesos.text) == (
                400,
                """Machine '{"hostname":"n1"}' is not part of a maintenance schedule""",
            )
            shown = cli(master, "down", "n1.test")  # no terminal, no --yes: refused
            assert shown.returncode == 6
            assert "DOWN evicts now: 1 job on 2 cores of 1 machine" in shown.stdout
            assert "job 7 (alice, 2 cpus), its promise cut by 1m" in shown.stdout
            status = master.call("GET", "/maintenance/status").json()
            assert status.get("down_machines") is None  # nothing changed
            assert drain_of(n1)["state"] == "none"

            # n2's agent stops; its machine goes DOWN in the schedule, not on the node.
            n2.stop()
            pending = cli(master, "down", "--yes", "n2.test")
            assert pending.returncode == 10, pending.stderr
            assert "DOWN: n2.test/127.0.0.1" in pending.stdout
            assert "n2.test/127.0.0.1: DOWN pending: " in pending.stdout
            assert pending.stderr.startswith(
                "machine.pending: DOWN in the schedule, but not yet on the node of 1 machine: "
                "n2.test/127.0.0.1: down of n2.test failed: "
            )
            assert pending.stderr.rstrip().endswith("; the master keeps trying")
            table = cli(master, "status").stdout
            assert "DOWN (pending)" in table

            # Back: the master's fast drain reaches it, and it is DOWN without a word.
            n2.start()
            wait_for(lambda: drain_of(n2)["state"] in ("draining", "drained"), timeout=60)
            wait_for(lambda: "pending" not in cli(master, "status").stdout, timeout=60)
            report = master.call("GET", "/v1/maintenance/down").json()["machines"]
            assert [(m["confirmed"], m["pending"]) for m in report] == [(True, None)]

            # --wait: pending, then confirmed once the node is back; exit 0.
            n3.stop()
            argv = [sys.executable, "-m", "nodeagent", "master", "down", "--yes", "--wait"]
            with subprocess.Popen(
                [*argv, "n3.test"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env({"NODEAGENT_MASTER_SOCKET": str(master.socket)}),
            ) as waiting:
                try:
                    assert waiting.stdout is not None
                    lines: list[str] = []
                    while not any(": DOWN pending: " in line for line in lines):
                        lines.append(waiting.stdout.readline())
                        assert lines[-1], lines  # the command ended without waiting
                    n3.start()
                    out, err = waiting.communicate(timeout=120)
                finally:
                    if waiting.poll() is None:
                        waiting.kill()
            assert waiting.returncode == 0, err
            assert "n3.test/127.0.0.1: DOWN confirmed (drain " in out
            assert drain_of(n3)["schedule"] == "fast"
