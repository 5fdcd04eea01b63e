"""Real job processes: launch, adopt, wait, signal, measure.

Every test starts real processes and kills them (by pid, identity-checked) when it ends. Jobs
report what they see through a Unix socket (:class:`Beacon`), so tests wait on real events,
never on elapsed time.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import pwd
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
import trio
import trio.testing

from nodeagent.agent import _processes
from nodeagent.agent._processes import (
    PID_MAX_LIMIT,
    START_TIME_TOLERANCE,
    AlreadyClaimed,
    JobProcess,
    LaunchFailed,
    LaunchSpec,
    NoSuchProcess,
    NotAdoptable,
    OsProcessRunner,
    PermissionRefused,
    ProcessError,
    ProcessIdentity,
    ProcessRunner,
    Usage,
    _measure,
    boot_start_of,
    current_boot_id,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

PYTHON = sys.executable
LIMIT = 10.0  # seconds; generous, only hit when something is broken

# Job-side helper, prepended to job scripts: beacon(msg) tells the test something happened.
# The beacon socket path is always argv[1].
BEACON = """\
import os, signal, socket, subprocess, sys, time
def beacon(msg):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.sendall(msg.encode())
    s.close()
"""

PAUSE_FOREVER = "import signal\nwhile True:\n    signal.pause()\n"


def open_fds() -> int:
    """The process's open descriptors, after a collection: one that an earlier test left
    to the collector (a store not closed, say) is not closed in the middle of a count."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


