"""The command lines the entry point runs without typer: every client command, when plain.

Importing typer costs a ``nodeagent`` process ≈ 40 ms and building its command tree
≈ 45 ms more, against ≈ 25 ms for the interpreter itself. So the console script's entry
point (:mod:`nodeagent.cli._main`) first asks :func:`parse` whether the command line is
*plain*, and if so runs the command's function directly (``drain`` is
:func:`nodeagent.cli._agent.drain`, called with the same keyword arguments typer would
pass it). Anything else goes to the typer application, which parses it, or reports the
usage error, itself; so both paths accept exactly the same command lines.

Plain means what typer would parse without a doubt:

* the words of a client command (:data:`COMMANDS`), then only the options and arguments
  it declares (the names of :mod:`nodeagent.cli._options` and the command's typer
  signature; a test compares the two declarations option by option);
* each option at most once (``--env``, which repeats, excepted), as ``--opt VALUE`` or
  ``--opt=VALUE``; a value that is empty or starts with ``-`` is left to typer, and so is
  a value typer would refuse (not an integer, below the minimum, not a choice, an
  unreadable path);
* no ``--help``, no short options run together (``-lj``), no missing required option or
  argument, no extra argument. ``--`` ends the options, and for ``claim`` (which takes a
  command line) so does its first argument, as in typer.

Standard library only: this is the first module every command imports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["COMMANDS", "Argument", "Command", "Option", "Plain", "parse", "run"]

Kind = Literal["flag", "str", "int", "choice", "path", "many"]


@dataclass(frozen=True, kw_only=True)
class Option:
    """One option: its spellings, the parameter it sets, and how its value is read.

    ``flag`` sets ``True``; ``str`` keeps the text; ``int`` is an integer of at least
    ``minimum``; ``choice`` one of ``choices`` (matched without regard to case unless
    ``case_sensitive``); ``path`` a :class:`~pathlib.Path`; ``many`` a list of texts, one
    per occurrence. ``envvar`` stands in for an option not given.
    """

    names: tuple[str, ...]
    dest: str
    kind: Kind = "str"
    default: Any = None
    required: bool = False
    minimum: int | None = None
    choices: tuple[str, ...] = ()
    case_sensitive: bool = True
    envvar: str | None = None


@dataclass(frozen=True, kw_only=True)
class Argument:
    """The command's argument: one word, or with ``many`` all that remain (a list)."""

    dest: str
    many: bool = False
    required: bool = False


@dataclass(frozen=True, kw_only=True)
class Command:
    """A client command: its ``words`` after ``nodeagent``, the function that runs it
    (``module:function``), its options and argument.

    ``interspersed=False``: the first argument ends the options (``claim -- CMD``).
    ``json_errors=False``: with ``--json``, a daemon's error body is not printed.
    """

    words: tuple[str, ...]
    run: str
    options: tuple[Option, ...] = ()
    argument: Argument | None = None
    interspersed: bool = True
    json_errors: bool = True


@dataclass(frozen=True, kw_only=True)
class Plain:
    """A plain command line: the command, and its function's keyword arguments."""

    command: Command
    params: Mapping[str, Any]


# --- the table ----------------------------------------------------------------------------


def _flag(*names: str, dest: str | None = None) -> Option:
    return Option(names=names, dest=dest or _dest(names[0]), kind="flag", default=False)


def _value(*names: str, dest: str | None = None, **fields: Any) -> Option:
    return Option(names=names, dest=dest or _dest(names[0]), **fields)


def _dest(name: str) -> str:
    return name.removeprefix("--").replace("-", "_")


_JSON = _flag("--json", dest="json_output")
_CLIENT = (_JSON, _value("--host"), _value("--token"), _value("--socket", dest="socket_path"))
"""``--json`` and the target of every agent and master client command."""

_AGENT = "nodeagent.cli._agent"
_MASTER = "nodeagent.cli._master"
_MAINTAIN = "nodeagent.cli._maintain"
_SLA = "nodeagent.cli._sla"

