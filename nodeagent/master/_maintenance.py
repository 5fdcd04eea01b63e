"""The Mesos-compatible maintenance schedule and machine modes, as a pure model.

No I/O and no clock: times are nanoseconds since the epoch, passed in. The master owns
one :class:`MaintenanceState`, persists its :meth:`~MaintenanceState.snapshot`, and
serves it over HTTP with Mesos's paths, JSON shapes, validation order and messages:

* ``POST /maintenance/schedule`` → :meth:`MaintenanceSchedule.from_json`, then
  :meth:`MaintenanceState.update_schedule`; ``GET`` → :meth:`MaintenanceSchedule.to_json`.
* ``POST /machine/down`` and ``/machine/up`` → :func:`parse_machine_ids`, then
  :meth:`~MaintenanceState.down` / :meth:`~MaintenanceState.up`.
* ``GET /maintenance/status`` → :meth:`MaintenanceState.status` → :meth:`ClusterStatus.to_json`.

Every failure raises :class:`MaintenanceError`, whose message is Mesos's plain-text body
for a 400, and leaves the state exactly as it was. The JSON readers reproduce Mesos's
protobuf-from-JSON conversion: object keys are read in sorted order, unknown keys are
ignored, ``null`` means "unset", an object given for a list field counts as one element,
nested lists are flattened, and missing required fields are reported together once the
whole document has been read. Output omits empty lists, as Mesos does; feed it to
:func:`render_json` for Mesos's exact bytes.

A machine is identified as in Mesos: the hostname compared case-insensitively, the ip
exactly, and whether each field is present at all, so ``{"hostname": "a"}`` and
``{"hostname": "a", "ip": "10.0.0.1"}`` are two different machines. Matching an agent's
ad (:meth:`MaintenanceState.match`) is more lenient than Mesos, which needs both fields to
equal what the agent advertises: a missing or empty field in a schedule entry matches any
value. See :meth:`MaintenanceState.match` for the precedence.
"""

from __future__ import annotations

import enum
import json
import math
import operator
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, cast

__all__ = [
    "ClusterStatus",
    "MachineId",
    "MachineStatus",
    "MaintenanceError",
    "MaintenanceSchedule",
    "MaintenanceState",
    "Mode",
    "SnapshotError",
    "Unavailability",
    "Window",
    "load_json",
    "parse_machine_ids",
    "render_json",
    "suggestions",
]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# What glibc's inet_pton(AF_INET) accepts: four decimal octets, no leading zeros.
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_JSON_WHITESPACE = " \t\n\r"
#: How deep arrays and objects may nest in a request: Mesos's JSON parser (picojson, with
#: its depth check) refuses the bracket that opens level 101.
_MAX_JSON_DEPTH = 100
# A JSON string (skipped when counting brackets), or a bracket.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
# How Mesos escapes a character in a JSON string; other controls and DEL become \\u00XX.
_ESCAPES = {c: "\\" + e for c, e in zip('"\\/\b\f\n\r\t', '"\\/bfnrt', strict=True)}


class MaintenanceError(Exception):
    """A request Mesos would refuse; nothing changed. ``message`` is the 400 body::

        MaintenanceError              400  (code per instance, below)
        └── SnapshotError             500  maintenance.bad_snapshot

    Codes: ``maintenance.bad_json`` (the body is not the JSON Mesos expects),
    ``maintenance.invalid`` (a validation rule), ``maintenance.machine_down`` (a DOWN
    machine would leave the schedule), ``maintenance.not_scheduled``,
    ``maintenance.wrong_mode``.
    """

    http_status: ClassVar[int] = 400

    def __init__(self, message: str, *, code: str = "maintenance.invalid") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class SnapshotError(MaintenanceError):
    """A stored snapshot cannot be restored; the caller keeps whatever it had."""

    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message, code="maintenance.bad_snapshot")


class Mode(enum.StrEnum):
    """Mesos's ``MachineInfo.Mode``. Machines outside the schedule are ``UP``."""

    UP = "UP"
    DRAINING = "DRAINING"
    DOWN = "DOWN"