class Beacon:
    """A Unix socket that jobs connect to; each connection carries one message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)

    async def open(self) -> None:
        await self._sock.bind(str(self.path))
        self._sock.listen(16)

    def close(self) -> None:
        self._sock.close()

    async def receive(self) -> str:
        conn, _ = await self._sock.accept()
        with conn:
            chunks = []
            while chunk := await conn.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks).decode()


class Reaper:
    """Everything a test starts; killed (and reaped where it is ours) at teardown."""

    def __init__(self) -> None:
        self.jobs: list[JobProcess] = []
        self.children: list[trio.Process] = []
        self.strangers: list[psutil.Process] = []

    def job(self, proc: JobProcess) -> JobProcess:
        self.jobs.append(proc)
        return proc

    def child(self, proc: trio.Process) -> trio.Process:
        self.children.append(proc)
        return proc

    def stranger(self, pid: int) -> psutil.Process:
        proc = psutil.Process(pid)  # pins pid + start time: kill() refuses a reused pid
        self.strangers.append(proc)
        return proc

    async def cleanup(self) -> None:
        for job in self.jobs:
            job.signal_group(signal.SIGKILL)
        for child in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
        for stranger in self.strangers:
            with contextlib.suppress(psutil.NoSuchProcess):
                stranger.kill()
        with trio.fail_after(LIMIT):
            for job in self.jobs:
                await job.wait()
            for child in self.children:
                await child.wait()


@pytest.fixture
async def reaper() -> AsyncIterator[Reaper]:
    r = Reaper()
    try:
        yield r
    finally:
        await r.cleanup()


@pytest.fixture
async def beacon() -> AsyncIterator[Beacon]:
    # Short path: Unix socket paths are limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="na-") as tmp:
        b = Beacon(Path(tmp) / "b")
        await b.open()
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def runner() -> OsProcessRunner:
    return OsProcessRunner()


def python_job(execute_dir: Path, code: str, *args: str) -> LaunchSpec:
    return LaunchSpec(argv=(PYTHON, "-c", code, *args), execute_dir=execute_dir)


def spawn_orphan(code: str = PAUSE_FOREVER) -> int:
    """Start a Python process that is not our child (its parent exits at once)."""
    launcher = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], start_new_session=True,\n"
        "    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(p.pid)\n"
    )
    done = subprocess.run(
        [PYTHON, "-c", launcher, code], capture_output=True, check=True, timeout=LIMIT
    )
    return int(done.stdout)


def gone(pid: int, start_time: float) -> bool:
    """No process (not even a zombie) with this pid and start time remains."""
    try:
        return bool(psutil.Process(pid).create_time() != start_time)
    except psutil.NoSuchProcess:
        return True


@contextlib.contextmanager
def real_time_limit(seconds: float) -> Iterator[None]:
    """Like trio.fail_after, but on the wall clock: works under a frozen MockClock."""
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:

        def expire() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(scope.cancel, trio_token=token)

        timer = threading.Timer(seconds, expire)
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
    if scope.cancelled_caught:
        raise AssertionError(f"did not finish within {seconds} s of real time")


# --------------------------------------------------------------------------------------------
# Module surface


def test_all_is_sorted_and_complete() -> None:
    assert _processes.__all__ == sorted(_processes.__all__, key=lambda n: (not n.isupper(), n))
    for name in _processes.__all__:
        assert hasattr(_processes, name)


def test_os_runner_is_a_process_runner() -> None:
    runner: ProcessRunner = OsProcessRunner()
    assert runner is not None


@pytest.mark.parametrize(
    ("error", "code", "status"),
    [
        (ProcessError, "job.error", 500),
        (LaunchFailed, "job.launch_failed", 422),
        (NoSuchProcess, "job.no_such_process", 404),
        (PermissionRefused, "job.permission_refused", 403),
        (NotAdoptable, "job.not_adoptable", 422),
        (AlreadyClaimed, "job.already_claimed", 409),
    ],
)
def test_error_codes(error: type[ProcessError], code: str, status: int) -> None:
    assert issubclass(error, ProcessError)
    assert error.code == code
    assert error.http_status == status


@pytest.mark.parametrize("argv", [(), ("true\0",)])
def test_spec_refuses_bad_argv(tmp_path: Path, argv: tuple[str, ...]) -> None:
    with pytest.raises(LaunchFailed):
        LaunchSpec(argv=argv, execute_dir=tmp_path)


@pytest.mark.parametrize(
    "fields",
    [
        {"env": {"A=B": "x"}},
        {"env": {"": "x"}},
        {"env": {"A\0": "x"}},
        {"env": {"A": "x\0y"}},
        {"cwd": "/etc"},
        {"cwd": ".."},
        {"cwd": "a/../../etc"},
        {"cwd": "sub\0"},
        {"user": "root\0"},
        {"user": ""},
    ],
)
def test_spec_refuses_bad_env_cwd_and_user(tmp_path: Path, fields: dict[str, object]) -> None:
    with pytest.raises(LaunchFailed):
        LaunchSpec(argv=("true",), execute_dir=tmp_path, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("cwd", ["", ".", "sub", "a/../sub", "./sub/"])
def test_spec_takes_a_cwd_inside_the_execute_directory(tmp_path: Path, cwd: str) -> None:
    assert LaunchSpec(argv=("true",), cwd=cwd, execute_dir=tmp_path).cwd == cwd


# --------------------------------------------------------------------------------------------
# Launch


async def test_launch_and_wait_returns_exit_code(runner: OsProcessRunner, tmp_path: Path) -> None:
    proc = await runner.launch(python_job(tmp_path, "import sys; sys.exit(3)"))
    with trio.fail_after(LIMIT):
        results: list[int | None] = []

        async def waiter() -> None:
            results.append(await proc.wait())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            nursery.start_soon(waiter)
        assert results == [3, 3]
        assert await proc.wait() == 3
    assert proc.exited()
    ident = proc.identity
    assert ident.pgid == ident.pid
    assert gone(ident.pid, ident.start_time)  # reaped: no zombie left


async def test_exit_by_signal_is_negative(
    runner: OsProcessRunner, reaper: Reaper, tmp_path: Path
) -> None:
    proc = reaper.job(await runner.launch(python_job(tmp_path, PAUSE_FOREVER)))
    assert not proc.exited()
    proc.signal_group(signal.SIGKILL)
    with trio.fail_after(LIMIT):
        assert await proc.wait() == -signal.SIGKILL
    proc.signal_group(signal.SIGTERM)  # already gone: ignored


async def test_job_has_its_own_session_and_group(
    runner: OsProcessRunner, reaper: Reaper, tmp_path: Path
) -> None:
    proc = reaper.job(await runner.launch(python_job(tmp_path, PAUSE_FOREVER)))
    pid = proc.identity.pid
    assert os.getpgid(pid) == pid
    assert os.getsid(pid) == pid
    assert proc.identity.start_time == psutil.Process(pid).create_time()


async def test_output_lands_in_the_execute_directory(
    runner: OsProcessRunner, tmp_path: Path
) -> None:
    execute_dir = tmp_path / "execute" / "job1"
    code = (
        "import os, sys\n"
        "print('out', os.getcwd(), repr(sys.stdin.read()), os.readlink('/proc/self/fd/0'))\n"
        "print('err', file=sys.stderr)\n"
    )
    for _ in range(2):
        proc = await runner.launch(python_job(execute_dir, code))
        with trio.fail_after(LIMIT):
            assert await proc.wait() == 0
    assert stat.S_IMODE(execute_dir.stat().st_mode) == 0o700
    line = f"out {execute_dir} '' /dev/null\n"
    assert (execute_dir / "stdout").read_text() == line * 2  # appended, not truncated
    assert (execute_dir / "stderr").read_text() == "err\n" * 2
    assert stat.S_IMODE((execute_dir / "stdout").stat().st_mode) == 0o600


async def test_relative_cwd_is_inside_the_execute_directory(
    runner: OsProcessRunner, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    spec = LaunchSpec(
        argv=(PYTHON, "-c", "import os; print(os.getcwd())"), cwd="sub", execute_dir=tmp_path
    )
    with trio.fail_after(LIMIT):
        assert await (await runner.launch(spec)).wait() == 0
    assert (tmp_path / "stdout").read_text() == f"{tmp_path / 'sub'}\n"


async def test_env_is_used_exactly_as_given(runner: OsProcessRunner, tmp_path: Path) -> None:
    spec = LaunchSpec(argv=("env",), env={"FOO": "bar"}, execute_dir=tmp_path)
    with trio.fail_after(LIMIT):
        assert await (await runner.launch(spec)).wait() == 0
    assert (tmp_path / "stdout").read_text() == "FOO=bar\n"


async def test_env_none_inherits_the_daemons_but_not_its_service_handles(
    runner: OsProcessRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("NODEAGENT_POLICY__START", "false")
    monkeypatch.setenv("JOB_VISIBLE", "yes")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    with trio.fail_after(LIMIT):
        assert await (await runner.launch(python_job(tmp_path, code))).wait() == 0
    got = json.loads((tmp_path / "stdout").read_text())
    assert got["JOB_VISIBLE"] == "yes"
    assert got["PATH"] == os.environ["PATH"]
    assert not {"NOTIFY_SOCKET", "WATCHDOG_USEC", "NODEAGENT_POLICY__START"} & set(got)


async def test_launch_failures_raise_and_leak_nothing(
    runner: OsProcessRunner, tmp_path: Path
) -> None:
    not_executable = tmp_path / "script"
    not_executable.write_text("#!/bin/sh\n")
    specs = [
        LaunchSpec(argv=("/nonexistent/program",), execute_dir=tmp_path),
        LaunchSpec(argv=("no-such-program-anywhere",), execute_dir=tmp_path),
        LaunchSpec(argv=(str(not_executable),), execute_dir=tmp_path),
        LaunchSpec(argv=("true",), cwd="nonexistent/dir", execute_dir=tmp_path),
        LaunchSpec(argv=("true",), user="no-such-user-here", execute_dir=tmp_path),
        LaunchSpec(argv=("true",), execute_dir=not_executable / "below-a-file"),
    ]
    before = open_fds()
    children_before = psutil.Process().children()
    for spec in specs:
        with pytest.raises(LaunchFailed) as info:
            await runner.launch(spec)
        assert info.value.code == "job.launch_failed"
        assert info.value.http_status == 422
    assert open_fds() == before
    assert psutil.Process().children() == children_before


async def test_a_symbolic_link_does_not_take_cwd_out(
    runner: OsProcessRunner, tmp_path: Path
) -> None:
    execute_dir = tmp_path / "job"
    execute_dir.mkdir()
    (execute_dir / "out").symlink_to(tmp_path)
    children_before = psutil.Process().children()
    with pytest.raises(LaunchFailed, match="leads out"):
        await runner.launch(LaunchSpec(argv=("true",), cwd="out", execute_dir=execute_dir))
    assert psutil.Process().children() == children_before


# --------------------------------------------------------------------------------------------
# Held launch

RECORDER = "import os, sys; open(sys.argv[1], 'w').write(' '.join(sys.argv[2:]))"


async def test_a_held_program_runs_only_once_started(
    runner: OsProcessRunner, reaper: Reaper, tmp_path: Path
) -> None:
    record = tmp_path / "ran"
    spec = LaunchSpec(
        argv=("python3", "-c", RECORDER, str(record), "a b", "c"),
        env={"PATH": os.path.dirname(PYTHON)},
        execute_dir=tmp_path / "job",
        held=True,
    )
    proc = reaper.job(await runner.launch(spec))
    ident = proc.identity
    assert os.getpgid(ident.pid) == ident.pid
    with trio.move_on_after(0.3):
        await proc.wait()  # it would have run by now, were it not held
    assert not proc.exited()
    assert not record.exists()
    proc.start()
    proc.start()  # once is enough
    with trio.fail_after(LIMIT):
        assert await proc.wait() == 0
    assert record.read_text() == "a b c"
    # The same process: the holder became the program.
    assert gone(ident.pid, ident.start_time)
    assert (tmp_path / "job" / "stderr").read_text() == ""


async def test_a_held_program_gets_dev_null_as_stdin(
    runner: OsProcessRunner, tmp_path: Path
) -> None:
    code = "import os, sys; print(repr(sys.stdin.read()), os.readlink('/proc/self/fd/0'))"
    proc = await runner.launch(
        LaunchSpec(argv=(PYTHON, "-c", code), execute_dir=tmp_path, held=True)
    )
    proc.start()
    with trio.fail_after(LIMIT):
        assert await proc.wait() == 0
    assert (tmp_path / "stdout").read_text() == "'' /dev/null\n"


async def test_a_held_program_never_runs_when_its_holder_is_killed_or_dropped(
    runner: OsProcessRunner, tmp_path: Path
) -> None:
    record = tmp_path / "ran"
    spec = LaunchSpec(
        argv=(PYTHON, "-c", RECORDER, str(record)), execute_dir=tmp_path / "job", held=True
    )
    killed = await runner.launch(spec)
    killed.signal_group(signal.SIGKILL)
    with trio.fail_after(LIMIT):
        assert await killed.wait() == -signal.SIGKILL
    killed.start()  # the holder is gone: nothing happens
    assert not record.exists()


async def test_a_held_program_never_runs_when_the_daemon_dies_first(
    reaper: Reaper, tmp_path: Path
) -> None:
    record = tmp_path / "ran"
    daemon_code = (
        "import sys, trio\n"
        "from pathlib import Path\n"
        "from nodeagent.agent._processes import LaunchSpec, OsProcessRunner\n"
        "async def main():\n"
        "    spec = LaunchSpec(argv=(sys.executable, '-c', sys.argv[2], sys.argv[3]),\n"
        "                      execute_dir=Path(sys.argv[1]), held=True)\n"
        "    proc = await OsProcessRunner().launch(spec)\n"
        "    print(proc.identity.pid, flush=True)\n"
        "    await trio.sleep_forever()\n"
        "trio.run(main)\n"
    )
    daemon = reaper.child(
        await trio.lowlevel.open_process(
            [PYTHON, "-c", daemon_code, str(tmp_path / "job"), RECORDER, str(record)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
    )
    assert daemon.stdout is not None
    with trio.fail_after(LIMIT):
        line = b""
        while not line.endswith(b"\n"):
            chunk = await daemon.stdout.receive_some()
            assert chunk, "the daemon exited before reporting its job"
            line += chunk
        holder = reaper.stranger(int(line))
        daemon.kill()
        assert await daemon.wait() == -signal.SIGKILL
        await daemon.stdout.aclose()
        # Its end of the pipe closed with it: the holder ends without running the program.
        while True:
            try:
                if holder.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            await trio.sleep(0.01)
    assert not record.exists()


async def test_a_held_launch_refuses_a_missing_program_at_once(
    runner: OsProcessRunner, tmp_path: Path
) -> None:
    not_executable = tmp_path / "script"
    not_executable.write_text("#!/bin/sh\n")
    children_before = psutil.Process().children()
    before = open_fds()
    for argv0, why in [
        ("no-such-program-anywhere", "No such file"),
        ("/nonexistent/program", "No such file"),
        (str(not_executable), "Permission denied"),
    ]:
        spec = LaunchSpec(argv=(argv0,), execute_dir=tmp_path / "job", held=True)
        with pytest.raises(LaunchFailed, match=why):
            await runner.launch(spec)
    assert psutil.Process().children() == children_before
    assert open_fds() == before


async def test_a_held_launch_finds_relative_programs_from_cwd(
    runner: OsProcessRunner, tmp_path: Path
) -> None:
    execute_dir = tmp_path / "job"
    (execute_dir / "bin").mkdir(parents=True)
    script = execute_dir / "bin" / "-dash"
    script.write_text("#!/bin/sh\necho ok\n")
    script.chmod(0o755)
    proc = await runner.launch(LaunchSpec(argv=("bin/-dash",), execute_dir=execute_dir, held=True))
    proc.start()
    with trio.fail_after(LIMIT):
        assert await proc.wait() == 0
    assert (execute_dir / "stdout").read_text() == "ok\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
async def test_launch_as_another_user(runner: OsProcessRunner, tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    execute_dir = tmp_path / "job"
    spec = LaunchSpec(argv=("id", "-u"), user="nobody", execute_dir=execute_dir)
    with trio.fail_after(LIMIT):
        assert await (await runner.launch(spec)).wait() == 0
    assert (execute_dir / "stdout").read_text() == f"{nobody.pw_uid}\n"
    assert execute_dir.stat().st_uid == nobody.pw_uid
    assert (execute_dir / "stdout").stat().st_uid == nobody.pw_uid


async def test_launch_as_the_current_user_needs_no_switch(
    runner: OsProcessRunner, tmp_path: Path
) -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    spec = LaunchSpec(argv=("id", "-u"), user=me, execute_dir=tmp_path)
    with trio.fail_after(LIMIT):
        assert await (await runner.launch(spec)).wait() == 0
    assert (tmp_path / "stdout").read_text() == f"{os.geteuid()}\n"


# --------------------------------------------------------------------------------------------
# Signals

GRANDCHILD = (
    BEACON
    + """
