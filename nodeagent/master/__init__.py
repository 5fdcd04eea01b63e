"""The cluster master (``nodeagent master run``).

Its modules, one line each (the pure ones are free of trio and sockets):

* :mod:`._ad_pushes`: an ad push taken from its head (the token checked, the body read) and
  the verified tokens remembered; the same in the master and its ingest workers.
* :mod:`._adstore`: the nodes' ads, soft state refreshed by the agents' pushes (pure).
* :mod:`._api`: the HTTP API: ads, the Mesos-compatible maintenance endpoints, the plan.
* :mod:`._collector`: what survives the collector's middle generation is frozen (gc.freeze),
  walked whole again only as the pool grows.
* :mod:`._config`: the master's configuration.
* :mod:`._coordinators`: asks the coordinators of job groups whether hosts may go.
* :mod:`._daemon`: the process's lifecycle, on :mod:`nodeagent._lifecycle`.
* :mod:`._drains`: the master's drain records and what a pass decides for a machine (pure).
* :mod:`._event_drafts`: the events found by comparing a change's before and after (pure).
* :mod:`._event_stream`: the events written and published, and ``GET /v1/events`` (trio).
* :mod:`._events`: the events: one event, the log of the last ones, filters, wire (pure).
* :mod:`._fleet`: what the fleet's metrics count: late machines, escalations, node states (pure).
* :mod:`._ingest`: an ad push parsed, checked and packed for the store; the worker frames (pure).
* :mod:`._ingest_worker`: the ingest worker process: takes the pushes that reach it on the
  master's TCP listeners (HTTP, token, body made ready) and relays every other request.
* :mod:`._ingest_workers`: the ingest workers kept running; their pushes stored and answered
  (trio).
* :mod:`._leader`: which master leads, and what a follower does with a write.
* :mod:`._maintenance`: the Mesos maintenance schedule and machine modes (pure).
* :mod:`._master`: the master on trio: the drains it drives from the plan.
* :mod:`._metrics`: the master's Prometheus metrics.
* :mod:`._notices`: notices (inverse offers) per machine and job group, and answers (pure).
* :mod:`._notices_api`: the endpoints of the notices: list, accept, decline.
* :mod:`._notify`: the webhooks: each event POSTed, signed, in order, at least once.
* :mod:`._operation_preview`: a rolling operation's batches and end, before it exists (pure).
* :mod:`._operations`: rolling maintenance operations: batches, steps, the next one (pure).
* :mod:`._operations_api`: the endpoints of rolling maintenance operations.
* :mod:`._pass_index`: which machines a reconcile pass looks at: what changed or came due.
* :mod:`._plan`: the maintenance plan: the nodes' estimates turned into when to drain what (pure).
* :mod:`._plan_ledger`: the plan's totals and late rows kept between replies (pure).
* :mod:`._plan_view`: the plan's reply: its caches, totals, late rows, limit, encoding (pure).
* :mod:`._preview`: what a proposed schedule would do, from the ads held now (pure).
* :mod:`._rolling`: the engine that carries out :mod:`._operations` on the nodes (trio).
* :mod:`._row_json`: a plan row as JSON text, from a template made once.
* :mod:`._sla`: job groups' SLAs and the probe (pure).
* :mod:`._sla_api`: the SLA endpoints: the job groups' policies and the probe.
* :mod:`._sla_policies`: the SLA policies held: set over the API (durable) or from a file.
* :mod:`._ui`: the maintenance page's files (``ui/``), as ``/ui/`` and ``master ui`` serve them.
"""