COMMANDS: tuple[Command, ...] = (
    Command(words=("version",), run="nodeagent.cli._common:version"),
    Command(
        words=("status",),
        run=f"{_AGENT}:status",
        options=(_flag("--watch", "-w"), _value("--interval", default="1s"), *_CLIENT),
    ),
    Command(words=("ad",), run=f"{_AGENT}:ad", options=(_flag("--long", "-l"), *_CLIENT)),
    Command(
        words=("drain",),
        run=f"{_AGENT}:drain",
        options=(
            _flag("--graceful"),
            _flag("--quick"),
            _flag("--fast"),
            _value("--reason", default=""),
            _value("--on-completion", default="none"),
            _value("--then"),
            _value("--deadline"),
            _value("--start"),
            _value("--check"),
            _flag("--yes", "-y"),
            _flag("--dry-run"),
            _flag("--wait"),
            *_CLIENT,
        ),
    ),
    Command(
        words=("cancel",),
        run=f"{_AGENT}:cancel",
        options=_CLIENT,
        argument=Argument(dest="request_id"),
    ),
    Command(
        words=("claim",),
        run=f"{_AGENT}:claim",
        options=(
            _value("--cpus", kind="int", minimum=1, default=1),
            _value("--memory", kind="int", minimum=0, default=0),
            _value("--disk", kind="int", minimum=0, default=0),
            _value("--gpus", kind="int", minimum=0, default=0),
            _value("--retirement"),
            _value("--vacate"),
            _value("--pid", kind="int", minimum=2),
            _value("--owner"),
            _value("--job-id"),
            _value("--group"),
            _value("--kill-signal", default="SIGTERM"),
            _value("--env", kind="many"),
            _value("--cwd"),
            *_CLIENT,
        ),
        argument=Argument(dest="command", many=True),
        interspersed=False,
    ),
    *(
        Command(
            words=(word,),
            run=f"{_AGENT}:{function}",
            options=_CLIENT,
            argument=Argument(dest="claim_id", required=True),
        )
        for word, function in (
            ("release", "release"),
            ("suspend", "suspend"),
            ("continue", "continue_"),
        )
    ),
    Command(
        words=("token", "create"),
        run="nodeagent.cli._token:create",
        options=(
            _value(
                "--scope",
                kind="choice",
                choices=("READ", "ADMINISTRATOR", "DAEMON"),
                case_sensitive=False,
                required=True,
            ),
            _value("--subject", required=True),
            _value("--lifetime", required=True),
            _value("--node"),
            _value("--key-file", kind="path"),
            _value("--output", "-o", kind="path"),
            _JSON,
        ),
    ),
    Command(words=("master", "status"), run=f"{_MASTER}:status", options=_CLIENT),
    Command(
        words=("master", "plan"),
        run=f"{_MASTER}:plan",
        options=(
            _flag("--watch", "-w"),
            _value("--interval", default="2s"),
            _flag("--all", dest="all_rows"),
            _value("--limit", kind="int", minimum=0, default=20),
            *_CLIENT,
        ),
    ),
    Command(
        words=("master", "ads"),
        run=f"{_MASTER}:ads",
        options=(
            _value("--constraint"),
            _value("--projection"),
            _flag("--slots"),
            _flag("--long", "-l"),
            *_CLIENT,
        ),
    ),
    Command(words=("master", "schedule", "get"), run=f"{_MASTER}:schedule_get", options=_CLIENT),
    Command(
        words=("master", "schedule", "set"),
        run=f"{_MASTER}:schedule_set",
        options=_CLIENT,
        argument=Argument(dest="file", required=True),
    ),
    Command(
        words=("master", "schedule", "clear"), run=f"{_MASTER}:schedule_clear", options=_CLIENT
    ),
    *(
        Command(
            words=("master", word),
            run=f"{_MASTER}:{word}",
            options=_CLIENT,
            argument=Argument(dest="machines", many=True, required=True),
        )
        for word in ("down", "up")
    ),
    Command(
        words=("master", "maintain", "start"),
        run=f"{_MAINTAIN}:start",
        options=(
            _value("--hosts"),
            _value("--constraint"),
            _value("--grouping", default="host"),
            _value("--batches", kind="int", minimum=1, default=1),
            _value("--hook", required=True),
            _value(
                "--schedule",
                kind="choice",
                choices=("graceful", "quick", "fast"),
                default="graceful",
            ),
            _value("--budget"),
            _value("--sla-wait", default="1h"),
            _flag("--wait"),
            *_CLIENT,
        ),
    ),
    Command(
        words=("master", "maintain", "status"),
        run=f"{_MAINTAIN}:status",
        options=(_flag("--wait"), *_CLIENT),
        argument=Argument(dest="operation_id"),
    ),
    *(
        Command(
            words=("master", "maintain", word),
            run=f"{_MAINTAIN}:{word}",
            options=_CLIENT,
            argument=Argument(dest="operation_id", required=True),
        )
        for word in ("pause", "resume", "cancel")
    ),
    Command(
        words=("master", "sla", "probe"),
        run=f"{_SLA}:probe",
        options=(_value("--constraint"), _value("--grouping"), *_CLIENT),
        argument=Argument(dest="hosts", many=True),
    ),
    Command(
        words=("defrag", "status"),
        run="nodeagent.cli._defrag:status",
        options=(
            _value("--config", "-c", kind="path", envvar="NODEAGENT_DEFRAG_CONFIG"),
            _value("--host", envvar="NODEAGENT_DEFRAG_HOST"),
            _value("--token", envvar="NODEAGENT_DEFRAG_TOKEN_FILE"),
            _value("--socket", dest="socket_path"),
            _JSON,
            _flag("--long", "-l"),
        ),
        json_errors=False,
    ),
)
"""Every client command. The daemons (``run``, ``master run``, ``defrag run``) and
``demo`` are not here: they start trio anyway, and go through typer."""


