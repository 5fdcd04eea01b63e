"""A daemon's worker processes on pipes (the expression evaluator's, the master's ingest
workers): ended and reaped the same way."""

from __future__ import annotations

import trio

__all__ = ["end_worker"]


async def end_worker(process: trio.Process, *, kill: bool, exit_within: float) -> None:
    """Make a worker that exits at the end of its stdin exit (at once with ``kill``) and
    reap it: its stdin closed, then ``exit_within`` seconds to exit before it is killed, then
    its stdout closed (when it has a pipe). Cannot be cancelled."""
    assert process.stdin is not None
    with trio.CancelScope(shield=True):
        if kill:
            process.kill()
        with trio.move_on_after(exit_within):
            await process.stdin.aclose()
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()
