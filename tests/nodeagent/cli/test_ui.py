"""``nodeagent master ui``'s rules (:mod:`nodeagent.cli._ui`): where it may listen, and
what it forwards. Its requests against a real master are in tests/integration/test_ui.py."""

from __future__ import annotations

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
