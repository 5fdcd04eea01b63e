"""Instructions that a forecast's piece and a new machine's first passes cost, counted by
callgrind: figures that do not move with the host's load, for comparing two versions of
the code on a machine whose timings do (on the 2-core machine of docs/performance.md, the
same code's best time a piece came out from 159 to 265 µs from one run to the next).

* ``piece``: a piece made for each of ``--forecasts`` forecasts of ``verdict_reads.py``'s
  ads (8 running claims each): for no window, for a window 2 h ahead and for one 10 min
  ahead (escalated quick), instructions a piece; the forecasts' own making is taken out
  (a run that makes them and no piece).
* ``first_passes``: a master in process holding ``--machines`` new machines, every one
  scheduled (``reconcile_pass.py``'s ads and schedule): its reconcile passes until no
  forecast waits, then the totals a summary reads brought whole (as after a restart), in
  instructions a machine; the master's setup (the ads taken, the schedule set) is taken
  out.

``--root DIR``: run the same on the code of another checkout (``git worktree add DIR
REV``), to compare. Needs ``valgrind`` (each run is ≈ 50 times slower under it: about 6
minutes in all). Prints one JSON document.
Usage: ``python tests/bench/instructions.py [--forecasts 300] [--machines 500] [--root DIR]``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The cases a run under callgrind does: the pieces of each window, the first passes; each
#: with the run that does its setup alone.
PIECES = ("none", "far", "near")
_COLLECTED = re.compile(rb"Collected\s*:\s*(\d+)")
#: What a checkout given with ``--root`` holds (else the code installed would be measured).
_NEEDED = ("slots/_forecast.py", "tests/bench/reconcile_pass.py", "tests/bench/verdict_reads.py")


def pieces(case: str, count: int) -> None:
    """Make ``count`` forecasts, then (unless ``case`` is ``setup``) a piece of each."""
    from slots import Escalation
    from tests.bench.verdict_reads import NOW, WINDOWS, forecasts

    made = forecasts(count)
    if case == "setup":
        return
    window = None if case == "none" else NOW + WINDOWS[case]
    for forecast in made:
        if window is None:
            forecast.prepare(NOW)
        else:
            forecast.prepare(NOW, window_start=window, escalation=Escalation.QUICK)


def first_passes(case: str, count: int) -> None:
    """A master holding ``count`` new scheduled machines; then (unless ``case`` is
    ``setup``) its passes until no forecast waits, and the totals brought whole."""
    import trio

    from nodeagent._peer import HttpAgentLink
    from nodeagent._store import DocumentStore
    from nodeagent.master._adstore import AdStore
    from nodeagent.master._maintenance import MaintenanceSchedule
    from nodeagent.master._master import Master
    from tests.bench.plan_latency import StepClock, schedule
    from tests.bench.reconcile_pass import ads_of

    now = 1_795_320_000.0
    ads = ads_of(count, now)
    with tempfile.TemporaryDirectory() as tmp:
        store = DocumentStore(Path(tmp) / "master.db")
        clock = StepClock(now)
        master = Master(
            store=store, link=HttpAgentLink(b"k" * 32), clock=clock, ads=AdStore(lifetime=3600)
        )
        master.set_schedule(MaintenanceSchedule.from_json(schedule(count, now)), actor="bench")
        for ad in ads:
            master.receive_ad(ad)

        async def passes() -> None:
            async with trio.open_nursery() as nursery:
                for _ in range(2 + count):
                    clock.t += 1.0
                    master.reconcile(nursery)
                    if master.forecasts_waiting == 0:
                        break
                else:
                    raise RuntimeError("the passes left forecasts waiting")
                master.plan_view.ledger(master.plan_inputs(clock.t), clock.t)
                nursery.cancel_scope.cancel()

        if case != "setup":
            trio.run(passes)
        store.close()


def counted(root: Path, what: str, case: str, count: int) -> int:
    """The instructions of this script's ``--inner`` run of ``what`` under callgrind."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),
        "--inner",
        what,
        case,
        str(count),
        "--root",
        str(root),
    ]
    run = subprocess.run(command, capture_output=True, check=False)
    found = _COLLECTED.search(run.stderr)
    if run.returncode != 0 or found is None:
        raise RuntimeError(f"{what} {case} failed: {run.stderr.decode(errors='replace')[-2000:]}")
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forecasts", type=int, default=300)
    parser.add_argument("--machines", type=int, default=500)
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--inner", nargs=3, metavar=("WHAT", "CASE", "COUNT"))
    options = parser.parse_args()
    root = options.root.resolve()
    if not all((root / part).is_file() for part in _NEEDED):
        parser.error(f"--root {root}: not a checkout of this project (no {' or '.join(_NEEDED)})")
    sys.path.insert(0, str(root))
    if options.inner:
        what, case, count = options.inner
        (pieces if what == "pieces" else first_passes)(case, int(count))
        return 0
    if shutil.which("valgrind") is None:
        print("instructions.py needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    n = options.forecasts
    base = counted(root, "pieces", "setup", n)
    piece = {case: round((counted(root, "pieces", case, n) - base) / n) for case in PIECES}
    m = options.machines
    base = counted(root, "passes", "setup", m)
    passes = round((counted(root, "passes", "passes", m) - base) / m)
    result = {
        "benchmark": "instructions",
        "root": str(root),
        "instructions_a_piece": piece,
        "forecasts": n,
        "instructions_a_machine_first_passes_and_totals": passes,
        "machines": m,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
