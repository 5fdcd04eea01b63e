"""``nodeagent demo``: a master and three agents going through a maintenance window.

Everything is real: the daemons serve HTTP on loopback and Unix sockets in a
temporary directory, the jobs are processes that receive real signals. The story:

1. a master and three agents start; each agent runs jobs with different retirement
   promises (and one node runs a job whose promise outlasts the window);
2. a maintenance window for all three machines is posted a minute ahead;
3. the master plans and starts each node's graceful drain just in time: the nodes refuse
   new work whose promise would outlive the window, so each takes work that fits until
   its drain starts, its vacate time and the margin before the window (a scheduler asking
   too long a promise is told the longest that still fits, and asks for that); jobs are
   evicted at their promises and the nodes are empty by the window, except the late one,
   which the plan shows late and which is escalated when the window starts;
4. the machines are brought down (and stay closed), then up when their window ends: they
   resume.

The workload's side runs beside it: the jobs belong to two job groups (a web service and
a batch pipeline), each with its scheduler holding a token for its own group. The master
gives each group a notice for each machine it runs on, with each promise's two verdicts;
the web scheduler accepts its notices, the batch scheduler declines its with a reason, and
a new batch job whose promise would outlive the window is refused by its node (409
``machine.window_ahead``, naming the longest promise the node can still keep). The operator
reads the answers in
``GET /v1/notices``, ``GET /maintenance/status`` and the event stream.

The demo ends every process it started, by pid, and removes its directory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

from nodeagent._auth import Scope, create_token, generate_key, load_key
from nodeagent.agent._config import load_agent_config
from nodeagent.agent._daemon import AgentDaemon
from nodeagent.cli._render import verdict_sentence
from nodeagent.master._config import load_master_config
from nodeagent.master._daemon import MasterDaemon

__all__ = [
    "BATCH",
    "JOB",
    "WEB",
    "DemoTimes",
    "Narrator",
    "run_demo",
    "start_agent",
    "unix_client",
    "write",
]

_NS = 1_000_000_000
#: The demo's two job groups: a web service and a batch pipeline.
WEB = "www-data/prod/web"
BATCH = "batch/dev/etl"

#: A job: sleeps; on SIGTERM it takes a moment to save its work, then exits.
JOB = (
    "# nodeagent-demo-job\n"
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.8), sys.exit(0)))\n"
    "time.sleep(3600)\n"
)


@dataclass(frozen=True, kw_only=True)
class DemoTimes:
    """The demo's clock: when the window is, the promises, when work arrives."""

    window_in: float = 60.0
    window_length: float = 20.0
    machine_retirement: int = 20  # node1 and node2's MaxJobRetirementTime
    late_retirement: int = 120  # node3 promises more than the window allows
    vacate: int = 3
    margin: float = 5.0
    #: Each node's first jobs' promises; the last of each node's is a batch job, the
    #: others (and every job of the second wave) web instances.
    first_wave: tuple[tuple[int, ...], ...] = ((8, 14), (20, 20), (120,))
    #: New work arriving shortly before the drains, asking these promises (too long: each
    #: is refused, and asked again with the longest that fits).
    second_wave_at: float = 44.0
    second_wave: tuple[tuple[int, ...], ...] = ((60,), (60,), ())

    @classmethod
    def fast(cls) -> DemoTimes:
        return cls(
            window_in=20.0,
            window_length=6.0,
            machine_retirement=6,
            late_retirement=60,
            vacate=1,
            margin=1.0,
            first_wave=((2, 4), (6, 6), (60,)),
            second_wave_at=15.0,
            second_wave=((30,), (30,), ()),
        )


@dataclass
class Narrator:
    """Prints what happens, once, with the time since the demo started."""

    started: float
    out: Callable[[str], None]
    seen: set[str] = field(default_factory=set)

    def say(self, text: str, *, key: str | None = None) -> None:
        if key is not None:
            if key in self.seen:
                return
            self.seen.add(key)
        self.out(f"[{time.time() - self.started:6.1f}s] {text}")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@contextlib.asynccontextmanager
async def unix_client(socket: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(socket)), base_url="http://local", timeout=10
    ) as client:
        yield client


