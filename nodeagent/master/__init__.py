"""The cluster master (``nodeagent master run``).

Pure parts, free of trio and sockets: the maintenance schedule and machine modes
(:mod:`._maintenance`), the store of ads (:mod:`._adstore`) and the plan
(:mod:`._plan`). :mod:`._master` drives drains from them on trio; :mod:`._api` serves the
Mesos-compatible and v1 APIs; :mod:`._daemon` is the process's lifecycle; :mod:`._config`,
its configuration.
"""
