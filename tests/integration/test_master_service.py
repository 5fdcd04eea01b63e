"""The master tells which nodes are held out of service, and why: a real master, a real
agent whose health check fails until a flag file exists."""

from __future__ import annotations

import time
from pathlib import Path

from tests.harness import AgentProcess, MasterProcess, wait_for
from tests.integration.test_cli_master import cli, ok
from tests.integration.test_hooks import NS, config, machine_ad


def test_up_answers_that_an_unhealthy_node_is_not_yet_in_service(tmp_path: Path) -> None:
    flag = tmp_path / "healthy"
    with MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as master:
        extra = config(tmp_path, hooks={}, health_flag=flag)
        settings = master.agent_settings(tmp_path / "agent", node="n1.test", update_interval=0.5)
        with AgentProcess(
            tmp_path / "agent", hostname="n1.test", master=settings, extra=extra
        ) as agent:
            machine = {"hostname": "n1.test", "ip": "127.0.0.1"}
            start = {"nanoseconds": int((time.time() + 10_000) * NS)}
            schedule = {"windows": [{"machine_ids": [machine], "unavailability": {"start": start}}]}
            assert master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
            (row,) = master.call("GET", "/v1/maintenance/plan").json()["machines"]
            assert row["service"]["in_service"] is True
            assert master.call("POST", "/machine/down", json=[machine]).status_code == 200
            wait_for(lambda: machine_ad(agent)["DrainState"] == "drained", timeout=30)

            # The mode changes at once; the reply says the node stays closed, and why.
            up = master.call("POST", "/machine/up", json=[machine])
            assert up.status_code == 200
            (reported,) = up.json()["machines"]
            assert reported["machine_id"] == machine
            (node,) = reported["nodes"]
            assert (node["name"], node["fresh"], node["in_service"]) == ("n1.test", True, False)
            assert node["health"]["state"] in ("pending", "failing")
            assert node["health"]["reason"].startswith("drain request 1 cancelled")
            assert master.call("GET", "/maintenance/status").json() == {}

            # `nodeagent master status` lists it among the nodes held out of service.
            wait_for(lambda: machine_ad(agent).get("HealthState") == "failing")

            # The master hears of the failing check with the node's next ad.
            def listed() -> str | None:
                out = ok(cli(master, "status"))
                return out if "n1.test" in out and "health check failing" in out else None

            held = wait_for(listed)
            assert "exit status 1" in held
            assert "no machine is in maintenance" in held

            flag.touch()
            wait_for(lambda: machine_ad(agent)["Start"] is True)
            wait_for(lambda: "n1.test" not in ok(cli(master, "status")))
            # Up again on a healthy node: in service.
            assert master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
            assert master.call("POST", "/machine/down", json=[machine]).status_code == 200
            up = master.call("POST", "/machine/up", json=[machine])
            (node,) = up.json()["machines"][0]["nodes"]
            assert node["fresh"] is True
