"""The command line follows a master's redirect to its leader (:func:`nodeagent.cli._http.call`).

Real HTTP servers of the test's own, on loopback and on a Unix socket, in threads: a
follower answers ``307`` with the leader's URL, as a master that does not lead does; the
leader (another server) records what arrives.
"""

from __future__ import annotations

import json
import socketserver
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nodeagent.cli._errors import AgentFailed
from nodeagent.cli._http import (
    MAX_REDIRECTS,
    Target,
    call,
    request,
    resolve_master_target,
)
from nodeagent.cli._record import replace


@dataclass(frozen=True)
class Arrived:
    method: str
    path: str
    body: bytes
    authorization: str | None
    content_type: str | None


Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Server:
    """What a server received; ``answer`` makes each reply."""

    answer: Callable[[Arrived], Answer]
    arrived: list[Arrived] = field(default_factory=list)
    url: str = ""


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen = Arrived(
                method=self.command,
                path=self.path,
                body=self.rfile.read(length),
                authorization=self.headers.get("Authorization"),
                content_type=self.headers.get("Content-Type"),
            )
            server.arrived.append(seen)
            status, headers, body = server.answer(seen)
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _any

        def address_string(self) -> str:
            return "test"

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextmanager
def serving(
    answer: Callable[[Arrived], Answer],
    *,
    unix: Path | None = None,
    tls: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
) -> Iterator[Server]:
    """A server on ``host`` (a loopback address; over TLS with ``tls``), or on the Unix
    socket ``unix``, for the block."""
    server = Server(answer)
    httpd: socketserver.BaseServer
    if unix is None:
        httpd = ThreadingHTTPServer((host, 0), _handler(server))
        scheme = "http"
        if tls is not None:
            httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
            scheme = "https"
        server.url = f"{scheme}://{host}:{httpd.server_address[1]}"
    else:
        httpd = _UnixHTTPServer(str(unix), _handler(server))
        server.url = f"unix:{unix}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def leader_answer(seen: Arrived) -> Answer:
    return 200, {}, json.dumps({"took": seen.method}).encode()


def redirect_to(url: Callable[[], str], status: int = 307) -> Callable[[Arrived], Answer]:
    """A follower: ``status`` to ``url()`` + the same path and query, with the body a master
    that does not lead sends."""

    def answer(seen: Arrived) -> Answer:
        body = {
            "error": {
                "code": "master.not_leader",
                "message": "this master does not lead",
                "leader": url(),
            }
        }
        return status, {"Location": url() + seen.path}, json.dumps(body).encode()

    return answer


def tcp(url: str, token: str | None = "tok", *, masters: tuple[str, ...] = ()) -> Target:
    """The master at ``url`` as ``--host URL,MASTERS…`` names it: a redirect may lead to
    ``url`` and to ``masters``."""
    _, host, port = origin(url)
    listed = tuple(origin(u) for u in (url, *masters))
    return Target(host=host, port=port, token=token, peer="master", masters=listed)


def origin(url: str) -> tuple[str, str, int]:
    scheme, rest = url.split("://")
    host, port = rest.split(":")
    return (scheme, host, int(port))


BODY = {"windows": [{"machine_ids": [{"hostname": "n1", "ip": "10.0.0.1"}]}]}


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
@pytest.mark.parametrize("status", [307, 308])
def test_a_write_to_a_follower_reaches_the_leader(method: str, status: int) -> None:
    with serving(leader_answer) as leader, serving(redirect_to(lambda: leader.url, status)) as f:
        reply = call(tcp(f.url, masters=(leader.url,)), method, "/maintenance/schedule?x=1", BODY)
    assert (reply.status, reply.data) == (200, {"took": method})
    [first] = f.arrived
    [arrived] = leader.arrived
    assert arrived == first  # the same method, path and query, body and headers
    assert (arrived.method, arrived.path) == (method, "/maintenance/schedule?x=1")
    assert json.loads(arrived.body) == BODY
    assert arrived.authorization == "Bearer tok"
    assert arrived.content_type == "application/json"


def test_raw_content_is_sent_again_as_it_is() -> None:
    content = b'{"windows": []}'
    with serving(leader_answer) as leader, serving(redirect_to(lambda: leader.url)) as f:
        call(tcp(f.url, masters=(leader.url,)), "POST", "/maintenance/schedule", content=content)
    assert leader.arrived[0].body == content


def test_three_redirects_in_a_row_are_followed_and_a_fourth_is_an_error() -> None:
    with (
        serving(leader_answer) as leader,
        serving(redirect_to(lambda: leader.url)) as f3,
        serving(redirect_to(lambda: f3.url)) as f2,
        serving(redirect_to(lambda: f2.url)) as f1,
        serving(redirect_to(lambda: f1.url)) as f0,
    ):
        assert MAX_REDIRECTS == 3
        pool = (leader.url, f3.url, f2.url, f1.url)
        assert call(tcp(f1.url, masters=pool), "POST", "/machine/down", BODY).status == 200
        assert len(leader.arrived) == 1
        with pytest.raises(AgentFailed) as looped:
            call(tcp(f0.url, masters=pool), "POST", "/machine/down", BODY)
        assert len(leader.arrived) == 1  # the fourth redirect is not followed
    assert looped.value.code == "master.too_many_redirects"
    assert looped.value.exit_status == 5
    assert f"{f0.url.removeprefix('http://')}" in looped.value.message
    assert leader.url + "/machine/down" in looped.value.message


