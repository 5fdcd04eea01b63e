"""A drain's completion hook: its name on the wire, its run's record, its output.

A drain may complete with a hook the agent's configuration names (never a command from
the network): ``on_completion`` is then ``"hook:NAME"`` on the wire
(:func:`parse_on_completion`), :attr:`OnCompletion.HOOK` with ``hook=NAME`` in the model.
Once the machine is drained the hook is due; the shell starts it, records each step
through the machine, and the machine keeps one :class:`HookRun` on the request.

A run's states (:class:`HookState`)::

    pending ──start recorded──▶ running ──exit 0, or a reboot of a `reboots` hook──▶ succeeded
       │                          ├──non-zero, killed, timed out──▶ failed
       └──could not start──▶ failed └──the agent restarted meanwhile, same boot──▶ interrupted

Outputs are kept as printable text (:func:`printable_tail`): the last
:data:`OUTPUT_LIMIT` characters (:data:`HEALTH_OUTPUT_LIMIT` of a health check's), lines
kept, every other control character replaced; with them, how many bytes the program
wrote before that tail that are not kept (:func:`kept_output`), so that a tail is never
taken for the whole.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from enum import StrEnum

from slots._errors import InvalidRequest

__all__ = [
    "AD_OUTPUT_LIMIT",
    "HEALTH_OUTPUT_LIMIT",
    "HOOK_NAME",
    "OUTPUT_LIMIT",
    "HookRun",
    "HookState",
    "ad_text",
    "check_hook_name",
    "kept_output",
    "outcome_message",
    "printable_tail",
]

#: What a hook's name may be: a letter or digit, then letters, digits, ``_``, ``.``, ``-``.
HOOK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

#: The most characters of a hook's output the model keeps.
OUTPUT_LIMIT = 4096

#: The most characters of a health check's output the model keeps.
HEALTH_OUTPUT_LIMIT = 1024

#: The most characters of an output an ad carries (its end).
AD_OUTPUT_LIMIT = 1024


class HookState(StrEnum):
    """Where a completion hook's run stands (``DrainHookState`` in the ad)."""

    PENDING = "pending"  # the node is drained; the hook is due, not started yet
    RUNNING = "running"  # its start is recorded; it runs
    SUCCEEDED = "succeeded"  # exit status 0, or the machine rebooted during a `reboots` hook
    FAILED = "failed"  # non-zero exit, killed, timed out, or it could not start
    INTERRUPTED = "interrupted"  # the agent restarted while it ran: its outcome is unknown


@dataclass(frozen=True, kw_only=True, slots=True)
class HookRun:
    """One run of a drain's completion hook, as recorded.

    ``reboots`` and ``timeout`` are the hook's configuration when it started (a reload
    changes neither for a run under way); ``boot_id`` is the machine's boot id then,
    ``pid`` and ``process_start`` the process that runs it (to wait for it should the
    agent restart meanwhile). ``exit_status`` follows ``subprocess``: negative means
    killed by that signal. ``message`` says how it ended, ``output`` is the tail of its
    output (stdout and stderr together) and ``output_dropped`` the count of the bytes it
    wrote before that tail, which are not kept.
    """

    name: str
    state: HookState
    reboots: bool = False
    timeout: float | None = None
    boot_id: str | None = None
    pid: int | None = None
    process_start: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_status: int | None = None
    message: str | None = None
    output: str = ""
    output_dropped: int = 0


def check_hook_name(name: str) -> str:
    """``name`` if it is a hook's name (:data:`HOOK_NAME`); raises :class:`InvalidRequest`."""
    if not HOOK_NAME.fullmatch(name):
        raise InvalidRequest(
            f"{name[:80]!r} is not a hook name: 1 to 64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


def printable_tail(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """The last ``limit`` characters of ``text`` as printable lines: ``\\r\\n`` and ``\\r``
    become newlines, tabs spaces, any other control or separator character ``?``."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")
    return "".join(c if c == "\n" or c.isprintable() else "?" for c in text[-limit:])


def kept_output(output: str, *, dropped: int = 0, limit: int = OUTPUT_LIMIT) -> tuple[str, int]:
    """What is kept of an output the shell read: its :func:`printable_tail` of ``limit``
    characters, and the count of the bytes before that tail that are not kept:
    ``dropped`` (those the shell did not read) plus those of ``output`` the tail leaves
    out (counted in UTF-8)."""
    text = output.replace("\r\n", "\n").replace("\r", "\n")
    cut = text[: max(0, len(text) - limit)]
    return printable_tail(output, limit), max(0, dropped) + len(cut.encode("utf-8", "replace"))


def ad_text(output: str) -> str | None:
    """An output as one line an ad can carry: its last :data:`AD_OUTPUT_LIMIT` characters,
    each newline written ``\\n``; ``None`` for no output."""
    tail = output.rstrip("\n")[-AD_OUTPUT_LIMIT:]
    return tail.replace("\n", "\\n") if tail else None


def outcome_message(exit_status: int | None, *, timed_out: float | None) -> str:
    """How a program ended: ``exit status 3``, ``killed by SIGKILL``, ``timed out after
    600 s`` (``timed_out``: its timeout when it passed), ``exit status unknown``."""
    if timed_out is not None:
        return f"timed out after {timed_out:g} s (SIGTERM, then SIGKILL)"
    if exit_status is None:
        return "exit status unknown"
    if exit_status < 0:
        try:
            name = signal.Signals(-exit_status).name
        except ValueError:
            name = f"signal {-exit_status}"
        return f"killed by {name}"
    return f"exit status {exit_status}"
