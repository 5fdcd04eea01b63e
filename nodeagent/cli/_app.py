"""The ``nodeagent`` typer application, built from the one declaration of the commands.

Every group and command of :mod:`nodeagent.cli._commands` becomes a typer group or command
here, with the options, argument and help it declares, in its order: nothing about a
command is written twice. A command's typer function calls what the entry point's parser
calls (:func:`nodeagent.cli._fast.run`: the command's function, its error as
``code: message`` on stderr and the exit statuses of ``docs/cli.md``); a daemon's or the
demo's (``plain: False``) is called as it is and raises ``typer.Exit`` itself.

The console script's entry point (:mod:`nodeagent.cli._main`) runs the plain command lines
without typer and imports this module only for the others: ``--help``, completion, a
malformed command line, the daemons and the demo.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape

from nodeagent.cli._commands import COMMANDS, GROUPS, default, dest
from nodeagent.cli._fast import Plain, run

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nodeagent.cli._commands import Argument, Command, Group, Option

__all__ = ["app", "build", "shown"]

_AS_IS = ("help", "metavar", "show_default", "min", "case_sensitive", "envvar")
"""The declared fields typer takes as they are, under the same names."""


def shown(text: str) -> str:
    """A declared help text as typer's rich help shows it as declared: each paragraph's
    lines joined (the declaration wraps them at its own width; rich keeps a line break
    and wraps again at the terminal's, which left a word or two alone on a line) and its
    brackets escaped (``[y/N]``, ``[master]``: not rich markup, which would drop them)."""
    return "\n\n".join(escape(" ".join(p.split("\n"))) for p in text.split("\n\n"))


def _as_is(declared: Option | Argument) -> dict[str, Any]:
    """The fields of ``declared`` typer takes as they are, as its keyword arguments (its
    help as :func:`shown`)."""
    fields = {name: value for name, value in declared.items() if name in _AS_IS}
    if "help" in fields:
        fields["help"] = shown(str(fields["help"]))
    return fields


def _option_type(option: Option) -> Any:
    """The annotation typer reads ``option``'s type from (how it parses the value, and how
    ``--help`` shows it)."""
    kind = option.get("kind", "str")
    if kind == "flag":
        return bool
    if kind == "choice":
        return Literal[option.get("choices", ())]
    if kind == "path":
        return Path | None
    if kind == "many":
        return list[str] | None
    base = int if kind == "int" else str
    return base if option.get("required", False) or default(option) is not None else base | None


def _option(option: Option) -> inspect.Parameter:
    """``option`` as a keyword-only parameter of the command's typer function."""
    info = typer.Option(*option["names"], **_as_is(option))
    return inspect.Parameter(
        dest(option),
        inspect.Parameter.KEYWORD_ONLY,
        default=inspect.Parameter.empty if option.get("required", False) else default(option),
        annotation=Annotated[_option_type(option), info],
    )


def _argument(argument: Argument) -> inspect.Parameter:
    """``argument`` as a keyword-only parameter of the command's typer function."""
    required = argument.get("required", False)
    kind: Any = list[str] if argument.get("many", False) else str
    info = typer.Argument(**_as_is(argument))
    return inspect.Parameter(
        argument["dest"],
        inspect.Parameter.KEYWORD_ONLY,
        default=inspect.Parameter.empty if required else None,
        annotation=Annotated[kind if required else kind | None, info],
    )


def _function(command: Command) -> Callable[..., None]:
    """What typer calls for ``command``, with the declared parameters as its signature."""

    def call(**params: Any) -> None:
        if command.get("plain", True):
            status = run(Plain(command, params))
            if status:
                raise typer.Exit(status)
            return
        module, _, name = command["run"].partition(":")
        getattr(importlib.import_module(module), name)(**params)

    argument = command.get("argument")
    parameters = [] if argument is None else [_argument(argument)]
    parameters += [_option(option) for option in command.get("options", ())]
    call.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = command["run"].rpartition(":")[2]
    call.__doc__ = shown(command["help"])
    return call


def _group(group: Group) -> typer.Typer:
    """An empty typer group for ``group`` (the root's name is ``nodeagent``), showing its
    help; ``no_args_is_help`` as every group."""
    words = group["words"]
    built = typer.Typer(
        name=words[-1] if words else "nodeagent", help=shown(group["help"]), no_args_is_help=True
    )

    def callback() -> None:
        pass

    callback.__doc__ = shown(group["help"])
    built.callback()(callback)
    return built


def build(
    groups_declared: tuple[Group, ...] = GROUPS, commands: tuple[Command, ...] = COMMANDS
) -> typer.Typer:
    """The whole application: each group (the root first) holding its commands, in the
    declaration's order, then its subgroups."""
    groups: dict[tuple[str, ...], typer.Typer] = {}
    for group in groups_declared:
        groups[group["words"]] = _group(group)
    for command in commands:
        words = command["words"]
        settings = None if command.get("interspersed", True) else {"allow_interspersed_args": False}
        groups[words[:-1]].command(
            words[-1], help=shown(command["help"]), context_settings=settings
        )(_function(command))
    for words, built in groups.items():
        if words:
            groups[words[:-1]].add_typer(built)
    return groups[()]


app = build()
