"""The master's ad store: matching Mesos machine ids to nodes, as ads come and go."""

from __future__ import annotations

from typing import Any

from nodeagent.master._adstore import AdStore

NOW = 1_800_000_000.0


def ad(name: str, host: str, ip: str | None) -> dict[str, Any]:
    machine: dict[str, Any] = {"Name": name, "Machine": host}
    if ip is not None:
        machine["MachineIp"] = ip
    return {"machine": machine, "slots": []}


def names(store: AdStore, hostname: str | None, ip: str | None) -> list[str]:
    return [entry.name for entry in store.find(hostname, ip)]


def test_find_follows_every_ad_that_arrives_or_is_forgotten() -> None:
    store = AdStore(lifetime=60)
    store.update(ad("n1", "N1.test", "10.0.0.1"), NOW)
    store.update(ad("n2", "n2.test", "10.0.0.2"), NOW)
    # Asked once, so that a stale answer would be there to be returned.
    queries: list[tuple[str | None, str | None]] = [
        ("n1.test", None),
        ("N1.TEST", "10.0.0.1"),
        ("n1.test", "10.0.0.9"),
        (None, "10.0.0.1"),
        (None, "10.0.0.9"),
        ("n3.test", None),
    ]
    steps: list[tuple[str, Any, list[list[str]]]] = [
        ("start", None, [["n1"], ["n1"], [], ["n1"], [], []]),
        ("update", ad("n1", "n1.test", "10.0.0.9"), [["n1"], [], ["n1"], [], ["n1"], []]),
        ("update", ad("n1b", "N1.Test", None), [["n1", "n1b"], [], ["n1"], [], ["n1"], []]),
        ("update", ad("n3", "n3.test", "10.0.0.1"),
         [["n1", "n1b"], [], ["n1"], ["n3"], ["n1"], ["n3"]]),
        ("forget", "n1", [["n1b"], [], [], ["n3"], [], ["n3"]]),
    ]  # fmt: skip
    for kind, arg, expected in steps:
        if kind == "update":
            store.update(arg, NOW)
        elif kind == "forget":
            store.forget(arg)
        assert [names(store, h, i) for h, i in queries] == expected, (kind, arg)


def test_find_answers_with_the_latest_entry_of_a_node() -> None:
    store = AdStore(lifetime=60)
    store.update(ad("n1", "n1.test", "10.0.0.1"), NOW)
    first = store.find("n1.test", "10.0.0.1")[0]
    store.update(ad("n1", "n1.test", "10.0.0.1"), NOW + 5)
    latest = store.find("n1.test", "10.0.0.1")[0]
    assert latest is not first
    assert latest.received_at == NOW + 5
