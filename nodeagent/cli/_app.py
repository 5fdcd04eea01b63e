"""The ``nodeagent`` command line: the daemon, and thin clients of the agent's HTTP API.

Every client command talks to one agent (the local Unix socket by default, ``--host`` for
a remote one) through :mod:`nodeagent.cli._http`, prints the API's JSON with ``--json``
or a human view (:mod:`nodeagent.cli._render`, imported only then), and ends with one of
the exit statuses of ``docs/cli.md``: errors print ``code: message`` to stderr.

Start-up cost. Module level imports typer and the standard library, nothing else: no
pydantic models, no httpx, no server stack (typer itself imports pydantic only when it
parses a command line). ``status`` and ``ad`` (the commands an admin runs in a loop) go
one step further: the console script's entry point, :mod:`nodeagent.cli._main`,
recognises their plain forms and runs them without importing this module or typer at
all. Anything it does not recognise (``--help``, ``--watch``, a typo) comes here, so both
paths accept the same command lines, and malformed ones are always reported by typer.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from nodeagent import __version__
from nodeagent.cli._common import emit_json as _emit_json
from nodeagent.cli._common import finish as _finish
from nodeagent.cli._common import run_daemon
from nodeagent.cli._defrag import defrag_app
from nodeagent.cli._http import (
    CliError,
    Declined,
    Interrupted,
    Refused,
    Reply,
    Target,
    Unreachable,
    UsageError,
    parse_duration,
    path_segment,
    request,
    resolve_target,
)
from nodeagent.cli._main import ShowCommand, fast_parse, show
from nodeagent.cli._master import master_app

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["ShowCommand", "app", "fast_parse", "main"]

app = typer.Typer(
    name="nodeagent",
    help="Drain a node, plan cluster maintenance, defragment a pool.",
    no_args_is_help=True,
)
token_app = typer.Typer(
    name="token", help="Bearer tokens for the agents' TCP listeners.", no_args_is_help=True
)
app.add_typer(token_app)
app.add_typer(master_app)
app.add_typer(defrag_app)

_POLL_S = 0.2
"""How often ``drain --wait`` asks the agent (a GET over the local socket costs ~1 ms)."""


@app.callback()
def _root() -> None:
    """Drain a node, plan cluster maintenance, defragment a pool."""


@app.command()
def version() -> None:
    """Print the version and exit."""
    typer.echo(__version__)


@app.command()
def run(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="TOML configuration (default /etc/nodeagent/nodeagent.toml when it exists)",
            envvar="NODEAGENT_CONFIG",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
) -> None:
    """Run the node agent daemon in the foreground."""
    from nodeagent.agent._daemon import run_agent  # noqa: PLC0415

    run_daemon(run_agent, config, log_level)


# --- options every client command takes ---------------------------------------------------

JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print exactly the API's JSON, one document per line."),
]
HostOption = Annotated[
    str | None,
    typer.Option(
        "--host",
        metavar="URL",
        show_default=False,
        help="A remote agent: http://HOST:PORT or https://HOST:PORT (port 9621 by default); "
        "needs --token. "
        "Env: NODEAGENT_HOST. Default: the local Unix socket.",
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        metavar="FILE",
        show_default=False,
        help="File holding the bearer token for --host. Env: NODEAGENT_TOKEN_FILE.",
    ),
]
SocketOption = Annotated[
    str | None,
    typer.Option(
        "--socket",
        metavar="PATH",
        show_default=False,
        help="The agent's Unix socket. Env: NODEAGENT_SOCKET. Default: the daemon's "
        "(<runtime_dir>/nodeagent.sock).",
    ),
]
DurationOption = Annotated[str | None, typer.Option(metavar="DURATION", show_default=False)]


def _target(host: str | None, token: str | None, socket_path: str | None) -> Target:
    return resolve_target(
        host=host, token_file=token, socket_path=socket_path, env=os.environ, uid=os.geteuid()
    )


def _duration(option: str, value: str | None, *, whole: bool = False) -> float | None:
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise UsageError("cli.bad_duration", f"{option}: {exc}") from None
    if whole and seconds != int(seconds):
        raise UsageError("cli.bad_duration", f"{option}: {value!r} is not whole seconds")
    return seconds


def _console(*, err: bool = False) -> Console:
    from nodeagent.cli._render import make_console  # noqa: PLC0415

    return make_console(sys.stderr if err else sys.stdout)


def _watch(target: Target, *, json_output: bool, interval: float) -> None:
    """Refresh the status view every ``interval`` seconds until Ctrl-C (which ends it, 0).

    The first fetch's error ends the command; later ones are shown and retried.
    """
    first = request(target, "GET", "/v1/ad")
    try:
        if json_output:
            _emit_json(first)
            while True:
                time.sleep(interval)
                try:
                    _emit_json(request(target, "GET", "/v1/ad"))
                except CliError as exc:
                    sys.stderr.write(f"{exc.code}: {exc.message} (retrying)\n")
        from rich.live import Live  # noqa: PLC0415
        from rich.text import Text  # noqa: PLC0415

        from nodeagent.cli._render import status_view  # noqa: PLC0415

        console = _console()
        if not console.is_terminal:
            while True:
                console.print(status_view(first.data))
                console.print()
                time.sleep(interval)
                try:
                    first = request(target, "GET", "/v1/ad")
                except CliError as exc:
                    sys.stderr.write(f"{exc.code}: {exc.message} (retrying)\n")
        with Live(status_view(first.data), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                try:
                    live.update(status_view(request(target, "GET", "/v1/ad").data), refresh=True)
                except CliError as exc:
                    live.update(Text(f"{exc.code}: {exc.message} (retrying)", "red"), refresh=True)
    except KeyboardInterrupt:
        return


@app.command()
def status(
    *,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C.")] = False,
    interval: DurationOption = "1s",
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """The machine line (drain state, Start, cpus in use) and the slot table.

    --json prints GET /v1/ad. With --watch, one refresh per --interval until Ctrl-C.
    """
    if not watch:
        cmd = ShowCommand(
            command="status",
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        )
        _finish(lambda: show(cmd), json_output=json_output)
        return

    def action() -> None:
        seconds = _duration("--interval", interval) or 1.0
        _watch(_target(host, token, socket_path), json_output=json_output, interval=seconds)

    _finish(action, json_output=json_output)


@app.command()
def ad(
    *,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="ClassAd long format, like condor_status -l.")
    ] = False,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """The machine ad and every slot ad: a table, -l long format, --json the API's JSON."""
    cmd = ShowCommand(
        command="ad",
        json_output=json_output,
        long=long,
        host=host,
        token=token,
        socket_path=socket_path,
    )
    _finish(lambda: show(cmd), json_output=json_output)


