"""Schemathesis over a live daemon's OpenAPI document: what the fuzz test and script share.

:func:`fuzz` generates requests for every operation of a :class:`Target` (both the
schema-valid ones and the invalid ones), sends them over loopback TCP with a token,
and checks each reply:

* no 5xx;
* the reply matches the document (status documented, content type, body schema: the
  schemathesis checks that do not need a second request);
* a 3xx (a follower's redirect to its leader) or a 4xx changed nothing: the target's
  state (:meth:`Target.snapshot`) is the same before and after.

After a state-changing request that succeeded the target goes back to its baseline
(:meth:`Target.reset`), so every request starts from the same state. Requests that
would reach outside the test are rewritten first (:meth:`Target.rewrite`: a job runs
``sleep``, an adopted pid is a process this test started).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import hypothesis
import requests
import schemathesis
import schemathesis.checks
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from schemathesis.core import NOT_SET
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Err

from nodeagent.agent._processes import PID_MAX_LIMIT

__all__ = ["AgentTarget", "Finding", "MasterTarget", "Report", "Target", "fuzz"]

#: A schema-valid request may still be refused with 422: the APIs' own rules (printable
#: text, ClassAd expressions, environment names, fields that go together) are stricter
#: than JSON Schema says, and their refusal is documented.
_NOT_CHECKED = [schemathesis.checks.positive_data_acceptance]
#: A redirect (a follower's 307 to its leader, sent before the body is read) accepts
#: nothing: an invalid request redirected is refused by the leader, not "accepted".
_NOT_CHECKED_ON_REDIRECT = [*_NOT_CHECKED, schemathesis.checks.negative_data_rejection]

_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Target(Protocol):
    """One daemon under fuzz."""

    base_url: str

    def document(self) -> dict[str, Any]:
        """The OpenAPI document the daemon serves."""

    def token(self, method: str, path: str) -> str:
        """The bearer token an operation is sent with: one whose scope allows it."""

    def snapshot(self) -> Any:
        """The daemon's state, without the fields that move with time alone."""

    def rewrite(self, method: str, path: str, case: Any) -> None:
        """Make ``case`` safe to send (in place): nothing outside the test is touched."""

    def reset(self) -> None:
        """Back to the baseline state after a request that changed it."""


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One request whose reply broke a rule."""

    operation: str
    status: int
    problem: str
    request: str


@dataclass(kw_only=True)
class Report:
    """What a run did: operations fuzzed, requests sent, findings, and how long it took."""

    operations: int = 0
    examples: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    #: Requests answered, per operation (``"POST /v1/ads"``).
    by_operation: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    duration_s: float = 0.0

    def figures(self) -> dict[str, Any]:
        return {
            "operations": self.operations,
            "examples": self.examples,
            "by_status": dict(sorted(self.by_status.items())),
            "failures": len(self.findings),
            "duration_s": round(self.duration_s, 1),
        }


def _describe(case: Any) -> str:
    parts = [f"{case.method} {case.formatted_path}"]
    if case.query:
        parts.append(f"query={case.query!r}")
    if case.body is not None and case.body is not NOT_SET:
        parts.append(f"body={case.body!r}"[:600])
    return " ".join(parts)


def fuzz(
    target: Target,
    *,
    max_examples: int,
    seed: int,
    time_budget_s: float,
    on_finding: Callable[[Finding], None] | None = None,
) -> Report:
    """Send up to ``max_examples`` positive and as many negative requests per operation.

    Each operation has an equal share of ``time_budget_s``: past its share (once one of its
    requests was answered), it gets no more, and the next operation begins.
    """
    started = time.monotonic()
    report = Report()
    schema = schemathesis.openapi.from_dict(target.document())
    session = requests.Session()
    state = [target.snapshot()]

    def one(operation: Any, case: Any) -> None:
        method = case.method.upper()
        target.rewrite(method, operation.path, case)
        headers = {"Authorization": f"Bearer {target.token(method, operation.path)}"}
        try:
            response = case.call(
                base_url=target.base_url,
                session=session,
                headers=headers,
                timeout=30,
                allow_redirects=False,  # a 307 is the reply under test, never followed
            )
        except requests.RequestException as exc:
            found(operation, 0, f"no reply: {exc}", case)
            return
        report.examples += 1
        name = f"{method} {operation.path}"
        report.by_operation[name] = report.by_operation.get(name, 0) + 1
        status = response.status_code
        report.by_status[str(status)] = report.by_status.get(str(status), 0) + 1
        if status >= 500:
            found(operation, status, f"server error: {response.text[:300]}", case)
        try:
            excluded = _NOT_CHECKED_ON_REDIRECT if 300 <= status < 400 else _NOT_CHECKED
            case.validate_response(response, headers=headers, excluded_checks=excluded)
        except FailureGroup as exc:
            problems = "; ".join(f"{f.title}: {f.message}"[:300] for f in exc.exceptions)
            found(operation, status, f"reply does not match the document: {problems}", case)
        except AssertionError as exc:
            found(operation, status, f"reply does not match the document: {exc}", case)
        if method not in _WRITES:
            return
        after = target.snapshot()
        if 300 <= status < 500 and after != state[0]:  # a redirect changes nothing either
            found(operation, status, f"state changed on a {status}: {_diff(state[0], after)}", case)
        if after != state[0] or status < 300:
            target.reset()
            state[0] = target.snapshot()

    def found(operation: Any, status: int, problem: str, case: Any) -> None:
        finding = Finding(
            operation=f"{operation.method.upper()} {operation.path}",
            status=status,
            problem=problem,
            request=_describe(case),
        )
        report.findings.append(finding)
        if on_finding is not None:
            on_finding(finding)

    operations = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()  # the document itself is broken
        operations.append(result.ok())
    # Each operation has its share of the budget, so that every one is fuzzed however
    # slow the machine: a slow operation never takes the time of the next.
    share = time_budget_s / max(len(operations), 1)
    for operation in operations:
        ends = time.monotonic() + share
        name = f"{operation.method.upper()} {operation.path}"

        def budget_left(ends: float = ends, name: str = name) -> bool:
            return time.monotonic() < ends or not report.by_operation[name]

        report.operations += 1
        report.by_operation.setdefault(name, 0)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            with contextlib.suppress(hypothesis.errors.Unsatisfiable):
                # Unsatisfiable: nothing of the operation can be made invalid (no body,
                # no parameter), so it has no negative examples.
                _examples(operation, mode, max_examples, seed, budget_left, one)()
    session.close()
    report.duration_s = time.monotonic() - started
    return report


def _examples(
    operation: Any,
    mode: GenerationMode,
    max_examples: int,
    seed: int,
    budget_left: Callable[[], bool],
    one: Callable[[Any, Any], None],
) -> Callable[[], None]:
    """A hypothesis test sending ``operation``'s examples in ``mode`` to ``one``."""

    @hypothesis.settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.seed(seed)
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        if budget_left():
            one(operation, case)

    return run


