"""Rolling maintenance operations with a real master and real agents on loopback.

Each agent has a ``[hooks.reboot]`` script that appends ``hook NODE REQUEST TIME`` to a
record file shared by the test, and a ``[health]`` check that passes while the node's flag
file exists and appends ``health NODE pass|fail TIME`` each time it runs: "each hook ran
exactly once" and "no node was drained twice" are counts of lines and of the drain requests
the agents' audit logs show, and "back only after its health check passed" compares the
times. Everything the test starts it ends by pid (the harness), the scripts end by
themselves within a second. The master listens on a fixed loopback port, so that its
agents find it again after it is killed and restarted.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slots import Machine, MachinePolicy, Resources
from tests.harness import AgentProcess, MasterProcess, wait_for

RACKS = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2", "n5": "r3", "n6": "r3"}


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Site:
    """A master and agents in racks, their record file and health flags."""

    def __init__(
        self,
        tmp: Path,
        racks: dict[str, str],
        *,
        hook_seconds: float = 0.3,
        master_settings: dict[str, Any] | None = None,
        reboot_extra: str = "",
        agent_extra: str = "",
    ) -> None:
        #: More lines of each agent's ``[hooks.reboot]``, and more of its configuration.
        self.reboot_extra, self.agent_extra = reboot_extra, agent_extra
        self.tmp = tmp
        self.master_settings = {"reconcile_interval": 0.2, **(master_settings or {})}
        self.racks = racks
        self.record = tmp / "record"
        self.port = _free_port()
        self.hook = _script(
            tmp / "hook.sh",
            f'echo "hook $NODEAGENT_NODE $NODEAGENT_DRAIN_REQUEST_ID $(date +%s.%N)"'
            f' >> "{self.record}"\nsleep {hook_seconds}\n',
        )
        self.health = _script(
            tmp / "health.sh",
            f'if test -e "{tmp}/healthy-$NODEAGENT_NODE"; then\n'
            f'  echo "health $NODEAGENT_NODE pass $(date +%s.%N)" >> "{self.record}"; exit 0\n'
            f"fi\n"
            f'echo "health $NODEAGENT_NODE fail $(date +%s.%N)" >> "{self.record}"\n'
            f'echo "flag missing"; exit 1\n',
        )
        self.master = self._master()
        self.agents: dict[str, AgentProcess] = {}

    def _master(self) -> MasterProcess:
        master = MasterProcess(self.tmp / "master", settings=self.master_settings)
        text = master.config_path.read_text()
        master.config_path.write_text(text.replace("127.0.0.1:0", f"127.0.0.1:{self.port}"))
        return master

    def healthy(self, name: str, yes: bool = True) -> None:
        flag = self.tmp / f"healthy-{name}"
        if yes:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def start_agents(self, stack: contextlib.ExitStack) -> None:
        """Start the nodes' agents one after the other (their ads, and so their estimates,
        in the racks' order)."""
        for name, rack in self.racks.items():
            self.healthy(name)
            extra = (
                f"[attributes]\nRack = {json.dumps(rack)}\n"
                f"[hooks.reboot]\ncommand = {json.dumps([str(self.hook)])}\n{self.reboot_extra}"
                f"[health]\ncommand = {json.dumps([str(self.health)])}\n"
                f'timeout = "5s"\ninterval = 0.3\npasses = 1\n{self.agent_extra}'
            )
            settings = self.master.agent_settings(self.tmp / name, node=name, update_interval=0.5)
            agent = AgentProcess(self.tmp / name, hostname=name, master=settings, extra=extra)
            self.agents[name] = stack.enter_context(agent)

    def lines(self, kind: str) -> list[list[str]]:
        if not self.record.exists():
            return []
        return [ln.split() for ln in self.record.read_text().splitlines() if ln.startswith(kind)]

    def commits(self, name: str) -> list[str]:
        """The drain requests committed on the node, from its audit log."""
        path = self.agents[name].root / "state" / "audit.log"
        records = [json.loads(line) for line in path.read_text().splitlines()]
        return [
            r["action"]
            for r in records
            if "commit" in r["action"] and r["action"].startswith("drain") and r["result"] == "ok"
        ]

    def operation(self, op_id: str) -> dict[str, Any]:
        reply: dict[str, Any] = self.master.call(
            "GET", f"/v1/maintenance/operations/{op_id}"
        ).json()
        return reply

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodeagent", "master", *args,
             "--socket", str(self.master.socket)],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip


