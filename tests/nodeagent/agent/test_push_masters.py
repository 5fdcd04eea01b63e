"""The agent's pushes to several masters (:mod:`nodeagent.agent._push`).

On virtual time with masters in memory (:class:`FakeMaster`, the link's ``connect``
seam): each master is pushed to at exact instants whatever the others do. On loopback
with real HTTP: a master that answers 307 is not followed, and one that is down does not
keep the others from their ads.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent._master_calls import MaintenanceWord
from nodeagent._moving_values import split_slots, static_digest
from nodeagent._peer import MASTER_REPLY_LIMIT, Credentials, PeerCallFailed
from nodeagent._settings import ConfigError
from nodeagent.agent._agent import Agent
from nodeagent.agent._config import MasterLinkConfig, load_agent_config
from nodeagent.agent._push import PUSH_TIMEOUT_S, MasterLink
from nodeagent.agent._store import Store
from nodeagent.testing import FakeBehaviour, FakeRunner
from slots import JobSpec, Machine, MachinePolicy, Resources
from tests.loopback import LoopbackPeer, Reply, Seen, json_reply, listening_socket, serving

EPOCH = 1_800_000_000.0
A, B, C = "http://m1:9622", "http://m2:9622", "http://m3:9622"


@dataclass(eq=False)
class FakeMaster:
    """A master in memory. ``down``: every push fails at once (no reply); ``hang``: a push
    gets no reply until the link's timeout; ``delay``: seconds before each reply.
    ``mode`` is what it says of the machine. ``pushes`` are the instants (trio time) at which
    it received an ad; ``sessions`` counts the sessions opened, ``closed`` those ended."""

    url: str
    mode: str | None = None
    down: bool = False
    hang: bool = False
    delay: float = 0.0
    pushes: list[float] = field(default_factory=list)
    attempts: list[float] = field(default_factory=list)
    ads: list[Any] = field(default_factory=list)
    sessions: int = 0
    closed: int = 0
    #: Answer with the digest of the slot ads held, and take pushes of the moving values
    #: alone for it (409 ``ad.slots_unknown`` for another), as a master does.
    holds_slots: bool = False
    held: str | None = None

    async def __aenter__(self) -> FakeMaster:
        self.sessions += 1
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.closed += 1

    async def aclose(self) -> None:
        self.closed += 1

    async def request(
        self,
        method: str,
        url: str,
        *,
        credentials: Credentials | None = None,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        max_reply: int | None = None,
    ) -> Any:
        assert (method, url, params) == ("POST", self.url + "/v1/ads", None)
        assert max_reply == MASTER_REPLY_LIMIT  # the answer is a few hundred bytes
        self.attempts.append(trio.current_time())
        if self.down:
            raise PeerCallFailed("master.unreachable", f"cannot reach the master at {self.url}")
        if self.hang:
            await trio.sleep(PUSH_TIMEOUT_S)
            raise PeerCallFailed("master.timeout", f"the master at {self.url} did not answer")
        await trio.sleep(self.delay)
        if self.holds_slots and "moved_on" in json:
            if json["moved_on"]["slots_digest"] != self.held:
                self.ads.append(("refused", json))
                raise PeerCallFailed("ad.slots_unknown", "push the whole ad", status=409)
        elif self.holds_slots:
            self.held = static_digest(split_slots(json["slots"])[0]).hex()[::-1]  # its own
        self.pushes.append(trio.current_time())
        self.ads.append(json)
        reply: dict[str, Any] = {"mode": self.mode, "unavailability": None}
        if self.holds_slots:
            reply["slots_digest"] = self.held
        return reply


@dataclass
class Pool:
    """The masters by URL and the link's ``connect``."""

    masters: dict[str, FakeMaster]

    def connect(self, url: str) -> FakeMaster:
        return self.masters[url]


@dataclass
class Rig:
    agent: Agent
    link: MasterLink
    pool: Pool
    t0: float

    def times(self, url: str) -> list[float]:
        return [round(t - self.t0, 6) for t in self.pool.masters[url].pushes]

    def attempts(self, url: str) -> list[float]:
        return [round(t - self.t0, 6) for t in self.pool.masters[url].attempts]

    async def until(self, offset: float) -> None:
        await trio.sleep_until(self.t0 + offset)


