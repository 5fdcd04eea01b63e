"""The master's configuration (``nodeagent master run``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, field_serializer, field_validator

from nodeagent._ha._options import EtcdOptions
from nodeagent._paths import DEFAULT_MASTER_CONFIG_PATH
from nodeagent._settings import (
    READ_TIMEOUT,
    Duration,
    ListenAddress,
    _DaemonSettings,
    _field,
    _load_settings,
    _service_defaults,
)
from nodeagent.master._events import EventFilter
from nodeagent.master._sla_policies import SlaFile, read_sla_file
from slots import InvalidRequest

__all__ = ["DEFAULT_MASTER_CONFIG_PATH", "MasterConfig", "NotifyEntry", "load_master_config"]


class NotifyEntry(BaseModel):
    """One ``[[notify]]`` entry: a webhook that gets the master's events
    (:mod:`nodeagent.master._notify`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    types: tuple[str, ...] = ()
    secret_file: Path
    timeout: Duration = 10.0

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parsed = urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"a webhook's url is http:// or https://, not {url!r}")
        if parsed.username or parsed.password:
            raise ValueError("a webhook's url holds no user or password (sign with secret_file)")
        return url

    @field_validator("types")
    @classmethod
    def _known_types(cls, types: tuple[str, ...]) -> tuple[str, ...]:
        try:
            EventFilter.parse(types=",".join(types))
        except InvalidRequest as exc:
            raise ValueError(exc.message) from exc
        return types

    @field_validator("secret_file")
    @classmethod
    def _readable_secret(cls, path: Path) -> Path:
        try:
            secret = path.read_bytes().rstrip(b"\r\n")
        except OSError as exc:
            raise ValueError(f"the webhook's secret_file cannot be read: {exc}") from exc
        if len(secret) < 16:
            raise ValueError(
                f"the webhook's secret in {path} is shorter than 16 bytes: make one with "
                "'openssl rand -hex 32 > FILE'"
            )
        return path

    @field_validator("timeout")
    @classmethod
    def _positive(cls, timeout: float) -> float:
        if not timeout > 0:
            raise ValueError("a webhook's timeout is a positive duration")
        return timeout


class MasterConfig(_DaemonSettings, EtcdOptions):
    """The configuration of ``nodeagent master run``. Load with :func:`load_master_config`."""

    state_dir: Path = _field(..., reload=False, description="Durable state directory")
    runtime_dir: Path = _field(..., reload=False, description="Runtime directory")
    listen: tuple[ListenAddress, ...] = _field(
        ("127.0.0.1:9622",), reload=False, description="TCP listeners 'host:port'"
    )
    read_timeout: Duration = _field(
        READ_TIMEOUT,
        reload=False,
        description="A connection whose request stalls this long (head or body) is closed",
        gt=0,
    )
    tls_cert: Path | None = _field(None, reload=False, description="TLS certificate (PEM)")
    tls_key: Path | None = _field(None, reload=False, description="TLS private key (PEM)")
    key_file: Path = _field(
        ...,
        reload=False,
        description="Pool key (shared with the agents); default: <state_dir>/pool.key",
    )
    audit_log: Path = _field(
        ..., reload=False, description="Audit log; default: <state_dir>/audit.log"
    )
    ad_lifetime: Duration = _field(
        300.0,
        reload=True,
        description="An ad not refreshed for this long shows its node as lost",
        gt=0,
    )
    reboot_grace: Duration = _field(
        1800.0,
        reload=True,
        description="A node whose last ad said it was shutting down is shown as rebooting, "
        "not lost, for this long past its ad lifetime",
        ge=0,
    )
    drain_policy: Literal["just_in_time", "immediate"] = _field(
        "just_in_time",
        reload=True,
        description="When the master starts a scheduled machine's drain",
    )
    drain_margin: Duration = _field(
        60.0,
        reload=True,
        description="Just in time: aim to be empty this long before the window",
        ge=0,
    )
    escalation: Literal["quick", "fast", "none"] = _field(
        "quick", reload=True, description="What a node not empty when its window starts gets"
    )
    on_all_accepted: Literal["drain_now", "wait"] = _field(
        "drain_now",
        reload=True,
        description="A DRAINING machine whose every job group has accepted its notice: "
        "drain_now starts its drain at once, wait keeps it just in time",
    )
    up_after_window: bool = _field(
        False,
        reload=True,
        description="Bring a DOWN machine UP by itself once its window has ended and its "
        "node's health check passes (false: it stays DOWN until 'master up', as in Mesos)",
    )
    reconcile_interval: Duration = _field(
        1.0, reload=True, description="Seconds between passes over the schedule", gt=0
    )
    agent_timeout: Duration = _field(
        10.0, reload=True, description="Timeout of the master's requests to agents", gt=0
    )
    metrics_require_auth: bool = _field(
        True, reload=True, description="Whether /metrics needs a READ token"
    )
    allow_pool_daemon_tokens: bool = _field(
        False,
        reload=True,
        description="Take ads pushed with DAEMON tokens that name no node (migration only)",
    )
    sla_file: Annotated[SlaFile | None, BeforeValidator(read_sla_file)] = _field(
        None,
        reload=True,
        description="SLA policies of job groups (TOML or JSON), read at start and on SIGHUP",
    )
    events_kept: int = _field(
        10_000,
        reload=False,
        description="Events the master keeps in its store for subscribers that resume "
        "(GET /v1/events); older ones are dropped",
        ge=100,
        le=1_000_000,
    )
    notify: tuple[NotifyEntry, ...] = _field(
        (),
        reload=False,
        description="Webhooks: [[notify]] url, types, secret_file, timeout; each gets the "
        "events its types match, signed, in order, at least once",
    )
    sla_coordinator_timeout: Duration = _field(
        5.0, reload=True, description="Seconds a coordinator of a job group has to answer", gt=0
    )
    ingest_workers: int = _field(
        0,
        reload=False,
        description="Worker processes that parse, check and pack the agents' ad pushes on "
        "cores of their own (0: the master does it; a pool of tens of thousands of nodes: "
        "the cores the master can spare)",
        ge=0,
        le=64,
    )
    ingest_worker_nice: int = _field(
        5,
        reload=False,
        description="Niceness the ingest workers add to the master's: on a host whose cores "
        "are all busy the master's loop (its answers, passes and plans) goes first, and "
        "the workers take the rest (0: as the master)",
        ge=0,
        le=19,
    )

    @field_serializer("sla_file")
    def _sla_file_path(self, value: SlaFile | None) -> str | None:
        """Dumped as the configuration says it: the file's path, not the policies read."""
        return None if value is None else str(value.path)

    @classmethod
    def _computed_defaults(
        cls, state: Mapping[str, Any], environ: Mapping[str, str], uid: int
    ) -> dict[str, Any]:
        return _service_defaults(state, environ, uid, "nodeagent-master")


def load_master_config(
    path: Path | None,
    env: Mapping[str, str] = os.environ,
    *,
    uid: int | None = None,
    default_path: Path = DEFAULT_MASTER_CONFIG_PATH,
) -> MasterConfig:
    """Load the master's configuration (as :func:`load_agent_config` does the agent's)."""
    return _load_settings(
        MasterConfig,
        path,
        default_path=default_path,
        environ=env,
        uid=os.geteuid() if uid is None else uid,
    )