def render_json(value: object) -> str:
    """Serialise a JSON value as Mesos does: compact, keys sorted, ``/`` escaped."""
    if isinstance(value, dict):
        items = (f"{_render_string(str(k))}:{render_json(value[k])}" for k in sorted(value))
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(render_json(v) for v in value) + "]"
    if isinstance(value, str):
        return _render_string(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"cannot render {type(value).__name__} as Mesos JSON")


def _render_string(text: str) -> str:
    out = []
    for char in text:
        escaped = _ESCAPES.get(char)
        if escaped is None and (char < " " or char == "\x7f"):
            escaped = f"\\u{ord(char):04x}"
        out.append(char if escaped is None else escaped)
    return '"' + "".join(out) + '"'


def load_json(body: str | bytes, kind: Literal["object", "array"]) -> Any:
    """Decode a request body as Mesos does before reading it (``JSON::parse<T>``).

    Raises :class:`MaintenanceError` (``maintenance.bad_json``) with Mesos's messages for
    trailing characters and a wrong top-level type; a syntax error is reported in the
    shape of Mesos's ("syntax error at line N near: …") with this decoder's position.
    """
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad_json("Failed to decode the body as UTF-8") from None
    start = len(body) - len(body.lstrip(_JSON_WHITESPACE))
    # Only what comes before a bracket nested too deep is decoded: an error there is
    # reported first, as Mesos's parser would, and the decoder never recurses deeper.
    deep = _too_deep(body)
    text = body if deep is None else body[:deep]
    try:
        value, end = json.JSONDecoder(parse_constant=_no_constant).raw_decode(text, start)
    except _NotJson as exc:
        raise _bad_json(f"syntax error near: {exc}") from None
    except json.JSONDecodeError as exc:
        if deep is not None and exc.pos >= deep:
            raise _syntax_error(body, deep) from None
        raise _syntax_error(body, exc.pos) from None
    if deep is not None:  # a prefix cut after an opening bracket never decodes whole
        raise _syntax_error(body, deep)
    last = len(body.rstrip(_JSON_WHITESPACE))
    if end != last:
        trailing = body[end:last]
        raise _bad_json(f"Parsed JSON included non-whitespace trailing characters: {trailing}")
    if not isinstance(value, dict if kind == "object" else list):
        raise _bad_json("Unexpected JSON type parsed")
    return value


def _too_deep(body: str) -> int | None:
    """The offset just past the first bracket (outside strings) that opens a level
    deeper than :data:`_MAX_JSON_DEPTH`; ``None`` if there is none."""
    if body.count("[") + body.count("{") <= _MAX_JSON_DEPTH:
        return None
    depth = 0
    for token in _JSON_TOKEN.finditer(body):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > _MAX_JSON_DEPTH:
                return token.end()
        elif bracket in "]}":
            depth -= 1
    return None


def _syntax_error(body: str, pos: int) -> MaintenanceError:
    """Mesos's message for a parse that failed at ``pos``: the line, and what follows
    ``pos`` on it without control characters. Where Mesos would show nothing (the input
    ends at ``pos``) the message says so: a document cut short names the line it ends
    on and ``the end of the input``."""
    rest = body[pos:]
    if not rest.strip(_JSON_WHITESPACE):
        end = len(body.rstrip(_JSON_WHITESPACE))
        line = body.count("\n", 0, end) + 1
        what = (
            "the end of the input (the document is cut short)"
            if body.strip()
            else ("the end of the input (the body is empty)")
        )
        return _bad_json(f"syntax error at line {line} near: {what}")
    line = body.count("\n", 0, pos) + 1
    near = "".join(c for c in rest.split("\n", 1)[0] if c >= " ")
    return _bad_json(f"syntax error at line {line} near: {near}")


class _NotJson(ValueError):
    """``NaN`` or ``Infinity``, which Python's decoder accepts and Mesos's does not."""


