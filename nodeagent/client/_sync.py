"""The synchronous facades for scripts: each call runs the async one under its own
``trio.run``.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx
import trio

from nodeagent.client._agent import AgentClient, DrainTransaction
from nodeagent.client._master import MasterClient
from nodeagent.client._results import (
    Admission,
    Claim,
    DrainRequest,
    DrainStatus,
    Estimate,
    Health,
    Leadership,
    Notice,
    OnCompletion,
    Schedule,
)

__all__ = ["SyncAgentClient", "SyncDrainTransaction", "SyncMasterClient"]

_T = TypeVar("_T")


class SyncAgentClient:
    """:class:`AgentClient` for scripts: the same calls, blocking, no event loop needed.

    Each call runs the async method under its own ``trio.run`` with a fresh HTTP
    connection, so it must not be made from inside a trio (or other async) program, nor
    from two threads at once. A drain transaction spans several calls and stays pending
    on the agent between them::

        agent = SyncAgentClient()
        with agent.start_draining("graceful", reason="kernel update") as txn:
            print(txn.estimate.completion)
            txn.commit()

    Arguments and errors are those of :class:`AgentClient`.
    """

    def __init__(
        self,
        *,
        socket: str | Path | None = None,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 30,
        verify: ssl.SSLContext | bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._client = AgentClient(
            socket=socket,
            url=url,
            token=token,
            timeout=timeout,
            max_concurrency=1,
            verify=verify,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"SyncAgentClient({self._client.where})"

    def _run(self, call: Callable[[AgentClient], Awaitable[_T]]) -> _T:
        async def main() -> _T:
            async with self._client as client:
                return await call(client)

        return trio.run(main)

    def healthz(self) -> Health:
        return self._run(lambda c: c.healthz())

    def ad(self) -> dict[str, Any]:
        return self._run(lambda c: c.ad())

    def ad_classad(self) -> str:
        return self._run(lambda c: c.ad_classad())

    def drain(self) -> DrainStatus:
        return self._run(lambda c: c.drain())

    def claims(self) -> list[Claim]:
        return self._run(lambda c: c.claims())

    def claim(self, claim_id: str) -> Claim:
        return self._run(lambda c: c.claim(claim_id))

    def start_draining(
        self,
        schedule: Schedule = "graceful",
        *,
        reason: str = "",
        on_completion: OnCompletion = "none",
        deadline: float | None = None,
        start: str | None = None,
        ttl: float | None = None,
    ) -> SyncDrainTransaction:
        """:meth:`AgentClient.start_draining` as a (plain) context manager."""
        txn = self._client.start_draining(
            schedule,
            reason=reason,
            on_completion=on_completion,
            deadline=deadline,
            start=start,
            ttl=ttl,
        )
        return SyncDrainTransaction(self, txn)

    def drain_now(
        self,
        schedule: Schedule = "graceful",
        *,
        reason: str = "",
        on_completion: OnCompletion = "none",
        deadline: float | None = None,
        start: str | None = None,
        check: str | None = None,
    ) -> DrainRequest:
        return self._run(
            lambda c: c.drain_now(
                schedule,
                reason=reason,
                on_completion=on_completion,
                deadline=deadline,
                start=start,
                check=check,
            )
        )

    def cancel_draining(self, request_id: str | None = None) -> DrainRequest | None:
        return self._run(lambda c: c.cancel_draining(request_id))

    def wait_drained(
        self, request_id: str | None = None, *, poll: float = 0.5, timeout: float | None = None
    ) -> DrainRequest | None:
        """:meth:`AgentClient.wait_drained`; ``timeout`` (seconds) raises TimeoutError."""

        async def bounded(client: AgentClient) -> DrainRequest | None:
            with trio.fail_after(math.inf if timeout is None else timeout):
                return await client.wait_drained(request_id, poll=poll)

        try:
            return self._run(bounded)
        except trio.TooSlowError:
            raise TimeoutError(f"the node was not drained within {timeout:g} s") from None

    def create_claim(
        self,
        command: Sequence[str] | None = None,
        *,
        pid: int | None = None,
        cpus: int = 1,
        memory: int = 0,
        disk: int = 0,
        gpus: int = 0,
        max_job_retirement_time: int | None = None,
        job_max_vacate_time: int | None = None,
        owner: str | None = None,
        job_id: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        kill_signal: str | None = None,
        group: str | None = None,
    ) -> Claim:
        return self._run(
            lambda c: c.create_claim(
                command,
                pid=pid,
                cpus=cpus,
                memory=memory,
                disk=disk,
                gpus=gpus,
                max_job_retirement_time=max_job_retirement_time,
                job_max_vacate_time=job_max_vacate_time,
                owner=owner,
                job_id=job_id,
                env=env,
                cwd=cwd,
                user=user,
                kill_signal=kill_signal,
                group=group,
            )
        )

    def release(self, claim_id: str) -> Claim:
        return self._run(lambda c: c.release(claim_id))

    def suspend(self, claim_id: str) -> Claim:
        return self._run(lambda c: c.suspend(claim_id))

    def continue_(self, claim_id: str) -> Claim:
        return self._run(lambda c: c.continue_(claim_id))


class SyncDrainTransaction:
    """:class:`DrainTransaction` for :class:`SyncAgentClient`: the same contract, blocking.

    Entering, :meth:`commit`, :meth:`cancel` and leaving each run the async
    transaction's step under its own ``trio.run``; the request stays pending on the agent
    in between (up to its ``expires_at``).
    """

    def __init__(self, client: SyncAgentClient, txn: DrainTransaction) -> None:
        self._client = client
        self._txn = txn

    @property
    def request(self) -> DrainRequest:
        return self._txn.request

    @property
    def request_id(self) -> str:
        return self._txn.request_id

    @property
    def estimate(self) -> Estimate:
        return self._txn.estimate

    @property
    def expires_at(self) -> float | None:
        return self._txn.expires_at

    def __enter__(self) -> SyncDrainTransaction:
        self._client._run(lambda _: self._txn.__aenter__())
        return self

    def commit(self) -> Estimate:
        return self._client._run(lambda _: self._txn.commit())

    def cancel(self) -> None:
        self._client._run(lambda _: self._txn.cancel())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._client._run(lambda _: self._txn.__aexit__(exc_type, exc, tb))


class SyncMasterClient:
    """:class:`MasterClient` for scripts: the same calls, blocking, no event loop needed.

    Each call runs the async method under its own ``trio.run`` with fresh connections, so
    it must not be made from inside a trio (or other async) program, nor from two threads
    at once. Arguments and errors are those of :class:`MasterClient`.
    """

    def __init__(
        self,
        *,
        socket: str | Path | None = None,
        url: str | None = None,
        urls: Sequence[str] = (),
        token: str | None = None,
        timeout: float = 30,
        verify: ssl.SSLContext | bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_no_leader: float = 0,
    ) -> None:
        self._client = MasterClient(
            socket=socket,
            url=url,
            urls=urls,
            token=token,
            timeout=timeout,
            max_concurrency=1,
            verify=verify,
            transport=transport,
            retry_no_leader=retry_no_leader,
        )

    def __repr__(self) -> str:
        return f"SyncMasterClient({self._client.where})"

    def _run(self, call: Callable[[MasterClient], Awaitable[_T]]) -> _T:
        async def main() -> _T:
            async with self._client as client:
                return await call(client)

        return trio.run(main)

    def leader(self) -> Leadership:
        return self._run(lambda c: c.leader())

    def schedule(self) -> dict[str, Any]:
        return self._run(lambda c: c.schedule())

    def admissions(self, promise: float, *, now: float | None = None) -> list[Admission]:
        return self._run(lambda c: c.admissions(promise, now=now))

    def notices(
        self,
        group: str | Iterable[str] | None = None,
        machine: str | Iterable[str] | None = None,
    ) -> list[Notice]:
        """The notices in force (no ``follow``: a stream outlives a ``trio.run``; a
        script reads ``nodeagent master notices --follow --json`` line by line)."""
        return self._run(lambda c: c.notices(group, machine))

    def accept(
        self, notice_id: str, *, reason: str, expected_completion: float | None = None
    ) -> Notice:
        return self._run(
            lambda c: c.accept(notice_id, reason=reason, expected_completion=expected_completion)
        )

    def decline(
        self, notice_id: str, *, reason: str, expected_completion: float | None = None
    ) -> Notice:
        return self._run(
            lambda c: c.decline(notice_id, reason=reason, expected_completion=expected_completion)
        )

    def set_schedule(self, schedule: Mapping[str, Any]) -> None:
        self._run(lambda c: c.set_schedule(schedule))

    def preview_schedule(
        self, schedule: Mapping[str, Any], *, changed_only: bool = False
    ) -> dict[str, Any]:
        return self._run(lambda c: c.preview_schedule(schedule, changed_only=changed_only))

    def apply_schedule(self, schedule: Mapping[str, Any], *, if_version: str) -> str:
        return self._run(lambda c: c.apply_schedule(schedule, if_version=if_version))

    def clear_schedule(self) -> None:
        self._run(lambda c: c.clear_schedule())

    def status(self) -> dict[str, Any]:
        return self._run(lambda c: c.status())

    def down(self, machine_ids: Iterable[Mapping[str, str]]) -> None:
        self._run(lambda c: c.down(machine_ids))

    def up(self, machine_ids: Iterable[Mapping[str, str]]) -> dict[str, Any]:
        return self._run(lambda c: c.up(machine_ids))

    def plan(
        self,
        *,
        late: bool = False,
        limit: int | None = None,
        blockers: bool = True,
        windows: Iterable[float] = (),
        machines: str | Iterable[str] = (),
        after: str | None = None,
    ) -> dict[str, Any]:
        return self._run(
            lambda c: c.plan(
                late=late,
                limit=limit,
                blockers=blockers,
                windows=windows,
                machines=machines,
                after=after,
            )
        )

    def ads(
        self,
        *,
        constraint: str | None = None,
        projection: str | Sequence[str] | None = None,
        slots: bool = False,
    ) -> list[dict[str, Any]]:
        return self._run(lambda c: c.ads(constraint=constraint, projection=projection, slots=slots))

    def start_operation(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return self._run(lambda c: c.start_operation(spec))

    def operations(self) -> list[dict[str, Any]]:
        return self._run(lambda c: c.operations())

    def operation(self, operation_id: str) -> dict[str, Any]:
        return self._run(lambda c: c.operation(operation_id))

    def pause_operation(self, operation_id: str) -> dict[str, Any]:
        return self._run(lambda c: c.pause_operation(operation_id))

    def resume_operation(self, operation_id: str) -> dict[str, Any]:
        return self._run(lambda c: c.resume_operation(operation_id))

    def cancel_operation(self, operation_id: str) -> dict[str, Any]:
        return self._run(lambda c: c.cancel_operation(operation_id))

    def sla_policies(self) -> list[dict[str, Any]]:
        return self._run(lambda c: c.sla_policies())

    def set_sla_policy(self, group: str, policy: Mapping[str, Any]) -> dict[str, Any]:
        return self._run(lambda c: c.set_sla_policy(group, policy))

    def delete_sla_policy(self, group: str) -> dict[str, Any]:
        return self._run(lambda c: c.delete_sla_policy(group))
