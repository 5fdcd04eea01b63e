"""Webhooks: the master's events POSTed to the URLs of its configuration (``[[notify]]``).

Each target (:class:`NotifyTarget`: ``url``, ``types``, ``secret_file``) gets every event
its ``types`` match, one request per event, **in order and at least once**: the body is
the event's JSON exactly as ``GET /v1/events`` sends it, signed with HMAC-SHA256 under the
target's secret (``X-Nodeagent-Signature: sha256=<hex>``; a receiver computes the same
over the raw body and compares in constant time); ``X-Nodeagent-Event-Id`` and
``X-Nodeagent-Event-Type`` say which. A reply other than 2xx, or none within
``timeout``, is tried again after 1, 2, 4 … seconds (at most :data:`MAX_BACKOFF`), and
the events after it wait: a receiver sees them in order or not at all.

**The cursor.** The id of the last event each URL took is kept in the store (document
``notify_cursors``, written at most every :data:`CURSOR_EVERY` seconds and when the
deliveries pause), so a restarted master, or the next leader, goes on where it stopped:
an event delivered after the last cursor written is delivered again (at least once). A
URL new to the store starts with the events written after it was configured. A target
whose cursor is older than the oldest event kept is sent a ``gap`` event (the same
body as the stream's, ``X-Nodeagent-Event-Type: gap``), then the oldest kept.

Only the leader delivers (:meth:`Notifier.run` runs with its reconcile service). Each
URL has a task of its own: one that is down holds back nobody else, and never the
master. Redirects are not followed: the configuration alone says where events go.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

from nodeagent import __version__
from nodeagent._clock import Clock, WallClock
from nodeagent._store import Documents, StoreError
from nodeagent._when import in_words
from nodeagent.master._event_stream import EventHub
from nodeagent.master._events import Event, EventFilter, Gap

__all__ = [
    "CURSOR_EVERY",
    "MAX_BACKOFF",
    "Notifier",
    "NotifyTarget",
    "TargetState",
    "signature",
]

log = logging.getLogger("nodeagent.master")

#: The longest wait between two tries of one event.
MAX_BACKOFF = 60.0
#: The cursors are written at most this often while events flow.
CURSOR_EVERY = 1.0


def signature(secret: bytes, body: bytes) -> str:
    """The ``X-Nodeagent-Signature`` of ``body``: ``sha256=`` and the HMAC's hex digest."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


@dataclass(frozen=True, kw_only=True)
class NotifyTarget:
    """One ``[[notify]]`` entry: where to POST, which events (``types``: patterns such
    as ``drain.*``; empty: all), the file holding the signing secret, the time one
    request may take."""

    url: str
    types: tuple[str, ...] = ()
    secret_file: Path
    timeout: float = 10.0

    def secret(self) -> bytes:
        """The secret (the file's bytes, without a trailing newline); raises OSError."""
        return self.secret_file.read_bytes().rstrip(b"\r\n")

    def wanted(self) -> EventFilter:
        return EventFilter.parse(types=",".join(self.types))


@dataclass
class TargetState:
    """What is known of one target's deliveries (its metrics)."""

    cursor: int = 0
    failures: int = 0
    delivered: int = 0
    last_delivery: float | None = None
    last_error: str | None = None


