"""What every HTTP caller of a nodeagent daemon reads the same way: error bodies and tokens.

Standard library only: the command line (``http.client``), the public client and the
daemons' peer client (httpx) all decode a refusal and read a token file here, so a code
means the same thing to each of them.

An error reply's body is ``{"error": {"code": str, "message": str, "condor_code"?: int}}``
(DESIGN §4); :func:`error_fields` returns ``None`` for anything else (a proxy's page, a
truncated body), and the caller then falls back on the status alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["TokenFileError", "error_fields", "read_token_file"]


def error_fields(body: object) -> tuple[str, str, int | None] | None:
    """``(code, message, condor_code)`` of a decoded error body; ``None`` when it is not one.

    ``body`` is the parsed JSON document, or the raw bytes/text of the reply.
    """
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except ValueError:
            return None
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if not isinstance(error, dict):
        return None
    code, message, condor_code = error.get("code"), error.get("message"), error.get("condor_code")
    if not (isinstance(code, str) and isinstance(message, str)):
        return None
    if condor_code is not None and (
        not isinstance(condor_code, int) or isinstance(condor_code, bool)
    ):
        return None
    return code, message, condor_code


#: A JWT (three base64url parts), as ``nodeagent token create`` prints one.
_TOKEN_SHAPE = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class TokenFileError(Exception):
    """A token file that cannot be read, or does not hold one token; the message names it."""


def read_token_file(path: str | Path) -> str:
    """The bearer token in ``path`` (surrounding whitespace removed).

    Raises :class:`TokenFileError` when the file cannot be read, is not UTF-8 text, or does
    not hold exactly one token.
    """
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        if _TOKEN_SHAPE.fullmatch(str(path)):  # a token given for its file: never shown
            raise TokenFileError(
                "cannot read token file: the value given is a token itself, not the path of "
                "a file that holds one (write it to a file of mode 0600 and give its path)"
            ) from None
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise TokenFileError(f"cannot read token file {path}: {reason}") from None
    if not token or any(c.isspace() for c in token):
        raise TokenFileError(f"token file {path} does not hold one token")
    return token