# --- parsing ------------------------------------------------------------------------------


class _NotPlain(Exception):
    """The command line is left to typer."""


def _convert(option: Option, value: str) -> Any:
    """``value`` as typer would convert it for ``option``; :class:`_NotPlain` where typer
    would refuse it (and report it, not us)."""
    if option.kind == "int":
        try:
            number = int(value)
        except ValueError:
            raise _NotPlain from None
        if option.minimum is not None and number < option.minimum:
            raise _NotPlain
        return number
    if option.kind == "choice":
        for choice in option.choices:
            if choice == value or (
                not option.case_sensitive and choice.casefold() == value.casefold()
            ):
                return choice
        raise _NotPlain
    if option.kind == "path":
        try:
            os.stat(value)
        except OSError:
            return Path(value)
        if not os.access(value, os.R_OK):
            raise _NotPlain
        return Path(value)
    return value


def _find(argv: Sequence[str]) -> Command | None:
    for command in COMMANDS:
        if tuple(argv[: len(command.words)]) == command.words:
            return command
    return None


def _options_and_arguments(
    command: Command, args: Sequence[str]
) -> tuple[dict[str, Any], list[str]]:
    by_name = {name: option for option in command.options for name in option.names}
    given: dict[str, Any] = {}
    words: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            words.extend(rest)
            break
        if not arg.startswith("-") or arg == "-":
            words.append(arg)
            if not command.interspersed:
                words.extend(rest)
                break
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        option = by_name.get(name)
        if option is None:
            raise _NotPlain
        if option.kind == "flag":
            if eq or option.dest in given:
                raise _NotPlain
            given[option.dest] = True
            continue
        if not eq:
            value = next(rest, "")
        if not value or value.startswith("-"):
            raise _NotPlain
        if option.kind == "many":
            given.setdefault(option.dest, []).append(value)
        elif option.dest in given:
            raise _NotPlain
        else:
            given[option.dest] = _convert(option, value)
    return given, words


def _fill_missing(command: Command, params: dict[str, Any], env: Mapping[str, str]) -> None:
    """Each option not given: from its variable, else its default; a required one is
    left to typer."""
    for option in command.options:
        if option.dest in params:
            continue
        from_env = env.get(option.envvar) if option.envvar else None
        if from_env:
            params[option.dest] = _convert(option, from_env)
        elif option.required:
            raise _NotPlain
        else:
            params[option.dest] = option.default


def parse(argv: Sequence[str], env: Mapping[str, str]) -> Plain | None:
    """The plain command line ``argv`` (the words after ``nodeagent``) with the variables
    ``env``; ``None`` for anything typer should parse."""
    command = _find(argv)
    if command is None:
        return None
    try:
        params, words = _options_and_arguments(command, argv[len(command.words) :])
        _fill_missing(command, params, env)
    except _NotPlain:
        return None
    argument = command.argument
    if argument is None:
        if words:
            return None
    elif argument.many:
        if argument.required and not words:
            return None
        params[argument.dest] = words or None
    else:
        if len(words) > 1 or (argument.required and not words):
            return None
        params[argument.dest] = words[0] if words else None
    return Plain(command=command, params=params)


def run(plain: Plain) -> int:
    """Run a plain command line; its exit status (errors as ``code: message`` on stderr,
    as :func:`nodeagent.cli._common.outcome` reports them)."""
    import importlib  # noqa: PLC0415

    from nodeagent.cli._common import outcome  # noqa: PLC0415

    module, _, name = plain.command.run.partition(":")
    action = getattr(importlib.import_module(module), name)
    json_output = bool(plain.params.get("json_output")) and plain.command.json_errors
    return outcome(lambda: action(**plain.params), json_output=json_output)
