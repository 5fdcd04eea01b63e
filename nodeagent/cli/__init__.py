"""The ``nodeagent`` command line.

:mod:`._main` is the console script's entry point; :mod:`._fast` parses the plain command
lines from the one declaration of every command (:mod:`._commands`) and runs them without
typer; :mod:`._app` builds the typer application from the same declaration, for everything
else (``--help``, completion, usage errors, the daemons, the demo). One line a module:

* :mod:`._agent`: the agent's client commands (``status``, ``drain``, ``cancel``, …).
* :mod:`._app`: the typer application, built from the declaration.
* :mod:`._commands`: every group and command, declared once, as plain data.
* :mod:`._common`: what commands share: targets, console, watch loop, replies, outcome.
* :mod:`._daemons`: ``run``, ``master run``, ``defrag run`` and ``demo``, under typer only.
* :mod:`._defrag`: ``defrag status``.
* :mod:`._demo`: ``nodeagent demo``: a master and three agents through a window.
* :mod:`._demo_rolling`: ``nodeagent demo --rolling``: a rack-by-rack reboot under an SLA.
* :mod:`._draw`: the views' text, tables and groups, drawn without rich off a terminal.
* :mod:`._errors`: the error tree of a client command and its exit statuses.
* :mod:`._events`: ``master events``: the master's event stream, followed and resumed.
* :mod:`._fast`: parses and runs the plain command lines, without typer.
* :mod:`._http`: finds and reaches a daemon: targets, requests, redirects, error replies.
* :mod:`._join`: ``master join-config``: a new agent's token and ``[master]`` section.
* :mod:`._locate`: what a command reads from a daemon's configuration.
* :mod:`._main`: the console script's entry point.
* :mod:`._maintain`: ``master maintain …``: rolling maintenance operations.
* :mod:`._master`: the master's client commands, and machine ids on the command line.
* :mod:`._notices`: ``master notices``: job groups' notices, listed or followed; answers.
* :mod:`._record`: frozen keyword-only records, without ``dataclasses``.
* :mod:`._render`: every human view, built of :mod:`._draw`'s pieces.
* :mod:`._sla`: ``master sla probe`` as a table.
* :mod:`._token`: ``token create``: signs a bearer token with the pool key.
* :mod:`._transport`: HTTP/1.1 exchanges on a plain socket (or a reply read as it comes),
  without ``http.client``.
* :mod:`._ui`: ``master ui``: the maintenance page on loopback, forwarding its reads.

The plain commands import neither ``typing``, ``dataclasses`` nor ``http.client``, nor rich
off a terminal (``tests/integration/test_cli_startup.py``): keep it so in every module they
import.
"""