async def start_agent(
    nursery: trio.Nursery,
    home: Path,
    name: str,
    *,
    master_url: str,
    key_file: Path,
    tables: str,
) -> AgentDaemon:
    """Start an agent named ``name`` in ``home`` (4 cores, loopback) reporting to the master
    at ``master_url``: its own node's DAEMON token signed with the pool key in ``key_file``,
    a copy of that key, and the TOML ``tables`` (its policy, attributes, hooks …) in its
    configuration."""
    key = load_key(key_file)
    token = create_token(
        key,
        subject=f"agent:{name}",
        scope=Scope.DAEMON,
        lifetime_s=3600,
        now=time.time(),
        node=name,
    )
    write(home / "daemon.token", token)
    copy = home / "state" / "pool.key"
    copy.parent.mkdir(parents=True, mode=0o700)
    shutil.copyfile(key_file, copy)
    copy.chmod(0o600)
    config = load_agent_config(
        write(
            home / "agent.toml",
            f'hostname = "{name}"\nip = "127.0.0.1"\n'
            f'state_dir = "{home / "state"}"\nruntime_dir = "{home / "run"}"\n'
            'listen = ["127.0.0.1:0"]\n'
            "[resources]\ncpus = 4\nmemory_mib = 4096\ndisk_kib = 1000000\n"
            f"{tables}"
            # The demo's nodes are pretend ones: the real machine's shutdown is not theirs.
            "[shutdown]\nenabled = false\n"
            f'[master]\nurl = "{master_url}"\ntoken_file = "{home / "daemon.token"}"\n'
            "update_interval = 1\nad_debounce = 0.05\n",
        )
    )
    agent = AgentDaemon(config=config, handle_signals=False)
    await nursery.start(agent.serve)
    return agent


async def run_demo(
    times: DemoTimes, *, out: Callable[[str], None] = print, rolling: bool = False
) -> int:
    """Run the story; returns 0 when every node was empty or escalated as planned. With
    ``rolling``, the rack-by-rack story of :mod:`nodeagent.cli._demo_rolling` instead."""
    # The story is told by the narrator; the daemons' own logs would drown it.
    logging.getLogger("nodeagent").setLevel(logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="nodeagent-demo-"))
    narrator = Narrator(time.time(), out)
    pids: set[int] = set()
    try:
        if rolling:
            from nodeagent.cli._demo_rolling import RollingTimes, rolling_story  # noqa: PLC0415

            return await rolling_story(root, RollingTimes(), narrator, pids)
        return await _story(root, times, narrator, pids)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
        narrator.say(f"cleaned up: {len(pids)} job process groups ended, {root} removed")


