"""The master's API as the agents and the defrag daemons speak it
(:mod:`nodeagent._master_calls`): what each call sends, the largest reply it reads, and
what it makes of the reply."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nodeagent._master_calls import (
    MaintenanceWord,
    MasterCalls,
    PushReply,
    UnusableReply,
    unavailability_from_mesos,
)
from nodeagent._peer import (
    AGENT_REPLY_LIMIT,
    MASTER_ADS_REPLY_LIMIT,
    MASTER_REPLY_LIMIT,
    Credentials,
    PeerCallFailed,
    TokenFile,
)

URL = "http://m1:9622"
S = 1_000_000_000


@dataclass
class FakeMaster:
    """Records each request and answers ``reply`` (or raises it)."""

    reply: Any
    sent: list[dict[str, Any]] = field(default_factory=list)

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
        self.sent.append(
            {
                "method": method,
                "url": url,
                "credentials": credentials,
                "json": json,
                "params": params,
                "max_reply": max_reply,
            }
        )
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply


AD = {"machine": {"Name": "n1"}, "slots": []}


@pytest.mark.parametrize(
    ("call", "reply", "sent"),
    [
        (lambda m: m.push_ad(AD), {"mode": "UP"},
         {"method": "POST", "url": URL + "/v1/ads", "json": AD, "params": None,
          "max_reply": MASTER_REPLY_LIMIT}),
        (lambda m: m.slot_ads(), {"ads": []},
         {"method": "GET", "url": URL + "/v1/ads", "json": None, "params": {"slots": "true"},
          "max_reply": MASTER_ADS_REPLY_LIMIT}),
        (lambda m: m.slot_ads(constraint="PartitionableSlot =?= true"), {"ads": []},
         {"method": "GET", "url": URL + "/v1/ads", "json": None,
          "params": {"slots": "true", "constraint": "PartitionableSlot =?= true"},
          "max_reply": MASTER_ADS_REPLY_LIMIT}),
        (lambda m: m.machine_ads("n1.test"), {"slots": []},
         {"method": "GET", "url": URL + "/v1/ads/n1.test", "json": None, "params": None,
          "max_reply": AGENT_REPLY_LIMIT}),
        # a machine's name is one path segment, whatever it holds
        (lambda m: m.machine_ads("a/b?c"), {"slots": []},
         {"method": "GET", "url": URL + "/v1/ads/a%2Fb%3Fc", "json": None, "params": None,
          "max_reply": AGENT_REPLY_LIMIT}),
    ],
)  # fmt: skip
async def test_each_call_sends_its_request_with_its_cap_and_the_token(
    call: Any, reply: Any, sent: dict[str, Any], tmp_path: Path
) -> None:
    master = FakeMaster(reply)
    token = TokenFile(tmp_path / "token", peer="master")
    await call(MasterCalls(peer=master, url=URL, credentials=token))
    assert master.sent == [{**sent, "credentials": token}]


@pytest.mark.parametrize(
    ("reply", "word"),
    [
        ({"mode": "DRAINING", "unavailability": {"start": {"nanoseconds": 5 * S}}},
         MaintenanceWord(mode="DRAINING", unavailability={"Start": 5})),
        ({"mode": "DOWN", "unavailability": {"start": {"nanoseconds": 5 * S},
                                             "duration": {"nanoseconds": 3 * S + 1}}},
         MaintenanceWord(mode="DOWN", unavailability={"Start": 5, "Duration": 3})),
        ({"mode": "UP", "unavailability": None}, MaintenanceWord(mode="UP", unavailability=None)),
        # what is not a mode or a window says none
        ({"mode": 3, "unavailability": {"start": {}}}, MaintenanceWord(mode=None,
                                                                     unavailability=None)),
        ({}, MaintenanceWord(mode=None, unavailability=None)),
        # a reply that is not an object says nothing (the push was taken all the same)
        ([], None),
        (None, None),
    ],
)  # fmt: skip
async def test_a_push_reads_the_master_s_word(reply: Any, word: MaintenanceWord | None) -> None:
    assert await MasterCalls(peer=FakeMaster(reply), url=URL).push_ad(AD) == PushReply(word)


DIGEST = "0123456789abcdef" * 2


@pytest.mark.parametrize(
    ("reply", "digest"),
    [
        ({"mode": "UP", "slots_digest": DIGEST}, DIGEST),
        # what is not 32 lower-case hexadecimal digits is no digest: the next push is whole
        ({"mode": "UP", "slots_digest": DIGEST.upper()}, None),
        ({"mode": "UP", "slots_digest": DIGEST[:-1]}, None),
        ({"mode": "UP", "slots_digest": DIGEST + "\n"}, None),
        ({"mode": "UP", "slots_digest": 12}, None),
        ({"mode": "UP", "slots_digest": None}, None),
        ({"mode": "UP"}, None),
        ([DIGEST], None),
    ],
)  # fmt: skip
async def test_a_push_reads_the_digest_of_the_slot_ads_held(reply: Any, digest: str | None) -> None:
    said = await MasterCalls(peer=FakeMaster(reply), url=URL).push_ad(AD)
    assert said.slots_digest == digest


@pytest.mark.parametrize(
    ("window", "ad"),
    [
        ({"start": {"nanoseconds": 1_800_000_000 * S}}, {"Start": 1_800_000_000}),
        ({"start": {"nanoseconds": 1.5 * S}, "duration": {"nanoseconds": "60000000000"}},
         {"Start": 1, "Duration": 60}),
        ({"start": {"nanoseconds": -1}}, {"Start": -1}),
        ({"start": {"nanoseconds": "x"}}, None),
        ({"start": {}}, None),
        ({"start": 5}, None),
        ({"duration": {"nanoseconds": S}}, None),
        ({"start": {"nanoseconds": S}, "duration": {}}, None),
        ([], None),
        (None, None),
    ],
)  # fmt: skip
def test_unavailability_from_mesos(window: Any, ad: dict[str, int] | None) -> None:
    assert unavailability_from_mesos(window) == ad


@pytest.mark.parametrize(
    ("reply", "ads"),
    [
        ({"ads": [{"Name": "a"}, 3, None, {"Name": "b"}]}, [{"Name": "a"}, {"Name": "b"}]),
        ({"ads": []}, []),
    ],
)
async def test_slot_ads_keeps_the_objects(reply: Any, ads: list[dict[str, Any]]) -> None:
    assert await MasterCalls(peer=FakeMaster(reply), url=URL).slot_ads() == ads


@pytest.mark.parametrize(
    ("call", "reply", "message"),
    [
        (lambda m: m.slot_ads(), {"slots": []}, f"{URL}/v1/ads: no 'ads' list"),
        (lambda m: m.slot_ads(), [], f"{URL}/v1/ads: no 'ads' list"),
        (lambda m: m.slot_ads(), {"ads": {}}, f"{URL}/v1/ads: no 'ads' list"),
        (lambda m: m.machine_ads("n1"), {"ads": []}, f"{URL}/v1/ads/n1: no 'slots' list"),
        (lambda m: m.machine_ads("n1"), "x", f"{URL}/v1/ads/n1: no 'slots' list"),
    ],
)
async def test_a_reply_without_the_document_asked_for_is_unusable(
    call: Any, reply: Any, message: str
) -> None:
    with pytest.raises(UnusableReply) as err:
        await call(MasterCalls(peer=FakeMaster(reply), url=URL))
    assert (err.value.code, err.value.message, err.value.status) == (
        "master.bad_reply",
        message,
        None,
    )
    assert isinstance(err.value, PeerCallFailed)


async def test_the_machine_s_ads_keep_the_objects_and_failures_pass_through() -> None:
    reply = {"machine": {}, "slots": [{"Name": "slot1@n1"}, "x"]}
    assert await MasterCalls(peer=FakeMaster(reply), url=URL).machine_ads("n1") == [
        {"Name": "slot1@n1"}
    ]
    refused = PeerCallFailed("auth.forbidden", "no", 403)
    with pytest.raises(PeerCallFailed) as err:
        await MasterCalls(peer=FakeMaster(refused), url=URL).machine_ads("n1")
    assert err.value is refused
