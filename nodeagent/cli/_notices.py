"""What ``nodeagent master notices`` does: the notices (Mesos's inverse offers) of job
groups, listed or followed, and an owner's answer to one.

One command, its argument saying which: ``master notices`` lists them (``GET
/v1/notices``: a table, or with ``--json`` the API's JSON) and ``master notices accept|decline
ID --reason TEXT [--expected-completion WHEN]`` answers one (``POST
/v1/notices/{id}/accept|decline``). One command rather than a group, as ``git remote`` and
``git stash`` are: the bare words list, a verb and an id answer; the declaration
(:mod:`nodeagent.cli._commands`) and both parsers stay as they are, and an option of the
other form is ``cli.usage`` (exit 2), not silently ignored.

``--follow`` prints the notices in force, then each change as the master makes it (issued,
answered, rescinded), one line each, until Ctrl-C (status 0, as ``master events -f``). It
opens the event stream (``type=notice.*``, the same groups and machines) before it lists,
so a change made meanwhile is neither missed nor printed twice
(:class:`nodeagent._notice_feed.NoticeFeed`); a broken connection or a master restarted is
reconnected as ``master events -f`` does (:func:`nodeagent.cli._events._follow`: the
events after the last one read), and after a ``gap`` it lists again and prints what
differs. With ``--json``, each change is one JSON document: ``{"kind", "event_id",
"time", "notice"}``, the notice as ``GET /v1/notices`` shows it.

Standard library only, as every plain command.
"""

from __future__ import annotations

import json
import os
import sys
import time
from urllib.parse import urlencode

from nodeagent._notice_feed import NoticeFeed
from nodeagent._when import in_words, iso_time
from nodeagent.cli._common import console, emit_json, emit_text, master_target
from nodeagent.cli._errors import UsageError
from nodeagent.cli._events import (
    _follow,
    _Follower,
    _gap_warning,
    _joined,
    _printable,
)
from nodeagent.cli._http import path_segment, request

TYPE_CHECKING = False  # not typing's: the plain commands import neither typing nor rich
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from nodeagent.cli._draw import Table
    from nodeagent.cli._http import Target

__all__ = ["answer_text", "change_line", "notices", "notices_table"]

_VERBS = {"accept": "accepted", "decline": "declined"}
_KIND_WIDTH = 9  # rescinded


def _at(when: Any, now: float) -> str:
    """``2026-11-28T15:00:00Z (in 1 h 20 min)``, or ``-``."""
    if not isinstance(when, int | float) or isinstance(when, bool):
        return "-"
    delta = float(when) - now
    words = f"in {in_words(delta)}" if delta >= 0 else f"{in_words(-delta)} ago"
    return f"{iso_time(float(when))} ({words})"


def answer_text(answer: Any, now: float) -> str:
    """The latest answer in words: ``decline by web-team 5 min ago: month-end run
    (expects to be gone by …)``; ``not answered``."""
    if not isinstance(answer, dict):
        return "not answered"
    when = answer.get("at")
    ago = (
        f" {in_words(max(0.0, now - float(when)))} ago"
        if isinstance(when, int | float) and not isinstance(when, bool)
        else ""
    )
    text = (
        f"{_printable(str(answer.get('verdict')))} by {_printable(str(answer.get('who')))}"
        f"{ago}: {_printable(str(answer.get('reason', '')))}"
    )
    expected = answer.get("expected_completion")
    if expected is not None:
        text += f" (expects to be gone by {_at(expected, now)})"
    return text


def _window(notice: Any, now: float) -> str:
    window = notice.get("window") or {}
    shown = _at(window.get("start"), now)
    duration = window.get("duration")
    if isinstance(duration, int | float) and not isinstance(duration, bool):
        shown += f" for {in_words(float(duration))}"
    return shown


def notices_table(found: Sequence[Any], now: float) -> Table:
    """The notices as a table: id, machine, group, window start (ISO time and in words),
    claims, latest answer."""
    from nodeagent.cli._draw import Table  # noqa: PLC0415

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("ID", "MACHINE", "GROUP", "WINDOW", "CLAIMS", "ANSWER"):
        table.add_column(column)
    for notice in found:
        table.add_row(
            _printable(str(notice.get("id"))),
            _printable(str(notice.get("machine"))),
            _printable(str(notice.get("group"))),
            _window(notice, now),
            str(len(notice.get("claims") or ())),
            answer_text(notice.get("answer"), now),
        )
    return table


def change_line(kind: str, notice: Any, when: float, now: float) -> str:
    """One change as a line: when (UTC), what happened, the notice's id, machine and group,
    then the window and claims (listed, issued) or the answer (answered)."""
    head = (
        f"{iso_time(when)}  {kind:<{_KIND_WIDTH}}  {_printable(str(notice.get('id')))}  "
        f"{_printable(str(notice.get('machine')))}  {_printable(str(notice.get('group')))}"
    )
    if kind == "answered":
        return f"{head}  {answer_text(notice.get('answer'), now)}"
    if kind == "rescinded":
        return head
    claims = len(notice.get("claims") or ())
    return (
        f"{head}  window {_window(notice, now)}, {claims} claim{'' if claims == 1 else 's'}, "
        f"{answer_text(notice.get('answer'), now)}"
    )


def _listing_path(groups: str, machines: str) -> str:
    query = {name: value for name, value in (("group", groups), ("machine", machines)) if value}
    return "/v1/notices" + (f"?{urlencode(query)}" if query else "")