def _no_constant(name: str) -> Any:
    raise _NotJson(name)


def _ascii_lower(text: str | None) -> str | None:
    """``text`` with its ASCII letters in lower case (and no other changed); ``text``
    itself when it has none in upper case (a schedule's ids keep one copy of a name)."""
    if text is None:
        return None
    lowered = text.lower() if text.isascii() else text.translate(_LOWER)
    return text if lowered == text else lowered


def _bad_json(message: str) -> MaintenanceError:
    return MaintenanceError(message, code="maintenance.bad_json")


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class MachineId:
    """Mesos's ``MachineID``. Equal when :attr:`key` is: the hostname is compared in
    ASCII lower case (as Mesos does), the ip exactly, an absent field only to an absent
    one. The spelling given is kept for output."""

    hostname: str | None = None
    ip: str | None = None
    #: What it is compared by (:attr:`key`), made once: a schedule's checks and indexes
    #: hash every machine id several times.
    _key: tuple[str | None, str | None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_key", (_ascii_lower(self.hostname), self.ip))

    @property
    def key(self) -> tuple[str | None, str | None]:
        return self._key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MachineId) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        """The form Mesos puts in its messages: ``{"hostname":"a","ip":"10.0.0.1"}``."""
        return render_json(self.to_json())

    def to_json(self) -> dict[str, str]:
        out = {"hostname": self.hostname, "ip": self.ip}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, value: object) -> MachineId:
        """Read one ``MachineID`` object; raises :class:`MaintenanceError`."""
        return _machine_id(_read("MachineID", value))


