"""What ``nodeagent token create`` does: sign a bearer token with the pool key.

No daemon is contacted. The default pool key is the agent's ``key_file``, found with the
standard library (:func:`nodeagent.cli._locate.agent_key_file`).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from nodeagent.cli._common import duration
from nodeagent.cli._errors import UsageError
from nodeagent.cli._locate import agent_key_file

__all__ = ["create"]


def _write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (created or truncated)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise UsageError("cli.output", f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


def create(
    *,
    scope: str,
    subject: str,
    lifetime: str,
    key_file: Path | None,
    output: Path | None,
    json_output: bool,
    node: str | None = None,
    groups: list[str] | None = None,
) -> None:
    """Sign a token for ``subject`` with ``scope`` (``READ``, ``ADMINISTRATOR`` or
    ``DAEMON``, any case) valid for ``lifetime``; print it, write it to ``output`` (mode
    0600), or print ``{token, subject, scope, expires_at}`` (and ``node``) with
    ``json_output``.

    A DAEMON token names the ``node`` whose ads it may push (the agent's ``hostname``, or
    ``defrag-<name>`` for a defrag daemon): without one it is refused (exit 2,
    ``cli.node_required``), and so is a node on another scope (``cli.usage``).

    A READ token may carry ``groups`` (patterns ``role/env/name``, ``role/*``,
    ``role/env/*``; repeated or comma-separated): the job groups whose notices it may
    answer; on another scope, or a bad pattern: exit 2 (``cli.usage``)."""
    from nodeagent._auth import (  # noqa: PLC0415
        KeyFileError,
        Scope,
        create_token,
        group_pattern,
        load_key,
    )

    seconds = duration("--lifetime", lifetime)
    assert seconds is not None
    if seconds <= 0:
        raise UsageError("cli.bad_duration", "--lifetime must be positive")
    if not subject:
        raise UsageError("cli.usage", "--subject must not be empty")
    if scope.upper() == "DAEMON" and not node:
        raise UsageError(
            "cli.node_required",
            "--scope DAEMON needs --node HOST: the one node whose ads the token may push "
            "(the agent's hostname; defrag-<name> for a defrag daemon)",
        )
    if node is not None and scope.upper() != "DAEMON":
        raise UsageError("cli.usage", "--node names the node of a DAEMON token only")
    if node is not None and not node.isprintable():
        raise UsageError("cli.usage", "--node must be printable text")
    patterns = tuple(p.strip() for item in groups or () for p in item.split(",") if p.strip())
    if patterns and scope.upper() != "READ":
        raise UsageError("cli.usage", "--groups names the job groups of a READ token only")
    for pattern in patterns:
        if not group_pattern(pattern):
            raise UsageError(
                "cli.usage",
                f"--groups: not a group pattern (role/env/name, role/* or role/env/*): {pattern!r}",
            )
    path = key_file or agent_key_file(os.environ, os.geteuid())
    try:
        key = load_key(path)
    except KeyFileError as exc:
        raise UsageError(exc.code, str(exc)) from None
    now = time.time()
    token = create_token(
        key,
        subject=subject,
        scope=Scope(scope.upper()),
        lifetime_s=seconds,
        now=now,
        node=node,
        groups=patterns,
    )
    expires_at = int(now + seconds)
    if output is not None:
        _write_secret(output, token + "\n")
    if json_output:
        import json  # noqa: PLC0415

        document = {
            "token": token,
            "subject": subject,
            "scope": scope.upper(),
            "expires_at": expires_at,
        }
        if node is not None:
            document["node"] = node
        if patterns:
            document["groups"] = list(patterns)
        sys.stdout.write(json.dumps(document) + "\n")
    elif output is None:
        sys.stdout.write(token + "\n")
    else:
        from nodeagent.cli._render import format_local_time  # noqa: PLC0415

        bound = f", node {node}" if node is not None else ""
        if patterns:
            bound += f", groups {', '.join(patterns)}"
        sys.stderr.write(
            f"token for {subject} ({scope.upper()}{bound}) written to {output}, "
            f"valid until {format_local_time(expires_at, now)}\n"
        )
