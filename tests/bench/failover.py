"""Failover: SIGKILL of the leading master → the first action of the new leader.

Three real masters (``nodeagent master run``, ``store = "etcd"``, ``leader_ttl`` 2 s by
default, a reconcile pass every 0.2 s, ``drain_margin`` 1 s, ``escalation = "quick"``)
share one real etcd (:class:`tests.etcd.EtcdServer`, in a temporary directory). Each
master listens on a fixed loopback port, so that one killed and started again is where
the agents push. ``--agents`` real agents (``nodeagent run``) push their ads to all three
every 0.5 s; each runs one job (its ``max_job_retirement_time`` is 3 s).

Each run takes the next agent in turn and posts to the leader a window whose
just-in-time drain start falls ``--due`` seconds after the instant the leader will be
killed (window = kill + due + margin + the node's drain bound): the leader does nothing
for it before it dies, and the drain is due by the time another master could lead. Then
the leader gets SIGKILL (its lease is neither revoked nor refreshed: it runs out). Timed
from the instant the signal is sent (the wall clock of this process):

* ``kill_to_drain_start``: **the first action of the new leader, observed outside any
  master**: the time of the ``drain.start`` record (the drain transaction's phase 1) in
  the agent's own audit log (``state/audit.log``, written by the agent when it takes the
  request); ``kill_to_drain_commit`` the same for the commit;
* ``kill_to_leader``: until one of the two survivors answers ``GET /v1/leader`` (over its
  Unix socket, polled every 10 ms) naming a survivor as the leader.

A run is valid only if the agent's audit log holds exactly one ``drain.start`` and one
``drain.commit`` for it, both after the kill (the old leader acted on nothing). Then the
killed master is started again (a follower now: the next run kills another leader), the
machine leaves the schedule (the new leader cancels its drain, the node resumes) and the
agent gets a new job.

Prints one JSON document: p50, p90, max and min of each figure, every run, the TTL.
``--signal TERM`` stops the leader instead (it gives its lease back, so another should
lead at once); ``exit_status`` is each stopped leader's.

Usage: ``python tests/bench/failover.py [--runs 10] [--agents 3] [--ttl 2] [--due 0.25]
[--signal KILL|TERM]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._benchlib import (
    become_subreaper,
    end_children,
    percentile,
    terminate,
)
from tests.bench._etcdlib import require_etcd
from tests.etcd import EtcdServer, free_port
from tests.ha import Masters
from tests.harness import AgentProcess, MasterProcess, job_script, wait_for

NS = 1_000_000_000
#: The agents' job promise (``max_job_retirement_time``): the node's drain bound.
RETIREMENT = 3
#: The masters' settings besides the store's (as in tests/integration/test_masters_ha.py).
JIT: dict[str, Any] = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}
#: Seconds from posting a run's window to killing the leader.
LEAD_IN = 1.5
POLL = 0.01


def posted(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"schedule refused: {response.status_code} {response.text}")


def window(host: str, start: float) -> dict[str, Any]:
    return {
        "windows": [
            {
                "machine_ids": [{"hostname": host, "ip": "127.0.0.1"}],
                "unavailability": {
                    "start": {"nanoseconds": int(start * NS)},
                    "duration": {"nanoseconds": 3600 * NS},
                },
            }
        ]
    }


def audited(agent: AgentProcess, action: str, since: float) -> list[dict[str, Any]]:
    """The agent's audit records of ``action`` from ``since`` on (wall-clock seconds)."""
    path = agent.root / "state" / "audit.log"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [r for r in records if r["action"] == action and r["time"] >= since]


def on_fixed_port(master: MasterProcess) -> None:
    """Make ``master`` listen on a loopback port of its own that a restart keeps."""
    text = master.config_path.read_text()
    fixed = text.replace('listen = ["127.0.0.1:0"]', f'listen = ["127.0.0.1:{free_port()}"]')
    if fixed == text:
        raise RuntimeError(f"no listen line to fix in {master.config_path}")
    master.config_path.write_text(fixed)


def ads_everywhere(masters: Masters, count: int) -> None:
    for master in masters.running():
        wait_for(
            lambda m=master: len(m.call("GET", "/v1/ads", timeout=5).json()["ads"]) == count,
            timeout=30,
        )


def claim_job(agent: AgentProcess, tmp: Path, name: str) -> None:
    """A new job on ``agent`` unless one runs there."""
    claims = agent.call("GET", "/v1/claims").json()["claims"]
    if any(c["job"]["pid"] for c in claims):
        return
    argv, _ = job_script(tmp, name, term_delay=0)
    agent.claim(argv, max_job_retirement_time=RETIREMENT)


def first_leader_named(
    clients: dict[str, httpx.Client], deadline: float
) -> tuple[float, str] | None:
    """Poll the survivors' ``GET /v1/leader`` until one names a survivor; (when, who)."""
    while time.time() < deadline:
        for client in clients.values():
            try:
                leader = client.get("/v1/leader", timeout=1).json().get("leader")
            except (httpx.HTTPError, ValueError):
                continue
            if leader in clients:
                return time.time(), leader
        time.sleep(POLL)
    return None


