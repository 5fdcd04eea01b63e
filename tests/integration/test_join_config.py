"""``nodeagent master join-config HOST``: a new agent joins a real master with the section
and the token it prints and writes, and that token pushes HOST's ads only."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.harness import AgentProcess, MasterProcess, wait_for
from tests.integration.test_cli_master import cli
from tests.integration.test_master import window

pytestmark = pytest.mark.integration


def join(master: MasterProcess, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
    env["NODEAGENT_MASTER_CONFIG"] = str(master.config_path)
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", "master", "join-config", *args],
        capture_output=True, text=True, timeout=60, env=env, cwd=cwd, check=False,
    )  # fmt: skip


def test_a_node_joins_with_what_join_config_gives(tmp_path: Path) -> None:
    with MasterProcess(tmp_path / "master") as master:
        # The master listens on loopback only: no URL an agent elsewhere could use.
        guessed = join(master, "node7.test", cwd=tmp_path)
        assert guessed.returncode == 2
        assert guessed.stderr.startswith("cli.master_url: the master listens on 127.0.0.1:")
        assert not (tmp_path / "node7.test.daemon.token").exists()

        made = join(master, "node7.test", "--master-url", master.url, "--interval", "1s",
                    "--json", cwd=tmp_path)  # fmt: skip
        assert made.returncode == 0, made.stderr
        doc = json.loads(made.stdout)
        token_file = tmp_path / "node7.test.daemon.token"
        assert doc["token_file"] == "node7.test.daemon.token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        config = tomllib.loads(doc["configuration"])
        assert config["hostname"] == "node7.test"
        assert config["master"] == {
            "url": master.url,
            "token_file": "/etc/nodeagent/daemon.token",
            "update_interval": "1s",
        }
        again = join(master, "node7.test", "--master-url", master.url, cwd=tmp_path)
        assert again.returncode == 2
        assert again.stderr.startswith("cli.output: node7.test.daemon.token exists: give --force")
        text = join(master, "node7.test", "--master-url", master.url, "--force", cwd=tmp_path)
        assert text.returncode == 0, text.stderr
        assert 'hostname = "node7.test"' in text.stdout
        assert "install -m 0600 -o nodeagent node7.test.daemon.token" in text.stdout

        # The agent, configured as printed (its token where the section says, a copy of
        # the pool key as its key_file), joins; the master can call it (a drain).
        assert doc["pool_key"] == str(master.key_file)
        state = tmp_path / "node7" / "state"
        state.mkdir(parents=True)
        (state / "pool.key").write_bytes(master.key_file.read_bytes())
        (state / "pool.key").chmod(0o600)
        link = {**config["master"], "token_file": str(token_file), "update_interval": 0.5}
        with AgentProcess(tmp_path / "node7", hostname="node7.test", master=link) as agent:
            wait_for(
                lambda: (
                    [a["Name"] for a in master.call("GET", "/v1/ads").json()["ads"]]
                    == ["node7.test"]
                )
            )
            schedule = window(["node7.test"], time.time() + 3600)
            assert master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
            machine = [{"hostname": "node7.test", "ip": "127.0.0.1"}]
            downed = master.call("POST", "/machine/down", json=machine).json()
            assert downed["machines"][0]["confirmed"] is True, downed
            status = cli(master, "status")
            assert status.returncode == 0, status.stderr
            assert "node7.test" in status.stdout
            assert "DOWN" in status.stdout
            assert agent.call("GET", "/v1/drain").json()["state"] in ("draining", "drained")
        # The token pushes node7's ads only.
        token = token_file.read_text().strip()
        with master.client(token) as c:
            other = c.post("/v1/ads", json={"machine": {"Name": "node8.test"}, "slots": []})
        assert other.status_code == 403
        assert other.json()["error"]["code"] == "auth.wrong_node"
