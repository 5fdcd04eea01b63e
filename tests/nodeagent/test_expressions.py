"""Callers' expressions are evaluated in worker processes, within a budget, off the loop.

Real worker processes and the real clock: what is tested is that the event loop stays
free while a worker evaluates, and that a runaway worker is killed. The tests wait on
events and on the evaluator's own state rather than on durations, except the budget
itself, which is kept short.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import psutil
import pytest
import trio

from nodeagent._expressions._evaluator import (
    Evaluator,
    EvaluatorUnavailable,
    ExpressionTooCostly,
)
from nodeagent._expressions._worker import read_frame, write_frame
from slots import InvalidRequest

ADS: list[dict[str, Any]] = [{"Name": f"n{i}", "TotalCpus": i % 8} for i in range(50)]
#: Catastrophic backtracking: ≈ 0.2 s per ad (up to the regex library's own match limit),
#: the ClassAd library holding the GIL throughout.
RUNAWAY = 'regexp("^(a+)+$", "' + "a" * 40 + '!")'
#: A record whose attributes double each other, 2^21 additions.
CHAIN = "[A0 = 1; " + "; ".join(f"A{i + 1} = A{i} + A{i}" for i in range(21)) + "].A21 > 0"


def alive(pid: int) -> bool:
    try:
        status: str = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return False
    return bool(status != psutil.STATUS_ZOMBIE)


async def wait_until_running(evaluator: Evaluator, count: int) -> None:
    # Polling on purpose: each turn this task takes is a turn the loop was free to give.
    while evaluator.running < count:  # noqa: ASYNC110
        await trio.sleep(0.005)


async def test_a_constraint_selects_the_ads_it_is_true_for() -> None:
    async with Evaluator() as evaluator:
        selected = await evaluator.select('TotalCpus >= 4 && Name =!= "n5"', ADS)
        assert [ad["Name"] for ad, ok in zip(ADS, selected, strict=True) if ok] == [
            ad["Name"] for ad in ADS if ad["TotalCpus"] >= 4 and ad["Name"] != "n5"
        ]
        assert await evaluator.evaluate_each("TotalCpus * 2", ADS[:3]) == [0, 2, 4]
        assert await evaluator.evaluate('{1, [a = "x"]}', {}) == [1, {"a": "x"}]
        assert await evaluator.evaluate("Missing", {}) is None
        assert await evaluator.is_true("MY.A == TARGET.B", {"A": 1}, {"B": 1}) is True
        # Integers beyond 64 bits cross to the worker and are compared as reals.
        assert await evaluator.select("X > 1e20", [{"X": 2**70}]) == [True]
        assert evaluator.started == 1  # one worker, kept between requests


async def test_literals_and_bounds_need_no_worker() -> None:
    async with Evaluator() as evaluator:
        assert await evaluator.select(" TRUE ", ADS[:2]) == [True, True]
        assert await evaluator.evaluate_each("false", ADS[:1]) == [False]
        with pytest.raises(InvalidRequest, match="U\\+0000"):
            await evaluator.select("true\x00", ADS)
        with pytest.raises(InvalidRequest, match="nested"):
            await evaluator.select("(" * 100 + "1" + ")" * 100, ADS)
        assert await evaluator.select("Cpus > 1", []) == []
        assert evaluator.started == 0


async def test_an_expression_that_does_not_parse_is_invalid_and_keeps_the_worker() -> None:
    async with Evaluator() as evaluator:
        with pytest.raises(InvalidRequest, match="not a ClassAd expression"):
            await evaluator.select("Cpus >", ADS)
        assert await evaluator.select("TotalCpus == 7", ADS[:8]) == [False] * 7 + [True]
        assert (evaluator.started, evaluator.killed) == (1, 0)


@pytest.mark.parametrize("text", [RUNAWAY, CHAIN], ids=["regexp", "chain"])
async def test_past_its_budget_an_evaluation_is_refused_and_its_worker_killed(text: str) -> None:
    async with Evaluator(budget=0.5) as evaluator:
        await evaluator.select("true || Name", ADS[:1])  # a worker, ready
        assert await evaluator.select("TotalCpus > 0", ADS[:2]) == [False, True]
        (first,) = evaluator.pids()
        with pytest.raises(ExpressionTooCostly, match=r"budget of 0\.5 s") as refused:
            await evaluator.select(text, ADS)
        assert refused.value.code == "expression.too_costly"
        assert refused.value.http_status == 422
        assert not alive(first)
        assert (evaluator.pids(), evaluator.killed) == ([], 1)
        # The next request has a new worker.
        assert await evaluator.select("TotalCpus > 6", ADS[:8]) == [False] * 7 + [True]
        assert evaluator.started == 2


async def test_the_event_loop_runs_while_a_worker_evaluates() -> None:
    """While the runaway evaluation is under way, this task polls, takes its turns and
    sees the evaluation still running: the loop is not blocked by it."""
    async with Evaluator(budget=30.0) as evaluator:
        outcome: list[str] = []

        async def costly() -> None:
            try:
                await evaluator.select(RUNAWAY, ADS)
            except ExpressionTooCostly:
                outcome.append("too costly")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(costly)
            await wait_until_running(evaluator, 1)
            (pid,) = evaluator.pids()
            worker = psutil.Process(pid)
            # The worker is evaluating (its CPU time grows) and this task still runs.
            cpu = sum(worker.cpu_times()[:2])
            while sum(worker.cpu_times()[:2]) < cpu + 0.2:  # noqa: ASYNC110 (another process)
                await trio.sleep(0.01)
            assert evaluator.running == 1
            assert outcome == []
            nursery.cancel_scope.cancel()
        # Abandoned by its caller, the worker is killed, not left evaluating.
        assert not alive(pid)
        assert evaluator.pids() == []


async def test_no_more_than_workers_evaluations_run_at_once() -> None:
    async with Evaluator(budget=0.5, workers=1) as evaluator:
        seen: list[tuple[int, int]] = []
        refused: list[str] = []

        async def costly() -> None:
            try:
                await evaluator.select(RUNAWAY, ADS)
            except ExpressionTooCostly:
                refused.append("too costly")

        async def watch(done: trio.Event) -> None:
            while not done.is_set():
                seen.append((evaluator.running, len(evaluator.pids())))
                await trio.sleep(0.005)

        done = trio.Event()
        async with trio.open_nursery() as outer:
            outer.start_soon(watch, done)
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(costly)
            done.set()
        assert refused == ["too costly"] * 3
        assert max(running for running, _ in seen) == 1
        assert max(workers for _, workers in seen) == 1
        assert evaluator.started == 3


async def test_a_worker_that_cannot_start_is_unavailable_503() -> None:
    for command in ([sys.executable, "-c", "pass"], ["/nonexistent/python"]):
        async with Evaluator(command=command) as evaluator:
            with pytest.raises(EvaluatorUnavailable) as refused:
                await evaluator.select("Cpus > 1", ADS)
            assert (refused.value.code, refused.value.http_status) == (
                "expression.unavailable",
                503,
            )
            assert evaluator.pids() == []


async def test_a_worker_that_dies_while_evaluating_is_refused_as_too_costly() -> None:
    # The worker says it is ready, then dies at its first request.
    crash = [
        sys.executable,
        "-c",
        "import sys, struct; body = b'{\"ready\":true}';"
        "sys.stdout.buffer.write(struct.pack('>I', len(body)) + body); sys.stdout.flush();"
        "sys.stdin.buffer.read(4); sys.exit(1)",
    ]
    async with Evaluator(command=crash) as evaluator:
        with pytest.raises(ExpressionTooCostly, match="ended its worker"):
            await evaluator.select("Cpus > 1", ADS)
        assert evaluator.pids() == []


async def test_closing_ends_every_worker_and_refuses_later_requests() -> None:
    evaluator = Evaluator(workers=2)
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(evaluator.select, "TotalCpus > 1", ADS)
    pids = evaluator.pids()
    assert len(pids) == 2
    await evaluator.aclose()
    assert not any(alive(pid) for pid in pids)
    with pytest.raises(EvaluatorUnavailable, match="closed"):
        await evaluator.select("TotalCpus > 1", ADS)


def test_a_worker_left_alone_ends_itself_past_its_limit_and_at_the_end_of_stdin() -> None:
    """The backstop for a worker whose daemon is gone: no one kills it, its timer does."""
    command = [sys.executable, "-m", "nodeagent._expressions._worker"]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as worker:
        assert worker.stdin is not None
        assert worker.stdout is not None
        assert read_frame(worker.stdout) == {"ready": True}
        write_frame(worker.stdin, {"text": "TotalCpus > 1", "ads": ADS[:3], "limit": 60})
        assert read_frame(worker.stdout) == {"results": [False, False, True]}
        write_frame(worker.stdin, {"text": RUNAWAY, "ads": ADS, "limit": 0.5})
        assert worker.wait(timeout=60) == -signal.SIGALRM
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as idle:
        assert idle.stdout is not None
        assert read_frame(idle.stdout) == {"ready": True}
        assert idle.stdin is not None
        idle.stdin.close()
        assert idle.wait(timeout=60) == 0


async def test_a_worker_busy_when_the_evaluator_closes_ends_with_its_request() -> None:
    evaluator = Evaluator(budget=30.0)
    answers: list[list[bool]] = []

    async def slow() -> None:
        answers.append(await evaluator.select('regexp("^(a+)+$", "' + "a" * 22 + '!")', ADS[:5]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow)
        await wait_until_running(evaluator, 1)
        (pid,) = evaluator.pids()
        await evaluator.aclose()
    assert answers == [[False] * 5]
    assert evaluator.pids() == []
    assert not alive(pid)
