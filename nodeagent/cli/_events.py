"""What ``nodeagent master events`` does: the master's events (``GET /v1/events``, JSON
lines), one line each, as ``nomad event stream`` and ``kubectl get events -w`` show them.

Without ``--follow`` it prints the last ``--last`` kept events that match (20 by
default), or those after ``--since``, and ends. With ``--follow`` it goes on printing each
new event as the master keeps it, until Ctrl-C (which ends it with status 0, quietly). A
connection that breaks, a master that restarts, or nothing from it for :data:`IDLE_S`
(it sends a heartbeat every 15 s) does not end it: it says so once on stderr, connects
again (the next master of ``--host URL,URL…`` in turn, after a backoff up to
:data:`BACKOFF_MAX_S`) and asks for the events after the last one it saw (``since=``),
so none is printed twice and none still kept is missed. Only the first connection's
failure ends the command (``master.unreachable``, exit 3), and so does a refusal at any
time (a bad ``--type``: ``request.invalid``, exit 1; a token refused: exit 4).

A line: the event's time (ISO 8601, UTC, as the daemons' logs write it), its id, its type
and its text. A ``gap`` (events after ``--since`` the master no longer keeps) is a warning
on stderr saying how many were missed. With ``--json``, each line exactly as the master
sent it (the gaps too), on stdout. Each line is flushed as it is printed, so that
``nodeagent master events -f | grep drain`` shows them as they come.

Standard library only, as every plain command.
"""

from __future__ import annotations

import json
import os
import sys
import time
from urllib.parse import urlencode

from nodeagent._when import in_words, iso_time
from nodeagent.cli._common import emit_text, master_target
from nodeagent.cli._errors import AgentFailed, Unreachable, UsageError
from nodeagent.cli._http import Reply, Target, stream
from nodeagent.cli._record import replace

TYPE_CHECKING = False  # not typing's: the plain commands import neither typing nor rich
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

__all__ = ["BACKOFF_MAX_S", "DEFAULT_LAST", "IDLE_S", "event_line", "events"]

DEFAULT_LAST = 20
"""Kept events printed first, without ``--since`` or ``--last``."""

IDLE_S = 45.0
"""Seconds without a byte from the master (three of its heartbeats) after which the
connection is taken for broken."""

BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 5.0
"""The wait between two attempts to reconnect doubles from :data:`BACKOFF_MIN_S` up to
this."""

_TYPE_WIDTH = 23  # operation.batch_skipped
#: The stream's header with the master's last event id when it answered.
LAST_EVENT_HEADER = "x-nodeagent-last-event-id"


