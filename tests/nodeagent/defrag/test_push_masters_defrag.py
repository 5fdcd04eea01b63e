"""The defrag daemon's link to several masters (:class:`HttpDefragLink`), on loopback.

It reads the ads from the first master that answers (in order, passing over one that is
down or answers 5xx, never one that refuses) and pushes its Defrag ad to each.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from nodeagent._auth import generate_key, load_key
from nodeagent._settings import ConfigError
from nodeagent.defrag._config import DefragConfig, load_defrag_config
from nodeagent.defrag._service import HttpDefragLink, MasterCallFailed
from tests.loopback import LoopbackPeer, Reply, Seen, json_reply, listening_socket, serving

SLOT = {"Machine": "n1", "PartitionableSlot": True}


def _answering(name: str) -> LoopbackPeer:
    async def handler(seen: Seen) -> Reply:
        if seen.method == "GET":
            return json_reply(200, {"ads": [{**SLOT, "From": name}]})
        return json_reply(200, {"mode": None, "unavailability": None})

    return LoopbackPeer(handler)


def _status(status: int, code: str) -> LoopbackPeer:
    async def handler(seen: Seen) -> Reply:
        return json_reply(status, {"error": {"code": code, "message": f"{code} here"}})

    return LoopbackPeer(handler)


def _closed_url() -> str:
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    return url


@pytest.fixture
def key(tmp_path: Path) -> bytes:
    generate_key(tmp_path / "pool.key")
    return load_key(tmp_path / "pool.key")


@asynccontextmanager
async def link_to(key: bytes, *urls: str) -> AsyncIterator[HttpDefragLink]:
    link = HttpDefragLink(master_urls=urls, token_file=None, key=key, name="t", timeout=5)
    async with link:
        yield link


# --- reading the ads ------------------------------------------------------------------------


async def test_the_ads_come_from_the_first_master_that_answers(key: bytes) -> None:
    one, two = _answering("one"), _answering("two")
    async with serving(one), serving(two), link_to(key, one.url, two.url) as link:
        for _ in range(2):
            ads = await link.slot_ads()
            assert [ad["From"] for ad in ads] == ["one"]
        assert link.read_from == one.url
        assert two.requests == []


@pytest.mark.parametrize("first", ["down", "500", "503"])
async def test_a_master_down_or_failing_is_passed_over_for_the_next(key: bytes, first: str) -> None:
    failing = _status(int(first), "master.no_leader") if first != "down" else None
    two = _answering("two")
    async with serving(two), link_to(key, "http://127.0.0.1:9", two.url) as link:
        if failing is not None:
            async with serving(failing):
                link.reconfigure(master_urls=(failing.url, two.url), token_file=None, timeout=5)
                ads = await link.slot_ads()
            assert len(failing.requests) == 1
        else:
            link.reconfigure(master_urls=(_closed_url(), two.url), token_file=None, timeout=5)
            ads = await link.slot_ads()
    assert [ad["From"] for ad in ads] == ["two"]
    assert link.read_from == two.url


@pytest.mark.parametrize(
    ("status", "code"), [(401, "auth.unauthenticated"), (403, "auth.forbidden")]
)
async def test_a_refusal_is_not_passed_over(key: bytes, status: int, code: str) -> None:
    refusing, two = _status(status, code), _answering("two")
    async with serving(refusing), serving(two), link_to(key, refusing.url, two.url) as link:
        with pytest.raises(MasterCallFailed) as refused:
            await link.slot_ads()
    assert (refused.value.code, refused.value.status) == (code, status)
    assert two.requests == []  # the same token would be refused there too


@pytest.mark.parametrize("body", [{"nothing": []}, [], {"ads": {}}])
async def test_an_answer_without_ads_is_not_passed_over(key: bytes, body: object) -> None:
    """The master answered (2xx), with something that is not a list of ads."""

    async def handler(seen: Seen) -> Reply:
        return json_reply(200, body)

    odd, two = LoopbackPeer(handler), _answering("two")
    async with serving(odd), serving(two), link_to(key, odd.url, two.url) as link:
        with pytest.raises(MasterCallFailed) as unusable:
            await link.slot_ads()
    assert (unusable.value.code, unusable.value.message) == (
        "master.bad_reply",
        f"{odd.url}/v1/ads: no 'ads' list",
    )
    assert two.requests == []


async def test_no_master_answering_names_each(key: bytes) -> None:
    one, two = _closed_url(), _closed_url()
    async with link_to(key, one, two) as link:
        with pytest.raises(MasterCallFailed) as none:
            await link.slot_ads()
    assert none.value.code == "master.unreachable"
    assert none.value.message.startswith("no master answered: ")
    assert f"{one}: " in none.value.message
    assert f"{two}: " in none.value.message


# --- publishing -----------------------------------------------------------------------------


async def test_the_defrag_ad_goes_to_every_master(key: bytes) -> None:
    one, two = _answering("one"), _answering("two")
    async with serving(one), serving(two), link_to(key, one.url, two.url + "/") as link:
        await link.publish({"MyType": "Defrag", "Name": "defrag-t"})
        await link.publish({"MyType": "Defrag", "Name": "defrag-t"})
    for master in (one, two):
        assert [(seen.method, seen.target) for seen in master.requests] == [("POST", "/v1/ads")] * 2
        assert json.loads(master.requests[0].body)["machine"]["Name"] == "defrag-t"
        assert master.connections == 1  # kept between the pushes


async def test_a_master_down_keeps_the_ad_from_no_other_and_is_named(key: bytes) -> None:
    one, down = _answering("one"), _closed_url()
    async with serving(one), link_to(key, down, one.url) as link:
        with pytest.raises(MasterCallFailed) as failed:
            await link.publish({"MyType": "Defrag"})
    assert len(one.requests) == 1
    assert failed.value.code == "master.unreachable"
    assert failed.value.message.startswith(f"not taken by {down}: ")
    assert one.url not in failed.value.message


# --- configuration --------------------------------------------------------------------------


def test_master_url_or_master_urls_not_both(tmp_path: Path) -> None:
    assert DefragConfig(master_urls=("http://m1:9622/", "http://m2:9622")).masters == (
        "http://m1:9622",
        "http://m2:9622",
    )
    assert DefragConfig(master_url="http://m1:9622").masters == ("http://m1:9622",)
    assert DefragConfig().masters == ()
    path = tmp_path / "defrag.toml"
    path.write_text('master_url = "http://m1:9622"\nmaster_urls = ["http://m2:9622"]\n')
    with pytest.raises(ConfigError, match=r"give master_url \(one master\) or master_urls"):
        load_defrag_config(path, {}, default_path=tmp_path / "none.toml")


def test_the_link_takes_one_way_of_naming_the_masters(key: bytes) -> None:
    with pytest.raises(ValueError, match="master_url"):
        HttpDefragLink(token_file=None, key=key, name="t")
    with pytest.raises(ValueError, match="master_url"):
        HttpDefragLink(
            master_url="http://a:1", master_urls=("http://b:1",), token_file=None, key=key, name="t"
        )
    link = HttpDefragLink(master_url="http://a:1/", token_file=None, key=key, name="t")
    assert link.master_urls == ("http://a:1",)