def on_term(*_):
    with open(sys.argv[2], "w") as f:
        f.write("TERM")
    beacon("term")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
beacon(f"ready {os.getpid()}")
while True:
    signal.pause()
"""
)

PARENT = """\
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[3], *sys.argv[1:3]])
sys.exit(child.wait())
"""


async def test_signal_group_reaches_a_grandchild(
    runner: OsProcessRunner, reaper: Reaper, beacon: Beacon, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    spec = python_job(tmp_path / "job", PARENT, str(beacon.path), str(record), GRANDCHILD)
    proc = reaper.job(await runner.launch(spec))
    with trio.fail_after(LIMIT):
        ready, grandchild = (await beacon.receive()).split()
        assert ready == "ready"
        assert int(grandchild) != proc.identity.pid
        assert os.getpgid(int(grandchild)) == proc.identity.pgid
        proc.signal_group(signal.SIGTERM)
        assert await beacon.receive() == "term"
        assert await proc.wait() == -signal.SIGTERM
    assert record.read_text() == "TERM"


STOPPABLE = (
    BEACON
    + """
signal.signal(signal.SIGCONT, lambda *_: beacon("cont"))
beacon("ready")
while True:
    signal.pause()
"""
)


async def test_stop_and_continue(
    runner: OsProcessRunner, reaper: Reaper, beacon: Beacon, tmp_path: Path
) -> None:
    proc = reaper.job(await runner.launch(python_job(tmp_path, STOPPABLE, str(beacon.path))))
    pid = proc.identity.pid
    with trio.fail_after(LIMIT):
        assert await beacon.receive() == "ready"
        proc.signal_group(signal.SIGSTOP)
        # The job is our child: the kernel reports its stop to us (WNOWAIT leaves it reapable).
        stopped = await trio.to_thread.run_sync(
            os.waitid, os.P_PID, pid, os.WSTOPPED | os.WNOWAIT, abandon_on_cancel=True
        )
        assert stopped is not None
        assert (stopped.si_code, stopped.si_status) == (os.CLD_STOPPED, signal.SIGSTOP)
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
        assert not proc.exited()
        proc.signal_group(signal.SIGCONT)
        assert await beacon.receive() == "cont"
        assert psutil.Process(pid).status() != psutil.STATUS_STOPPED


# --------------------------------------------------------------------------------------------
# Adopt


async def test_adopt_notices_exit_without_polling(
    runner: OsProcessRunner, reaper: Reaper, mock_clock: trio.testing.MockClock
) -> None:
    # The clock is frozen: a wait() that slept between checks would never return.
    stranger = reaper.stranger(spawn_orphan())
    assert stranger.ppid() != os.getpid()
    proc = await runner.adopt(stranger.pid, start_time=stranger.create_time())
    assert proc.identity.pgid == stranger.pid
    assert not proc.exited()
    results: list[int | None] = []

    async def waiter() -> None:
        results.append(await proc.wait())

    start = trio.current_time()
    with real_time_limit(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            proc.signal_group(signal.SIGTERM)
    assert trio.current_time() == start
    assert results == [None, None]  # not our child: status unknown
    assert proc.exited()
    assert await proc.wait() is None


async def test_adopt_refuses_a_wrong_start_time(runner: OsProcessRunner, reaper: Reaper) -> None:
    stranger = reaper.stranger(spawn_orphan())
    started = stranger.create_time()
    before = open_fds()
    for wrong in (started - 10, started + START_TIME_TOLERANCE + 0.1):
        with pytest.raises(NoSuchProcess) as info:
            await runner.adopt(stranger.pid, start_time=wrong)
        assert info.value.code == "job.no_such_process"
        assert info.value.http_status == 404
    assert open_fds() == before
    proc = await runner.adopt(stranger.pid, start_time=started + 0.005)
    assert proc.identity.start_time == started
    assert not proc.exited()


async def test_a_wall_clock_step_does_not_hide_a_job_from_its_record(
    runner: OsProcessRunner, reaper: Reaper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psutil's create_time moves with every step of the wall clock (it adds the boot time
    read now); the start since boot the record also holds does not: a job adopted after a
    40 s step is still recognised, and measured, and a later process with its pid is not."""
    stranger = reaper.stranger(spawn_orphan())
    recorded = (await runner.adopt(stranger.pid)).identity
    assert recorded.boot_id == current_boot_id() is not None
    assert recorded.boot_start == boot_start_of(stranger.pid)
    stepped = psutil.Process.create_time

    def after_a_step(self: psutil.Process) -> float:
        return float(stepped(self)) + 40.0

    monkeypatch.setattr(psutil.Process, "create_time", after_a_step)
    again = await runner.adopt(
        recorded.pid,
        start_time=recorded.start_time,
        boot_start=recorded.boot_start,
        boot_id=recorded.boot_id,
    )
    assert again.identity.boot_start == recorded.boot_start
    assert not again.exited()
    assert _measure(recorded) is not None  # its usage is still read: the job is found
    # A record made before the start since boot was kept falls back to create_time,
    # which the step defeats (docs/failure-modes.md).
    with pytest.raises(NoSuchProcess):
        await runner.adopt(recorded.pid, start_time=recorded.start_time)
    # Another start since boot is another process, whatever create_time says.
    assert recorded.boot_start is not None
    with pytest.raises(NoSuchProcess):
        await runner.adopt(
            recorded.pid,
            start_time=recorded.start_time + 40.0,
            boot_start=recorded.boot_start + 1.0,
            boot_id=recorded.boot_id,
        )
    # On another boot's record only create_time can tell.
    with pytest.raises(NoSuchProcess):
        await runner.adopt(
            recorded.pid,
            start_time=recorded.start_time,
            boot_start=recorded.boot_start,
            boot_id="another-boot",
        )


