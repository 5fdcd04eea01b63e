"""``nodeagent defrag run``: the defrag daemon, on the shared :mod:`nodeagent._lifecycle`.

Starts in order: the pool key (shared with the agents: the daemon signs its requests to
them with it; it must exist), the store (the pacing of the drain rate), a local Unix
socket (ADMINISTRATOR) and the TCP listeners serving ``GET /v1/stats`` (``listen = []``:
none), the service (cycles and pushes of the Defrag ad); then ``READY=1``.

With ``store = "etcd"`` two or more daemons of one name run for availability: they keep
the pacing in etcd (``<etcd_prefix>/defrag/<name>/``) and elect a leader with a lease, as
the masters do (:mod:`nodeagent._ha._leadership`); only the leader runs the cycles and pushes
the Defrag ad, from the pacing its predecessors wrote. ``GET /v1/stats`` on each says
whether it leads (``DefragIsLeader``) and which one does (``DefragLeader``).
SIGTERM/SIGINT stop it at once; SIGHUP reloads the policy, the master link and the
intervals (the name, directories, listeners and key stay as they were).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp

from nodeagent import __version__
from nodeagent._auth import (
    AuthError,
    Principal,
    Scope,
    Unauthenticated,
    principal_from_authorization,
    require,
)
from nodeagent._clock import Clock, WallClock
from nodeagent._ha._etcd import AsyncEtcd
from nodeagent._ha._leadership import Election, EtcdTasks, Fence, lease_ttl
from nodeagent._ha._store import EtcdStore
from nodeagent._lifecycle import (
    DaemonSpec,
    Listening,
    Opened,
    Program,
    serve_daemon,
    tls_files,
)
from nodeagent._serving._gate import Gate, Rule
from nodeagent._serving._http import auth_error_response, error_body
from nodeagent._serving._hypercorn import advertised_url
from nodeagent._settings import ConfigChanges, ConfigError, default_ip
from nodeagent._store import Documents, DocumentStore
from nodeagent._when import in_words
from nodeagent.defrag._config import DefragConfig, load_defrag_config
from nodeagent.defrag._policy import DefragPolicy
from nodeagent.defrag._service import DefragLink, DefragService, HttpDefragLink
from slots import Schedule, render_long

__all__ = ["BODY_LIMIT", "DefragDaemon", "build_defrag_app", "defrag_policy", "run_defrag"]

#: The largest request body the defrag daemon reads (64 KiB): its API takes none.
BODY_LIMIT = 64 << 10

log = logging.getLogger("nodeagent.defrag")

_UNIX = "nodeagent.unix"


def defrag_policy(config: DefragConfig) -> DefragPolicy:
    """The service's policy from the configuration."""
    return DefragPolicy(
        name=config.name,
        interval=config.interval,
        draining_machines_per_hour=config.draining_machines_per_hour,
        max_concurrent_draining=config.max_concurrent_draining,
        max_whole_machines=config.max_whole_machines,
        whole_machine_expr=config.whole_machine_expr,
        requirements=config.requirements,
        rank=config.rank,
        schedule=Schedule(config.schedule),
        cancel_requirements=config.cancel_requirements,
        draining_start_expr=config.draining_start_expr,
        max_badput_increase=config.max_badput_increase,
    )


_NEEDS_MASTER = "master_url (or master_urls) is required: the defrag daemon reads the master's ads"


def _http_link(config: DefragConfig, key: bytes) -> HttpDefragLink:
    if not config.masters:
        raise ConfigError(_NEEDS_MASTER)
    return HttpDefragLink(
        master_urls=config.masters,
        token_file=config.token_file,
        key=key,
        name=config.name,
        timeout=config.agent_timeout,
    )


