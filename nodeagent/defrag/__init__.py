"""The defrag daemon (``nodeagent defrag run``): ``condor_defrag`` over the master's ads.

* :mod:`._config`: the daemon's configuration.
* :mod:`._daemon`: the process's lifecycle, on :mod:`nodeagent._lifecycle`.
* :mod:`._policy`: the pure policy: which machines to drain, pacing, statistics.
* :mod:`._records`: its record of its own drains, and whether an ad is not older than it.
* :mod:`._service`: its cycles against the master's ads and the agents, on trio.
"""
