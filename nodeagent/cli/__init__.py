"""The ``nodeagent`` command line.

:mod:`._main` is the console script's entry point; :mod:`._fast` runs the plain command
lines without typer; one typer application per group, whose commands do their work in a
typer-free module of their own. One line a module:

* :mod:`._agent`: the agent's client commands (``status``, ``drain``, ``cancel``, …).
* :mod:`._agent_app`: ``run`` and the agent's commands as typer's, at the top level.
* :mod:`._app`: the root typer application: ``version``, ``demo``, and the groups.
* :mod:`._common`: what every command shares: printing a reply, the outcome, running a daemon.
* :mod:`._defrag`: ``defrag status``.
* :mod:`._defrag_app`: ``defrag …`` as typer's.
* :mod:`._demo`: ``nodeagent demo``: a master and three agents through a window.
* :mod:`._demo_rolling`: ``nodeagent demo --rolling``: a rack-by-rack reboot under an SLA.
* :mod:`._errors`: the error tree of a client command and its exit statuses.
* :mod:`._fast`: recognises the plain command lines, which run without typer.
* :mod:`._http`: finds and reaches a daemon, with the standard library's HTTP client.
* :mod:`._locate`: what a command reads from a daemon's configuration.
* :mod:`._main`: the console script's entry point.
* :mod:`._maintain`: ``master maintain …``: rolling maintenance operations.
* :mod:`._maintain_app`: ``master maintain …`` as typer's.
* :mod:`._master`: the master's client commands, and machine ids on the command line.
* :mod:`._master_app`: ``master …`` as typer's: run the master and talk to it.
* :mod:`._options`: the options the groups share, written once.
* :mod:`._render`: every human view.
* :mod:`._sla`: ``master sla probe`` as a table.
* :mod:`._sla_app`: ``master sla …`` as typer's.
* :mod:`._token`: ``token create``: signs a bearer token with the pool key.
* :mod:`._token_app`: ``token …`` as typer's.
"""