# --- drain and cancel ---------------------------------------------------------------------

OnCompletion = Literal["none", "resume", "exit", "restart"]


@dataclass(frozen=True, kw_only=True)
class _DrainPlan:
    body: dict[str, Any]
    one_shot: bool
    dry_run: bool
    wait: bool
    json_output: bool


def _ask(question: str) -> bool | None:
    """Ask on stderr, read a line from stdin: True for y/yes, None at end of input."""
    sys.stderr.write(question)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        sys.stderr.write("\n")
        return None
    return line.strip().lower() in ("y", "yes")


def _cancel_pending(target: Target, request_id: str, plan: _DrainPlan) -> None:
    """Cancel the transaction left pending by an unanswered prompt; an already ended one
    (expired meanwhile) counts as cancelled."""
    try:
        reply = request(target, "POST", f"/v1/drain/{path_segment(request_id)}/cancel")
    except Refused:
        return
    if plan.json_output:
        _emit_json(reply)


def _show_drain(reply: Reply, heading: str, plan: _DrainPlan) -> None:
    if plan.json_output:
        _emit_json(reply)
        return
    from nodeagent.cli._render import render_drain  # noqa: PLC0415

    render_drain(_console(), reply.data, heading=heading)


def _decide(target: Target, phase1: Reply, plan: _DrainPlan) -> Reply | None:
    """Show the estimate, ask, then commit (the commit reply) or cancel (``None`` for a
    dry run; :class:`Declined` or :class:`Interrupted` otherwise).

    From the phase-1 reply until the question is answered, Ctrl-C cancels the transaction.
    """
    request_id = str(phase1.data["id"])
    try:
        _show_drain(phase1, "Drain estimate (not committed yet)", plan)
        answer = False if plan.dry_run else _ask("Commit? [y/N] ")
    except KeyboardInterrupt:
        _cancel_pending(target, request_id, plan)
        raise Interrupted(
            "cli.interrupted", f"not committed; drain request {request_id} cancelled"
        ) from None
    if not answer:
        _cancel_pending(target, request_id, plan)
        if plan.dry_run:
            if not plan.json_output:
                _console().print(f"dry run: drain request {request_id} cancelled")
            return None
        raise Declined("cli.declined", f"not committed; drain request {request_id} cancelled")
    committed = request(target, "POST", f"/v1/drain/{path_segment(request_id)}/commit")
    _show_drain(committed, "Drain committed", plan)
    return committed


