from __future__ import annotations

from nodeagent._cli_fast import main

main()