async def _story(root: Path, times: DemoTimes, narrator: Narrator, pids: set[int]) -> int:
    say = narrator.say
    master_config = load_master_config(
        write(
            root / "master" / "master.toml",
            f'state_dir = "{root / "master" / "state"}"\n'
            f'runtime_dir = "{root / "master" / "run"}"\n'
            'listen = ["127.0.0.1:0"]\n'
            f"reconcile_interval = 0.25\ndrain_margin = {times.margin}\n"
            'escalation = "quick"\n',
        )
    )
    master_config.key_file.parent.mkdir(parents=True, mode=0o700)
    generate_key(master_config.key_file)
    names = ["node1.demo", "node2.demo", "node3.demo"]
    async with trio.open_nursery() as nursery:
        master = MasterDaemon(config=master_config, handle_signals=False)
        await nursery.start(master.serve)
        master_url = next(u for u in master.urls if not u.startswith("http://unix"))
        say(f"master listening on {master_url}")
        agents: list[AgentDaemon] = []
        for name in names:
            home = root / name
            late = name == names[-1]
            retirement = times.late_retirement if late else times.machine_retirement
            agent = await start_agent(
                nursery,
                home,
                name,
                master_url=master_url,
                key_file=master_config.key_file,
                tables=f"[policy]\nmax_job_retirement_time = {retirement}\n"
                f"machine_max_vacate_time = {times.vacate}\n",
            )
            agents.append(agent)
        say(
            f"three agents up, 4 cores each; MaxJobRetirementTime {times.machine_retirement}s "
            f"(node3: {times.late_retirement}s), vacate time {times.vacate}s"
        )

        started = time.time()
        for agent, promises in zip(agents, times.first_wave, strict=True):
            await _start_jobs(agent, promises, pids, narrator, groups=_groups(promises))
        window_start = time.time() + times.window_in
        second_wave = functools.partial(
            _second_wave,
            agents,
            times,
            narrator,
            started=started,
            window_start=window_start,
            pids=pids,
        )
        nursery.start_soon(second_wave)

        schedule = {
            "windows": [
                {
                    "machine_ids": [{"hostname": n, "ip": "127.0.0.1"} for n in names],
                    "unavailability": {
                        "start": {"nanoseconds": int(window_start * _NS)},
                        "duration": {"nanoseconds": int(times.window_length * _NS)},
                    },
                }
            ]
        }
        async with unix_client(master.socket) as m:
            (await m.post("/maintenance/schedule", json=schedule)).raise_for_status()
            say(
                f"maintenance window posted: all three machines, in {times.window_in:.0f}s, "
                f"for {times.window_length:.0f}s (mode DRAINING)"
            )
            await _narrate_plan(m, narrator, names, window_start)
            await _workloads(
                m,
                master_url,
                master_config.key_file,
                agents[-1],
                narrator,
                notices=sum(len(set(_groups(p))) for p in times.first_wave),
                window_end=window_start + times.window_length,
                promise=times.late_retirement,
            )
            status = await _watch(agents, narrator, window_start, window_start + times.vacate + 2)
            ids = [{"hostname": n, "ip": "127.0.0.1"} for n in names]
            (await m.post("/machine/down", json=ids)).raise_for_status()
            say("window open: machines DOWN; the nodes stay closed for maintenance")
            for agent in agents:
                ad = await _ad(agent)
                say(f"{agent.config.hostname}: Start={ad['Start']} DrainState={ad['DrainState']}")
            # The machines come back when their window ends, as posted.
            await trio.sleep(max(0.0, window_start + times.window_length - time.time()))
            (await m.post("/machine/up", json=ids)).raise_for_status()
            say(
                f"the window ends ({times.window_length:.0f}s after it started): maintenance "
                "done, machines UP; the master cancels its drains"
            )
            with trio.move_on_after(15):
                while True:
                    ads = [await _ad(a) for a in agents]
                    if all(ad["Start"] for ad in ads):
                        break
                    await trio.sleep(0.2)
            for agent in agents:
                ad = await _ad(agent)
                say(
                    f"{agent.config.hostname}: resumed, Start={ad['Start']}, "
                    f"{ad['TotalCpus']} cores free, lost work so far "
                    f"{ad['TotalMachineDrainingBadput']} core-s"
                )
            plan = (await m.get("/v1/maintenance/plan")).json()
            totals = plan["totals"]
            say(
                f"master: {totals['drains_started']} drains started just in time, "
                f"{totals['drains_escalated']} escalated at the window, "
                f"{totals['down_drains']} machines downed"
            )
            await _tell_events(m, say)
        for agent in agents:
            agent.stop()
        master.stop()
    return status


async def _tell_events(m: httpx.AsyncClient, say: Callable[[str], None]) -> None:
    """What the master's event stream recorded of the window (GET /v1/events): how many
    events of each kind, and the escalations with the promises they cut."""
    params = {"since": "0", "follow": "false", "format": "jsonl"}
    reply = await m.get("/v1/events", params=params)
    events = [json.loads(line) for line in reply.text.splitlines() if line]
    kinds: dict[str, int] = {}
    for event in events:
        kinds[event["type"]] = kinds.get(event["type"], 0) + 1
    shown = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
    say(f"master: {len(events)} events recorded ({shown})")
    for event in events:
        answer = event["facts"].get("answer") or {}
        if event["type"] == "drain.escalated" or answer.get("verdict") == "decline":
            say(f"  event {event['id']}: {event['text']}")


def _groups(promises: tuple[int, ...]) -> list[str]:
    """The job groups of a node's first jobs: the last one batch, the others web."""
    return [WEB] * (len(promises) - 1) + [BATCH] if promises else []


