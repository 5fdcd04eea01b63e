"""The watch loop every ``--watch`` shares (:func:`nodeagent.cli._common.watch_loop`),
driven by a scripted fetch and a sleep that ends it with Ctrl-C once the script is done.

Off a terminal (pytest's captured stdout), the human view is printed again after each
fetch, a blank line between; with ``--json`` each reply is a line of its own. A failed
fetch after the first is reported with ``(retrying)`` and the loop goes on; the first
one's error ends the command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nodeagent.cli._common import watch_loop
from nodeagent.cli._errors import CliError, Unreachable
from nodeagent.cli._http import Reply

DOWN = Unreachable("agent.unreachable", "cannot reach the agent")


def _reply(n: int) -> Reply:
    return Reply(status=200, text=f'{{"n":{n}}}\n', data={"n": n})


def _script(
    outcomes: list[Reply | CliError],
) -> tuple[Callable[[], Reply], Callable[[float], None]]:
    """A fetch answering ``outcomes`` in turn, and a sleep that presses Ctrl-C once the
    fetch has nothing left to answer (and checks the interval)."""
    left = list(outcomes)

    def fetch() -> Reply:
        outcome = left.pop(0)
        if isinstance(outcome, CliError):
            raise outcome
        return outcome

    def sleep(seconds: float) -> None:
        assert seconds == 2.5
        if not left:
            raise KeyboardInterrupt

    return fetch, sleep


def _view(data: Any, out: Any) -> str:
    return f"view {data['n']}"


@pytest.mark.parametrize(
    ("outcomes", "json_output", "stdout", "stderr"),
    [
        ([_reply(1)], True, '{"n":1}\n', ""),
        ([_reply(1), _reply(2), _reply(3)], True, '{"n":1}\n{"n":2}\n{"n":3}\n', ""),
        (
            [_reply(1), DOWN, _reply(3)],
            True,
            '{"n":1}\n{"n":3}\n',
            "agent.unreachable: cannot reach the agent (retrying)\n",
        ),
        ([_reply(1)], False, "view 1\n\n", ""),
        ([_reply(1), _reply(2)], False, "view 1\n\nview 2\n\n", ""),
        (
            [_reply(1), DOWN, _reply(3)],
            False,
            "view 1\n\nview 1\n\nview 3\n\n",
            "agent.unreachable: cannot reach the agent (retrying)\n",
        ),
    ],
)
def test_the_watch_loop_shows_each_reply_until_ctrl_c(
    capsys: pytest.CaptureFixture[str],
    outcomes: list[Reply | CliError],
    json_output: bool,
    stdout: str,
    stderr: str,
) -> None:
    fetch, sleep = _script(outcomes)
    watch_loop(fetch, _view, json_output=json_output, interval=2.5, sleep=sleep)
    assert capsys.readouterr() == (stdout, stderr)


@pytest.mark.parametrize("json_output", [True, False])
def test_the_first_fetchs_error_ends_the_command(
    capsys: pytest.CaptureFixture[str], json_output: bool
) -> None:
    fetch, sleep = _script([DOWN])
    with pytest.raises(Unreachable):
        watch_loop(fetch, _view, json_output=json_output, interval=2.5, sleep=sleep)
    assert capsys.readouterr() == ("", "")