def _drain(target: Target, plan: _DrainPlan) -> None:
    reply = request(target, "POST", "/v1/drain", plan.body)
    if plan.one_shot:
        _show_drain(reply, "Drain committed", plan)
        committed: Reply | None = reply
    else:
        committed = _decide(target, reply, plan)
    if committed is not None and plan.wait:
        _wait_drained(target, committed.data, json_output=plan.json_output)


def _drain_finished(body: Mapping[str, Any], request_id: str) -> bool:
    """Whether a ``GET /v1/drain`` reply says request ``request_id`` has drained the node.

    Raises CliError (exit 1) when it ended otherwise (cancelled, or another request).
    """
    if body.get("id") == request_id:
        return body.get("state") in ("drained", "completed")
    last = body.get("last") or {}
    if last.get("id") == request_id:
        if last.get("state") == "completed":
            return True
        raise CliError(
            "drain.cancelled", f"drain request {request_id} was cancelled before the node drained"
        )
    raise CliError("drain.ended", f"drain request {request_id} is no longer in force")


def _wait_drained(target: Target, committed: Mapping[str, Any], *, json_output: bool) -> None:
    """Poll ``GET /v1/drain`` until the node is drained; show progress on stderr.

    With on-completion ``exit`` or ``restart`` the agent exits once drained: losing it
    then counts as drained. Ctrl-C stops waiting and leaves the drain running (130).
    """
    request_id = str(committed["id"])
    exits = committed.get("on_completion") in ("exit", "restart")
    progress = None
    if not json_output:
        from nodeagent.cli._render import DrainProgress  # noqa: PLC0415

        progress = DrainProgress(_console(err=True), committed)
    body: Mapping[str, Any] = committed
    final: Reply | None = None
    gone = False
    try:
        while not _drain_finished(body, request_id):
            time.sleep(_POLL_S)
            try:
                final = request(target, "GET", "/v1/drain")
            except Unreachable:
                if not exits:
                    raise
                gone = True
                break
            body = final.data
            if progress is not None:
                progress.update(body)
    except KeyboardInterrupt:
        raise Interrupted(
            "cli.interrupted",
            f"stopped waiting; drain request {request_id} goes on "
            f"(nodeagent cancel {request_id} stops it)",
        ) from None
    finally:
        if progress is not None:
            progress.close()
    if json_output:
        if final is None and not gone:
            try:
                final = request(target, "GET", "/v1/drain")
            except Unreachable:
                if not exits:
                    raise
                gone = True
        if final is not None and not gone:
            _emit_json(final)
        return
    if gone:
        _console().print(
            f"the agent exited (on completion {committed.get('on_completion')}): "
            f"drain request {request_id} completed"
        )
        return
    from nodeagent.cli._render import render_drain_end  # noqa: PLC0415

    render_drain_end(_console(), body, request_id)