def _claim(promise: int, group: str) -> dict[str, Any]:
    return {
        "command": [sys.executable, "-c", JOB],
        "cpus": 1,
        "max_job_retirement_time": promise,
        "owner": "demo",
        "group": group,
    }


async def _start_jobs(
    agent: AgentDaemon,
    promises: tuple[int, ...],
    pids: set[int],
    narrator: Narrator,
    *,
    groups: list[str] | None = None,
) -> None:
    if not promises:
        return
    groups = groups or [WEB] * len(promises)
    async with unix_client(agent.config.socket) as c:
        for promise, group in zip(promises, groups, strict=True):
            reply = await c.post("/v1/claims", json=_claim(promise, group))
            reply.raise_for_status()
            pids.add(reply.json()["job"]["pid"])
    shown = ", ".join(f"{p}s ({g.split('/')[0]})" for p, g in zip(promises, groups, strict=True))
    narrator.say(f"{agent.config.hostname}: jobs started, retirement promises {shown}")


class _Scheduler:
    """A job group's scheduler talking to the master over HTTP with a token for its own
    groups: lists its notices (``GET /v1/notices?group=``) and answers them (``POST
    /v1/notices/{id}/accept`` or ``/decline``)."""

    def __init__(self, http: httpx.AsyncClient, group: str) -> None:
        self.http = http
        self.group = group

    async def notices(self) -> list[dict[str, Any]]:
        reply = await self.http.get("/v1/notices", params={"group": self.group})
        reply.raise_for_status()
        found: list[dict[str, Any]] = reply.json()["notices"]
        return found

    async def accept(
        self, notice_id: str, *, reason: str, expected_completion: float | None = None
    ) -> dict[str, Any]:
        return await self._answer("accept", notice_id, reason, expected_completion)

    async def decline(
        self, notice_id: str, *, reason: str, expected_completion: float | None = None
    ) -> dict[str, Any]:
        return await self._answer("decline", notice_id, reason, expected_completion)

    async def _answer(
        self, verb: str, notice_id: str, reason: str, expected_completion: float | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"reason": reason}
        if expected_completion is not None:
            body["expected_completion"] = expected_completion
        reply = await self.http.post(f"/v1/notices/{notice_id}/{verb}", json=body)
        reply.raise_for_status()
        answered: dict[str, Any] = reply.json()
        return answered


@contextlib.asynccontextmanager
async def _scheduler(
    master_url: str, key_file: Path, group: str, pattern: str
) -> AsyncIterator[_Scheduler]:
    """A scheduler of ``group`` with a READ token that answers for ``pattern``."""
    token = create_token(
        load_key(key_file),
        subject=f"{group.split('/', maxsplit=1)[0]}-scheduler",
        scope=Scope.READ,
        lifetime_s=3600,
        now=time.time(),
        groups=(pattern,),
    )
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=master_url, headers=headers, timeout=10) as http:
        yield _Scheduler(http, group)


def _verdicts(claims: list[dict[str, Any]]) -> str:
    """A notice's claims told by their two verdicts (their promise, the plan's cut)."""
    now = time.time()
    told = []
    for claim in claims:
        end, cut = claim.get("promise_end"), claim.get("cut_by")
        said = "promise" if end is None else f"promise ends in {max(0.0, end - now):.0f}s"
        if cut is None:
            said += ", verdict not known"
        elif cut > 0:
            said += f", cut by {cut:.0f}s at the window"
        else:
            said += ", kept"
        told.append(said)
    return "; ".join(told)


