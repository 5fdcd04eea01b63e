from __future__ import annotations

from nodeagent.cli._main import main

main()
