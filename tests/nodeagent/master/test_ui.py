"""The maintenance page's files (:mod:`nodeagent.master._ui`) and the master's ``/ui/``.

The files: each served name and its content type, nothing else opened; the page loads
and calls nothing but its own origin, and puts no text of the master's into markup. The
route, in process: READ over TCP as every read of the API (no anonymous page), none over
the Unix socket, the same bytes and headers as :func:`page_file`, 404 for another name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent._auth import Scope
from nodeagent.master import _ui
from nodeagent.master._events import EVENT_TYPES
from nodeagent.master._ui import PAGE_FILES, PAGE_HEADERS, page_file
from tests.nodeagent.master.test_master_api import api, error_code

FILES = Path(_ui.__file__).with_name("ui")


@pytest.mark.parametrize(
    ("name", "served", "content_type"),
    [
        ("", "index.html", "text/html; charset=utf-8"),
        ("index.html", "index.html", "text/html; charset=utf-8"),
        ("page.css", "page.css", "text/css; charset=utf-8"),
        ("page.js", "page.js", "text/javascript; charset=utf-8"),
        ("Page.js", None, None),
        ("index.htm", None, None),
        ("../_ui.py", None, None),
        ("ui/page.js", None, None),
        ("/etc/passwd", None, None),
        ("page.js/", None, None),
    ],
)
def test_only_the_page_s_own_files_are_served(
    name: str, served: str | None, content_type: str | None
) -> None:
    found = page_file(name)
    if served is None:
        assert found is None
    else:
        assert found == ((FILES / served).read_bytes(), content_type)


def test_the_package_holds_every_file_and_nothing_more() -> None:
    assert sorted(p.name for p in FILES.iterdir()) == sorted(PAGE_FILES)


def test_the_page_loads_nothing_from_elsewhere_and_runs_no_inline_code() -> None:
    """Its strict policy (``default-src 'self'``) would block the rest anyway: a test says
    so before a browser does."""
    html = (FILES / "index.html").read_text()
    assert re.findall(r'(?:src|href)="([^"]*)"', html) == ["data:,", "page.css", "page.js"]
    for inline in ("<script>", "<style", " style="):
        assert inline not in html
    assert not re.search(r"<[^>]+\son[a-z]+=", html)  # no inline handler
    for name in ("page.css", "page.js"):
        text = (FILES / name).read_text()
        urls = set(re.findall(r"https?://[^\s\"')]+", text))
        assert urls <= {"http://www.w3.org/2000/svg"}, (name, urls)
        for loads in ("@import", "url("):
            assert loads not in text


def test_the_page_inserts_the_master_s_text_as_text() -> None:
    """Names, reasons and events reach the DOM through textContent and attributes only."""
    script = (FILES / "page.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
    assert "new Function" not in script
    # Every request goes to a path of the same origin.
    assert set(re.findall(r'"(/v1/[^"?]*)', script)) == {
        "/v1/maintenance/plan",
        "/v1/maintenance/operations",
        "/v1/events",
        "/v1/leader",
    }


def test_the_page_listens_to_every_type_of_event() -> None:
    """An EventSource hands a named event (``event: drain.committed``) only to a listener of
    that name: the page names every type the master writes, and ``gap``."""
    script = (FILES / "page.js").read_text()
    listed = script.split("const EVENT_TYPES = [", 1)[1].split("];", 1)[0]
    assert set(re.findall(r'"([a-z_.]+)"', listed)) == {*EVENT_TYPES, "gap"}


def test_the_headers_keep_the_page_to_its_origin() -> None:
    headers = dict(PAGE_HEADERS)
    assert headers["Cache-Control"] == "no-cache"
    assert headers["X-Content-Type-Options"] == "nosniff"
    policy = headers["Content-Security-Policy"]
    assert policy.startswith("default-src 'self';")
    assert "unsafe" not in policy
    assert "frame-ancestors 'none'" in policy


async def test_the_master_serves_the_page_to_readers_only(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        for path in ("/ui/", "/ui/page.js"):
            assert error_code(await a.tcp.get(path)) == (401, "auth.unauthenticated")
        bad = {"Authorization": "Bearer not-a-token"}
        assert (await a.tcp.get("/ui/", headers=bad)).status_code == 401
        for name, path in (("", "/ui/"), ("page.css", "/ui/page.css"), ("page.js", "/ui/page.js")):
            body, content_type = page_file(name) or (b"", "")
            for client, headers in ((a.tcp, a.token(Scope.READ)), (a.local, {})):
                reply = await client.get(path, headers=headers)
                assert reply.status_code == 200
                assert reply.content == body
                assert reply.headers["content-type"] == content_type
                for field, value in PAGE_HEADERS:
                    assert reply.headers[field] == value
                assert not any(h.startswith("access-control-") for h in reply.headers)
        read = a.token(Scope.READ)
        assert error_code(await a.tcp.get("/ui/secret.txt", headers=read)) == (
            404,
            "http.not_found",
        )
        assert (await a.tcp.get("/ui/..%2Fmaster.db", headers=read)).status_code == 404
        assert (await a.tcp.post("/ui/", headers=read)).status_code == 405
