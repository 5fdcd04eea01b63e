"""Kill -9 loop: many drains of real jobs through SIGKILLs of the agent at random points.

Each round (``tests/killloop.py``) starts a fresh agent, sends its claims while killing
it once, then commits a graceful drain of ``--jobs`` jobs (one in four ignores SIGTERM)
with retirement promises of 2 to ``--retirement`` seconds, and kills the agent up to
``--max-kills`` times at a random moment 0 to 2 s after each start (so often while it
starts), checking the request id and looking for orphans whenever it answered in
between; then the drain must complete.

Prints one JSON document: rounds, kills (and how many hit an agent still starting),
checks, claims, claims lost in a kill (and made again), evictions (SIGTERM received), jobs
killed unwarned (their SIGTERM written, not sent, before a kill), early evictions,
orphans, request id changes, drains that did not complete, how late each SIGTERM came
after its promise (the agent being down meanwhile), and the seed that replays the run.
Exits 1 if any early eviction, orphan, changed request id or incomplete drain was seen.

Usage: ``python tests/bench/kill_loop.py [--rounds N] [--jobs N] [--retirement S]
[--max-kills N] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._benchlib import become_subreaper, end_children, percentile
from tests.killloop import Figures, kill_loop


def reap() -> None:
    """Collect the jobs that ended since the last round (this process adopts them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def run(rounds: int, jobs: int, retirement: int, max_kills: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    total = Figures()
    with tempfile.TemporaryDirectory(prefix="kill-loop-") as tmp:
        for i in range(rounds):
            total.add(
                kill_loop(
                    Path(tmp) / f"round{i}",
                    rng,
                    jobs=jobs,
                    retirement=retirement,
                    max_kills=max_kills,
                )
            )
            reap()
    late = total.lateness
    lateness = (
        {
            "min": round(min(late), 3),
            "p50": round(percentile(late, 50), 3),
            "p99": round(percentile(late, 99), 3),
            "max": round(max(late), 3),
        }
        if late
        else {}
    )
    return {
        "rounds": total.rounds,
        "jobs_per_round": jobs,
        "kills": total.kills,
        "kills_while_starting": total.kills_while_starting,
        "checks": total.checks,
        "claims": total.claims,
        "claims_lost_in_a_kill": total.claims_lost_in_a_kill,
        "evictions": total.evictions,
        "killed_unwarned": total.killed_unwarned,
        "early_evictions": len(total.early_evictions),
        "orphans": len(total.orphans),
        "request_id_changes": len(total.request_id_changes),
        "undrained": total.undrained,
        "sigterm_after_promise_s": lateness,
        "seconds": round(total.seconds, 1),
        "seed": seed,
        "problems": total.early_evictions + total.orphans + total.request_id_changes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--retirement", type=int, default=5)
    parser.add_argument("--max-kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=time.time_ns() % 1_000_000)
    args = parser.parse_args()
    become_subreaper()
    try:
        result = run(args.rounds, args.jobs, args.retirement, args.max_kills, args.seed)
    finally:
        end_children()
    print(json.dumps(result, indent=2))
    sound = not (result["problems"] or result["undrained"])
    sys.exit(0 if sound else 1)


if __name__ == "__main__":
    main()
