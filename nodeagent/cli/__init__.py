"""The ``nodeagent`` command line.

* :mod:`._main` is the console script's entry point; :mod:`._fast` recognises the plain
  command lines, which run without typer.
* One typer application per group: :mod:`._app` (the root: ``version``, ``demo``, and the
  groups), :mod:`._agent_app` (``run`` and the agent's commands, at the top level),
  :mod:`._token_app`, :mod:`._master_app`, :mod:`._defrag_app`; the options they share are
  written once in :mod:`._options`.
* What the commands do, without typer: :mod:`._agent`, :mod:`._token`, :mod:`._master`,
  :mod:`._defrag`; shared: :mod:`._common` (outcome, JSON), :mod:`._errors` (the error
  tree and exit statuses), :mod:`._http` (the standard library's HTTP client),
  :mod:`._locate` (what a command reads from a daemon's configuration).
* Every human view: :mod:`._render`. The demo: :mod:`._demo`.
"""
