"""The reaper's cost: a hook or health check run under it, against the program alone.

Runs ``/bin/true`` ``--runs`` times each way, taking turns: alone (fork, exec, wait) and
under the agent's reaper as the agent starts it (``python -I -S _reaper.py … --
/bin/true``: the interpreter, the subreaper, the output pipe and file, the scan of
``/proc`` for what the program left), and a bare ``python -I -S -c pass`` for reference;
wall time from fork to exit. The difference is what
each hook run and each health check costs more. Then one ``-X importtime`` run says what
the reaper imports.

Prints one JSON document. Usage: ``python tests/bench/reaper_startup.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent.agent._reaper import reaper_argv
from tests.bench._benchlib import summary_ms

_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def timed(argv: list[str]) -> float:
    begin = time.perf_counter()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, start_new_session=True)
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reaped = reaper_argv(
            ["/bin/true"], output=str(Path(tmp) / "output"), limit=65536, grace=10.0
        )
        alone: list[float] = []
        bare: list[float] = []
        under: list[float] = []
        for _ in range(args.runs):
            alone.append(timed(["/bin/true"]))
            bare.append(timed([reaped[0], "-I", "-S", "-c", "pass"]))
            under.append(timed(reaped))
        profile = subprocess.run(
            [reaped[0], "-X", "importtime", *reaped[1:]],
            check=True,
            capture_output=True,
            text=True,
        ).stderr
    modules = [m.group(4) for m in map(_IMPORT_LINE.match, profile.splitlines()) if m]
    total_us = sum(
        int(m.group(2))
        for m in map(_IMPORT_LINE.match, profile.splitlines())
        if m and not m.group(3)
    )
    alone_ms, under_ms = summary_ms(alone), summary_ms(under)
    result: dict[str, Any] = {
        "runs": args.runs,
        "alone_ms": alone_ms,
        "bare_interpreter_ms": summary_ms(bare),
        "under_reaper_ms": under_ms,
        "added_p50_ms": round(under_ms["p50"] - alone_ms["p50"], 3),
        "imports": {"top_level_ms": round(total_us / 1000, 1), "modules": sorted(set(modules))},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
