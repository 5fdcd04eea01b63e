"""The live maintenance page in a real Chromium, against a real master and real agents.

A master (just in time, escalation ``quick``) and two agents on loopback, each running a
real job: ``late.test``'s job is promised two hours while its window opens in half an hour
(so the plan escalates it and cuts job 7), ``ontime.test``'s one minute; ``ghost.test`` is
scheduled with no agent. The page is loaded through ``nodeagent master ui`` (a real
subprocess, forwarding with a READ token over TCP) and straight from the master, which
refuses it without a token. Headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``scripts/ensure-chromium``) is driven by selenium
pointed at them: nothing is downloaded. Every wait is for a state of the DOM.

Screenshots go to ``$NODEAGENT_TEST_ARTIFACTS`` (else a temporary directory); the test
prints where. The daemons and the browser are shared by the tests of this file.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.harness import AgentProcess, MasterProcess, job_script, wait_for
from tests.integration.test_master import window
from tests.rawhttp import SOCKET_TIMEOUT, read_reply

if TYPE_CHECKING:  # selenium itself is imported once the fixture knows it is there
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
HOSTS = ("late.test", "ontime.test", "ghost.test")
#: The nodes of a rolling operation (not scheduled until it takes them).
ROLLED = ("rolling1.test", "rolling2.test")


def have_chromium() -> None:
    """Skip (fail in CI) without Chromium, its driver or selenium."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        message = (
            f"missing {', '.join(missing)} "
            "(Debian's chromium and chromium-driver: scripts/ensure-chromium)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{message} in CI")
        pytest.skip(message)


def chromium() -> WebDriver:
    """A headless Chromium: Debian's, driven by Debian's chromedriver (no download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    service = Service(executable_path=str(CHROMEDRIVER))
    return webdriver.Chrome(service=service, options=options)


@dataclass(frozen=True, kw_only=True)
class Pool:
    master: MasterProcess
    late: AgentProcess
    root: Path
    ui_url: str
    token_file: Path
    artifacts: Path
    window_start: float
    env: dict[str, str]


#: The rolling operation's hook: done once the test lets the node go (a file named after
#: it), within a minute in any case.
HOOK = """#!/bin/sh
for i in $(seq 600); do
  test -e "$(dirname "$0")/go-$NODEAGENT_NODE" && exit 0
  sleep 0.1
done
exit 1
"""


def agent(master: MasterProcess, root: Path, name: str, promise: int) -> AgentProcess:
    policy = {"max_job_retirement_time": promise, "machine_max_vacate_time": 1}
    settings = master.agent_settings(root / name, node=name, update_interval=0.5)
    hook = root / "hook.sh"
    extra = f"[hooks.fw]\ncommand = {json.dumps([str(hook)])}\n"
    return AgentProcess(root / name, hostname=name, policy=policy, master=settings, extra=extra)


def start_ui(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str]:
    """``nodeagent master ui --no-open ARGS``, and the URL it prints."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeagent", "master", "ui", "--no-open", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    url = proc.stdout.readline().strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/ui/", url), (url, proc.stderr)
    return proc, url


