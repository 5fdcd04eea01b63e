"""Tokens, scopes, the pool key file and Unix socket peers."""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
from typing import TYPE_CHECKING

import jwt
import pytest

from nodeagent._auth import (
    MIN_KEY_BYTES,
    Forbidden,
    KeyFileError,
    PeerCredentials,
    Principal,
    Scope,
    Unauthenticated,
    WrongAudience,
    create_token,
    generate_key,
    load_key,
    peer_credentials,
    peer_principal_from_uds,
    principal_for_peer,
    principal_from_authorization,
    require,
    verify_token,
)

if TYPE_CHECKING:
    from pathlib import Path

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
NOW = 1_700_000_000.0


def token(scope: Scope = Scope.READ, *, key: bytes = KEY, lifetime: float = 3600.0) -> str:
    return create_token(key, subject="alice", scope=scope, lifetime_s=lifetime, now=NOW)


# --- tokens -------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", list(Scope))
def test_token_roundtrip(scope: Scope) -> None:
    principal = verify_token(KEY, token(scope), now=NOW + 10)
    assert principal == Principal(subject="alice", scope=scope, expires_at=NOW + 3600, via="token")


def test_token_claims() -> None:
    claims = jwt.decode(
        token(Scope.DAEMON), KEY, algorithms=["HS256"], options={"verify_exp": False}
    )
    assert claims == {
        "iss": "nodeagent",
        "sub": "alice",
        "scope": "DAEMON",
        "iat": int(NOW),
        "exp": int(NOW) + 3600,
    }


def test_a_daemon_token_names_its_node() -> None:
    made = create_token(
        KEY, subject="agent@n1", scope=Scope.DAEMON, lifetime_s=60, now=NOW, node="n1.test"
    )
    claims = jwt.decode(made, KEY, algorithms=["HS256"], options={"verify_exp": False})
    assert claims["node"] == "n1.test"
    principal = verify_token(KEY, made, now=NOW)
    assert (principal.scope, principal.node) == (Scope.DAEMON, "n1.test")
    assert verify_token(KEY, token(Scope.DAEMON), now=NOW).node is None  # pool-wide


@pytest.mark.parametrize(
    ("scope", "node", "message"),
    [
        (Scope.READ, "n1", "only a DAEMON token names a node"),
        (Scope.ADMINISTRATOR, "n1", "only a DAEMON token names a node"),
        (Scope.DAEMON, "", "node must be non-empty printable"),
        (Scope.DAEMON, "n1\n", "node must be non-empty printable"),
    ],
)
def test_create_token_refuses_a_bad_node(scope: Scope, node: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_token(KEY, subject="a", scope=scope, lifetime_s=60, now=NOW, node=node)


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"scope": "ADMINISTRATOR", "node": "n1"}, "invalid node"),
        ({"scope": "DAEMON", "node": 7}, "invalid node"),
        ({"scope": "DAEMON", "node": ""}, "invalid node"),
        ({"scope": "READ", "aud": 7}, "invalid aud"),
        ({"scope": "READ", "aud": ["n1", 7]}, "invalid aud"),
    ],
)
def test_forged_node_or_audience_claims_are_unauthenticated(
    claims: dict[str, object], message: str
) -> None:
    body = {"iss": "nodeagent", "sub": "x", "iat": int(NOW), "exp": int(NOW) + 60, **claims}
    with pytest.raises(Unauthenticated, match=message):
        verify_token(KEY, jwt.encode(body, KEY, algorithm="HS256"), now=NOW, audience="n1")


@pytest.mark.parametrize(
    ("aud", "receiver", "accepted"),
    [
        (None, None, True),  # an operator's token works everywhere
        (None, "n1.test", True),
        ("n1.test", "n1.test", True),
        ("n1.test", "n2.test", False),  # replayed to another agent
        ("n1.test", None, False),  # replayed to a receiver without a name (the master)
        (["n2.test", "n1.test"], "n1.test", True),
        ([], "n1.test", False),
    ],
)
def test_a_bound_token_is_accepted_by_its_receiver_only(
    aud: str | list[str] | None, receiver: str | None, accepted: bool
) -> None:
    body: dict[str, object] = {
        "iss": "nodeagent",
        "sub": "master:master",
        "scope": "READ",
        "iat": int(NOW),
        "exp": int(NOW) + 60,
    }
    if aud is not None:
        body["aud"] = aud
    made = jwt.encode(body, KEY, algorithm="HS256")
    header = f"Bearer {made}"
    if accepted:
        assert verify_token(KEY, made, now=NOW, audience=receiver).subject == "master:master"
        assert principal_from_authorization(header, KEY, NOW, audience=receiver).scope is Scope.READ
        return
    with pytest.raises(WrongAudience) as refused:
        principal_from_authorization(header, KEY, NOW, audience=receiver)
    assert (refused.value.code, refused.value.http_status) == ("auth.wrong_audience", 401)


