"""The defrag daemon against a real master and real agents running fragmenting jobs.

The first two tests drive the defrag service cycle by cycle on a stepped clock (each cycle
is ten virtual minutes later), so hourly rates play out in seconds while the agents, the
master and the jobs are real. The last runs ``nodeagent defrag run`` as a process.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from nodeagent._auth import load_key
from nodeagent.defrag._policy import DefragPolicy
from nodeagent.defrag._service import CycleReport, DefragService, HttpDefragLink
from tests.harness import AgentProcess, DaemonProcess, MasterProcess, job_script, wait_for
from tests.rawhttp import MIB, send_whole_body

pytestmark = pytest.mark.integration

EPOCH = 1_800_000_000.0
REASON = "Defrag itest"
#: Every agent: retirement up to ten minutes (jobs ask for less), one second to vacate.
POLICY = {"max_job_retirement_time": 600, "machine_max_vacate_time": 1}


class StepClock:
    """Virtual time for the defrag service: the test moves it one interval per cycle."""

    def __init__(self, now: float) -> None:
        self.t = now

    def now(self) -> float:
        return self.t


@pytest.fixture
def master(tmp_path: Path) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as m:
        yield m


@contextlib.contextmanager
def agents_for(master: MasterProcess, root: Path, names: list[str]) -> Iterator[list[AgentProcess]]:
    """8-core agents reporting to ``master`` every 0.5 s (and at once on a change)."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                AgentProcess(
                    root / name,
                    hostname=name,
                    cpus=8,
                    policy=POLICY,
                    master=master.agent_settings(root / name, node=name, update_interval=0.5),
                )
            )
            for name in names
        ]


def claim(agent: AgentProcess, tmp: Path, cpus: int, retirement: int) -> int:
    """A job of ``cpus`` cores promised ``retirement`` seconds; returns its pid."""
    argv, _ = job_script(tmp, f"{agent.hostname}-{cpus}-{retirement}")
    body = agent.claim(argv, cpus=cpus, max_job_retirement_time=retirement)
    pid: int = body["job"]["pid"]
    return pid


def pslots(master: MasterProcess) -> dict[str, dict[str, Any]]:
    """The master's partitionable slot ads, by machine."""
    params = {"slots": "true", "constraint": "PartitionableSlot"}
    ads = master.call("GET", "/v1/ads", params=params).json()["ads"]
    return {ad["Machine"]: ad for ad in ads}


def service_for(master: MasterProcess, tmp: Path, clock: StepClock, **knobs: Any) -> DefragService:
    token_file = tmp / "defrag.token"
    token_file.write_text(master.token("DAEMON", subject="defrag", node="defrag-itest"))
    link = HttpDefragLink(
        master_url=master.url,
        token_file=token_file,
        key=load_key(master.key_file),
        name="itest",
        timeout=10,
    )
    return DefragService(policy=DefragPolicy(name="itest", **knobs), link=link, clock=clock)


def cycle(service: DefragService, clock: StepClock, advance: float = 600.0) -> CycleReport:
    clock.t += advance
    report: CycleReport = trio.run(service.cycle)
    return report


def drain_of(agent: AgentProcess) -> dict[str, Any]:
    body: dict[str, Any] = agent.call("GET", "/v1/drain").json()
    return body


def whole_after_its_drain(master: MasterProcess, agent: AgentProcess) -> bool:
    """Whether the master holds an ad of the agent's node that shows it whole and was made
    after its last drain was committed (``MyCurrentTime`` past ``committed_at``, the
    node's clock): an ad the defrag service believes over its record of that drain. (A
    drain over within the second of its commit leaves ads of that second in doubt.)"""
    ad = pslots(master)[agent.hostname]
    last = drain_of(agent).get("last")  # none while a drain is in force
    return bool(ad["Cpus"] == 8 and last and ad["MyCurrentTime"] > last["committed_at"])