async def test_adopt_refuses_a_missing_pid(runner: OsProcessRunner) -> None:
    pid_max = int(await trio.Path("/proc/sys/kernel/pid_max").read_text())
    before = open_fds()
    for pid in (pid_max + 1, 0, -1):
        with pytest.raises(NoSuchProcess):
            await runner.adopt(pid)
    assert open_fds() == before


async def test_adopt_refuses_a_pid_beyond_the_kernels_limit(runner: OsProcessRunner) -> None:
    for pid in (PID_MAX_LIMIT + 1, 3453422734, 2**63):
        with pytest.raises(NoSuchProcess):
            await runner.adopt(pid)


def _kernel_thread() -> int | None:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{entry}/stat").read_bytes()
                if int(text[text.rindex(b")") + 2 :].split()[6]) & 0x00200000:
                    return int(entry)
    return None


async def test_adopt_refuses_init_the_daemon_and_its_ancestors(runner: OsProcessRunner) -> None:
    before = open_fds()
    for pid in (1, os.getpid(), os.getppid()):
        with pytest.raises(NotAdoptable) as info:
            await runner.adopt(pid)
        assert (info.value.code, info.value.http_status) == ("job.not_adoptable", 422)
    assert open_fds() == before


async def test_adopt_refuses_a_kernel_thread(runner: OsProcessRunner) -> None:
    pid = _kernel_thread()
    if pid is None:
        pytest.skip("no kernel thread is visible here")
    with pytest.raises(NotAdoptable, match="kernel thread"):
        await runner.adopt(pid)


