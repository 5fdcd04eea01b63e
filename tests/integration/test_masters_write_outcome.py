"""A write the leader could not finish: etcd stopped (SIGSTOP) under a schedule change.

etcd is stopped, the leader is sent a new schedule, and etcd goes on (SIGCONT) after one
of several short delays: before the write times out, in the window where it has timed
out but may still be applied, and after the leader has given up asking. Whatever the
delay, the leader's reply must match what etcd holds (200: the schedule is there; 503
"nothing changed": it is not, and never will be; 503 ``store.outcome_unknown``: either),
and every master, the leader and its followers, must then show what etcd holds.

One etcd and three masters (lease 2 s: the leader's write waits 0.67 s) serve every trial.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.etcd import EtcdServer, have_etcd
from tests.ha import Masters, masters_on
from tests.harness import TLS_CONTEXT, MasterProcess, wait_for
from tests.integration.test_master import window

pytestmark = pytest.mark.integration

#: Seconds from the POST to SIGCONT: before the write's 0.67 s, in the window after it
#: (the write may land), and past the 1.33 s the leader waits in all.
DELAYS = (0.3, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.05, 1.2, 1.6)


@pytest.fixture(scope="module")
def masters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Masters]:
    have_etcd()
    root = tmp_path_factory.mktemp("outcome")
    with EtcdServer(root / "etcd") as etcd, masters_on(root / "masters", etcd) as masters:
        masters.leader()
        yield masters


def _range(masters: Masters, **fields: Any) -> dict[str, Any]:
    key = f"{masters.prefix}master/docs/maintenance".encode()
    body = {"key": base64.b64encode(key).decode(), **fields}
    reply: dict[str, Any] = httpx.post(
        f"{masters.etcd.url}/v3/kv/range", json=body, verify=TLS_CONTEXT
    ).json()
    return reply


def _held(reply: dict[str, Any]) -> set[str]:
    kvs = reply.get("kvs", ())
    if not kvs:
        return set()
    return _hosts(json.loads(base64.b64decode(kvs[0]["value"]))["schedule"])


def etcd_hosts(masters: Masters) -> set[str]:
    """The hosts of the schedule etcd holds."""
    return _held(_range(masters))


def ever_held(masters: Masters) -> set[str]:
    """Every host any schedule etcd ever held named (its history, revision by revision)."""
    now = int(_range(masters)["header"]["revision"])
    found: set[str] = set()
    for revision in range(1, now + 1):
        found |= _held(_range(masters, revision=str(revision)))
    return found


def master_hosts(master: MasterProcess) -> set[str] | None:
    """The hosts of the schedule ``master`` shows (``None``: it did not answer)."""
    try:
        return _hosts(master.call("GET", "/maintenance/schedule", timeout=5).json())
    except httpx.HTTPError:
        return None


def _hosts(schedule: dict[str, Any]) -> set[str]:
    return {m["hostname"] for w in schedule.get("windows", ()) for m in w["machine_ids"]}


def outcome(reply: httpx.Response) -> str:
    """What the reply says of the write: ``written``, ``unknown`` or ``not written``."""
    if reply.status_code == 200:
        return "written"
    if reply.status_code == 503 and "store.outcome_unknown" in reply.text:
        return "unknown"
    return "not written"  # 503 "nothing changed", or no leader / not the leader


def test_the_reply_to_a_write_cut_short_matches_what_etcd_holds(masters: Masters) -> None:
    seen: dict[str, list[float]] = {}
    told: dict[str, str] = {}
    for trial, delay in enumerate(DELAYS):
        leader = masters.leader()
        host = f"t{trial}.test"
        stopped = masters.etcd.proc
        assert stopped is not None
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            stopped.send_signal(signal.SIGSTOP)
            try:
                sent = pool.submit(
                    leader.call, "POST", "/maintenance/schedule", json=window([host], 2e9)
                )
                time.sleep(delay)
            finally:
                stopped.send_signal(signal.SIGCONT)
            reply = sent.result()
        said = outcome(reply)
        told[host] = said
        seen.setdefault(said, []).append(delay)
        if said == "written":
            assert etcd_hosts(masters) == {host}, (delay, reply.text)
        # Every master, the one that answered included, shows what etcd holds.
        try:
            wait_for(
                lambda: all(master_hosts(m) == etcd_hosts(masters) for m in masters.running()),
                timeout=15,
            )
        except TimeoutError:
            shown = [master_hosts(m) for m in masters.running()]
            raise AssertionError(
                f"SIGCONT after {delay} s, told {said!r} ({reply.status_code}): etcd holds "
                f"{etcd_hosts(masters)}, the masters show {shown}"
            ) from None
    # What the callers were told is what etcd ever held: a write called refused never
    # landed, then or later.
    ever = ever_held(masters)
    for host, said in told.items():
        if said == "written":
            assert host in ever, told
        elif said == "not written":
            assert host not in ever, told
    print(f"\noutcomes by delay: {seen}")