def _printable(text: str) -> str:
    """``text`` with what a terminal would act on (controls, line separators,
    bidirectional overrides) escaped: a hostname or a reason from a node's ad cannot
    forge a line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def event_line(event: Any) -> str:
    """One event as a line: time (UTC), id, type, text."""
    when = event.get("time")
    shown = iso_time(float(when)) if isinstance(when, int | float) else "-"
    kind = _printable(str(event.get("type", "")))
    return f"{shown}  {event.get('id', '-'):>6}  {kind:<{_TYPE_WIDTH}}  " + _printable(
        str(event.get("text", ""))
    )


def _gap_warning(gap: Any) -> str:
    missed = gap.get("missed")
    count = f"{missed} event{'' if missed == 1 else 's'}" if isinstance(missed, int) else "events"
    return (
        f"warning: {count} missed: no longer kept by the master (it keeps its last events "
        f"only); going on after event {gap.get('resume')}"
    )


def _targets(target: Target) -> list[Target]:
    """The masters to ask in turn: ``target``, then the others ``--host`` listed."""
    found = [target]
    for scheme, host, port in target.masters:
        if (scheme, host, port) != target.origin:
            found.append(replace(target, scheme=scheme, host=host, port=port))
    return found


def _path(
    *,
    follow: bool,
    since: int | None,
    last: int | None,
    types: str,
    machines: str,
    groups: str,
) -> str:
    query: dict[str, str] = {"format": "jsonl", "follow": "true" if follow else "false"}
    if since is not None:
        query["since"] = str(since)
    elif last is not None:
        query["last"] = str(last)
    for name, value in (("type", types), ("machine", machines), ("group", groups)):
        if value:
            query[name] = value
    return "/v1/events?" + urlencode(query)


def _joined(values: Sequence[str] | None) -> str:
    """Repeated options, each possibly a comma-separated list, as one list."""
    items = [item.strip() for value in values or () for item in value.split(",")]
    return ",".join(item for item in items if item)


def _decoded(line: bytes, target: Target) -> Any:
    try:
        event = json.loads(line)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        raise AgentFailed(
            "master.bad_reply",
            f"the master at {target.describe()} sent a line that is not an event: "
            f"{line[:80].decode('utf-8', errors='replace')!r}",
            reply=Reply(status=200, text=""),
        )
    return event


class _Follower:
    """Where the stream is: the last id printed (never printed again), and where to ask
    from after a reconnection."""

    def __init__(self, since: int | None, *, json_output: bool) -> None:
        self.printed: int | None = since
        self.resume: int | None = since
        self.json_output = json_output

    def connected(self, target: Target) -> None:
        """A stream is open (before its first line): nothing to do here (a follower of
        the notices lists them then)."""

    def take(self, line: bytes, target: Target) -> None:
        """Print one line of the stream (a heartbeat, empty, prints nothing)."""
        if not line.strip():
            return
        event = _decoded(line, target)
        if event.get("type") == "gap":
            resume = event.get("resume")
            if isinstance(resume, int):
                self.printed = self.resume = max(self.resume or 0, resume)
            self.gap(event, line, target)
            return
        event_id = event.get("id")
        if isinstance(event_id, int):
            if self.printed is not None and event_id <= self.printed:
                return  # seen already (a master that sends it again)
            self.printed = event_id
            self.resume = max(self.resume or 0, event_id)
        self.show(event, line)

    def gap(self, event: Any, line: bytes, target: Target) -> None:
        """Say that events were missed (the stream's ``gap``; the place to resume from is
        taken already)."""
        if self.json_output:
            emit_text(line.decode("utf-8", errors="replace"))
        else:
            sys.stderr.write(_gap_warning(event) + "\n")
            sys.stderr.flush()

    def show(self, event: Any, line: bytes) -> None:
        """Print an event not printed before."""
        emit_text(line.decode("utf-8", errors="replace") if self.json_output else event_line(event))


def events(
    *,
    follow: bool,
    since: int | None,
    last: int | None,
    types: Sequence[str] | None,
    machines: Sequence[str] | None,
    groups: Sequence[str] | None,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master events [--follow] [--since ID | --last N] [--type T…]
    [--machine HOST…] [--group G…]`` (see the module docstring)."""
    if since is not None and last is not None:
        raise UsageError("cli.usage", "give --since ID or --last N, not both")
    target = master_target(host, token, socket_path)
    follower = _Follower(since, json_output=json_output)
    wanted = {
        "types": _joined(types),
        "machines": _joined(machines),
        "groups": _joined(groups),
    }
    try:
        if not follow:
            path = _path(follow=False, since=since, last=_last(since, last), **wanted)
            with stream(target, path, idle=IDLE_S) as streamed:
                _warn_if_ahead(since, streamed.headers, follow=False)
                for line in streamed.lines():
                    follower.take(line, target)
            return
        _follow(target, follower, last=_last(since, last), wanted=wanted)
    except KeyboardInterrupt:
        return  # Ctrl-C ends a stream: status 0, as kubectl get -w
    except BrokenPipeError:  # the reader went (| head): end quietly, as it does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _warn_if_ahead(since: int | None, headers: Mapping[str, str], *, follow: bool) -> None:
    """Say on stderr when ``--since`` is past the master's last event (its header): a
    time typed for an id, say, which would print nothing, or wait for an event that may
    never come."""
    last = headers.get(LAST_EVENT_HEADER, "")
    if since is None or not last.isdigit() or since <= int(last):
        return
    what = f"waiting for event {since + 1}" if follow else "nothing to print"
    sys.stderr.write(
        f"warning: --since {since} is past the master's last event, {last}: {what} "
        "(--since takes an event id as printed, not a time; --last N shows the last N)\n"
    )
    sys.stderr.flush()


def _last(since: int | None, last: int | None) -> int | None:
    return None if since is not None else (DEFAULT_LAST if last is None else last)


def _follow(
    target: Target,
    follower: _Follower,
    *,
    last: int | None,
    wanted: dict[str, str],
) -> None:
    """Print the stream until Ctrl-C, reconnecting as the module docstring says;
    ``follower`` is told of each connection and given each line (``nodeagent master
    notices --follow`` brings a follower of its own)."""
    masters = _targets(target)
    index = 0
    connected = False
    failures = 0
    lost_at: float | None = None
    while True:
        where = masters[index]
        if follower.resume is not None:
            path = _path(follow=True, since=follower.resume, last=None, **wanted)
        else:
            path = _path(follow=True, since=None, last=last, **wanted)
        try:
            with stream(where, path, idle=IDLE_S) as streamed:
                floor = streamed.headers.get(LAST_EVENT_HEADER, "")
                if not connected and lost_at is None:
                    _warn_if_ahead(follower.resume, streamed.headers, follow=True)
                if follower.resume is None and floor.isdigit():
                    # a fresh stream starts after this id: asked again from there
                    follower.resume = int(floor)
                connected = True
                follower.connected(where)
                if lost_at is not None:
                    sys.stderr.write(
                        f"reconnected to the master at {where.describe()} after "
                        f"{in_words(time.monotonic() - lost_at)}\n"
                    )
                    sys.stderr.flush()
                    lost_at = None
                for line in streamed.lines():
                    failures = 0
                    follower.take(line, where)
            reason = f"the master at {where.describe()} ended the stream"
        except (Unreachable, AgentFailed) as exc:
            if isinstance(exc, AgentFailed) and (exc.reply.status < 500):
                raise  # a reply that is not the API's: not a master to wait for
            if not connected and index + 1 == len(masters):
                raise
            reason = exc.message
        index = (index + 1) % len(masters)
        if not connected:
            continue  # the first connection: the next master at once
        if lost_at is None:
            lost_at = time.monotonic()
            after = f", from event {follower.resume}" if follower.resume is not None else ""
            sys.stderr.write(f"warning: {reason}; reconnecting{after}\n")
            sys.stderr.flush()
        failures += 1
        time.sleep(min(BACKOFF_MIN_S * 2 ** (failures - 1), BACKOFF_MAX_S))
