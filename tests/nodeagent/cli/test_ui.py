"""``nodeagent master ui``'s rules (:mod:`nodeagent.cli._ui`): where it may listen, and
what it forwards. Its requests against a real master are in tests/integration/test_ui.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nodeagent.cli._errors import UsageError
from nodeagent.cli._ui import forwarded, loopback_address


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("127.1.2.3:65535", ("127.1.2.3", 65535)),
        ("localhost:9000", ("127.0.0.1", 9000)),
        ("[::1]:0", ("::1", 0)),
        (" 127.0.0.1:1 ", ("127.0.0.1", 1)),
    ],
)
def test_a_loopback_address_is_taken(text: str, address: tuple[str, int]) -> None:
    assert loopback_address(text) == address


@pytest.mark.parametrize(
    "text",
    [
        "0.0.0.0:8080",  # every interface: the operator's rights to anyone on the network
        "10.0.0.1:8080",
        "[::]:0",
        "example.org:80",
        "128.0.0.1:80",
        "127.0.0.256:80",
        "127.0.0:80",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "127.0.0.1:-1",
        ":8080",
        "",
    ],
)
def test_anything_else_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError) as raised:
        loopback_address(text)
    assert raised.value.code == "cli.usage"
    assert raised.value.exit_status == 2


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/v1/maintenance/plan", True),
        ("GET", "/v1/maintenance/operations", True),
        ("GET", "/v1/maintenance/operations/12", True),
        ("GET", "/v1/events", True),
        ("GET", "/v1/leader", True),
        ("POST", "/v1/maintenance/plan", False),
        ("POST", "/v1/maintenance/operations", False),
        ("POST", "/v1/maintenance/operations/12/cancel", False),
        ("GET", "/v1/maintenance/operations/12/cancel", False),
        ("GET", "/v1/maintenance/operations/a%2Fb", False),
        ("GET", "/v1/maintenance/plan/", False),
        ("HEAD", "/v1/leader", False),
        ("GET", "/maintenance/schedule", False),
        ("GET", "/v1/ads", False),
        ("GET", "/metrics", False),
        ("GET", "/v1/openapi.json", False),
        ("GET", "/v1/events/../ads", False),
        ("PUT", "/v1/maintenance/schedule", False),
        ("GET", "/V1/LEADER", False),
    ],
)
def test_only_the_page_s_reads_are_forwarded(method: str, path: str, expected: bool) -> None:
    assert forwarded(method, path) is expected


def test_the_command_is_plain_and_imports_no_server_stack() -> None:
    """The entry point runs it without typer, and it serves with the standard library: no
    trio, httpx, FastAPI, hypercorn, pydantic; not even ``http.client`` or ``typing``."""
    code = (
        "import sys, os\n"
        "from nodeagent.cli._fast import parse\n"
        "plain = parse(['master', 'ui', '--no-open', '--listen', '127.0.0.1:0'], os.environ)\n"
        "print(sorted(plain.params.items()) if plain is not None else None)\n"
        "import nodeagent.cli._ui\n"
        "names = {*sys.modules, *(m.partition('.')[0] for m in sys.modules)}\n"
        "print(sorted(names & set(sys.argv[1:])))\n"
    )
    heavy = ("trio", "httpx", "httpcore", "pydantic", "fastapi", "hypercorn", "typer", "rich")
    needless = ("http.client", "email", "ssl", "dataclasses", "typing", "inspect")
    result = subprocess.run(
        [sys.executable, "-c", code, *heavy, *needless],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    params, imported = result.stdout.splitlines()
    assert params == str(
        sorted(
            {
                "listen": "127.0.0.1:0",
                "no_open": True,
                "host": None,
                "token": None,
                "socket_path": None,
            }.items()
        )
    )
    assert imported == "[]", result.stderr
