"""The console script's entry point: a plain command line without typer, the rest with it.

:func:`main` asks :func:`nodeagent.cli._fast.parse` whether the command line is plain
(every client command with the options it declares) and runs it without importing typer;
anything else (``--help``, completion, a malformed command line, the daemons, the demo)
goes to the typer application, :mod:`nodeagent.cli._app`, imported only then. Nothing
imports this module back.
"""

from __future__ import annotations

import gc
import os
import sys

TYPE_CHECKING = False  # not typing's: a plain command never imports typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

__all__ = ["main"]


def _exit(status: int) -> NoReturn:
    """End the process with ``status`` once stdout and stderr are flushed, skipping the
    interpreter's finalization: freeing the ≈ 200 modules a command loaded costs ≈ 12 ms
    and does nothing for a command that has finished (it leaves no thread, no open file
    and no ``atexit`` work behind). When flushing fails (a closed pipe), the ordinary
    exit reports it as before."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        sys.exit(status)
    os._exit(status)


def main(end: Callable[[int], NoReturn] = _exit) -> None:
    """Run ``nodeagent`` with :data:`sys.argv`; exits with the command's status.

    A plain command line ends with ``end(status)`` (:func:`sys.exit` lets a caller see
    the process as it ends); the typer application exits as typer does.
    """
    # A client command allocates most of its objects importing modules, which live as long
    # as the process: collecting the young generation every 700 allocations (the default)
    # costs ≈ 5 ms of its start for nothing. A long one (--watch) still collects; the
    # typer path (the daemons) gets the default back.
    default = gc.get_threshold()
    gc.set_threshold(100_000)
    from nodeagent.cli._fast import parse, run  # noqa: PLC0415

    plain = None if "_NODEAGENT_COMPLETE" in os.environ else parse(sys.argv[1:], os.environ)
    if plain is not None:
        end(run(plain))
    gc.set_threshold(*default)
    from nodeagent.cli._app import app  # noqa: PLC0415

    app()
