"""The node agent (``nodeagent run``): one machine's slots, jobs, drains and ad.

The model is :mod:`slots`; this package carries out its decisions, one module each:

* :mod:`._agent`: the shell around one :class:`slots.Machine`: persists to the store, then acts.
* :mod:`._api`: the HTTP API (v1, JSON), on the Unix socket and TCP.
* :mod:`._config`: the agent's configuration.
* :mod:`._daemon`: the process's lifecycle, on :mod:`nodeagent._lifecycle`.
* :mod:`._hooks`: what runs around a drain: its completion hooks and the health check.
* :mod:`._metrics`: the agent's Prometheus metrics.
* :mod:`._processes`: job processes: launch, adopt, wait for, signal and measure them.
* :mod:`._push`: the link to the masters: pushes the ad, learns the mode and window.
* :mod:`._reaper`: the small program each hook and health check runs under (by path).
* :mod:`._recovery`: what an empty ``agent.db`` lost, found again (``--recover``).
* :mod:`._schemas`: the API's bodies (pydantic, at the edge) and the one adapter to the model.
* :mod:`._shutdown`: logind's delay lock: the node drained when the machine shuts down.
* :mod:`._store`: the durable state: the machine document and its job processes.
"""
