"""The high-availability guide's backup and restore of the pool's keys, run as written
against a real etcd and a real master: a schedule large enough to be stored compressed
comes back whole."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.etcd import EtcdServer, etcd_server
from tests.ha import masters_on
from tests.integration.test_master import window

__all__ = ["etcd_server"]

pytestmark = pytest.mark.integration

GUIDE = Path(__file__).parents[2] / "docs" / "high-availability.md"


def guide_steps() -> tuple[str, str]:
    """The guide's backup lines and restore lines (its shell block, split at ``# restore``)."""
    block = re.search(r"```sh\n(  # back up\n.*?)  ```", GUIDE.read_text(), re.DOTALL)
    assert block is not None, "the guide's backup block"
    text = "\n".join(line[2:] for line in block.group(1).splitlines())
    backup, restore = text.split("# restore", 1)
    return backup, restore.split("\n", 1)[1]


def run(script: str, etcd: EtcdServer, cwd: Path) -> None:
    env = {**os.environ, "ETCDCTL_ENDPOINTS": etcd.url, "ETCDCTL_API": "3"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(
    shutil.which("etcdctl") is None and not os.environ.get("CI"), reason="no etcdctl"
)
def test_the_guides_backup_and_restore_of_the_pools_keys(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    hosts = [f"n{i}.example.org" for i in range(800)]  # ≈ 100 kB of JSON: stored compressed
    schedule: Any = window(hosts, time.time() + 86400)
    backup, restore = guide_steps()
    with masters_on(tmp_path / "pool", etcd_server, count=1, etcd_prefix="/nodeagent/") as masters:
        (master,) = masters.all
        assert master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
        held = master.call("GET", "/maintenance/schedule").json()
        run(backup, etcd_server, tmp_path)
        assert (tmp_path / "nodeagent-keys.json").stat().st_size > 0
        assert master.stop() == 0
        delete, put_back = restore.split("\n", 1)
        assert delete.startswith("etcdctl del --prefix /nodeagent/master/")
        run(delete, etcd_server, tmp_path)
        env = {**os.environ, "ETCDCTL_ENDPOINTS": etcd_server.url}
        keys = subprocess.run(
            ["etcdctl", "get", "--prefix", "/nodeagent/master/", "--keys-only"],
            env=env, capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        assert keys.strip() == ""  # gone: what comes back is the backup's
        run(put_back, etcd_server, tmp_path)
        master.start()
        masters.leader()
        assert master.call("GET", "/maintenance/schedule").json() == held