def _agent(tmp_path: Path, store: Store, clock: TrioClock) -> Agent:
    machine = Machine(
        host="push.test", total=Resources(cpus=4, memory=4096), policy=MachinePolicy(), now=EPOCH
    )
    return Agent(
        machine=machine,
        store=store,
        runner=FakeRunner(lambda spec: FakeBehaviour(), clock=clock),
        clock=clock,
        execute_dir=tmp_path / "execute",
    )


@asynccontextmanager
async def rig(tmp_path: Path, *masters: FakeMaster, **config: Any) -> AsyncIterator[Rig]:
    """A link pushing to ``masters`` (``urls``, unless ``config`` says otherwise), running."""
    clock = TrioClock(EPOCH)
    pool = Pool({m.url: m for m in masters})
    settings = {"urls": tuple(pool.masters), "update_interval": 60.0, **config}
    with Store(tmp_path / "agent.db") as store:
        agent = _agent(tmp_path, store, clock)
        link = MasterLink(agent, MasterLinkConfig(**settings), clock=clock, connect=pool.connect)
        async with trio.open_nursery() as nursery:
            t0 = trio.current_time()
            await nursery.start(link.run)
            yield Rig(agent=agent, link=link, pool=pool, t0=t0)
            nursery.cancel_scope.cancel()


# --- configuration --------------------------------------------------------------------------


def test_url_is_the_one_master_shorthand_and_urls_names_several() -> None:
    assert MasterLinkConfig(url=A + "/").masters == (A,)
    assert MasterLinkConfig(urls=(A, B + "/")).masters == (A, B)
    assert MasterLinkConfig().masters == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'url = "{A}"\nurls = ["{B}"]', "give url (one master) or urls (several masters)"),
        (f'urls = ["{A}", "{A}/"]', f"urls names {A} more than once"),
        ('urls = ["ftp://m1"]', "is not an http:// or https:// URL"),
    ],
)
def test_a_master_list_that_cannot_be_meant_is_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f"[master]\n{text}\n")
    with pytest.raises(ConfigError, match="master") as refused:
        load_agent_config(path, {}, default_path=tmp_path / "none.toml")
    assert message in str(refused.value)


def test_the_masters_come_from_the_environment_as_a_json_list(tmp_path: Path) -> None:
    env = {"NODEAGENT_MASTER__URLS": json.dumps([A, B])}
    config = load_agent_config(None, env, default_path=tmp_path / "none.toml")
    assert config.master.masters == (A, B)


# --- on virtual time ------------------------------------------------------------------------


async def test_every_master_gets_every_push_at_its_instant(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path, FakeMaster(A), FakeMaster(B)) as r:
        await r.until(150)
        assert r.times(A) == r.times(B) == [0, 60, 120]
        assert r.link.pushes == 6
        assert [r.link.masters[url].pushes for url in (A, B)] == [3, 3]
        assert all(m.sessions == 1 and m.closed == 0 for m in r.pool.masters.values())
    assert [m.closed for m in r.pool.masters.values()] == [1, 1]  # each connection closed


def _kinds(master: FakeMaster) -> list[str]:
    """What each push to ``master`` was: ``whole``, ``moved_on`` or ``refused`` (a push of
    the moving values alone it answered 409)."""
    return [
        "refused" if isinstance(ad, tuple) else "moved_on" if "moved_on" in ad else "whole"
        for ad in master.ads
    ]


