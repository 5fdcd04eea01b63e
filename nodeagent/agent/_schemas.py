"""The agent API's bodies (pydantic, at the edge) and the one adapter to the model.

Request bodies forbid unknown fields; every validation failure becomes
``422 request.invalid``. Responses are plain JSON built from the model's frozen
dataclasses by the ``*_json`` functions here, and nowhere else.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from nodeagent.agent._processes import PID_MAX_LIMIT, cwd_problem
from nodeagent.agent._store import ProcessRecord
from slots import (
    HOOK_NAME,
    Blocker,
    ClaimInfo,
    DrainEstimate,
    DrainRequest,
    HealthGate,
    HealthPolicy,
    HookRun,
    InvalidRequest,
    JobSpec,
    OnCompletion,
    Resources,
    Schedule,
    check_group_name,
    effective_retirement,
)

__all__ = [
    "EXPRESSION_MAX_OPERATORS",
    "ClaimBody",
    "DrainBody",
    "ErrorBody",
    "blocker_json",
    "claim_json",
    "drain_json",
    "estimate_json",
    "health_json",
    "hook_run_json",
    "request_json",
]


def _json_number(value: Any) -> Any:
    """A JSON number, nothing else: pydantic alone would read ``true`` as 1 and ``"5"`` as 5."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")  # noqa: TRY004 (pydantic reports ValueError only)
    return value


Number = BeforeValidator(_json_number)
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False), Number]
WholeSeconds = Annotated[int, Field(ge=0, le=2**31 - 1), Number]

EXPRESSION_MAX_OPERATORS = 256
"""Most operator and bracket characters a START or check expression may hold.

The ClassAd library gives up on expressions nested some 400 levels deep (parsing or
evaluating them fails); an expression's depth never exceeds its count of operators and
brackets, so this bound keeps every accepted expression within the library's reach.
"""

_OPERATOR_CHARACTERS = frozenset("()[]{}+-*/%<>=!&|^~?:.,")


def _printable(value: str) -> str:
    """Text that goes into ads and logs: printable characters only (no C0 or C1 controls,
    no line or paragraph separators, nothing unassigned)."""
    if not value.isprintable():
        raise ValueError("must hold printable characters only")
    return value


def _group(value: str) -> str:
    """A job group's name (:data:`slots.GROUP_NAME`)."""
    try:
        return check_group_name(value)
    except InvalidRequest as err:
        raise ValueError(str(err)) from None


def _expression(value: str) -> str:
    """A ClassAd expression the library can hold: no control characters but tab, newline
    and carriage return, at most :data:`EXPRESSION_MAX_OPERATORS` operators and brackets
    outside string literals."""
    if any((ord(c) < 32 and c not in "\t\n\r") or c == "\x7f" for c in value):
        raise ValueError("must not hold control characters")
    operators = 0
    quote: str | None = None
    escaped = False
    for c in value:
        if quote is not None:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in _OPERATOR_CHARACTERS:
            operators += 1
    if operators > EXPRESSION_MAX_OPERATORS:
        raise ValueError(
            f"holds {operators} operators and brackets; at most {EXPRESSION_MAX_OPERATORS} "
            "are accepted"
        )
    return value


def _environment(value: dict[str, str]) -> dict[str, str]:
    for name, text in value.items():
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"{name!r} is not an environment variable name")
        if "\0" in text:
            raise ValueError(f"the value of {name} holds a NUL byte")
    return value


def _cwd(value: str) -> str:
    problem = cwd_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise ValueError("must not hold NUL bytes")
    return value


def _on_completion(value: str) -> str:
    """``none``, ``resume``, ``exit``, ``restart`` or ``hook:NAME`` (a configured hook's
    name: never a command)."""
    if value in ("none", "resume", "exit", "restart"):
        return value
    kind, colon, name = value.partition(":")
    if kind == "hook" and colon and HOOK_NAME.fullmatch(name):
        return value
    raise ValueError(
        "must be none, resume, exit, restart or hook:NAME (NAME: a hook of the agent's "
        "configuration, 1 to 64 letters, digits, '_', '.' or '-')"
    )


