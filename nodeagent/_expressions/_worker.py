"""The worker process of :class:`nodeagent._expressions._evaluator.Evaluator`: evaluates ClassAd
expressions for a daemon, which kills it when an evaluation outlasts its budget.

``python -m nodeagent._expressions._worker``. Standard library, orjson and :mod:`slots`
only. It loads the ClassAd library, then answers requests on stdin with replies on
stdout, one at a time, each a frame: a 4-byte big-endian length, then that many bytes of
JSON. The first frame it writes says it is ready (``{"ready": true}``). A request is::

    {"text": str, "ads": [ad, ...], "target": ad | null, "want": "true" | "values",
     "limit": seconds}

and its reply ``{"results": [...]}`` (``want = "true"``: whether the expression is true
against each ad; ``"values"``: each value, see :func:`slots._classad.plain_result`) or
``{"invalid": message}`` for an expression that is out of bounds or does not parse.

It exits at the end of stdin, which is also what its parent's death gives it when it is
waiting for a request. While it evaluates it reads nothing (the library holds the GIL
throughout, so no thread of its own could watch either), so each request arms a real-time
timer of ``limit`` seconds whose signal, left at its default action, ends the process: a
runaway evaluation ends by itself even when no parent is left to kill it. The parent sets
``limit`` well past the budget it kills at. SIGINT is ignored (a terminal's ^C reaches the
whole process group; the daemon ends its workers). Anything else that writes to stdout is
sent to stderr, so that frames stay whole.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
from typing import IO, Any

import orjson

from slots._classad import evaluate_each, load_library, plain_result
from slots._errors import InvalidRequest

__all__ = ["HEADER", "main", "read_frame", "write_frame"]

#: A frame's header: its length, 4 bytes big-endian.
HEADER = struct.Struct(">I")


def read_frame(stream: IO[bytes]) -> Any | None:
    """The next frame's JSON value; ``None`` at the end of the stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    body = stream.read(length)
    if len(body) < length:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:  # what only the standard decoder reads (NaN, …)
        return json.loads(body)


def write_frame(stream: IO[bytes], value: Any) -> None:
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


def main() -> int:
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the daemon
    frames_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    frames_in = sys.stdin.buffer
    load_library()
    write_frame(frames_out, {"ready": True})
    while (request := read_frame(frames_in)) is not None:
        signal.setitimer(signal.ITIMER_REAL, float(request.get("limit") or 0))
        reply = answer(request)
        signal.setitimer(signal.ITIMER_REAL, 0)
        write_frame(frames_out, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