def _diff(before: Any, after: Any) -> str:
    if isinstance(before, dict) and isinstance(after, dict):
        keys = sorted(set(before) | set(after))
        changed = {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}
        return repr(changed)[:600]
    return f"{before!r} -> {after!r}"[:600]


# ---------------------------------------------------------------------------------- the agent

_AGENT_MOVING = ("MyCurrentTime", "Expected")


class AgentTarget:
    """An :class:`~tests.harness.AgentProcess` whose baseline is idle: no drain, no claim.

    A claim's job is always ``sleep`` (whatever ``command`` was generated); a ``pid`` to
    adopt is a ``sleep`` this target started in a session of its own; a drain never ends
    the daemon (``on_completion`` exit or restart becomes none). Every process it starts,
    and every job the agent reports, is killed by :meth:`close`.
    """

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.base_url: str = agent.url
        self._token: str = agent.token("ADMINISTRATOR", subject="fuzz")
        self._sleep = shutil.which("sleep") or "/bin/sleep"
        self._adoptable: list[subprocess.Popen[bytes]] = []
        self._client = agent.client()

    def document(self) -> dict[str, Any]:
        response = self._client.get("/v1/openapi.json")
        response.raise_for_status()
        document: dict[str, Any] = response.json()
        return document

    def token(self, method: str, path: str) -> str:
        return self._token

    def snapshot(self) -> Any:
        ad = self._client.get("/v1/ad").json()
        for one in [ad["machine"], *ad["slots"]]:
            for name in [n for n in one if n.startswith(_AGENT_MOVING)]:
                del one[name]
        drain = self._client.get("/v1/drain").json()
        drain.pop("estimate", None)
        claims = self._client.get("/v1/claims").json()["claims"]
        for claim in claims:
            claim["job"].pop("run", None)
            claim["job"].pop("suspended", None)
        return {"ad": ad, "drain": drain, "claims": claims}

    def rewrite(self, method: str, path: str, case: Any) -> None:
        body = case.body
        if not isinstance(body, dict):
            return
        if (method, path) == ("POST", "/v1/claims"):
            command = body.get("command")
            # Only a command the API takes becomes sleep: one it refuses (an empty argument,
            # a NUL) is sent as generated, so that a case made to be refused stays so.
            if (
                isinstance(command, list)
                and command
                and all(isinstance(a, str) and a and "\x00" not in a for a in command)
            ):
                body["command"] = [self._sleep, "600"]
            pid = body.get("pid")
            if isinstance(pid, (int, float)) and not isinstance(pid, bool):
                # 2.0 is an integer to JSON Schema and to the API alike.
                if 2 <= pid <= PID_MAX_LIMIT:
                    body["pid"] = self._adoptable_pid()
                elif pid < 2:
                    body["pid"] = 0  # never the caller's group, nor pid 1, nor -1
        if (method, path) == ("POST", "/v1/drain") and body.get("on_completion") in (
            "exit",
            "restart",
        ):
            body["on_completion"] = "none"

    def _adoptable_pid(self) -> int:
        proc = subprocess.Popen([self._sleep, "600"], start_new_session=True)
        self._adoptable.append(proc)
        return proc.pid

    def reset(self) -> None:
        self._client.delete("/v1/drain")
        for claim in self._client.get("/v1/claims").json()["claims"]:
            if claim["job"]["pid"]:
                self.agent.job_pids.add(claim["job"]["pid"])
            if claim["state"] != "Preempting":
                self._client.delete(f"/v1/claims/{claim['id']}")
        for proc in self._adoptable:
            with contextlib.suppress(ProcessLookupError):
                if proc.poll() is None:
                    proc.kill()
            proc.wait()
        self._adoptable.clear()
        deadline = time.monotonic() + 20
        while self._client.get("/v1/claims").json()["claims"]:
            if time.monotonic() > deadline:
                raise TimeoutError("the claims were not released within 20 s")
            time.sleep(0.02)
        # A drain that ended leaves its last request behind: clear the record too.
        self._client.delete("/v1/drain")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.reset()
        for proc in self._adoptable:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        self._client.close()