def _listed(target: Target, groups: str, machines: str) -> list[Any]:
    found = (request(target, "GET", _listing_path(groups, machines)).data or {}).get("notices")
    return [n for n in found or () if isinstance(n, dict)]


class _NoticeFollower(_Follower):
    """A follower of the event stream (:class:`nodeagent.cli._events._Follower`) that
    lists the notices when the first stream is open, and after a gap, and prints the
    changes a :class:`~nodeagent._notice_feed.NoticeFeed` finds."""

    def __init__(self, groups: str, machines: str, *, json_output: bool) -> None:
        super().__init__(None, json_output=json_output)
        self.groups = groups
        self.machines = machines
        self.feed = NoticeFeed(
            groups=[g for g in groups.split(",") if g],
            machines=[m for m in machines.split(",") if m],
        )
        self.listed = False

    def _show(self, kind: str, notice: Any, event_id: Any = None, when: Any = None) -> None:
        now = time.time()
        if self.json_output:
            change = {"kind": kind, "event_id": event_id, "time": when, "notice": notice}
            emit_text(json.dumps(change, separators=(",", ":")))
            return
        at = float(when) if isinstance(when, int | float) and not isinstance(when, bool) else now
        emit_text(change_line(kind, notice, at, now))

    def _list(self, target: Target) -> None:
        for kind, notice in self.feed.listed(_listed(target, self.groups, self.machines)):
            self._show(kind, notice)

    def connected(self, target: Target) -> None:
        """The first stream is open: list the notices (a listing that fails ends this
        connection, and the next one lists)."""
        if not self.listed:
            self._list(target)
            self.listed = True

    def gap(self, event: Any, line: bytes, target: Target) -> None:
        """Events were missed: list the notices again (the feed says what differs)."""
        sys.stderr.write(_gap_warning(event) + "; listing the notices again\n")
        sys.stderr.flush()
        self._list(target)

    def show(self, event: Any, line: bytes) -> None:
        change = self.feed.event(event)
        if change is not None:
            self._show(change[0], change[1], event.get("id"), event.get("time"))


def _usage(message: str) -> UsageError:
    return UsageError(
        "cli.usage",
        f"{message} (master notices [--group G] [--machine M] [--follow] lists; master notices "
        "accept|decline ID --reason TEXT [--expected-completion WHEN] answers)",
    )


def notices(
    *,
    action: Sequence[str] | None,
    group: Sequence[str] | None,
    machine: Sequence[str] | None,
    follow: bool,
    reason: str | None,
    expected_completion: str | None,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master notices [--group G…] [--machine M…] [--follow]``, or ``nodeagent
    master notices accept|decline ID --reason TEXT [--expected-completion WHEN]`` (see the
    module docstring)."""
    words = list(action or ())
    if words:
        if len(words) != 2 or words[0] not in _VERBS:
            raise _usage(f"unexpected {' '.join(words)!r}")
        if words[1] in (".", ".."):
            raise _usage(f"{words[1]!r} is no notice's id")
        if follow or group or machine:
            raise _usage("--follow, --group and --machine are the listing's")
        if reason is None:
            raise _usage(f"{words[0]} needs --reason TEXT: why, for the operator")
        _answer(
            words[0],
            words[1],
            reason=reason,
            expected_completion=expected_completion,
            json_output=json_output,
            target=master_target(host, token, socket_path),
        )
        return
    if reason is not None or expected_completion is not None:
        raise _usage("--reason and --expected-completion answer a notice: accept|decline ID")
    target = master_target(host, token, socket_path)
    groups, machines = _joined(group), _joined(machine)
    if follow:
        follower = _NoticeFollower(groups, machines, json_output=json_output)
        wanted = {"types": "notice.*", "machines": machines, "groups": groups}
        try:
            _follow(target, follower, last=0, wanted=wanted)
        except KeyboardInterrupt:
            return  # Ctrl-C ends a stream: status 0, as master events -f
        except BrokenPipeError:  # the reader went (| head): end quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return
    reply = request(target, "GET", _listing_path(groups, machines))
    if json_output:
        emit_json(reply)
        return
    found = [n for n in (reply.data or {}).get("notices") or () if isinstance(n, dict)]
    if not found:
        emit_text("no notice in force" + (f" for {groups}" if groups else ""))
        return
    console().print(notices_table(found, time.time()))


def _answer(
    verb: str,
    notice_id: str,
    *,
    reason: str,
    expected_completion: str | None,
    json_output: bool,
    target: Target,
) -> None:
    """``POST /v1/notices/{id}/accept|decline``; says what the master now holds."""
    from nodeagent._durations import parse_time  # noqa: PLC0415

    body: dict[str, Any] = {"reason": reason}
    now = time.time()
    if expected_completion is not None:
        try:
            body["expected_completion"] = parse_time(expected_completion, now)
        except ValueError as exc:
            raise UsageError("cli.bad_time", f"--expected-completion: {exc}") from None
    path = f"/v1/notices/{path_segment(notice_id)}/{verb}"
    reply = request(target, "POST", path, body)
    if json_output:
        emit_json(reply)
        return
    notice = reply.data or {}
    emit_text(
        f"{_VERBS[verb]} notice {_printable(str(notice.get('id')))} "
        f"({_printable(str(notice.get('machine')))}, {_printable(str(notice.get('group')))}; "
        f"window {_window(notice, now)}): {answer_text(notice.get('answer'), now)}"
    )
