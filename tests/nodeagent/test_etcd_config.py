"""The etcd keys of the master's and the defrag daemon's configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeagent._settings import ConfigError
from nodeagent._store import StoreError
from nodeagent.defrag._config import load_defrag_config
from nodeagent.master._config import MasterConfig, load_master_config

SYSTEMD = Path(__file__).parents[2] / "systemd"


def write(tmp_path: Path, **keys: Any) -> Path:
    import json

    path = tmp_path / "daemon.toml"
    lines = [f'state_dir = "{tmp_path / "state"}"', f'runtime_dir = "{tmp_path / "run"}"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"store": "etcd"}, "store = 'etcd' needs etcd_endpoints"),
        ({"store": "etcd", "etcd_endpoints": ["etcd:2379"]}, "is not an http:// or https:// URL"),
        (
            {"store": "etcd", "etcd_endpoints": ["http://e:2379"], "etcd_cert_file": "/c"},
            "etcd_cert_file needs etcd_key_file",
        ),
        (
            {"store": "etcd", "etcd_endpoints": ["http://e:2379"], "etcd_user": "u"},
            "etcd_user needs etcd_password_file",
        ),
        ({"store": "zookeeper"}, "store"),
        ({"leader_ttl": 1}, "leader_ttl"),
    ],
)
def test_an_incomplete_etcd_configuration_is_refused(
    tmp_path: Path, keys: dict[str, Any], message: str
) -> None:
    for load in (load_master_config, load_defrag_config):
        with pytest.raises(ConfigError, match=message):
            load(write(tmp_path, **keys))


def test_the_default_is_the_embedded_store() -> None:
    config = MasterConfig(
        state_dir=Path("/s"), runtime_dir=Path("/r"), key_file=Path("/k"), audit_log=Path("/a")
    )
    assert config.store == "sqlite"
    assert config.etcd_keys("master") == "/nodeagent/master/"


def test_the_example_of_three_masters_loads() -> None:
    config = load_master_config(SYSTEMD / "master-etcd.toml.example")
    assert config.store == "etcd"
    assert len(config.etcd_endpoints) == 3
    assert config.advertise_url == "https://master1.example:9622"


def test_the_etcd_password_is_read_from_its_file(tmp_path: Path) -> None:
    secret = tmp_path / "etcd.password"
    secret.write_text("correct horse battery staple\n")
    config = load_master_config(
        write(
            tmp_path,
            store="etcd",
            etcd_endpoints=["http://e:2379"],
            etcd_user="nodeagent",
            etcd_password_file=str(secret),
            etcd_prefix="/pool-a",
        )
    )
    settings = config.etcd_settings()
    assert (settings.user, settings.password) == ("nodeagent", "correct horse battery staple")
    assert config.etcd_keys("defrag", "main") == "/pool-a/defrag/main/"
    secret.unlink()
    with pytest.raises(StoreError, match="etcd_password_file"):
        config.etcd_settings()
