"""Several daemons over one state: etcd, the documents kept in it, and one leader.

Named after what the family gives, not after its one backend: masters (and defrag
daemons) that run as several copies share their state and elect the one that acts
(``docs/high-availability.md``). etcd is how, and says so in the modules' names where
it is the subject; the options also choose the single daemon's SQLite store.

* :mod:`._etcd`: etcd's v3 API through its JSON gateway, over httpx (blocking and trio).
* :mod:`._store`: named JSON documents in etcd, written by the leader, fenced by its key
  (the contract of :class:`nodeagent._store.Documents`).
* :mod:`._leadership`: one leader among several daemons, elected with an etcd lease; the
  :class:`~._leadership.Fence` every write of the leader holds to.
* :mod:`._options`: the configuration keys of a daemon that keeps its state in etcd
  (``store``, the endpoints, the leader's lease).
"""
