"""Site attributes: what an operator declares about a machine (HTCondor's STARTD_ATTRS).

The agent's configuration may declare attributes its machine ad publishes (``Rack =
"r12"``, ``Zone = "z1"``), every slot ad carries them too, START sees them in MY, and the
master's constraints and groupings use them. A name must be a ClassAd identifier
(:data:`ATTRIBUTE_NAME`), not a ClassAd keyword, and must not shadow an attribute the
machine computes (:data:`COMPUTED_ATTRIBUTES`, or any name beginning with one of
:data:`COMPUTED_PREFIXES`), compared without regard to case as ClassAd names are. Values
are strings (printable, at most 256 characters), integers (64-bit) or booleans.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from slots._ads import EXPECTED_ATTRIBUTES
from slots._errors import InvalidRequest

__all__ = [
    "ATTRIBUTE_NAME",
    "COMPUTED_ATTRIBUTES",
    "COMPUTED_PREFIXES",
    "SiteAttributes",
    "SiteValue",
    "check_site_attributes",
]

SiteValue = str | int | bool
"""A site attribute's value."""

SiteAttributes = tuple[tuple[str, SiteValue], ...]
"""Site attributes as sorted ``(name, value)`` pairs (hashable, like the policy holding them)."""

#: A ClassAd identifier (and at most 64 characters).
ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

_KEYWORDS = frozenset({"true", "false", "undefined", "error", "is", "isnt", "my", "target"})

#: Every attribute a machine or slot ad may carry that the machine computes.
COMPUTED_ATTRIBUTES = frozenset(
    {
        # the machine ad
        "MyType",
        "Name",
        "Machine",
        "MyAddress",
        "MachineIp",
        "DaemonStartTime",
        "MyCurrentTime",
        "TotalCpus",
        "TotalMemory",
        "TotalDisk",
        "TotalGPUs",
        "Start",
        "Draining",
        "DrainState",
        "DrainingRequestId",
        "DrainReason",
        "DrainSchedule",
        "DrainOnCompletion",
        "DrainingDeadline",
        "DrainTransactionExpires",
        "LastDrainStartTime",
        "LastDrainStopTime",
        "TotalMachineDrainingBadput",
        "TotalMachineDrainingUnclaimedTime",
        "TotalDrainingBadputTime",
        "TotalDrainingUnclaimedTime",
        "MaxJobRetirementTime",
        "MachineMaxVacateTime",
        "DrainSuspendedJobs",
        "MaintenanceMode",
        "Unavailability",
        "ShuttingDown",
        "BeforeWindow",
        "DrainHookRequestId",
        "DrainHookName",
        "DrainHookState",
        "DrainHookStartTime",
        "DrainHookEndTime",
        "DrainHookExitStatus",
        "DrainHookMessage",
        "DrainHookOutput",
        "DrainHookOutputDropped",
        "HealthState",
        "HealthReason",
        "HealthSince",
        "HealthPasses",
        "HealthPassesNeeded",
        "HealthFailures",
        "HealthLastCheck",
        "HealthNextCheck",
        "HealthMessage",
        "HealthOutput",
        "HealthOutputDropped",
        *EXPECTED_ATTRIBUTES,
        # the slot ads
        "SlotID",
        "DSlotID",
        "ClaimId",
        "SlotType",
        "PartitionableSlot",
        "ParentSlot",
        "Cpus",
        "Memory",
        "Disk",
        "GPUs",
        "State",
        "Activity",
        "EnteredCurrentState",
        "EnteredCurrentActivity",
        "JobId",
        "JobGroup",
        "RemoteOwner",
        "JobStart",
        "TotalJobRunTime",
        "TotalJobSuspendTime",
        "RetirementTimeRemaining",
        "JobMaxVacateTime",
        "VacateTimeRemaining",
        "AcceptedWhileDraining",
        "CpuUsage",
        "MemoryUsage",
        "KillSig",
        # the job's ad (START's TARGET)
        "Owner",
        "RequestCpus",
        "RequestMemory",
        "RequestDisk",
        "RequestGPUs",
    }
)

#: Families of computed attributes: a site attribute may not begin with these.
COMPUTED_PREFIXES = ("Drain", "Health", "ExpectedMachine")

_COMPUTED_FOLDED = frozenset(name.casefold() for name in COMPUTED_ATTRIBUTES)
_PREFIXES_FOLDED = tuple(p.casefold() for p in COMPUTED_PREFIXES)
_INT64 = 2**63


def check_site_attributes(attributes: Mapping[str, object]) -> SiteAttributes:
    """``attributes`` as sorted pairs; raises :class:`InvalidRequest` naming every defect
    (a name that is not an identifier, a keyword, a computed name, two names equal
    without regard to case, a value that is not a string, integer or boolean)."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    pairs: list[tuple[str, SiteValue]] = []
    for name, value in sorted(attributes.items()):
        folded = name.casefold()
        if not ATTRIBUTE_NAME.fullmatch(name) or folded in _KEYWORDS:
            problems.append(
                f"{name[:80]!r} is not an attribute name: a ClassAd identifier (a letter or "
                "'_', then letters, digits or '_', at most 64) and not a keyword"
            )
        elif folded in _COMPUTED_FOLDED or folded.startswith(_PREFIXES_FOLDED):
            problems.append(f"{name!r} shadows an attribute the agent computes")
        elif folded in seen:
            problems.append(f"{name!r} and {seen[folded]!r} are the same ClassAd name")
        seen.setdefault(folded, name)
        if isinstance(value, bool):
            pairs.append((name, value))
        elif isinstance(value, int):
            if not -_INT64 <= value < _INT64:
                problems.append(f"{name}: {value} is not a 64-bit integer")
            pairs.append((name, value))
        elif isinstance(value, str):
            if len(value) > 256 or not value.isprintable():
                problems.append(f"{name}: a string value is printable, at most 256 characters")
            pairs.append((name, value))
        else:
            problems.append(
                f"{name}: a {type(value).__name__} value, not a string, integer or boolean"
            )
    if problems:
        raise InvalidRequest("; ".join(problems))
    return tuple(pairs)
