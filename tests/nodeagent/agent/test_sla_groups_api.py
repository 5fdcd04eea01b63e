"""Job groups over the agent's API: the claim body's ``group``, its reply, the slot ad."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from nodeagent.client import AgentClient
from nodeagent.client import InvalidRequest as ClientInvalidRequest
from tests.nodeagent.agent.test_agent_api_edges import api, code


async def test_a_claims_group_is_kept_returned_and_published(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        response = await a.local.post(
            "/v1/claims", json={"command": ["sleep", "60"], "group": "www-data/prod/web"}
        )
        assert response.status_code == 201, response.text
        assert response.json()["job"]["group"] == "www-data/prod/web"
        plain = await a.local.post("/v1/claims", json={"command": ["sleep", "60"]})
        assert plain.json()["job"]["group"] is None
        slots = (await a.local.get("/v1/ad")).json()["slots"]
        groups = {s["ClaimId"]: s.get("JobGroup") for s in slots if s["SlotType"] == "Dynamic"}
        assert groups == {response.json()["id"]: "www-data/prod/web", plain.json()["id"]: None}
        (doc,) = [c["spec"] for c in a.agent.machine.snapshot()["claims"] if c["spec"].get("group")]
        assert doc["group"] == "www-data/prod/web"


@pytest.mark.parametrize("group", ["", "/web", "web/", "a//b", "web prod", "wéb", "x" * 129, 7])
async def test_a_bad_group_is_422_and_claims_nothing(tmp_path: Path, group: object) -> None:
    async with api(tmp_path) as a:
        before = a.agent.machine.snapshot()
        response = await a.local.post("/v1/claims", json={"command": ["true"], "group": group})
        assert code(response) == (422, "request.invalid"), response.text
        assert a.agent.machine.snapshot() == before
        assert a.runner.launched == []


class Via(httpx.AsyncBaseTransport):
    """The client's requests sent through the test's local (ADMINISTRATOR) client."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.client.send(request)


async def test_the_client_sends_and_reads_the_group(tmp_path: Path) -> None:
    async with api(tmp_path) as a, AgentClient(transport=Via(a.local)) as client:
        claim = await client.create_claim(["sleep", "60"], group="batch/nightly")
        assert claim.job.group == "batch/nightly"
        plain = await client.create_claim(["sleep", "60"])
        assert plain.job.group is None
        with pytest.raises(ClientInvalidRequest):
            await client.create_claim(["sleep", "60"], group="no good")
        assert len(a.agent.claims()) == 2
