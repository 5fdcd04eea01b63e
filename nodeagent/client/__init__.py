"""The Python clients of the agent's and the master's HTTP APIs (DESIGN §4), for trio
programs and scripts.

:class:`AgentClient` talks to one agent, over its Unix socket (ADMINISTRATOR: whoever may
open the socket) or over TCP with a bearer token::

    async with AgentClient() as agent:                    # the default Unix socket
        async with agent.start_draining("graceful", reason="kernel update") as txn:
            print(txn.estimate.completion, [b.slot for b in txn.estimate.blockers])
            await txn.commit()                            # or leave the block: cancelled
        await agent.wait_drained()

:class:`SyncAgentClient` offers the same calls to scripts without an event loop; each call
runs the async one under its own ``trio.run``.

:class:`MasterClient` (and :class:`SyncMasterClient`) talks to the masters: the Mesos
maintenance schedule, down and up, the status, the plan, the ads, the rolling operations
and the SLA policies; :meth:`MasterClient.events` reads their event stream, resuming by
itself after a broken connection or a master restarted; :meth:`MasterClient.notices` lists
the notices (Mesos's inverse offers) of a job group or follows them, and
:meth:`MasterClient.accept` and :meth:`MasterClient.decline` answer one. Several masters
may be named (``urls=[...]``): a request goes to the first that answers, and a write that reaches a
master that does not lead is sent again, as it was, to the leader that master names
(``307``)::

    async with MasterClient(urls=["https://m1:9622", "https://m2:9622"], token=tok) as m:
        await m.set_schedule({"windows": [...]})      # reaches the leader
        print((await m.leader()).leader)

Results are frozen dataclasses that mirror the API's JSON field for field
(:class:`DrainRequest`, :class:`Estimate`, :class:`Blocker`, :class:`Claim`, …); the
machine ad stays a ``dict`` keyed by ClassAd attribute names.

Errors. Every failure of either client is an :class:`AgentError` carrying ``code`` (the
daemon's stable code, or ``client.*`` for failures seen only by the client), ``message``,
``status`` (the HTTP status, ``None`` when there was no reply) and ``condor_code``
(HTCondor's number, where one exists)::

    AgentError
    ├── Unreachable                      client.unreachable | client.timeout   no reply
    ├── BadResponse                      client.bad_response   a reply the API does not promise
    ├── RedirectNotFollowed              client.redirect_refused | client.token_required |
    │                                    client.insecure_redirect | client.too_many_redirects
    │                                    (the master client)
    ├── OutcomeUnknown         503   store.outcome_unknown   (the master client: a write may
    │                                or may not have been applied; read back, then retry)
    └── Refused                          any code the daemon sent; unknown codes stay here
        ├── Unauthorized           401   auth.unauthenticated
        ├── Forbidden              403   auth.forbidden; auth.wrong_group (the master: a
        │                                token that may not answer for a notice's group)
        ├── InvalidRequest         422   request.invalid; notice.bad_reason,
        │                                notice.bad_expected_completion, notice.bad_body
        │   └── InvalidMaintenance 400   maintenance.invalid   (Mesos's plain-text message)
        ├── NoLeader               503   master.no_leader      (retry after ``retry_after`` s)
        ├── NotAccepting           409   machine.not_accepting
        ├── ResourcesInsufficient  409   resources.insufficient
        ├── NoSuchClaim            404   claim.no_such_claim
        ├── DrainInProgress        409   drain.in_progress          (10001)
        ├── NoSuchRequest          404   drain.no_such_request      (10002)
        ├── CheckFailed            412   drain.check_failed         (10003)
        ├── TransactionExpired     410   drain.transaction_expired
        ├── NotPending             409   drain.not_pending
        ├── NoSuchHook             422   drain.no_such_hook
        └── HookRunning            409   drain.hook_running

A :class:`Refused` request changed nothing on the daemon (the API's contract), nor did a
:class:`RedirectNotFollowed` one. After :class:`Unreachable` with code ``client.timeout``,
or :class:`OutcomeUnknown` (a master on etcd whose write got no reply, and etcd could not
say in time whether it applied it), the request may or may not have been applied: read
the state back before retrying a write.
Foreign exceptions (httpx's) are translated in one place,
:func:`._errors._map_exceptions`; error bodies in one place, :func:`._errors._refusal` (the
master's through :func:`._master._master_refusal`); JSON into results in one place, the
``_*_from_json`` functions of :mod:`._results`.

The modules, by concern (every public name is imported from this package):

* :mod:`._errors`: the error tree above, and where httpx's exceptions and error bodies
  become it;
* :mod:`._results`: the result types and their decoding from JSON;
* :mod:`._agent`: :class:`AgentClient` and its :class:`DrainTransaction`;
* :mod:`._master`: :class:`MasterClient` and its event stream;
* :mod:`._sync`: the synchronous facades :class:`SyncAgentClient` (with
  :class:`SyncDrainTransaction`) and :class:`SyncMasterClient`.
"""

