"""The defrag daemon's configuration (``nodeagent defrag run``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, model_validator

from nodeagent._ha._options import EtcdOptions
from nodeagent._paths import DEFAULT_DEFRAG_CONFIG_PATH
from nodeagent._settings import (
    READ_TIMEOUT,
    Duration,
    ListenAddress,
    _check_url,
    _DaemonSettings,
    _field,
    _load_settings,
    _master_urls,
    _service_defaults,
)

__all__ = ["DEFAULT_DEFRAG_CONFIG_PATH", "ClassAdExpression", "DefragConfig", "load_defrag_config"]


def _check_expression(value: str) -> str:
    from slots import SlotsError, validate_expression  # noqa: PLC0415  (loads classad2)

    try:
        validate_expression(value)
    except SlotsError as exc:
        raise ValueError(exc.message) from None
    return value


ClassAdExpression = Annotated[str, AfterValidator(_check_expression)]


"""A ClassAd expression, checked with the official parser when the configuration loads."""


class DefragConfig(_DaemonSettings, EtcdOptions):
    """The configuration of ``nodeagent defrag run``. Load with :func:`load_defrag_config`.

    The policy keys are HTCondor's ``DEFRAG_*`` knobs in snake case, with its defaults;
    ``docs/defrag.md`` says where they differ. The expressions are evaluated against the
    partitionable slot ads the master serves (``GET /v1/ads?slots=true``): they carry the
    machine-wide attributes (``TotalCpus``, ``ExpectedMachine*``, ``DrainReason``, …) and
    the free resources of the machine (``Cpus``, ``Memory``, …).
    """

    name: str = _field(
        "main",
        reload=False,
        description="DEFRAG_NAME: the daemon's drains carry the reason 'Defrag <name>'",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
    )
    interval: Duration = _field(
        600.0, reload=True, description="DEFRAG_INTERVAL: seconds between cycles", gt=0
    )
    draining_machines_per_hour: float = _field(
        0.0,
        reload=True,
        description="DEFRAG_DRAINING_MACHINES_PER_HOUR: drains started per hour; 0 = none",
        ge=0,
        allow_inf_nan=False,
    )
    max_concurrent_draining: int = _field(
        -1,
        reload=True,
        description="DEFRAG_MAX_CONCURRENT_DRAINING: machines draining at once; -1 = no limit",
        ge=-1,
    )
    max_whole_machines: int = _field(
        -1,
        reload=True,
        description="DEFRAG_MAX_WHOLE_MACHINES: stop when this many are whole; -1 = no limit",
        ge=-1,
    )
    whole_machine_expr: ClassAdExpression = _field(
        "Cpus == TotalCpus",
        reload=True,
        description="DEFRAG_WHOLE_MACHINE_EXPR, on the partitionable slot ad",
    )
    requirements: ClassAdExpression = _field(
        "PartitionableSlot && Offline =!= True",
        reload=True,
        description="DEFRAG_REQUIREMENTS: which machines may be drained",
    )
    rank: ClassAdExpression = _field(
        "-ExpectedMachineGracefulDrainingBadput",
        reload=True,
        description="DEFRAG_RANK: higher is drained first",
    )
    schedule: Literal["graceful", "quick", "fast"] = _field(
        "graceful", reload=True, description="DEFRAG_SCHEDULE: the drains' schedule"
    )
    cancel_requirements: ClassAdExpression | None = _field(
        None,
        reload=True,
        description="DEFRAG_CANCEL_REQUIREMENTS: cancel the daemon's drains that match; "
        "default: the whole machine expression",
    )
    draining_start_expr: ClassAdExpression | None = _field(
        None,
        reload=True,
        description="DEFRAG_DRAINING_START_EXPR: which jobs a machine takes while the "
        "daemon drains it (evicted as soon as the original jobs are gone); default: none",
    )
    max_badput_increase: float = _field(
        1.5,
        reload=True,
        description="Skip a candidate whose fresh badput exceeds its ad's by this factor",
        ge=1,
        allow_inf_nan=False,
    )
    update_interval: Duration = _field(
        60.0,
        reload=True,
        description="DEFRAG_UPDATE_INTERVAL: seconds between pushes of the Defrag ad",
        gt=0,
    )
    master_url: Annotated[str | None, AfterValidator(_check_url)] = _field(
        None, reload=True, description="The master's base URL (it or master_urls to run)"
    )
    master_urls: tuple[Annotated[str, AfterValidator(_check_url)], ...] = _field(
        (),
        reload=True,
        description="The base URLs of several masters: ads read from the first that answers, "
        "the Defrag ad pushed to each",
    )
    token_file: Path | None = _field(
        None,
        reload=True,
        description="File holding a DAEMON token for the masters (reads ads, pushes the ad)",
    )
    agent_timeout: Duration = _field(
        10.0, reload=True, description="Timeout of each request to the master or an agent", gt=0
    )
    state_dir: Path = _field(..., reload=False, description="Durable state directory")
    runtime_dir: Path = _field(..., reload=False, description="Runtime directory (socket)")
    listen: tuple[ListenAddress, ...] = _field(
        ("127.0.0.1:9623",), reload=False, description="TCP listeners 'host:port'; [] = none"
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

    @model_validator(mode="after")
    def _one_or_several(self) -> Self:
        _master_urls(self.master_url, self.master_urls, one="master_url", several="master_urls")
        return self

    @property
    def masters(self) -> tuple[str, ...]:
        """The masters' base URLs, without a trailing ``/`` (empty: none, cannot run)."""
        return _master_urls(
            self.master_url, self.master_urls, one="master_url", several="master_urls"
        )

    @classmethod
    def _computed_defaults(
        cls, state: Mapping[str, Any], environ: Mapping[str, str], uid: int
    ) -> dict[str, Any]:
        defaults = _service_defaults(state, environ, uid, "nodeagent-defrag")
        defaults.pop("audit_log", None)
        return defaults


def load_defrag_config(
    path: Path | None,
    env: Mapping[str, str] = os.environ,
    *,
    uid: int | None = None,
    default_path: Path = DEFAULT_DEFRAG_CONFIG_PATH,
) -> DefragConfig:
    """Load the defrag daemon's configuration (as :func:`load_agent_config` does the agent's)."""
    return _load_settings(
        DefragConfig,
        path,
        default_path=default_path,
        environ=env,
        uid=os.geteuid() if uid is None else uid,
    )