def test_rate_concurrency_cheapest_first_and_machines_resume_whole(
    master: MasterProcess, tmp_path: Path
) -> None:
    names = ["n1.test", "n2.test", "n3.test"]
    with agents_for(master, tmp_path, names) as (n1, n2, n3):
        # graceful badput when the job is young: Cpus × its retirement promise
        claim(n1, tmp_path, cpus=1, retirement=8)  # 8 core-s: cheapest; ~7 s to drain
        claim(n2, tmp_path, cpus=2, retirement=6)  # 12 core-s
        dear = claim(n3, tmp_path, cpus=4, retirement=60)  # 240 core-s
        wait_for(lambda: {m: ad["Cpus"] for m, ad in pslots(master).items()}
                 == {"n1.test": 7, "n2.test": 6, "n3.test": 4})  # fmt: skip
        clock = StepClock(EPOCH)
        service = service_for(
            master,
            tmp_path,
            clock,
            draining_machines_per_hour=3.0,
            max_concurrent_draining=1,
            draining_start_expr="TARGET.RequestCpus <= 1",
        )
        # half a drain per cycle: nothing at the first, the cheapest at the second
        first = cycle(service, clock, advance=0)
        assert first.started == ()
        assert first.plan is not None
        assert first.plan.why == "draining rate already achieved"
        assert cycle(service, clock).started == ("n1.test",)
        drain = drain_of(n1)
        assert (drain["state"], drain["reason"]) == ("draining", REASON)
        assert (drain["on_completion"], drain["schedule"]) == ("resume", "graceful")
        assert drain["requested_by"] == "defrag:defrag-itest"
        # DEFRAG_DRAINING_START_EXPR: a one-core job still gets in while n1 drains (and goes
        # with the original job), a two-core one does not
        assert drain["start"] == "TARGET.RequestCpus <= 1"
        claim(n1, tmp_path, cpus=1, retirement=600)
        argv, _ = job_script(tmp_path, "n1-refused")
        with n1.client() as c:
            refused = c.post("/v1/claims", json={"command": argv, "cpus": 2})
        assert refused.status_code == 409, refused.text
        # half a drain again; then a whole one, but a machine is draining already
        wait_for(lambda: pslots(master)["n1.test"].get("Draining") is True)
        assert cycle(service, clock).started == ()
        fourth = cycle(service, clock)
        assert fourth.plan is not None
        assert (fourth.started, fourth.plan.draining) == ((), ("n1.test",))
        assert fourth.plan.why == "max_concurrent_draining reached"
        # n1 empties, resumes, and is whole; the blocked drain was forfeited, not owed
        wait_for(lambda: whole_after_its_drain(master, n1), timeout=30)
        assert cycle(service, clock).started == ()
        assert cycle(service, clock).started == ("n2.test",)
        wait_for(lambda: whole_after_its_drain(master, n2), timeout=30)
        last = cycle(service, clock)
        assert last.plan is not None
        assert last.plan.whole == ("n1.test", "n2.test")
        for agent in (n1, n2):
            ad = agent.call("GET", "/v1/ad").json()
            pslot = ad["slots"][0]
            assert (pslot["State"], pslot["Cpus"], ad["machine"]["Start"]) == ("Unclaimed", 8, True)
            assert len(ad["slots"]) == 1
            assert drain_of(agent)["last"]["state"] == "completed"
            assert drain_of(agent)["last"]["reason"] == REASON
            assert agent.jobs_alive() == []
        assert drain_of(n3) == {"state": "none", "last": None}
        assert n3.jobs_alive() == [dear]
        stats = service.ad()
        assert (stats["DrainSuccesses"], stats["DrainFailures"], stats["DrainSkips"]) == (2, 0, 0)
        assert (stats["MachinesDrainingPeak"], stats["WholeMachines"]) == (1, 2)
        # the statistics go to the master as a Defrag ad, kept apart from the slot ads
        trio.run(service.link.publish, service.ad())
        pushed = master.call("GET", "/v1/ads/defrag-itest", params={"type": "Defrag"}).json()[
            "machine"
        ]
        assert (pushed["MyType"], pushed["DrainSuccesses"]) == ("Defrag", 2)
        assert "defrag-itest" not in {ad["Name"] for ad in pslots(master).values()}


def test_whole_machine_limit_admin_drains_and_cancel_requirements(
    master: MasterProcess, tmp_path: Path
) -> None:
    names = ["adm.test", "c1.test", "c2.test", "w.test"]
    with agents_for(master, tmp_path, names) as (adm, c1, c2, _):
        claim(adm, tmp_path, cpus=2, retirement=600)
        admin = adm.call(
            "POST", "/v1/drain", json={"schedule": "graceful", "reason": "admin", "commit": True}
        )
        assert admin.status_code == 201
        claim(c1, tmp_path, cpus=4, retirement=2)  # gone two seconds into a drain
        keeps = claim(c1, tmp_path, cpus=2, retirement=600)
        for _ in range(3):
            claim(c2, tmp_path, cpus=2, retirement=600)
        wait_for(
            lambda: (
                {m: (ad["Cpus"], ad.get("DrainReason")) for m, ad in pslots(master).items()}
                == {
                    "adm.test": (6, "admin"),
                    "c1.test": (2, None),
                    "c2.test": (2, None),
                    "w.test": (8, None),
                }
            )
        )
        clock = StepClock(EPOCH)
        service = service_for(
            master,
            tmp_path,
            clock,
            draining_machines_per_hour=36.0,  # six per cycle
            max_whole_machines=2,
            cancel_requirements="Cpus >= 4",
        )
        # one whole machine (the idle one; not the admin's), room for one more: the cheaper
        first = cycle(service, clock, advance=0)
        assert first.plan is not None
        assert (first.plan.whole, first.plan.draining) == (("w.test",), ())
        assert [c.machine for c in first.plan.candidates] == ["c1.test", "c2.test"]
        assert (first.plan.wanted, first.started) == (1, ("c1.test",))
        # c1 frees four cores: its drain matches the cancel requirements, the admin's too
        wait_for(lambda: pslots(master)["c1.test"]["Cpus"] >= 4, timeout=30)
        second = cycle(service, clock)
        assert second.cancelled == ("c1.test",)
        assert second.started == ()
        assert second.plan is not None
        assert second.plan.why == "max_whole_machines reached"
        drain = drain_of(c1)
        assert (drain["state"], drain["last"]["state"]) == ("none", "cancelled")
        assert c1.jobs_alive() == [keeps]  # the retiring job un-retired and runs on
        assert c1.call("GET", "/v1/ad").json()["machine"]["Start"] is True
        still = drain_of(adm)
        assert (still["state"], still["reason"]) == ("draining", "admin")
        assert drain_of(c2) == {"state": "none", "last": None}
        stats = service.ad()
        assert (stats["Cancels"], stats["RecentCancels"], stats["DrainSuccesses"]) == (1, 1, 1)
        assert stats["RecentCancelsList"][0]["who"] == "c1.test"


