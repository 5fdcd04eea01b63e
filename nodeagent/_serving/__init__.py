"""The daemons' HTTP server side: the servers, the gate in front of every API, the kit.

* :mod:`._hypercorn`: an ASGI app served on hypercorn's trio worker (the Unix socket and
  TCP), the runtime file, the URL a daemon advertises.
* :mod:`._http11`: a small HTTP/1.1 server (h11 on trio) for the master's TCP listeners,
  which take many small requests.
* :mod:`._quick`: one route of that server read with llhttp and answered without h11
  (the ingest workers' ad pushes), the rest handed to h11.
* :mod:`._gate`: the gate in front of every API: route, caller and body checked from the
  headers before a byte of the body is read.
* :mod:`._http`: error bodies, the Unix-socket mark, the auth-error reply, bodies read
  with a size cap.

How one daemon calls another is the client side: :mod:`nodeagent._peer`.
"""
