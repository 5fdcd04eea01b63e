"""The node agent (``nodeagent run``): one machine's slots, jobs, drains and ad.

The model is :mod:`slots`; this package carries out its decisions. :mod:`._agent` owns the
machine and its job processes (:mod:`._processes`), persisting to :mod:`._store` before it
acts; :mod:`._api` serves the HTTP API (bodies in :mod:`._schemas`); :mod:`._push` pushes
the ad to the master; :mod:`._daemon` is the process's lifecycle; :mod:`._config`, its
configuration.
"""
