"""The error body and token file rules every HTTP caller shares (:mod:`nodeagent._wire`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent._wire import TokenFileError, error_fields, read_token_file


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"error": {"code": "drain.in_progress", "message": "m", "condor_code": 10001}},
            ("drain.in_progress", "m", 10001),
        ),
        ({"error": {"code": "auth.missing", "message": "m"}}, ("auth.missing", "m", None)),
        (b'{"error": {"code": "c", "message": "m"}}', ("c", "m", None)),
        ('{"error": {"code": "c", "message": "m"}}', ("c", "m", None)),
        (b"<html>bad gateway</html>", None),
        (b'{"error": {"code": "c"', None),
        ({"error": "text"}, None),
        ({"error": {"code": 5, "message": "m"}}, None),
        ({"error": {"code": "c", "message": None}}, None),
        ({"error": {"code": "c", "message": "m", "condor_code": True}}, None),
        ({"error": {"code": "c", "message": "m", "condor_code": "10001"}}, None),
        ([], None),
        (None, None),
    ],
)
def test_error_fields(body: object, expected: tuple[str, str, int | None] | None) -> None:
    assert error_fields(body) == expected


def test_a_token_file_holds_one_token(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_text("  abc.def.ghi\n")
    assert read_token_file(good) == "abc.def.ghi"
    for name, content in [("empty", b"\n"), ("two", b"a b\n"), ("binary", b"\xff\xfe")]:
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(TokenFileError, match=str(path)):
            read_token_file(path)
    with pytest.raises(TokenFileError, match="missing"):
        read_token_file(tmp_path / "missing")
