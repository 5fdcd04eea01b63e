"""The OpenAPI document checked into docs/ is the one the agent serves."""

from __future__ import annotations

import json
from pathlib import Path

from nodeagent.agent._api import agent_openapi

DOC = Path(__file__).parents[2] / "docs" / "openapi.json"


def test_checked_in_openapi_is_current() -> None:
    # Regenerate with: python -m nodeagent.agent._api > docs/openapi.json
    assert json.loads(DOC.read_text()) == agent_openapi()


def test_every_error_code_route_is_documented() -> None:
    paths = agent_openapi()["paths"]
    assert set(paths["/v1/drain"]) == {"get", "post", "delete"}
    assert set(paths["/v1/claims/{claim_id}"]) == {"get", "delete"}