@contextlib.contextmanager
def site(tmp: Path, racks: dict[str, str], **kwargs: Any) -> Iterator[Site]:
    s = Site(tmp, racks, **kwargs)
    with contextlib.ExitStack() as stack:
        stack.enter_context(s.master)
        s.start_agents(stack)
        wait_for(lambda: len(s.master.call("GET", "/v1/ads").json()["ads"]) == len(racks))
        yield s
        stack.callback(lambda: s.master.stop(signal.SIGKILL))


def assert_each_once(s: Site) -> None:
    hooks = s.lines("hook")
    passes = s.lines("health")
    for name in s.racks:
        mine = [h for h in hooks if h[1] == name]
        assert len(mine) == 1, (name, hooks)
        # the node came back after a passing check that followed its hook
        after = [
            p for p in passes if p[1] == name and p[2] == "pass" and float(p[3]) > float(mine[0][3])
        ]
        assert after, (name, passes)  # fmt: skip
        assert len(s.commits(name)) == 1, (name, s.commits(name))
        ad = s.agents[name].call("GET", "/v1/ad").json()["machine"]
        assert ad["Start"] is True
        assert ad["DrainState"] == "none"


def test_an_operation_by_rack_with_a_failing_health_check(tmp_path: Path) -> None:
    racks = {k: RACKS[k] for k in ("n1", "n2", "n3", "n5")}
    with site(tmp_path, racks) as s:
        s.healthy("n3", False)  # r2's node fails its health check until told
        started = s.cli(
            "maintain", "start", "--constraint", "Rack isnt undefined", "--grouping", "Rack",
            "--hook", "reboot", "--yes", "--json",
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        op_id = json.loads(started.stdout)["id"]
        assert [b["name"] for b in json.loads(started.stdout)["batches"]] == ["r1", "r2", "r3"]

        def failing() -> bool:
            batches = {b["name"]: b for b in s.operation(op_id)["batches"]}
            reason = batches["r2"]["nodes"][0]["reason"]
            return bool(reason == "health check failing: exit status 1: flag missing")

        wait_for(failing, timeout=60, interval=0.2)
        status = s.cli("maintain", "status", op_id)
        assert "health check failing: exit status 1: flag missing" in status.stdout
        mesos = s.master.call("GET", "/maintenance/status").json()
        assert [m["hostname"] for m in mesos.get("down_machines") or []] == ["n3"]
        assert s.agents["n3"].call("GET", "/v1/ad").json()["machine"]["Start"] is False
        time.sleep(2)
        # held: r2 is not done, and with one batch at a time nothing else runs meanwhile
        # (the batches go soonest empty first: each other one is done or still waiting)
        doc = s.operation(op_id)
        states = {b["name"]: b["state"] for b in doc["batches"]}
        assert states["r2"] == "health"
        assert {state for name, state in states.items() if name != "r2"} <= {"done", "waiting"}
        time.sleep(1)
        assert {b["name"]: b["state"] for b in s.operation(op_id)["batches"]} == states
        s.healthy("n3")
        waited = s.cli("maintain", "status", op_id, "--wait", timeout=120)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        assert waited.stdout.endswith(
            f"operation {op_id} completed: 3 done, 0 skipped, 0 failed of 3 batches\n"
        )
        assert s.operation(op_id)["state"] == "completed"
        assert_each_once(s)
        assert s.master.call("GET", "/maintenance/status").json() == {}


def test_the_master_killed_in_the_middle_of_a_batch(tmp_path: Path) -> None:
    racks = {k: RACKS[k] for k in ("n1", "n2", "n3", "n4")}
    with site(tmp_path, racks, hook_seconds=2.0) as s:
        reply = s.master.call(
            "POST",
            "/v1/maintenance/operations",
            json={"hosts": list(racks), "grouping": "Rack", "hook": "reboot"},
        )
        assert reply.status_code == 201, reply.text
        op_id = reply.json()["id"]
        # the first batch's hooks are running: SIGKILL
        wait_for(lambda: len(s.lines("hook")) >= 1, timeout=60, interval=0.05)
        s.master.stop(signal.SIGKILL)
        time.sleep(1)
        s.master.start()
        wait_for(lambda: s.operation(op_id)["ended_at"] is not None, timeout=120, interval=0.3)
        assert s.operation(op_id)["state"] == "completed"
        assert_each_once(s)
        # and once more: killed while the next batch's drains are being started
        reply = s.master.call(
            "POST",
            "/v1/maintenance/operations",
            json={"hosts": list(racks), "grouping": "host", "hook": "reboot", "batches": 2},
        )
        op_id = reply.json()["id"]
        time.sleep(0.3)
        s.master.stop(signal.SIGKILL)
        s.master.start()
        wait_for(lambda: s.operation(op_id)["ended_at"] is not None, timeout=120, interval=0.3)
        assert s.operation(op_id)["state"] == "completed"
        for name in racks:
            assert len([h for h in s.lines("hook") if h[1] == name]) == 2
            assert len(s.commits(name)) == 2


class Scheduler:
    """The test as the group's scheduler: one instance of ``web`` per node to begin with;
    an instance that ends (evicted by a drain) is started again on an open node (``Start``
    true, no drain) of a rack holding fewer than two instances, the emptiest first; while
    none is open it waits. Each instance appends ``start NODE ID TIME`` and, on SIGTERM,
    ``stop NODE ID TIME`` to its own record: the nodes' record of what ran when."""

    def __init__(self, s: Site) -> None:
        self.s = s
        self.record = s.tmp / "instances"
        self.job = _script(
            s.tmp / "instance.sh",
            f'echo "start $1 $2 $(date +%s.%N)" >> "{self.record}"\n'
            f'trap \'echo "stop $1 $2 $(date +%s.%N)" >> "{self.record}"; exit 0\' TERM\n'
            "while :; do sleep 0.05; done\n",
        )
        self.placed: dict[str, str] = {}  # instance id -> node
        self.next_id = 0
        self.stop = threading.Event()

    def events(self) -> list[tuple[str, str, str, float]]:
        if not self.record.exists():
            return []
        out = []
        for line in self.record.read_text().splitlines():
            kind, node, iid, when = line.split()
            out.append((kind, node, iid, float(when)))
        return out

    def running(self) -> dict[str, str]:
        stopped = {iid for kind, _, iid, _ in self.events() if kind == "stop"}
        return {iid: node for iid, node in self.placed.items() if iid not in stopped}

    def place(self, node: str) -> None:
        self.next_id += 1
        iid = f"i{self.next_id}"
        self.s.agents[node].claim(["/bin/sh", str(self.job), node, iid], group="web")
        self.placed[iid] = node

    def start_all(self) -> None:
        for node in self.s.racks:
            self.place(node)
        wait_for(lambda: len([e for e in self.events() if e[0] == "start"]) == len(self.s.racks))

    def open_nodes(self) -> list[str]:
        found = []
        for name, agent in self.s.agents.items():
            with contextlib.suppress(Exception):
                ad = agent.call("GET", "/v1/ad").json()["machine"]
                if ad["Start"] is True and ad["DrainState"] == "none":
                    found.append(name)
        return found

    def run(self) -> None:
        while not self.stop.wait(0.2):
            running = self.running()
            missing = len(self.s.racks) - len(running)
            if missing <= 0:
                continue
            per_rack: dict[str, int] = dict.fromkeys(self.s.racks.values(), 0)
            per_node: dict[str, int] = dict.fromkeys(self.s.racks, 0)
            for node in running.values():
                per_rack[self.s.racks[node]] += 1
                per_node[node] += 1
            for _ in range(missing):
                choices = [n for n in self.open_nodes() if per_rack[self.s.racks[n]] < 2]
                if not choices:
                    break
                node = min(choices, key=lambda n: (per_node[n], per_rack[self.s.racks[n]], n))
                with contextlib.suppress(AssertionError):
                    self.place(node)
                    per_rack[self.s.racks[node]] += 1
                    per_node[node] += 1

    def fewest_up_long_enough(self, since: float, until: float, duration: float) -> float:
        """The fewest instances up for at least ``duration`` at any instant of
        [since, until], from the instances' own records."""
        events = self.events()
        starts = {iid: when for kind, _, iid, when in events if kind == "start"}
        stops = {iid: when for kind, _, iid, when in events if kind == "stop"}
        instants = sorted(
            {since, until}
            | {t for _, _, _, t in events if since <= t <= until}
            | {t + duration for t in starts.values() if since <= t + duration <= until}
        )
        fewest = float("inf")
        for t in instants:
            for at in (t - 1e-6, t):
                up = sum(
                    1
                    for iid, start in starts.items()
                    if start <= at - duration and stops.get(iid, float("inf")) > at
                )
                fewest = min(fewest, up)
        return fewest


def test_six_nodes_in_three_racks_with_an_sla(tmp_path: Path) -> None:
    """An operation by rack over six nodes running one instance of ``web`` each, whose SLA
    is at least four instances up for two seconds: never fewer than four were, every hook
    ran once, every node came back after a passing health check, the operation completes."""
    with site(tmp_path, RACKS) as s:
        scheduler = Scheduler(s)
        scheduler.start_all()
        policy = {"kind": "count", "count": 4, "duration": 2}
        assert s.master.call("PUT", "/v1/sla/policies/web", json=policy).status_code == 200
        thread = threading.Thread(target=scheduler.run, daemon=True)
        thread.start()
        try:
            time.sleep(2.5)  # every instance up for two seconds
            began = time.time()
            reply = s.master.call(
                "POST",
                "/v1/maintenance/operations",
                json={"hosts": list(RACKS), "grouping": "Rack", "hook": "reboot"},
            )
            assert reply.status_code == 201, reply.text
            op_id = reply.json()["id"]
            reasons: list[Any] = []

            def ended() -> bool:
                doc = s.operation(op_id)
                reasons.extend(b["reason"] for b in doc["batches"] if b["reason"])
                return doc["ended_at"] is not None

            wait_for(ended, timeout=240, interval=0.3)
            ended_at = time.time()
        finally:
            scheduler.stop.set()
            thread.join(timeout=10)
        doc = s.operation(op_id)
        assert doc["state"] == "completed", doc
        assert [b["state"] for b in doc["batches"]] == ["done", "done", "done"]
        assert_each_once(s)
        fewest = scheduler.fewest_up_long_enough(began, ended_at, 2.0)
        assert fewest >= 4
        # a batch waited for the SLA at least once (instances restarted, not yet up 2 s)
        assert any(r.get("code") == "sla" and r.get("groups") == ["web"] for r in reasons)


class Coordinator:
    """A service's own coordinator on loopback: says no, with a reason, until told yes;
    notes what it was asked."""

    def __init__(self) -> None:
        self.allow = False
        self.asked: list[dict[str, Any]] = []
        coordinator = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                coordinator.asked.append(json.loads(self.rfile.read(length)))
                answer = {"allow": coordinator.allow, "reason": "canary deploy in progress"}
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/may-go"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Coordinator:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def test_a_coordinator_that_says_no_holds_its_hosts(tmp_path: Path) -> None:
    """The group's coordinator refuses: the batch waits with its reason and nothing is
    drained; once it says yes, the operation goes on and completes."""
    racks = {"n1": "r1", "n2": "r2"}
    with site(tmp_path, racks) as s, Coordinator() as coordinator:
        job = _script(tmp_path / "svc.sh", "while :; do sleep 0.05; done\n")
        for name in racks:
            s.agents[name].claim(["/bin/sh", str(job)], group="svc")
        policy = {"kind": "coordinator", "url": coordinator.url}
        assert s.master.call("PUT", "/v1/sla/policies/svc", json=policy).status_code == 200
        wait_for(lambda: len(s.master.call("GET", "/v1/ads?slots=true").json()["ads"]) >= 4)
        reply = s.master.call(
            "POST",
            "/v1/maintenance/operations",
            json={"hosts": list(racks), "grouping": "host", "hook": "reboot"},
        )
        assert reply.status_code == 201, reply.text
        op_id = reply.json()["id"]

        def held() -> dict[str, Any] | None:
            batch = s.operation(op_id)["batches"][0]
            reason = batch.get("reason") or {}
            return batch if reason.get("code") == "sla" else None

        batch = wait_for(held)
        assert batch["state"] == "waiting"
        assert "canary deploy in progress" in batch["reason"]["message"]
        assert batch["reason"]["groups"] == ["svc"]
        time.sleep(1.5)  # several passes: still held, nothing drained
        assert all(s.commits(name) == [] for name in racks)
        asked = coordinator.asked[0]
        assert asked["group"] == "svc"
        assert asked["hosts"] in (["n1"], ["n2"])
        coordinator.allow = True
        wait_for(lambda: s.operation(op_id)["ended_at"] is not None, timeout=120, interval=0.3)
        assert s.operation(op_id)["state"] == "completed"
        assert_each_once(s)


def test_a_silent_node_delays_only_its_own_operation(tmp_path: Path) -> None:
    """A node whose address takes the connection and never answers (the master waits an
    hour for an agent): its operation waits on it, while an operation on a real agent
    beside it runs to completion."""
    with contextlib.closing(socket.socket()) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # connections are taken by the kernel, never answered
        address = f"http://127.0.0.1:{silent.getsockname()[1]}"
        settings = {"agent_timeout": 3600}
        with site(tmp_path, {"n1": "r1"}, master_settings=settings) as s:
            now = time.time()
            machine = Machine(
                host="quiet",
                ip="127.0.0.2",
                address=address,
                total=Resources(cpus=4),
                policy=MachinePolicy(hooks=frozenset({"reboot"})),
                now=now,
            )
            with s.master.client(
                s.master.token("DAEMON", subject="agent@quiet", node="quiet")
            ) as c:
                pushed = c.post("/v1/ads", json=machine.ad(now))
            assert pushed.status_code < 300, pushed.text
            body = {"hosts": ["quiet"], "hook": "reboot"}
            quiet = s.master.call("POST", "/v1/maintenance/operations", json=body).json()["id"]

            def draining() -> bool:
                node = s.operation(quiet)["batches"][0]["nodes"][0]
                return bool(node["phase"] == "draining")

            wait_for(draining)
            body = {"hosts": ["n1"], "hook": "reboot"}
            healthy = s.master.call("POST", "/v1/maintenance/operations", json=body).json()["id"]
            wait_for(lambda: s.operation(healthy)["ended_at"] is not None, timeout=60)
            assert s.operation(healthy)["state"] == "completed"
            assert_each_once(s)
            waiting = s.operation(quiet)
            assert waiting["ended_at"] is None
            node = waiting["batches"][0]["nodes"][0]
            assert node["phase"] == "draining"
            assert node["request_id"] is None  # its drain's first call still unanswered
