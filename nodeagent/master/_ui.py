"""The maintenance page's files, as the master and ``nodeagent master ui`` serve them.

The page is three static files shipped in the package (``nodeagent/master/ui/``): plain
HTML, CSS and JavaScript that read the master's API from the origin that served them. Both
servers answer the same bytes with the same headers (:func:`page_file`,
:data:`PAGE_HEADERS`): no caching without asking again, a Content-Security-Policy that
lets the page load and call nothing but its own origin, and no content sniffing.

Standard library only, without ``typing`` or ``dataclasses``: the command line imports it.
"""

from __future__ import annotations

import os

__all__ = ["PAGE_FILES", "PAGE_HEADERS", "page_file"]

_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ui")

#: Each file of the page, by name, and its content type. ``""`` (``/ui/``) is the page.
PAGE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
}

#: The headers of every file of the page.
PAGE_HEADERS = (
    ("Cache-Control", "no-cache"),
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)

_read: dict[str, bytes] = {}


def page_file(name: str) -> tuple[bytes, str] | None:
    """The file ``name`` of the page (``""``: ``index.html``) and its content type;
    ``None`` for any other name (nothing outside :data:`PAGE_FILES` is ever opened).

    Read once, then kept. Raises :class:`OSError` when the package lacks the file.
    """
    name = name or "index.html"
    content_type = PAGE_FILES.get(name)
    if content_type is None:
        return None
    body = _read.get(name)
    if body is None:
        with open(os.path.join(_DIRECTORY, name), "rb") as f:
            body = _read[name] = f.read()
    return body, content_type
