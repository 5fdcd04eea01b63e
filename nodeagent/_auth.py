"""Bearer tokens, scopes and principals.

Every request is made by a :class:`Principal`: a subject holding one :class:`Scope`.
Principals come from two places:

* a TCP request carries ``Authorization: Bearer <JWT>``; the token is HS256-signed with the
  pool key and verified by :func:`verify_token` (see :func:`principal_from_authorization`);
* a request on the agent's Unix socket is made by the connected peer, whose credentials
  the kernel reports (``SO_PEERCRED``); whoever may open the socket (mode 0660) is
  ADMINISTRATOR (see :func:`peer_principal_from_uds`).

Errors (each carries a stable ``code`` and an ``http_status``)::

    AuthError
    ├── Unauthenticated   401 auth.unauthenticated  missing, malformed, forged or expired token
    │   └── WrongAudience 401 auth.wrong_audience   a token bound to another receiver
    └── Forbidden         403 auth.forbidden        valid principal lacking the required scope
        ├── WrongNode     403 auth.wrong_node       a node's DAEMON token, another node's ad
        └── PoolToken     403 auth.pool_daemon_token  a DAEMON token that names no node
    KeyFileError          500 auth.key_file         pool key file missing, unsafe or too short

Two optional claims bind a token (DESIGN §5, node restriction):

* ``node``, on a DAEMON token: the one node (or daemon) whose ads it may push; the master
  refuses an ad under another name (:class:`WrongNode`) and, unless told to for a
  migration, a DAEMON token without one (:class:`PoolToken`);
* ``aud``, on a token one daemon mints to call another: the receiver's name. A receiver
  that knows its name (an agent: its advertised host name) accepts such a token only if
  it is named; a receiver that does not (the master, the defrag daemon) accepts none
  (:class:`WrongAudience`). Operators' tokens carry no ``aud`` and work everywhere.

The pool key file holds the shared HMAC secret. :func:`load_key` *refuses* a key file that
grants any permission to group or other: a readable key lets anyone mint ADMINISTRATOR
tokens for every node of the pool, so a warning would be too weak (compare ssh with private
keys). :func:`generate_key` writes a fresh key atomically with mode 0600.
"""

from __future__ import annotations

import enum
import os
import pwd
import secrets
import socket
import stat
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import jwt

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "ISSUER",
    "MIN_KEY_BYTES",
    "AuthError",
    "Forbidden",
    "KeyFileError",
    "PeerCredentials",
    "PoolToken",
    "Principal",
    "Scope",
    "Unauthenticated",
    "WrongAudience",
    "WrongGroup",
    "WrongNode",
    "create_token",
    "generate_key",
    "group_pattern",
    "load_key",
    "peer_credentials",
    "peer_principal_from_uds",
    "principal_for_peer",
    "principal_from_authorization",
    "require",
    "verify_token",
]

ISSUER = "nodeagent"
"""The ``iss`` claim of every token this package creates and accepts."""

MIN_KEY_BYTES = 32
"""Shortest accepted pool key (HS256 wants at least the hash size)."""

_ALGORITHM = "HS256"
_CLOCK_SKEW_S = 60.0
"""How far in the future a token's ``iat`` or ``nbf`` may lie (clocks of hosts disagree)."""


class Scope(enum.StrEnum):
    """What a principal may do. The inclusion table is :data:`_GRANTS`, used by :meth:`grants`.

    ========================  ===================================
    holder                    may perform actions requiring
    ========================  ===================================
    ``READ``                  READ
    ``ADMINISTRATOR``         ADMINISTRATOR, READ
    ``DAEMON``                DAEMON, READ (agents push ads and may read)
    ========================  ===================================

    ADMINISTRATOR does not include DAEMON: pushing ads is the agents' business.
    """

    READ = "READ"
    ADMINISTRATOR = "ADMINISTRATOR"
    DAEMON = "DAEMON"

    def grants(self, required: Scope) -> bool:
        """Whether a holder of this scope may perform an action that requires ``required``."""
        return required in _GRANTS[self]


_GRANTS: dict[Scope, frozenset[Scope]] = {
    Scope.READ: frozenset({Scope.READ}),
    Scope.ADMINISTRATOR: frozenset({Scope.ADMINISTRATOR, Scope.READ}),
    Scope.DAEMON: frozenset({Scope.DAEMON, Scope.READ}),
}


class AuthError(Exception):
    """Base of the authentication and authorization errors; nothing is changed when raised."""

    code: ClassVar[str] = "auth.error"
    http_status: ClassVar[int] = 500


