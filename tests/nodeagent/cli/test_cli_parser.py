"""The entry point's parser (:mod:`nodeagent.cli._fast`) against the typer application.

A plain command line must reach the command's function with exactly the arguments typer
would pass it, and anything typer would parse differently or refuse must be left to
typer. Both read the one declaration (:mod:`nodeagent.cli._commands`); the tests compare
what typer built from it with what the parser reads, option by option, and derive the
command lines from both, so an option typer gets some other way, or a parser that reads
the declaration otherwise, fails here.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import typer.main

from nodeagent.cli._app import app
from nodeagent.cli._commands import COMMANDS, default, dest
from nodeagent.cli._fast import parse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nodeagent.cli._commands import Command, Option

ROOT = typer.main.get_command(app)
NOT_CLIENT_COMMANDS = {("run",), ("demo",), ("master", "run"), ("defrag", "run")}
CLIENT_COMMANDS = [c for c in COMMANDS if c.get("plain", True)]


def _leaves(group: Any, words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, command in group.commands.items():
        path = (*words, name)
        if hasattr(command, "commands"):
            yield from _leaves(command, path)
        else:
            yield path, command


LEAVES = dict(_leaves(ROOT))


def _function(command: Command) -> Callable[..., None]:
    module, _, name = command["run"].partition(":")
    function: Callable[..., None] = getattr(importlib.import_module(module), name)
    return function


def typer_params(argv: Sequence[str]) -> dict[str, Any]:
    """The keyword arguments typer passes the command's function for ``argv``."""
    words = next(c["words"] for c in COMMANDS if tuple(argv[: len(c["words"])]) == c["words"])
    leaf = LEAVES[words]
    ctx = leaf.make_context(" ".join(words), list(argv[len(words) :]))
    wrapped = inspect.unwrap(leaf.callback)
    _, convertors, _ = typer.main.get_params_convertors_ctx_param_name_from_function(wrapped)
    return {k: convertors[k](v) if k in convertors else v for k, v in ctx.params.items()}


# --- the same commands, the same options ------------------------------------------------


def test_every_client_command_has_a_plain_form() -> None:
    assert {c["words"] for c in CLIENT_COMMANDS} == set(LEAVES) - NOT_CLIENT_COMMANDS
    assert {c["words"] for c in COMMANDS} == set(LEAVES)
    assert len({c["words"] for c in COMMANDS}) == len(COMMANDS)


def _described(option: Option) -> dict[str, Any]:
    return {
        "names": sorted(option["names"]),
        "kind": option.get("kind", "str"),
        "default": None if option.get("required") else default(option),
        "required": option.get("required", False),
        "minimum": option.get("min"),
        "choices": option.get("choices", ()),
        "case_sensitive": option.get("case_sensitive", True),
        "envvar": option.get("envvar"),
    }


def _described_by_typer(param: Any) -> dict[str, Any]:
    kind = type(param.type).__name__
    kinds = {"StringParamType": "str", "IntRange": "int", "TyperChoice": "choice"}
    return {
        "names": sorted([*param.opts, *param.secondary_opts]),
        "kind": "flag"
        if param.is_flag
        else "many"
        if param.multiple
        else kinds.get(kind, "path" if kind == "TyperPath" else kind),
        "default": param.default,
        "required": param.required,
        "minimum": getattr(param.type, "min", None),
        "choices": tuple(getattr(param.type, "choices", ())),
        "case_sensitive": getattr(param.type, "case_sensitive", True),
        "envvar": param.envvar,
    }


def _words(command: Command) -> str:
    return " ".join(command["words"])


@pytest.mark.parametrize("command", COMMANDS, ids=_words)
def test_each_option_and_argument_is_declared_alike(command: Command) -> None:
    leaf = LEAVES[command["words"]]
    options = {p.name: _described_by_typer(p) for p in leaf.params if p.param_type_name == "option"}
    assert {dest(o): _described(o) for o in command.get("options", ())} == options
    arguments = [
        (p.name, p.nargs == -1, p.required) for p in leaf.params if p.param_type_name == "argument"
    ]
    argument = command.get("argument")
    expected = (
        []
        if argument is None
        else [(argument["dest"], argument.get("many", False), argument.get("required", False))]
    )
    assert arguments == expected
    assert command.get("interspersed", True) == leaf.context_settings.get(
        "allow_interspersed_args", True
    )


@pytest.mark.parametrize("command", COMMANDS, ids=_words)
def test_each_command_runs_the_function_its_typer_command_calls(command: Command) -> None:
    """Same parameter names for the parser's function and typer's command function."""
    function = inspect.signature(_function(command)).parameters
    typer_function = inspect.signature(inspect.unwrap(LEAVES[command["words"]].callback)).parameters
    argument = command.get("argument")
    dests = {dest(o) for o in command.get("options", ())} | (
        set() if argument is None else {argument["dest"]}
    )
    assert set(function) == set(typer_function) == dests
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in function.values())
    if command.get("plain", True):  # a client command's function is named after it
        name = command["words"][-1].replace("continue", "continue_").replace("-", "_")
        assert name in command["run"]


# --- the same arguments ---------------------------------------------------------------------


def _sample(option: Option) -> str:
    kind = option.get("kind", "str")
    if kind == "int":
        return str(option.get("min", 0) + 3)
    if kind == "choice":
        choice = option["choices"][-1]
        return choice if option.get("case_sensitive", True) else choice.lower()
    if kind == "path":
        return "/nonexistent/dir/file.toml"
    return "some value"


