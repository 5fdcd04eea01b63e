"""The agent under a kill -9 loop, a round in the test suite (``tests/killloop.py``).

Claims sent while the agent is SIGKILLed, then a graceful drain of four real jobs (one
ignoring SIGTERM) through several SIGKILLs at random points, some while the agent
starts: the request id stays, no job is evicted before its promise, no job process is
ever anything but a claim of the agent or gone, and the drain completes.
``python tests/bench/kill_loop.py`` runs many rounds and prints the figures.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from tests.killloop import kill_loop

pytestmark = pytest.mark.integration


def test_a_drain_holds_under_a_kill_9_loop(tmp_path: Path) -> None:
    seed = int(os.environ.get("KILL_LOOP_SEED", time.time_ns() % 1_000_000))
    figures = kill_loop(tmp_path, random.Random(seed), jobs=4, retirement=5, max_kills=5)
    where = f"seed {seed} (KILL_LOOP_SEED={seed} replays it): {figures}"
    assert figures.sound, where
    assert figures.kills >= 2, where
    assert figures.claims == 4, where
    # Every job got its SIGTERM, but one whose SIGTERM the agent wrote and did not send
    # (killed between the two) and that it came back to only past its vacate time: then
    # its hard kill, its promise kept (figures.sound).
    assert figures.evictions + figures.killed_unwarned == 4, where
