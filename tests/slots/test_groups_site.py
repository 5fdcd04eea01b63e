"""Site attributes in the model: the rule, the ads, START, reloads."""

from __future__ import annotations

from typing import Any

import pytest

from slots import (
    COMPUTED_ATTRIBUTES,
    COMPUTED_PREFIXES,
    HealthPolicy,
    InvalidRequest,
    JobSpec,
    Machine,
    MachinePolicy,
    NotAccepting,
    OnCompletion,
    Resources,
    Schedule,
    check_site_attributes,
)

T0 = 1_000_000.0
TOTAL = Resources(cpus=4, memory=8192)
SITE = check_site_attributes({"Rack": "r12", "Zone": "z1", "Row": 3, "Ssd": True})


@pytest.mark.parametrize(
    ("attributes", "pairs"),
    [
        ({}, ()),
        ({"Rack": "r12"}, (("Rack", "r12"),)),
        ({"Zone": "z1", "Rack": "r12"}, (("Rack", "r12"), ("Zone", "z1"))),
        ({"_x": 0, "Ssd": False}, (("Ssd", False), ("_x", 0))),
        ({"Big": 2**63 - 1, "Small": -(2**63)}, (("Big", 2**63 - 1), ("Small", -(2**63)))),
        ({"Site": ""}, (("Site", ""),)),
        ({"A" * 64: 1}, (("A" * 64, 1),)),
    ],
)
def test_good_site_attributes(attributes: dict[str, Any], pairs: Any) -> None:
    assert check_site_attributes(attributes) == pairs
    assert MachinePolicy(attributes=pairs).attributes == pairs


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        ({"9rack": "x"}, "is not an attribute name"),
        ({"Rack-1": "x"}, "is not an attribute name"),
        ({"": "x"}, "is not an attribute name"),
        ({"A" * 65: 1}, "is not an attribute name"),
        ({"true": 1}, "is not an attribute name"),
        ({"TARGET": 1}, "is not an attribute name"),
        ({"Cpus": 1}, "shadows an attribute the agent computes"),
        ({"cpus": 1}, "shadows an attribute the agent computes"),
        ({"JOBGROUP": "x"}, "shadows an attribute the agent computes"),
        ({"Start": True}, "shadows an attribute the agent computes"),
        ({"DrainFoo": "x"}, "shadows an attribute the agent computes"),
        ({"healthy": "x"}, "shadows an attribute the agent computes"),
        ({"Rack": "r1", "RACK": "r2"}, "are the same ClassAd name"),
        ({"Rack": 1.5}, "a float value, not"),
        ({"Rack": None}, "a NoneType value, not"),
        ({"Rack": ["r1"]}, "a list value, not"),
        ({"Rack": 2**63}, "is not a 64-bit integer"),
        ({"Rack": "r\n1"}, "printable"),
        ({"Rack": "x" * 257}, "printable"),
    ],
)
def test_bad_site_attributes(attributes: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidRequest, match=problem):
        check_site_attributes(attributes)


def test_every_defect_is_named_at_once() -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_site_attributes({"Cpus": 1, "9x": 2, "Rack": 1.5})
    assert caught.value.message.count(";") == 2


def test_a_policy_refuses_unsorted_or_unchecked_pairs() -> None:
    with pytest.raises(InvalidRequest):
        MachinePolicy(attributes=(("Zone", "z1"), ("Rack", "r12")))
    with pytest.raises(InvalidRequest):
        MachinePolicy(attributes=(("Cpus", 1),))


def machine(attributes: Any = SITE, *, start: str = "true") -> Machine:
    health = HealthPolicy(passes=1, interval=30.0)
    policy = MachinePolicy(
        attributes=attributes, start=start, hooks=frozenset({"reboot"}), health=health
    )
    return Machine(host="node1", total=TOTAL, policy=policy, now=T0)


def test_the_machine_ad_and_every_slot_ad_carry_them() -> None:
    m = machine()
    m.claim(T0, resources=Resources(cpus=1), spec=JobSpec(group="g"))
    ad = m.ad(T0 + 1)
    for one in (ad["machine"], *ad["slots"]):
        assert {k: one[k] for k in ("Rack", "Zone", "Row", "Ssd")} == {
            "Rack": "r12",
            "Zone": "z1",
            "Row": 3,
            "Ssd": True,
        }


@pytest.mark.parametrize(
    ("start", "accepted"),
    [('MY.Rack == "r12"', True), ('Rack == "r7"', False), ("Row > 2 && Ssd", True)],
)
def test_start_sees_them_in_my(start: str, accepted: bool) -> None:
    m = machine(start=start)
    if accepted:
        m.claim(T0, resources=Resources(cpus=1), spec=JobSpec())
    else:
        with pytest.raises(NotAccepting):
            m.claim(T0, resources=Resources(cpus=1), spec=JobSpec())


def test_a_reloaded_policy_changes_them_at_once() -> None:
    m = machine()
    m.set_policy(T0 + 1, MachinePolicy(attributes=check_site_attributes({"Rack": "r7"})))
    ad = m.ad(T0 + 2)["machine"]
    assert ad["Rack"] == "r7"
    assert "Zone" not in ad
    m.set_policy(T0 + 3, MachinePolicy())
    assert "Rack" not in m.ad(T0 + 4)["machine"]


def _computed(name: str) -> bool:
    return name in COMPUTED_ATTRIBUTES or name.startswith(COMPUTED_PREFIXES)


def test_every_attribute_the_machine_computes_is_reserved() -> None:
    """Ads in many states (claims, a drain with a hook, the health gate, a maintenance
    window): every name they carry but the site attributes is a reserved one."""
    m = machine()
    one, _ = m.claim(
        T0, resources=Resources(cpus=1), spec=JobSpec(group="g", job_max_vacate_time=50)
    )
    two, _ = m.claim(T0, resources=Resources(cpus=1), spec=JobSpec())
    m.set_maintenance("DRAINING", {"start": int(T0) + 100, "duration": 60})
    seen: set[str] = set()

    def look(now: float) -> None:
        ad = m.ad(now)
        seen.update(*(set(a) for a in [ad["machine"], *ad["slots"]]))

    look(T0 + 1)
    m.start_draining(
        T0 + 2, schedule=Schedule.QUICK, on_completion=OnCompletion.HOOK, hook="reboot", commit=True
    )
    m.tick(T0 + 3)
    look(T0 + 3)
    m.job_exited(T0 + 4, one.claim_id)
    m.job_exited(T0 + 4, two.claim_id)
    m.tick(T0 + 5)
    look(T0 + 5)
    site = {name for name, _ in SITE}
    assert {"JobGroup", "DrainHookName", "HealthState", "VacateTimeRemaining"} <= seen
    assert {name for name in seen - site if not _computed(name)} == set()