Text = Annotated[str, Field(max_length=256), AfterValidator(_printable)]
OnCompletionText = Annotated[
    str,
    Field(
        max_length=80,
        pattern=r"^(none|resume|exit|restart|hook:[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$",
        description="What happens once the node is drained: none, resume, exit, restart, or "
        "hook:NAME, a hook of the agent's configuration (a request names a hook; it never "
        "supplies a command)",
    ),
    AfterValidator(_on_completion),
]
Expression = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_expression)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ErrorBody(BaseModel):
    """Every error reply: ``{"error": {"code", "message", "condor_code"?}}``."""

    class Error(BaseModel):
        code: str = Field(description="Stable error code, e.g. drain.in_progress")
        message: str
        condor_code: int | None = Field(None, description="HTCondor's code, where one exists")

    error: Error


class DrainBody(_Body):
    """``POST /v1/drain``: phase 1 of the drain transaction (or one-shot with ``commit``)."""

    schedule: Schedule = Schedule.GRACEFUL
    reason: Text = ""
    on_completion: OnCompletionText = "none"
    deadline: Seconds | None = Field(
        None, description="Seconds after commit; what still runs then is evicted as by quick"
    )
    start: Expression | None = Field(
        None, description="ClassAd START expression admitting jobs during a graceful drain"
    )
    check: Expression | None = Field(
        None, description="One-shot only: ClassAd expression that must be true on the machine ad"
    )
    commit: Annotated[bool, Field(strict=True)] = False
    ttl: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False), Number] | None = Field(
        None, description="Seconds the pending transaction lives (default: the agent's policy)"
    )

    def completion(self) -> tuple[OnCompletion, str | None]:
        """``on_completion`` as the model takes it: the action, and the hook's name."""
        kind, _, name = self.on_completion.partition(":")
        return OnCompletion(kind), name or None


def _command_or_pid(schema: dict[str, Any]) -> None:
    schema["oneOf"] = [
        {
            "required": ["command"],
            "properties": {
                "command": {"type": "array"},
                "pid": {"type": "null"},
                "env": {"type": ["object", "null"]},
            },
        },
        {
            "required": ["pid"],
            "properties": {
                "pid": {"type": "integer"},
                "command": {"type": "null"},
                "env": {"type": "null"},
                "cwd": {"type": "null"},
                "user": {"type": "null"},
            },
        },
    ]


