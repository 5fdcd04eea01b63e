"""The window capacity benchmark (``tests/bench/window_capacity.py``) on a small pool: the
shape of its figures, and what the master's just-in-time drain holds whatever the pool's
mix (real :class:`slots.Machine` nodes, the master's ``machine_plan`` and ``decide``).

``refuse`` and ``shorten`` cut no promise admitted after the node knew the window, evict no
job before its promise and close each machine at most ``drain_margin`` plus its longest
vacate time before the window; ``admit`` closes the machines with a long
``MaxJobRetirementTime`` that much earlier. With a notice shorter than the longest jobs,
promises made before the notice are cut under every policy, and only those.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench.window_capacity import POLICIES, simulate

_KEYS = {
    "capacity_core_hours",
    "closed_core_hours",
    "plan_closed_core_hours",
    "closed_minutes",
    "idle_open_core_hours",
    "completed",
    "drain_evictions",
    "cut",
    "refused",
    "retried_with_longest",
    "shortened",
    "not_empty_at_window",
    "goal",
}


@pytest.fixture(scope="module", params=[25.0, 6.0], ids=["notice-25h", "notice-6h"])
def run(request: pytest.FixtureRequest) -> dict[str, Any]:
    result: dict[str, Any] = simulate(machines=20, seed=7, notice=request.param)
    return result


def test_every_policy_reports_every_figure(run: dict[str, Any]) -> None:
    assert set(run["policies"]) == set(POLICIES)
    for figures in run["policies"].values():
        assert set(figures) >= _KEYS
        assert figures["machines"] == 20
        assert figures["drains_before_window"] == 20
        assert set(figures["cut"]) == {"admitted_after_notice", "admitted_before_notice"}
        assert figures["drain_evictions"]["before_their_promise"] == 0
    assert run["refuse_saves_core_hours"] > 0


@pytest.mark.parametrize("policy", ["refuse", "shorten"])
def test_admission_by_promise_meets_the_goal(run: dict[str, Any], policy: str) -> None:
    figures = run["policies"][policy]
    assert figures["by_promise"] == 20
    assert figures["goal"] == {
        "closed_within_margin_plus_vacate": True,
        "machines_over": [],
        "no_promise_cut_after_notice": True,
    }
    assert figures["cut"]["admitted_after_notice"]["jobs"] == 0
    assert figures["not_empty_at_window"]["with_jobs_admitted_after_notice"] == 0


def test_refuse_refuses_and_shorten_shortens(run: dict[str, Any]) -> None:
    refuse, shorten = run["policies"]["refuse"], run["policies"]["shorten"]
    assert refuse["refused"] > 0
    assert refuse["shortened"]["jobs"] == 0
    assert shorten["refused"] == 0
    assert shorten["shortened"]["jobs"] > 0


def test_admit_closes_earlier_than_refuse(run: dict[str, Any]) -> None:
    admit, refuse = run["policies"]["admit"], run["policies"]["refuse"]
    assert admit["by_promise"] == 0
    assert admit["closed_core_hours"]["simple"] > refuse["closed_core_hours"]["simple"]
    assert admit["closed_minutes"]["mean"] > refuse["closed_minutes"]["mean"]
    if run["notice_hours"] < 24.5:
        return  # the drains of admit's 24 h machines started at the notice, not before
    # what the plan said each drain start would cost, as measured
    for figures, kind in ((admit, "as_admit"), (refuse, "by_promise")):
        planned = figures["plan_closed_core_hours"][kind]
        assert planned == pytest.approx(figures["closed_core_hours"]["simple"], rel=0.01, abs=1)


def test_only_promises_made_before_the_notice_are_cut(run: dict[str, Any]) -> None:
    # a notice of 6 h leaves jobs of up to 24 h admitted before it running at the window
    for figures in run["policies"].values():
        before = figures["cut"]["admitted_before_notice"]["jobs"]
        assert before > 0 if run["notice_hours"] < 24 else before == 0
