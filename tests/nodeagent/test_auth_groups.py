"""The ``groups`` claim of a READ token: the job groups whose notices it may answer."""

from __future__ import annotations

import jwt
import pytest

from nodeagent._auth import (
    ISSUER,
    Principal,
    Scope,
    Unauthenticated,
    create_token,
    group_pattern,
    verify_token,
)

KEY = b"k" * 32
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("pattern", "ok"),
    [
        ("role/env/name", True),
        ("role/*", True),
        ("role/env/*", True),
        ("role", False),
        ("role/env", False),
        ("*", False),
        ("role/*/name", False),
        ("role/env/name/*", False),
        ("role/env/na*", False),
        ("role//name", False),
        ("role/env/na me", False),
        ("role/env/\n", False),
        (3, False),
    ],
)
def test_group_pattern(pattern: object, ok: bool) -> None:
    assert group_pattern(pattern) is ok


@pytest.mark.parametrize(
    ("scope", "groups", "group", "may"),
    [
        (Scope.READ, ("role/*",), "role/prod/web", True),
        (Scope.READ, ("role/*",), "roles/prod/web", False),
        (Scope.READ, ("role/prod/*",), "role/prod/web", True),
        (Scope.READ, ("role/prod/*",), "role/dev/web", False),
        (Scope.READ, ("role/prod/web",), "role/prod/web", True),
        (Scope.READ, ("role/prod/web",), "role/prod/webs", False),
        (Scope.READ, ("a/*", "b/x/y"), "b/x/y", True),
        (Scope.READ, (), "role/prod/web", False),
        (Scope.ADMINISTRATOR, (), "role/prod/web", True),
        (Scope.DAEMON, (), "role/prod/web", False),
    ],
)
def test_answers_for(scope: Scope, groups: tuple[str, ...], group: str, may: bool) -> None:
    assert Principal(subject="s", scope=scope, groups=groups).answers_for(group) is may


def test_a_read_token_carries_its_groups() -> None:
    token = create_token(
        KEY, subject="web-owner", scope=Scope.READ, lifetime_s=60, now=NOW, groups=("a/*",)
    )
    principal = verify_token(KEY, token, now=NOW)
    assert principal.groups == ("a/*",)
    assert principal.scope is Scope.READ
    assert (
        verify_token(
            KEY, create_token(KEY, subject="s", scope=Scope.READ, lifetime_s=60, now=NOW), now=NOW
        ).groups
        == ()
    )


@pytest.mark.parametrize(
    ("scope", "groups"),
    [
        (Scope.ADMINISTRATOR, ("a/*",)),
        (Scope.DAEMON, ("a/*",)),
        (Scope.READ, ("a",)),
        (Scope.READ, ("a/*", "")),
    ],
)
def test_create_token_refuses_bad_groups(scope: Scope, groups: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="group"):
        create_token(KEY, subject="s", scope=scope, lifetime_s=60, now=NOW, groups=groups)


@pytest.mark.parametrize(
    ("scope", "groups"),
    [
        ("READ", "a/*"),
        ("READ", ["a"]),
        ("READ", [1]),
        ("ADMINISTRATOR", ["a/*"]),
        ("DAEMON", ["a/*"]),
    ],
)
def test_verify_token_refuses_a_bad_groups_claim(scope: str, groups: object) -> None:
    claims = {
        "iss": ISSUER,
        "sub": "s",
        "scope": scope,
        "iat": int(NOW),
        "exp": int(NOW + 60),
        "groups": groups,
    }
    token = jwt.encode(claims, KEY, algorithm="HS256")
    with pytest.raises(Unauthenticated, match="groups"):
        verify_token(KEY, token, now=NOW)
