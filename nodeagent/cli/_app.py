"""The ``nodeagent`` typer application: the root, ``version``, ``demo``, and one group per
program.

The agent's commands (:mod:`nodeagent.cli._agent_app`) sit at the top level; ``token``,
``master`` and ``defrag`` are groups of their own (``_token_app``, ``_master_app``,
``_defrag_app``). The console script's entry point (:mod:`nodeagent.cli._main`) runs the
plain command lines without typer and imports this module only for the others: ``--help``,
completion, a malformed command line, the daemons and the demo.
"""

from __future__ import annotations

from typing import Annotated

import typer

from nodeagent.cli._agent_app import agent_app
from nodeagent.cli._common import version as print_version
from nodeagent.cli._defrag_app import defrag_app
from nodeagent.cli._master_app import master_app
from nodeagent.cli._token_app import token_app

__all__ = ["app"]

app = typer.Typer(
    name="nodeagent",
    help="Drain a node, plan cluster maintenance, defragment a pool.",
    no_args_is_help=True,
)


@app.callback()
def _root() -> None:
    """Drain a node, plan cluster maintenance, defragment a pool."""


@app.command()
def version() -> None:
    """Print the version and exit."""
    print_version()


# The demo is added as a group without a name, after the agent's commands: a root command
# would be listed before them in --help.
_demo_app = typer.Typer()


@_demo_app.command()
def demo(
    fast: Annotated[
        bool, typer.Option("--fast", help="A compressed story (about 25 s) for quick checks")
    ] = False,
    rolling: Annotated[
        bool,
        typer.Option(
            "--rolling",
            help="Instead: six nodes in three racks rebooted rack by rack under an SLA",
        ),
    ] = False,
) -> None:
    """A master and three agents with real jobs going through a maintenance window."""
    import trio  # noqa: PLC0415

    from nodeagent.cli._demo import DemoTimes, run_demo  # noqa: PLC0415

    times = DemoTimes.fast() if fast else DemoTimes()
    raise typer.Exit(trio.run(lambda: run_demo(times, out=typer.echo, rolling=rolling)))


app.add_typer(agent_app)
app.add_typer(_demo_app)
app.add_typer(token_app)
app.add_typer(master_app)
app.add_typer(defrag_app)
