"""How the master talks to agents: their HTTP API at ``MyAddress``, with a minted token.

The master (and the defrag daemon) hold the pool key, so they sign a short-lived
ADMINISTRATOR token for each conversation; the agent records its subject
(``master:<actor>``, ``defrag:<actor>``) as the drain's requester. Errors come back as
:class:`AgentCallFailed` with the agent's stable code.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import httpx

from nodeagent._auth import Scope, create_token

__all__ = ["AgentCallFailed", "AgentLink", "HttpAgentLink"]


class AgentCallFailed(Exception):
    """An agent refused a request or could not be reached (``code`` says which)."""

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class AgentLink(Protocol):
    """The master's seam to the agents (a fake stands in for it in tests)."""

    async def call(
        self,
        address: str,
        method: str,
        path: str,
        *,
        actor: str,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]: ...


class HttpAgentLink:
    """The real link: one short HTTP request per call."""

    def __init__(
        self,
        key: bytes,
        *,
        timeout: float = 10.0,
        verify: bool | str = True,
        subject_prefix: str = "master",
    ) -> None:
        self._key = key
        self._prefix = subject_prefix
        self._timeout = timeout
        self._verify = verify

    def _token(self, actor: str) -> str:
        return create_token(
            self._key,
            subject=f"{self._prefix}:{actor}",
            scope=Scope.ADMINISTRATOR,
            lifetime_s=300,
            now=time.time(),
        )

    async def call(
        self,
        address: str,
        method: str,
        path: str,
        *,
        actor: str,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One request to the agent at ``address``; raises :class:`AgentCallFailed`."""
        if not address.startswith(("http://", "https://")):
            raise AgentCallFailed("agent.unreachable", f"no HTTP address for the agent: {address}")
        headers = {"Authorization": f"Bearer {self._token(actor)}"}
        try:
            async with httpx.AsyncClient(timeout=self._timeout, verify=self._verify) as client:
                response = await client.request(method, address + path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise AgentCallFailed("agent.unreachable", f"{address}: {exc}") from exc
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        if response.status_code >= 400:
            error = payload.get("error", {}) if isinstance(payload, dict) else {}
            raise AgentCallFailed(
                str(error.get("code", "agent.error")),
                str(error.get("message", response.text)),
                response.status_code,
            )
        if not isinstance(payload, dict):
            raise AgentCallFailed("agent.bad_response", f"{address}{path}: not a JSON object")
        return payload