# ----------------------------------------------------------------------- the daemon process


class DefragProcess(DaemonProcess):
    """``nodeagent defrag run`` as a subprocess; use as a context manager."""

    command = ("defrag", "run")
    info_name = "defrag.json"

    def __init__(self, root: Path, settings: dict[str, Any]) -> None:
        super().__init__()
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.config_path = root / "defrag.toml"
        lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items())
        self.config_path.write_text(
            f'state_dir = "{root / "state"}"\nruntime_dir = "{root / "run"}"\n'
            f'listen = ["127.0.0.1:0"]\n{lines}\n'
        )
        self.socket = root / "run" / "defrag.sock"
        self.key_file = root / "state" / "pool.key"
        self.log_path = root / "defrag.log"

    def stats(self) -> dict[str, Any]:
        body: dict[str, Any] = self.call("GET", "/v1/stats").json()
        return body

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodeagent", "defrag", *args, "-c", str(self.config_path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )


def test_the_daemon_drains_serves_its_statistics_and_pushes_its_ad(
    master: MasterProcess, tmp_path: Path
) -> None:
    root = tmp_path / "defrag"
    (root / "state").mkdir(parents=True)
    key = root / "state" / "pool.key"
    key.write_bytes(master.key_file.read_bytes())
    key.chmod(0o600)
    token = root / "daemon.token"
    token.write_text(master.token("DAEMON", subject="defrag", node="defrag-live"))
    settings = {
        "name": "live",
        "interval": 0.3,
        "draining_machines_per_hour": 12000,  # one per 0.3 s cycle
        "update_interval": 0.5,
        "master_url": master.url,
        "token_file": str(token),
    }
    with agents_for(master, tmp_path, ["frag.test"]) as (agent,):
        claim(agent, tmp_path, cpus=2, retirement=1)
        wait_for(lambda: pslots(master).get("frag.test", {}).get("Cpus") == 6)
        with DefragProcess(root, settings) as defrag:
            wait_for(lambda: (drain_of(agent).get("last") or {}).get("state") == "completed")
            assert drain_of(agent)["last"]["reason"] == "Defrag live"
            assert agent.jobs_alive() == []
            wait_for(lambda: defrag.stats()["WholeMachines"] == 1)
            stats = defrag.stats()
            assert (stats["MyType"], stats["Name"]) == ("Defrag", "defrag-live")
            assert (stats["DrainSuccesses"], stats["DrainFailures"]) == (1, 0)
            assert stats["MyAddress"] == defrag.url
            wait_for(
                lambda: (
                    master.call("GET", "/v1/ads/defrag-live", params={"type": "Defrag"})
                    .json()["machine"]
                    .get("WholeMachines")
                    == 1
                )
            )
            with httpx.Client(base_url=defrag.url, timeout=10) as anonymous:
                assert anonymous.get("/v1/stats").status_code == 401
                assert anonymous.get("/v1/openapi.json").status_code == 401
            read = master.token("READ")
            with httpx.Client(
                base_url=defrag.url, headers={"Authorization": f"Bearer {read}"}, timeout=10
            ) as reader:
                assert "/v1/stats" in reader.get("/v1/openapi.json").json()["paths"]
                assert reader.get("/v1/stats").json()["Name"] == "defrag-live"
                text = reader.get("/v1/stats", params={"format": "classad"}).text
                assert 'MyType = "Defrag"' in text
            # A refused body gets its reply, then a closed connection (never a hang).
            for token_or_none, expected in ((None, 401), (read, 413)):
                refused = send_whole_body(
                    defrag.url, "/v1/stats", 8 * MIB, token_or_none, method="GET"
                )
                assert refused[0] == expected, refused
            status = defrag.cli("status")
            assert status.returncode == 0, status.stderr
            assert "drains started      1" in status.stdout
            as_json = defrag.cli("status", "--json")
            assert json.loads(as_json.stdout)["WholeMachines"] == 1
            assert defrag.proc is not None
            defrag.proc.send_signal(signal.SIGTERM)
            assert defrag.proc.wait(timeout=20) == 0
            assert not defrag.socket.exists()
