"""``nodeagent token create --groups``: a READ token that may answer its groups' notices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent._auth import Scope, generate_key, verify_token
from nodeagent.cli._errors import UsageError
from nodeagent.cli._token import create


def test_a_read_token_with_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = generate_key(tmp_path / "pool.key")
    create(
        scope="read",
        subject="web-owner",
        lifetime="1h",
        key_file=tmp_path / "pool.key",
        output=None,
        json_output=True,
        groups=["www/*", "db/prod/main,db/dev/*"],
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["groups"] == ["www/*", "db/prod/main", "db/dev/*"]
    principal = verify_token(key, doc["token"])
    assert principal.scope is Scope.READ
    assert principal.groups == ("www/*", "db/prod/main", "db/dev/*")
    assert principal.answers_for("db/prod/main")
    assert not principal.answers_for("db/prod/other")


@pytest.mark.parametrize(
    ("scope", "groups"),
    [("ADMINISTRATOR", ["www/*"]), ("READ", ["www"]), ("READ", ["www/*,*"])],
)
def test_groups_refused(tmp_path: Path, scope: str, groups: list[str]) -> None:
    generate_key(tmp_path / "pool.key")
    with pytest.raises(UsageError) as refused:
        create(
            scope=scope,
            subject="s",
            lifetime="1h",
            key_file=tmp_path / "pool.key",
            output=None,
            json_output=True,
            groups=groups,
        )
    assert refused.value.code == "cli.usage"
