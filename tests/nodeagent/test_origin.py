"""``MyAddress`` as a plain origin (:mod:`nodeagent._origin`), as a table."""

from __future__ import annotations

import pytest

from nodeagent._origin import NotAnOrigin, Origin, parse_my_address, parse_origin


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("http://127.0.0.1:9621", Origin(scheme="http", host="127.0.0.1", port=9621)),
        ("https://Node1.Example:443", Origin(scheme="https", host="node1.example", port=443)),
        ("http://n1.test", Origin(scheme="http", host="n1.test", port=80)),
        ("https://n1.test", Origin(scheme="https", host="n1.test", port=443)),
        ("http://[::1]:9621", Origin(scheme="http", host="[::1]", port=9621)),
        ("http://node_1:1", Origin(scheme="http", host="node_1", port=1)),
    ],
)
def test_a_plain_origin_is_parsed(text: str, origin: Origin) -> None:
    assert parse_origin(text) == origin
    assert parse_my_address(text) == origin
    assert origin.url("/v1/ad") == f"{origin}/v1/ad"


@pytest.mark.parametrize(
    "text",
    [
        "http://127.0.0.1:9621/x?target=",  # a path and a query of the ad's choosing
        "http://127.0.0.1:9621/",
        "http://127.0.0.1:9621/v1",
        "http://127.0.0.1:9621?target=",
        "http://127.0.0.1:9621#fragment",
        "http://user:pw@127.0.0.1:9621",
        "http://127.0.0.1@evil:9621",
        "HTTP://127.0.0.1:9621",
        "ftp://127.0.0.1:9621",
        "127.0.0.1:9621",
        "//127.0.0.1:9621",
        "http://127.0.0.1:0",
        "http://127.0.0.1:65536",
        "http://127.0.0.1:",
        "http://[not-ipv6]:1",
        "http://[::1:1",
        "http://-bad:1",
        "http://a b:1",
        "http://127.0.0.1:9621\n",
        "http://127.0.0.1:9621 ",
        "",
        "unix:///run/nodeagent/nodeagent.sock",  # never called
    ],
)
def test_anything_else_is_not_an_origin(text: str) -> None:
    with pytest.raises(NotAnOrigin):
        parse_origin(text)


@pytest.mark.parametrize("value", [None, 7, b"http://h:1", ["http://h:1"]])
def test_a_value_that_is_not_text_is_not_an_origin(value: object) -> None:
    with pytest.raises(NotAnOrigin, match="a string"):
        parse_origin(value)


def test_a_unix_socket_is_a_my_address_that_is_never_called() -> None:
    assert parse_my_address("unix:///run/nodeagent/nodeagent.sock") is None
    for text in ("unix:///s.sock?x=1", "unix:///s.sock#f", "unix://host/s.sock", "unix:///a\x1b"):
        with pytest.raises(NotAnOrigin):
            parse_my_address(text)


@pytest.mark.parametrize("path", ["v1/ad", "//evil/v1/ad", ""])
def test_a_path_at_an_origin_is_the_callers_own_and_absolute(path: str) -> None:
    with pytest.raises(ValueError, match="starts with one '/'"):
        Origin(scheme="http", host="h", port=1).url(path)
