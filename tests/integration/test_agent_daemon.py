"""The agent daemon as a real process: real jobs, sockets, signals, restarts."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import AgentProcess, job_script, wait_for

FAST_POLICY = {"max_job_retirement_time": 2, "machine_max_vacate_time": 1}


@pytest.fixture(scope="module")
def shared_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    with AgentProcess(tmp_path_factory.mktemp("shared") / "agent", policy=FAST_POLICY) as a:
        yield a


@pytest.fixture
def agent(shared_agent: AgentProcess) -> Iterator[AgentProcess]:
    """The module's agent, idle when the test begins and made idle again after it: the
    tests that neither restart it nor change its configuration or files share it rather
    than each start one of their own."""
    shared_agent.make_idle()
    yield shared_agent
    shared_agent.make_idle()


@pytest.fixture
def own_agent(tmp_path: Path) -> Iterator[AgentProcess]:
    """An agent of the test's own: for a test that stops it, reloads its configuration or
    lays out its execute directory."""
    with AgentProcess(tmp_path / "agent", policy=FAST_POLICY) as a:
        yield a


def started(record: Path) -> bool:
    return Path(f"{record}.started").exists()


def term_times(record: Path) -> list[float]:
    if not record.exists():
        return []
    return [float(line) for line in record.read_text().split()]


def drain_state(a: AgentProcess) -> str:
    with a.client() as c:
        return str(c.get("/v1/drain").json()["state"])


def test_graceful_drain_evicts_each_job_at_its_promise_not_before(
    agent: AgentProcess, tmp_path: Path
) -> None:
    jobs = []
    for i, retirement in enumerate((2, 3, 4)):
        argv, record = job_script(tmp_path, f"job{i}")
        claim = agent.claim(argv, max_job_retirement_time=retirement)
        jobs.append((claim, record, retirement))
    for _, record, _ in jobs:
        wait_for(lambda record=record: started(record))
    with agent.client() as c:
        body = c.post("/v1/drain", json={"schedule": "graceful", "commit": True}).json()
    assert body["state"] == "draining"
    wait_for(lambda: drain_state(agent) == "drained")
    for claim, record, retirement in jobs:
        # MJRT = min(machine 2, job's); soft kill at start + MJRT - vacate (1 s).
        promise = claim["job"]["started_at"] + min(2, retirement) - 1
        (received,) = term_times(record)
        assert received >= promise - 0.002  # never before (started_at is rounded to ms)
    assert agent.jobs_alive() == []


def test_quick_drain_hard_kills_after_vacate(agent: AgentProcess, tmp_path: Path) -> None:
    argv, record = job_script(tmp_path, "stubborn", term_delay=-1)  # ignores SIGTERM
    claim = agent.claim(argv, max_job_retirement_time=100)
    wait_for(lambda: started(record))
    with agent.client() as c:
        c.post("/v1/drain", json={"schedule": "quick", "commit": True}).raise_for_status()
        assert c.get(f"/v1/claims/{claim['id']}").json()["activity"] == "Vacating"
    wait_for(lambda: drain_state(agent) == "drained")
    assert len(term_times(record)) == 1
    assert agent.jobs_alive() == []
    ad = agent.call("GET", "/v1/ad").json()["machine"]
    assert ad["TotalMachineDrainingBadput"] >= 0
    assert ad["DrainState"] == "drained"


def test_fast_drain_kills_now(agent: AgentProcess, tmp_path: Path) -> None:
    records = []
    for i in range(3):
        argv, record = job_script(tmp_path, f"j{i}")
        agent.claim(argv, cpus=2)
        records.append(record)
    for record in records:
        wait_for(lambda record=record: started(record))
    with agent.client() as c:
        c.post("/v1/drain", json={"schedule": "fast", "commit": True}).raise_for_status()
    wait_for(lambda: drain_state(agent) == "drained")
    assert all(term_times(r) == [] for r in records)  # SIGKILL only
    assert agent.jobs_alive() == []


def test_claims_refused_while_draining(agent: AgentProcess, tmp_path: Path) -> None:
    argv, _ = job_script(tmp_path, "j")
    agent.claim(argv, max_job_retirement_time=100)
    with agent.client() as c:
        c.post("/v1/drain", json={"commit": True}).raise_for_status()
        refused = c.post("/v1/claims", json={"command": argv})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "machine.not_accepting"


def test_pending_transaction_blocks_a_claim_until_commit(
    agent: AgentProcess, tmp_path: Path
) -> None:
    argv, _ = job_script(tmp_path, "j")
    with agent.client() as c:
        request = c.post("/v1/drain", json={"schedule": "graceful"}).json()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(lambda: agent.call("POST", "/v1/claims", json={"command": argv}))
            time.sleep(0.5)
            assert not future.done()  # waits while pending
            c.post(f"/v1/drain/{request['id']}/commit").raise_for_status()
            response = future.result(timeout=10)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "machine.not_accepting"


def test_pending_transaction_blocks_a_claim_until_cancel(
    agent: AgentProcess, tmp_path: Path
) -> None:
    argv, _ = job_script(tmp_path, "j")
    with agent.client() as c:
        request = c.post("/v1/drain", json={"schedule": "graceful"}).json()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(lambda: agent.call("POST", "/v1/claims", json={"command": argv}))
            time.sleep(0.3)
            assert not future.done()
            c.post(f"/v1/drain/{request['id']}/cancel").raise_for_status()
            response = future.result(timeout=10)
    assert response.status_code == 201
    agent.job_pids.add(response.json()["job"]["pid"])


def test_pending_transaction_expires(agent: AgentProcess) -> None:
    with agent.client() as c:
        request = c.post("/v1/drain", json={"schedule": "graceful", "ttl": 0.5}).json()
        assert request["state"] == "pending"
        wait_for(lambda: c.get("/v1/drain").json()["state"] == "none")
        last = c.get("/v1/drain").json()["last"]
        assert (last["id"], last["state"]) == (request["id"], "cancelled")
        late = c.post(f"/v1/drain/{request['id']}/commit")
    assert late.status_code == 410
    assert late.json()["error"]["code"] == "drain.transaction_expired"


def test_concurrent_drain_requests_exactly_one_wins(agent: AgentProcess) -> None:
    barrier = threading.Barrier(8)

    def request() -> int:
        with agent.client() as c:
            barrier.wait()
            return c.post("/v1/drain", json={"schedule": "graceful"}).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = sorted(pool.map(lambda _: request(), range(8)))
    assert codes == [201] + [409] * 7


def test_cancel_unretires(agent: AgentProcess, tmp_path: Path) -> None:
    argv, record = job_script(tmp_path, "j")
    claim = agent.claim(argv, max_job_retirement_time=100)
    with agent.client() as c:
        c.post("/v1/drain", json={"commit": True}).raise_for_status()
        assert c.get(f"/v1/claims/{claim['id']}").json()["activity"] == "Retiring"
        cancelled = c.delete("/v1/drain")
        assert cancelled.status_code == 200
        assert cancelled.json()["last"]["state"] == "cancelled"
        assert c.get(f"/v1/claims/{claim['id']}").json()["activity"] == "Busy"
        ad = c.get("/v1/ad").json()["machine"]
        assert ad["Start"] is True
        assert ad["DrainState"] == "none"
        assert c.delete("/v1/drain").status_code == 200  # no-op
    assert term_times(record) == []


@pytest.mark.parametrize(("action", "status"), [("exit", 0), ("restart", 75)])
def test_completion_action_ends_the_daemon(tmp_path: Path, action: str, status: int) -> None:
    with AgentProcess(tmp_path / "a", policy=FAST_POLICY) as a:
        argv, record = job_script(tmp_path, "j")
        a.claim(argv)
        wait_for(lambda: started(record))
        with a.client() as c:
            c.post(
                "/v1/drain", json={"schedule": "quick", "commit": True, "on_completion": action}
            ).raise_for_status()
        assert a.wait_exit() == status
        assert a.jobs_alive() == []
        a.start()  # the drain ended: the machine accepts work again
        with a.client() as c:
            assert c.get("/v1/ad").json()["machine"]["Start"] is True


def test_completion_action_resume(agent: AgentProcess, tmp_path: Path) -> None:
    argv, record = job_script(tmp_path, "j")
    agent.claim(argv, cpus=4)
    wait_for(lambda: started(record))
    with agent.client() as c:
        c.post("/v1/drain", json={"schedule": "quick", "commit": True, "on_completion": "resume"})
        wait_for(lambda: c.get("/v1/drain").json()["state"] == "none")
        assert c.get("/v1/drain").json()["last"]["state"] == "completed"
        pslot = c.get("/v1/ad").json()["slots"][0]
    assert (pslot["State"], pslot["Cpus"]) == ("Unclaimed", 8)


def test_kill9_and_restart_in_the_middle_of_a_drain(tmp_path: Path) -> None:
    # The long job's promise (8 s, its SIGTERM at 7 s) outlasts a restart on a loaded
    # machine: the restarted agent finds the drain still under way.
    policy = {"max_job_retirement_time": 8, "machine_max_vacate_time": 1}
    with AgentProcess(tmp_path / "a", policy=policy) as a:
        argv, record = job_script(tmp_path, "long")
        claim = a.claim(argv, max_job_retirement_time=8)
        other, other_record = job_script(tmp_path, "short")
        a.claim(other, max_job_retirement_time=1)
        wait_for(lambda: started(record) and started(other_record))
        with a.client() as c:
            drain = c.post("/v1/drain", json={"commit": True, "deadline": 60}).json()
        before = a.call("GET", "/v1/ad").json()["machine"]
        a.kill9()
        assert a.jobs_alive() != []  # jobs outlive the daemon
        a.start()
        with a.client() as c:
            now = c.get("/v1/drain").json()
            assert (now["id"], now["state"]) == (drain["id"], "draining")
            assert now["deadline_at"] == drain["deadline_at"]
            ad = c.get("/v1/ad").json()["machine"]
            assert ad["DrainingRequestId"] == drain["id"]
            assert ad["TotalMachineDrainingBadput"] >= before["TotalMachineDrainingBadput"]
            wait_for(lambda: c.get("/v1/drain").json()["state"] == "drained")
        (received,) = term_times(record)
        assert received >= claim["job"]["started_at"] + 7 - 0.002
        assert a.jobs_alive() == []


def test_restart_cancels_a_pending_transaction_whose_time_passed(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a", policy=FAST_POLICY) as a:
        with a.client() as c:
            request = c.post("/v1/drain", json={"ttl": 1}).json()
        a.kill9()
        time.sleep(1.2)
        a.start()
        with a.client() as c:
            body = c.get("/v1/drain").json()
    assert body["state"] == "none"
    assert (body["last"]["id"], body["last"]["state"]) == (request["id"], "cancelled")


def test_a_job_that_exits_while_the_daemon_is_down_is_noticed(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a", policy=FAST_POLICY) as a:
        claim = a.claim(["sleep", "0.5"])
        a.kill9()
        wait_for(lambda: a.jobs_alive() == [], timeout=10)  # it ends while no daemon runs
        a.start()
        with a.client() as c:
            assert c.get("/v1/claims").json()["claims"] == []
            assert c.get(f"/v1/claims/{claim['id']}").status_code == 404


def test_jobs_survive_a_clean_stop(own_agent: AgentProcess, tmp_path: Path) -> None:
    argv, record = job_script(tmp_path, "j")
    claim = own_agent.claim(argv)
    wait_for(lambda: started(record))
    assert own_agent.stop() == 0
    assert own_agent.jobs_alive() == [claim["job"]["pid"]]
    own_agent.start()
    with own_agent.client() as c:
        assert c.get(f"/v1/claims/{claim['id']}").json()["job"]["pid"] == claim["job"]["pid"]


def audit_lines(a: AgentProcess) -> list[dict[str, Any]]:
    path = a.root / "state" / "audit.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_auth_matrix(agent: AgentProcess, tmp_path: Path) -> None:
    before = len(audit_lines(agent))  # what the tests before this one made the agent write
    read = agent.token("READ")
    admin = agent.token("ADMINISTRATOR")
    expired = agent.token("ADMINISTRATOR", lifetime=10, age=100)
    with httpx.Client(base_url=agent.url) as anon:
        missing = anon.get("/v1/ad")
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "auth.unauthenticated"
        assert anon.get("/healthz").status_code == 200
        assert anon.get("/metrics").status_code == 401
        bad = anon.get("/v1/ad", headers={"Authorization": "Bearer nonsense"})
        assert bad.status_code == 401
        old = anon.get("/v1/ad", headers={"Authorization": f"Bearer {expired}"})
        assert old.status_code == 401
    with agent.client(read) as c:
        assert c.get("/v1/ad").status_code == 200
        assert c.get("/metrics").status_code == 200
        refused = c.post("/v1/drain", json={})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "auth.forbidden"
        assert c.delete("/v1/drain").status_code == 403
        assert c.post("/v1/claims", json={"command": ["true"]}).status_code == 403
    with agent.client(admin) as c:
        created = c.post("/v1/drain", json={"reason": "over tcp"})
        assert created.status_code == 201
        assert created.json()["requested_by"] == "tester"
        c.delete("/v1/drain").raise_for_status()
    lines = audit_lines(agent)[before:]
    assert [(r["subject"], r["action"], r["result"]) for r in lines] == [
        ("tester", "drain.start", "auth.forbidden"),  # refusals are audited too
        ("tester", "drain.cancel", "auth.forbidden"),
        ("tester", "claim.create", "auth.forbidden"),
        ("tester", "drain.start", "ok"),
        ("tester", "drain.cancel", "ok"),
    ]
    # The request's parameters as the agent read them; none for a request never read.
    assert lines[0]["details"] is None
    assert lines[3]["details"] == {
        "schedule": "graceful",
        "reason": "over tcp",
        "on_completion": "none",
        "deadline": None,
        "start": None,
        "check": None,
        "commit": False,
        "ttl": None,
    }


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/drain", b"{not json"),
        ("/v1/drain", json.dumps({"schedule": "graceful", "bogus": 1}).encode()),
        ("/v1/drain", json.dumps({"deadline": -5}).encode()),
        ("/v1/drain", json.dumps({"schedule": "slow"}).encode()),
        ("/v1/drain", json.dumps({"check": "Cpus >"}).encode()),
        ("/v1/drain", json.dumps({"start": "Owner ==", "commit": True}).encode()),
        ("/v1/drain", json.dumps({"reason": "a\nb"}).encode()),
        ("/v1/claims", json.dumps({"command": ["true"], "cpus": -1}).encode()),
        ("/v1/claims", json.dumps({"command": []}).encode()),
        ("/v1/claims", json.dumps({"command": ["true"], "pid": 5}).encode()),
        ("/v1/claims", json.dumps({"command": ["true"], "max_job_retirement_time": -1}).encode()),
        ("/v1/claims", json.dumps({"command": ["/no/such/program"]}).encode()),
    ],
)
def test_bad_input_is_422_and_changes_nothing(agent: AgentProcess, path: str, body: bytes) -> None:
    with agent.client() as c:
        before = c.get("/v1/ad").json()
        response = c.post(path, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] in ("request.invalid", "job.launch_failed")
        after = c.get("/v1/ad").json()
    volatile = {"MyCurrentTime"}
    assert {k: v for k, v in after["machine"].items() if k not in volatile} == {
        k: v for k, v in before["machine"].items() if k not in volatile
    }
    assert len(after["slots"]) == len(before["slots"])


def test_suspend_and_continue_a_real_job(agent: AgentProcess, tmp_path: Path) -> None:
    claim = agent.claim(["sleep", "30"])
    with agent.client() as c:
        assert c.post(f"/v1/claims/{claim['id']}/suspend").json()["activity"] == "Suspended"
        stat = Path(f"/proc/{claim['job']['pid']}/stat")
        # SIGSTOP reaches the process asynchronously: wait for the stopped state.
        wait_for(lambda: stat.read_text().split()[2] == "T")
        assert c.post(f"/v1/claims/{claim['id']}/continue").json()["activity"] == "Busy"
        released = c.delete(f"/v1/claims/{claim['id']}")
        assert released.json()["activity"] == "Vacating"
        wait_for(lambda: c.get("/v1/claims").json()["claims"] == [])


def test_classad_format_and_metrics(agent: AgentProcess) -> None:
    from slots import parse_long

    with agent.client() as c:
        text = c.get("/v1/ad", params={"format": "classad"}).text
        ads = parse_long(text)
        assert ads[0]["Machine"] == "node1.test"
        assert ads[1]["SlotType"] == "Partitionable"
        metrics = c.get("/metrics").text
    assert 'nodeagent_drain_state{state="none"} 1.0' in metrics
    assert "nodeagent_expected_draining" in metrics


class _FakeMaster(BaseHTTPRequestHandler):
    ads: list[dict[str, Any]] = []  # noqa: RUF012
    tokens: list[str] = []  # noqa: RUF012

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).ads.append(json.loads(self.rfile.read(length)))
        type(self).tokens.append(self.headers.get("Authorization", ""))
        reply = json.dumps(
            {
                "mode": "DRAINING",
                "unavailability": {
                    "start": {"nanoseconds": 1_900_000_000 * 10**9},
                    "duration": {"nanoseconds": 3600 * 10**9},
                },
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_ads_are_pushed_to_the_master_and_the_reply_published(tmp_path: Path) -> None:
    _FakeMaster.ads, _FakeMaster.tokens = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeMaster)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    token_file = tmp_path / "daemon.token"
    token_file.write_text("secret-daemon-token\n")
    try:
        master = {
            "url": f"http://127.0.0.1:{server.server_address[1]}",
            "token_file": str(token_file),
            "update_interval": 60,
            "ad_debounce": 0.05,
        }
        with AgentProcess(tmp_path / "a", policy=FAST_POLICY, master=master) as a:
            wait_for(lambda: len(_FakeMaster.ads) >= 1)
            with a.client() as c:
                c.post("/v1/drain", json={"reason": "pushed"}).raise_for_status()
                wait_for(
                    lambda: any(ad["machine"]["DrainState"] == "pending" for ad in _FakeMaster.ads)
                )
                machine = c.get("/v1/ad").json()["machine"]
        assert machine["MaintenanceMode"] == "DRAINING"
        assert machine["Unavailability"] == {"Start": 1_900_000_000, "Duration": 3600}
        assert _FakeMaster.tokens[0] == "Bearer secret-daemon-token"
    finally:
        server.shutdown()
        server.server_close()


def test_sighup_reloads_the_policy(own_agent: AgentProcess) -> None:
    text = own_agent.config_path.read_text().replace(
        "max_job_retirement_time = 2", "max_job_retirement_time = 77"
    )
    own_agent.config_path.write_text(text)
    assert own_agent.proc is not None
    own_agent.proc.send_signal(signal.SIGHUP)
    with own_agent.client() as c:
        wait_for(lambda: c.get("/v1/ad").json()["machine"]["MaxJobRetirementTime"] == 77)


def _kernel_thread() -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_bytes()
            except OSError:
                continue
            if int(text[text.rindex(b")") + 2 :].split()[6]) & 0x00200000:
                return int(entry.name)
    return None


def test_adoption_guards(agent: AgentProcess) -> None:
    assert agent.proc is not None
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True, stdin=subprocess.DEVNULL)
    agent.job_pids.add(stranger.pid)
    try:
        with agent.client() as c:
            init = c.post("/v1/claims", json={"pid": 1})  # refused by the body's schema
            assert (init.status_code, init.json()["error"]["code"]) == (422, "request.invalid")
            refused = {
                "agent": c.post("/v1/claims", json={"pid": agent.proc.pid}),
                "ancestor": c.post("/v1/claims", json={"pid": os.getpid()}),
            }
            kthread = _kernel_thread()
            if kthread is not None:
                refused["kernel thread"] = c.post("/v1/claims", json={"pid": kthread})
            for what, response in refused.items():
                assert response.status_code == 422, (what, response.text)
                assert response.json()["error"]["code"] == "job.not_adoptable", what
            huge = c.post("/v1/claims", json={"pid": 3453422734})
            assert (huge.status_code, huge.json()["error"]["code"]) == (422, "request.invalid")
            first = c.post("/v1/claims", json={"pid": stranger.pid})
            assert first.status_code == 201, first.text
            again = c.post("/v1/claims", json={"pid": stranger.pid})
            assert (again.status_code, again.json()["error"]["code"]) == (
                409,
                "job.already_claimed",
            )
            assert len(c.get("/v1/claims").json()["claims"]) == 1
            c.delete(f"/v1/claims/{first.json()['id']}").raise_for_status()
            assert stranger.wait(timeout=10) == -signal.SIGTERM
        assert agent.proc.poll() is None  # the agent is alive and well
    finally:
        stranger.kill()
        stranger.wait()


def test_cwd_stays_inside_the_execute_directory(own_agent: AgentProcess) -> None:
    slot = own_agent.root / "state" / "execute" / "slot1_1"
    slot.mkdir(parents=True)
    (slot / "out").symlink_to("/etc")
    with own_agent.client() as c:
        for cwd, code in [
            ("/etc", "request.invalid"),
            ("../..", "request.invalid"),
            ("a/../../b", "request.invalid"),
            ("out", "job.launch_failed"),
            ("missing", "job.launch_failed"),
        ]:
            response = c.post("/v1/claims", json={"command": ["pwd"], "cwd": cwd})
            assert response.status_code == 422, (cwd, response.text)
            assert response.json()["error"]["code"] == code, cwd
        assert c.get("/v1/claims").json()["claims"] == []
        (slot / "sub").mkdir()
        ok = c.post("/v1/claims", json={"command": ["pwd"], "cwd": "sub/"})
        assert ok.status_code == 201, ok.text
        wait_for(lambda: c.get("/v1/claims").json()["claims"] == [])
    assert (slot / "stdout").read_text() == f"{slot / 'sub'}\n"


def test_the_log_tells_a_drain_and_its_escalation(tmp_path: Path) -> None:
    """Phase 1 with its estimate, the commit, the deadline's escalation, the eviction with
    its job and the promise it cuts, the completion: each an INFO line naming the request,
    its reason and who asked (here the local socket's caller), in the order they happened."""
    policy = {"max_job_retirement_time": 600, "machine_max_vacate_time": 1}
    with AgentProcess(tmp_path / "agent", policy=policy) as agent:
        argv, record = job_script(tmp_path, "long")
        claim = agent.claim(argv, job_id="job-7")
        wait_for(lambda: started(record))
        with agent.client() as c:
            body = {"reason": "kernel update", "deadline": 1, "on_completion": "resume"}
            pending = c.post("/v1/drain", json=body).json()
            c.post(f"/v1/drain/{pending['id']}/commit").raise_for_status()
        wait_for(lambda: drain_state(agent) == "none")
        text = agent.log_path.read_text()
    rid, cid, pid = pending["id"], claim["id"], claim["job"]["pid"]
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
    expected = [
        rf"INFO .*drain {rid} phase 1 by local: graceful drain, reason 'kernel update', "
        rf"on completion resume, expected empty at {stamp} \(in \d s\), badput \d+ core-s, "
        rf"deadline 1 s after its commit; pending until {stamp}",
        rf"INFO .*drain {rid} committed by local: graceful drain, reason 'kernel update', "
        rf"expected empty at {stamp} \(in \d s\), badput \d+ core-s, deadline {stamp}",
        rf"INFO .*drain {rid}: its deadline {stamp} is reached: escalated to a quick drain .*"
        r"\(requested by local, reason 'kernel update'\)",
        rf"INFO .*claim {cid}: evicting job job-7 \(pid {pid}\): the drain's deadline {stamp} "
        rf"is reached; promise cut by 9 min 5\d s \(drain {rid}, requested by local, "
        r"reason 'kernel update'\)",
        rf"INFO .*claim {cid}: SIGTERM to process group {pid}",
        rf"INFO .*drain {rid} complete: the node is empty and takes work again "
        r"\(requested by local, reason 'kernel update'\)",
    ]
    at = 0
    for pattern in expected:
        found = re.compile(pattern).search(text, at)
        assert found is not None, f"{pattern!r} not after offset {at} in:\n{text}"
        at = found.end()


def test_a_job_due_at_a_restart_gets_its_sigterm_when_another_is_gone(tmp_path: Path) -> None:
    """A restart finds the first claim's job gone and the second's SIGTERM due: the
    second is adopted before the model hears of the first's end (which evicts what is
    due), so its SIGTERM reaches it and it gets its vacate time before the hard kill."""
    policy = {"max_job_retirement_time": 6, "machine_max_vacate_time": 3}
    with AgentProcess(tmp_path / "a", policy=policy) as a:
        first = a.claim(["sleep", "3600"])
        argv, record = job_script(tmp_path, "due", term_delay=-1)
        second = a.claim(argv)
        wait_for(lambda: started(record))
        with a.client() as c:
            c.post("/v1/drain", json={"schedule": "graceful", "commit": True})
        a.kill9()
        os.kill(first["job"]["pid"], signal.SIGKILL)
        # its SIGTERM falls due while no daemon runs (its promise: start + 6 - 3)
        wait_for(lambda: time.time() > second["job"]["started_at"] + 3.1, timeout=10)
        a.start()
        with a.client() as c:
            wait_for(lambda: c.get("/v1/drain").json()["state"] == "drained")
    pgid = second["job"]["pid"]
    log = a.log_path.read_text()
    assert f"claim {second['id']}: SIGTERM to process group {pgid}" in log, log
    # its SIGTERM came at its promise's end less its vacate time: nothing is cut
    evicted = rf"claim {second['id']}: evicting job \S+ \(pid {pgid}\): "
    kept = "its retirement is over: its promise is kept; promise cut by 0 s"
    assert re.search(evicted + kept, log), log
    assert term_times(record), "the job never received its SIGTERM"
