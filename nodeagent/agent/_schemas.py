"""The agent API's bodies (pydantic, at the edge) and the one adapter to the model.

Request bodies forbid unknown fields; every validation failure becomes
``422 request.invalid``. Responses are plain JSON built from the model's frozen
dataclasses by the ``*_json`` functions here, and nowhere else.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nodeagent.agent._store import ProcessRecord
from slots import (
    Blocker,
    ClaimInfo,
    DrainEstimate,
    DrainRequest,
    JobSpec,
    OnCompletion,
    Resources,
    Schedule,
)

__all__ = [
    "ClaimBody",
    "DrainBody",
    "blocker_json",
    "claim_json",
    "drain_json",
    "estimate_json",
    "request_json",
]

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
WholeSeconds = Annotated[int, Field(ge=0, le=2**31 - 1)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DrainBody(_Body):
    """``POST /v1/drain``: phase 1 of the drain transaction (or one-shot with ``commit``)."""

    schedule: Schedule = Schedule.GRACEFUL
    reason: Annotated[str, Field(max_length=256)] = ""
    on_completion: OnCompletion = OnCompletion.NONE
    deadline: Seconds | None = Field(
        None, description="Seconds after commit; what still runs then is evicted as by quick"
    )
    start: Annotated[str, Field(min_length=1, max_length=4096)] | None = Field(
        None, description="ClassAd START expression admitting jobs during a graceful drain"
    )
    check: Annotated[str, Field(min_length=1, max_length=4096)] | None = Field(
        None, description="One-shot only: ClassAd expression that must be true on the machine ad"
    )
    commit: bool = False
    ttl: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] | None = Field(
        None, description="Seconds the pending transaction lives (default: the agent's policy)"
    )


class ClaimBody(_Body):
    """``POST /v1/claims``: a dynamic slot running ``command`` or adopting ``pid``."""

    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    pid: Annotated[int, Field(gt=1)] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    user: str | None = None
    cpus: Annotated[int, Field(ge=1)] = 1
    memory: Annotated[int, Field(ge=0)] = 0
    disk: Annotated[int, Field(ge=0)] = 0
    gpus: Annotated[int, Field(ge=0)] = 0
    max_job_retirement_time: WholeSeconds | None = None
    job_max_vacate_time: WholeSeconds | None = None
    owner: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    job_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    kill_signal: Literal[
        "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGKILL", "SIGALRM"
    ] = "SIGTERM"

    @model_validator(mode="after")
    def _command_or_pid(self) -> ClaimBody:
        if (self.command is None) == (self.pid is None):
            raise ValueError("give exactly one of 'command' and 'pid'")
        if self.pid is not None and (self.env or self.cwd or self.user):
            raise ValueError("'env', 'cwd' and 'user' go with 'command', not 'pid'")
        return self

    def resources(self) -> Resources:
        return Resources(cpus=self.cpus, memory=self.memory, disk=self.disk, gpus=self.gpus)

    def spec(self, default_owner: str) -> JobSpec:
        return JobSpec(
            job_id=self.job_id,
            owner=self.owner or default_owner,
            max_job_retirement_time=self.max_job_retirement_time,
            job_max_vacate_time=self.job_max_vacate_time,
            kill_signal=self.kill_signal,
        )


def _when(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def request_json(request: DrainRequest) -> dict[str, Any]:
    return {
        "id": request.id,
        "state": str(request.state),
        "schedule": str(request.schedule),
        "reason": request.reason,
        "on_completion": str(request.on_completion),
        "deadline": request.deadline,
        "start": request.start,
        "requested_by": request.requested_by,
        "created_at": _when(request.created_at),
        "expires_at": _when(request.expires_at),
        "committed_at": _when(request.committed_at),
        "deadline_at": _when(request.deadline_at),
        "drained_at": _when(request.drained_at),
        "ended_at": _when(request.ended_at),
    }


def blocker_json(blocker: Blocker) -> dict[str, Any]:
    return {
        "claim_id": blocker.claim_id,
        "slot": blocker.slot,
        "job_id": blocker.job_id,
        "owner": blocker.owner,
        "cpus": blocker.cpus,
        "activity": blocker.activity,
        "run": blocker.run,
        "retirement_remaining": blocker.retirement_remaining,
        "vacate": blocker.vacate,
        "evict_at": blocker.evict_at,
        "gone_by": blocker.gone_by,
        "accepted_while_draining": blocker.accepted_while_draining,
    }


def estimate_json(estimate: DrainEstimate) -> dict[str, Any]:
    return {
        "schedule": str(estimate.schedule),
        "now": estimate.now,
        "completion": estimate.completion,
        "badput": estimate.badput,
        "blockers": [blocker_json(b) for b in estimate.blockers],
    }


def drain_json(
    request: DrainRequest | None, estimate: DrainEstimate | None, *, current: bool
) -> dict[str, Any]:
    """The body of ``GET /v1/drain`` and of every drain operation's reply.

    ``current`` false: no request is in force; ``request`` is the last one that ended.
    """
    if not current or request is None:
        return {"state": "none", "last": None if request is None else request_json(request)}
    body = request_json(request)
    body["estimate"] = None if estimate is None else estimate_json(estimate)
    return body


def claim_json(info: ClaimInfo, process: ProcessRecord | None) -> dict[str, Any]:
    return {
        "id": info.claim_id,
        "slot": info.slot,
        "state": str(info.state),
        "activity": str(info.activity),
        "resources": {
            "cpus": info.resources.cpus,
            "memory": info.resources.memory,
            "disk": info.resources.disk,
            "gpus": info.resources.gpus,
        },
        "job": {
            "job_id": info.job_id,
            "owner": info.spec.owner,
            "max_job_retirement_time": info.spec.max_job_retirement_time,
            "job_max_vacate_time": info.spec.job_max_vacate_time,
            "kill_signal": info.spec.kill_signal,
            "started_at": _when(info.started_at),
            "run": round(info.run, 3),
            "suspended": round(info.suspended, 3),
            "pid": None if process is None else process.pid,
            "argv": None if process is None else list(process.argv),
        },
        "accepted_while_draining": info.accepted_while_draining,
        "evicted_at": _when(info.evicted_at),
        "hard_kill_at": _when(info.hard_kill_at),
    }