def build_defrag_app(service: DefragService, *, key: bytes | None) -> FastAPI:
    """The defrag daemon's API: ``/healthz``, and ``GET /v1/stats`` and its OpenAPI
    document (READ), behind the gate (:class:`~nodeagent._serving._gate.Gate`: the token checked
    from the headers, a body of at most :data:`BODY_LIMIT` bytes, a refused body's
    connection closed)."""
    app = FastAPI(
        title="nodeagent defrag API",
        version=__version__,
        summary="The defrag daemon's statistics.",
        openapi_url=None,  # served below, behind READ like every path but /healthz
        docs_url=None,
        redoc_url=None,
    )

    def allowed(request: Request, scope: Scope) -> None:
        if request.scope.get(_UNIX):
            return
        if key is None:
            raise Unauthenticated("this listener accepts no tokens (no pool key)")
        who: Principal = principal_from_authorization(
            request.headers.get("authorization"), key, service.clock.now()
        )
        require(who, scope)

    app.add_exception_handler(AuthError, auth_error_response)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, Any]:
        """Liveness. No auth."""
        return {"status": "ok", "version": __version__}

    @app.get("/v1/openapi.json", include_in_schema=False)
    async def openapi_document(request: Request) -> JSONResponse:
        """This API's OpenAPI document (READ, as the agent's and the master's)."""
        allowed(request, Scope.READ)
        return JSONResponse(app.openapi())

    @app.get("/v1/stats", tags=["stats"])
    async def stats(request: Request, format: str = "json") -> Response:
        """The Defrag ad: statistics under HTCondor's names (``format=classad``: long form)."""
        allowed(request, Scope.READ)
        ad = service.ad()
        if format == "classad":
            return PlainTextResponse(render_long([ad]))
        if format != "json":
            return JSONResponse(
                error_body("request.invalid", "format must be 'json' or 'classad'"), 422
            )
        return JSONResponse(ad)

    def verify(authorization: str | None) -> Principal:
        assert key is not None
        return principal_from_authorization(authorization, key, service.clock.now())

    app.add_middleware(
        Gate,
        routes=app.router.routes,
        rules={
            ("GET", "/healthz"): Rule(scope=None),
        },
        verify=None if key is None else verify,
        body_limit=BODY_LIMIT,
    )
    return app


