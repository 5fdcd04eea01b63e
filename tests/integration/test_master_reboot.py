"""A real master and a node whose machine shuts down and reboots: the node's ads, pushed
with its DAEMON token as its agent pushes them, say ``ShuttingDown`` with the agent's own
drain (reason ``shutdown``) while it drains, then stop; after the reboot a new agent run
pushes the node reopened. The master shows it shutting down (event, plan, ``master
status``), starts no drain of its own though its window opens and it is brought DOWN,
counts it rebooting and not lost while it is silent, and lost once ``reboot_grace``
(reloaded) has run out."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from slots import JobSpec, Machine, MachinePolicy, Resources
from tests.harness import MasterProcess, wait_for
from tests.integration.test_cli_master import cli, ok
from tests.integration.test_events import kept, metric
from tests.integration.test_master import window

NODE = "r1.test"


def node_ad(*, started: int, shutting_down: bool = False) -> dict[str, Any]:
    """The node's ad as its agent (started at ``started``) pushes it: a running job; while
    its machine shuts down, the agent's own quick drain, reason ``shutdown``."""
    now = time.time()
    machine = Machine(
        host=NODE,
        ip="127.0.0.1",
        address="http://127.0.0.1:9",  # never called: the master leaves the node alone
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=600),
        now=now - 60,
    )
    machine.claim(now - 60, resources=Resources(cpus=1), spec=JobSpec(job_id="1.0"))
    ad = machine.ad(now)
    ad["machine"]["DaemonStartTime"] = started
    if shutting_down:
        ad["machine"] |= {
            "ShuttingDown": True,
            "DrainState": "draining",
            "DrainingRequestId": "7",
            "DrainReason": "shutdown",
            "DrainSchedule": "quick",
            "Start": False,
        }
    return ad


class Pusher:
    """Pushes ``ad`` every 0.1 s, as an agent does, until the block ends (the machine is
    down)."""

    def __init__(self, client: httpx.Client, ad: dict[str, Any]) -> None:
        self.client, self.ad = client, ad
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.is_set():
            reply = self.client.post("/v1/ads", json=self.ad)
            assert reply.status_code == 200, reply.text
            self.stopped.wait(0.1)

    def __enter__(self) -> Pusher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)