@dataclass
class Notifier:
    """Delivers the events of ``hub`` to ``targets`` (see the module docstring)."""

    hub: EventHub
    store: Documents
    targets: Sequence[NotifyTarget] = ()
    #: Seams for tests: the HTTP transport, the first wait between tries.
    transport: httpx.AsyncBaseTransport | None = None
    first_backoff: float = 1.0
    states: dict[str, TargetState] = field(default_factory=dict)
    clock: Clock = field(default_factory=WallClock)
    _cursors_dirty: bool = False

    def load(self) -> None:
        """The cursors the store holds; a URL it does not know starts after the last
        event now (raises :class:`StoreError`)."""
        stored = self.store.load("notify_cursors") or {}
        fresh: dict[str, TargetState] = {}
        for target in self.targets:
            cursor = stored.get(target.url)
            known = self.states.get(target.url, TargetState())
            if isinstance(cursor, int) and cursor >= 0:
                known.cursor = cursor
            elif target.url not in self.states:
                known.cursor = self.hub.log.last_id
                self._cursors_dirty = True
            fresh[target.url] = known
        self.states = fresh

    def lag(self, url: str) -> int:
        """Events written that ``url`` has not taken yet (of every type)."""
        state = self.states.get(url)
        return 0 if state is None else max(0, self.hub.log.last_id - state.cursor)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver, forever (the leader's service): one task per target, and the
        cursors written as they move."""
        self.load()
        async with (
            httpx.AsyncClient(
                transport=self.transport,
                follow_redirects=False,
                headers={"User-Agent": f"nodeagent-master/{__version__}"},
            ) as http,
            trio.open_nursery() as nursery,
        ):
            for target in self.targets:
                nursery.start_soon(self._deliver_forever, http, target)
            nursery.start_soon(self._write_cursors_forever)
            task_status.started()

    async def _deliver_forever(self, http: httpx.AsyncClient, target: NotifyTarget) -> None:
        state = self.states[target.url]
        wanted = target.wanted()
        while True:
            gap, events = self.hub.log.after(state.cursor, limit=100)
            if gap is not None:
                await self._send(http, target, gap, gap.resume)
            for event in events:
                if wanted.matches(event):
                    await self._send(http, target, event, event.id)
                else:
                    self._moved(state, event.id)
            if not events and gap is None:
                await self.hub.wait_after(state.cursor)

    async def _send(
        self, http: httpx.AsyncClient, target: NotifyTarget, event: Event | Gap, cursor: int
    ) -> None:
        """POST one event until the target takes it (2xx)."""
        state = self.states[target.url]
        if isinstance(event, Gap):
            body, kind, event_id = event.jsonl().rstrip(b"\n"), "gap", str(event.resume)
        else:
            body, kind, event_id = event.data, event.type, str(event.id)
        tries = 0
        while True:
            error: str | None
            try:
                secret = target.secret()
            except OSError as exc:
                error = f"its secret_file cannot be read: {exc}"
            else:
                headers = {
                    "Content-Type": "application/json",
                    "X-Nodeagent-Event-Id": event_id,
                    "X-Nodeagent-Event-Type": kind,
                    "X-Nodeagent-Signature": signature(secret, body),
                }
                error = await self._post(http, target, body, headers)
            if error is None:
                state.delivered += 1
                state.last_delivery = self.clock.now()
                state.last_error = None
                self._moved(state, cursor)
                if tries:
                    log.info("webhook %s: delivering again (event %s)", target.url, event_id)
                return
            tries += 1
            state.failures += 1
            state.last_error = error
            wait = min(MAX_BACKOFF, self.first_backoff * 2 ** (tries - 1))
            if tries == 1 or math.log2(tries).is_integer():  # not at every try
                log.warning(
                    "webhook %s: event %s not delivered (%d tries, next in %s): %s",
                    target.url,
                    event_id,
                    tries,
                    in_words(wait),
                    error,
                )
            await trio.sleep(wait)

    @staticmethod
    async def _post(
        http: httpx.AsyncClient, target: NotifyTarget, body: bytes, headers: dict[str, str]
    ) -> str | None:
        """One POST; ``None`` when it was taken, else why not."""
        try:
            with trio.fail_after(target.timeout):
                reply = await http.post(target.url, content=body, headers=headers)
        except trio.TooSlowError:
            return f"no reply within {in_words(target.timeout)}"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if 200 <= reply.status_code < 300:
            return None
        return f"HTTP {reply.status_code}"

    def _moved(self, state: TargetState, cursor: int) -> None:
        if cursor > state.cursor:
            state.cursor = cursor
            self._cursors_dirty = True

    async def _write_cursors_forever(self) -> None:
        while True:
            await trio.sleep(CURSOR_EVERY)
            if self._cursors_dirty:
                self.write_cursors()

    def write_cursors(self) -> None:
        """Write every target's cursor (a failure is logged; the deliveries go on and
        the cursor is written at the next chance: at worst events are sent again)."""
        cursors: Mapping[str, Any] = {url: s.cursor for url, s in self.states.items()}
        try:
            self.store.save(notify_cursors=dict(cursors))
        except StoreError as exc:
            log.warning("webhook cursors not written (tried again): %s", exc)
            return
        self._cursors_dirty = False