@app.command()
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
        OnCompletion,
        typer.Option("--on-completion", help="What happens once the node is drained."),
    ] = "none",
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
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """Drain the node: show the estimate and the blockers, ask, then commit.

    Then "Commit?": y commits; anything else, end of input or Ctrl-C cancels.
    """

    def action() -> None:
        if graceful + quick + fast > 1:
            raise UsageError("cli.usage", "choose one of --graceful, --quick and --fast")
        if dry_run and (yes or check is not None or wait):
            raise UsageError("cli.usage", "--dry-run cannot go with --yes, --check or --wait")
        schedule = "quick" if quick else "fast" if fast else "graceful"
        body: dict[str, Any] = {
            "schedule": schedule,
            "reason": reason,
            "on_completion": on_completion,
            "commit": yes or check is not None,
        }
        seconds = _duration("--deadline", deadline)
        if seconds is not None:
            body["deadline"] = seconds
        if start is not None:
            body["start"] = start
        if check is not None:
            body["check"] = check
        plan = _DrainPlan(
            body=body,
            one_shot=body["commit"],
            dry_run=dry_run,
            wait=wait,
            json_output=json_output,
        )
        _drain(_target(host, token, socket_path), plan)

    _finish(action, json_output=json_output)


@app.command()
def cancel(
    *,
    request_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[REQUEST_ID]", show_default=False, help="Default: whatever is in force."
        ),
    ] = None,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """Cancel a drain (pending or running): Start comes back, Retiring jobs keep running."""

    def action() -> None:
        target = _target(host, token, socket_path)
        if request_id is None:
            reply = request(target, "DELETE", "/v1/drain")
        else:
            reply = request(target, "POST", f"/v1/drain/{path_segment(request_id)}/cancel")
        if json_output:
            _emit_json(reply)
            return
        last = reply.data.get("last")
        if last is None:
            _console().print("no drain request in force: nothing to cancel")
        else:
            _console().print(f"cancelled drain request {last['id']} ({last['schedule']})")

    _finish(action, json_output=json_output)


# --- claims -------------------------------------------------------------------------------


def _claim_call(
    method: str,
    suffix: str,
    verb: str,
    claim_id: str,
    *,
    json_output: bool,
    target: Callable[[], Target],
) -> None:
    def action() -> None:
        reply = request(target(), method, f"/v1/claims/{path_segment(claim_id)}{suffix}")
        if json_output:
            _emit_json(reply)
            return
        from nodeagent.cli._render import render_claim  # noqa: PLC0415

        render_claim(_console(), reply.data, verb=verb)

    _finish(action, json_output=json_output)


ClaimId = Annotated[str, typer.Argument(metavar="CLAIM_ID", help="The claim's id (see status).")]


@app.command(context_settings={"allow_interspersed_args": False})
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
    kill_signal: Annotated[
        str, typer.Option(metavar="SIGNAL", help="The soft-kill signal.")
    ] = "SIGTERM",
    env: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY=VALUE", show_default=False, help="Job environment; repeat."),
    ] = None,
    cwd: Annotated[str | None, typer.Option(show_default=False, help="Job directory.")] = None,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """Carve a dynamic slot running CMD (after --), or adopting --pid."""

    def action() -> None:
        if (pid is None) == (not command):
            raise UsageError("cli.usage", "give either --pid PID or -- CMD..., not both")
        body: dict[str, Any] = {"cpus": cpus, "memory": memory, "disk": disk, "gpus": gpus}
        body["kill_signal"] = kill_signal
        if command:
            body["command"] = list(command)
        else:
            body["pid"] = pid
        mjrt = _duration("--retirement", retirement, whole=True)
        if mjrt is not None:
            body["max_job_retirement_time"] = int(mjrt)
        jmvt = _duration("--vacate", vacate, whole=True)
        if jmvt is not None:
            body["job_max_vacate_time"] = int(jmvt)
        if env:
            pairs = [item.partition("=") for item in env]
            if any(not key or not sep for key, sep, _ in pairs):
                raise UsageError("cli.usage", "--env takes KEY=VALUE")
            body["env"] = {key: value for key, _, value in pairs}
        for key, value in (("owner", owner), ("job_id", job_id), ("cwd", cwd)):
            if value is not None:
                body[key] = value
        reply = request(_target(host, token, socket_path), "POST", "/v1/claims", body)
        if json_output:
            _emit_json(reply)
            return
        from nodeagent.cli._render import render_claim  # noqa: PLC0415

        render_claim(_console(), reply.data, verb="created")

    _finish(action, json_output=json_output)


