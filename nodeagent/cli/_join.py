"""What ``nodeagent master join-config HOST`` does: what a new agent needs to join a master.

Run where the master's pool key is (no daemon is contacted): it writes the agent's DAEMON
token file, bound to node ``HOST`` (it may push that node's ads and nothing else; the
token is signed with the pool key, as ``token create --scope DAEMON --node HOST``), and
prints the lines of the agent's configuration that name the masters and that token, and
where the node keeps its copy of the pool key (with which it verifies the master's calls).

The masters' URLs come from ``--master-url``, else from the URL the master advertises (its
configuration's ``advertise_url``), else from where it listens (``listen``), but never a
loopback or wildcard address: an agent on
another machine could not reach the one, and the other names no host, so the command asks
for ``--master-url`` instead of printing a URL that would be wrong.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from nodeagent.cli._common import duration
from nodeagent.cli._errors import UsageError
from nodeagent.cli._locate import master_advertise_url, master_key_file, master_listen

__all__ = ["join_config", "master_urls", "section"]

#: Where the printed section expects the token on the node.
NODE_TOKEN_PATH = "/etc/nodeagent/daemon.token"
#: Where an agent run by systemd keeps the pool key (its default ``key_file``).
NODE_KEY_PATH = "/var/lib/nodeagent/pool.key"
_UNREACHABLE = ("127.", "localhost", "[::1]", "0.0.0.0", "[::]", "::")


def master_urls(
    given: str | None, listen: tuple[str, ...] | None, advertised: str | None = None
) -> list[str]:
    """The masters' base URLs for the agent: ``given`` (comma-separated, each ``http(s)://
    HOST:PORT`` or ``HOST:PORT``), else the URL the master advertises if another machine
    can reach it, else the listen addresses that another machine can reach. Raises
    ``cli.master_url`` when there is none."""
    if given is not None:
        urls = [u.strip().rstrip("/") for u in given.split(",") if u.strip()]
        urls = [u if "://" in u else f"http://{u}" for u in urls]
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if not urls or bad:
            raise UsageError("cli.bad_url", f"--master-url: not http(s) URLs: {given!r}")
        return urls
    if advertised is not None and not advertised.partition("://")[2].startswith(_UNREACHABLE):
        return [advertised.rstrip("/")]
    reachable = [a for a in listen or () if not a.startswith(_UNREACHABLE)]
    if not reachable:
        shown = ", ".join(listen) if listen else "NODEAGENT_LISTEN"
        raise UsageError(
            "cli.master_url",
            f"the master listens on {shown}, which another machine cannot reach by that "
            "address: give --master-url http://MASTER:9622 (several: comma-separated)",
        )
    return [f"http://{address}" for address in reachable]


def section(host: str, urls: list[str], token_path: str, interval: str) -> str:
    """The agent's configuration lines for joining the masters at ``urls``."""
    masters = (
        f'url = "{urls[0]}"'
        if len(urls) == 1
        else "urls = [" + ", ".join(f'"{u}"' for u in urls) + "]"
    )
    return (
        f'hostname = "{host}"  # the name this agent advertises; its token is bound to it\n'
        "\n[master]\n"
        f"{masters}\n"
        f'token_file = "{token_path}"\n'
        f'update_interval = "{interval}"\n'
    )


def join_config(
    *,
    node: str,
    master_url: str | None,
    token_file: Path | None,
    lifetime: str,
    interval: str,
    key_file: Path | None,
    force: bool,
    json_output: bool,
) -> None:
    """``nodeagent master join-config HOST``: write HOST's DAEMON token file (mode 0600;
    an existing file only with ``force``) and print the agent's ``[master]`` section."""
    from nodeagent._auth import KeyFileError, Scope, create_token, load_key  # noqa: PLC0415

    host = node.strip()
    if not host or not host.isprintable() or any(c.isspace() for c in host):
        raise UsageError("cli.usage", f"HOST must be a host name, not {node!r}")
    seconds = duration("--lifetime", lifetime)
    assert seconds is not None
    if seconds <= 0:
        raise UsageError("cli.bad_duration", "--lifetime must be positive")
    duration("--interval", interval)
    urls = master_urls(master_url, master_listen(os.environ), master_advertise_url(os.environ))
    path = key_file or master_key_file(os.environ, os.geteuid())
    try:
        key = load_key(path)
    except KeyFileError as exc:
        raise UsageError(exc.code, str(exc)) from None
    output = token_file or Path(f"{host}.daemon.token")
    now = time.time()
    token = create_token(
        key,
        subject=f"agent@{host}",
        scope=Scope.DAEMON,
        lifetime_s=seconds,
        now=now,
        node=host,
    )
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(output, flags, 0o600)
    except FileExistsError:
        raise UsageError(
            "cli.output", f"{output} exists: give --force to replace it (or another --token-file)"
        ) from None
    except OSError as exc:
        raise UsageError("cli.output", f"cannot write {output}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(token + "\n")
    text = section(host, urls, NODE_TOKEN_PATH, interval)
    expires_at = int(now + seconds)
    if json_output:
        import json  # noqa: PLC0415

        document = {
            "node": host,
            "masters": urls,
            "pool_key": str(path),
            "token_file": str(output),
            "node_token_file": NODE_TOKEN_PATH,
            "expires_at": expires_at,
            "configuration": text,
        }
        sys.stdout.write(json.dumps(document) + "\n")
        return
    from nodeagent.cli._render import format_local_time  # noqa: PLC0415

    sys.stdout.write(
        f"# The DAEMON token of {host} (it may push {host}'s ads only) is in {output},\n"
        f"# valid until {format_local_time(expires_at, now)}. On {host}:\n"
        f"#   install -m 0600 -o nodeagent {output.name} {NODE_TOKEN_PATH}\n"
        f"#   install -m 0600 -o nodeagent pool.key {NODE_KEY_PATH}   # a copy of {path}:\n"
        "#     the agent verifies the master's calls with the pool key\n"
        "# then these lines in its /etc/nodeagent/nodeagent.toml, `systemctl restart\n"
        f"# nodeagent`, and here `nodeagent master ads` lists {host}.\n"
        f"{text}"
    )
