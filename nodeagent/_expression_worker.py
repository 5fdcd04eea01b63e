"""The worker process of :class:`nodeagent._expressions.Evaluator`: evaluates ClassAd
expressions for a daemon, which kills it when an evaluation outlasts its budget.

``python -m nodeagent._expression_worker PARENT_PID``. Standard library and :mod:`slots`
only. It loads the ClassAd library, then answers requests on stdin with replies on
stdout, one at a time, each a frame: a 4-byte big-endian length, then that many bytes of
JSON. The first frame it writes says it is ready (``{"ready": true}``). A request is::

    {"text": str, "ads": [ad, ...], "target": ad | null, "want": "true" | "values"}

and its reply ``{"results": [...]}`` (``want = "true"``: whether the expression is true
against each ad; ``"values"``: each value, see :func:`slots._classad.plain_result`) or
``{"invalid": message}`` for an expression that is out of bounds or does not parse.
It exits at the end of stdin, and dies with its parent (Linux: ``PR_SET_PDEATHSIG``).
Anything else that writes to stdout is sent to stderr, so that frames stay whole.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
from typing import Any, BinaryIO

from slots._classad import evaluate_each, load_library, plain_result
from slots._errors import InvalidRequest

__all__ = ["HEADER", "main", "read_frame", "write_frame"]

#: A frame's header: its length, 4 bytes big-endian.
HEADER = struct.Struct(">I")


def read_frame(stream: BinaryIO) -> Any | None:
    """The next frame's JSON value; ``None`` at the end of the stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    body = stream.read(length)
    if len(body) < length:
        return None
    return json.loads(body)


def write_frame(stream: BinaryIO, value: Any) -> None:
    body = json.dumps(value, separators=(",", ":")).encode("utf-8")
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request (see the module docstring)."""
    try:
        values = evaluate_each(request["text"], request["ads"], request.get("target"))
    except InvalidRequest as exc:
        return {"invalid": exc.message}
    if request.get("want") == "values":
        return {"results": [plain_result(v) for v in values]}
    return {"results": [v is True for v in values]}


def _die_with(parent: int) -> None:
    """Be killed when ``parent`` ends (Linux), and end now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes  # noqa: PLC0415  (Linux only)

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        sys.exit(0)


def main(argv: list[str]) -> int:
    _die_with(int(argv[1]) if len(argv) > 1 else os.getppid())
    frames_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    frames_in = sys.stdin.buffer
    load_library()
    write_frame(frames_out, {"ready": True})
    while (request := read_frame(frames_in)) is not None:
        write_frame(frames_out, answer(request))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
