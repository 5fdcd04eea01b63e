"""The references in docs/ name everything the code defines."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from nodeagent.agent._config import AgentConfig
from nodeagent.master._config import MasterConfig

DOCS = Path(__file__).parents[2] / "docs"


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            keys.extend(_keys(kind, f"{name}."))
        else:
            keys.append(prefix + name)
    return keys


def test_configuration_reference_lists_every_key() -> None:
    text = (DOCS / "configuration.md").read_text()
    keys = _keys(AgentConfig) + _keys(MasterConfig)
    missing = [k for k in keys if f"`{k.rsplit('.', 1)[-1]}`" not in text]
    assert missing == []
    for section in ("[resources]", "[policy]", "[master]"):
        assert f"`{section}`" in text


def test_attribute_reference_lists_every_published_attribute() -> None:
    from slots import JobSpec, Machine, MachinePolicy, Resources, Schedule

    def machine() -> Machine:
        m = Machine(host="h", total=Resources(cpus=4), policy=MachinePolicy(), now=0.0)
        m.claim(0.0, resources=Resources(cpus=1), spec=JobSpec(job_max_vacate_time=5))
        m.set_maintenance("DRAINING", {"Start": 10, "Duration": 5})
        return m

    draining = machine()
    draining.start_draining(1.0, schedule=Schedule.QUICK, deadline=100, commit=True)
    pending = machine()
    pending.start_draining(1.0, schedule=Schedule.GRACEFUL)
    names: set[str] = set()
    for m in (draining, pending):
        ad = m.ad(3.0)
        names = names.union(ad["machine"], *ad["slots"])
    assert {"VacateTimeRemaining", "DrainTransactionExpires", "Draining"} <= names
    text = (DOCS / "attributes.md").read_text()
    assert sorted(n for n in names if f"`{n}`" not in text) == []
