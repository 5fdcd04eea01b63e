"""The agent under a kill -9 loop: real jobs, real SIGKILLs at random points, restarts.

One round (:func:`kill_loop`) on a fresh agent:

1. **Claims under fire.** ``jobs`` claims are sent one after another while the agent is
   SIGKILLed at a random moment; whatever the moment, after the restart every job process
   in the execute directory is a claim of the agent or gone, and every job whose program
   ran is a claim (held launch: a program runs only once its claim is recorded). The
   claims that were lost are made again, without kills.
2. **A drain under fire.** A graceful one-shot drain is committed; then, until the node is
   drained or ``max_kills`` is reached, the agent is restarted and SIGKILLed at a random
   moment from 0 to ``max_delay`` seconds after its start (so also while it starts); each
   time it answered before the kill, it is checked: the same request id, no orphan. Then
   it is started for good and the drain must complete.
3. Every job's first SIGTERM is compared with its promise: its start plus its
   ``MaxJobRetirementTime`` (the machine's, or its own when lower) minus the vacate time,
   or the commit when that is later. Before it by more than the 2 ms of ``started_at``'s
   rounding is an early eviction.

Shared by ``tests/integration/test_kill_loop.py`` (a round in the test suite) and
``tests/bench/kill_loop.py`` (many rounds, JSON figures). Every process started here is
ended here, by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.cli._errors import CliError
from nodeagent.cli._http import Target, call
from tests.harness import AgentProcess, job_script, wait_for

__all__ = ["Figures", "kill_loop"]

#: ``started_at`` is rounded to the millisecond.
ROUNDING = 0.002


@dataclass
class Figures:
    """What one round (or several, added up) saw."""

    rounds: int = 0
    kills: int = 0
    kills_while_starting: int = 0
    checks: int = 0
    claims: int = 0
    claims_lost_in_a_kill: int = 0
    evictions: int = 0
    #: Jobs whose first signal from the agent was its SIGKILL: the agent decided (and
    #: wrote) their SIGTERM, was killed before it sent it, and came back past their vacate
    #: time (their promise kept, their SIGTERM never sent).
    killed_unwarned: int = 0
    early_evictions: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    request_id_changes: list[str] = field(default_factory=list)
    undrained: int = 0
    lateness: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, other: Figures) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)

    @property
    def sound(self) -> bool:
        """No early eviction, no orphan, one request id, every drain completed."""
        return not (
            self.early_evictions or self.orphans or self.request_id_changes or self.undrained
        )


def _spawn(agent: AgentProcess) -> None:
    """Start the daemon without waiting for it (as :meth:`AgentProcess.start` does)."""
    info = agent.root / "run" / "nodeagent.json"
    with contextlib.suppress(FileNotFoundError):
        info.unlink()
    with agent.log_path.open("ab") as log:
        agent.proc = subprocess.Popen(
            [sys.executable, "-m", "nodeagent", *agent.command, "--config", str(agent.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NOTIFY_SOCKET": ""},
        )


def _killed_unwarned(log: str) -> int:
    """The claims whose first signal the agent's log shows is SIGKILL."""
    first: dict[str, str] = {}
    for claim, signal_name in re.findall(r"claim (\S+): (SIG[A-Z]+) to process group", log):
        first.setdefault(claim, signal_name)
    return sum(name == "SIGKILL" for name in first.values())


def _answering(agent: AgentProcess) -> bool:
    assert agent.proc is not None
    try:
        info = json.loads((agent.root / "run" / "nodeagent.json").read_text())
    except (FileNotFoundError, ValueError):
        return False
    return bool(info["pid"] == agent.proc.pid)


def _kill(agent: AgentProcess) -> None:
    assert agent.proc is not None
    if agent.proc.poll() is None:
        agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait(timeout=20)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _in_execute_dir(execute_dir: Path) -> set[int]:
    """Live processes whose working directory is inside ``execute_dir``."""
    found = set()
    inside = execute_dir.resolve()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd.is_relative_to(inside) and _alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def _claims(agent: AgentProcess) -> list[dict[str, Any]]:
    with agent.client() as c:
        claims: list[dict[str, Any]] = c.get("/v1/claims").json()["claims"]
    agent.job_pids.update(x["job"]["pid"] for x in claims if x["job"]["pid"])
    return claims


def _orphans(agent: AgentProcess, records: list[Path]) -> list[str]:
    """Job processes that are not claims of the agent, and programs that ran unclaimed.

    A holder whose claim was never recorded ends by itself once the daemon that held it
    is gone: it gets two seconds to do so.
    """
    claimed = {x["job"]["pid"] for x in _claims(agent)}
    execute_dir = agent.root / "state" / "execute"
    try:
        clean = wait_for(lambda: not (_in_execute_dir(execute_dir) - claimed), timeout=2)
    except TimeoutError:
        clean = False
    problems = []
    if not clean:
        for pid in sorted(_in_execute_dir(execute_dir) - claimed):
            agent.job_pids.add(pid)
            problems.append(f"process {pid} in {execute_dir} is no claim's job")
    for record in records:
        started = Path(f"{record}.started")
        if started.exists() and int(started.read_text()) not in claimed:
            pid = int(started.read_text())
            if _alive(pid):
                agent.job_pids.add(pid)
                problems.append(f"job {record.name} (pid {pid}) ran without a claim")
    return problems


