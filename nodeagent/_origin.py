"""``MyAddress``: where one daemon may call another, as a plain origin.

A daemon's ad names its API in ``MyAddress``; the master and the defrag daemon call it
there. The address came from the network, so it decides the host and port a call goes to
and nothing else (DESIGN §5): it must be an *origin* — ``http`` or ``https``, a host (a
name, an IPv4 address, or an IPv6 address in brackets) and an optional port — with no
path, query, fragment or user information, and every URL a caller sends to is built from
the parsed :class:`Origin` and a path of the caller's own (:meth:`Origin.url`), never by
appending to the ad's text.

An agent that listens on its Unix socket only advertises ``unix://<socket path>``; such
an address is accepted in an ad (:func:`parse_my_address` returns ``None``) and never
called. Standard library only.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = ["NotAnOrigin", "Origin", "parse_my_address", "parse_origin"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_ORIGIN = re.compile(
    r"(?P<scheme>https?)://"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?)"
    r"(?::(?P<port>[0-9]{1,5}))?"
)
_UNIX = re.compile(r"unix:///[^?#\s]*")


class NotAnOrigin(ValueError):
    """An address that is not a plain ``http(s)://host[:port]`` origin (the message says why)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Origin:
    """A plain origin: ``scheme`` (``http`` or ``https``), ``host`` (IPv6 in brackets) and
    ``port`` (the scheme's default when the text gave none)."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        """The URL of ``path`` (the caller's own: it starts with ``/``) at this origin."""
        if not path.startswith("/") or path.startswith("//"):
            raise ValueError(f"a path at an origin starts with one '/': {path!r}")
        return f"{self}{path}"


def parse_origin(text: object) -> Origin:
    """``text`` as an :class:`Origin`; raises :class:`NotAnOrigin` for anything else (a
    path, even ``/``, a query, a fragment, user information, another scheme, a port out
    of range, a malformed host)."""
    if not isinstance(text, str):
        raise NotAnOrigin(f"an address is a string, not {type(text).__name__}")
    match = _ORIGIN.fullmatch(text)
    if match is None:
        shown = text if len(text) <= 200 else text[:200] + "…"
        raise NotAnOrigin(
            f"{shown!r} is not a plain origin: http:// or https://, a host and a port, "
            "and nothing else (no path, query, fragment or user)"
        )
    scheme, host, port = match["scheme"], match["host"], match["port"]
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise NotAnOrigin(f"{text!r}: {host} is not an IPv6 address") from None
    number = _DEFAULT_PORTS[scheme] if port is None else int(port)
    if not 0 < number <= 65535:
        raise NotAnOrigin(f"{text!r}: port {number} is out of range")
    return Origin(scheme=scheme, host=host.lower(), port=number)


def parse_my_address(text: object) -> Origin | None:
    """An ad's ``MyAddress``: its :class:`Origin`, or ``None`` for a Unix socket's address
    (``unix:///path``), which no daemon calls; raises :class:`NotAnOrigin` otherwise."""
    if isinstance(text, str) and _UNIX.fullmatch(text) and text.isprintable():
        return None
    return parse_origin(text)