async def test_the_moving_values_alone_go_while_the_master_holds_the_slot_ads(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """After a whole push the master took, the next pushes carry the slot ads' moving
    values alone, for the digest the master gave; a claim started sends the whole ad
    again; a master that answers 409 ``ad.slots_unknown`` (restarted) gets the whole ad in
    the same push; a master that gives no digest always gets the whole ad."""
    holding, plain = FakeMaster(A, holds_slots=True), FakeMaster(B)
    async with rig(tmp_path, holding, plain) as r:
        await r.until(130)
        assert _kinds(holding) == ["whole", "moved_on", "moved_on"]
        assert _kinds(plain) == ["whole", "whole", "whole"]
        ad, moved = r.agent.ad(), holding.ads[-1]  # the ad now, 10 s after that push
        assert moved["machine"]["Name"] == ad["machine"]["Name"]
        assert moved["machine"]["MyCurrentTime"] == int(EPOCH) + 120
        assert moved["moved_on"]["slots_digest"] == holding.held
        moving = split_slots(ad["slots"])[1]
        assert [list(v) for v in moved["moved_on"]["moving"]] == [list(v) for v in moving]
        assert moved["moved_on"]["moving"][0]["MyCurrentTime"] == int(EPOCH) + 120
        r.agent.machine.claim(EPOCH + 130, resources=Resources(cpus=1), spec=JobSpec())
        await r.until(250)
        assert _kinds(holding)[3:] == ["whole", "moved_on"]  # the claim, then a minute on
        holding.held = None  # as a master started anew
        await r.until(310)
        assert _kinds(holding)[5:] == ["refused", "whole"]
        assert holding.pushes == sorted(holding.pushes)
        assert r.link.masters[A].pushes == len(holding.pushes) == 6
        assert r.link.masters[A].failures == 0
        await r.until(370)
        assert _kinds(holding)[7:] == ["moved_on"]
        assert _kinds(plain) == ["whole"] * 7


async def test_a_master_that_is_down_delays_no_push_to_the_others(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path, FakeMaster(A, down=True), FakeMaster(B)) as r:
        await r.until(200)
        assert r.times(B) == [0, 60, 120, 180]
        # its own retry: 1 s, doubling, at most update_interval apart
        assert r.attempts(A) == [0, 1, 3, 7, 15, 31, 63, 123, 183]
        assert r.link.masters[A].failing == 9
        r.pool.masters[A].down = False
        await r.until(250)
        assert r.times(A) == [243]  # the next retry takes it
        assert r.link.masters[A].failing == 0
        assert r.times(B) == [0, 60, 120, 180, 240]


async def test_a_slow_master_delays_no_push_to_the_others(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path, FakeMaster(A, hang=True), FakeMaster(B), ad_debounce=0.25) as r:
        await r.until(5)
        r.agent.set_maintenance("DRAINING", None)  # a change while A hangs
        await r.until(70)
        assert r.times(B) == [0, 5.25, 65.25]
        # A is still in its first push when the change comes: it pushes again once that
        # one failed (the change is pending), then retries on its own
        assert r.attempts(A)[:3] == [0, 10.25, 22.25]
        assert r.link.masters[A].pushes == 0


async def test_a_change_is_pushed_to_every_master_once_debounced(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    masters = FakeMaster(A, mode="DRAINING"), FakeMaster(B, mode="DRAINING")
    async with rig(tmp_path, *masters, ad_debounce=0.5) as r:
        await r.until(10)
        # two changes in a moment (the ad's window), pushed together once
        r.agent.set_maintenance("DRAINING", {"Start": 1})
        r.agent.set_maintenance("DRAINING", {"Start": 2})
        await r.until(59)
        # the masters' first word is a change (pushed again at 0.5: their ads show it);
        # at 10.5 they say what they said before: taken without a push
        assert r.times(A) == r.times(B) == [0, 0.5, 10.5]
        assert r.agent.ad()["machine"]["MaintenanceMode"] == "DRAINING"
        assert "Unavailability" not in r.agent.ad()["machine"]
        await r.until(71)
        assert r.times(A) == [0, 0.5, 10.5, 70.5]


async def test_the_most_recent_reply_wins_and_disagreeing_masters_set_off_no_loop(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    leader = FakeMaster(A, mode="DRAINING")
    behind = FakeMaster(B, mode="UP", delay=1.0)  # answers a second later
    async with rig(tmp_path, leader, behind) as r:
        await r.until(0.5)
        assert r.agent.ad()["machine"]["MaintenanceMode"] == "DRAINING"
        await r.until(59)
        # A: first push, the echo of its own new word, the echo of B's; B: first, echo
        assert r.times(A) == [0, 0.25, 1.25]
        assert r.times(B) == [1, 2.25]
        assert r.agent.ad()["machine"]["MaintenanceMode"] == "UP"  # B answered last
        assert r.link.masters[A].said == MaintenanceWord(mode="DRAINING", unavailability=None)
        # the ad each master received last shows the word the agent held then
        assert leader.ads[-1]["machine"]["MaintenanceMode"] == "UP"
        await r.until(62.5)
        assert (len(leader.pushes), len(behind.pushes)) == (4, 2)


async def test_a_reload_adds_and_drops_masters(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    a, b, c = FakeMaster(A), FakeMaster(B), FakeMaster(C)
    async with rig(tmp_path, a, b, c) as r:
        await r.until(10)
        r.link.reconfigure(MasterLinkConfig(urls=(A,), update_interval=60.0))
        await r.until(15)
        assert list(r.link.masters) == [A]
        assert (b.closed, c.closed) == (1, 1)  # their connections closed
        assert r.times(A) == [0, 10.25]  # the reload pushes at once (debounced)
        r.link.reconfigure(MasterLinkConfig(url=B, update_interval=60.0))
        await r.until(20)
        assert list(r.link.masters) == [B]
        assert (a.closed, b.sessions) == (1, 2)  # B: a task and a session of its own again
        assert r.times(B) == [0, 15]  # a new master is pushed to at once
        await r.until(80)
        assert r.times(B) == [0, 15, 75]
        assert r.times(A) == [0, 10.25]
        assert r.times(C) == [0]


async def test_push_now_pushes_to_every_master_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = TrioClock(EPOCH)
    pool = Pool({A: FakeMaster(A, delay=3), B: FakeMaster(B, down=True), C: FakeMaster(C, delay=3)})
    with Store(tmp_path / "agent.db") as store:
        agent = _agent(tmp_path, store, clock)
        config = MasterLinkConfig(urls=(A, B, C))
        link = MasterLink(agent, config, clock=clock, connect=pool.connect)
        start = trio.current_time()
        assert await link.push_now() == 2
        assert trio.current_time() - start == 3  # together, not one after another
        assert (link.pushes, link.failures) == (2, 1)


async def test_no_master_no_push(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with rig(tmp_path, urls=()) as r:
        await r.until(120)
        assert r.link.masters == {}
        assert await r.link.push_now() == 0


# --- on loopback ----------------------------------------------------------------------------


async def _ok(seen: Seen) -> Reply:
    return json_reply(200, {"mode": "DRAINING", "unavailability": None})


async def test_a_master_that_redirects_the_ad_is_not_followed_and_the_others_get_it(
    tmp_path: Path,
) -> None:
    """Ads are taken by every master: a 307 to a push is that master's failure, never a
    redirect to follow (the agent pushes to the leader anyway, by its own URL)."""
    leader = LoopbackPeer(_ok)

    async def follower(seen: Seen) -> Reply:
        return json_reply(
            307,
            {
                "error": {
                    "code": "master.not_leader",
                    "message": "this master does not lead",
                    "leader": leader.url,
                }
            },
        )

    other = LoopbackPeer(follower)
    clock = TrioClock(EPOCH)
    with Store(tmp_path / "agent.db") as store:
        agent = _agent(tmp_path, store, clock)
        async with serving(leader), serving(other):
            config = MasterLinkConfig(urls=(other.url,), update_interval=0.05)
            link = MasterLink(agent, config, clock=clock)
            async with trio.open_nursery() as nursery:
                await nursery.start(link.run)
                with trio.fail_after(5):
                    await other.wait_until(lambda: len(other.requests) >= 2)
                assert leader.requests == []  # not followed
                link.reconfigure(config.model_copy(update={"urls": (other.url, leader.url)}))
                with trio.fail_after(5):
                    await leader.wait_until(lambda: len(leader.requests) >= 3)
                nursery.cancel_scope.cancel()
        assert {seen.target for seen in leader.requests + other.requests} == {"/v1/ads"}
        assert link.masters[other.url].pushes == 0
        assert link.masters[other.url].failures >= 2
        assert link.masters[leader.url].pushes >= 2  # the last reply may be on its way
        assert leader.connections == 1  # its own kept connection
        assert agent.ad()["machine"]["MaintenanceMode"] == "DRAINING"


async def test_a_master_down_on_loopback_keeps_no_ad_from_the_other(tmp_path: Path) -> None:
    up = LoopbackPeer(_ok)
    closed = listening_socket()
    down_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()
    clock = TrioClock(EPOCH)
    with Store(tmp_path / "agent.db") as store:
        agent = _agent(tmp_path, store, clock)
        async with serving(up):
            config = MasterLinkConfig(urls=(down_url, up.url), update_interval=0.05)
            link = MasterLink(agent, config, clock=clock)
            async with trio.open_nursery() as nursery:
                await nursery.start(link.run)
                with trio.fail_after(5):
                    await up.wait_until(lambda: len(up.requests) >= 5)
                nursery.cancel_scope.cancel()
            assert link.masters[down_url].failures >= 1
            assert link.masters[down_url].pushes == 0
            assert up.connections == 1
