"""The configuration keys of a daemon that keeps its state in etcd (masters, defrag daemons).

A daemon's top-level configuration inherits :class:`EtcdOptions`: ``store`` (``sqlite``,
the embedded default, or ``etcd``), where etcd is and how to speak to it, the leader's
lease and the URL this daemon gives as leader. None is reloadable: a daemon changes store
or cluster only by a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Self

from pydantic import AfterValidator, BaseModel, model_validator

from nodeagent._settings import Duration, _check_url, _field
from nodeagent._store import StoreError

if TYPE_CHECKING:
    from nodeagent._ha._etcd import EtcdSettings

__all__ = ["EtcdOptions"]


class EtcdOptions(BaseModel):
    """``store`` and the ``etcd_*`` keys (docs/configuration.md, docs/high-availability.md)."""

    store: Literal["sqlite", "etcd"] = _field(
        "sqlite",
        reload=False,
        description="Where the state lives: one daemon's SQLite file, or etcd shared by several",
    )
    etcd_endpoints: tuple[Annotated[str, AfterValidator(_check_url)], ...] = _field(
        (), reload=False, description="etcd's client URLs (store = 'etcd')"
    )
    etcd_prefix: str = _field(
        "/nodeagent/", reload=False, description="The daemons' keys in etcd start with this"
    )
    etcd_ca_file: Path | None = _field(
        None, reload=False, description="CA certificate(s) that verify etcd's members (PEM)"
    )
    etcd_cert_file: Path | None = _field(
        None, reload=False, description="This daemon's client certificate for etcd (PEM)"
    )
    etcd_key_file: Path | None = _field(
        None, reload=False, description="The private key of etcd_cert_file (PEM)"
    )
    etcd_user: str | None = _field(None, reload=False, description="etcd user to log in as")
    etcd_password_file: Path | None = _field(
        None, reload=False, description="File holding etcd_user's password"
    )
    etcd_timeout: Duration = _field(
        2.0, reload=False, description="Seconds each call to etcd may take (all endpoints)", gt=0
    )
    leader_ttl: Duration = _field(
        5.0,
        reload=False,
        description="The leader's lease in etcd (whole seconds, at least 2): how long the "
        "others wait for a leader that died",
        ge=2,
    )
    advertise_url: Annotated[str | None, AfterValidator(_check_url)] = _field(
        None,
        reload=False,
        description="This daemon's URL, given to clients sent to the leader; default: its "
        "first TCP listener",
    )

    @model_validator(mode="after")
    def _etcd_complete(self) -> Self:
        if self.store == "etcd" and not self.etcd_endpoints:
            raise ValueError("store = 'etcd' needs etcd_endpoints (etcd's client URLs)")
        if self.etcd_cert_file is not None and self.etcd_key_file is None:
            raise ValueError("etcd_cert_file needs etcd_key_file")
        if self.etcd_user is not None and self.etcd_password_file is None:
            raise ValueError("etcd_user needs etcd_password_file")
        return self

    def etcd_settings(self) -> EtcdSettings:
        """How to speak to etcd; raises :class:`~nodeagent._store.StoreError` when the
        password file cannot be read."""
        from nodeagent._ha._etcd import EtcdSettings  # noqa: PLC0415  (httpx: only when used)

        password = None
        if self.etcd_password_file is not None:
            try:
                password = self.etcd_password_file.read_text(encoding="utf-8").rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise StoreError(
                    f"cannot read etcd_password_file {self.etcd_password_file}: {exc}"
                ) from None
        return EtcdSettings(
            endpoints=self.etcd_endpoints,
            ca_file=self.etcd_ca_file,
            cert_file=self.etcd_cert_file,
            key_file=self.etcd_key_file,
            user=self.etcd_user,
            password=password,
            timeout=self.etcd_timeout,
        )

    def etcd_keys(self, *parts: str) -> str:
        """The prefix of this daemon's keys: ``<etcd_prefix>/<parts>/``."""
        return "/".join([self.etcd_prefix.rstrip("/"), *parts]) + "/"
