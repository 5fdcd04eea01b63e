"""The OpenAPI document checked into docs/ is the one the agent serves."""

from __future__ import annotations

import json
from pathlib import Path

from nodeagent.agent._api import agent_openapi

DOC = Path(__file__).parents[3] / "docs" / "openapi.json"


def test_checked_in_openapi_is_current() -> None:
    # Regenerate with: python -m nodeagent.agent._api > docs/openapi.json
    assert json.loads(DOC.read_text()) == agent_openapi()


def test_every_error_code_route_is_documented() -> None:
    paths = agent_openapi()["paths"]
    assert set(paths["/v1/drain"]) == {"get", "post", "delete"}
    assert set(paths["/v1/claims/{claim_id}"]) == {"get", "delete"}


def test_the_openapi_document_lists_the_error_statuses_and_command_or_pid() -> None:
    doc = agent_openapi()
    paths = doc["paths"]

    def statuses(method: str, path: str) -> set[str]:
        return set(paths[path][method]["responses"])

    assert {"401", "403", "409", "412", "413", "422", "503"} <= statuses("post", "/v1/drain")
    assert {"404", "409", "410", "503"} <= statuses("post", "/v1/drain/{request_id}/commit")
    assert {"404", "409", "413", "422", "503"} <= statuses("post", "/v1/claims")
    assert {"404", "409"} <= statuses("delete", "/v1/claims/{claim_id}")
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas  # every 422 is our error body
    one_of = schemas["ClaimBody"]["oneOf"]
    assert [branch["required"] for branch in one_of] == [["command"], ["pid"]]
    assert schemas["ClaimBody"]["properties"]["pid"]["anyOf"][0]["maximum"] == 2**22