class ClaimBody(_Body):
    """``POST /v1/claims``: a dynamic slot running ``command`` or adopting ``pid``.

    Exactly one of ``command`` and ``pid``; ``env``, ``cwd`` and ``user`` only with
    ``command``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_command_or_pid)

    command: (
        Annotated[
            list[Annotated[str, Field(min_length=1), AfterValidator(_no_nul)]], Field(min_length=1)
        ]
        | None
    ) = None
    pid: Annotated[int, Field(gt=1, le=PID_MAX_LIMIT), Number] | None = None
    env: Annotated[dict[str, str], AfterValidator(_environment)] | None = None
    cwd: Annotated[str, Field(max_length=4096), AfterValidator(_cwd)] | None = Field(
        None, description="Relative to the slot's execute directory, and inside it"
    )
    user: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_printable)] | None = (
        None
    )
    cpus: Annotated[int, Field(ge=1), Number] = 1
    memory: Annotated[int, Field(ge=0), Number] = 0
    disk: Annotated[int, Field(ge=0), Number] = 0
    gpus: Annotated[int, Field(ge=0), Number] = 0
    max_job_retirement_time: WholeSeconds | None = None
    job_max_vacate_time: WholeSeconds | None = None
    owner: Annotated[Text, Field(min_length=1)] | None = None
    job_id: Annotated[Text, Field(min_length=1)] | None = None
    group: Annotated[str, AfterValidator(_group)] | None = Field(
        None, description="The job group the job is an instance of (JobGroup)"
    )
    kill_signal: Literal[
        "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGKILL", "SIGALRM"
    ] = "SIGTERM"

    @model_validator(mode="after")
    def _command_or_pid(self) -> ClaimBody:
        if (self.command is None) == (self.pid is None):
            raise ValueError("give exactly one of 'command' and 'pid'")
        if self.pid is not None and (
            self.env is not None or self.cwd is not None or self.user is not None
        ):
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
            group=self.group,
        )


def _when(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def hook_run_json(run: HookRun) -> dict[str, Any]:
    """A completion hook's run: its name, state, times, exit status, how it ended, the
    tail of its output and the count of the bytes before that tail not kept."""
    return {
        "name": run.name,
        "state": str(run.state),
        "reboots": run.reboots,
        "pid": run.pid,
        "started_at": _when(run.started_at),
        "ended_at": _when(run.ended_at),
        "exit_status": run.exit_status,
        "message": run.message,
        "output": run.output,
        "output_dropped": run.output_dropped,
    }


def health_json(gate: HealthGate, policy: HealthPolicy | None) -> dict[str, Any] | None:
    """The health gate (``None`` without a health check configured)."""
    if policy is None:
        return None
    return {
        "state": str(gate.state),
        "reason": gate.reason,
        "since": _when(gate.since),
        "passes": gate.passes,
        "passes_needed": policy.passes,
        "failures": gate.failures,
        "last_check": _when(gate.last_check),
        "next_check": _when(gate.due_at),
        "message": gate.message,
        "output": gate.output,
        "output_dropped": gate.output_dropped,
    }


def request_json(request: DrainRequest) -> dict[str, Any]:
    return {
        "id": request.id,
        "state": str(request.state),
        "schedule": str(request.schedule),
        "reason": request.reason,
        "on_completion": request.completion,
        "hook": None if request.hook_run is None else hook_run_json(request.hook_run),
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
    request: DrainRequest | None,
    estimate: DrainEstimate | None,
    *,
    current: bool,
    accepting: bool | None = None,
    health: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body of ``GET /v1/drain`` and of every drain operation's reply.

    ``current`` false: no request is in force; ``request`` is the last one that ended.
    ``accepting`` is ``Start``: false while the node is closed, whether by a drain or by
    the health gate, whose state ``health`` is (``health_json``; with its ``state`` not
    ``passing`` the node stays closed until it is healthy). ``accepting`` ``None`` leaves
    both out: the API does so when the agent has no health check (its replies are then
    what they were before health checks existed)."""
    body: dict[str, Any]
    if not current or request is None:
        body = {"state": "none", "last": None if request is None else request_json(request)}
    else:
        body = request_json(request)
        body["estimate"] = None if estimate is None else estimate_json(estimate)
    if accepting is not None:
        body["accepting"] = accepting
        body["health"] = health
    return body


def claim_json(
    info: ClaimInfo, process: ProcessRecord | None, *, machine_retirement: float
) -> dict[str, Any]:
    """A claim as the API shows it. ``job.retirement_granted`` is the promise the job
    holds under the machine's ``max_job_retirement_time`` (``machine_retirement``): the
    job's own ``max_job_retirement_time`` when lower, else the machine's, which cuts a
    longer request; ``job.retirement_shortened_by`` the seconds it was cut at admission to
    end at the maintenance window's start (``[policy] before_window = "shorten"``; ``null``
    when not cut), ``max_job_retirement_time`` then being the promise it holds."""
    granted = effective_retirement(machine_retirement, info.spec.max_job_retirement_time)
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
            "retirement_granted": int(granted),
            "retirement_shortened_by": info.retirement_shortened_by,
            "job_max_vacate_time": info.spec.job_max_vacate_time,
            "kill_signal": info.spec.kill_signal,
            "group": info.spec.group,
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
