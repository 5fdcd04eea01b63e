"""What the agent's client commands do: ``status``, ``ad``, ``drain``, ``cancel``,
``claim``, ``release``, ``suspend``, ``continue``.

One function per command, taking the parsed command line as keyword arguments (the
``dest`` of each option and argument :mod:`nodeagent.cli._commands` declares, from the
entry point's parser or from typer). Each talks to one agent through
:mod:`nodeagent.cli._http`, prints the API's JSON with ``json_output`` or a human view
(:mod:`nodeagent.cli._render`), and raises a :class:`~nodeagent.cli._errors.CliError`
for the caller to turn into ``code: message`` and an exit status. No typer here: the
entry point runs these without it.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping

from nodeagent.cli._common import (
    agent_target,
    console,
    duration,
    emit_json,
    emit_text,
    watch_loop,
)
from nodeagent.cli._errors import (
    CliError,
    Declined,
    Interrupted,
    Refused,
    Unreachable,
    UsageError,
)
from nodeagent.cli._http import Reply, Target, path_segment, request
from nodeagent.cli._record import record

TYPE_CHECKING = False  # not typing's: the plain commands import neither typing nor rich
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from rich.console import RenderableType

    from nodeagent.cli._draw import Screen

__all__ = [
    "ad",
    "cancel",
    "claim",
    "continue_",
    "drain",
    "release",
    "status",
    "suspend",
]

_POLL_S = 0.2
"""How often ``drain --wait`` asks the agent (a GET over the local socket costs ~1 ms)."""

_ON_COMPLETION = re.compile(r"none|resume|exit|restart|hook:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_HOOK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


# --- status and ad ------------------------------------------------------------------------


def _status_view(data: Any, out: Screen) -> RenderableType:
    from nodeagent.cli._render import status_view  # noqa: PLC0415

    return status_view(data)


def status(
    *,
    watch: bool,
    interval: str | None,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent status``: one ``GET /v1/ad`` as the machine line and the slot table
    (``--json``: the reply); with ``watch``, one refresh per ``interval`` until Ctrl-C."""
    if watch:
        seconds = duration("--interval", interval) or 1.0
        target = agent_target(host, token, socket_path)
        watch_loop(
            lambda: request(target, "GET", "/v1/ad"),
            _status_view,
            json_output=json_output,
            interval=seconds,
        )
        return
    reply = request(agent_target(host, token, socket_path), "GET", "/v1/ad")
    if json_output:
        emit_json(reply)
        return
    from nodeagent.cli._render import render_status  # noqa: PLC0415

    render_status(console(), reply.data)


