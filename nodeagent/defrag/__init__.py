"""The defrag daemon (``nodeagent defrag run``): ``condor_defrag`` over the master's ads.

:mod:`._policy` is the pure policy (which machines to drain, pacing, statistics);
:mod:`._service` runs its cycles against the master and the agents; :mod:`._daemon` is the
process's lifecycle; :mod:`._config`, its configuration.
"""