def _first_sigterm(record: Path) -> float | None:
    try:
        return float(record.read_text().split()[0])
    except (FileNotFoundError, IndexError):
        return None


def kill_loop(
    root: Path,
    rng: random.Random,
    *,
    jobs: int = 4,
    retirement: int = 5,
    vacate: int = 1,
    max_kills: int = 6,
    max_delay: float = 2.0,
) -> Figures:
    """One round on a fresh agent under ``root`` (see the module docstring)."""
    began = time.monotonic()
    figures = Figures(rounds=1)
    policy = {"max_job_retirement_time": retirement, "machine_max_vacate_time": vacate}
    with AgentProcess(root / "agent", policy=policy, cpus=2 * jobs) as agent:
        # 1. Claims under fire.
        specs = []
        for i in range(jobs):
            own = rng.choice([None, *range(vacate + 1, retirement + 3)])
            # One job in four ignores SIGTERM: only the hard kill ends it.
            argv, record = job_script(root, f"job{i}", term_delay=-1 if i % 4 == 3 else 0)
            specs.append((argv, record, own))

        def claim(argv: list[str], own: int | None) -> int | None:
            fields = {} if own is None else {"max_job_retirement_time": own}
            try:
                # The standard library's client: it closes its socket when the agent dies.
                reply = call(
                    Target(unix=agent.socket), "POST", "/v1/claims", {"command": argv, **fields}
                )
            except CliError:
                return None
            return int(reply.data["job"]["pid"]) if reply.status == 201 else None

        def send_all() -> None:
            for argv, _, own in specs:
                if claim(argv, own) is None:
                    return

        sender = threading.Thread(target=send_all)
        sender.start()
        time.sleep(rng.uniform(0.0, 0.4))
        _kill(agent)
        figures.kills += 1
        sender.join(timeout=60)
        agent.start()
        figures.orphans += _orphans(agent, [r for _, r, _ in specs])
        figures.checks += 1
        claimed_argv = {tuple(x["job"]["argv"]) for x in _claims(agent)}
        for argv, _, own in specs:
            if tuple(argv) not in claimed_argv:
                figures.claims_lost_in_a_kill += 1
                if claim(argv, own) is None:
                    raise RuntimeError(
                        f"claim refused without a kill:\n{agent.log_path.read_text()}"
                    )
        claims = _claims(agent)
        figures.claims += len(claims)
        for record in (r for _, r, _ in specs):
            wait_for(lambda record=record: Path(f"{record}.started").exists(), timeout=20)

        # 2. A drain under fire.
        committed = time.time()
        with agent.client() as c:
            drain = c.post("/v1/drain", json={"schedule": "graceful", "commit": True}).json()
        request_id = drain["id"]
        records = {tuple(x["job"]["argv"]): x for x in claims}
        drained = False
        for _ in range(max_kills):
            # The agent runs (or starts): a random while, checked if it answers, then killed.
            deadline = time.monotonic() + rng.uniform(0.0, max_delay)
            checked = False
            while not drained and time.monotonic() < deadline:
                if not checked and _answering(agent):
                    checked = True
                    with agent.client() as c:
                        seen = c.get("/v1/drain").json()
                    if seen.get("id") != request_id:
                        figures.request_id_changes.append(f"{request_id} became {seen}")
                    drained = seen.get("state") == "drained"
                    figures.orphans += _orphans(agent, [r for _, r, _ in specs])
                    figures.checks += 1
                time.sleep(0.01)
            if drained:
                break
            if not _answering(agent):
                figures.kills_while_starting += 1
            _kill(agent)
            figures.kills += 1
            _spawn(agent)
        try:
            wait_for(lambda: _answering(agent), timeout=30)
            with agent.client() as c:
                wait_for(lambda: c.get("/v1/drain").json()["state"] == "drained", timeout=60)
                final = c.get("/v1/drain").json()
        except TimeoutError:
            figures.undrained += 1
            final = {}
        if final.get("id") != request_id:
            figures.request_id_changes.append(f"{request_id} ended as {final}")

        # 3. Promises.
        for argv, record, own in specs:
            claim_info = records.get(tuple(argv))
            if claim_info is None:
                continue
            machine = retirement if own is None else min(own, retirement)
            promise = max(claim_info["job"]["started_at"] + machine - vacate, committed)
            received = _first_sigterm(record)
            if received is None:
                continue  # it ended on its own (it does not)
            figures.evictions += 1
            figures.lateness.append(received - promise)
            if received < promise - ROUNDING:
                figures.early_evictions.append(
                    f"{record.name}: SIGTERM {promise - received:.3f} s before its promise"
                )
        figures.killed_unwarned += _killed_unwarned(agent.log_path.read_text())
        leftovers = [pid for pid in agent.job_pids if _alive(pid)]
        if leftovers:
            figures.orphans.append(f"still running once drained: {leftovers}")
    figures.seconds = time.monotonic() - began
    return figures