# ---------------------------------------------------------------------------------- the master


#: Where a fuzzed ad's node is: a loopback port nothing listens on (TCP port 1).
_NOWHERE = "http://127.0.0.1:1"


class MasterTarget:
    """A :class:`~tests.harness.MasterProcess` whose baseline is empty: no schedule, no
    machine down, no ad, no SLA policy of the API's, no operation under way. Its state is
    the schedule, ``/maintenance/status``, the ads, the SLA policies and the operations.
    Ads are pushed with a DAEMON token (ADMINISTRATOR does not grant it), the rest is
    sent with an ADMINISTRATOR one.

    ``writer``: the master that takes the writes :meth:`reset` makes (a follower's are sent
    to its leader; default: ``master`` itself)."""

    def __init__(self, master: Any, *, writer: Any = None) -> None:
        self.master = master
        self.base_url: str = master.url
        self._admin: str = master.token("ADMINISTRATOR", subject="fuzz")
        self._daemon: str = master.token("DAEMON", subject="fuzz-agent")
        self._client = master.client()
        self._writer = (master if writer is None else writer).client()

    def document(self) -> dict[str, Any]:
        response = self._client.get("/v1/openapi.json")
        response.raise_for_status()
        document: dict[str, Any] = response.json()
        return document

    def token(self, method: str, path: str) -> str:
        return self._daemon if (method, path) == ("POST", "/v1/ads") else self._admin

    def snapshot(self) -> Any:
        ads = self._client.get("/v1/ads", params={"projection": "Name"}).json()["ads"]
        operations = self._client.get("/v1/maintenance/operations").json()["operations"]
        return {
            "schedule": self._client.get("/maintenance/schedule").json(),
            "status": self._client.get("/maintenance/status").json(),
            "ads": sorted(ad.get("Name", "") for ad in ads),
            "sla": self._client.get("/v1/sla/policies").json()["policies"],
            "operations": sorted((op["id"], op["spec"]["hosts"]) for op in operations),
        }

    def rewrite(self, method: str, path: str, case: Any) -> None:
        """A pushed ad's ``MyAddress`` is a closed loopback port: the master calls the
        nodes it drains there (and ``fresh=true`` fetches from it), never elsewhere; so is
        an SLA coordinator's ``url`` (a probe would call it)."""
        body = case.body
        if (method, path) == ("POST", "/v1/ads") and isinstance(body, dict):
            machine = body.get("machine")
            if isinstance(machine, dict) and "MyAddress" in machine:
                machine["MyAddress"] = _NOWHERE
        if (method, path) == ("PUT", "/v1/sla/policies/{group}") and isinstance(body, dict):
            url = body.get("url")
            if isinstance(url, str) and url.startswith(("http://", "https://")):
                body["url"] = _NOWHERE + "/sla"

    def reset(self) -> None:
        writer = self._writer
        down = self._client.get("/maintenance/status").json().get("down_machines", [])
        if down:
            writer.post("/machine/up", json=down).raise_for_status()
        writer.post("/maintenance/schedule", json={"windows": []}).raise_for_status()
        for policy in self._client.get("/v1/sla/policies").json()["policies"]:
            if policy.get("source") == "api":
                group = "/".join(quote(s, safe="") for s in policy["group"].split("/"))
                writer.delete(f"/v1/sla/policies/{group}").raise_for_status()
        for op in self._client.get("/v1/maintenance/operations").json()["operations"]:
            if op["state"] in ("running", "paused"):
                writer.post(f"/v1/maintenance/operations/{op['id']}/cancel").raise_for_status()

    def close(self) -> None:
        self._client.close()
        self._writer.close()
