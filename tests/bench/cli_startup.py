"""CLI start-up: wall time of whole ``nodeagent`` processes against a real agent and master.

Starts an agent (tests/harness.py) with two running jobs and a master holding a
maintenance schedule of two machines, then runs each measured command line ``--runs``
times as a fresh process (human output, read from a pipe) and records its wall time,
fork to exit. The measured commands are the ones an operator types: ``drain --graceful
--yes`` then ``cancel``, ``claim -- CMD`` then ``release`` of that claim, ``status --json``,
``status`` (the table), ``master status`` (the table), ``master plan`` (the summary),
``version``; next to a bare interpreter (``python -c pass``) and ``cancel`` forced through
typer (what the entry point's typer-free path saves). The cases take turns, so that load
from elsewhere falls on all of them. Each command's median is also given as a ratio to
the bare interpreter's in the same run: the target is at most :data:`TARGET_RATIO`. The
processes run as installed: with Python's bytecode cache (kept in a temporary
``PYTHONPYCACHEPREFIX``, whatever ``PYTHONDONTWRITEBYTECODE`` says). Then one
``python -X importtime`` run per command says which imports dominate, and which heavy
modules (none) and modules a one-request command does without (none) were imported.

Prints one JSON document. Usage: ``python tests/bench/cli_startup.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.harness import AgentProcess, MasterProcess, job_script, wait_for

TARGET_RATIO = 3.0
"""Each measured command's median, at most this many times the bare interpreter's."""
HEAVY = ("trio", "httpx", "httpcore", "pydantic", "pydantic_core", "fastapi", "hypercorn")
NEEDLESS = ("http.client", "email", "ssl", "dataclasses", "typing", "inspect", "rich")
TARGETS = (
    "drain --graceful --yes",
    "cancel",
    "claim -- CMD",
    "release",
    "status --json",
    "status",
    "master status",
    "master plan",
    "version",
)
_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")
_CLAIM_ID = re.compile(r"created claim (\S+) ")


def nodeagent_argv() -> list[str]:
    """The console script next to this interpreter (as installed), else ``-m nodeagent``."""
    script = Path(sys.executable).with_name("nodeagent")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nodeagent"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """One whole process: its wall time in ms and its stdout; it must exit 0."""
    begin = time.perf_counter()
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    elapsed = (time.perf_counter() - begin) * 1000
    if result.returncode != 0:
        raise RuntimeError(f"{argv} exited {result.returncode}: {result.stderr}")
    return elapsed, result.stdout


def summary(samples: list[float], python_p50: float) -> dict[str, Any]:
    """Quantiles in ms, and the median as a ratio to the bare interpreter's."""
    samples = sorted(samples)

    def quantile(q: float) -> float:
        return round(samples[min(len(samples) - 1, int(q * len(samples)))], 1)

    ratio = statistics.median(samples) / python_p50
    return {
        "runs": len(samples),
        "min": round(samples[0], 1),
        "p50": round(statistics.median(samples), 1),
        "p90": quantile(0.9),
        "max": round(samples[-1], 1),
        "p50_ratio_to_python": round(ratio, 2),
        "meets_target": ratio <= TARGET_RATIO,
    }


def import_profile(argv: list[str], env: dict[str, str], top: int = 8) -> dict[str, Any]:
    """``-X importtime`` of one run: the total, self time summed per top-level package
    (``rich``, ``http``, ``email``, ``nodeagent``, …), largest first, and the heavy and
    needless modules it imported (there should be none)."""
    if argv[0] == sys.executable:
        argv = argv[1:]
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    per_package: dict[str, int] = {}
    total = 0
    modules = set()
    for line in result.stderr.splitlines():
        m = _IMPORT_LINE.match(line)
        if m is None:
            continue
        self_us, name = int(m.group(1)), m.group(4)
        modules.add(name)
        total += self_us
        package = name.split(".")[0]
        per_package[package] = per_package.get(package, 0) + self_us
    ranked = sorted(per_package.items(), key=lambda item: -item[1])[:top]
    return {
        "total_ms": round(total / 1000, 1),
        "self_ms_by_package": {name: round(us / 1000, 1) for name, us in ranked},
        "modules": len(modules),
        "heavy_imported": sorted(h for h in HEAVY if h in modules),
        "needless_imported": sorted(
            n for n in NEEDLESS if any(m == n or m.startswith(n + ".") for m in modules)
        ),
    }


