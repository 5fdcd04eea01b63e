"""What the agent runs around a drain: its completion hooks and its health check.

The commands come from the configuration only (``[hooks.NAME]``, ``[health]``): a
request names a hook, it never supplies a command. This module holds them as the agent
runs them (:class:`HookSpec`, :class:`HealthSpec`), the environment a hook gets
(:func:`hook_environment`), how a program is run (:func:`reaped`: under the agent's
reaper, :mod:`nodeagent.agent._reaper`, which ends whatever the program leaves running
and keeps the last :data:`OUTPUT_FILE_LIMIT` bytes of its output in a file) and run to
its end within its time (:func:`run_to_end`: at the timeout SIGTERM to its process
group, which the reaper passes on to every process the program started, then SIGKILL
after :data:`KILL_GRACE`), the tail of its output and how much of it was not kept
(:func:`read_output`), the pruning of old runs' directories (:func:`prune_runs`), the
machine's boot id (:func:`read_boot_id`) and the counts the metrics publish
(:class:`HookCounts`).

The agent (:class:`~nodeagent.agent._agent.Agent`) does the rest: it records a hook's
start durably before its program runs, and reports every end to the model.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import trio

from nodeagent.agent._config import AgentConfig
from nodeagent.agent._processes import JobProcess, ProcessError, Reaped, daemon_environment
from nodeagent.agent._reaper import DROPPED_SUFFIX
from slots import DrainRequest, HealthPolicy

__all__ = [
    "KEPT_RUNS",
    "KILL_GRACE",
    "OUTPUT_FILE_LIMIT",
    "REAPER_SLACK",
    "Ended",
    "HealthSpec",
    "HookCounts",
    "HookSpec",
    "Output",
    "health_spec",
    "hook_environment",
    "hook_specs",
    "prune_runs",
    "read_boot_id",
    "read_output",
    "reaped",
    "run_to_end",
]

#: Seconds between the SIGTERM that ends a program (at its timeout, or what it left
#: running when it exited) and the SIGKILL; the reaper keeps it.
KILL_GRACE = 10.0

#: Seconds the agent gives the reaper past :data:`KILL_GRACE` before it SIGKILLs the
#: run's process group itself (a reaper that cannot end: never seen, but bounded).
REAPER_SLACK = 5.0

#: The most bytes of a run's output its file keeps (the last ones; twice as many at
#: most while it runs). What the agent's state keeps is less (``slots.OUTPUT_LIMIT``).
OUTPUT_FILE_LIMIT = 64 * 1024

#: Hook runs whose directories :func:`prune_runs` keeps (the newest ones).
KEPT_RUNS = 8


@dataclass(frozen=True, kw_only=True)
class HookSpec:
    """One ``[hooks.NAME]`` table, as a run takes it when it starts (a reload changes
    the next run, never one under way)."""

    name: str
    command: tuple[str, ...]
    timeout: float
    reboots: bool = False
    user: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class HealthSpec:
    """The ``[health]`` table: the check's argv, its timeout, and the gate's schedule."""

    command: tuple[str, ...]
    timeout: float
    interval: float
    passes: int

    @property
    def policy(self) -> HealthPolicy:
        return HealthPolicy(passes=self.passes, interval=self.interval)


def hook_specs(config: AgentConfig) -> dict[str, HookSpec]:
    """The configured hooks by name."""
    return {
        name: HookSpec(
            name=name,
            command=tuple(hook.command),
            timeout=hook.timeout,
            reboots=hook.reboots,
            user=hook.user,
            environment=dict(hook.environment),
        )
        for name, hook in config.hooks.items()
    }


def health_spec(config: AgentConfig) -> HealthSpec | None:
    """The configured health check, if any."""
    health = config.health
    if health is None:
        return None
    return HealthSpec(
        command=tuple(health.command),
        timeout=health.timeout,
        interval=health.interval,
        passes=health.passes,
    )


def hook_environment(spec: HookSpec, *, node: str, request: DrainRequest) -> dict[str, str]:
    """A hook's environment: the daemon's (less what only the daemon may use), the hook's
    configured ``environment``, and ``NODEAGENT_HOOK``, ``NODEAGENT_NODE``,
    ``NODEAGENT_DRAIN_REQUEST_ID``, ``NODEAGENT_DRAIN_REASON``,
    ``NODEAGENT_DRAIN_SCHEDULE`` (the drain's; its reason is printable text the agent
    checked, and nothing else in it comes from a request)."""
    return {
        **daemon_environment(),
        **spec.environment,
        "NODEAGENT_HOOK": spec.name,
        "NODEAGENT_NODE": node,
        "NODEAGENT_DRAIN_REQUEST_ID": request.id,
        "NODEAGENT_DRAIN_REASON": request.reason,
        "NODEAGENT_DRAIN_SCHEDULE": str(request.schedule),
    }


@dataclass(frozen=True, kw_only=True)
class Ended:
    """How a program ended: ``exit_status`` as ``subprocess`` gives it (negative: killed by
    that signal; ``None``: unknown, for a process that is not the agent's child), and
    whether its timeout ended it."""

    exit_status: int | None
    timed_out: bool = False


def reaped(directory: Path) -> Reaped:
    """A hook's or health check's run under the reaper, its output in
    ``directory/output``."""
    return Reaped(output=directory / "output", output_limit=OUTPUT_FILE_LIMIT, grace=KILL_GRACE)


async def run_to_end(
    proc: JobProcess, allowed: float, *, grace: float = KILL_GRACE + REAPER_SLACK
) -> Ended:
    """Wait for ``proc`` to end; once it has run ``allowed`` more seconds send its process
    group SIGTERM, and SIGKILL ``grace`` seconds later. Under the reaper, its end is
    the end of everything the program started (the reaper ends them within
    :data:`KILL_GRACE` of the program's exit or of the SIGTERM). Cancelled, it leaves
    the process running."""
    with trio.move_on_after(max(0.0, allowed)):
        return Ended(exit_status=await proc.wait())
    _signal(proc, signal.SIGTERM)
    with trio.move_on_after(grace):
        return Ended(exit_status=await proc.wait(), timed_out=True)
    _signal(proc, signal.SIGKILL)
    return Ended(exit_status=await proc.wait(), timed_out=True)


def _signal(proc: JobProcess, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessError):  # refused groups are never the hook's
        proc.signal_group(sig)


@dataclass(frozen=True, kw_only=True)
class Output:
    """The end of a run's output: ``text`` (undecodable bytes replaced) and how many
    bytes the program wrote before it that are not kept (``dropped``)."""

    text: str = ""
    dropped: int = 0


def read_output(path: Path, *, limit: int) -> Output:
    """The last ``limit`` bytes of the output file ``path`` the reaper left, and the
    count of the bytes before them (those cut from the file, in ``path.dropped``, and
    those of the file before its last ``limit``); empty when it cannot be read. A few
    KiB of a local file: the agent reads them on its event loop, as it writes its
    state."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - limit))
            data = f.read(limit)
    except OSError:
        return Output()
    try:
        cut = int(path.with_name(path.name + DROPPED_SUFFIX).read_text())
    except (OSError, ValueError):
        cut = 0
    return Output(
        text=data.decode("utf-8", errors="replace"), dropped=max(0, cut) + size - len(data)
    )


def prune_runs(directory: Path, *, keep: int = KEPT_RUNS, spare: frozenset[str]) -> None:
    """Remove the run directories in ``directory`` but the ``keep`` newest (by the time
    they last changed) and those named in ``spare`` (blocking: a thread's work)."""
    try:
        entries = [e for e in os.scandir(directory) if e.name not in spare]
    except OSError:
        return
    dated = []
    for entry in entries:
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                dated.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
    for _, path in sorted(dated, reverse=True)[keep:]:
        shutil.rmtree(path, ignore_errors=True)


def read_boot_id(path: Path) -> str | None:
    """The machine's boot id (a new one at every boot), or ``None`` when it cannot be
    read (a reboot then cannot be told from a restart: the run counts as interrupted)."""
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


@dataclass
class HookCounts:
    """What the metrics count since the agent started: hook runs started and failed, by
    hook name; health checks run and failed."""

    hook_runs: Counter[str] = field(default_factory=Counter)
    hook_failures: Counter[str] = field(default_factory=Counter)
    health_checks: int = 0
    health_failures: int = 0