def test_a_node_shutting_down_is_shown_left_alone_rebooting_then_lost(tmp_path: Path) -> None:
    settings = {"reconcile_interval": 0.2, "ad_lifetime": 1, "reboot_grace": "1h"}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        token = master.token("DAEMON", subject=f"agent@{NODE}", node=NODE)
        push = httpx.Client(base_url=master.url, headers={"Authorization": f"Bearer {token}"})

        def ad_of() -> dict[str, Any]:
            (ad,) = master.call("GET", "/v1/ads").json()["ads"]
            return dict(ad)

        def row() -> dict[str, Any]:
            (machine,) = master.call("GET", "/v1/maintenance/plan").json()["machines"]
            return dict(machine)

        def types(since: int) -> list[str]:
            return [e["type"] for e in kept(master, since=str(since)) if e["type"] != "gap"]

        with push:
            assert push.post("/v1/ads", json=node_ad(started=100)).status_code == 200
            # the master's first event (leader.elected) is written once it leads: waited for
            start = wait_for(lambda: kept(master, since="0"), timeout=30)[-1]["id"]
            # The machine shuts down: its agent pushes as it drains, until the machine is down.
            pushing = Pusher(push, node_ad(started=100, shutting_down=True))
            with pushing:
                wait_for(lambda: "node.shutting_down" in types(start), timeout=30)
                assert ad_of()["ShuttingDown"] is True  # served as it is
                (event,) = [
                    e for e in kept(master, since=str(start)) if e["type"].startswith("node.")
                ]
                assert event["type"] == "node.shutting_down"
                assert event["facts"] == {
                    "node": NODE,
                    "request_id": "7",
                    "state": "draining",
                    "reason": "shutdown",
                }
                # Its window opens meanwhile: the master starts nothing; its plan says why.
                schedule = window([NODE], time.time() - 5)
                reply = master.call("POST", "/maintenance/schedule", json=schedule)
                assert reply.status_code == 200
                shown = row()
                assert shown["mode"] == "DRAINING"
                assert shown["drain"]["shutting_down"] is True
                assert shown["started_by_master"] is False
                assert shown["as_planned"]["escalation"] == "none"
                assert shown["nodes"][0]["rebooting"] is False
                status = " ".join(ok(cli(master, "status")).split())  # no terminal: plain text
                said = f"{NODE} shutting down: its agent drains it (draining, drain 7, reason"
                assert said in status, status
                plan = ok(cli(master, "plan", "--all"))
                assert f"{NODE}: shutting down: its agent drains it" in plan, plan
                # Brought DOWN meanwhile: its shutdown drain is not replaced by a fast one.
                down = [{"hostname": NODE, "ip": "127.0.0.1"}]
                assert master.call("POST", "/machine/down", json=down).status_code == 200
                (report,) = master.call("GET", "/v1/maintenance/down").json()["machines"]
                assert report["confirmed"] is False
                assert "shutting down or rebooting" in report["pending"], report
                assert row()["mode"] == "DOWN"
                assert row()["as_planned"]["escalation"] == "none"

            # The machine is down: no ad for its lifetime; rebooting, not lost.
            wait_for(lambda: ad_of()["Rebooting"], timeout=30)
            assert ad_of()["Lost"] is False
            shown = row()
            assert (shown["nodes"][0]["lost"], shown["nodes"][0]["rebooting"]) == (False, True)
            assert metric(master, 'nodeagent_master_nodes{state="rebooting"}') == 1
            assert metric(master, 'nodeagent_master_nodes{state="lost"}') == 0
            status = " ".join(ok(cli(master, "status")).split())
            assert f"{NODE} rebooting: its last ad" in status, status
            assert "(rebooting)" in ok(cli(master, "ads"))
            # No drain of the master's was tried (its address answers nothing).
            assert metric(master, "nodeagent_master_drain_failures_total") == 0
            ours = {"drain.recorded", "drain.committed", "drain.escalated", "drain.down"}
            assert not ours & {*types(start), "node.lost"}, types(start)
            plan = ok(cli(master, "plan", "--all"))
            assert f"{NODE}: rebooting: no ad for" in plan, plan

            # Back after the reboot: a new agent run, the node reopened by itself.
            back = push.post("/v1/ads", json=node_ad(started=200))
            assert back.status_code == 200
            wait_for(lambda: "node.rebooted" in types(start), timeout=30)
            assert [t for t in types(start) if t.startswith("node.")] == [
                "node.shutting_down",
                "node.rebooted",
            ]
            assert ad_of()["Rebooting"] is False

            # Down again, and not back within the grace (reloaded shorter): lost.
            again = kept(master, since="0")[-1]["id"]
            reply = push.post("/v1/ads", json=node_ad(started=200, shutting_down=True))
            assert reply.status_code == 200
            wait_for(lambda: ad_of()["Rebooting"], timeout=30)
            master.config_path.write_text(
                master.config_path.read_text().replace('reboot_grace = "1h"', "reboot_grace = 1")
            )
            assert master.proc is not None
            master.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: ad_of()["Lost"], timeout=30)
            wait_for(lambda: "node.lost" in types(again), timeout=30)
            lost = [e for e in kept(master, since=str(again)) if e["type"] == "node.lost"]
            assert [e["facts"] for e in lost] == [
                {"node": NODE, "lifetime": 1.0, "reboot_grace": 1.0}
            ]
            assert metric(master, 'nodeagent_master_nodes{state="lost"}') == 1
            assert metric(master, 'nodeagent_master_nodes{state="rebooting"}') == 0
