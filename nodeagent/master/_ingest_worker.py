"""An ingest worker process: prepares the master's ad pushes (parse, checks, packing) on a
core of its own.

``python -m nodeagent.master._ingest_worker``, started by
:class:`~nodeagent.master._ingest_workers.IngestWorkers`. It reads request frames on stdin
and writes a reply frame for each on stdout, in order (:mod:`nodeagent.master._ingest`);
its first frame says it is ready (a reply to request 0 that says ``HERE``). It holds no
state of the master's and no credential: the master has checked the token from the
request's headers, and stores and answers what comes back.

It exits at the end of stdin, which is also what the master's death gives it. SIGINT is
ignored (a terminal's ^C reaches the whole process group; the master ends its workers).
Anything else that writes to stdout is sent to stderr, so that frames stay whole. A push
it fails on (a bug, not a refused ad: those are replies) is answered ``HERE``, so that the
master makes it itself, and logged.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import IO

from nodeagent.master._ingest import FRAME, decode_request, encode_reply, prepare_push

__all__ = ["main", "serve"]

log = logging.getLogger("nodeagent.master.ingest")


def _read(stream: IO[bytes], size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def serve(frames_in: IO[bytes], frames_out: IO[bytes]) -> None:
    """Answer every request of ``frames_in`` on ``frames_out`` until its end."""
    frames_out.write(encode_reply(0, None))
    frames_out.flush()
    while (header := _read(frames_in, FRAME.size)) is not None:
        frame = _read(frames_in, FRAME.unpack(header)[0])
        if frame is None:
            return
        number, node, body = decode_request(frame)
        try:
            reply = encode_reply(number, prepare_push(body, node))
        except Exception:  # the master makes it itself, and says what it makes of it
            log.exception("an ad push could not be prepared here")
            reply = encode_reply(number, None)
        frames_out.write(reply)
        frames_out.flush()


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the master
    logging.basicConfig(level=logging.WARNING, format="%(name)s[%(process)d]: %(message)s")
    frames_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, frames_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
