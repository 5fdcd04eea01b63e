"""The ``nodeagent`` command line.

:mod:`._main` is the console script's entry point. The typer application lives in
:mod:`._app`; it is imported only for the command lines the entry point does not run by
itself.
"""
