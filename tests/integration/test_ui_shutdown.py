"""The maintenance page marks a node whose machine is shutting down, then rebooting (not
lost), in a real headless Chromium, from a real master that a node's ads reach as its
agent pushes them (tests.integration.test_master_reboot)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import MasterProcess
from tests.integration.test_master import window
from tests.integration.test_master_reboot import NODE, Pusher, node_ad
from tests.integration.test_ui import chromium, have_chromium, showing, start_ui, stop

pytestmark = pytest.mark.integration


def test_a_node_shutting_down_then_rebooting_is_marked(tmp_path: Path) -> None:
    have_chromium()
    settings = {"reconcile_interval": 0.2, "ad_lifetime": 1, "reboot_grace": "1h"}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        token = master.token("DAEMON", subject=f"agent@{NODE}", node=NODE)
        push = httpx.Client(base_url=master.url, headers={"Authorization": f"Bearer {token}"})
        reply = master.call(
            "POST", "/maintenance/schedule", json=window([NODE], time.time() + 3600)
        )
        assert reply.status_code == 200
        reader = tmp_path / "read.token"
        reader.write_text(master.token("READ", subject="operator"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
        env["NODEAGENT_MASTER_SOCKET"] = str(tmp_path / "no-such.sock")
        proc, url = start_ui(env, "--host", master.url, "--token", str(reader))
        driver = chromium()
        try:
            with push, Pusher(push, node_ad(started=100, shutting_down=True)):
                driver.get(url)
                shown = showing(
                    driver,
                    lambda s: NODE in s["rows"] and "SHUTTING DOWN" in s["rows"][NODE]["text"],
                )
                assert shown["rows"][NODE]["data"]["node"] == "shutting_down"
                assert shown["rows"][NODE]["data"]["lost"] == "false"
            # the machine is down: no more ads; past the ad lifetime it is rebooting, not lost
            shown = showing(driver, lambda s: "REBOOTING" in s["rows"][NODE]["text"])
            assert shown["rows"][NODE]["data"]["node"] == "rebooting"
            assert shown["rows"][NODE]["data"]["lost"] == "false"
            assert "LOST" not in shown["rows"][NODE]["text"]
        finally:
            driver.quit()
            assert stop(proc) == 0
