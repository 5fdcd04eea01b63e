"""Latency of the cluster maintenance plan for 10,000 scheduled machines.

10,000 nodes, each with an agent ad of 8 running claims (made by :class:`slots.Machine`,
as in ``ad_ingest.py``), all scheduled: 100 windows of 100 machines, 2 to 18.5 hours
ahead, so every machine is DRAINING and no drain is due during the benchmark.

* **In-process**, on a master holding those ads and that schedule, whose clock moves on
  by one second before each call, so that no call can reuse what an earlier one computed
  for the same second (the ads are 1 to ``runs`` seconds old, all brought up to ``now``):
  ``plan_ms`` is :meth:`Master.plan` (the plan as data, with the cyclic collector held
  off as the server does), ``body_ms`` the reply body the server makes per request
  (:func:`plan_body`: the plan encoded, then freed). Before them one plan makes every
  node's forecast, as a running master's reconcile passes do; ``cold_body_ms`` is the
  body right after every ad was replaced with no pass in between, so that every forecast
  is made during the call (the worst case). ``preview_body_ms``: the reply body of ``POST
  /v1/maintenance/schedule/preview`` with the schedule held (every row with its blockers,
  made afresh: a preview reuses no row of the plan's). ``summary_body_ms``: the summary
  ``nodeagent master plan`` asks (``late=true``, 20 rows, no blockers);
  ``page_body_ms``: what the maintenance page asks (the first 2,000 rows, no blockers).
* **Over HTTP**: a real master subprocess receives the 10,000 ads over TCP (DAEMON
  tokens) and the schedule over its Unix socket; then ``GET /v1/maintenance/plan`` over
  TCP with a READ token, one keep-alive connection, from the request to the last byte of
  the reply, with the master's CPU time per request. Then the same while simulated agents
  (another process) push their ads again at ``machines / 60`` per second, as agents with
  the default ``update_interval`` do, with a request every ``--interval`` seconds (as
  ``nodeagent master plan --watch``): the steady state of a cluster under maintenance.

Both with blockers (the default) and with ``blockers=false``.

``--store etcd``: every master (the in-process one included) keeps its state in a real
etcd started for the run (:class:`tests.etcd.EtcdServer`, in the temporary directory,
ended by its pid; ``--etcd-max-request-bytes`` is etcd's ``--max-request-bytes``, 1.5 MiB
when not given) and leads it alone. Each series also counts the calls etcd served
meanwhile, by method (``*_etcd_requests``): a plan reads the state held in memory, so
nothing but the lease's keep-alives should appear. ``schedule_values`` gives the size of
what posting the schedule writes (the ``maintenance`` and ``actors`` documents, in one
transaction), computed in-process, so that a schedule etcd refuses as too large is
reported with its size.

Prints one JSON document. Usage: ``python tests/bench/plan_latency.py [--machines 10000]
[--runs 5] [--http-runs 5] [--interval 2] [--restarts 3] [--period 60] [--store
sqlite|etcd] [--etcd-max-request-bytes N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import signal
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent._ha._etcd import EtcdSettings
from nodeagent._ha._store import COMPRESS_FROM, EtcdStore
from nodeagent._peer import HttpAgentLink
from nodeagent._store import Documents, DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._api import _json_bytes, plan_body
from nodeagent.master._maintenance import MaintenanceSchedule, MaintenanceState
from nodeagent.master._master import Master
from nodeagent.master._plan import machine_key
from nodeagent.master._plan_view import PlanSelect
from tests.bench._benchlib import percentile, terminate
from tests.bench._etcdlib import (
    EtcdMeter,
    etcd_settings,
    master_values,
    require_etcd,
    wait_leading,
)
from tests.bench.ad_ingest import (
    CLAIMS,
    TEMPLATES,
    log_problems,
    node_ad,
    node_ip,
    push_each,
    requests,
    stop_master,
    template_ads,
)
from tests.etcd import EtcdServer
from tests.harness import MasterProcess

NS = 1_000_000_000
WINDOWS = 100
#: etcd's ``--max-request-bytes`` when not given (1.5 MiB).
ETCD_MAX_REQUEST_BYTES = 1_572_864


class StepClock:
    """Wall-clock time that moves only when told."""

    def __init__(self, now: float) -> None:
        self.t = now

    def now(self) -> float:
        return self.t


def in_process_master(store: Documents, clock: StepClock) -> Master:
    """A master in this process on ``store`` and ``clock``, whose calls to agents go
    nowhere (a benchmark's nodes have no agent), ads living an hour."""
    return Master(
        store=store, link=HttpAgentLink(b"k" * 32), clock=clock, ads=AdStore(lifetime=3600)
    )


def schedule(machines: int, now: float) -> dict[str, Any]:
    """``WINDOWS`` one-hour windows, 2 h to 2 h + 99 × 10 min ahead, machines dealt round."""
    return {
        "windows": [
            {
                "machine_ids": [
                    {"hostname": f"node{i:05d}.bench", "ip": node_ip(i)}
                    for i in range(w, machines, WINDOWS)
                ],
                "unavailability": {
                    "start": {"nanoseconds": int((now + 7200 + 600 * w) * NS)},
                    "duration": {"nanoseconds": 3600 * NS},
                },
            }
            for w in range(min(WINDOWS, machines))
        ]
    }


def schedule_values(machines: int, now: float) -> dict[str, int]:
    """The bytes posting :func:`schedule` writes to the store in one transaction: the
    ``maintenance`` document (the state's snapshot) and ``actors`` (each machine's, as
    the Unix socket's ``local``), as JSON the way the stores write it."""
    state = MaintenanceState()
    state.update_schedule(MaintenanceSchedule.from_json(schedule(machines, now)))
    actors = {machine_key(m.id): "local" for m in state.machines()}
    texts = {
        "maintenance": json.dumps(state.snapshot(), separators=(",", ":")).encode(),
        "actors": json.dumps(actors, separators=(",", ":")).encode(),
    }
    sizes = {f"{name}_bytes": len(text) for name, text in texts.items()}
    # etcd is written a value of COMPRESS_FROM bytes or more zlib-compressed
    stored = {
        f"{name}_stored_bytes": len(zlib.compress(text, 6) if len(text) >= COMPRESS_FROM else text)
        for name, text in texts.items()
    }
    return {
        **sizes,
        **stored,
        "both_bytes": sum(sizes.values()),
        "both_stored_bytes": sum(stored.values()),
    }


def post_schedule(master: MasterProcess, machines: int, now: float) -> None:
    posted = master.call("POST", "/maintenance/schedule", json=schedule(machines, now))
    if posted.status_code != 200:
        sizes = schedule_values(machines, now)
        raise RuntimeError(
            f"schedule refused: {posted.status_code} {posted.text[:300]} (it writes "
            f"{sizes['maintenance_bytes']} + {sizes['actors_bytes']} bytes of JSON in one "
            f"transaction, {sizes['both_stored_bytes']} bytes to etcd; see "
            "--etcd-max-request-bytes)"
        )


def summary(seconds: list[float]) -> dict[str, Any]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50": round(percentile(ms, 50), 1),
        "p99": round(percentile(ms, 99), 1),
        "min": round(min(ms), 1),
        "max": round(max(ms), 1),
    }