def test_create_token_binds_an_audience() -> None:
    made = create_token(
        KEY, subject="m", scope=Scope.READ, lifetime_s=60, now=NOW, audience="n1.test"
    )
    assert verify_token(KEY, made, now=NOW, audience="n1.test").subject == "m"
    with pytest.raises(WrongAudience):
        verify_token(KEY, made, now=NOW)
    with pytest.raises(ValueError, match="audience"):
        create_token(KEY, subject="m", scope=Scope.READ, lifetime_s=60, now=NOW, audience="")


@pytest.mark.parametrize(
    ("now", "valid"),
    [
        (NOW, True),
        (NOW + 3599, True),
        (NOW + 3600, False),  # exp <= now: expired
        (NOW + 10_000, False),
        (NOW - 59, True),  # small clock skew tolerated
        (NOW - 61, False),  # issued in the future
    ],
)
def test_token_lifetime(now: float, valid: bool) -> None:
    if valid:
        assert verify_token(KEY, token(), now=now).subject == "alice"
    else:
        with pytest.raises(Unauthenticated):
            verify_token(KEY, token(), now=now)


def _forged(claims: dict[str, object], key: bytes = KEY, alg: str = "HS256") -> str:
    return jwt.encode(claims, key, algorithm=alg)


def _unsigned(claims: dict[str, object]) -> str:
    def part(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


GOOD_CLAIMS: dict[str, object] = {
    "iss": "nodeagent",
    "sub": "alice",
    "scope": "READ",
    "iat": int(NOW),
    "exp": int(NOW) + 60,
}


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(token(key=OTHER_KEY), id="wrong-key"),
        pytest.param("garbage", id="garbage"),
        pytest.param("", id="empty"),
        pytest.param(token()[:-4] + "AAAA", id="tampered-signature"),
        pytest.param(_forged({**GOOD_CLAIMS, "scope": "ROOT"}), id="unknown-scope"),
        pytest.param(_forged({**GOOD_CLAIMS, "iss": "someone"}), id="wrong-issuer"),
        pytest.param(_forged({k: v for k, v in GOOD_CLAIMS.items() if k != "exp"}), id="no-exp"),
        pytest.param(_forged({k: v for k, v in GOOD_CLAIMS.items() if k != "sub"}), id="no-sub"),
        pytest.param(_forged({**GOOD_CLAIMS, "sub": ""}), id="empty-sub"),
        pytest.param(_forged({**GOOD_CLAIMS, "exp": "later"}), id="text-exp"),
        pytest.param(_forged(GOOD_CLAIMS, alg="HS512", key=KEY * 2), id="other-alg"),
        pytest.param(_unsigned(GOOD_CLAIMS), id="alg-none"),
        pytest.param(_forged({**GOOD_CLAIMS, "nbf": int(NOW) + 3600}), id="not-before-later"),
        pytest.param(_forged({**GOOD_CLAIMS, "nbf": "soon"}), id="text-nbf"),
        pytest.param(_forged({**GOOD_CLAIMS, "sub": "eve\nFAKE LOG LINE"}), id="newline-sub"),
        pytest.param(_forged({**GOOD_CLAIMS, "sub": "eve\u2028x"}), id="separator-sub"),
        pytest.param(_forged({**GOOD_CLAIMS, "sub": "eve\x9b"}), id="c1-sub"),
    ],
)
def test_bad_tokens_are_unauthenticated(bad: str) -> None:
    with pytest.raises(Unauthenticated) as info:
        verify_token(KEY, bad, now=NOW)
    assert info.value.code == "auth.unauthenticated"
    assert info.value.http_status == 401


@pytest.mark.parametrize(
    ("nbf", "valid"),
    [
        (NOW - 3600, True),
        (NOW, True),
        (NOW + 59, True),  # small clock skew tolerated, as for iat
        (NOW + 61, False),
        (NOW + 3000, False),
    ],
)
def test_not_before_is_honoured(nbf: float, valid: bool) -> None:
    forged = _forged({**GOOD_CLAIMS, "exp": int(NOW) + 3600, "nbf": nbf})
    if valid:
        assert verify_token(KEY, forged, now=NOW).subject == "alice"
    else:
        with pytest.raises(Unauthenticated, match="not valid yet"):
            verify_token(KEY, forged, now=NOW)


@pytest.mark.parametrize(
    ("subject", "lifetime", "message"),
    [
        ("", 60.0, "subject"),
        ("a\nb", 60.0, "printable"),
        ("a", 0.0, "lifetime"),
        ("a", -1.0, "lifetime"),
    ],
)
def test_create_token_rejects_bad_arguments(subject: str, lifetime: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_token(KEY, subject=subject, scope=Scope.READ, lifetime_s=lifetime, now=NOW)


def test_short_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        create_token(b"short", subject="a", scope=Scope.READ, lifetime_s=60, now=NOW)
    with pytest.raises(ValueError, match="32 bytes"):
        verify_token(b"short", token())


# --- Authorization headers ----------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param("   ", id="blank"),
        pytest.param("Bearer", id="no-token"),
        pytest.param("Bearer ", id="empty-token"),
        pytest.param(f"Basic {token()}", id="other-scheme"),
        pytest.param(f"Bearer {token()} extra", id="two-tokens"),
        pytest.param("Bearer garbage", id="garbage-token"),
        pytest.param(f"Bearer {token(key=OTHER_KEY)}", id="wrong-key"),
    ],
)
def test_bad_authorization_headers(header: str | None) -> None:
    with pytest.raises(Unauthenticated):
        principal_from_authorization(header, KEY, NOW)


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_authorization_header(scheme: str) -> None:
    principal = principal_from_authorization(f"{scheme} {token(Scope.ADMINISTRATOR)}", KEY, NOW)
    assert principal.scope is Scope.ADMINISTRATOR
    assert principal.subject == "alice"