async def _workloads(
    m: httpx.AsyncClient,
    master_url: str,
    key_file: Path,
    agent: AgentDaemon,
    narrator: Narrator,
    *,
    notices: int,
    window_end: float,
    promise: int,
) -> None:
    """The workloads' side: each group's scheduler reads its notices and answers them (the
    web one accepts, the batch one declines with a reason), a batch job that would outlive
    the window is refused by ``agent``'s node, and the operator reads the answers."""
    say = narrator.say
    with trio.move_on_after(10):
        while True:
            if len((await m.get("/v1/notices")).json()["notices"]) >= notices:
                break
            await trio.sleep(0.2)
    async with (
        _scheduler(master_url, key_file, WEB, "www-data/*") as web,
        _scheduler(master_url, key_file, BATCH, "batch/*") as batch,
    ):
        for notice in await web.notices():
            await web.accept(notice["id"], reason="web instances move by themselves")
            say(
                f"web scheduler: notice of {notice['machine']} ({_verdicts(notice['claims'])}) "
                "accepted"
            )
        for notice in await batch.notices():
            ends = [c["promise_end"] for c in notice["claims"] if c.get("promise_end")]
            expected = min([window_end, *ends]) if ends else None
            await batch.decline(
                notice["id"],
                reason="month-end ETL, each run keeps its promise",
                expected_completion=expected,
            )
            say(
                f"batch scheduler: notice of {notice['machine']} "
                f"({_verdicts(notice['claims'])}) declined: month-end ETL"
            )
    # A new batch job whose promise would end after the window starts: refused by the node
    # (its policy's before_window = "refuse": 409 machine.window_ahead, with the longest
    # promise it can keep) once the master told it its window, or, once the master's
    # drain has closed it, as any claim on a draining node (409 machine.not_accepting).
    name = agent.config.hostname
    with trio.move_on_after(5):
        while True:
            if (await _ad(agent)).get("Unavailability"):
                break
            await trio.sleep(0.1)
    async with unix_client(agent.config.socket) as c:
        reply = await c.post("/v1/claims", json=_claim(promise, BATCH))
    if reply.status_code == 201:  # not expected: end it, it is not part of the story
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(reply.json()["job"]["pid"], signal.SIGKILL)
        say(f"batch scheduler: a new {promise}s job on {name} was admitted (unexpected)")
    else:
        error = reply.json().get("error", {})
        say(
            f"batch scheduler: a new {promise}s job refused by {name} "
            f"({reply.status_code} {error.get('code')}): {error.get('message')}"
        )
    # What the operator reads: the answers, with the reasons, and Mesos's status.
    for notice in (await m.get("/v1/notices")).json()["notices"]:
        answer = notice["answer"] or {}
        if answer.get("verdict") == "decline":
            say(
                f"operator: notices: {notice['machine']} {notice['group']} declined by "
                f"{answer['who']}: {answer['reason']!r}"
            )
    status = (await m.get("/maintenance/status")).json()
    for machine in status.get("draining_machines", []):
        answers = ", ".join(
            f"{s['framework_id']['value']} {s['status']}" for s in machine.get("statuses", [])
        )
        say(f"operator: /maintenance/status: {machine['id']['hostname']}: {answers}")


async def _second_wave(
    agents: list[AgentDaemon],
    times: DemoTimes,
    narrator: Narrator,
    *,
    started: float,
    window_start: float,
    pids: set[int],
) -> None:
    """New work shortly before the drains: each claim asks a promise that would outlive the
    window, is refused (409 ``machine.window_ahead``), and is asked again with the longest
    promise that still fits, as a scheduler that reads the refusal does; the node takes it
    (unless its drain has started meanwhile: said, not raised)."""
    await trio.sleep(max(0.0, started + times.second_wave_at - time.time()))
    narrator.say(
        f"new work arrives, the window in {window_start - time.time():.0f}s: the nodes take "
        "what fits before it until their drains start"
    )
    for agent, promises in zip(agents, times.second_wave, strict=True):
        name = agent.config.hostname
        async with unix_client(agent.config.socket) as c:
            for asked in promises:
                reply = await c.post("/v1/claims", json=_claim(asked, WEB))
                refusal = f"a web job asking a {asked}s promise refused"
                # A loaded machine may take long enough between the scheduler's sum and the
                # claim that the promise no longer fits: asked again, each time shorter (a
                # promise of 0 always fits, so this ends).
                while _code(reply) == "machine.window_ahead":
                    # the node holds the window in whole seconds (UnavailabilityStart)
                    fits = max(0, math.floor(math.floor(window_start) - time.time()))
                    narrator.say(
                        f"{name}: {refusal} (409 machine.window_ahead); the scheduler asks "
                        f"for the {fits}s that fit"
                    )
                    reply = await c.post("/v1/claims", json=_claim(fits, WEB))
                    refusal = f"the {fits}s asked refused too, as time went by"
                if reply.status_code >= 400:
                    refused = reply.json().get("error", {})
                    narrator.say(f"{name}: new work refused ({refused.get('code')})")
                    continue
                job = reply.json()["job"]
                pids.add(job["pid"])
                granted = job["retirement_granted"]
                narrator.say(f"{name}: jobs started, retirement promises {granted}s (www-data)")


