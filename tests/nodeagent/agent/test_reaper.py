"""The reaper on real processes: the program's status, its output's tail, and the end of
everything it started, however detached; and the runs' directories, as the agent prunes
them.

Each test runs the reaper as the agent does (its own session, :func:`reaper_argv`) and
ends by pid whatever it recorded should the reaper not have.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.agent._hooks import prune_runs, read_output
from nodeagent.agent._reaper import reaper_argv
from tests.harness import running, wait_for


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pids"
    path.touch()
    yield path
    for pid in [int(p) for p in path.read_text().split()]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def reap(
    tmp_path: Path, shell: str, *, limit: int = 1024, grace: float = 5.0
) -> subprocess.Popen[bytes]:
    argv = reaper_argv(
        ["/bin/sh", "-c", shell], output=str(tmp_path / "output"), limit=limit, grace=grace
    )
    return subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("shell", "status"),
    [("exit 0", 0), ("exit 3", 3), ("kill -KILL $$", -9), ("kill -TERM $$", -15)],
)
def test_the_reaper_ends_as_its_program_did(tmp_path: Path, shell: str, status: int) -> None:
    assert reap(tmp_path, shell).wait(timeout=30) == status


def test_a_program_that_cannot_start_is_exit_status_127_and_says_why(tmp_path: Path) -> None:
    argv = reaper_argv(
        [str(tmp_path / "missing")], output=str(tmp_path / "output"), limit=1024, grace=1
    )
    assert subprocess.run(argv, check=False, timeout=30).returncode == 127
    out = read_output(tmp_path / "output", limit=1024)
    assert out.text == f"cannot start '{tmp_path / 'missing'}': No such file or directory\n"


def test_the_output_file_keeps_its_tail_and_counts_what_it_cut(tmp_path: Path) -> None:
    shell = "i=0; while [ $i -lt 500 ]; do echo line $i; i=$((i+1)); done; echo end >&2"
    assert reap(tmp_path, shell, limit=100).wait(timeout=30) == 0
    written = sum(len(f"line {i}\n") for i in range(500)) + len("end\n")
    assert (tmp_path / "output").stat().st_size == 100
    out = read_output(tmp_path / "output", limit=40)
    assert out.text.endswith("line 498\nline 499\nend\n")
    assert len(out.text) == 40
    assert out.dropped == written - 40


def test_what_the_program_leaves_running_is_ended_before_the_reaper_exits(
    tmp_path: Path, pids: Path
) -> None:
    shell = (
        f'P="{pids}"\n'
        "sleep 300 & echo $! >> $P\n"
        "setsid sleep 301 & echo $! >> $P\n"
        "( setsid sh -c 'echo $$ >> '$P'; trap \"\" TERM; exec sleep 302' & )\n"
        '( sleep 303 & echo $! >> "$P" )\n'
        'while [ "$(wc -l < $P)" -lt 4 ]; do sleep 0.01; done\n'
    )
    # The one that ignores SIGTERM is killed once the grace has passed.
    assert reap(tmp_path, shell, grace=0.5).wait(timeout=30) == 0
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 4
    assert running(left) == []


def test_sigterm_to_the_group_ends_the_program_and_all_it_started(
    tmp_path: Path, pids: Path
) -> None:
    shell = (
        f'P="{pids}"\n'
        "setsid sleep 301 & echo $! >> $P\n"
        "( sh -c 'echo $$ >> '$P'; exec sleep 302' & )\n"
        'while [ "$(wc -l < $P)" -lt 2 ]; do sleep 0.01; done\n'
        "echo ready >> $P.ready\n"
        "exec sleep 300\n"
    )
    reaper = reap(tmp_path, shell)
    wait_for(lambda: Path(f"{pids}.ready").exists())
    os.killpg(reaper.pid, signal.SIGTERM)  # the agent at the hook's timeout
    assert reaper.wait(timeout=30) == -signal.SIGTERM
    assert running([int(p) for p in pids.read_text().split()]) == []


def test_the_reaper_starts_with_few_modules(tmp_path: Path) -> None:
    """It starts for every hook and health check: no site, nothing of the agent's, and
    none of the standard library's costlier modules."""
    argv = reaper_argv(["/bin/true"], output=str(tmp_path / "o"), limit=1, grace=1)
    assert argv[1:3] == ["-I", "-S"]
    profile = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], check=True, capture_output=True, text=True
    ).stderr
    modules = {line.rsplit("|", 1)[1].strip() for line in profile.splitlines() if "|" in line}
    assert "ctypes" in modules  # the profile is read right
    costly = ("nodeagent", "trio", "psutil", "site", "enum", "typing", "contextlib", "signal")
    assert not [m for m in modules if m.split(".")[0] in costly]


def test_old_runs_directories_are_pruned_to_the_newest(tmp_path: Path) -> None:
    for i in range(12):
        run = tmp_path / f"{i}-reboot"
        (run / "scratch").mkdir(parents=True)
        (run / "output").write_text("x")
        os.utime(run, (1000 + i, 1000 + i))
    (tmp_path / "health").mkdir()
    os.utime(tmp_path / "health", (1, 1))
    prune_runs(tmp_path, keep=7, spare=frozenset({"health"}))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["health", *(f"{i}-reboot" for i in range(5, 12))]
    )