def stop(proc: subprocess.Popen[str]) -> int:
    """SIGTERM (by pid), then the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=20)  # and its pipes closed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Pool]:
    have_chromium()
    tmp = tmp_path_factory.mktemp("ui")
    artifacts = Path(os.environ.get("NODEAGENT_TEST_ARTIFACTS") or tmp / "artifacts")
    artifacts.mkdir(parents=True, exist_ok=True)
    said = f"screenshots of the maintenance page: {artifacts}"
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    if capture is None:
        print(said)
    else:
        with capture.global_and_fixture_disabled():  # on the terminal (but xdist's workers')
            print(f"\n{said}")
    settings = {
        "reconcile_interval": 0.2,
        "drain_margin": 1,
        "escalation": "quick",
        "ad_lifetime": 10,  # agents push every 0.5 s; one killed is lost within seconds
    }
    (tmp / "hook.sh").write_text(HOOK)
    (tmp / "hook.sh").chmod(0o755)
    with ExitStack() as stack:
        master = stack.enter_context(MasterProcess(tmp / "master", settings=settings))
        late = stack.enter_context(agent(master, tmp, "late.test", 7200))
        on_time = stack.enter_context(agent(master, tmp, "ontime.test", 60))
        for name in ROLLED:
            stack.enter_context(agent(master, tmp, name, 60))
        argv, _ = job_script(tmp, "long")
        late.claim(
            argv,
            cpus=2,
            max_job_retirement_time=7200,
            job_id="7",
            owner="alice",
            group="batch/dev/etl",
        )
        argv, _ = job_script(tmp, "short")
        on_time.claim(argv, cpus=1, max_job_retirement_time=60, job_id="8", owner="bob")
        start = time.time() + 1800
        schedule = window(["late.test", "ontime.test"], start, 3600)
        schedule["windows"] += window(["ghost.test"], start + 3600, 1800)["windows"]
        assert master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200

        def planned() -> bool:
            rows = master.call("GET", "/v1/maintenance/plan").json()["machines"]
            by_host = {r["machine_id"]["hostname"]: r for r in rows}
            late_row, other = by_host["late.test"], by_host["ontime.test"]
            return (
                late_row["node"] == "late.test"
                and late_row["as_planned"]["cut_jobs"] == 1
                and other["node"] == "ontime.test"
                and other["empty"] is False
            )

        wait_for(planned)
        token_file = tmp / "read.token"
        token_file.write_text(master.token("READ", subject="operator"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
        env["NODEAGENT_MASTER_SOCKET"] = str(tmp / "no-such.sock")  # TCP only, by --host
        proc, url = start_ui(env, "--host", master.url, "--token", str(token_file))
        try:
            yield Pool(
                master=master,
                late=late,
                root=tmp,
                ui_url=url,
                token_file=token_file,
                artifacts=artifacts,
                window_start=start,
                env=env,
            )
        finally:
            assert stop(proc) == 0


@pytest.fixture(scope="module")
def browser(pool: Pool) -> Iterator[WebDriver]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: WebDriver, pool: Pool, name: str) -> Path:
    path = pool.artifacts / name
    assert driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


#: What the page shows, read in one script (the page redraws as the plan changes: elements
#: found one call and read the next may be gone by then).
SNAPSHOT = """
const box = (el) => { const b = el.getBoundingClientRect(); return {x: b.x, width: b.width}; };
const rows = {};
const order = [];
for (const g of document.querySelectorAll("#timeline g.row")) {
  const parts = [];
  for (const el of g.querySelectorAll("rect.window, rect.cut, rect.drain, line.escalation,"
      + " line.drain-start, circle.promise, path.planned")) {
    const style = getComputedStyle(el);
    parts.push({kind: el.getAttribute("class"), job: el.dataset.job || null, ...box(el),
                fill: style.fill, stroke: style.stroke});
  }
  order.push(g.dataset.machine);
  rows[g.dataset.machine] = {data: {...g.dataset}, text: g.textContent, parts};
}
const text = (selector) => Array.from(document.querySelectorAll(selector), (el) => el.textContent);
const now = document.getElementById("now-line");
const operations = Array.from(document.querySelectorAll("#operations .operation"), (op) => ({
  id: op.dataset.id, state: op.dataset.state,
  progress: (op.querySelector(".progress") || {}).textContent || "",
  batches: Array.from(op.querySelectorAll(".batch"), (b) => b.dataset.state)}));
const totals = {};
for (const item of document.querySelectorAll("#totals [data-total]")) {
  totals[item.dataset.total] = item.querySelector("dd").textContent;
}
return {order, rows, now: now ? box(now) : null, totals, operations,
        table: Object.fromEntries(Array.from(document.querySelectorAll("#machines tbody tr"),
                                             (tr) => [tr.dataset.machine, tr.textContent])),
        events: Array.from(document.querySelectorAll("#events li"),
                           (li) => `${li.dataset.type} ${li.querySelector(".text").textContent}`),
        eventIds: Array.from(document.querySelectorAll("#events li"),
                             (li) => Number(li.dataset.id)),
        live: document.getElementById("live").dataset.state,
        problem: document.getElementById("problem").hidden ? null : text("#problem")[0],
        loadedOnce: document.documentElement.dataset.loadedOnce || null};
