"""The house's walls: one package per program over a shared kernel.

A program package (``agent``, ``master``, ``defrag``) never imports another; the shared
kernel (the flat ``nodeagent/_*.py`` modules, its subpackages ``nodeagent/_*/`` such as
``_ha`` and ``_expressions``, and the public client ``nodeagent.client``) imports none of
them. Only the command line (``nodeagent.cli``, which also holds the demo) and the public fakes
(``nodeagent.testing``, fakes of the agent's seams) may import programs. Every import
statement counts, the lazy ones inside functions included.

A program calls another daemon's API only through the kernel's vocabulary of that API
(:mod:`nodeagent._agent_calls`, :mod:`nodeagent._master_calls`): no string in a program
package (docstrings aside) names a path that another program serves and it does not.
And each package's ``__init__`` docstring is its map: one line for each of its modules.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from nodeagent._clock import WallClock
from nodeagent.defrag._daemon import build_defrag_app
from nodeagent.defrag._policy import DefragPolicy
from nodeagent.defrag._service import DefragService, HttpDefragLink

PACKAGE = Path(__file__).resolve().parents[2] / "nodeagent"
PROGRAMS = ("agent", "master", "defrag")
MAY_IMPORT_PROGRAMS = ("cli", "testing")
#: The kernel's public packages; its private ones are every ``nodeagent/_*/``.
KERNEL_PACKAGES = ("client",)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, absolute module)`` for every import statement in ``path``."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imports_in(path.read_text(), package)


def _imports_in(source: str, package: str) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from nodeagent import master` names a package too
                yield node.lineno, f"{target}.{alias.name}"


def _program_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "nodeagent" and parts[1] in PROGRAMS:
        return parts[1]
    return None


def _owner(path: Path) -> str:
    """``agent``/``master``/``defrag``, ``cli``, ``testing``, or ``kernel``."""
    rel = path.relative_to(PACKAGE).parts
    if len(rel) > 1:
        return "kernel" if rel[0] in KERNEL_PACKAGES or rel[0].startswith("_") else rel[0]
    return "testing" if rel[0] == "testing.py" else "kernel"


def _violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        owner = _owner(path)
        if owner in MAY_IMPORT_PROGRAMS:
            continue
        for line, module in _imports(path):
            program = _program_of(module)
            if program is None or program == owner:
                continue
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            found.append(f"{where} ({owner}) imports {module}")
    return sorted(set(found))


def test_no_program_imports_another_and_the_kernel_imports_none() -> None:
    assert _violations() == []


def test_every_program_package_exists_and_is_seen_by_the_check() -> None:
    owners = {_owner(p) for p in PACKAGE.rglob("*.py")}
    assert {*PROGRAMS, "cli", "kernel", "testing"} <= owners


def test_the_kernel_subpackages_are_kernel() -> None:
    """A module of a kernel subpackage is held to the kernel's rule, not taken for a program."""
    subpackages = sorted(p.parent for p in PACKAGE.glob("_*/__init__.py"))
    assert {"_expressions", "_ha", "_serving"} <= {p.name for p in subpackages}
    for package in subpackages:
        assert {_owner(p) for p in package.rglob("*.py")} == {"kernel"}
    assert _owner(PACKAGE / "_ha" / "_store.py") == "kernel"
    assert _owner(PACKAGE / "master" / "_plan.py") == "master"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from nodeagent.master._plan import x", "nodeagent.master._plan"),
        ("from ..master import _plan", "nodeagent.master._plan"),
        ("import nodeagent.defrag._policy", "nodeagent.defrag._policy"),
        ("from nodeagent import agent", "nodeagent.agent"),
    ],
)
def test_the_check_sees_every_form_of_import(source: str, expected: str) -> None:
    """A test of the test: each spelling, lazy or not, resolves to the module it names."""
    lazy = f"def f() -> None:\n    {source}\n"
    modules = [m for _, m in _imports_in(lazy, "nodeagent.defrag")]
    assert expected in modules
    assert _program_of(expected) is not None