def window(hosts: list[str], start_s: float) -> dict[str, Any]:
    """A Mesos schedule with one window for ``hosts``, ``start_s`` from now, one hour long."""
    ns = 1_000_000_000
    return {
        "windows": [
            {
                "machine_ids": [{"hostname": h, "ip": f"10.9.0.{i}"} for i, h in enumerate(hosts)],
                "unavailability": {
                    "start": {"nanoseconds": int((time.time() + start_s) * ns)},
                    "duration": {"nanoseconds": 3600 * ns},
                },
            }
        ]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    nodeagent = nodeagent_argv()
    python = sys.executable
    sleep = shutil.which("sleep") or "/bin/sleep"
    with (
        tempfile.TemporaryDirectory() as tmp,
        AgentProcess(Path(tmp) / "agent") as agent,
        MasterProcess(Path(tmp) / "master") as master,
    ):
        for i in range(2):
            argv, record = job_script(Path(tmp), f"job{i}")
            agent.claim(argv, cpus=2)
            wait_for(lambda record=record: Path(f"{record}.started").exists())
        schedule = window(["spare1.test", "spare2.test"], 7 * 86400)
        posted = master.call("POST", "/maintenance/schedule", json=schedule)
        assert posted.status_code == 200, posted.text
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
        # As installed: with the bytecode cache (kept out of the source tree).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        env["NODEAGENT_SOCKET"] = str(agent.socket)
        env["NODEAGENT_MASTER_SOCKET"] = str(master.socket)
        through_typer = [python, "-c", "from nodeagent.cli._app import app; app()"]
        samples: dict[str, list[float]] = {}

        def measure(name: str, argv: list[str]) -> str:
            elapsed, out = timed(argv, env)
            samples.setdefault(name, []).append(elapsed)
            return out

        steps: list[Callable[[], object]] = [
            lambda: measure("python -c pass", [python, "-c", "pass"]),
            lambda: measure("version", [*nodeagent, "version"]),
            lambda: measure("status", [*nodeagent, "status"]),
            lambda: measure("status --json", [*nodeagent, "status", "--json"]),
            lambda: measure("master status", [*nodeagent, "master", "status"]),
            lambda: measure("master plan", [*nodeagent, "master", "plan"]),
        ]

        def drain_then_cancel() -> None:
            measure("drain --graceful --yes", [*nodeagent, "drain", "--graceful", "--yes"])
            measure("cancel", [*nodeagent, "cancel"])

        def claim_then_release() -> None:
            out = measure("claim -- CMD", [*nodeagent, "claim", "--", sleep, "600"])
            match = _CLAIM_ID.search(out)
            assert match is not None, out
            measure("release", [*nodeagent, "release", match.group(1)])

        def cancel_through_typer() -> None:
            timed([*nodeagent, "drain", "--graceful", "--yes"], env)
            measure("cancel (through typer)", [*through_typer, "cancel"])

        steps += [drain_then_cancel, claim_then_release, cancel_through_typer]
        for step in steps:  # warm-up: caches, .pyc files
            step()
        samples.clear()
        for _ in range(args.runs):  # interleaved, so that load affects every case alike
            for step in steps:
                step()
        profiles = {
            name: import_profile(argv, env)
            for name, argv in {
                "version": [*nodeagent, "version"],
                "status": [*nodeagent, "status"],
                "status --json": [*nodeagent, "status", "--json"],
                "cancel": [*nodeagent, "cancel"],
                "master status": [*nodeagent, "master", "status"],
                "master plan": [*nodeagent, "master", "plan"],
            }.items()
        }
    python_p50 = statistics.median(samples["python -c pass"])
    results = {name: summary(values, python_p50) for name, values in samples.items()}
    print(
        json.dumps(
            {
                "command": "whole nodeagent processes over the local Unix sockets",
                "target_ratio_to_python": TARGET_RATIO,
                "meets_target": all(results[name]["meets_target"] for name in TARGETS),
                "cases_ms": results,
                "imports": profiles,
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