def _required(command: Command) -> list[str]:
    argv = [*command["words"]]
    for option in command.get("options", ()):
        if option.get("required"):
            argv += [option["names"][0], _sample(option)]
    return argv


def _arguments(command: Command) -> list[str]:
    argument = command.get("argument")
    if argument is None:
        return []
    if argument.get("many"):
        return ["--", "word one", "--json"]
    return ["7"]


def _generated() -> Iterator[list[str]]:
    """For each command: the least it takes, then each option in each of its spellings."""
    for command in CLIENT_COMMANDS:
        base = _required(command)
        args = _arguments(command)
        yield [*base, *args]
        for option in command.get("options", ()):
            kind = option.get("kind", "str")
            for name in option["names"]:
                if kind == "flag":
                    yield [*base, name, *args]
                elif kind == "many":
                    yield [*base, name, "A=1", name, "B=2", *args]
                elif not option.get("required"):
                    yield [*base, name, _sample(option), *args]
                    if name.startswith("--"):
                        yield [*base, f"{name}={_sample(option)}", *args]


PLAIN = [
    ["status", "--json", "--socket", "/s.sock"],
    ["status", "--host=node1:9621", "--token", "/t", "-w", "--interval", "5s"],
    ["ad", "-l", "--socket=/x"],
    ["ad", "--json", "--host", "https://n", "--token=/t", "--socket", "/s"],
    ["drain", "-y", "--reason=kernel update", "--on-completion", "exit", "--deadline", "1h"],
    ["drain", "--quick", "--check", "TotalCpus > 2", "--json", "--wait"],
    ["drain", "--then", "reboot", "-y", "--wait"],
    ["drain", "--on-completion=hook:fw-2.1", "--reason", "firmware"],
    ["cancel", "12", "--json"],
    ["cancel", "--json", "12"],
    ["cancel", "--", "--json"],
    ["claim", "--cpus", "2", "sleep", "--cpus", "3"],
    ["claim", "--env", "A=1", "--", "sh", "-c", "exit 0"],
    ["claim", "--pid", "4321", "--owner", "alice", "--memory", "0"],
    ["claim", "--cpus", "+2", "--", "true"],
    ["release", "3", "--json"],
    ["continue", "--socket", "/s", "3"],
    ["token", "create", "--scope", "dAeMoN", "--subject", "ci", "--lifetime", "1h", "-o", "/t"],
    ["master", "plan", "-w", "--interval=1s", "--json"],
    ["master", "schedule", "set", "-"],
    ["master", "down", "node7", "node8/10.0.0.8", "--json"],
    ["master", "ads", "--constraint", "Cpus > 2", "--projection", "Name,Cpus", "-l"],
    ["defrag", "status", "-c", "/etc/nodeagent/none.toml", "-l"],
    ["version"],
]


@pytest.mark.parametrize("argv", [*_generated(), *PLAIN], ids=" ".join)
def test_plain_command_lines_reach_the_function_as_typer_would_pass_them(
    argv: list[str],
) -> None:
    plain = parse(argv, {})
    assert plain is not None
    assert dict(plain.params) == typer_params(argv)


NOT_PLAIN = [
    [],
    ["--help"],
    ["--install-completion"],
    ["bogus"],
    ["run"],
    ["demo"],
    ["master"],
    ["master", "run"],
    ["master", "schedule"],
    ["defrag", "run"],
    ["token"],
    ["status", "--help"],
    ["status", "--host"],
    ["status", "--host", "--json"],
    ["status", "--host="],
    ["status", "--host", ""],
    ["status", "--json", "--json"],
    ["status", "--socket", "/a", "--socket", "/b"],
    ["status", "-l"],
    ["status", "--jso"],
    ["status", "--json=1"],
    ["status", "-wj"],
    ["ad", "-lj"],
    ["ad", "extra"],
    ["drain", "--reason", "-x"],
    ["drain", "--then", "-x"],
    ["cancel", "1", "2"],
    ["claim", "--cpus", "0", "--", "true"],
    ["claim", "--cpus", "x", "--", "true"],
    ["claim", "--cpus", "-1", "--", "true"],
    ["claim", "--pid", "1"],
    ["claim", "--env"],
    ["release"],
    ["release", "1", "2"],
    ["suspend", "--", "1", "2"],
    ["token", "create", "--subject", "a", "--lifetime", "1h"],
    ["token", "create", "--scope", "bogus", "--subject", "a", "--lifetime", "1h"],
    ["master", "down"],
    ["master", "schedule", "set"],
    ["master", "schedule", "set", "a", "b"],
    ["master", "status", "extra"],
    ["defrag", "status", "-c"],
    ["version", "extra"],
]


@pytest.mark.parametrize("argv", NOT_PLAIN, ids=" ".join)
def test_anything_else_is_left_to_typer(argv: list[str]) -> None:
    assert parse(argv, {}) is None


def test_an_option_not_given_comes_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "NODEAGENT_DEFRAG_HOST": "node9",
        "NODEAGENT_DEFRAG_TOKEN_FILE": "/t",
        "NODEAGENT_DEFRAG_CONFIG": "/etc/d.toml",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for argv in (["defrag", "status"], ["defrag", "status", "--host", "other", "-c", "/x"]):
        plain = parse(argv, env)
        assert plain is not None
        assert dict(plain.params) == typer_params(argv)
    plain = parse(["defrag", "status"], env)
    assert plain is not None
    assert plain.params["config"] == Path("/etc/d.toml")
