"""The agent's commands as a typer application: ``run``, and the thin clients of one
agent's HTTP API (``status``, ``ad``, ``drain``, ``cancel``, ``claim``, ``release``,
``suspend``, ``continue``).

The root application adds it without a name, so these are top-level commands. Each
client command declares its options here and calls its function in
:mod:`nodeagent.cli._agent` (which the entry point also calls without typer); errors
print ``code: message`` to stderr and end with the exit statuses of ``docs/cli.md``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from nodeagent.cli import _agent
from nodeagent.cli._common import finish, run_daemon
from nodeagent.cli._options import (
    AgentConfig,
    AgentHost,
    AgentSocket,
    AgentToken,
    DurationOption,
    JsonOption,
    LogLevel,
)

__all__ = ["agent_app"]

agent_app = typer.Typer()


@agent_app.command()
def run(
    config: AgentConfig = None,
    log_level: LogLevel = "info",
    *,
    recover: Annotated[
        bool,
        typer.Option(
            "--recover",
            help="If agent.db holds no state after a previous life: re-adopt the jobs still "
            "running from the execute directory; ids continue past the previous life's.",
        ),
    ] = False,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="If agent.db holds no state after a previous life: start with no claims, "
            "leaving those jobs alone; ids continue past the previous life's.",
        ),
    ] = False,
) -> None:
    """Run the node agent daemon in the foreground.

    It refuses to start (exit 8) when agent.db holds no state but the execute directory
    or the audit log show a previous life, unless --recover or --fresh says what to do.
    """
    import functools  # noqa: PLC0415

    from nodeagent.agent._daemon import LostState, run_agent  # noqa: PLC0415

    if recover and fresh:
        raise typer.BadParameter("--recover and --fresh exclude each other", param_hint="--fresh")
    lost_state: LostState = "recover" if recover else "fresh" if fresh else "refuse"
    run_daemon(functools.partial(run_agent, lost_state=lost_state), config, log_level)


@agent_app.command()
def status(
    *,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C.")] = False,
    interval: DurationOption = "1s",
    json_output: JsonOption = False,
    host: AgentHost = None,
    token: AgentToken = None,
    socket_path: AgentSocket = None,
) -> None:
    """The machine line (drain state, Start, cpus in use) and the slot table.

    --json prints GET /v1/ad. With --watch, one refresh per --interval until Ctrl-C.
    """
    finish(
        lambda: _agent.status(
            watch=watch,
            interval=interval,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@agent_app.command()
def ad(
    *,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="ClassAd long format, like condor_status -l.")
    ] = False,
    json_output: JsonOption = False,
    host: AgentHost = None,
    token: AgentToken = None,
    socket_path: AgentSocket = None,
) -> None:
    """The machine ad and every slot ad: a table, -l long format, --json the API's JSON."""
    finish(
        lambda: _agent.ad(
            long=long, json_output=json_output, host=host, token=token, socket_path=socket_path
        ),
        json_output=json_output,
    )


