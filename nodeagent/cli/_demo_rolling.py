"""``nodeagent demo --rolling``: a rack-by-rack reboot under a job group's SLA.

Everything is real, as in the plain demo: a master and six agents serve HTTP on loopback
and Unix sockets in a temporary directory, the jobs are processes, the hooks and health
checks are shell scripts the agents run. The story:

1. six nodes in three racks (``[attributes] Rack``), each with a ``reboot`` hook (it
   "reboots" for a moment and notes that it ran) and a health check (node4's fails twice
   before it passes, as a link that takes a while to come up);
2. a service, ``www-data/prod/web``, runs six instances, one per node, each promised a few
   seconds of retirement; its SLA, held by the master: at least half of its instances up,
   each for at least a few seconds (Aurora's ``percentage`` over ``duration``);
3. a rolling maintenance operation over the six nodes, one rack at a time, with the hook:
   the master checks each rack's SLA before it drains it, waits while taking it would break
   the SLA (and says until when), drains, lets the hook run, waits for the health check,
   returns the nodes to service, and goes on;
4. the demo plays the service's scheduler: an instance evicted by a drain is started again
   on an open node, preferring the nodes already maintained; and it watches the instances
   up all along.

It ends every process it started, by pid, and removes its directory; its exit status is 0
when the operation completed, every node's hook ran exactly once, every node came back, and
the service never had fewer instances running than its SLA asks.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

from nodeagent._auth import generate_key
from nodeagent.agent._daemon import AgentDaemon
from nodeagent.cli._demo import JOB, Narrator, start_agent, unix_client, write
from nodeagent.master._config import load_master_config
from nodeagent.master._daemon import MasterDaemon

__all__ = ["RollingTimes", "rolling_story"]

GROUP = "www-data/prod/web"
RACKS = (("r1", ("node1", "node2")), ("r2", ("node3", "node4")), ("r3", ("node5", "node6")))
#: The node whose health check fails at first, and how many times.
SLOW_NODE, SLOW_FAILURES = "node4", 2

#: The reboot hook: notes that it ran (the demo counts the lines), "reboots", says so.
_HOOK = """#!/bin/sh
echo "$NODEAGENT_NODE" >> "{record}"
echo "rebooting $NODEAGENT_NODE for drain $NODEAGENT_DRAIN_REQUEST_ID"
sleep {seconds}
echo "firmware 2.1 up"
"""
#: The health check: passes, but for the first failures of the node that is slow.
_CHECK = """#!/bin/sh
count="{home}/checks"
n=$(cat "$count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$count"
if [ "$n" -lt {failures} ]; then echo "uplink not ready (check $((n + 1)))"; exit 1; fi
echo ok
"""


@dataclass(frozen=True, kw_only=True)
class RollingTimes:
    """The rolling demo's clock (seconds)."""

    retirement: int = 3  # each instance's promise
    sla_percentage: float = 50.0
    sla_duration: float = 4.0  # an instance counts as up once up this long
    reboot: float = 1.5  # how long the hook takes
    health_interval: float = 1.0
    limit: float = 110.0  # the story gives up after this long


@dataclass
class _Node:
    name: str
    rack: str
    agent: AgentDaemon
    home: Path


async def rolling_story(root: Path, times: RollingTimes, narrator: Narrator, pids: set[int]) -> int:
    """Tell the rolling story in ``root`` (see the module docstring); the job processes
    started go to ``pids`` for the caller to end."""
    say = narrator.say
    master_config = load_master_config(
        write(
            root / "master" / "master.toml",
            f'state_dir = "{root / "master" / "state"}"\n'
            f'runtime_dir = "{root / "master" / "run"}"\n'
            'listen = ["127.0.0.1:0"]\nreconcile_interval = 0.25\n',
        )
    )
    master_config.key_file.parent.mkdir(parents=True, mode=0o700)
    generate_key(master_config.key_file)
    record = root / "hooks-ran"
    async with trio.open_nursery() as nursery:
        master = MasterDaemon(config=master_config, handle_signals=False)
        await nursery.start(master.serve)
        master_url = next(u for u in master.urls if not u.startswith("http://unix"))
        nodes: list[_Node] = []
        for rack, names in RACKS:
            for name in names:
                home = root / name
                failures = SLOW_FAILURES if name == SLOW_NODE else 0
                hook = write(home / "reboot.sh", _HOOK.format(record=record, seconds=times.reboot))
                check = write(home / "health.sh", _CHECK.format(home=home, failures=failures))
                hook.chmod(0o755)
                check.chmod(0o755)
                agent = await start_agent(
                    nursery,
                    home,
                    name,
                    master_url=master_url,
                    key_file=master_config.key_file,
                    tables=f"[policy]\nmax_job_retirement_time = {times.retirement}\n"
                    "machine_max_vacate_time = 2\n"
                    f'[attributes]\nRack = "{rack}"\n'
                    f'[hooks.reboot]\ncommand = ["{hook}"]\ntimeout = "30s"\n'
                    f'[health]\ncommand = ["{check}"]\ntimeout = "5s"\n'
                    f"interval = {times.health_interval}\npasses = 1\n",
                )
                nodes.append(_Node(name=name, rack=rack, agent=agent, home=home))
        say(
            "a master and six agents in three racks (r1: node1 node2, r2: node3 node4, "
            "r3: node5 node6); each node has a 'reboot' hook and a health check "
            f"({SLOW_NODE}'s uplink takes {SLOW_FAILURES} checks to come up)"
        )
        for node in nodes:
            await _start_instance(node, times, pids)
        say(f"service {GROUP}: six instances, one per node, each promised {times.retirement}s")
        async with unix_client(master.socket) as m:
            policy = {
                "kind": "percentage",
                "percentage": times.sla_percentage,
                "duration": times.sla_duration,
                "size": 6,
            }
            (await m.put(f"/v1/sla/policies/{GROUP}", json=policy)).raise_for_status()
            needed = math.ceil(6 * times.sla_percentage / 100)
            say(
                f"SLA of {GROUP}: at least {times.sla_percentage:g}% ({needed} of 6) up, "
                f"each for at least {times.sla_duration:g}s"
            )
            await _wait_for_ads(m, len(nodes))
            await _wait_until_safe(m, [n.name for n in nodes])
            await trio.sleep(1.0)  # the operation's check counts whole seconds, rounded up
            say(
                "the probe says every rack may go now: the instances have been up "
                f"{times.sla_duration:g}s"
            )
            body = {
                "hosts": [n.name for n in nodes],
                "grouping": "Rack",
                "batches": 1,
                "hook": "reboot",
                "sla_wait": 60,
            }
            reply = await m.post("/v1/maintenance/operations", json=body)
            reply.raise_for_status()
            operation = reply.json()["id"]
            say(
                f"rolling maintenance {operation} posted: all six nodes, one rack at a time, "
                "each drained gracefully, rebooted by its hook, back once healthy"
            )
            watcher = _Watcher(nodes=nodes, times=times, pids=pids, narrator=narrator)
            status = await watcher.follow(m, operation, needed)
        ran = record.read_text().split() if record.exists() else []
        counts = {n.name: ran.count(n.name) for n in nodes}
        if any(count != 1 for count in counts.values()):
            say(f"hooks did not run exactly once per node: {counts}")
            status = 1
        else:
            say("each node's reboot hook ran exactly once")
        for node in nodes:
            node.agent.stop()
        master.stop()
    return status


async def _start_instance(node: _Node, times: RollingTimes, pids: set[int]) -> None:
    async with unix_client(node.agent.config.socket) as c:
        reply = await c.post(
            "/v1/claims",
            json={
                "command": [sys.executable, "-c", JOB],
                "cpus": 1,
                "max_job_retirement_time": times.retirement,
                "owner": "www-data",
                "group": GROUP,
            },
        )
        reply.raise_for_status()
        pids.add(reply.json()["job"]["pid"])


async def _wait_for_ads(master: httpx.AsyncClient, count: int) -> None:
    """Until the master holds every node's ad with its instance."""
    with trio.move_on_after(15):
        while True:
            query = {"constraint": f'JobGroup == "{GROUP}"', "slots": "true"}
            ads = (await master.get("/v1/ads", params=query)).json()["ads"]
            if len(ads) >= count:
                return
            await trio.sleep(0.2)


async def _wait_until_safe(master: httpx.AsyncClient, hosts: list[str]) -> None:
    """Until the SLA probe says each rack may go (the instances have been up long enough)."""
    with trio.move_on_after(30):
        while True:
            query = {"hosts": ",".join(hosts), "grouping": "Rack"}
            probe = (await master.get("/v1/sla/probe", params=query)).json()
            if all(group["safe"] for group in probe["host_groups"]):
                return
            await trio.sleep(0.25)


@dataclass
class _Watcher:
    """Follows the operation, narrating it, and plays the service's scheduler."""

    nodes: Sequence[_Node]
    times: RollingTimes
    pids: set[int]
    narrator: Narrator

    async def follow(self, master: httpx.AsyncClient, operation: str, needed: int) -> int:
        say = self.narrator.say
        started = time.time()
        fewest = 6
        done: set[str] = set()
        while True:
            doc = (await master.get(f"/v1/maintenance/operations/{operation}")).json()
            ads = {n.name: await _ad(n.agent) for n in self.nodes}
            running = {name: _instances(ad) for name, ad in ads.items()}
            fewest = min(fewest, sum(running.values()))
            self._narrate(doc, done)
            for name in sorted(n for n, ad in ads.items() if ad["machine"]["Start"]):
                if name in done:
                    continue
                if any(n["name"] == name and n["phase"] == "done" for n in _nodes(doc)):
                    done.add(name)
            await self._reschedule(ads, running, done)
            if doc["state"] in ("completed", "cancelled") or doc["ended_at"] is not None:
                break
            if doc["state"] == "paused" or time.time() - started > self.times.limit:
                say(f"the operation stopped: {doc['state']} ({doc.get('reason')})")
                return 1
            await trio.sleep(0.25)
        say(
            f"operation {operation} {doc['state']} in {time.time() - started:.0f}s; "
            f"the service never had fewer than {fewest} of 6 instances running "
            f"(its SLA asks {needed})"
        )
        every = all(ad["machine"]["Start"] for ad in [await _ad(n.agent) for n in self.nodes])
        say("every node is back in service" if every else "some node is still closed")
        return 0 if doc["state"] == "completed" and fewest >= needed and every else 1

    def _narrate(self, doc: dict[str, Any], done: set[str]) -> None:
        say = self.narrator.say
        for batch in doc["batches"]:
            name, state, reason = batch["name"], batch["state"], batch.get("reason")
            if state == "waiting" and isinstance(reason, dict) and reason.get("code") == "sla":
                until = reason.get("until")
                when = (
                    f" (the instances elsewhere will have been up long enough in "
                    f"{max(0.0, until - time.time()):.1f}s)"
                    if until
                    else ""
                )
                say(
                    f"rack {name} waits: taking it now would break the SLA of "
                    f"{', '.join(reason.get('groups') or [GROUP])}{when}",
                    key=f"{name}-sla-{until}",
                )
            elif state != "waiting":
                say(f"rack {name}: {state}", key=f"{name}-{state}")
            for node in batch["nodes"]:
                phase, why = node["phase"], node.get("reason")
                if phase == "waiting":
                    continue
                # A step that began and ended between two looks is told all the same, in
                # its order: a short hook is still a hook that ran.
                steps = [phase]
                if phase in _STEPS:
                    steps = list(_STEPS[: _STEPS.index(phase) + 1])
                for step in steps:
                    text = _STEP_TEXT.get(step, step)
                    say(f"{node['name']}: {text}", key=f"{node['name']}-{step}")
                # A failing check after the step it belongs to (told waiting for it).
                if phase == "health" and why and "failing" in str(why):
                    say(f"{node['name']}: {why}", key=f"{node['name']}-{why}")

    async def _reschedule(
        self, ads: dict[str, dict[str, Any]], running: dict[str, int], done: set[str]
    ) -> None:
        """Start the instances the drains ended again, on open nodes: those maintained
        first, then the least loaded rack and node."""
        missing = 6 - sum(_instances(ad, alive=True) for ad in ads.values())
        for _ in range(missing):
            open_nodes = [n for n in self.nodes if ads[n.name]["machine"]["Start"]]
            if not open_nodes:
                return
            per_rack: dict[str, int] = {}
            for n in self.nodes:
                per_rack[n.rack] = per_rack.get(n.rack, 0) + running[n.name]
            node = min(
                open_nodes,
                key=lambda n: (n.name not in done, per_rack[n.rack], running[n.name], n.name),
            )
            await _start_instance(node, self.times, self.pids)
            running[node.name] += 1
            ads[node.name]["slots"].append({"JobGroup": GROUP, "State": "Claimed"})
            self.narrator.say(
                f"scheduler: an instance of {GROUP} evicted by the drain starts again on "
                f"{node.name} ({node.rack}{', maintained' if node.name in done else ''})"
            )


#: A node's steps in an operation, in their order, and how the story tells each.
_STEPS = ("draining", "hook", "health", "done")
_STEP_TEXT = {
    "draining": "draining (graceful: its instance keeps its promise)",
    "hook": "empty; its reboot hook runs",
    "health": "rebooted; waiting for its health check",
    "done": "healthy, back in service",
}


def _nodes(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [node for batch in doc["batches"] for node in batch["nodes"]]


def _instances(ad: dict[str, Any], *, alive: bool = False) -> int:
    """The service's instances on a node: running (Claimed, Busy or Retiring), or with
    ``alive`` every claim of the group still there (being evicted included)."""
    count = 0
    for slot in ad["slots"]:
        if slot.get("JobGroup") != GROUP or slot.get("State") not in ("Claimed", "Preempting"):
            continue
        if alive or (
            slot.get("State") == "Claimed" and slot.get("Activity") in ("Busy", "Retiring")
        ):
            count += 1
    return count


async def _ad(agent: AgentDaemon) -> dict[str, Any]:
    async with unix_client(agent.config.socket) as c:
        ad: dict[str, Any] = (await c.get("/v1/ad")).json()
        return ad