def _code(reply: httpx.Response) -> str | None:
    """The error code of a refused request (``None``: not refused)."""
    if reply.status_code < 400:
        return None
    code = reply.json().get("error", {}).get("code")
    return code if isinstance(code, str) else None


async def _ad(agent: AgentDaemon) -> dict[str, Any]:
    async with unix_client(agent.config.socket) as c:
        machine: dict[str, Any] = (await c.get("/v1/ad")).json()["machine"]
        return machine


async def _narrate_plan(
    master: httpx.AsyncClient, narrator: Narrator, names: list[str], window_start: float
) -> None:
    with trio.move_on_after(10):
        while True:
            plan = (await master.get("/v1/maintenance/plan")).json()
            rows = {m["node"]: m for m in plan["machines"] if m["node"]}
            # Wait until every node's ad shows its jobs (pushed on the change).
            if len(rows) == len(names) and not any(r["empty"] for r in rows.values()):
                break
            await trio.sleep(0.2)
    for name in names:
        row = rows.get(name)
        if row is None:
            continue
        start = row["planned_drain_start"] - time.time()
        verdict = "on time" if row["on_time"] else f"LATE by {row['late_by']:.0f}s"
        closing = row.get("closing") or {}
        why = "just in time"
        if closing.get("by_promise"):
            before = window_start - row["planned_drain_start"]
            why = (
                f"just in time, {before:.0f}s before the window: it refuses promises that "
                "would outlive it"
            )
        narrator.say(
            f"plan: {name} drains in {max(0.0, start):.0f}s ({why}); "
            f"{verdict_sentence(row)} ({verdict} by its promises)"
        )


async def _watch(
    agents: list[AgentDaemon], narrator: Narrator, window_start: float, until: float
) -> int:
    """Narrate drains and evictions until ``until``; 0 when every node ended empty."""
    status = 0
    while time.time() < until:
        # Said first, so that what the window's start causes is told after it.
        if time.time() >= window_start:
            narrator.say("the window starts now", key="window")
        for agent in agents:
            name = agent.config.hostname
            async with unix_client(agent.config.socket) as c:
                ad = (await c.get("/v1/ad")).json()
                drain = (await c.get("/v1/drain")).json()
            machine = ad["machine"]
            if drain.get("state") in ("draining", "drained"):
                narrator.say(
                    f"{name}: master committed a graceful drain (request {drain['id']}, "
                    f"reason {drain['reason']!r})",
                    key=f"{name}-drain-{drain['id']}",
                )
            for slot in ad["slots"][1:]:
                if slot["Activity"] in ("Vacating", "Killing"):
                    promise = slot["MaxJobRetirementTime"]
                    ran = slot["TotalJobRunTime"]
                    when = (
                        "past its promise"
                        if ran > promise
                        else f"{ran}s into its {promise}s promise, to be gone by its end"
                    )
                    if machine.get("DrainingDeadline") and time.time() >= window_start:
                        when = f"at the window, {ran}s into its {promise}s promise (escalated)"
                        narrator.say("the window starts now", key="window")
                    narrator.say(
                        f"{name}: job {slot['JobId']} gets SIGTERM {when}",
                        key=f"{name}-evict-{slot['JobId']}",
                    )
            if machine["DrainState"] == "drained":
                early = window_start - time.time()
                when = f"{early:.0f}s before the window" if early > 0 else "after escalation"
                narrator.say(f"{name}: empty, Drained/Idle ({when})", key=f"{name}-drained")
        await trio.sleep(0.1)
    for agent in agents:
        machine = await _ad(agent)
        if machine["DrainState"] != "drained":
            narrator.say(f"{agent.config.hostname}: NOT empty at the window")
            status = 1
    return status
