"""CLI start-up: wall time of whole ``nodeagent`` processes against a real local agent.

Starts a daemon (tests/harness.py) with two running jobs, then runs each measured command
line ``--runs`` times as a fresh process and records its wall time (fork to exit). The
main figure is ``nodeagent status --json`` over the local Unix socket; for comparison:
the human ``status`` (rich), ``ad -l``, the same ``status --json`` forced through typer
(no fast path), ``version`` (typer, no request) and a bare interpreter. Then one
``python -X importtime`` run of ``status --json`` says which imports dominate.

Prints one JSON document. Usage: ``python tests/bench/cli_startup.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.harness import AgentProcess, job_script, wait_for

TARGET_MS = 250.0
_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def nodeagent_argv() -> list[str]:
    """The console script next to this interpreter, else ``python -m nodeagent``."""
    script = Path(sys.executable).with_name("nodeagent")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nodeagent"]


def wall_times(argv: list[str], runs: int, env: dict[str, str]) -> dict[str, Any]:
    """Run ``argv`` ``runs`` times (after one warm-up); wall time statistics in ms."""
    subprocess.run(argv, env=env, capture_output=True, check=True, timeout=60)
    samples = []
    for _ in range(runs):
        begin = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True, timeout=60)
        samples.append((time.perf_counter() - begin) * 1000)
    samples.sort()

    def quantile(q: float) -> float:
        return round(samples[min(len(samples) - 1, int(q * len(samples)))], 1)

    return {
        "runs": runs,
        "min": round(samples[0], 1),
        "p50": round(statistics.median(samples), 1),
        "p90": quantile(0.9),
        "max": round(samples[-1], 1),
        "mean": round(statistics.fmean(samples), 1),
    }


def import_profile(argv: list[str], env: dict[str, str], top: int = 12) -> dict[str, Any]:
    """``-X importtime`` of one run: the total, and self time summed per top-level package
    (``typer``, ``http``, ``email``, ``nodeagent``, …), largest first."""
    if argv[0] == sys.executable:
        argv = argv[1:]
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
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
    heavy = ("pydantic", "httpx", "httpcore", "trio", "fastapi", "rich", "jwt", "psutil")
    return {
        "total_ms": round(total / 1000, 1),
        "self_ms_by_package": {name: round(us / 1000, 1) for name, us in ranked},
        "modules": len(modules),
        "heavy_imported": sorted(h for h in heavy if h in modules),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    nodeagent = nodeagent_argv()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp, AgentProcess(Path(tmp) / "agent") as agent:
        for i in range(2):
            argv, record = job_script(Path(tmp), f"job{i}")
            agent.claim(argv, cpus=2)
            wait_for(lambda record=record: Path(f"{record}.started").exists())
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
        env["NODEAGENT_SOCKET"] = str(agent.socket)
        through_typer = [python, "-c", "from nodeagent.cli._app import app; app()"]
        cases = {
            "status --json": [*nodeagent, "status", "--json"],
            "status": [*nodeagent, "status"],
            "ad -l": [*nodeagent, "ad", "-l"],
            "status --json (typer path)": [*through_typer, "status", "--json"],
            "version (typer, no request)": [*nodeagent, "version"],
            "python -c pass": [python, "-c", "pass"],
        }
        results = {name: wall_times(argv, args.runs, env) for name, argv in cases.items()}
        profiles = {
            "status --json": import_profile([*nodeagent, "status", "--json"], env),
            "status": import_profile([*nodeagent, "status"], env),
        }
    headline = results["status --json"]
    print(
        json.dumps(
            {
                "command": "nodeagent status --json (local Unix socket)",
                "target_ms": TARGET_MS,
                "meets_target": headline["p90"] <= TARGET_MS,
                **headline,
                "cases_ms": results,
                "imports": profiles,
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