def ad(
    *,
    long: bool,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent ad``: the slot table, ``long`` the ClassAd long format, ``json_output``
    the reply of ``GET /v1/ad``; both together are ``cli.usage``."""
    if json_output and long:
        raise UsageError("cli.usage", "choose one of --long and --json")
    target = agent_target(host, token, socket_path)
    if long:
        reply = request(target, "GET", "/v1/ad?format=classad")
        sys.stdout.write(reply.text if reply.text.endswith("\n") else reply.text + "\n")
        return
    reply = request(target, "GET", "/v1/ad")
    if json_output:
        emit_json(reply)
        return
    from nodeagent.cli._render import render_ad_table  # noqa: PLC0415

    render_ad_table(console(), reply.data)


# --- drain and cancel ---------------------------------------------------------------------


@record
class _DrainPlan:
    """A drain command line: the ``POST /v1/drain`` body, and what to do with its reply."""

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
        emit_json(reply)


def _show_drain(reply: Reply, heading: str, plan: _DrainPlan) -> None:
    if plan.json_output:
        emit_json(reply)
        return
    from nodeagent.cli._render import render_drain  # noqa: PLC0415

    render_drain(console(), reply.data, heading=heading)


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
                emit_text(f"dry run: drain request {request_id} cancelled")
            return None
        raise Declined("cli.declined", f"not committed; drain request {request_id} cancelled")
    committed = request(target, "POST", f"/v1/drain/{path_segment(request_id)}/commit")
    _show_drain(committed, "Drain committed", plan)
    return committed


def _drain_finished(body: Mapping[str, Any], request_id: str) -> bool:
    """Whether a ``GET /v1/drain`` reply says request ``request_id`` has drained the node.

    With a completion hook, "drained" means the hook has ended too: the request completed
    (the node then waits for its health check, when one is configured) or is
    ``hook_failed``. Raises CliError (exit 1) when it ended otherwise (cancelled, or
    another request).
    """
    if body.get("id") == request_id:
        return body.get("state") in ("drained", "completed", "hook_failed")
    last = body.get("last") or {}
    if last.get("id") == request_id:
        if last.get("state") == "completed":
            return True
        raise CliError(
            "drain.cancelled", f"drain request {request_id} was cancelled before the node drained"
        )
    raise CliError("drain.ended", f"drain request {request_id} is no longer in force")


def _drain_now(target: Target, *, exits: bool) -> Reply | None:
    """``GET /v1/drain``; ``None`` when the agent no longer answers and ``exits`` says it
    may have gone away on purpose (else :class:`Unreachable` as usual)."""
    try:
        return request(target, "GET", "/v1/drain")
    except Unreachable:
        if not exits:
            raise
        return None


def _wait_drained(target: Target, committed: Mapping[str, Any], *, json_output: bool) -> None:
    """Poll ``GET /v1/drain`` until the node is drained; show progress on stderr.

    With on-completion ``exit`` or ``restart`` the agent exits once drained, and a hook
    may reboot the machine: losing it then counts as drained. Ctrl-C stops waiting and
    leaves the drain running (130).
    """
    request_id = str(committed["id"])
    completion = str(committed.get("on_completion"))
    exits = completion in ("exit", "restart") or completion.startswith("hook:")
    progress = None
    if not json_output:
        from nodeagent.cli._render import DrainProgress  # noqa: PLC0415

        progress = DrainProgress(console(err=True).console, committed)
    body: Mapping[str, Any] = committed
    final: Reply | None = None
    gone = False
    try:
        while not _drain_finished(body, request_id):
            time.sleep(_POLL_S)
            final = _drain_now(target, exits=exits)
            if final is None:
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
            final = _drain_now(target, exits=exits)
            gone = final is None
        if final is not None and not gone:
            emit_json(final)
        return
    if gone:
        if completion.startswith("hook:"):
            emit_text(
                f"the agent stopped answering while {completion} ran (it may be rebooting): "
                f"`nodeagent status` shows how drain request {request_id} ends"
            )
        else:
            emit_text(
                f"the agent exited (on completion {completion}): "
                f"drain request {request_id} completed"
            )
        return
    from nodeagent.cli._render import render_drain_end  # noqa: PLC0415

    render_drain_end(console(), body, request_id)
    if body.get("state") == "hook_failed":
        hook = body.get("hook") or {}
        raise CliError(
            "drain.hook_failed",
            f"drain request {request_id}: hook {hook.get('name')} {hook.get('message')}",
        )


def drain(
    *,
    graceful: bool,
    quick: bool,
    fast: bool,
    reason: str,
    on_completion: str,
    then: str | None,
    deadline: str | None,
    start: str | None,
    check: str | None,
    yes: bool,
    dry_run: bool,
    wait: bool,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent drain``: phase 1, the estimate, the prompt, then commit or cancel
    (``yes`` or ``check``: one-shot); with ``wait``, progress until the node is drained
    (and its completion hook, ``then`` or ``on_completion`` ``hook:NAME``, has ended)."""
    if graceful + quick + fast > 1:
        raise UsageError("cli.usage", "choose one of --graceful, --quick and --fast")
    if then is not None:
        if on_completion != "none":
            raise UsageError("cli.usage", "--then HOOK is --on-completion hook:HOOK: give one")
        if not _HOOK_NAME.fullmatch(then):
            raise UsageError(
                "cli.usage",
                f"--then {then!r}: a hook name is 1 to 64 letters, digits, '_', '.' or '-'",
            )
        on_completion = f"hook:{then}"
    if not _ON_COMPLETION.fullmatch(on_completion):
        raise UsageError(
            "cli.usage",
            f"--on-completion {on_completion!r}: choose none, resume, exit, restart or hook:NAME",
        )
    if dry_run and (yes or check is not None or wait):
        raise UsageError("cli.usage", "--dry-run cannot go with --yes, --check or --wait")
    schedule = "quick" if quick else "fast" if fast else "graceful"
    body: dict[str, Any] = {
        "schedule": schedule,
        "reason": reason,
        "on_completion": on_completion,
        "commit": yes or check is not None,
    }
    seconds = duration("--deadline", deadline)
    if seconds is not None:
        body["deadline"] = seconds
    if start is not None:
        body["start"] = start
    if check is not None:
        body["check"] = check
    plan = _DrainPlan(
        body=body, one_shot=body["commit"], dry_run=dry_run, wait=wait, json_output=json_output
    )
    target = agent_target(host, token, socket_path)
    reply = request(target, "POST", "/v1/drain", plan.body)
    if plan.one_shot:
        _show_drain(reply, "Drain committed", plan)
        committed: Reply | None = reply
    else:
        committed = _decide(target, reply, plan)
    if committed is not None and plan.wait:
        _wait_drained(target, committed.data, json_output=plan.json_output)


def cancel(
    *,
    request_id: str | None,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent cancel``: ``DELETE /v1/drain`` (whatever is in force), or cancel
    ``request_id``."""
    target = agent_target(host, token, socket_path)
    if request_id is None:
        reply = request(target, "DELETE", "/v1/drain")
    else:
        reply = request(target, "POST", f"/v1/drain/{path_segment(request_id)}/cancel")
    if json_output:
        emit_json(reply)
        return
    last = reply.data.get("last")
    if last is None:
        emit_text("no drain request in force: nothing to cancel")
    else:
        emit_text(f"cancelled drain request {last['id']} ({last['schedule']})")
    health = reply.data.get("health") or {}
    if reply.data.get("accepting") is False and health.get("state") not in (None, "passing"):
        emit_text(
            f"the node stays closed until its health check passes ({health['state']}, "
            f"{health.get('passes', 0)}/{health.get('passes_needed', 1)} passes): "
            "`nodeagent status` shows it"
        )


# --- claims -------------------------------------------------------------------------------


def claim(
    *,
    command: list[str] | None,
    cpus: int,
    memory: int,
    disk: int,
    gpus: int,
    retirement: str | None,
    vacate: str | None,
    pid: int | None,
    owner: str | None,
    job_id: str | None,
    group: str | None,
    kill_signal: str,
    env: list[str] | None,
    cwd: str | None,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent claim``: ``POST /v1/claims`` running ``command`` or adopting ``pid``."""
    if (pid is None) == (not command):
        raise UsageError("cli.usage", "give either --pid PID or -- CMD..., not both")
    body: dict[str, Any] = {"cpus": cpus, "memory": memory, "disk": disk, "gpus": gpus}
    body["kill_signal"] = kill_signal
    if command:
        body["command"] = list(command)
    else:
        body["pid"] = pid
    mjrt = duration("--retirement", retirement, whole=True)
    if mjrt is not None:
        body["max_job_retirement_time"] = int(mjrt)
    jmvt = duration("--vacate", vacate, whole=True)
    if jmvt is not None:
        body["job_max_vacate_time"] = int(jmvt)
    if env:
        pairs = [item.partition("=") for item in env]
        if any(not key or not sep for key, sep, _ in pairs):
            raise UsageError("cli.usage", "--env takes KEY=VALUE")
        body["env"] = {key: value for key, _, value in pairs}
    for key, value in (
        ("owner", owner),
        ("job_id", job_id),
        ("group", group),
        ("cwd", cwd),
    ):
        if value is not None:
            body[key] = value
    reply = request(agent_target(host, token, socket_path), "POST", "/v1/claims", body)
    _show_claim(reply, "created", json_output=json_output)


def _show_claim(reply: Reply, verb: str, *, json_output: bool) -> None:
    if json_output:
        emit_json(reply)
        return
    from nodeagent.cli._render import render_claim  # noqa: PLC0415

    render_claim(console(), reply.data, verb=verb)


def _claim_command(method: str, suffix: str, verb: str, doc: str) -> Callable[..., None]:
    """A command acting on one claim: ``method /v1/claims/{id}{suffix}``, the claim shown
    as ``verb``."""

    def command(
        *,
        claim_id: str,
        json_output: bool,
        host: str | None,
        token: str | None,
        socket_path: str | None,
    ) -> None:
        target = agent_target(host, token, socket_path)
        reply = request(target, method, f"/v1/claims/{path_segment(claim_id)}{suffix}")
        _show_claim(reply, verb, json_output=json_output)

    command.__doc__ = doc
    return command


release = _claim_command(
    "DELETE",
    "",
    "releasing",
    "``nodeagent release``: ``DELETE /v1/claims/{id}`` (soft kill now, hard kill after the "
    "vacate time).",
)
suspend = _claim_command(
    "POST",
    "/suspend",
    "suspended",
    "``nodeagent suspend``: ``POST /v1/claims/{id}/suspend`` (SIGSTOP).",
)
continue_ = _claim_command(
    "POST",
    "/continue",
    "continued",
    "``nodeagent continue``: ``POST /v1/claims/{id}/continue`` (SIGCONT).",
)