@dataclass
class DefragDaemon(Program[DefragConfig, Documents]):
    """One running defrag daemon; :meth:`serve` runs it until stopped.

    ``link`` and ``clock`` are seams for tests (a given ``link`` is used as it is);
    ``handle_signals`` is off when the daemon is embedded in another trio program.
    ``config`` is the running configuration (after a reload: the fixed keys, the name
    among them, as started; the reloadable ones as reloaded). ``service`` is the running
    service; a reload reconfigures the link to the master the daemon made (``_master``),
    never a given one.
    """

    config: DefragConfig
    config_path: Path | None = None
    clock: Clock = field(default_factory=WallClock)
    link: DefragLink | None = None
    handle_signals: bool = True
    service: DefragService | None = None
    urls: list[str] = field(default_factory=list)
    _stop: trio.Event = field(default_factory=trio.Event)
    _master: HttpDefragLink | None = None
    _etcd: AsyncEtcd | None = None
    _etcd_tasks: EtcdTasks | None = None

    @property
    def socket(self) -> Path:
        return self.config.runtime_dir / "defrag.sock"

    async def serve(
        self, *, task_status: trio.TaskStatus[DefragDaemon] = trio.TASK_STATUS_IGNORED
    ) -> int:
        await serve_daemon(
            self, stop=self._stop, handle_signals=self.handle_signals, task_status=task_status
        )
        return 0

    # ------------------------------------------------------------------ lifecycle hooks

    def spec(self) -> DaemonSpec:
        config = self.config
        return DaemonSpec(
            name=f"nodeagent defrag {config.name!r}",
            log=log,
            directories=(config.state_dir, config.runtime_dir),
            key_file=config.key_file,
            create_key=False,  # the agents' pool key: the daemon's drains are signed with it
            audit_log=None,
            socket=self.socket,
            runtime_file=config.runtime_dir / "defrag.json",
            listen=config.listen,
            tls=tls_files(config.tls_cert, config.tls_key),
            read_timeout=config.read_timeout,
        )

    def load_config(self) -> DefragConfig:
        return load_defrag_config(self.config_path)

    def open_store(self) -> Documents:
        """SQLite (``defrag.db``), or etcd (``store = "etcd"``)."""
        config = self.config
        if config.store == "etcd":
            return EtcdStore(
                config.etcd_settings(),
                config.etcd_keys("defrag", config.name),
                write_timeout=lease_ttl(config.leader_ttl) / 3,
            )
        return DocumentStore(config.state_dir / "defrag.db")

    def build(self, opened: Opened[Documents]) -> ASGIApp:
        """The service with its saved pacing, and its API; raises :class:`ConfigError`
        without a ``master_url``."""
        config = self.config
        link: DefragLink
        if self.link is not None:
            link = self.link
        else:
            link = self._master = _http_link(config, opened.key)
        service = DefragService(
            policy=defrag_policy(config),
            link=link,
            clock=self.clock,
            store=opened.store,
            update_interval=config.update_interval,
        )
        service.load()
        self.service = service
        return build_defrag_app(service, key=opened.key)

    async def serving(self, services: trio.Nursery, listening: Listening) -> None:
        """The ad's identity (its first TCP address), then the cycles."""
        service = self.service
        if service is None:
            raise RuntimeError("the defrag daemon has not been built")
        config = self.config
        address = config.advertise_url or advertised_url(list(listening.tcp), default_ip())
        service.identity = {"DaemonStartTime": int(self.clock.now()), "MyAddress": address}
        store = service.store
        if isinstance(store, EtcdStore):
            etcd = self._etcd = AsyncEtcd(store.settings)
            election = Election(
                etcd=etcd,
                key=config.etcd_keys("defrag", config.name).encode() + b"leader",
                ttl=lease_ttl(config.leader_ttl),
                identity={"url": address, "host": socket.gethostname(), "pid": os.getpid()},
                log=log,
            )
            self._etcd_tasks = EtcdTasks(etcd)
            await services.start(
                self._etcd_tasks.run,
                [partial(self._show_leader, election), partial(election.run, self._lead)],
            )
        else:
            await services.start(service.run)
        log.info(
            "defrag %r: %g drains/hour every %s, schedule %s",
            config.name,
            config.draining_machines_per_hour,
            in_words(config.interval),
            config.schedule,
        )

    async def _lead(self, fence: Fence) -> None:
        """One term: the pacing as etcd holds it, then the cycles until the term ends."""
        service = self.service
        store = None if service is None else service.store
        if service is None or not isinstance(store, EtcdStore) or self._etcd is None:
            raise RuntimeError("the defrag daemon has not been built for etcd")
        await store.refresh_async(self._etcd)
        service.load()
        await store.hold(fence, service.run)

    async def _show_leader(
        self, election: Election, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep ``DefragIsLeader`` and ``DefragLeader`` of the ad in step with the election."""
        task_status.started()
        while True:
            if self.service is not None:
                leader = election.leader or {}
                self.service.identity.update(
                    DefragIsLeader=election.leading, DefragLeader=leader.get("url")
                )
            await election.changed()

    async def finish(self) -> None:
        """With etcd: the election ends (a leader gives its lease back), then the client."""
        if self._etcd_tasks is not None:
            await self._etcd_tasks.close()

    def reconfigure(self, running: DefragConfig, changes: ConfigChanges) -> None:
        """The policy, the update interval and the master link; then a cycle at once.

        Refused (:class:`ConfigError`) without a ``master_url`` for the daemon's own link.
        """
        if self._master is not None:
            if not running.masters:
                raise ConfigError(_NEEDS_MASTER)
            self._master.reconfigure(
                master_urls=running.masters,
                token_file=running.token_file,
                timeout=running.agent_timeout,
            )
        if self.service is not None:
            self.service.policy = defrag_policy(running)
            self.service.update_interval = running.update_interval
            self.service.wake()


def run_defrag(config_path: Path | None) -> int:
    """Run the defrag daemon in the foreground until stopped.

    Raises :class:`ConfigError` for a bad configuration (including a missing
    ``master_url``) and :class:`~nodeagent._auth.KeyFileError` for an unusable pool key.
    """
    config = load_defrag_config(config_path)
    if not config.masters:
        raise ConfigError(_NEEDS_MASTER)
    return trio.run(DefragDaemon(config=config, config_path=config_path).serve)
