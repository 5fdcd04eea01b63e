"""``nodeagent defrag run``: the defrag daemon's lifecycle.

Starts in order: the pool key (shared with the agents: the daemon signs its requests to
them with it), the store (the pacing of the drain rate), a local Unix socket
(ADMINISTRATOR) and the TCP listeners serving ``GET /v1/stats``, the service (cycles and
pushes of the Defrag ad); then ``READY=1``. SIGTERM/SIGINT stop it; SIGHUP reloads the
policy, the master link and the intervals (the name, directories, listeners and key stay
as they were).
"""

from __future__ import annotations

import contextlib
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from nodeagent import __version__, _sdnotify
from nodeagent._auth import (
    AuthError,
    Principal,
    Scope,
    Unauthenticated,
    load_key,
    principal_from_authorization,
    require,
)
from nodeagent._clock import Clock, WallClock
from nodeagent._http import auth_error_response, error_body, trusted
from nodeagent._serving import (
    advertised_url,
    free_stale_socket,
    serve,
    write_runtime_info,
)
from nodeagent._settings import ConfigError, default_ip, reloadable_changes
from nodeagent._store import DocumentStore
from nodeagent.defrag._config import DefragConfig, load_defrag_config
from nodeagent.defrag._policy import DefragPolicy
from nodeagent.defrag._service import DefragLink, DefragService, HttpDefragLink
from slots import Schedule, render_long

__all__ = ["DefragDaemon", "build_defrag_app", "defrag_policy", "run_defrag"]

log = logging.getLogger("nodeagent.defrag")

_UNIX = "nodeagent.unix"


def defrag_policy(config: DefragConfig, *, name: str | None = None) -> DefragPolicy:
    """The service's policy from the configuration (``name`` overrides a reloaded one)."""
    return DefragPolicy(
        name=config.name if name is None else name,
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


def _http_link(config: DefragConfig, key: bytes, name: str) -> HttpDefragLink:
    if config.master_url is None:
        raise ConfigError("master_url is required: the defrag daemon reads the master's ads")
    return HttpDefragLink(
        master_url=config.master_url,
        token_file=config.token_file,
        key=key,
        name=name,
        timeout=config.agent_timeout,
    )


def build_defrag_app(service: DefragService, *, key: bytes | None) -> FastAPI:
    """The defrag daemon's API: ``/healthz`` and ``GET /v1/stats`` (READ)."""
    app = FastAPI(
        title="nodeagent defrag API",
        version=__version__,
        summary="The defrag daemon's statistics.",
        openapi_url="/v1/openapi.json",
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

    return app


@dataclass
class DefragDaemon:
    """One running defrag daemon; :meth:`serve` runs it until stopped.

    ``link`` and ``clock`` are seams for tests; ``handle_signals`` is off when the daemon
    is embedded in another trio program.
    """

    config: DefragConfig
    config_path: Path | None = None
    clock: Clock = field(default_factory=WallClock)
    link: DefragLink | None = None
    handle_signals: bool = True
    service: DefragService | None = None
    urls: list[str] = field(default_factory=list)
    _stop: trio.Event = field(default_factory=trio.Event)

    def stop(self) -> None:
        self._stop.set()

    @property
    def socket(self) -> Path:
        return self.config.runtime_dir / "defrag.sock"

    async def serve(
        self, *, task_status: trio.TaskStatus[DefragDaemon] = trio.TASK_STATUS_IGNORED
    ) -> int:
        config = self.config
        key = load_key(config.key_file)
        link = self.link or _http_link(config, key, config.name)
        for directory in (config.state_dir, config.runtime_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        store = DocumentStore(config.state_dir / "defrag.db")
        try:
            await self._serve(store, key, link, task_status)
        finally:
            store.close()
        return 0

    async def _serve(
        self,
        store: DocumentStore,
        key: bytes,
        link: DefragLink,
        task_status: trio.TaskStatus[DefragDaemon],
    ) -> None:
        config = self.config
        service = DefragService(
            policy=defrag_policy(config),
            link=link,
            clock=self.clock,
            store=store,
            update_interval=config.update_interval,
        )
        service.load()
        self.service = service
        app = build_defrag_app(service, key=key)
        async with trio.open_nursery() as nursery:
            free_stale_socket(self.socket)
            unix_urls = await serve(
                nursery, trusted(app), [f"unix:{self.socket}"], shutdown=self._stop.wait, unix=True
            )
            tls = None
            if config.tls_cert is not None and config.tls_key is not None:
                tls = (config.tls_cert, config.tls_key)
            tcp_urls = await serve(
                nursery, app, list(config.listen), shutdown=self._stop.wait, tls=tls
            )
            self.urls = [*unix_urls, *tcp_urls]
            service.identity = {
                "DaemonStartTime": int(self.clock.now()),
                "MyAddress": advertised_url(tcp_urls, default_ip()),
            }
            write_runtime_info(
                config.runtime_dir / "defrag.json", self.urls, socket=str(self.socket)
            )
            await nursery.start(service.run)
            if self.handle_signals:
                nursery.start_soon(self._signals, service, key)
            nursery.start_soon(_sdnotify.run_watchdog)
            _sdnotify.ready()
            log.info(
                "nodeagent defrag %r ready on %s: %g drains/hour every %g s, schedule %s",
                config.name,
                ", ".join(self.urls),
                config.draining_machines_per_hour,
                config.interval,
                config.schedule,
            )
            task_status.started(self)
            await self._stop.wait()
            _sdnotify.stopping()
            # Stop at once: state is saved before every reply, so a request cut off here
            # either took effect (and was saved) or did not.
            nursery.cancel_scope.cancel()
        for leftover in (config.runtime_dir / "defrag.json", self.socket):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()

    def reload(self, new: DefragConfig, service: DefragService, key: bytes) -> None:
        """Apply the reloadable part of ``new``; raises :class:`ConfigError`, changing nothing."""
        changes = reloadable_changes(self.config, new)
        link = service.link
        if self.link is None and {"master_url", "token_file", "agent_timeout"} & set(
            changes.applied
        ):
            link = _http_link(new, key, self.config.name)
        service.policy = defrag_policy(new, name=self.config.name)
        service.update_interval = new.update_interval
        service.link = link
        for ignored in changes.ignored:
            log.warning("reload: %s changes only after a restart", ignored)
        self.config = new.model_copy(update={k: getattr(self.config, k) for k in changes.ignored})
        service.wake()

    async def _signals(self, service: DefragService, key: bytes) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as received:
            async for signum in received:
                if signum != signal.SIGHUP:
                    log.info("received %s", signal.Signals(signum).name)
                    self.stop()
                    continue
                _sdnotify.reloading()
                try:
                    self.reload(load_defrag_config(self.config_path), service, key)
                except ConfigError as exc:
                    log.error("reload refused, configuration unchanged: %s", exc)
                else:
                    log.info("reloaded the defrag configuration")
                _sdnotify.ready()


def run_defrag(config_path: Path | None) -> int:
    """Run the defrag daemon in the foreground until stopped.

    Raises :class:`ConfigError` for a bad configuration (including a missing
    ``master_url``) and :class:`~nodeagent._auth.KeyFileError` for an unusable pool key.
    """
    config = load_defrag_config(config_path)
    if config.master_url is None:
        raise ConfigError("master_url is required: the defrag daemon reads the master's ads")
    return trio.run(DefragDaemon(config=config, config_path=config_path).serve)