from __future__ import annotations

from nodeagent.client._agent import (
    CANCEL_GRACE_S,
    AgentClient,
    DrainTransaction,
    default_socket_path,
)
from nodeagent.client._errors import (
    AgentError,
    BadResponse,
    CheckFailed,
    DrainInProgress,
    Forbidden,
    HookRunning,
    InvalidMaintenance,
    InvalidRequest,
    NoLeader,
    NoSuchClaim,
    NoSuchHook,
    NoSuchRequest,
    NotAccepting,
    NotPending,
    OutcomeUnknown,
    RedirectNotFollowed,
    Refused,
    ResourcesInsufficient,
    TransactionExpired,
    Unauthorized,
    Unreachable,
)
from nodeagent.client._master import EVENTS_IDLE_S, MAX_REDIRECTS, MasterClient
from nodeagent.client._results import (
    Admission,
    Blocker,
    Claim,
    ClaimResources,
    DrainRequest,
    DrainStatus,
    Estimate,
    Health,
    HealthStatus,
    HookRun,
    Job,
    Leadership,
    Notice,
    NoticeAnswer,
    NoticeChange,
    NoticeClaim,
    NoticeWindow,
    OnCompletion,
    Schedule,
)
from nodeagent.client._sync import SyncAgentClient, SyncDrainTransaction, SyncMasterClient

__all__ = [
    "CANCEL_GRACE_S",
    "EVENTS_IDLE_S",
    "MAX_REDIRECTS",
    "Admission",
    "AgentClient",
    "AgentError",
    "BadResponse",
    "Blocker",
    "CheckFailed",
    "Claim",
    "ClaimResources",
    "DrainInProgress",
    "DrainRequest",
    "DrainStatus",
    "DrainTransaction",
    "Estimate",
    "Forbidden",
    "Health",
    "HealthStatus",
    "HookRun",
    "HookRunning",
    "InvalidMaintenance",
    "InvalidRequest",
    "Job",
    "Leadership",
    "MasterClient",
    "NoLeader",
    "NoSuchClaim",
    "NoSuchHook",
    "NoSuchRequest",
    "NotAccepting",
    "NotPending",
    "Notice",
    "NoticeAnswer",
    "NoticeChange",
    "NoticeClaim",
    "NoticeWindow",
    "OnCompletion",
    "OutcomeUnknown",
    "RedirectNotFollowed",
    "Refused",
    "ResourcesInsufficient",
    "Schedule",
    "SyncAgentClient",
    "SyncDrainTransaction",
    "SyncMasterClient",
    "TransactionExpired",
    "Unauthorized",
    "Unreachable",
    "default_socket_path",
]


def _publish() -> None:
    """Name this package as the home of its public classes and functions (their
    ``__module__``), as before the split: tracebacks, reprs and pickles keep saying
    ``nodeagent.client.Unreachable``, a name that stays importable."""
    for name in __all__:
        value = globals()[name]
        if getattr(value, "__module__", "").startswith(f"{__name__}._"):
            value.__module__ = __name__


_publish()