@agent_app.command()
def drain(
    *,
    graceful: Annotated[
        bool, typer.Option("--graceful", help="Honour retirement, then evict (default).")
    ] = False,
    quick: Annotated[
        bool, typer.Option("--quick", help="Evict now, honouring vacate time.")
    ] = False,
    fast: Annotated[bool, typer.Option("--fast", help="Kill every job now.")] = False,
    reason: Annotated[str, typer.Option(help="Why (shown in the ad as DrainReason).")] = "",
    on_completion: Annotated[
        str,
        typer.Option(
            "--on-completion",
            metavar="ACTION",
            help="What happens once the node is drained: none, resume, exit, restart, or "
            "hook:NAME (a hook of the agent's configuration).",
        ),
    ] = "none",
    then: Annotated[
        str | None,
        typer.Option(
            "--then",
            metavar="HOOK",
            show_default=False,
            help="Run this configured hook once the node is drained (--on-completion "
            "hook:HOOK); the node stays closed until it succeeded and is healthy.",
        ),
    ] = None,
    deadline: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            show_default=False,
            help="Evict (as --quick) whatever still runs this long after commit: 90s, 15m, 2h.",
        ),
    ] = None,
    start: Annotated[
        str | None,
        typer.Option(
            metavar="EXPR",
            show_default=False,
            help="ClassAd START expression admitting jobs during a graceful drain.",
        ),
    ] = None,
    check: Annotated[
        str | None,
        typer.Option(
            metavar="EXPR",
            show_default=False,
            help="One-shot: drain only if this ClassAd expression is true on the machine ad "
            "(condor_drain -check); no prompt.",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Commit without asking (one-shot).")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the estimate, then cancel; exit 0.")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Show progress until the node is drained.")
    ] = False,
    json_output: JsonOption = False,
    host: AgentHost = None,
    token: AgentToken = None,
    socket_path: AgentSocket = None,
) -> None:
    """Drain the node: show the estimate and the blockers, ask, then commit.

    Then "Commit?": y commits; anything else, end of input or Ctrl-C cancels.
    """
    finish(
        lambda: _agent.drain(
            graceful=graceful,
            quick=quick,
            fast=fast,
            reason=reason,
            on_completion=on_completion,
            then=then,
            deadline=deadline,
            start=start,
            check=check,
            yes=yes,
            dry_run=dry_run,
            wait=wait,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@agent_app.command()
def cancel(
    *,
    request_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[REQUEST_ID]", show_default=False, help="Default: whatever is in force."
        ),
    ] = None,
    json_output: JsonOption = False,
    host: AgentHost = None,
    token: AgentToken = None,
    socket_path: AgentSocket = None,
) -> None:
    """Cancel a drain (pending or running): Start comes back, Retiring jobs keep running."""
    finish(
        lambda: _agent.cancel(
            request_id=request_id,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


ClaimId = Annotated[str, typer.Argument(metavar="CLAIM_ID", help="The claim's id (see status).")]


@agent_app.command(context_settings={"allow_interspersed_args": False})
def claim(
    *,
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="-- CMD...", show_default=False, help="The job's argv."),
    ] = None,
    cpus: Annotated[int, typer.Option(min=1, help="Cpus of the dynamic slot.")] = 1,
    memory: Annotated[int, typer.Option(min=0, help="Memory in MiB.")] = 0,
    disk: Annotated[int, typer.Option(min=0, help="Disk in KiB.")] = 0,
    gpus: Annotated[int, typer.Option(min=0, help="GPUs.")] = 0,
    retirement: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION", show_default=False, help="The job's MaxJobRetirementTime."
        ),
    ] = None,
    vacate: Annotated[
        str | None,
        typer.Option(metavar="DURATION", show_default=False, help="The job's JobMaxVacateTime."),
    ] = None,
    pid: Annotated[
        int | None,
        typer.Option(min=2, show_default=False, help="Adopt this running process instead."),
    ] = None,
    owner: Annotated[str | None, typer.Option(show_default=False, help="RemoteOwner.")] = None,
    job_id: Annotated[str | None, typer.Option(show_default=False, help="JobId.")] = None,
    group: Annotated[
        str | None,
        typer.Option(show_default=False, help="The job group (JobGroup), e.g. www-data/prod/web."),
    ] = None,
    kill_signal: Annotated[
        str, typer.Option(metavar="SIGNAL", help="The soft-kill signal.")
    ] = "SIGTERM",
    env: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY=VALUE", show_default=False, help="Job environment; repeat."),
    ] = None,
    cwd: Annotated[str | None, typer.Option(show_default=False, help="Job directory.")] = None,
    json_output: JsonOption = False,
    host: AgentHost = None,
    token: AgentToken = None,
    socket_path: AgentSocket = None,
) -> None:
    """Carve a dynamic slot running CMD (after --), or adopting --pid."""
    finish(
        lambda: _agent.claim(
            command=command,
            cpus=cpus,
            memory=memory,
            disk=disk,
            gpus=gpus,
            retirement=retirement,
            vacate=vacate,
            pid=pid,
            owner=owner,
            job_id=job_id,
            group=group,
            kill_signal=kill_signal,
            env=env,
            cwd=cwd,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@agent_app.command()
def release(
    *,
    claim_id: ClaimId,
    json_output: JsonOption = False,
    host: AgentHost = None,
    token: AgentToken = None,
    socket_path: AgentSocket = None,
) -> None:
    """Vacate a claim: soft-kill its job now, hard-kill it after its vacate time."""
    finish(
        lambda: _agent.release(
            claim_id=claim_id,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@agent_app.command()
def suspend(
    *,
    claim_id: ClaimId,
    json_output: JsonOption = False,
    host: AgentHost = None,
    token: AgentToken = None,
    socket_path: AgentSocket = None,
) -> None:
    """SIGSTOP a claim's job; its run time stops accruing."""
    finish(
        lambda: _agent.suspend(
            claim_id=claim_id,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@agent_app.command("continue")
def continue_(
    *,
    claim_id: ClaimId,
    json_output: JsonOption = False,
    host: AgentHost = None,
    token: AgentToken = None,
    socket_path: AgentSocket = None,
) -> None:
    """SIGCONT a suspended claim's job."""
    finish(
        lambda: _agent.continue_(
            claim_id=claim_id,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )
