"""The one declaration of the commands (:mod:`nodeagent.cli._commands`): well formed, light
to import, and shown by typer as declared.

The parser reads it at every start of a command, so it and the parser must import
nothing that costs: typer, click, rich, ``typing``, ``dataclasses`` or ``inspect``. Typer's
application is built from it, so what ``--help`` shows is what it declares, in its order.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from nodeagent import _paths
from nodeagent.cli._app import app, shown
from nodeagent.cli._commands import COMMANDS, GROUPS, default, dest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nodeagent.cli._commands import Command, Option

KINDS = {"flag", "str", "int", "choice", "path", "many"}
OPTION_FIELDS = {
    "names",
    "dest",
    "kind",
    "default",
    "required",
    "min",
    "choices",
    "case_sensitive",
    "envvar",
    "help",
    "metavar",
    "show_default",
}
ARGUMENT_FIELDS = {"dest", "many", "required", "help", "metavar", "show_default"}
COMMAND_FIELDS = {
    "words",
    "run",
    "help",
    "options",
    "argument",
    "interspersed",
    "json_errors",
    "plain",
}
NOT_LOADED = ("typer", "click", "rich", "typing", "dataclasses", "inspect")


def _words(command: Command) -> str:
    return " ".join(command["words"])


# --- the cost of reading it -----------------------------------------------------------------


@pytest.mark.parametrize("module", ["nodeagent.cli._commands", "nodeagent.cli._fast"])
def test_reading_the_declaration_loads_nothing_that_costs(module: str) -> None:
    code = (
        "import sys\n"
        f"import {module}\n"
        f"print(sorted(m for m in {NOT_LOADED!r} if m in sys.modules))\n"
        "from nodeagent.cli._fast import parse\n"
        "parse(['drain', '--yes', '--reason', 'r'], {})\n"
        "parse(['token', 'create', '--scope', 'read'], {})\n"
        f"print(sorted(m for m in {NOT_LOADED!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.splitlines() == ["[]", "[]"], result.stderr


# --- well formed ----------------------------------------------------------------------------


def _options() -> Iterator[tuple[str, Option]]:
    for command in COMMANDS:
        for option in command.get("options", ()):
            yield f"{_words(command)} {option['names'][0]}", option


@pytest.mark.parametrize("command", COMMANDS, ids=_words)
def test_each_command_is_well_formed(command: Command) -> None:
    assert set(command) <= COMMAND_FIELDS
    assert command["words"][:-1] in {g["words"] for g in GROUPS}
    assert command["help"].strip() == command["help"]
    options = command.get("options", ())
    names = [name for option in options for name in option["names"]]
    assert len(names) == len(set(names)), "a name given twice"
    dests = [dest(option) for option in options]
    argument = command.get("argument")
    if argument is not None:
        assert set(argument) <= ARGUMENT_FIELDS
        dests.append(argument["dest"])
    assert len(dests) == len(set(dests)), "two parameters of one name"
    assert all(d.isidentifier() for d in dests)
    module, _, name = command["run"].partition(":")
    assert callable(getattr(importlib.import_module(module), name))


@pytest.mark.parametrize(("where", "option"), list(_options()), ids=[w for w, _ in _options()])
def test_each_option_is_well_formed(where: str, option: Option) -> None:
    assert set(option) <= OPTION_FIELDS
    kind = option.get("kind", "str")
    assert kind in KINDS
    assert option["names"][0].startswith("--")
    assert all(n.startswith("--") or (n.startswith("-") and len(n) == 2) for n in option["names"])
    assert ("min" in option) <= (kind == "int")
    assert bool(option.get("choices")) == (kind == "choice")
    if option.get("required"):
        assert "default" not in option, "a required option has no default"
    if kind == "choice" and "default" in option:
        assert default(option) in option["choices"]
    if kind == "flag":
        assert default(option) is False


@pytest.mark.parametrize(
    ("words", "path"),
    [
        (("run",), _paths.DEFAULT_AGENT_CONFIG_PATH),
        (("master", "run"), _paths.DEFAULT_MASTER_CONFIG_PATH),
        (("defrag", "run"), _paths.DEFAULT_DEFRAG_CONFIG_PATH),
        (("defrag", "status"), _paths.DEFAULT_DEFRAG_CONFIG_PATH),
    ],
)
def test_a_config_option_names_the_daemons_default_file(words: tuple[str, ...], path: Any) -> None:
    command = next(c for c in COMMANDS if c["words"] == words)
    config = next(o for o in command.get("options", ()) if o["names"][0] == "--config")
    assert f"(default {path} when it exists)" in config.get("help", "")


def test_every_group_but_the_root_has_its_parent_before_it() -> None:
    seen: set[tuple[str, ...]] = set()
    for group in GROUPS:
        words = group["words"]
        assert not words or words[:-1] in seen
        seen.add(words)
    assert GROUPS[0]["words"] == ()


# --- typer shows it as declared ---------------------------------------------------------------


def _typer_tree() -> dict[tuple[str, ...], Any]:
    found: dict[tuple[str, ...], Any] = {}

    def walk(node: Any, words: tuple[str, ...]) -> None:
        found[words] = node
        for name, child in getattr(node, "commands", {}).items():
            walk(child, (*words, name))

    walk(typer.main.get_command(app), ())
    return found


TREE = _typer_tree()


@pytest.mark.parametrize("command", COMMANDS, ids=_words)
def test_typer_shows_each_command_and_option_as_declared(command: Command) -> None:
    leaf = TREE[command["words"]]
    assert leaf.help == shown(command["help"])
    listed = [
        (p.name, p.help, p.metavar, p.show_default)
        for p in leaf.params
        if p.param_type_name == "option"
    ]
    declared = [
        (
            dest(o),
            shown(o["help"]) if "help" in o else None,
            o.get("metavar"),
            o.get("show_default", True),
        )
        for o in command.get("options", ())
    ]
    assert listed == declared


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: " ".join(g["words"]) or "nodeagent")
def test_typer_lists_a_groups_commands_then_its_subgroups_in_the_declared_order(
    group: dict[str, Any],
) -> None:
    words = group["words"]
    node = TREE[words]
    assert node.help == shown(group["help"])
    commands = [c["words"][-1] for c in COMMANDS if c["words"][:-1] == words]
    subgroups = [g["words"][-1] for g in GROUPS if g["words"][:-1] == words and g["words"]]
    assert list(node.commands) == commands + subgroups


@pytest.mark.parametrize("command", COMMANDS, ids=_words)
def test_help_shows_each_paragraph_as_declared_on_a_line_of_its_own(command: Command) -> None:
    """``--help`` on a terminal wide enough for any paragraph: each paragraph of the
    declared help is one line, word for word, its brackets kept (``[y/N]``, ``[master]``),
    whatever width the declaration wrapped it at."""
    shown_help = CliRunner().invoke(
        app, [*command["words"], "--help"], env={"COLUMNS": "3000", "NO_COLOR": "1"}
    )
    assert shown_help.exit_code == 0, shown_help.output
    lines = [line.strip(" │") for line in shown_help.output.splitlines()]
    for paragraph in command["help"].split("\n\n"):
        assert " ".join(paragraph.split("\n")) in lines