class Unauthenticated(AuthError):
    """No acceptable credentials: missing, malformed, forged or expired token (HTTP 401).

    ``www_authenticate`` is the value for the response's ``WWW-Authenticate`` header
    (RFC 6750).
    """

    code: ClassVar[str] = "auth.unauthenticated"
    http_status: ClassVar[int] = 401
    www_authenticate: ClassVar[str] = f'Bearer realm="{ISSUER}"'


class WrongAudience(Unauthenticated):
    """A token minted for another receiver (its ``aud`` claim), replayed here (HTTP 401)."""

    code: ClassVar[str] = "auth.wrong_audience"


class Forbidden(AuthError):
    """The principal is known but its scope does not cover the action (HTTP 403)."""

    code: ClassVar[str] = "auth.forbidden"
    http_status: ClassVar[int] = 403


class WrongNode(Forbidden):
    """A DAEMON token made for one node pushed an ad under another node's name (HTTP 403)."""

    code: ClassVar[str] = "auth.wrong_node"


class WrongGroup(Forbidden):
    """A token answered for a job group its ``groups`` claim does not grant (HTTP 403)."""

    code: ClassVar[str] = "auth.wrong_group"


class PoolToken(Forbidden):
    """A DAEMON token that names no node, where only a node's own is accepted (HTTP 403)."""

    code: ClassVar[str] = "auth.pool_daemon_token"