def test_two_followers_pointing_at_each_other_end_in_the_error() -> None:
    urls: dict[str, str] = {}
    with (
        serving(redirect_to(lambda: urls["b"])) as a,
        serving(redirect_to(lambda: urls["a"])) as b,
    ):
        urls.update(a=a.url, b=b.url)
        with pytest.raises(AgentFailed, match="do not agree on who leads"):
            call(tcp(a.url, masters=(b.url,)), "DELETE", "/v1/maintenance/operations/7")
        assert len(a.arrived) + len(b.arrived) == MAX_REDIRECTS + 1


def test_from_the_unix_socket_a_redirect_is_refused(tmp_path: Path) -> None:
    """The socket names no TCP master: a redirect from it goes nowhere, token or not."""
    socket_path = tmp_path / "master.sock"
    token = tmp_path / "admin.token"
    token.write_text("tok\n")
    with (
        serving(leader_answer) as leader,
        serving(redirect_to(lambda: leader.url), unix=socket_path) as follower,
    ):
        errors = []
        for env in (
            {"NODEAGENT_MASTER_SOCKET": str(socket_path)},
            {
                "NODEAGENT_MASTER_SOCKET": str(socket_path),
                "NODEAGENT_MASTER_TOKEN_FILE": str(token),
            },
        ):
            target = resolve_master_target(
                host=None, token_file=None, socket_path=None, env=env, uid=0
            )
            with pytest.raises(AgentFailed) as refused:
                call(target, "POST", "/machine/down", BODY)
            errors.append(refused.value)
        assert leader.arrived == []  # nothing sent there, with or without the token
        assert len(follower.arrived) == 2
    for error in errors:
        assert (error.code, error.exit_status) == ("master.redirect_refused", 5)
        assert f"the master at unix:{socket_path} redirected to {leader.url}/machine/down" in (
            error.message
        )
        assert "--host URL,URL… (or NODEAGENT_MASTER_HOST)" in error.message
        assert error.reply.data["error"]["leader"] == leader.url  # what --json prints


def test_a_redirect_to_a_master_not_given_is_refused_and_gets_no_token() -> None:
    """A lone master (or anything answering at its address) sends the command elsewhere,
    here to another loopback address: nothing is sent there."""
    with (
        serving(leader_answer, host="127.0.0.2") as elsewhere,
        serving(leader_answer) as given,
        serving(redirect_to(lambda: elsewhere.url)) as master,
    ):
        for target in (tcp(master.url), tcp(master.url, masters=(given.url,))):
            with pytest.raises(AgentFailed) as refused:
                call(target, "POST", "/machine/down", BODY)
            error = refused.value
            assert (error.code, error.exit_status) == ("master.redirect_refused", 5)
            assert f"redirected to {elsewhere.url}/machine/down" in error.message
        assert elsewhere.arrived == []
        assert given.arrived == []
        assert len(master.arrived) == 2
        # The same host on another port is another origin; the same origin is followed.
        other_port = redirect_to(lambda: given.url.replace("127.0.0.1", "localhost"))
        master.answer = other_port
        with pytest.raises(AgentFailed, match="redirect_refused"):
            call(tcp(master.url, masters=(given.url,)), "POST", "/machine/down", BODY)
        assert given.arrived == []

        def same_origin(seen: Arrived) -> Answer:
            if seen.path == "/v2/machine/down":
                return leader_answer(seen)
            return redirect_to(lambda: master.url + "/v2")(seen)

        master.answer = same_origin
        assert call(tcp(master.url), "POST", "/machine/down", BODY).status == 200
        assert master.arrived[-1].authorization == "Bearer tok"


def test_a_redirect_to_a_master_given_in_the_list_is_followed() -> None:
    with (
        serving(leader_answer, host="127.0.0.2") as leader,
        serving(redirect_to(lambda: leader.url)) as follower,
    ):
        target = resolve_master_target(
            host=f"{follower.url}, {leader.url}/",
            token_file=None,
            socket_path=None,
            env={},
            uid=0,
        )
        assert target.describe() == follower.url  # the command goes to the first
        assert call(replace(target, token="tok"), "POST", "/machine/down", BODY).status == 200
    assert leader.arrived[0].authorization == "Bearer tok"


def test_no_leader_is_shown_as_itself() -> None:
    def none_leads(seen: Arrived) -> Answer:
        body = {"error": {"code": "master.no_leader", "message": "no master leads now"}}
        return 503, {"Retry-After": "1"}, json.dumps(body).encode()

    with serving(none_leads) as master, pytest.raises(AgentFailed) as failed:
        request(tcp(master.url), "POST", "/machine/up", BODY)
    assert (failed.value.code, failed.value.message) == ("master.no_leader", "no master leads now")
    assert failed.value.exit_status == 5


@pytest.mark.parametrize("location", [None, "/machine/down", "ftp://127.0.0.1/x", "http://:1/"])
def test_a_redirect_without_a_usable_location_is_the_reply(location: str | None) -> None:
    def follower(seen: Arrived) -> Answer:
        status, _, body = redirect_to(lambda: "http://127.0.0.1:9")(seen)
        return status, {} if location is None else {"Location": location}, body

    with serving(follower) as master:
        reply = call(tcp(master.url), "POST", "/machine/down", BODY)
        assert reply.status == 307
        with pytest.raises(AgentFailed) as failed:
            request(tcp(master.url), "POST", "/machine/down", BODY)
        assert len(master.arrived) == 2
    assert failed.value.code == "master.not_leader"


def test_a_read_is_not_redirected_by_a_master_that_answers_it() -> None:
    with serving(leader_answer) as master:
        assert request(tcp(master.url, token=None), "GET", "/v1/leader").data == {"took": "GET"}