def check(plan: dict[str, Any], machines: int, *, blockers: bool) -> None:
    rows = plan["machines"]
    if len(rows) != machines or plan["totals"]["without_node"] != 0:
        raise RuntimeError(f"{len(rows)} machines in the plan, {plan['totals']} totals")
    if any(row["expected"] is None for row in rows):
        raise RuntimeError("a machine has no estimate")
    if blockers != all(len(row["blockers"]) == CLAIMS for row in rows):
        raise RuntimeError("blockers are not what was asked")


def check_summary(plan: dict[str, Any], machines: int) -> None:
    """The summary's reply: totals over every machine (those it left ``behind`` counted as
    their share last stood, or not at all), at most 20 rows."""
    totals = plan["totals"]
    counted = totals["machines"]
    if not counted <= machines <= counted + totals["behind"] or len(plan["machines"]) > 20:
        raise RuntimeError(f"{len(plan['machines'])} rows, {totals} totals")
    if plan["matched"] != plan["totals"]["late"]:  # nothing escalates that is on time here
        raise RuntimeError(f"{plan['matched']} rows matched, {plan['totals']['late']} late")


# ---------------------------------------------------------------------------- in-process


def in_process(
    ads: list[dict[str, Any]], now: float, runs: int, tmp: Path, etcd: EtcdServer | None
) -> dict[str, Any]:
    clock = StepClock(now)
    store: Documents
    if etcd is None:
        store = DocumentStore(tmp / "in-process.db")
    else:
        store = EtcdStore(
            EtcdSettings(endpoints=(etcd.url,)),
            "/bench-in-process/master/",
            collections=("drains", "operations"),
        )
    meter = None if etcd is None else EtcdMeter(etcd)
    try:
        master = in_process_master(store, clock)
        for ad in ads:
            master.ads.update(ad, now)
        master.state.update_schedule(MaintenanceSchedule.from_json(schedule(len(ads), now)))
        master.plan()  # makes every forecast, as a running master's reconcile passes do
        result: dict[str, Any] = {}
        if meter is not None:
            meter.start()
            measured = time.perf_counter()
        for blockers in (True, False):
            plan_times, body_times = [], []
            for _ in range(runs):
                clock.t += 1.0
                gc.disable()  # as plan_body does: see _collector_paused
                started = time.perf_counter()
                plan = master.plan(with_blockers=blockers)
                plan_times.append(time.perf_counter() - started)
                check(plan, len(ads), blockers=blockers)
                del plan
                gc.enable()
                clock.t += 1.0
                started = time.perf_counter()
                body = plan_body(master, with_blockers=blockers)
                body_times.append(time.perf_counter() - started)
                check(json.loads(body), len(ads), blockers=blockers)
            suffix = "" if blockers else "_without_blockers"
            result[f"plan{suffix}_ms"] = summary(plan_times)
            result[f"body{suffix}_ms"] = summary(body_times)
        # The summary `nodeagent master plan` asks for: the late rows, at most 20.
        summary_times = []
        for _ in range(runs):
            clock.t += 1.0
            started = time.perf_counter()
            body = plan_body(master, with_blockers=False, late=True, limit=20)
            summary_times.append(time.perf_counter() - started)
        check_summary(json.loads(body), len(ads))
        result["summary_body_ms"] = summary(summary_times)
        # What the maintenance page asks for: the first 2,000 rows, without their blockers.
        page_times = []
        for _ in range(runs):
            clock.t += 1.0
            started = time.perf_counter()
            body = plan_body(master, with_blockers=False, limit=2000)
            page_times.append(time.perf_counter() - started)
        page = json.loads(body)
        counted, behind = page["totals"]["machines"], page["totals"]["behind"]
        if len(page["machines"]) != min(2000, len(ads)) or not (
            counted <= len(ads) <= counted + behind
        ):
            raise RuntimeError(f"{len(page['machines'])} rows, {page['totals']} totals")
        result["page_body_ms"] = summary(page_times)
        result["page_behind"] = behind
        result.update(streamed(master, clock, runs, len(ads)))
        # The preview of the schedule held (POST /v1/maintenance/schedule/preview): every
        # row with its blockers, computed afresh, and its reply encoded, as the server does.
        proposed = MaintenanceSchedule.from_json(schedule(len(ads), now))
        preview_times = []
        for _ in range(runs):
            clock.t += 1.0
            gc.disable()
            started = time.perf_counter()
            preview = _json_bytes(master.preview_schedule(proposed))
            preview_times.append(time.perf_counter() - started)
            gc.enable()
        assert json.loads(preview)["totals"]["machines"] == len(ads)
        result["preview_body_ms"] = summary(preview_times)
        cold, cold_summary = [], []
        for _ in range(max(1, runs // 2)):
            clock.t += 1.0
            for ad in ads:
                master.ads.update(ad, clock.t)
            started = time.perf_counter()
            body = plan_body(master)
            cold.append(time.perf_counter() - started)
            clock.t += 1.0
            for ad in ads:
                master.ads.update(ad, clock.t)
            started = time.perf_counter()
            summary_body = plan_body(master, with_blockers=False, late=True, limit=20)
            cold_summary.append(time.perf_counter() - started)
        check(json.loads(body), len(ads), blockers=True)
        check_summary(json.loads(summary_body), len(ads))
        result["cold_body_ms"] = summary(cold)
        result["cold_summary_body_ms"] = summary(cold_summary)
        if meter is not None:
            calls = meter.since(time.perf_counter() - measured)
            result["etcd_requests"] = calls["etcd_requests"]
        return result
    finally:
        store.close()


def streamed(master: Master, clock: StepClock, runs: int, machines: int) -> dict[str, Any]:
    """The plan streamed as the server makes it, a chunk at a time with the collector held
    off per chunk: as JSON lines (``format=jsonl``), ``stream_first_row_ms`` until the
    first chunk holding a row is made, ``stream_last_row_ms`` until the last,
    ``stream_longest_chunk_ms`` the longest a chunk took (what the loop is held for at
    most); the same of the document the API sends by default (``document_*``, its rows
    counted as the lines' are); ``window_stream_ms`` the whole stream of one window's plan
    (``window=``), whose rows alone are made."""
    times: dict[str, list[float]] = {
        f"{kind}_{figure}_ms": []
        for kind in ("stream", "document")
        for figure in ("first_row", "last_row", "longest_chunk")
    }
    window_times: list[float] = []
    for _ in range(runs):
        for kind, select in (("stream", None), ("document", None), ("stream", "window")):
            clock.t += 1.0
            started = time.perf_counter()
            now = master.clock.now()
            inputs = master.plan_inputs(now)
            chosen = None
            if select is not None:
                start = master.plan_view.scheduled(inputs.statuses)[0].window_start
                chosen = PlanSelect.parse(windows=[repr(start)])
            make = master.plan_view.stream if kind == "stream" else master.plan_view.document
            chunks = make(inputs, now, with_blockers=True, select=chosen)
            first = None
            rows = 0
            longest = 0.0
            while True:
                gc.disable()
                began = time.perf_counter()
                chunk = next(chunks, None)
                longest = max(longest, time.perf_counter() - began)
                gc.enable()
                if chunk is None:
                    break
                # a row's text begins with its machine id (a line: `{"row":` before it)
                made = chunk.count(b'{"machine_id":')
                if first is None and made:
                    first = time.perf_counter() - started
                rows += made
            ended = time.perf_counter() - started
            if select is None:
                assert rows == machines, rows
                times[f"{kind}_first_row_ms"].append(first or ended)
                times[f"{kind}_last_row_ms"].append(ended)
                times[f"{kind}_longest_chunk_ms"].append(longest)
            else:
                assert 0 < rows < machines, rows
                window_times.append(ended)
    return {
        **{name: summary(seconds) for name, seconds in times.items()},
        "window_stream_ms": summary(window_times),
    }


# ---------------------------------------------------------------------------- over HTTP


def churn(
    address: tuple[str, int],
    prepared: list[bytes],
    rate: float,
    *,
    stop: Any,
    pushed: Any,
) -> None:
    """Push the nodes' ads again, round and round, at ``rate`` per second, until ``stop``."""
    tick = 0.1
    per_tick = max(1, round(rate * tick))
    next_at = time.monotonic()
    i = 0
    while not stop.is_set():
        batch = [prepared[(i + k) % len(prepared)] for k in range(per_tick)]
        i += per_tick
        statuses = push_each(address, batch, connections=1)
        with pushed.get_lock():
            pushed.value += statuses.get(200, 0)
        next_at += tick
        stop.wait(max(0.0, next_at - time.monotonic()))


def master_settings(etcd: EtcdServer | None, prefix: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"ad_lifetime": 3600}
    if etcd is not None:
        settings.update(etcd_settings(etcd, prefix))
    return settings


def over_http(
    machines: int, now: float, runs: int, interval: float, tmp: Path, etcd: EtcdServer | None
) -> dict[str, Any]:
    master = MasterProcess(tmp / "master", settings=master_settings(etcd, "/bench-http/"))
    result: dict[str, Any] = {}
    try:
        master.start()
        assert master.proc is not None
        process = psutil.Process(master.proc.pid)
        host, port = master.url.removeprefix("http://").rsplit(":", 1)
        if etcd is not None:
            wait_leading(master)
        # The schedule first: ads that arrive after it are not older than the machines'
        # windows, so no plan fetches them again (from MyAddress, a closed port here).
        post_schedule(master, machines, now)
        if etcd is not None:
            result["etcd_value_bytes"] = master_values(etcd, "/bench-http/")
        started = time.perf_counter()
        prepared = requests(master, int(port), machines, now)
        statuses = push_each((host, int(port)), prepared)
        pushed_in = time.perf_counter() - started
        if statuses != {200: machines}:
            raise RuntimeError(f"ad pushes answered {statuses}")
        result["ads_pushed_in_s"] = round(pushed_in, 2)
        # The reconcile passes make the new nodes' forecasts, up to 500 a pass (a pass a
        # second, plus its own time): wait until they are all made.
        time.sleep(machines / 400 + 5)
        with master.client(master.token("READ")) as client:

            def measure(name: str, blockers: bool, pause: float) -> None:
                times, cpu, size = [], [], 0
                meter = None if etcd is None else EtcdMeter(etcd)
                if meter is not None:
                    meter.start()
                began = time.perf_counter()
                for _ in range(runs):
                    time.sleep(pause)
                    cpu0 = sum(process.cpu_times()[:2])
                    t0 = time.perf_counter()
                    response = client.get(
                        "/v1/maintenance/plan", params={"blockers": str(blockers).lower()}
                    )
                    times.append(time.perf_counter() - t0)
                    cpu.append(sum(process.cpu_times()[:2]) - cpu0)
                    if response.status_code != 200:
                        raise RuntimeError(f"plan: {response.status_code} {response.text[:200]}")
                    size = len(response.content)
                    check(response.json(), machines, blockers=blockers)
                result[f"{name}_ms"] = summary(times)
                result[f"{name}_master_cpu_ms"] = summary(cpu)
                result[f"{name}_reply_bytes"] = size
                if meter is not None:
                    calls = meter.since(time.perf_counter() - began)
                    result[f"{name}_etcd_requests"] = calls["etcd_requests"]

            measure("plan", True, 0.0)
            measure("plan_without_blockers", False, 0.0)
            rate = machines / 60
            stop = multiprocessing.Event()
            pushed = multiprocessing.Value("i", 0)
            pusher = multiprocessing.get_context("fork").Process(
                target=churn,
                args=((host, int(port)), prepared, rate),
                kwargs={"stop": stop, "pushed": pushed},
            )
            pusher.start()
            try:
                started = time.perf_counter()
                measure("plan_under_churn", True, interval)
                measure("plan_without_blockers_under_churn", False, interval)
                elapsed = time.perf_counter() - started
            finally:
                stop.set()
                pusher.join(timeout=30)
                if pusher.is_alive():
                    pusher.kill()
                    pusher.join()
            result["churn_ads_per_s"] = round(pushed.value / elapsed, 1)
        result["master_rss_mib"] = round(process.memory_info().rss / 2**20, 1)
    finally:
        stop_master(master)
    result["master_log_problems"] = log_problems(master)
    return result


def paced(address: tuple[str, int], prepared: list[bytes], rate: float) -> float:
    """Push every prepared ad once at ``rate`` per second; returns the seconds it took."""
    tick = 0.1
    per_tick = max(1, round(rate * tick))
    started = next_at = time.monotonic()
    for i in range(0, len(prepared), per_tick):
        statuses = push_each(address, prepared[i : i + per_tick], connections=4)
        if set(statuses) != {200}:
            raise RuntimeError(f"ad pushes answered {statuses}")
        next_at += tick
        time.sleep(max(0.0, next_at - time.monotonic()))
    return time.monotonic() - started


def after_restart(
    machines: int,
    now: float,
    restarts: int,
    period: float,
    tmp: Path,
    etcd: EtcdServer | None,
) -> dict[str, Any]:
    """The first plans after a master restart (SIGKILL, then started again on its store).

    The schedule is in the master's store; the ads are not: the agents bring them again
    with their next periodic push, spread over their ``update_interval`` (``period``). The
    plan is asked for as soon as the last ad is in: the whole reply (blockers), then the
    summary ``nodeagent master plan`` draws. Then the same with every ad pushed at once
    (as fast as the master takes them), the worst case.
    """
    master = MasterProcess(tmp / "restart", settings=master_settings(etcd, "/bench-restart/"))
    prepared: list[bytes] = []
    result: dict[str, Any] = {"period_s": period}
    times: dict[str, list[float]] = {}
    try:
        master.start()
        if etcd is not None:
            wait_leading(master)
        post_schedule(master, machines, now)
        for run in range(restarts * 2):
            burst = run >= restarts
            assert master.proc is not None
            master.proc.kill()
            master.proc.wait()
            master.start()
            host, port = master.url.removeprefix("http://").rsplit(":", 1)
            if not prepared:
                prepared = requests(master, int(port), machines, now)
            if burst:
                push_each((host, int(port)), prepared)
            else:
                paced((host, int(port)), prepared, machines / period)
            with master.client(master.token("READ")) as client:
                for name, params in (
                    ("plan", {}),
                    ("summary", {"late": "true", "blockers": "false", "limit": "20"}),
                ):
                    t0 = time.perf_counter()
                    response = client.get("/v1/maintenance/plan", params=params)
                    elapsed = time.perf_counter() - t0
                    if response.status_code != 200:
                        raise RuntimeError(f"plan: {response.status_code} {response.text[:200]}")
                    if name == "plan":
                        check(response.json(), machines, blockers=True)
                    else:
                        check_summary(response.json(), machines)
                    key = f"{'burst' if burst else 'paced'}_first_{name}_ms"
                    times.setdefault(key, []).append(elapsed)
    finally:
        stop_master(master)
    result.update({name: summary(values) for name, values in times.items()})
    result["master_log_problems"] = log_problems(master)
    return result


def run(
    machines: int,
    runs: int,
    http_runs: int,
    interval: float,
    restarts: int,
    period: float,
    store: str = "sqlite",
    etcd_max_request_bytes: int | None = None,
) -> dict[str, Any]:
    if store == "etcd":
        require_etcd()
    now = time.time()
    templates = template_ads(now)
    ads = [
        node_ad(templates[i % TEMPLATES], f"node{i:05d}.bench", node_ip(i)) for i in range(machines)
    ]
    on_etcd: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as name,
        contextlib.ExitStack() as stack,
    ):
        tmp = Path(name)
        etcd = None
        if store == "etcd":
            limit = etcd_max_request_bytes
            args = () if limit is None else (f"--max-request-bytes={limit}",)
            etcd = stack.enter_context(EtcdServer(tmp / "etcd", args=args))
            on_etcd = {
                "etcd_max_request_bytes": limit or ETCD_MAX_REQUEST_BYTES,
                "schedule_values": schedule_values(machines, now),
            }
        local = in_process(ads, now, runs, tmp, etcd)
        del ads
        remote = over_http(machines, now, http_runs, interval, tmp, etcd) if http_runs else {}
        restarted = after_restart(machines, now, restarts, period, tmp, etcd) if restarts else {}
    return {
        "benchmark": "plan_latency",
        "store": store,
        **on_etcd,
        "machines": machines,
        "claims_per_node": CLAIMS,
        "windows": min(WINDOWS, machines),
        "target_p50_ms": 250,
        "in_process": local,
        "http": remote,
        "after_restart": restarted,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machines", type=int, default=10_000, help="scheduled machines")
    parser.add_argument("--runs", type=int, default=5, help="in-process calls per variant")
    parser.add_argument("--http-runs", type=int, default=5, help="HTTP requests per variant")
    parser.add_argument(
        "--interval", type=float, default=2.0, help="seconds between requests under churn"
    )
    parser.add_argument("--restarts", type=int, default=3, help="master restarts per variant")
    parser.add_argument(
        "--period", type=float, default=60.0, help="the agents' update_interval after a restart"
    )
    parser.add_argument(
        "--store", choices=("sqlite", "etcd"), default="sqlite", help="the masters' store"
    )
    parser.add_argument(
        "--etcd-max-request-bytes",
        type=int,
        default=None,
        help="etcd's --max-request-bytes (default: etcd's own, 1.5 MiB)",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, terminate)
    with contextlib.suppress(BrokenPipeError):
        figures = run(
            args.machines,
            args.runs,
            args.http_runs,
            args.interval,
            args.restarts,
            args.period,
            args.store,
            args.etcd_max_request_bytes,
        )
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
