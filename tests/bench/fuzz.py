"""Fuzzing, the longer run: schemathesis over the agent's and the master's OpenAPI.

The same checks as ``tests/integration/test_fuzz.py`` (no 5xx, replies that match the
document, no state change on a 4xx; see ``tests/fuzzing.py``), with more examples per
operation and a larger time budget, against real daemons on loopback TCP. Findings are
counted, not raised; each is printed to stderr as it is found.

Prints one JSON document ``{"agent": {...}, "master": {...}, "seed": N}`` with, per
daemon, the operations fuzzed, the requests sent (``examples``) by status, the failures
found and the duration. The exit status is 0 whatever was found.

Usage: ``python tests/bench/fuzz.py [--examples N] [--budget S] [--seed N] [--only agent|master]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fuzzing import AgentTarget, Finding, MasterTarget, Target, fuzz
from tests.harness import AgentProcess, MasterProcess


def _print(finding: Finding) -> None:
    print(
        f"{finding.operation} -> {finding.status}: {finding.problem}\n  {finding.request}",
        file=sys.stderr,
        flush=True,
    )


def _run(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    report = fuzz(
        target,
        max_examples=args.examples,
        seed=args.seed,
        time_budget_s=args.budget,
        on_finding=_print,
    )
    figures = report.figures()
    figures["failing_operations"] = sorted({f.operation for f in report.findings})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="per operation and mode")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per daemon")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--only", choices=("agent", "master"), default=None)
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(2**32)
    result: dict[str, Any] = {"seed": args.seed, "examples_per_operation": args.examples}
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        root = Path(tmp)
        if args.only in (None, "agent"):
            with AgentProcess(root / "agent") as agent:
                agent_target = AgentTarget(agent)
                try:
                    result["agent"] = _run(agent_target, args)
                finally:
                    agent_target.close()
        if args.only in (None, "master"):
            with MasterProcess(root / "master") as master:
                master_target = MasterTarget(master)
                try:
                    result["master"] = _run(master_target, args)
                finally:
                    master_target.close()
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
