"""The backup and restore steps of ``docs/high-availability.md``, run as written with a real
``etcdctl`` against a real etcd that real masters wrote, and ``scripts/ensure-etcd``'s
check for the commands it installs."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from tests.etcd import EtcdServer, etcd_server
from tests.ha import masters_on
from tests.harness import wait_for
from tests.integration.test_events_ha import kept
from tests.integration.test_master import window

__all__ = ["etcd_server"]

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "high-availability.md"
#: A schedule whose document passes 64 KiB, so that etcd holds it compressed (not text).
MACHINES = [f"node{i:04d}.test" for i in range(2000)]


def blocks() -> list[str]:
    """The shell blocks of the guide's backup section, as an operator copies them."""
    text = GUIDE.read_text()
    start = text.index("## Backing up and restoring etcd's keys")
    section = text[start : text.index("\n## ", start + 1)]
    found = re.findall(r"^( *)```sh\n(.*?)^\1```$", section, flags=re.M | re.S)
    return [textwrap.dedent(body) for _, body in found]


def have_etcdctl() -> None:
    if shutil.which("etcdctl") is None:
        if os.environ.get("CI"):
            pytest.fail("etcdctl is missing in CI: scripts/ensure-etcd should install it")
        pytest.skip("etcdctl is not installed (Debian package etcd-client; scripts/ensure-etcd)")


def sh(script: str, *, cwd: Path, endpoint: str) -> str:
    env = {**os.environ, "ETCDCTL_ENDPOINTS": endpoint}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def pool_keys(cwd: Path, endpoint: str) -> dict[str, bytes]:
    """Every key under /nodeagent/ but the leader keys, with its value."""
    reply = json.loads(sh("etcdctl get --prefix /nodeagent/ -w json", cwd=cwd, endpoint=endpoint))
    keys = {
        base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", ""))
        for kv in reply.get("kvs", [])
    }
    return {k: v for k, v in keys.items() if not k.endswith("/leader")}


def test_the_guide_s_backup_and_restore_steps_bring_the_pool_back(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    have_etcdctl()
    export, snapshot, save, restore = blocks()
    assert export.startswith("export ETCDCTL_ENDPOINTS=")  # the test gives its own
    url = etcd_server.url
    with masters_on(tmp_path / "pool", etcd_server, count=1, etcd_prefix="/nodeagent/") as masters:
        leader = masters.leader()
        schedule = window(MACHINES, time.time() + 3600)
        assert leader.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
    before = pool_keys(tmp_path, url)
    assert before["/nodeagent/master/docs/maintenance"].startswith(b"x")  # compressed

    # Only the pool's keys: saved, deleted, put back (every master stopped).
    sh(save, cwd=tmp_path, endpoint=url)
    assert (tmp_path / "nodeagent-keys.json").exists()
    sh("etcdctl del --prefix /nodeagent/", cwd=tmp_path, endpoint=url)
    assert pool_keys(tmp_path, url) == {}
    sh(restore, cwd=tmp_path, endpoint=url)
    assert pool_keys(tmp_path, url) == before
    with masters_on(tmp_path / "again", etcd_server, count=1, etcd_prefix="/nodeagent/") as again:
        leader = again.leader()
        machines = leader.call("GET", "/maintenance/schedule").json()
        assert [m["hostname"] for m in machines["windows"][0]["machine_ids"]] == MACHINES
        # The master that leads on the restored keys writes its own event after the ones
        # kept (leader.elected, within the flush delay): the snapshot below holds it too.
        wait_for(lambda: [e["type"] for e in kept(leader)].count("leader.elected") == 2)
    now = pool_keys(tmp_path, url)
    assert set(now) > set(before)
    assert {k: v for k, v in now.items() if k in before and "last-write" not in k} == {
        k: v for k, v in before.items() if "last-write" not in k
    }

    # The whole cluster: a snapshot restored into a new member's data directory.
    restored = EtcdServer(tmp_path / "restored")
    peer = f"http://127.0.0.1:{restored.peer_port}"
    script = (
        snapshot.replace("https://etcd1:2379", url)
        .replace("/var/lib/etcd/restored", str(restored.root / "data"))
        .replace("--name etcd1", "--name test")
        .replace("etcd1=https://etcd1:2380", f"test={peer}")
        .replace("https://etcd1:2380", peer)
    )
    sh(script, cwd=tmp_path, endpoint=url)
    with restored:
        assert pool_keys(tmp_path, restored.url) == now


@pytest.mark.parametrize(
    ("present", "missing"),
    [
        (("etcd", "etcdctl"), None),
        (("etcd",), "etcd-client"),
        (("etcdctl",), "etcd-server"),
        ((), "etcd-server etcd-client"),
    ],
)
def test_ensure_etcd_installs_the_server_and_etcdctl_each_when_missing(
    tmp_path: Path, present: tuple[str, ...], missing: str | None
) -> None:
    """Without root the script only names what it would install (a stand-in ``id`` says
    uid 1000; the commands found are stand-ins on a PATH of their own): nothing changes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in present:
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    done = subprocess.run(
        ["/bin/sh", str(ROOT / "scripts" / "ensure-etcd")],
        env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    if missing is None:
        assert done.stderr == ""
    else:
        assert done.stderr == (
            f"ensure-etcd: etcd or etcdctl is missing and we are not root; install: {missing}\n"
        )