async def test_adopt_refuses_a_process_in_the_daemons_group(
    runner: OsProcessRunner, reaper: Reaper
) -> None:
    child = reaper.child(
        await trio.lowlevel.open_process([PYTHON, "-c", PAUSE_FOREVER], stdin=subprocess.DEVNULL)
    )
    assert os.getpgid(child.pid) == os.getpgrp()
    with pytest.raises(NotAdoptable, match="process group"):
        await runner.adopt(child.pid)
    child.kill()


@pytest.mark.parametrize("pgid", [0, 1, "own"])
async def test_group_0_1_and_our_own_are_never_signalled(
    runner: OsProcessRunner, reaper: Reaper, pgid: int | str
) -> None:
    stranger = reaper.stranger(spawn_orphan())
    adopted = await runner.adopt(stranger.pid)
    forged = ProcessIdentity(
        pid=stranger.pid,
        start_time=stranger.create_time(),
        pgid=os.getpgrp() if pgid == "own" else int(pgid),
    )
    adopted.identity = forged  # type: ignore[misc]
    with pytest.raises(PermissionRefused, match="never signals"):
        adopted.signal_group(signal.SIGCONT)


async def test_adopting_our_own_child_reaps_it_and_reports_status(
    runner: OsProcessRunner, reaper: Reaper
) -> None:
    child = reaper.child(
        await trio.lowlevel.open_process(
            [PYTHON, "-c", PAUSE_FOREVER], stdin=subprocess.DEVNULL, start_new_session=True
        )
    )
    start_time = psutil.Process(child.pid).create_time()
    proc = await runner.adopt(child.pid, start_time=start_time)
    proc.signal_group(signal.SIGTERM)
    with trio.fail_after(LIMIT):
        assert await proc.wait() == -signal.SIGTERM
    assert gone(child.pid, start_time)