def test_the_pure_parts_of_the_programs_load_without_trio_or_sockets() -> None:
    """The schedule, the ad store, the plan, the master's drains and the defrag policy are
    free of I/O, as slots is."""
    code = (
        "import sys\n"
        "import nodeagent.master._maintenance, nodeagent.master._adstore\n"
        "import nodeagent.master._plan, nodeagent.master._drains, nodeagent.defrag._policy\n"
        "bad = {'trio', 'httpx', 'httpcore', 'fastapi', 'hypercorn', 'psutil', 'sqlite3',\n"
        "       'socket', 'asyncio', 'pydantic'}\n"
        "print(sorted(bad & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- calls to another daemon's API by string ------------------------------------------------

#: What an f-string's value stands for in a path.
HOLE = "\0"
#: A route's method, as ``@app.get(path)`` or ``app.post(path)(endpoint)`` names it.
_ROUTE_METHODS = frozenset({"get", "post", "put", "delete", "patch", "head", "options"})
_ADD_ROUTE = frozenset({"add_api_route", "add_route", "api_route"})
_PATH = re.compile(r"(?:[A-Za-z0-9\-._~%/\0]|\{[^{}/]*\})*")
_PREFIXES = ("/v1/", "/healthz")


def _text(node: ast.expr) -> str | None:
    """A string constant's text, or an f-string's with each value a :data:`HOLE`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else HOLE
            for v in node.values
        )
    return None


def _served_in(source: str) -> set[str]:
    """The route paths a module declares: the first argument of ``@app.get(...)`` (any
    route method, as a decorator or as ``app.post(path)(endpoint)``) or of
    ``add_api_route``, and an app's ``openapi_url``; an f-string's value is a path
    parameter there (``{}``)."""
    tree = ast.parse(source)
    applied = {
        id(d)
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        for d in n.decorator_list
    }
    applied |= {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    paths: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else None
        route = (name in _ROUTE_METHODS and id(node) in applied) or name in _ADD_ROUTE
        given = [node.args[0]] if route and node.args else []
        given += [
            k.value for k in node.keywords if k.arg == "openapi_url" or (route and k.arg == "path")
        ]
        for arg in given:
            text = _text(arg)
            if text is not None and text.startswith("/"):
                paths.add(text.replace(HOLE, "{}"))
    return paths


def _named_in(source: str) -> Iterator[tuple[int, str]]:
    """``(line, path)`` for every string of ``source`` that starts with a path of the
    APIs (:data:`_PREFIXES`): each string constant and each literal part of an f-string
    (with what follows it, a value as :data:`HOLE`), cut where a path ends (a query, a
    space, a ``:``); a docstring (a string that is a statement of its own) is not one."""
    tree = ast.parse(source)
    statements = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if id(node) in statements or id(node) in parts:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            pieces = [node.value]
        elif isinstance(node, ast.JoinedStr):
            pieces = [
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else HOLE
                for v in node.values
            ]
        else:
            continue
        for i, piece in enumerate(pieces):
            if piece != HOLE and piece.startswith(_PREFIXES):
                path = _PATH.match("".join(pieces[i:]))
                assert path is not None
                yield node.lineno, path.group()


def _segments(path: str) -> tuple[tuple[str, ...], bool]:
    """A named path's segments, and whether it may go on (it ends with ``/`` or a value:
    the code appends to it, or the value holds more segments)."""
    segments = path.strip("/").split("/") if path.strip("/") else []
    return tuple(segments), path.endswith(("/", HOLE))


def _param(segment: str) -> bool:
    return segment.startswith("{") and segment.endswith("}")


def _names(path: str, template: str) -> bool:
    """Whether the string ``path`` (values as :data:`HOLE`) may name the route
    ``template``: segment by segment, a route's ``{param}`` matches any one segment and
    ``{param:path}`` the rest; a value matches any text within its segment."""
    named, more = _segments(path)
    route, _ = _segments(template)
    for i, want in enumerate(route):
        if _param(want) and want.endswith(":path}"):
            return i < len(named) or more
        if i >= len(named):
            return more
        have = named[i]
        if _param(want) or _param(have):
            continue
        pattern = ".*".join(re.escape(p) for p in have.split(HOLE))
        if not re.fullmatch(pattern, want):
            return False
    return len(named) == len(route)


def _program_files(program: str) -> list[Path]:
    return sorted((PACKAGE / program).rglob("*.py"))


@functools.cache
def _served() -> dict[str, frozenset[str]]:
    """The routes each program declares (read once)."""
    return {
        program: frozenset().union(*(_served_in(p.read_text()) for p in _program_files(program)))
        for program in PROGRAMS
    }


def _calls_by_string(
    program: str, files: Iterable[tuple[str, str]], served: dict[str, frozenset[str]]
) -> list[str]:
    """``where: path (served by …)`` for each string of ``program``'s ``files`` (``(name,
    source)``) that names a route of another program and none of its own."""
    found: list[tuple[str, int, str]] = []
    for name, source in files:
        for line, path in _named_in(source):
            if any(_names(path, own) for own in served[program]):
                continue
            others = sorted(
                other
                for other, routes in served.items()
                if other != program and any(_names(path, route) for route in routes)
            )
            if others:
                shown = path.replace(HOLE, "{…}")
                found.append((name, line, f"{shown!r} (served by {', '.join(others)})"))
    return [f"{name}:{line}: {what}" for name, line, what in sorted(found)]


@pytest.mark.parametrize(
    "program",
    ["agent", "defrag", "master"],
)
def test_no_program_calls_another_daemon_by_path(program: str) -> None:
    """Through nodeagent._agent_calls and nodeagent._master_calls only."""
    files = [(str(p.relative_to(PACKAGE.parent)), p.read_text()) for p in _program_files(program)]
    assert _calls_by_string(program, files, _served()) == []


def test_the_routes_each_program_serves_are_seen() -> None:
    """A test of the test: the routes read from the sources are the apps' (the agent's
    OpenAPI document, the defrag daemon's app) and the master's known ones."""
    served = _served()
    documented = json.loads((PACKAGE.parent / "docs" / "openapi.json").read_text())["paths"]
    assert set(documented) | {"/v1/openapi.json"} == served["agent"]
    link = HttpDefragLink(master_url="http://m:1", token_file=None, key=b"k" * 32, name="t")
    service = DefragService(policy=DefragPolicy(name="t"), link=link, clock=WallClock())
    app = build_defrag_app(service, key=None)
    assert {getattr(route, "path", None) for route in app.routes} == served["defrag"]
    assert {
        "/healthz",
        "/v1/ad",
        "/v1/ads",
        "/v1/ads/{name}",
        "/v1/maintenance/plan",
        "/v1/maintenance/operations/{op_id}/{}",
        "/v1/sla/policies/{group:path}",
        "/machine/down",
    } <= served["master"]


@pytest.mark.parametrize(
    ("program", "source", "found"),
    [
        # the agent's paths, from the defrag daemon: as a constant, an f-string, a prefix
        ("defrag", 'link.call(a, "POST", "/v1/drain", body=b)', ["/v1/drain"]),
        ("defrag", 'link.call(a, "POST", f"/v1/drain/{rid}/commit")', ["/v1/drain/{…}/commit"]),
        ("defrag", 'url = address + "/v1/drain/" + rid + "/cancel"', ["/v1/drain/"]),
        ("defrag", 'get(f"{address}/v1/claims?x={y}")', ["/v1/claims"]),
        ("defrag", "get(f\"{address + '/v1/drain'}\")", ["/v1/drain"]),  # within a value
        # the master's, from the agent
        ("agent", 'request("POST", url + "/v1/ads", json=ad)', ["/v1/ads"]),
        ("agent", 'request("GET", f"{url}/v1/ads/{quote(name)}")', ["/v1/ads/{…}"]),
        ("agent", 'request("GET", url + "/v1/sla/policies/" + group)', ["/v1/sla/policies/"]),
        # the agent's, from the master
        ("master", 'link.call(a, "DELETE", "/v1/drain", node=n, actor=x)', ["/v1/drain"]),
        # a docstring, a path the program serves itself, one no program serves: none
        ("defrag", 'def f() -> None:\n    """POST /v1/drain, then /v1/drain/{id}/commit."""', []),
        ("defrag", '"""/v1/drain"""\nx = 1\n"""/v1/drain/{id}/cancel"""', []),
        ("defrag", 'app.get("/v1/stats")', []),
        ("master", 'link.call(a, "GET", "/v1/ad", node=n, actor=x)', []),  # the master's too
        ("agent", 'x = "/v1/drain/" + rid', []),
        ("agent", 'x = "/v1/nothing"', []),
        ("defrag", 'log.info("read from %s", "http://m/v1/ads")', []),  # not a path's start
    ],
)
def test_the_path_rule_catches_a_planted_call(program: str, source: str, found: list[str]) -> None:
    """A test of the test: each planted string is found, or rightly not."""
    served = _served()
    got = _calls_by_string(program, [("planted.py", source)], served)
    assert [line.split("'")[1] for line in got] == found


@pytest.mark.parametrize(
    ("path", "template", "names"),
    [
        ("/v1/drain", "/v1/drain", True),
        ("/v1/drain", "/v1/drain/{request_id}/commit", False),
        ("/v1/drain/", "/v1/drain/{request_id}/commit", True),
        (f"/v1/drain/{HOLE}/commit", "/v1/drain/{request_id}/commit", True),
        (f"/v1/drain/{HOLE}/commit", "/v1/drain/{request_id}/cancel", False),
        (f"/v1/drain/{HOLE}", "/v1/drain/{request_id}/cancel", True),  # the value may go on
        (f"/v1/drain/x{HOLE}", "/v1/drain/{request_id}", True),
        (f"/v1/{HOLE}s", "/v1/ads", True),
        (f"/v1/{HOLE}s", "/v1/ad", False),
        ("/v1/ad", "/v1/ads", False),
        ("/v1/ads/n1", "/v1/ads/{name}", True),
        ("/v1/ads/n1/x", "/v1/ads/{name}", False),
        ("/v1/sla/policies/a/b", "/v1/sla/policies/{group:path}", True),
        ("/v1/sla/policies", "/v1/sla/policies/{group:path}", False),
        ("/v1/maintenance/operations/{op_id}/pause", "/v1/maintenance/operations/{op_id}/{}", True),
        ("/healthz", "/healthz", True),
    ],
)
def test_a_path_names_a_route_segment_by_segment(path: str, template: str, names: bool) -> None:
    assert _names(path, template) is names


#: Packages whose docstring lists every module, one ``* :mod:`._name`: …`` line each.
LISTED = ("master", "agent", "defrag", "cli", "_ha", "_expressions", "_serving", "client")
_ITEM = re.compile(r"^\* :mod:`\.(_\w+)`", re.MULTILINE)


def _listed(docstring: str) -> list[str]:
    """The modules a package's docstring lists: each item line's first ``:mod:`._name```."""
    return _ITEM.findall(docstring)


def _modules(package: Path) -> set[str]:
    return {p.stem for p in package.glob("_*.py") if p.name != "__init__.py"}


@pytest.mark.parametrize("name", LISTED)
def test_a_package_docstring_lists_each_of_its_modules_once(name: str) -> None:
    """So a newcomer reads the package's map in its ``__init__``, and the map stays true: a
    module added without its line, or a line left for a module gone, fails here."""
    package = PACKAGE / name
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    listed = _listed(docstring)
    assert sorted(listed) == sorted(set(listed)), "a module listed twice"
    assert _modules(package) - set(listed) == set(), "modules missing from the docstring"
    assert set(listed) - _modules(package) == set(), "lines for modules that do not exist"


def test_the_list_check_reads_item_lines_only() -> None:
    """A test of the test: a module named in prose is not listed; an item line is."""
    docstring = (
        "The master. :mod:`._plan` is pure.\n\n"
        "* :mod:`._api`: the API, served by :mod:`._daemon`.\n"
        "* :mod:`._plan`: the plan.\n"
    )
    assert _listed(docstring) == ["_api", "_plan"]