class KeyFileError(AuthError):
    """The pool key file is missing, unsafe, too short, or (on generation) already exists.

    A server-side configuration problem, hence HTTP 500 if it ever reaches a client.
    """

    code: ClassVar[str] = "auth.key_file"
    http_status: ClassVar[int] = 500


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who makes a request and what it may do.

    ``expires_at`` is the token's ``exp`` (epoch seconds) for ``via="token"`` and ``None``
    for a Unix socket peer. ``node`` is a DAEMON token's ``node`` claim: the node whose
    ads it may push (``None``: a pool-wide token, or another scope). ``groups`` is a READ
    token's ``groups`` claim: the job groups (exact names, or patterns ``role/*``,
    ``role/env/*``) whose notices it may answer (see :meth:`answers_for`).
    """

    subject: str
    scope: Scope
    expires_at: float | None = None
    node: str | None = None
    groups: tuple[str, ...] = ()
    via: Literal["token", "unix"] = "token"

    def answers_for(self, group: str) -> bool:
        """Whether this principal may answer a notice of job ``group``: ADMINISTRATOR for
        any group, another scope for the groups its ``groups`` claim grants."""
        if self.scope is Scope.ADMINISTRATOR:
            return True
        for pattern in self.groups:
            if pattern.endswith("/*"):
                if group.startswith(pattern[:-1]):
                    return True
            elif group == pattern:
                return True
        return False


@dataclass(frozen=True, kw_only=True)
class PeerCredentials:
    """The kernel-reported credentials of a Unix socket peer (``struct ucred``)."""

    pid: int
    uid: int
    gid: int


def require(principal: Principal, scope: Scope) -> None:
    """Return if ``principal`` may perform an action requiring ``scope``; raise Forbidden if not."""
    if not principal.scope.grants(scope):
        raise Forbidden(
            f"{principal.subject} holds scope {principal.scope}; this action requires {scope}"
        )


# --- the pool key -------------------------------------------------------------------------


def load_key(path: Path) -> bytes:
    """Read the pool key from ``path``.

    The key is the file's content without trailing CR/LF characters. Raises
    :class:`KeyFileError` when the file is missing or unreadable, is not a regular file,
    grants any permission to group or other (fix: ``chmod 600``), or holds fewer than
    :data:`MIN_KEY_BYTES` bytes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise KeyFileError(
            f"pool key file {path} does not exist (create one with generate_key)"
        ) from None
    except OSError as exc:
        raise KeyFileError(f"cannot open pool key file {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"pool key file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise KeyFileError(
                f"pool key file {path} has mode {stat.S_IMODE(st.st_mode):04o}; "
                "it must not be accessible by group or other (chmod 600)"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            key = f.read().rstrip(b"\r\n")
    finally:
        os.close(fd)
    if len(key) < MIN_KEY_BYTES:
        raise KeyFileError(
            f"pool key file {path} holds {len(key)} bytes; at least {MIN_KEY_BYTES} are required"
        )
    return key


def generate_key(path: Path, *, overwrite: bool = False) -> bytes:
    """Write a new random pool key to ``path`` with mode 0600 and return it.

    The key is 64 URL-safe base64 characters (384 random bits) and a newline, so it can be
    copied between hosts as text. The file appears atomically, complete and synced: it is
    written to a temporary file in the same directory and then linked (or, with
    ``overwrite=True``, renamed) into place. Without ``overwrite`` an existing ``path`` is
    left untouched and :class:`KeyFileError` is raised. The directory must exist.
    """
    key = secrets.token_urlsafe(48).encode("ascii")
    directory = path.parent
    tmp = directory / f".{path.name}.{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise KeyFileError(f"cannot create a key file in {directory}: {exc.strerror}") from exc
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, key + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise KeyFileError(
                    f"pool key file {path} already exists; refusing to overwrite it"
                ) from None
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return key


# --- tokens -------------------------------------------------------------------------------


def _check_key(key: bytes) -> None:
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the pool key must hold at least {MIN_KEY_BYTES} bytes")


def _name_claim(value: object) -> bool:
    return isinstance(value, str) and bool(value) and value.isprintable()


def group_pattern(value: object) -> bool:
    """Whether ``value`` is a pattern of job groups a token may carry: an exact group
    (``role/env/name``) or ``role/*`` / ``role/env/*``: one to three parts of printable
    text without spaces, ``*`` only as the whole last part of a shorter pattern."""
    if not isinstance(value, str) or not value.isprintable() or " " in value:
        return False
    parts = value.split("/")
    if parts[-1] == "*":
        named = parts[:-1]
        if not 1 <= len(named) <= 2:
            return False
    else:
        named = parts
        if len(named) != 3:
            return False
    return all(part and "*" not in part for part in named)


def create_token(
    key: bytes,
    *,
    subject: str,
    scope: Scope,
    lifetime_s: float,
    now: float,
    node: str | None = None,
    audience: str | None = None,
    groups: tuple[str, ...] = (),
) -> str:
    """Return a signed token for ``subject`` with ``scope``, valid from ``now`` for ``lifetime_s``.

    Claims: ``iss`` (:data:`ISSUER`), ``sub``, ``scope``, ``iat`` = ``int(now)`` and
    ``exp`` = ``int(now + lifetime_s)``; ``node`` (a DAEMON token's node) and ``aud`` (the
    one receiver, ``audience``) when given; ``groups`` (a READ token's job groups, whose
    notices it may answer: see :func:`group_pattern`) when not empty. Raises ValueError
    for an empty or non-printable subject, node or audience, a node on a token that is not
    DAEMON, groups on a token that is not READ or a bad group pattern, a non-positive
    lifetime or a short key.
    """
    _check_key(key)
    if not subject:
        raise ValueError("a token needs a non-empty subject")
    if not subject.isprintable():
        raise ValueError("a token's subject must be printable text")
    if not lifetime_s > 0:
        raise ValueError(f"token lifetime must be positive, not {lifetime_s!r}")
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "sub": subject,
        "scope": str(Scope(scope)),
        "iat": int(now),
        "exp": int(now + lifetime_s),
    }
    if node is not None:
        if Scope(scope) is not Scope.DAEMON:
            raise ValueError("only a DAEMON token names a node")
        if not _name_claim(node):
            raise ValueError("a token's node must be non-empty printable text")
        claims["node"] = node
    if groups:
        if Scope(scope) is not Scope.READ:
            raise ValueError("only a READ token carries groups")
        bad = [g for g in groups if not group_pattern(g)]
        if bad:
            raise ValueError(
                f"not a group pattern (role/env/name, role/* or role/env/*): {bad[0]!r}"
            )
        claims["groups"] = list(groups)
    if audience is not None:
        if not _name_claim(audience):
            raise ValueError("a token's audience must be non-empty printable text")
        claims["aud"] = audience
    return jwt.encode(claims, key, algorithm=_ALGORITHM)


def verify_token(
    key: bytes, token: str, *, now: float | None = None, audience: str | None = None
) -> Principal:
    """Check ``token``'s signature, issuer and lifetime at ``now`` and return its principal.

    ``now`` defaults to the wall clock. A token is expired when ``exp <= now``; one issued
    (``iat``) or valid from (``nbf``, optional) more than a minute after ``now`` is refused
    too (a minute: the clocks of two hosts may disagree that much). The subject, and the
    ``node`` claim when there is one, must be printable text; a ``groups`` claim, only on a
    READ token, must be a list of patterns (:func:`group_pattern`). Raises
    :class:`Unauthenticated` for any defect (the message says which, without echoing the
    token).

    ``audience`` is the receiver's own name (``None``: the receiver has none to check). A
    token without ``aud`` is accepted by every receiver; one with ``aud`` only by the
    receiver it names (a string, or a list holding it), else :class:`WrongAudience`.
    """
    _check_key(key)
    if now is None:
        now = time.time()
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[_ALGORITHM],
            issuer=ISSUER,
            options={
                "require": ["iss", "sub", "scope", "iat", "exp"],
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
                "verify_aud": False,
            },
        )
    except jwt.InvalidSignatureError:
        raise Unauthenticated("token signature does not match the pool key") from None
    except jwt.MissingRequiredClaimError as exc:
        raise Unauthenticated(f"token lacks the {exc.claim!r} claim") from None
    except jwt.InvalidIssuerError:
        raise Unauthenticated("token was not issued by nodeagent") from None
    except jwt.InvalidTokenError:
        raise Unauthenticated("malformed token") from None

    subject, scope, iat, exp = claims["sub"], claims["scope"], claims["iat"], claims["exp"]
    nbf = claims.get("nbf", iat)
    if not isinstance(subject, str) or not subject or not subject.isprintable():
        raise Unauthenticated("token has an invalid subject")
    try:
        scope = Scope(scope)
    except ValueError:
        raise Unauthenticated("token has an unknown scope") from None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (iat, exp, nbf)):
        raise Unauthenticated("token has non-numeric times")
    if exp <= now:
        raise Unauthenticated("token has expired")
    if iat > now + _CLOCK_SKEW_S:
        raise Unauthenticated("token is issued in the future")
    if nbf > now + _CLOCK_SKEW_S:
        raise Unauthenticated("token is not valid yet (nbf)")
    node = claims.get("node")
    if node is not None and (scope is not Scope.DAEMON or not _name_claim(node)):
        raise Unauthenticated("token has an invalid node claim")
    groups = claims.get("groups", [])
    if not isinstance(groups, list) or (groups and scope is not Scope.READ):
        raise Unauthenticated("token has an invalid groups claim")
    if not all(group_pattern(g) for g in groups):
        raise Unauthenticated("token has an invalid groups claim")
    if "aud" in claims:
        _check_audience(claims["aud"], audience)
    return Principal(
        subject=subject,
        scope=scope,
        expires_at=float(exp),
        node=node,
        groups=tuple(groups),
        via="token",
    )


def _check_audience(aud: object, audience: str | None) -> None:
    """Raise :class:`WrongAudience` unless ``aud`` (a token's claim) names ``audience``."""
    named = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else None
    if named is None or not all(isinstance(each, str) for each in named):
        raise Unauthenticated("token has an invalid aud claim")
    if audience is None:
        raise WrongAudience("token is bound to another receiver (aud); it is not valid here")
    if audience not in named:
        shown = ", ".join(repr(each) for each in named[:3])
        raise WrongAudience(f"token is bound to {shown}, not to {audience!r}")


def principal_from_authorization(
    header: str | None, key: bytes, now: float | None = None, *, audience: str | None = None
) -> Principal:
    """Return the principal of an ``Authorization: Bearer <token>`` header value.

    The scheme is case-insensitive. Raises :class:`Unauthenticated` when the header is
    missing or empty, uses another scheme, or carries a token :func:`verify_token` refuses
    (``audience``: the receiver's name, as there).
    """
    if header is None or not header.strip():
        raise Unauthenticated("a bearer token is required")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    return verify_token(key, token, now=now, audience=audience)


# --- Unix socket peers --------------------------------------------------------------------

_UCRED = struct.Struct("3i")


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    """Return the credentials of the process connected to the Unix stream socket ``sock``.

    Linux ``SO_PEERCRED``: the credentials the peer had when it connected. Raises
    ValueError when ``sock`` is not a connected Unix socket (the kernel reports no peer).
    """
    if sock.family != socket.AF_UNIX:
        raise ValueError(f"peer credentials need a Unix socket, not {sock.family!r}")
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    if pid == 0:
        raise ValueError("the Unix socket has no peer")
    return PeerCredentials(pid=pid, uid=uid, gid=gid)


def principal_for_peer(creds: PeerCredentials) -> Principal:
    """The principal of a Unix socket peer: ADMINISTRATOR, named after its user.

    The subject is the user name of ``creds.uid``, or ``uid:<n>`` when the uid has no
    passwd entry.
    """
    try:
        subject = pwd.getpwuid(creds.uid).pw_name
    except KeyError:
        subject = f"uid:{creds.uid}"
    return Principal(subject=subject, scope=Scope.ADMINISTRATOR, via="unix")


def peer_principal_from_uds(sock: socket.socket) -> Principal:
    """:func:`principal_for_peer` of :func:`peer_credentials` of ``sock``."""
    return principal_for_peer(peer_credentials(sock))
