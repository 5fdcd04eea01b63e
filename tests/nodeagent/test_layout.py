"""The house's walls: one package per program over a shared kernel.

A program package (``agent``, ``master``, ``defrag``) never imports another; the shared
kernel (the flat ``nodeagent/_*.py`` modules and ``client.py``) imports none of them.
Only the command line (``nodeagent.cli``, which also holds the demo) and the public fakes
(``nodeagent.testing``, fakes of the agent's seams) may import programs. Every import
statement counts, the lazy ones inside functions included.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "nodeagent"
PROGRAMS = ("agent", "master", "defrag")
MAY_IMPORT_PROGRAMS = ("cli", "testing")


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
        return rel[0]
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
    """The schedule, the ad store, the plan and the defrag policy are free of I/O, as slots is."""
    code = (
        "import sys\n"
        "import nodeagent.master._maintenance, nodeagent.master._adstore\n"
        "import nodeagent.master._plan, nodeagent.defrag._policy\n"
        "bad = {'trio', 'httpx', 'httpcore', 'fastapi', 'hypercorn', 'psutil', 'sqlite3',\n"
        "       'socket', 'asyncio', 'pydantic'}\n"
        "print(sorted(bad & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
