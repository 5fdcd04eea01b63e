"""What the commands that run only under typer do: the daemons and the demo.

``nodeagent run``, ``master run``, ``defrag run`` and ``demo`` (declared in
:mod:`nodeagent.cli._commands` with ``plain: False``) start trio anyway, so the entry
point leaves them to the typer application, which calls these with the parsed command
line as keyword arguments. They end by raising ``typer.Exit`` with the exit status (or
``typer.BadParameter`` for a usage error).
"""

from __future__ import annotations

from pathlib import Path

import typer

from nodeagent.cli._common import run_daemon

__all__ = ["agent", "defrag", "demo", "master"]


def agent(*, config: Path | None, log_level: str, recover: bool, fresh: bool) -> None:
    """``nodeagent run``: the node agent in the foreground; ``recover`` or ``fresh`` says
    what to do when agent.db holds no state after a previous life (both: a usage error)."""
    import functools  # noqa: PLC0415

    from nodeagent.agent._daemon import LostState, run_agent  # noqa: PLC0415

    if recover and fresh:
        raise typer.BadParameter("--recover and --fresh exclude each other", param_hint="--fresh")
    lost_state: LostState = "recover" if recover else "fresh" if fresh else "refuse"
    run_daemon(functools.partial(run_agent, lost_state=lost_state), config, log_level)


def master(*, config: Path | None, log_level: str) -> None:
    """``nodeagent master run``: the master in the foreground."""
    from nodeagent.master._daemon import run_master  # noqa: PLC0415

    run_daemon(run_master, config, log_level)


def defrag(*, config: Path | None, log_level: str) -> None:
    """``nodeagent defrag run``: the defrag daemon in the foreground."""
    from nodeagent.defrag._daemon import run_defrag  # noqa: PLC0415

    run_daemon(run_defrag, config, log_level)


def demo(*, fast: bool, rolling: bool) -> None:
    """``nodeagent demo``: the story (``fast``: compressed; ``rolling``: the rolling
    maintenance one instead)."""
    import trio  # noqa: PLC0415

    from nodeagent.cli._demo import DemoTimes, run_demo  # noqa: PLC0415

    times = DemoTimes.fast() if fast else DemoTimes()
    raise typer.Exit(trio.run(lambda: run_demo(times, out=typer.echo, rolling=rolling)))