def parse_machine_ids(value: object) -> tuple[MachineId, ...]:
    """Read the JSON array posted to ``/machine/down`` or ``/machine/up``."""
    if not isinstance(value, list):
        raise _bad_json("Expecting a JSON array")
    return tuple(MachineId.from_json(item) for item in value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Unavailability:
    """From ``start_ns`` for ``duration_ns`` nanoseconds (``None``: indefinitely).

    Building one checks only that both are 64-bit integers; Mesos's rules (a duration
    must not be negative) are checked when a schedule is submitted, in Mesos's order.
    """

    start_ns: int
    duration_ns: int | None = None

    def __post_init__(self) -> None:
        for value in (self.start_ns, self.duration_ns):
            if value is not None and (type(value) is not int or not _in_int64(value)):
                raise ValueError(f"not a 64-bit integer number of nanoseconds: {value!r}")

    @property
    def end_ns(self) -> int | None:
        return None if self.duration_ns is None else self.start_ns + self.duration_ns

    def covers(self, now_ns: int) -> bool:
        """Whether ``now_ns`` lies in the interval (start included, end excluded)."""
        end = self.end_ns
        return self.start_ns <= now_ns and (end is None or now_ns < end)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.duration_ns is not None:
            out["duration"] = {"nanoseconds": self.duration_ns}
        out["start"] = {"nanoseconds": self.start_ns}
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Window:
    """Machines that share one unavailability."""

    machine_ids: tuple[MachineId, ...]
    unavailability: Unavailability

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.machine_ids:
            out["machine_ids"] = [m.to_json() for m in self.machine_ids]
        out["unavailability"] = self.unavailability.to_json()
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class MaintenanceSchedule:
    """Mesos's ``maintenance::Schedule``: a list of windows (empty: no maintenance)."""

    windows: tuple[Window, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The body of ``GET /maintenance/schedule``; ``{}`` when empty, as in Mesos."""
        return {"windows": [w.to_json() for w in self.windows]} if self.windows else {}

    @classmethod
    def from_json(cls, value: object) -> MaintenanceSchedule:
        """Read a posted schedule; raises :class:`MaintenanceError` with Mesos's message.

        Only the JSON shape is checked here; :meth:`MaintenanceState.update_schedule`
        applies the validation rules.
        """
        message = _read("Schedule", value)
        return cls(windows=tuple(_window(w) for w in message.get("windows", [])))


# The protobuf messages involved: field name -> (type, repeated), in field-number order.
_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "Schedule": {"windows": ("Window", True)},
    "Window": {"machine_ids": ("MachineID", True), "unavailability": ("Unavailability", False)},
    "Unavailability": {"start": ("TimeInfo", False), "duration": ("DurationInfo", False)},
    "TimeInfo": {"nanoseconds": ("int64", False)},
    "DurationInfo": {"nanoseconds": ("int64", False)},
    "MachineID": {"hostname": ("string", False), "ip": ("string", False)},
}
_REQUIRED = {"Window": ("unavailability",), "Unavailability": ("start",)}
_REQUIRED |= {"TimeInfo": ("nanoseconds",), "DurationInfo": ("nanoseconds",)}
_JSON_TYPE_NAMES = {str: "string", bool: "boolean", int: "number", float: "number"}


def _read(message_type: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad_json("Expecting a JSON object")
    message: dict[str, Any] = {}
    _read_message(message_type, value, message)
    missing: list[str] = []
    _find_missing(message_type, message, "", missing)
    if missing:
        raise _bad_json("Missing required fields: " + ", ".join(missing))
    return message


def _read_message(message_type: str, value: dict[str, Any], out: dict[str, Any]) -> None:
    fields = _FIELDS[message_type]
    for name in sorted(value):  # Mesos holds a JSON object in a sorted map.
        if name in fields:
            _read_field(name, *fields[name], value[name], out)


def _read_field(name: str, kind: str, repeated: bool, value: object, out: dict[str, Any]) -> None:
    if value is None:
        return
    if isinstance(value, list):
        if not repeated:
            raise _bad_json(f"Not expecting a JSON array for field '{name}'")
        for item in value:
            _read_field(name, kind, repeated, item, out)
        return
    if isinstance(value, dict):
        if kind not in _FIELDS:
            raise _bad_json(f"Not expecting a JSON object for field '{name}'")
        sub: dict[str, Any] = {}
        if repeated:
            out.setdefault(name, []).append(sub)
        else:
            sub = out.setdefault(name, sub)
        _read_message(kind, value, sub)
        return
    json_type = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
    if kind == "string" and isinstance(value, str):
        scalar: object = value
    elif kind == "int64" and json_type == "number":
        scalar = _to_int64(name, cast(int | float, value))
    else:
        raise _bad_json(f"Not expecting a JSON {json_type} for field '{name}'")
    if repeated:
        out.setdefault(name, []).append(scalar)
    else:
        out[name] = scalar


def _to_int64(name: str, value: int | float) -> int:
    if isinstance(value, float) and not math.isfinite(value):
        raise _bad_json(f"Value of field '{name}' is not a finite number")
    number = int(value)  # A fractional number is truncated, as Mesos's cast does.
    if not _in_int64(number):
        raise _bad_json(f"Value of field '{name}' is out of the 64-bit integer range")
    return number


def _in_int64(value: int) -> bool:
    return _INT64_MIN <= value <= _INT64_MAX


def _find_missing(message_type: str, message: dict[str, Any], prefix: str, out: list[str]) -> None:
    out.extend(prefix + name for name in _REQUIRED.get(message_type, ()) if name not in message)
    for name, (kind, repeated) in _FIELDS[message_type].items():
        if kind not in _FIELDS or name not in message:
            continue
        if repeated:
            for index, sub in enumerate(message[name]):
                _find_missing(kind, sub, f"{prefix}{name}[{index}].", out)
        else:
            _find_missing(kind, message[name], f"{prefix}{name}.", out)


def _machine_id(message: dict[str, Any]) -> MachineId:
    return MachineId(hostname=message.get("hostname"), ip=message.get("ip"))


def _window(message: dict[str, Any]) -> Window:
    unavailability = message["unavailability"]
    duration = unavailability.get("duration")
    return Window(
        machine_ids=tuple(_machine_id(m) for m in message.get("machine_ids", [])),
        unavailability=Unavailability(
            start_ns=unavailability["start"]["nanoseconds"],
            duration_ns=None if duration is None else duration["nanoseconds"],
        ),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class MachineStatus:
    """A machine's mode and window. ``id`` is spelled as when the machine was first
    scheduled (Mesos keeps that spelling too); ``window`` is ``None`` only for ``UP``."""

    id: MachineId
    mode: Mode
    window: Window | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterStatus:
    """Mesos's ``maintenance::ClusterStatus``: the draining and the down machines."""

    draining_machines: tuple[MachineId, ...] = ()
    down_machines: tuple[MachineId, ...] = ()

    def to_json(
        self, statuses: Callable[[MachineId], list[dict[str, Any]]] | None = None
    ) -> dict[str, Any]:
        """The body of ``GET /maintenance/status``. A draining machine's ``statuses`` are
        Mesos's ``InverseOfferStatus`` objects that ``statuses(machine)`` gives (the latest
        answer per job group); Mesos omits an empty list, so a draining machine without
        one is ``{"id": {...}}``; with nothing scheduled the body is ``{}``."""
        out: dict[str, Any] = {}
        if self.down_machines:
            out["down_machines"] = [m.to_json() for m in self.down_machines]
        if self.draining_machines:
            draining = []
            for machine in self.draining_machines:
                entry: dict[str, Any] = {"id": machine.to_json()}
                found = [] if statuses is None else statuses(machine)
                if found:
                    entry["statuses"] = found
                draining.append(entry)
            out["draining_machines"] = draining
        return out


def _check_machine(machine: MachineId) -> None:
    if not machine.hostname and not machine.ip:
        raise MaintenanceError("Both 'hostname' and 'ip' for a machine are empty")
    if machine.ip and not _IPV4.fullmatch(machine.ip):
        raise MaintenanceError(f"Failed to parse IPv4: {machine.ip}")


def _check_unique(machines: Iterable[MachineId], seen: set[MachineId]) -> None:
    for machine in machines:
        _check_machine(machine)
        if machine in seen:
            raise MaintenanceError(f"Machine '{machine}' appears more than once in the schedule")
        seen.add(machine)


class MaintenanceState:
    """The schedule and the mode of every scheduled machine, owned by the master.

    Every scheduled machine is ``DRAINING`` or ``DOWN``; every other machine is ``UP``.
    A machine may be scheduled, downed and brought up before any agent for it exists.
    Each mutator validates everything first, in Mesos's order, then applies the whole
    change; on :class:`MaintenanceError` nothing has changed. Each returns the machines
    whose mode changed, with their new status.
    """

    def __init__(self) -> None:
        self._install(MaintenanceSchedule(), {})

    @property
    def schedule(self) -> MaintenanceSchedule:
        return self._schedule

    def update_schedule(self, schedule: MaintenanceSchedule) -> tuple[MachineStatus, ...]:
        """Replace the schedule: new machines become DRAINING, machines dropped go back
        UP, machines kept keep their mode (and take their new window).

        Rules, in Mesos's order, window by window: at least one machine; a duration, if
        given, not negative; then machine by machine: a hostname or an ip, a well-formed
        IPv4 ip, no machine twice in the schedule. Last: no DOWN machine dropped.
        """
        seen: set[MachineId] = set()
        for window in schedule.windows:
            if not window.machine_ids:
                raise MaintenanceError("List of machines in the maintenance window is empty")
            duration = window.unavailability.duration_ns
            if duration is not None and duration < 0:
                raise MaintenanceError("Unavailability 'duration' is negative")
            _check_unique(window.machine_ids, seen)
        for status in self._machines.values():
            if status.mode is Mode.DOWN and status.id not in seen:
                raise MaintenanceError(
                    f"Machine '{status.id}' is deactivated and cannot be removed from the schedule",
                    code="maintenance.machine_down",
                )
        schedule = self._sharing_ids(schedule)
        machines: dict[MachineId, MachineStatus] = {}
        changed: list[MachineStatus] = []
        for window in schedule.windows:
            for machine in window.machine_ids:
                old = self._machines.get(machine)
                new = MachineStatus(
                    id=machine if old is None else old.id,
                    mode=Mode.DRAINING if old is None else old.mode,
                    window=window,
                )
                machines[new.id] = new
                if old is None:
                    changed.append(new)
        for machine in self._machines:
            if machine not in machines:
                changed.append(MachineStatus(id=machine, mode=Mode.UP, window=None))
        self._install(schedule, machines)
        return tuple(changed)

    def _sharing_ids(self, schedule: MaintenanceSchedule) -> MaintenanceSchedule:
        """``schedule`` with each machine id this state holds spelt the same replaced by
        the one held: a schedule of 100,000 machines that moves a few then keeps one id
        object a machine (the statuses' and the windows'), not two."""
        held = self._machines
        if not held:
            return schedule
        windows = []
        for window in schedule.windows:
            ids = tuple([_same_id(held.get(m), m) for m in window.machine_ids])
            if all(map(operator.is_, ids, window.machine_ids)):
                windows.append(window)
            else:
                windows.append(Window(machine_ids=ids, unavailability=window.unavailability))
        if all(map(operator.is_, windows, schedule.windows)):
            return schedule
        return MaintenanceSchedule(windows=tuple(windows))

    def down(self, machine_ids: Iterable[MachineId]) -> tuple[MachineStatus, ...]:
        """Bring DRAINING machines DOWN, all or none (Mesos's ``/machine/down``)."""
        ids = self._check_transition(tuple(machine_ids), Mode.DRAINING, "brought down")
        statuses = (self._machines[m] for m in ids)
        changed = {s.id: MachineStatus(id=s.id, mode=Mode.DOWN, window=s.window) for s in statuses}
        self._install(self._schedule, self._machines | changed)
        return tuple(changed.values())

    def up(self, machine_ids: Iterable[MachineId]) -> tuple[MachineStatus, ...]:
        """Bring DOWN machines UP, all or none (Mesos's ``/machine/up``): they leave the
        schedule, and a window left without machines is dropped."""
        ids = set(self._check_transition(tuple(machine_ids), Mode.DOWN, "brought up"))
        windows = []
        for window in self._schedule.windows:
            kept = tuple(m for m in window.machine_ids if m not in ids)
            if kept:
                windows.append(Window(machine_ids=kept, unavailability=window.unavailability))
        machines = {m: s for m, s in self._machines.items() if m not in ids}
        changed = tuple(
            MachineStatus(id=s.id, mode=Mode.UP, window=None)
            for m, s in self._machines.items()
            if m in ids
        )
        self._install(MaintenanceSchedule(windows=tuple(windows)), machines)
        return changed

    def _check_transition(
        self, ids: tuple[MachineId, ...], required: Mode, verb: str
    ) -> tuple[MachineId, ...]:
        if not ids:
            raise MaintenanceError("List of machines is empty")
        _check_unique(ids, set())
        for machine in ids:
            status = self._machines.get(machine)
            if status is None:
                raise MaintenanceError(
                    f"Machine '{machine}' is not part of a maintenance schedule",
                    code="maintenance.not_scheduled",
                )
            if status.mode is not required:
                raise MaintenanceError(
                    f"Machine '{machine}' is not in {required} mode and cannot be {verb}",
                    code="maintenance.wrong_mode",
                )
        return ids

    def machines(self) -> tuple[MachineStatus, ...]:
        """Every scheduled machine, in schedule order (the same tuple until a change)."""
        return self._statuses

    def status(self) -> ClusterStatus:
        """The draining and the down machines, in schedule order."""
        statuses = self._machines.values()
        return ClusterStatus(
            draining_machines=tuple(s.id for s in statuses if s.mode is Mode.DRAINING),
            down_machines=tuple(s.id for s in statuses if s.mode is Mode.DOWN),
        )

    def match(self, hostname: str | None, ip: str | None) -> MachineStatus | None:
        """The schedule entry for an agent that advertises ``hostname`` and ``ip``.

        An entry matches when each of its non-empty fields equals the agent's (hostname
        case-insensitively): an entry with both fields needs both, a hostname-only entry
        matches any ip, an ip-only entry any hostname. If several match, an entry with
        both fields wins over a hostname-only one, which wins over an ip-only one.
        """
        host = _ascii_lower(hostname) if hostname else None
        if host and ip and (host, ip) in self._by_both:
            return self._by_both[(host, ip)]
        if host and host in self._by_host:
            return self._by_host[host]
        return self._by_ip.get(ip) if ip else None

    def mode_of(self, hostname: str | None, ip: str | None) -> Mode:
        """The mode for an agent's ad: its matching entry's, else ``UP``."""
        status = self.match(hostname, ip)
        return Mode.UP if status is None else status.mode

    def window_of(self, hostname: str | None, ip: str | None) -> Window | None:
        """The window for an agent's ad, if it matches a schedule entry."""
        status = self.match(hostname, ip)
        return None if status is None else status.window

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy of the whole state, for :meth:`restore`."""
        machines = [{"id": s.id.to_json(), "mode": str(s.mode)} for s in self._machines.values()]
        return {"version": 1, "schedule": self._schedule.to_json(), "machines": machines}

    @classmethod
    def restore(cls, snapshot: object) -> MaintenanceState:
        """Rebuild a state from :meth:`snapshot`; raises :class:`SnapshotError`."""
        try:
            return _restore(cls(), snapshot)
        except (AttributeError, KeyError, MaintenanceError, TypeError, ValueError) as exc:
            raise SnapshotError(f"Cannot restore the maintenance state: {exc}") from exc

    def _install(
        self, schedule: MaintenanceSchedule, machines: dict[MachineId, MachineStatus]
    ) -> None:
        by_both: dict[tuple[str, str], MachineStatus] = {}
        by_host: dict[str, MachineStatus] = {}
        by_ip: dict[str, MachineStatus] = {}
        for status in machines.values():
            host, ip = status.id.key
            if host and ip:
                by_both.setdefault((host, ip), status)
            elif host:
                by_host.setdefault(host, status)
            elif ip:
                by_ip.setdefault(ip, status)
        self._schedule, self._machines = schedule, machines
        self._statuses = tuple(machines.values())
        self._by_both, self._by_host, self._by_ip = by_both, by_host, by_ip


def _same_id(status: MachineStatus | None, machine: MachineId) -> MachineId:
    """The id of ``status`` when it is ``machine`` spelt the same, else ``machine``."""
    if status is None:
        return machine
    held = status.id
    if held.hostname == machine.hostname and held.ip == machine.ip:
        return held
    return machine


def _restore(state: MaintenanceState, snapshot: Any) -> MaintenanceState:
    if snapshot.get("version") != 1:
        raise ValueError("unknown snapshot version")
    state.update_schedule(MaintenanceSchedule.from_json(snapshot["schedule"]))
    scheduled = {s.id: s for s in state.machines()}
    restored: dict[MachineId, MachineStatus] = {}
    for entry in snapshot["machines"]:
        machine, mode = MachineId.from_json(entry["id"]), Mode(entry["mode"])
        if machine not in scheduled or machine in restored or mode is Mode.UP:
            raise ValueError(f"machine '{machine}' cannot be {mode} in this schedule")
        restored[machine] = MachineStatus(id=machine, mode=mode, window=scheduled[machine].window)
    if len(restored) != len(scheduled):
        raise ValueError("a scheduled machine has no mode")
    state._install(state.schedule, {restored[m].id: restored[m] for m in scheduled})
    return state


def suggestions(host: str, hostnames: Iterable[str]) -> list[str]:
    """The hostnames ``host`` may have meant: those whose first label is ``host``
    (``node1`` → ``node1.test``), compared without regard to case; sorted, at most three."""
    short = host.lower()
    found = sorted({name for name in hostnames if name.lower().split(".", 1)[0] == short})
    return [name for name in found if name.lower() != short][:3]
