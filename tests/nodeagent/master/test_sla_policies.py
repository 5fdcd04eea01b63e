"""The master's SLA policies: the sla_file (TOML, JSON, refusals, reloads) and the book
(the API's policies over the file's, durable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent._settings import ConfigError, reloadable_changes
from nodeagent._store import DocumentStore
from nodeagent.master._config import MasterConfig, load_master_config
from nodeagent.master._sla import SlaKind, SlaPolicy
from nodeagent.master._sla_policies import SlaBook

TOML = """
[policies."www-data/prod/web"]
kind = "percentage"
percentage = 95
duration = "30m"
size = 100

[policies.cache]
kind = "coordinator"
url = "http://127.0.0.1:8080/may"
"""


def load(tmp_path: Path, sla: str, *, name: str = "sla.toml") -> MasterConfig:
    (tmp_path / name).write_text(sla)
    config = tmp_path / "master.toml"
    config.write_text(
        f'state_dir = "{tmp_path}"\nruntime_dir = "{tmp_path}"\nsla_file = "{tmp_path / name}"\n'
    )
    return load_master_config(
        config, {"HOME": str(tmp_path)}, uid=1000, default_path=tmp_path / "absent.toml"
    )


def test_toml_and_json_files(tmp_path: Path) -> None:
    config = load(tmp_path, TOML)
    assert config.sla_file is not None
    web, cache = sorted(config.sla_file.policies, key=lambda p: p.group, reverse=True)
    assert web == SlaPolicy(
        group="www-data/prod/web", kind=SlaKind.PERCENTAGE, percentage=95, duration=1800, size=100
    )
    assert cache.url == "http://127.0.0.1:8080/may"
    as_json = load(
        tmp_path,
        '{"policies": {"batch": {"kind": "count", "count": 3, "duration": 60}}}',
        name="sla.json",
    )
    assert as_json.sla_file is not None
    assert [p.count for p in as_json.sla_file.policies] == [3]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[policies.web]\nkind = "count"\n', "web: a count policy needs 1 <= count"),
        ('[policies.web]\nkind = "count"\ncount = 2\nduration = "soon"\n', "invalid duration"),
        ('[policies."a//b"]\nkind = "count"\ncount = 2\n', "is not a job group"),
        ("[other]\nx = 1\n", "the file holds one table, 'policies'"),
        ("policies = 3\n", "'policies' maps each group"),
        ("[policies\n", "is not valid TOML"),
    ],
)
def test_a_bad_file_is_a_configuration_error(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    assert problem in str(caught.value)


def test_a_missing_file_is_a_configuration_error(tmp_path: Path) -> None:
    config = tmp_path / "master.toml"
    config.write_text(f'state_dir = "{tmp_path}"\nsla_file = "{tmp_path / "none.toml"}"\n')
    with pytest.raises(ConfigError, match="cannot read"):
        load_master_config(config, {"HOME": str(tmp_path)}, uid=1000)


def test_a_changed_file_is_a_reloadable_change(tmp_path: Path) -> None:
    before = load(tmp_path, TOML)
    same = load(tmp_path, TOML)
    assert reloadable_changes(before, same).applied == {}
    after = load(tmp_path, TOML.replace("percentage = 95", "percentage = 90"))
    changes = reloadable_changes(before, after)
    assert set(changes.applied) == {"sla_file"}


def test_the_apis_policy_wins_and_deleting_it_brings_the_files_back(tmp_path: Path) -> None:
    config = load(tmp_path, TOML)
    store = DocumentStore(tmp_path / "master.db")
    try:
        book = SlaBook(store=store, file=config.sla_file)
        book.load()
        assert book.policies()["www-data/prod/web"].percentage == 95
        assert book.source("www-data/prod/web") == "file"
        mine = SlaPolicy(group="www-data/prod/web", kind=SlaKind.COUNT, count=2, duration=5)
        book.put(mine)
        assert book.policies()["www-data/prod/web"] == mine
        assert book.policy_json(mine)["source"] == "api"
        again = SlaBook(store=store, file=config.sla_file)
        again.load()  # durable
        assert again.policies()["www-data/prod/web"] == mine
        assert again.delete("www-data/prod/web")
        assert again.policies()["www-data/prod/web"].percentage == 95
        assert not again.delete("cache")  # the file's: not the API's to delete
        assert set(again.policies()) == {"www-data/prod/web", "cache"}
    finally:
        store.close()
