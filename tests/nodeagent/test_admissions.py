"""Could a job with this promise start on this node now and keep it? The client's helper
for schedulers, as a table (nodeagent.client._results.admission); against a real master:
tests/integration/test_admissions.py."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.client._results import admission

NOW = 1_800_000_000.0


def ad(**attributes: Any) -> dict[str, Any]:
    return {"Name": "n1", "Start": True, "Lost": False, "MaxJobRetirementTime": 3600, **attributes}


@pytest.mark.parametrize(
    ("node", "window_start", "promise", "admits", "longest", "why"),
    [
        (ad(), None, 86400, True, None, None),  # no window: its own promise is held
        (ad(), NOW + 600, 120, True, 600, None),
        (ad(), NOW + 600, 600, True, 600, None),  # ends as the window starts: kept
        (ad(), NOW + 600, 1200, False, 600, "a promise of 1200 s would end 600 s into it"),
        (ad(), NOW + 600, 0, True, 600, None),  # evicted at once: always fits
        (ad(MaxJobRetirementTime=300), NOW + 600, 7200, True, 600, None),  # held as 300 s
        (ad(), NOW - 60, 10, False, 0, "window starts in 0 s"),  # open already
        (ad(Start=False), None, 10, False, None, "closed"),
        (ad(Lost=True), None, 10, False, None, "lost"),
    ],
)
def test_admission(
    node: dict[str, Any],
    window_start: float | None,
    promise: float,
    admits: bool,
    longest: int | None,
    why: str | None,
) -> None:
    found = admission(node, window_start, promise, NOW)
    assert (found.node, found.admits, found.longest_promise) == ("n1", admits, longest)
    assert found.window_start == window_start
    if why is None:
        assert found.why is None
    else:
        assert found.why is not None
        assert why in found.why