def test_unauthenticated_names_the_bearer_scheme() -> None:
    assert Unauthenticated.www_authenticate.startswith("Bearer ")


# --- scopes -------------------------------------------------------------------------------

R, A, D = Scope.READ, Scope.ADMINISTRATOR, Scope.DAEMON
SCOPE_MATRIX = [
    # held, required, granted
    (R, R, True),
    (R, A, False),
    (R, D, False),
    (A, R, True),
    (A, A, True),
    (A, D, False),
    (D, R, True),
    (D, A, False),
    (D, D, True),
]


@pytest.mark.parametrize(("held", "required", "granted"), SCOPE_MATRIX)
def test_scope_matrix(held: Scope, required: Scope, granted: bool) -> None:
    assert held.grants(required) is granted
    principal = verify_token(KEY, token(held), now=NOW)
    if granted:
        require(principal, required)
    else:
        with pytest.raises(Forbidden) as info:
            require(principal, required)
        assert info.value.code == "auth.forbidden"
        assert info.value.http_status == 403
        assert str(required) in str(info.value)


def test_scope_matrix_is_complete() -> None:
    assert {(h, r) for h, r, _ in SCOPE_MATRIX} == {(h, r) for h in Scope for r in Scope}


# --- the pool key file --------------------------------------------------------------------


def test_generate_key_writes_0600_and_load_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "pool.key"
    key = generate_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) >= MIN_KEY_BYTES
    assert path.read_bytes() == key + b"\n"
    assert load_key(path) == key
    assert [p.name for p in tmp_path.iterdir()] == ["pool.key"]  # no temporary left behind


def test_generate_key_ignores_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        generate_key(tmp_path / "pool.key")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "pool.key").stat().st_mode) == 0o600


def test_generate_key_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "pool.key"
    first = generate_key(path)
    with pytest.raises(KeyFileError, match="already exists"):
        generate_key(path)
    assert load_key(path) == first
    assert [p.name for p in tmp_path.iterdir()] == ["pool.key"]


def test_generate_key_overwrites_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "pool.key"
    first = generate_key(path)
    second = generate_key(path, overwrite=True)
    assert second != first
    assert load_key(path) == second
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_generate_key_needs_the_directory(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError):
        generate_key(tmp_path / "missing" / "pool.key")


def test_generated_keys_sign_tokens(tmp_path: Path) -> None:
    key = generate_key(tmp_path / "pool.key")
    t = create_token(key, subject="x", scope=Scope.DAEMON, lifetime_s=5, now=NOW)
    assert verify_token(load_key(tmp_path / "pool.key"), t, now=NOW).scope is Scope.DAEMON


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644, 0o660])
def test_load_key_refuses_group_or_other_access(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "pool.key"
    path.write_bytes(b"x" * 40)
    path.chmod(mode)
    with pytest.raises(KeyFileError, match="chmod 600") as info:
        load_key(path)
    assert info.value.code == "auth.key_file"


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_load_key_accepts_owner_only_modes(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "pool.key"
    path.write_bytes(b"x" * 40 + b"\r\n")
    path.chmod(mode)
    assert load_key(path) == b"x" * 40


def test_load_key_refuses_short_keys(tmp_path: Path) -> None:
    path = tmp_path / "pool.key"
    path.write_bytes(b"x" * 31 + b"\n")
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="at least 32"):
        load_key(path)


def test_load_key_missing(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="does not exist"):
        load_key(tmp_path / "nope")


def test_load_key_refuses_a_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir(mode=0o700)
    with pytest.raises(KeyFileError):
        load_key(tmp_path / "d")


# --- Unix socket peers --------------------------------------------------------------------


def test_peer_credentials_of_a_socketpair() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        creds = peer_credentials(a)
        assert creds == PeerCredentials(pid=os.getpid(), uid=os.getuid(), gid=os.getgid())
        principal = peer_principal_from_uds(b)
    assert principal.scope is Scope.ADMINISTRATOR
    assert principal.via == "unix"
    assert principal.expires_at is None
    assert principal == principal_for_peer(creds)


def test_peer_without_passwd_entry_is_named_by_uid() -> None:
    principal = principal_for_peer(PeerCredentials(pid=1, uid=2_000_000_001, gid=0))
    assert principal.subject == "uid:2000000001"
    assert principal.scope is Scope.ADMINISTRATOR


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_UNIX])
def test_peer_credentials_need_a_connected_unix_socket(family: socket.AddressFamily) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as s, pytest.raises(ValueError, match="Unix"):
        peer_credentials(s)