@app.command()
def release(
    *,
    claim_id: ClaimId,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """Vacate a claim: soft-kill its job now, hard-kill it after its vacate time."""
    _claim_call(
        "DELETE",
        "",
        "releasing",
        claim_id,
        json_output=json_output,
        target=lambda: _target(host, token, socket_path),
    )


@app.command()
def suspend(
    *,
    claim_id: ClaimId,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """SIGSTOP a claim's job; its run time stops accruing."""
    _claim_call(
        "POST",
        "/suspend",
        "suspended",
        claim_id,
        json_output=json_output,
        target=lambda: _target(host, token, socket_path),
    )


@app.command("continue")
def continue_(
    *,
    claim_id: ClaimId,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """SIGCONT a suspended claim's job."""
    _claim_call(
        "POST",
        "/continue",
        "continued",
        claim_id,
        json_output=json_output,
        target=lambda: _target(host, token, socket_path),
    )


# --- tokens -------------------------------------------------------------------------------


def _default_key_file() -> Path:
    from nodeagent._settings import ConfigError  # noqa: PLC0415
    from nodeagent.agent._config import load_agent_config  # noqa: PLC0415

    path = os.environ.get("NODEAGENT_CONFIG") or None
    try:
        return load_agent_config(None if path is None else Path(path)).key_file
    except ConfigError as exc:
        raise UsageError("cli.config", str(exc)) from None


def _write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (created or truncated)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise UsageError("cli.output", f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


@token_app.command("create")
def token_create(
    *,
    scope: Annotated[
        Literal["READ", "ADMINISTRATOR", "DAEMON"],
        typer.Option(case_sensitive=False, help="What the token allows."),
    ],
    subject: Annotated[str, typer.Option(help="Who holds it (the audit log's subject).")],
    lifetime: Annotated[
        str, typer.Option(metavar="DURATION", help="How long it is valid: 90s, 15m, 2h, 30d.")
    ],
    key_file: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            show_default=False,
            help="The pool key. Default: the daemon's key_file (<state_dir>/pool.key).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            show_default=False,
            help="Write the token here (mode 0600) instead of to stdout.",
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help="Print {token, subject, scope, expires_at} as one JSON document."
        ),
    ] = False,
) -> None:
    """Sign a bearer token with the pool key (for --host / --token)."""

    def action() -> None:
        import json  # noqa: PLC0415

        from nodeagent._auth import KeyFileError, Scope, create_token, load_key  # noqa: PLC0415

        seconds = _duration("--lifetime", lifetime)
        assert seconds is not None
        if seconds <= 0:
            raise UsageError("cli.bad_duration", "--lifetime must be positive")
        if not subject:
            raise UsageError("cli.usage", "--subject must not be empty")
        path = key_file or _default_key_file()
        try:
            key = load_key(path)
        except KeyFileError as exc:
            raise UsageError(exc.code, str(exc)) from None
        now = time.time()
        token = create_token(
            key, subject=subject, scope=Scope(scope.upper()), lifetime_s=seconds, now=now
        )
        expires_at = int(now + seconds)
        if output is not None:
            _write_secret(output, token + "\n")
        if json_output:
            document = {
                "token": token,
                "subject": subject,
                "scope": scope.upper(),
                "expires_at": expires_at,
            }
            sys.stdout.write(json.dumps(document) + "\n")
        elif output is None:
            sys.stdout.write(token + "\n")
        else:
            from nodeagent.cli._render import format_local_time  # noqa: PLC0415

            sys.stderr.write(
                f"token for {subject} ({scope.upper()}) written to {output}, "
                f"valid until {format_local_time(expires_at, now)}\n"
            )

    _finish(action, json_output=json_output)


@app.command()
def demo(
    fast: Annotated[
        bool, typer.Option("--fast", help="A compressed story (about 25 s) for quick checks")
    ] = False,
) -> None:
    """A master and three agents with real jobs going through a maintenance window."""
    import trio  # noqa: PLC0415

    from nodeagent.cli._demo import DemoTimes, run_demo  # noqa: PLC0415

    times = DemoTimes.fast() if fast else DemoTimes()
    raise typer.Exit(trio.run(lambda: run_demo(times, out=typer.echo)))


def main() -> None:
    """Entry point of the console script (see :mod:`nodeagent.cli._main`)."""
    from nodeagent.cli._main import main as fast_main  # noqa: PLC0415

    fast_main()
