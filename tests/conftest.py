"""Shared test configuration."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# pytest-xdist's workers are given COLUMNS=80 and LINES=24; the command line under test lays
# its output out as for no terminal, as in a run without workers.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

# Agents run in process by the tests never take the host's logind lock: their system bus is
# a socket that does not exist (the shutdown tests give theirs a private bus).
os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent/nodeagent-tests-no-bus"

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