async def test_jobs_outlive_a_killed_daemon_and_are_readopted(
    runner: OsProcessRunner, reaper: Reaper, tmp_path: Path
) -> None:
    daemon_code = (
        "import sys, trio\n"
        "from pathlib import Path\n"
        "from nodeagent.agent._processes import LaunchSpec, OsProcessRunner\n"
        "async def main():\n"
        "    spec = LaunchSpec(argv=(sys.executable, '-c', sys.argv[2]),\n"
        "                      execute_dir=Path(sys.argv[1]))\n"
        "    proc = await OsProcessRunner().launch(spec)\n"
        "    print(proc.identity.pid, repr(proc.identity.start_time), flush=True)\n"
        "    await trio.sleep_forever()\n"
        "trio.run(main)\n"
    )
    daemon = reaper.child(
        await trio.lowlevel.open_process(
            [PYTHON, "-c", daemon_code, str(tmp_path), PAUSE_FOREVER],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
    )
    assert daemon.stdout is not None
    with trio.fail_after(LIMIT):
        line = b""
        while not line.endswith(b"\n"):
            chunk = await daemon.stdout.receive_some()
            assert chunk, "the daemon exited before reporting its job"
            line += chunk
        pid_text, start_text = line.decode().split()
        reaper.stranger(int(pid_text))
        daemon.kill()
        assert await daemon.wait() == -signal.SIGKILL
        await daemon.stdout.aclose()

        proc = await runner.adopt(int(pid_text), start_time=float(start_text))
        assert not proc.exited()
        proc.signal_group(signal.SIGTERM)
        assert await proc.wait() is None  # re-parented away from us: status unknown


# --------------------------------------------------------------------------------------------
# Descriptors


async def test_cancelled_wait_leaks_no_fd(
    runner: OsProcessRunner, reaper: Reaper, tmp_path: Path
) -> None:
    before = open_fds()
    launched = reaper.job(await runner.launch(python_job(tmp_path, PAUSE_FOREVER)))
    stranger = reaper.stranger(spawn_orphan())
    adopted = await runner.adopt(stranger.pid)
    holding = open_fds()
    assert holding == before + 2  # one pidfd per running job
    for _ in range(3):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(launched.wait)
            nursery.start_soon(adopted.wait)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        with trio.CancelScope() as scope:
            scope.cancel()
            await adopted.wait()
        assert open_fds() == holding
    assert not launched.exited()
    assert not adopted.exited()
    launched.signal_group(signal.SIGKILL)
    adopted.signal_group(signal.SIGKILL)
    with trio.fail_after(LIMIT):
        assert await launched.wait() == -signal.SIGKILL
        assert await adopted.wait() is None
    assert open_fds() == before


# --------------------------------------------------------------------------------------------
# Usage

HUNGRY_CHILD = (
    BEACON
    + """
data = b"x" * (40 << 20)
beacon("ready")
t0 = time.process_time()
while time.process_time() - t0 < 0.3:
    pass
beacon("burnt")
while True:
    pass
"""
)

HUNGRY_PARENT = """\
import subprocess, sys
data = b"x" * (40 << 20)
child = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]])
sys.exit(child.wait())
"""


async def test_usage_sums_the_process_tree(
    runner: OsProcessRunner, reaper: Reaper, beacon: Beacon, tmp_path: Path
) -> None:
    spec = python_job(tmp_path, HUNGRY_PARENT, str(beacon.path), HUNGRY_CHILD)
    proc = reaper.job(await runner.launch(spec))
    cores = psutil.cpu_count() or 1
    with trio.fail_after(LIMIT):
        assert await beacon.receive() == "ready"
        first = runner.usage(proc)
        # 40 MiB in each of two processes: only the sum over the tree reaches 80.
        assert first.memory_usage >= 80
        assert 0 < first.cpu_usage <= cores * 1.1
        assert await beacon.receive() == "burnt"
        # The leader only waits; the CPU is burnt by its child.
        second = runner.usage(proc)
        assert 0.05 < second.cpu_usage <= cores * 1.1
        assert second.memory_usage >= 80
        proc.signal_group(signal.SIGKILL)
        await proc.wait()
    assert runner.usage(proc) == Usage(cpu_usage=0.0, memory_usage=0)


async def test_usage_of_a_vanished_process_is_zero(runner: OsProcessRunner, reaper: Reaper) -> None:
    stranger = reaper.stranger(spawn_orphan())
    proc = await runner.adopt(stranger.pid)
    assert runner.usage(proc).memory_usage > 0
    stranger.kill()
    with trio.fail_after(LIMIT):
        await proc.wait()
    assert runner.usage(proc) == Usage()