"""


def snapshot(driver: WebDriver) -> dict[str, Any]:
    """The page's timeline, totals, operations and events as it shows them now."""
    shown: dict[str, Any] = driver.execute_script(SNAPSHOT)
    return shown


def parts(shown: dict[str, Any], host: str, kind: str) -> list[dict[str, Any]]:
    """The marks of ``kind`` (their classes, e.g. ``promise late``) on ``host``'s row."""
    return [p for p in shown["rows"][host]["parts"] if p["kind"] == kind]


def rgb(color: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", color)[:3])


def showing(driver: WebDriver, ready: Any) -> dict[str, Any]:
    """Wait until the page's snapshot satisfies ``ready``; that snapshot."""

    def found() -> dict[str, Any] | None:
        shown = snapshot(driver)
        return shown if ready(shown) else None

    result: dict[str, Any] = wait_for(found, timeout=30, interval=0.1)
    return result


# --- the loopback proxy ---------------------------------------------------------------------


def test_the_proxy_forwards_the_page_s_reads_and_nothing_else(pool: Pool) -> None:
    base = pool.ui_url.removesuffix("/ui/")
    with httpx.Client(base_url=base, timeout=30) as client:
        page = client.get("/ui/")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.headers["content-security-policy"].startswith("default-src 'self'")
        assert page.headers["x-content-type-options"] == "nosniff"
        assert client.get("/").headers["location"] == "/ui/"
        plan = client.get("/v1/maintenance/plan", params={"blockers": "false"})
        assert plan.status_code == 200
        hosts = [m["machine_id"]["hostname"] for m in plan.json()["machines"]]
        assert hosts == list(HOSTS)
        assert client.get("/v1/leader").json()["leading"] is True
        assert client.get("/v1/maintenance/operations").json() == {"operations": []}
        for reply in (page, plan):
            assert not [h for h in reply.headers if h.startswith("access-control-")]
            assert "authorization" not in reply.headers
        # The event stream: its query and Last-Event-ID go through, and it is relayed as it
        # comes (an open stream's first event arrives before the stream ends).
        kept = client.get("/v1/events", params={"follow": "false", "format": "jsonl"})
        ids = [json.loads(line)["id"] for line in kept.text.splitlines() if line]
        assert len(ids) >= 2
        assert ids == sorted(ids)
        resumed = client.get(
            "/v1/events",
            params={"follow": "false", "format": "jsonl"},
            headers={"Last-Event-ID": str(ids[-2])},
        )
        assert json.loads(resumed.text.splitlines()[0])["id"] == ids[-1]
        with client.stream("GET", "/v1/events", params={"last": "1"}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            first = next(line for line in lines if line.startswith("id:"))
            assert int(first.removeprefix("id:")) >= ids[-1]  # the last kept, or a newer one

        def refused(reply: httpx.Response) -> tuple[int, str]:
            return reply.status_code, reply.json()["error"]["code"]

        # DNS rebinding: a foreign name that resolves to loopback reaches nothing.
        foreign = client.get("/v1/maintenance/plan", headers={"Host": "attacker.example"})
        assert refused(foreign) == (403, "ui.host_refused")
        port = base.rsplit(":", 1)[1]
        other = client.get("/v1/leader", headers={"Host": f"127.0.0.2:{port}"})
        assert refused(other) == (403, "ui.host_refused")
        assert client.get("/v1/leader", headers={"Host": f"localhost:{port}"}).status_code == 200
        cross = client.get("/v1/leader", headers={"Origin": "https://attacker.example"})
        assert refused(cross) == (403, "ui.origin_refused")
        # Nothing that writes, nothing the page does not read.
        down = client.post("/machine/down", json=[{"hostname": "late.test"}])
        assert refused(down) == (405, "http.method_not_allowed")
        assert refused(client.get("/maintenance/schedule")) == (404, "http.not_found")
        assert refused(client.get("/v1/ads")) == (404, "http.not_found")
        assert refused(client.get("/ui/../master.toml")) == (404, "http.not_found")
    # Nothing the master could read as a line of its own: no request smuggled through.
    host = base.removeprefix("http://")
    for head in (
        f"GET /v1/leader?a\nPOST /machine/down HTTP/1.1 HTTP/1.1\r\nHost: {host}\r\n\r\n",
        f"GET /v1/events HTTP/1.1\r\nHost: {host}\r\nLast-Event-ID: 1\nX-Y: z\r\n\r\n",
        f"GET /v1/leader HTTP/1.1\r\nHost: {host}\r\nAccept: a\x00b\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", int(port)), timeout=SOCKET_TIMEOUT) as raw:
            raw.sendall(head.encode("latin-1"))
            status, _, body = read_reply(raw)
        assert (status, json.loads(body)["error"]["code"]) == (400, "request.invalid"), head
    assert "down_machines" not in pool.master.call("GET", "/maintenance/status").json()


def test_the_command_s_exit_statuses(pool: Pool, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodeagent", "master", "ui", "--no-open", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=pool.env,
            check=False,
        )

    not_loopback = run("--listen", "0.0.0.0:0", "--host", pool.master.url)
    assert (not_loopback.returncode, not_loopback.stderr[:9]) == (2, "cli.usage")
    no_master = run("--socket", str(tmp_path / "none.sock"))
    assert (no_master.returncode, no_master.stderr[:18]) == (3, "master.unreachable")
    bad = tmp_path / "bad.token"
    bad.write_text("not-a-token")
    refused = run("--host", pool.master.url, "--token", str(bad))
    assert (refused.returncode, refused.stderr[:20]) == (4, "auth.unauthenticated")
    # Over the master's socket (no token), stopped by SIGTERM: exit 0.
    proc, url = start_ui({**pool.env, "NODEAGENT_MASTER_SOCKET": str(pool.master.socket)})
    try:
        leader = httpx.get(url.removesuffix("/ui/") + "/v1/leader", timeout=30)
        assert leader.json()["leading"] is True
    finally:
        assert stop(proc) == 0


# --- the page in the browser ----------------------------------------------------------------


def test_the_timeline_shows_each_machine_its_window_and_the_late_node_s_cut(
    pool: Pool, browser: WebDriver
) -> None:
    browser.get(pool.ui_url)
    shown = showing(browser, lambda s: s["order"] == list(HOSTS) and s["now"] is not None)
    now = shown["now"]
    windows = {}
    for host in HOSTS:
        (band,) = parts(shown, host, "window")
        windows[host] = band
        assert band["x"] > now["x"]  # the windows open later
        assert band["width"] > 0
    # The two windows of the same start and length line up; ghost.test's opens at their end.
    assert windows["late.test"]["x"] == pytest.approx(windows["ontime.test"]["x"], abs=1)
    late_end = windows["late.test"]["x"] + windows["late.test"]["width"]
    assert windows["ghost.test"]["x"] == pytest.approx(late_end, abs=1)

    late = shown["rows"]["late.test"]
    assert late["data"]["escalates"] == "true"
    (cut,) = parts(shown, "late.test", "cut")
    assert cut["job"] == "7"
    red, green, blue = rgb(cut["fill"])
    assert red >= 180, cut
    assert green <= 60, cut
    assert blue <= 60, cut
    # Evicted at the window's start; its promise would have run an hour and a half more.
    assert cut["x"] == pytest.approx(windows["late.test"]["x"], abs=2)
    assert cut["width"] > windows["late.test"]["width"]
    (escalation,) = parts(shown, "late.test", "escalation")
    assert rgb(escalation["stroke"])[0] >= 180
    (promise,) = parts(shown, "late.test", "promise late")
    assert promise["x"] > late_end  # empty by its promises after its window ends

    assert shown["rows"]["ontime.test"]["data"]["escalates"] == "false"
    assert parts(shown, "ontime.test", "cut") == []
    assert parts(shown, "ontime.test", "promise late") == []
    assert len(parts(shown, "ontime.test", "drain-start")) == 1
    assert "no node" in shown["rows"]["ghost.test"]["text"]

    # The words under the timeline, and the totals.
    assert "job 7 (alice)" in shown["table"]["late.test"]
    assert (shown["totals"]["machines"], shown["totals"]["escalations"]) == ("3", "1")
    assert shown["totals"]["behind"] == "0"  # every machine read: the totals are whole
    assert shown["problem"] is None
    shot(browser, pool, "timeline.png")


def test_a_drain_started_by_the_master_appears_without_a_reload(
    pool: Pool, browser: WebDriver
) -> None:
    if browser.current_url != pool.ui_url:
        browser.get(pool.ui_url)
    before = showing(browser, lambda s: "ontime.test" in s["rows"])["rows"]["ontime.test"]
    assert (before["data"]["mode"], before["data"]["drain"]) == ("DRAINING", "none")
    # A mark on this document: a reload would make a new one without it.
    browser.execute_script("document.documentElement.dataset.loadedOnce = 'yes'")
    machine = {"hostname": "ontime.test", "ip": "127.0.0.1"}
    assert pool.master.call("POST", "/machine/down", json=[machine]).status_code == 200

    def drained(shown: dict[str, Any]) -> bool:
        row = shown["rows"]["ontime.test"]["data"]
        return row["mode"] == "DOWN" and row["drain"] in ("draining", "drained")

    showing(browser, drained)
    # The master's events of it came over the stream, newest first.
    shown = showing(
        browser,
        lambda s: any(e.startswith("mode.changed ontime.test") for e in s["events"]),
    )
    print("\n".join(shown["events"]))
    assert shown["live"] == "live"
    assert shown["loadedOnce"] == "yes"
    assert shown["totals"]["DOWN"] == "1"
    shot(browser, pool, "drain-started.png")


def test_an_owner_s_decline_shows_in_its_machine_s_row_without_a_reload(
    pool: Pool, browser: WebDriver
) -> None:
    if browser.current_url != pool.ui_url:
        browser.get(pool.ui_url)
    showing(browser, lambda s: "batch/dev/etl not answered" in s["table"].get("late.test", ""))
    browser.execute_script("document.documentElement.dataset.loadedOnce = 'yes'")
    (notice,) = pool.master.call("GET", "/v1/notices", params={"machine": "late.test"}).json()[
        "notices"
    ]
    reply = pool.master.call(
        "POST", f"/v1/notices/{notice['id']}/decline", json={"reason": "month-end run"}
    )
    assert reply.status_code == 200, reply.text
    shown = showing(
        browser,
        lambda s: "batch/dev/etl declined by local: month-end run" in s["table"]["late.test"],
    )
    assert shown["totals"]["declined"] == "1"
    assert shown["loadedOnce"] == "yes"
    shot(browser, pool, "declined.png")


def test_a_rolling_operation_shows_its_batches_and_its_eta(pool: Pool, browser: WebDriver) -> None:
    """Two nodes, one batch each, one at a time: once the first is done, the page gives
    the operation an ETA from it; then the operation completes."""
    if browser.current_url != pool.ui_url:
        browser.get(pool.ui_url)
    body = {"hosts": list(ROLLED), "hook": "fw", "batches": 1}
    reply = pool.master.call("POST", "/v1/maintenance/operations", json=body)
    assert reply.status_code == 201, reply.text
    op_id = reply.json()["id"]

    def in_hook() -> str | None:
        doc = pool.master.call("GET", f"/v1/maintenance/operations/{op_id}").json()
        return next((b["name"] for b in doc["batches"] if b["state"] == "hook"), None)

    def operation(shown: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = next(
            (op for op in shown["operations"] if op["id"] == op_id), {"batches": []}
        )
        return found

    first = wait_for(in_hook, timeout=30)
    showing(browser, lambda s: "hook" in operation(s)["batches"])
    (pool.root / f"go-{first}").touch()
    second = wait_for(lambda: (b := in_hook()) != first and b, timeout=30)
    shown = showing(
        browser,
        lambda s: "ETA ≈" in operation(s).get("progress", "") and "done" in operation(s)["batches"],
    )
    assert "from the 1 batch(es) done" in operation(shown)["progress"]
    shot(browser, pool, "operation.png")
    (pool.root / f"go-{second}").touch()
    shown = showing(browser, lambda s: operation(s).get("state") == "completed")
    assert operation(shown)["batches"] == ["done", "done"]
    assert "ETA" not in operation(shown)["progress"]
    events = [e.split(" ", 1)[0] for e in shown["events"]]
    assert "operation.started" in events


def test_a_lost_node_is_marked(pool: Pool, browser: WebDriver) -> None:
    """late.test's agent is killed: once its ad is older than the ad lifetime, its row is
    struck through and says LOST, and the totals count it."""
    if browser.current_url != pool.ui_url:
        browser.get(pool.ui_url)
    assert showing(browser, lambda s: "late.test" in s["rows"])["totals"]["lost"] == "0"
    pool.late.kill9()
    shown = showing(browser, lambda s: s["rows"]["late.test"]["data"]["lost"] == "true")
    assert "LOST" in shown["rows"]["late.test"]["text"]
    assert shown["totals"]["lost"] == "1"
    shot(browser, pool, "lost.png")


def test_the_master_serves_the_page_to_a_token_only(pool: Pool) -> None:
    """Straight from the master's TCP listener: 401 without a token; with one (sent by the
    browser on every request, as a proxy in front of the master would), the page and its
    reads."""
    driver = chromium()
    try:
        driver.get(pool.master.url + "/ui/")
        assert "auth.unauthenticated" in driver.page_source
        assert driver.find_elements("id", "timeline") == []
        token = pool.token_file.read_text().strip()
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Bearer {token}"}}
        )
        driver.get(pool.master.url + "/ui/")
        showing(driver, lambda s: set(HOSTS) <= set(s["order"]))
        shot(driver, pool, "from-the-master.png")
    finally:
        driver.quit()


def test_the_page_catches_up_after_the_master_restarts(pool: Pool, browser: WebDriver) -> None:
    """Through ``master ui`` on the master's socket: the master stops (the page says so and
    keeps what it drew), starts again, and the page follows its events from the last one it
    showed: the new ones appear, none twice. (Last: the agents lose this master.)"""
    proc, url = start_ui({**pool.env, "NODEAGENT_MASTER_SOCKET": str(pool.master.socket)})
    try:
        browser.get(url)
        before = showing(browser, lambda s: s["live"] == "live" and s["eventIds"] and s["order"])
        pool.master.stop()
        # (a read under way when it stopped may first say that its reply ended early)
        away = showing(
            browser,
            lambda s: s["live"] != "live" and "master.unreachable" in (s["problem"] or ""),
        )
        assert away["order"] == before["order"]  # the last plan stays drawn
        pool.master.start()
        schedule = pool.master.call("GET", "/maintenance/schedule").json()
        schedule["windows"] += window(["extra.test"], time.time() + 7200, 600)["windows"]
        assert pool.master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
        back = showing(
            browser,
            lambda s: (
                s["live"] == "live"
                and "extra.test" in s["rows"]
                and any(e.startswith("schedule.changed") and "1 added" in e for e in s["events"])
            ),
        )
        ids = back["eventIds"]
        assert ids == sorted(set(ids), reverse=True)  # newest first, none twice
        assert ids[-len(before["eventIds"]) :] == before["eventIds"]  # what it had, kept
        assert back["problem"] is None
        shot(browser, pool, "after-a-restart.png")
    finally:
        assert stop(proc) == 0
