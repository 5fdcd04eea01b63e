from __future__ import annotations

from nodeagent.cli import main

main()
