"""The agent API takes JSON types as they are: found by fuzzing the OpenAPI document.

pydantic's lax mode alone reads ``true`` as 1 and ``"5"`` as 5, and the document did not
say ``GET /v1/ad`` answers ClassAd text or which formats it knows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent._api import agent_openapi
from tests.nodeagent.agent.test_agent_api_edges import api, code


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/v1/claims", {"command": ["true"], "gpus": False}, id="gpus-false"),
        pytest.param("/v1/claims", {"command": ["true"], "cpus": True}, id="cpus-true"),
        pytest.param("/v1/claims", {"command": ["true"], "memory": "64"}, id="memory-string"),
        pytest.param("/v1/claims", {"pid": "1234"}, id="pid-string"),
        pytest.param(
            "/v1/claims",
            {"command": ["true"], "max_job_retirement_time": True},
            id="retirement-true",
        ),
        pytest.param("/v1/drain", {"commit": 1}, id="commit-one"),
        pytest.param("/v1/drain", {"commit": "yes"}, id="commit-yes"),
        pytest.param("/v1/drain", {"ttl": True}, id="ttl-true"),
        pytest.param("/v1/drain", {"deadline": "60"}, id="deadline-string"),
    ],
)
async def test_a_value_of_another_json_type_is_422(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    async with api(tmp_path) as a:
        before = a.agent.machine.snapshot()
        response = await a.local.post(path, json=body)
        assert code(response) == (422, "request.invalid"), response.text
        assert a.agent.machine.snapshot() == before
        assert a.runner.launched == []


async def test_numbers_still_pass(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        claim = await a.local.post("/v1/claims", json={"command": ["true"], "cpus": 2})
        assert claim.status_code == 201, claim.text
        drain = await a.local.post("/v1/drain", json={"ttl": 30, "deadline": 60.5})
        assert drain.status_code == 201, drain.text


async def test_an_unknown_ad_format_is_422(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        response = await a.local.get("/v1/ad", params={"format": "xml"})
        assert code(response) == (422, "request.invalid")
        text = await a.local.get("/v1/ad", params={"format": "classad"})
        assert text.headers["content-type"].startswith("text/plain")


def test_the_document_says_what_get_ad_answers() -> None:
    operation = agent_openapi()["paths"]["/v1/ad"]["get"]
    (format_,) = [p for p in operation["parameters"] if p["name"] == "format"]
    assert format_["schema"]["enum"] == ["json", "classad"]
    assert set(operation["responses"]["200"]["content"]) == {"application/json", "text/plain"}
