"""Job groups in the model: the name rule, the slot ad's JobGroup, START, snapshots."""

from __future__ import annotations

import json

import pytest

from slots import (
    GROUP_NAME,
    InvalidRequest,
    JobSpec,
    Machine,
    MachinePolicy,
    NotAccepting,
    Resources,
    check_group_name,
)

T0 = 1_000_000.0
TOTAL = Resources(cpus=4, memory=8192)


@pytest.mark.parametrize(
    "name",
    [
        "web",
        "www-data/prod/web",
        "a",
        "9/x",
        "batch.v2/run_7",
        "A-b_c.d",
        "x" * 128,
        "/".join(["ab"] * 40)[:128].rstrip("/"),
    ],
)
def test_good_group_names(name: str) -> None:
    assert check_group_name(name) == name
    assert JobSpec(group=name).group == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/web",
        "web/",
        "www-data//web",
        "-web",
        "web/.prod",
        "web prod",
        "web\tprod",
        "wéb",
        "web\n",
        "x" * 129,
        "a:b",
        'web"',
    ],
)
def test_bad_group_names(name: str) -> None:
    assert not (GROUP_NAME.fullmatch(name) and len(name) <= 128)
    with pytest.raises(InvalidRequest, match="is not a job group"):
        check_group_name(name)
    with pytest.raises(InvalidRequest):
        JobSpec(group=name)


def dynamic(m: Machine, now: float) -> list[dict[str, object]]:
    return [s for s in m.ad(now)["slots"] if s["SlotType"] == "Dynamic"]


def machine(start: str = "true") -> Machine:
    return Machine(host="node1", total=TOTAL, policy=MachinePolicy(start=start), now=T0)


@pytest.mark.parametrize(
    ("group", "published"),
    [(None, None), ("www-data/prod/web", "www-data/prod/web"), ("batch", "batch")],
)
def test_slot_ad_publishes_job_group_only_when_named(
    group: str | None, published: str | None
) -> None:
    m = machine()
    info, _ = m.claim(T0, resources=Resources(cpus=1), spec=JobSpec(owner="u", group=group))
    assert info.spec.group == group
    (slot,) = dynamic(m, T0 + 5)
    if published is None:
        assert "JobGroup" not in slot
    else:
        assert slot["JobGroup"] == published
    assert "JobGroup" not in m.ad(T0 + 5)["machine"]


@pytest.mark.parametrize(
    ("group", "accepted"),
    [("www-data/prod/web", True), ("batch", False), (None, False)],
)
def test_start_expression_sees_the_job_group(group: str | None, accepted: bool) -> None:
    m = machine(start='TARGET.JobGroup =?= "www-data/prod/web"')
    spec = JobSpec(group=group)
    if accepted:
        m.claim(T0, resources=Resources(cpus=1), spec=spec)
    else:
        with pytest.raises(NotAccepting):
            m.claim(T0, resources=Resources(cpus=1), spec=spec)


@pytest.mark.parametrize("group", [None, "www-data/prod/web"])
def test_group_survives_snapshot_and_restore(group: str | None) -> None:
    m = machine()
    m.claim(T0, resources=Resources(cpus=1), spec=JobSpec(group=group), started_at=T0 - 60)
    document = json.loads(json.dumps(m.snapshot()))
    assert ("group" in document["claims"][0]["spec"]) is (group is not None)
    restored = Machine.restore(
        document, host="node1", total=TOTAL, policy=MachinePolicy(), now=T0 + 10
    )
    (info,) = restored.claims(T0 + 10)
    assert info.spec.group == group
    (slot,) = dynamic(restored, T0 + 10)
    assert slot.get("JobGroup") == group
    assert slot["JobStart"] == int(T0 - 60)
    assert slot["TotalJobRunTime"] == 70
