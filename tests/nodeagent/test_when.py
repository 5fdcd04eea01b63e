"""Times and durations for the logs (:mod:`nodeagent._when`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from nodeagent._when import in_words, iso_time


@pytest.mark.parametrize(
    ("epoch", "text"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (1795850102, "2026-11-28T07:15:02Z"),
        (1795850102.9, "2026-11-28T07:15:02Z"),
        (1795821114, "2026-11-27T23:11:54Z"),
        (None, "none"),
        (math.inf, "never"),
        (1_795_821_114_000_000_000, "year 56906139129"),  # nanoseconds read as seconds
    ],
)
def test_times_are_iso_8601_in_utc(epoch: float | None, text: str) -> None:
    assert iso_time(epoch) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (0.4, "0 s"),
        (0.6, "1 s"),
        (45, "45 s"),
        (60, "1 min"),
        (80, "1 min 20 s"),
        (3599.6, "1 h"),
        (3600, "1 h"),
        (3661, "1 h 1 min"),
        (11100, "3 h 5 min"),
        (7205, "2 h"),
        (90000, "1 d 1 h"),
        (86400 * 20 + 59, "20 d"),
        (-80, "-1 min 20 s"),
        (-0.2, "0 s"),
        (math.inf, "forever"),
        (1795821114, "20784 d 23 h"),
    ],
)
def test_durations_are_in_words_in_their_two_largest_units(seconds: float, text: str) -> None:
    assert in_words(seconds) == text


def test_the_daemons_log_no_raw_seconds() -> None:
    """The master's, the defrag daemon's and the agent's log lines print durations in words
    and times in ISO 8601, never a number of seconds (``%.0f s``) or an epoch."""
    root = Path(__file__).parents[2] / "nodeagent"
    raw = re.compile(r"%(?:\.\d)?[dfg] ?s\b")
    found = [
        f"{path.relative_to(root)}: {line.strip()}"
        for package in ("master", "defrag", "agent")
        for path in sorted((root / package).glob("*.py"))
        for line in path.read_text().splitlines()
        if raw.search(line)
    ]
    assert found == []
