"""The sans-IO slot model of a node: resources, slots, jobs, drains and ads.

No I/O and no clock: every call that depends on time takes ``now`` (wall-clock
epoch seconds). The shell (:mod:`nodeagent`) turns the world into calls on a
:class:`Machine` and carries out the actions it returns.
"""

from __future__ import annotations

from slots._ads import EXPECTED_ATTRIBUTES, ad_blockers, check_estimate_inputs, drain_estimates
from slots._classad import evaluate, is_true, parse_long, render_long, validate_expression
from slots._drain import (
    Action,
    Blocker,
    CompletionAction,
    DrainEstimate,
    DrainRequest,
    DrainState,
    OnCompletion,
    Publish,
    SignalJob,
)
from slots._errors import (
    CheckFailed,
    ClaimNotActive,
    DrainError,
    DrainInProgress,
    IllegalDrainTransition,
    IllegalTransition,
    InvalidRequest,
    NoSuchClaim,
    NoSuchRequest,
    NotAccepting,
    NotPending,
    ResourcesInsufficient,
    SlotsError,
    TransactionExpired,
    TransactionPending,
)
from slots._estimates import (
    MAX_PUBLISHED,
    Estimate,
    Eviction,
    JobTiming,
    Phase,
    Schedule,
    SuspendPolicy,
    clamp,
    effective_retirement,
    estimate,
    graceful_time,
    plan_eviction,
    plan_evictions,
    retirement_remaining,
    sticky_completion,
    vacate_time,
)
from slots._forecast import DrainForecast
from slots._machine import ClaimInfo, JobSpec, Machine, MachinePolicy
from slots._request_states import (
    FINISHED,
    REQUEST_MOVES,
    RequestEvent,
    check_request_move,
)
from slots._resources import Resources
from slots._states import ACTIVE, MOVES, Activity, State, check_move

__all__ = [
    "ACTIVE",
    "EXPECTED_ATTRIBUTES",
    "FINISHED",
    "MAX_PUBLISHED",
    "MOVES",
    "REQUEST_MOVES",
    "Action",
    "Activity",
    "Blocker",
    "CheckFailed",
    "ClaimInfo",
    "ClaimNotActive",
    "CompletionAction",
    "DrainError",
    "DrainEstimate",
    "DrainForecast",
    "DrainInProgress",
    "DrainRequest",
    "DrainState",
    "Estimate",
    "Eviction",
    "IllegalDrainTransition",
    "IllegalTransition",
    "InvalidRequest",
    "JobSpec",
    "JobTiming",
    "Machine",
    "MachinePolicy",
    "NoSuchClaim",
    "NoSuchRequest",
    "NotAccepting",
    "NotPending",
    "OnCompletion",
    "Phase",
    "Publish",
    "RequestEvent",
    "Resources",
    "ResourcesInsufficient",
    "Schedule",
    "SignalJob",
    "SlotsError",
    "State",
    "SuspendPolicy",
    "TransactionExpired",
    "TransactionPending",
    "ad_blockers",
    "check_estimate_inputs",
    "check_move",
    "check_request_move",
    "clamp",
    "drain_estimates",
    "effective_retirement",
    "estimate",
    "evaluate",
    "graceful_time",
    "is_true",
    "parse_long",
    "plan_eviction",
    "plan_evictions",
    "render_long",
    "retirement_remaining",
    "sticky_completion",
    "vacate_time",
    "validate_expression",
]
