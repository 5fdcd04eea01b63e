"""A real daemon answers on both listeners and drains a real job."""

from __future__ import annotations

from pathlib import Path

from tests.harness import AgentProcess, job_script, wait_for


def test_graceful_drain_of_a_real_job(tmp_path: Path) -> None:
    with AgentProcess(
        tmp_path / "a", policy={"max_job_retirement_time": 2, "machine_max_vacate_time": 1}
    ) as agent:
        argv, record = job_script(tmp_path, "job")
        claim = agent.claim(argv, cpus=2)
        wait_for(lambda: Path(f"{record}.started").exists())
        with agent.client() as c:
            phase1 = c.post("/v1/drain", json={"schedule": "graceful", "reason": "t"})
            assert phase1.status_code == 201, phase1.text
            body = phase1.json()
            assert body["state"] == "pending"
            assert [b["claim_id"] for b in body["estimate"]["blockers"]] == [claim["id"]]
            commit = c.post(f"/v1/drain/{body['id']}/commit")
            assert commit.status_code == 200, commit.text
            wait_for(lambda: c.get("/v1/drain").json()["state"] == "drained")
        assert record.exists()
        assert agent.jobs_alive() == []


def test_served_openapi_matches_docs(tmp_path: Path) -> None:
    import json

    docs = Path(__file__).parents[2] / "docs" / "openapi.json"
    with AgentProcess(tmp_path / "a") as agent:
        served = agent.call("GET", "/v1/openapi.json").json()
    assert served == json.loads(docs.read_text())
