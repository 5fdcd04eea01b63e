"""The agent's ``[attributes]`` table: what loads, what is refused and why, reloads, docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent._settings import ConfigError, reloadable_changes
from nodeagent.agent._config import AgentConfig, load_agent_config
from nodeagent.agent._daemon import machine_policy
from slots import COMPUTED_ATTRIBUTES, COMPUTED_PREFIXES

DOCS = Path(__file__).parents[3] / "docs"


def load(tmp_path: Path, text: str) -> AgentConfig:
    path = tmp_path / "nodeagent.toml"
    path.write_text(text)
    return load_agent_config(
        path, {"HOME": str(tmp_path)}, uid=1000, default_path=tmp_path / "absent.toml"
    )


def test_the_table_loads_into_the_models_policy(tmp_path: Path) -> None:
    config = load(tmp_path, '[attributes]\nZone = "z1"\nRack = "r12"\nRow = 3\nSsd = true\n')
    assert config.attributes == {"Zone": "z1", "Rack": "r12", "Row": 3, "Ssd": True}
    assert machine_policy(config).attributes == (
        ("Rack", "r12"),
        ("Row", 3),
        ("Ssd", True),
        ("Zone", "z1"),
    )
    assert machine_policy(load(tmp_path, "")).attributes == ()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[attributes]\nCpus = 4\n", "attributes: 'Cpus' shadows an attribute the agent computes"),
        ('[attributes]\nstart = "x"\n', "'start' shadows an attribute the agent computes"),
        ('[attributes]\nDrainZone = "x"\n', "'DrainZone' shadows an attribute"),
        ('[attributes]\n"rack-1" = "x"\n', "'rack-1' is not an attribute name"),
        ('[attributes]\n"9" = "x"\n', "'9' is not an attribute name"),
        ("[attributes]\nTrue = 1\n", "'True' is not an attribute name"),
        ('[attributes]\nRack = "a"\nRACK = "b"\n', "are the same ClassAd name"),
        ("[attributes]\nRack = 1.5\n", "attributes.Rack"),
        ('[attributes]\nRack = ["r1"]\n', "attributes.Rack"),
        ("[attributes]\nRack = {a = 1}\n", "attributes.Rack"),
        ('attributes = "Rack"\n', "attributes"),
    ],
)
def test_a_bad_table_is_refused_with_the_defect_named(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text)
    assert any(problem in line for line in e.value.problems), e.value.problems


def test_the_table_is_reloadable(tmp_path: Path) -> None:
    before = load(tmp_path, "")
    after = load(tmp_path, '[attributes]\nRack = "r12"\n')
    changes = reloadable_changes(before, after)
    assert set(changes.applied) == {"attributes"}
    assert changes.ignored == ()


def test_the_references_name_every_reserved_attribute_and_the_rule() -> None:
    configuration = (DOCS / "configuration.md").read_text()
    text = (DOCS / "attributes.md").read_text() + configuration
    assert sorted(n for n in COMPUTED_ATTRIBUTES if f"`{n}`" not in text) == []
    assert "## `[attributes]`" in configuration
    for prefix in COMPUTED_PREFIXES:
        assert f"`{prefix}`" in configuration
