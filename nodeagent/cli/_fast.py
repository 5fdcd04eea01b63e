"""The command lines the entry point runs without typer: every client command, when plain.

Importing typer costs a ``nodeagent`` process ≈ 40 ms and building its command tree
≈ 45 ms more, against ≈ 25 ms for the interpreter itself. So the console script's entry
point (:mod:`nodeagent.cli._main`) first asks :func:`parse` whether the command line is
*plain*, and if so runs the command's function directly (``drain`` is
:func:`nodeagent.cli._agent.drain`, called with the same keyword arguments typer would
pass it). Anything else goes to the typer application, which parses it, or reports the
usage error, itself; so both paths accept exactly the same command lines.

Both read the one declaration of the commands, :mod:`nodeagent.cli._commands` (the typer
application is built from it; a test compares the two parsers option by option). Plain
means what typer would parse without a doubt:

* the words of a command the declaration does not leave to typer (not a daemon, not the
  demo), then only the options and argument it declares;
* each option at most once (``--env``, which repeats, excepted), as ``--opt VALUE`` or
  ``--opt=VALUE``; a value that is empty or starts with ``-`` is left to typer, and so is
  a value typer would refuse (not an integer, below the minimum, not a choice, an
  unreadable path);
* no ``--help``, no short options run together (``-lj``), no missing required option or
  argument, no extra argument. ``--`` ends the options, and for ``claim`` (which takes a
  command line) so does its first argument, as in typer.

Standard library only, without ``typing`` or ``dataclasses``: this is the first module every
command imports.
"""

from __future__ import annotations

import os
from pathlib import Path

from nodeagent.cli._commands import COMMANDS, default, dest

TYPE_CHECKING = False  # not typing's: a plain command imports neither typing nor dataclasses
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from nodeagent.cli._commands import Command, Option

__all__ = ["Plain", "parse", "run"]


class Plain:
    """A plain command line: the ``command`` (its declaration), and its function's keyword
    arguments, ``params``."""

    __slots__ = ("command", "params")

    def __init__(self, command: Command, params: dict[str, Any]) -> None:
        self.command = command
        self.params = params


# --- parsing ------------------------------------------------------------------------------


class _NotPlain(Exception):
    """The command line is left to typer."""


def _convert(option: Option, value: str) -> Any:
    """``value`` as typer would convert it for ``option``; :class:`_NotPlain` where typer
    would refuse it (and report it, not us)."""
    kind = option.get("kind", "str")
    if kind == "int":
        try:
            number = int(value)
        except ValueError:
            raise _NotPlain from None
        if number < option.get("min", number):
            raise _NotPlain
        return number
    if kind == "choice":
        exact = option.get("case_sensitive", True)
        for choice in option.get("choices", ()):
            if choice == value or (not exact and choice.casefold() == value.casefold()):
                return choice
        raise _NotPlain
    if kind == "path":
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
        words = command["words"]
        if tuple(argv[: len(words)]) == words:
            return command if command.get("plain", True) else None
    return None


def _options_and_arguments(
    command: Command, args: Sequence[str]
) -> tuple[dict[str, Any], list[str]]:
    options = command.get("options", ())
    by_name = {name: option for option in options for name in option["names"]}
    interspersed = command.get("interspersed", True)
    given: dict[str, Any] = {}
    words: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            words.extend(rest)
            break
        if not arg.startswith("-") or arg == "-":
            words.append(arg)
            if not interspersed:
                words.extend(rest)
                break
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        option = by_name.get(name)
        if option is None:
            raise _NotPlain
        key = dest(option)
        kind = option.get("kind", "str")
        if kind == "flag":
            if eq or key in given:
                raise _NotPlain
            given[key] = True
            continue
        if not eq:
            value = next(rest, "")
        if not value or value.startswith("-"):
            raise _NotPlain
        if kind == "many":
            given.setdefault(key, []).append(value)
        elif key in given:
            raise _NotPlain
        else:
            given[key] = _convert(option, value)
    return given, words


def _fill_missing(command: Command, params: dict[str, Any], env: Mapping[str, str]) -> None:
    """Each option not given: from its variable, else its default; a required one is
    left to typer."""
    for option in command.get("options", ()):
        key = dest(option)
        if key in params:
            continue
        variable = option.get("envvar")
        from_env = env.get(variable) if variable else None
        if from_env:
            params[key] = _convert(option, from_env)
        elif option.get("required", False):
            raise _NotPlain
        else:
            params[key] = default(option)


def parse(argv: Sequence[str], env: Mapping[str, str]) -> Plain | None:
    """The plain command line ``argv`` (the words after ``nodeagent``) with the variables
    ``env``; ``None`` for anything typer should parse."""
    command = _find(argv)
    if command is None:
        return None
    try:
        params, words = _options_and_arguments(command, argv[len(command["words"]) :])
        _fill_missing(command, params, env)
    except _NotPlain:
        return None
    argument = command.get("argument")
    if argument is None:
        if words:
            return None
    elif argument.get("many", False):
        if argument.get("required", False) and not words:
            return None
        params[argument["dest"]] = words or None
    else:
        if len(words) > 1 or (argument.get("required", False) and not words):
            return None
        params[argument["dest"]] = words[0] if words else None
    return Plain(command, params)


def run(plain: Plain) -> int:
    """Run a plain command line; its exit status (errors as ``code: message`` on stderr,
    as :func:`nodeagent.cli._common.outcome` reports them). The typer application runs
    the commands it parsed through here too."""
    import importlib  # noqa: PLC0415

    from nodeagent.cli._common import outcome  # noqa: PLC0415

    command = plain.command
    module, _, name = command["run"].partition(":")
    action = getattr(importlib.import_module(module), name)
    json_output = bool(plain.params.get("json_output")) and command.get("json_errors", True)
    return outcome(lambda: action(**plain.params), json_output=json_output)