def one_run(
    masters: Masters,
    agent: AgentProcess,
    clients: dict[str, httpx.Client],
    due: float,
    sig: signal.Signals,
) -> dict[str, Any]:
    leader = masters.leader()
    began = time.time()
    kill_at = began + LEAD_IN
    drain_due = kill_at + due
    start = drain_due + JIT["drain_margin"] + RETIREMENT
    posted(leader.call("POST", "/maintenance/schedule", json=window(agent.hostname, start)))
    # Every master holds the window before the kill (the followers by their watch).
    for master in masters.running():
        wait_for(
            lambda m=master: m.call("GET", "/maintenance/schedule").json().get("windows"),
            timeout=LEAD_IN,
            interval=0.05,
        )
    time.sleep(max(0.0, kill_at - time.time()))
    if audited(agent, "drain.start", began):
        raise RuntimeError(f"{agent.hostname}: a drain started before the leader was killed")
    assert leader.proc is not None
    killed = time.time()
    leader.proc.send_signal(sig)
    survivors = {url: c for url, c in clients.items() if url != leader.url}
    named = first_leader_named(survivors, killed + 15)
    if named is None:
        raise RuntimeError("no survivor named a new leader within 15 s")
    named_at, new_leader = named
    status = leader.proc.wait(timeout=20)
    commits = wait_for(lambda: audited(agent, "drain.commit", began), timeout=15, interval=0.05)
    starts = audited(agent, "drain.start", began)
    if len(starts) != 1 or len(commits) != 1 or starts[0]["time"] < killed:  # the old leader
        raise RuntimeError(f"{agent.hostname}: drain.start {starts}, drain.commit {commits}")
    if (starts[0]["result"], commits[0]["result"]) != ("ok", "ok"):
        raise RuntimeError(f"{agent.hostname}: drain.start {starts}, drain.commit {commits}")
    return {
        "node": agent.hostname,
        "killed_leader": leader.url,
        "new_leader": new_leader,
        "kill_to_leader_s": round(named_at - killed, 3),
        "kill_to_drain_start_s": round(starts[0]["time"] - killed, 3),
        "kill_to_drain_commit_s": round(commits[0]["time"] - killed, 3),
        "drain_due_after_kill_s": due,
        "exit_status": status,
    }


def reset(masters: Masters, agent: AgentProcess, killed: MasterProcess, tmp: Path, n: int) -> None:
    """The killed master back (a follower), the machine out of the schedule, a new job."""
    killed.start()
    ads_everywhere(masters, n)
    leader = masters.leader()
    posted(leader.call("POST", "/maintenance/schedule", json={"windows": []}))
    wait_for(lambda: agent.call("GET", "/v1/drain").json()["state"] == "none", timeout=15)
    claim_job(agent, tmp, f"job-{agent.hostname}-{time.monotonic_ns()}")


def stats(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 3),
        "p90": round(percentile(values, 90), 3),
        "max": round(max(values), 3),
        "min": round(min(values), 3),
    }


def run(runs: int, count: int, ttl: float, due: float, sig: signal.Signals) -> dict[str, Any]:
    require_etcd()
    become_subreaper()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as name:
        tmp = Path(name)
        with EtcdServer(tmp / "etcd") as etcd, contextlib.ExitStack() as stack:
            masters = Masters(tmp / "masters", etcd, leader_ttl=ttl, **JIT)
            for master in masters.all:
                on_fixed_port(master)
            stack.callback(masters.close)
            masters.start()
            agents = []
            for i in range(count):
                host = f"node{i}.bench"
                agent = stack.enter_context(
                    masters.agent(
                        tmp,
                        host,
                        policy={
                            "max_job_retirement_time": RETIREMENT,
                            "machine_max_vacate_time": 1,
                        },
                    )
                )
                claim_job(agent, tmp, f"job-{host}-first")
                agents.append(agent)
            ads_everywhere(masters, count)
            clients = {m.url: stack.enter_context(m.client()) for m in masters.all}
            for i in range(runs):
                agent = agents[i % count]
                results.append(one_run(masters, agent, clients, due, sig))
                killed = next(m for m in masters.all if m.url == results[-1]["killed_leader"])
                reset(masters, agent, killed, tmp, count)
            problems = [
                line
                for m in masters.all
                for line in m.log_path.read_text(errors="replace").splitlines()
                if "Traceback" in line or " ERROR " in line
            ][:20]
        end_children()
    figures = {
        key: stats([r[f"{key}_s"] for r in results])
        for key in ("kill_to_leader", "kill_to_drain_start", "kill_to_drain_commit")
    }
    return {
        "benchmark": "failover",
        "masters": 3,
        "agents": count,
        "runs": runs,
        "signal": sig.name,
        "leader_ttl_s": ttl,
        "reconcile_interval_s": JIT["reconcile_interval"],
        "drain_due_after_kill_s": due,
        "target_p50_s": 3.0,
        **{f"{key}_s": value for key, value in figures.items()},
        "each_run": results,
        "master_log_problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10, help="leaders killed")
    parser.add_argument("--agents", type=int, default=3, help="real agents, one job each")
    parser.add_argument("--ttl", type=float, default=2.0, help="the masters' leader_ttl")
    parser.add_argument(
        "--due", type=float, default=0.25, help="seconds from the kill to the drain's planned start"
    )
    parser.add_argument(
        "--signal",
        choices=("KILL", "TERM"),
        default="KILL",
        help="what the leader gets (TERM: a leader stopped, which gives its lease back)",
    )
    args = parser.parse_args()
    sig = signal.Signals[f"SIG{args.signal}"]
    signal.signal(signal.SIGTERM, terminate)
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(run(args.runs, args.agents, args.ttl, args.due, sig), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
