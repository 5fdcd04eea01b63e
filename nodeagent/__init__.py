"""nodeagent: a per-node drain agent, a cluster maintenance master and a defrag daemon.

The sans-IO model lives in the :mod:`slots` package; this package is the shell that
touches the world (processes, sockets, the database, the clock).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
