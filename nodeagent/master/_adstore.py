"""The master's collection of node ads: soft state, refreshed by the agents' pushes.

An ad not refreshed within ``ad_lifetime`` marks its node *lost*; it stays listed (with
``Lost = true``) until the node pushes again or an operator forgets it — a node does
not silently disappear. A node whose last ad said ``ShuttingDown = true`` (its machine
was going down, drained by its agent) is *rebooting* instead (``Rebooting = true``, not
lost) for ``reboot_grace`` past its ad's lifetime, then lost as any other. Node ads
(``MyType = "Machine"``) are keyed by their ``Name`` (the agent's host name); ads of
other daemons (``MyType = "Defrag"``) are kept apart, keyed by type and name, out of
the nodes, the plans and the lost-node accounting. The master adds ``LastHeardFrom``
(when the ad arrived, by the master's clock), ``Lost`` and ``Rebooting`` to what it
serves. No I/O here; ``now`` is an argument.

What the master reads from an ad is checked when the ad arrives (:meth:`AdStore.update`),
so that no node's ad can break a query, a plan or a reconcile pass later. Constraints
are not evaluated here: the API evaluates them in killable worker processes
(:class:`nodeagent._expressions._evaluator.Evaluator`) over what :meth:`AdStore.query` returns.
"""

from __future__ import annotations

import heapq
import math
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar, overload

import orjson

from nodeagent._moving_values import COMPLETIONS as _COMPLETIONS
from nodeagent._moving_values import DIGEST as _DIGEST
from nodeagent._moving_values import MOVING as _MOVING
from nodeagent._moving_values import MOVING_ORDER as _MOVING_ORDER
from nodeagent._moving_values import split_slots as _split
from nodeagent._moving_values import static_digest as _digest
from nodeagent._origin import NotAnOrigin, parse_my_address
from nodeagent.master._notices import group_claimed
from slots import (
    DrainForecast,
    InvalidRequest,
    JobSpec,
    Machine,
    MachinePolicy,
    Resources,
    SlotsError,
    check_estimate_inputs,
)
from slots._ads import ACTIVE_NAMES as _ACTIVE_PAIRS
from slots._ads import (
    MachineInputs,
    finite_number,
    jobs_flat,
    jobs_flat_packed,
    jobs_of,
    machine_inputs,
)
from slots._classad import check_value
from slots._estimates import SuspendPolicy

__all__ = [
    "AdEntry",
    "AdStore",
    "CheckedStatics",
    "EntryFacts",
    "MachineInputs",
    "MovedOnAd",
    "NodeAd",
    "PackedSlots",
    "SlotsUnknown",
    "ad_parts",
    "carried_inputs",
    "check_my_address",
    "check_node_ad",
    "deflate",
    "entry_facts",
    "foreign_ad",
    "inflate",
    "may_hold_control",
    "moved_on",
    "prepare_moved_on",
    "prepare_node_ad",
    "project",
    "shared_inputs",
    "shared_values",
]


_SCALARS = frozenset((str, int, float, bool, type(None)))
#: Read with a default when absent, so ``null`` cannot stand for "absent".
_NOT_NULL = (
    "Cpus",
    "TotalJobRunTime",
    "MaxJobRetirementTime",
    "MachineMaxVacateTime",
    "VacateTimeRemaining",
    "DrainSuspendedJobs",
)
#: Summed over the nodes by the plan.
_STATISTICS = ("TotalMachineDrainingBadput", "TotalMachineDrainingUnclaimedTime")
#: Compared with strings, or looked up in sets of them.
_STRINGS = ("State", "Activity", "SlotType", "DrainSuspendedJobs")


#: What an ad's text may not hold: control characters but tab, DEL and the Unicode line
#: breaks. The ClassAd long format cannot carry them (a newline would start a line of its
#: own: another attribute), and a terminal showing them would obey them.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f\u2028\u2029]")


def may_hold_control(document: bytes) -> bool:
    """Whether the texts decoded from the UTF-8 JSON ``document`` may hold a character of
    :data:`_CONTROL` (false: they surely do not; ``check_node_ad(plain_text=True)``).

    A raw control character is not JSON, so only an escape (a backslash), a raw DEL or a
    raw U+2028 or U+2029 (whose UTF-8 starts with the byte 0xE2) can bring one. Looking
    for those three bytes costs a microsecond for a 13 kB ad; a document with any of them
    has its texts searched one by one.
    """
    return b"\\" in document or b"\x7f" in document or b"\xe2" in document


def _check_text(ad: Mapping[str, Any], name: str, text: str) -> None:
    """Refuse ``ad`` when its attribute ``name`` holds a character of :data:`_CONTROL`
    (``text``: its string, or the strings in its list or record, tab-separated)."""
    bad = _CONTROL.search(text)
    if bad is not None:
        raise _refuse(ad, f"{name} holds a control character ({bad.group()!r}): not in an ad")


def _strings_in(value: object) -> list[str]:
    """The strings in a list or record (its keys included), however nested (already
    bounded by ``check_value``)."""
    found = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


def _refuse(ad: Mapping[str, Any], message: str) -> InvalidRequest:
    return InvalidRequest(f"{ad.get('Name', 'an ad')}: {message}")


def _slot_machine(ad: Mapping[str, Any]) -> str:
    """The machine a slot ad belongs to, as its readers take it (the defrag daemon's
    ``machine_of``): ``Machine``, else the part of ``Name`` after ``@``, else ``Name``."""
    machine = ad.get("Machine")
    if isinstance(machine, str) and machine:
        return machine
    name = str(ad.get("Name", ""))
    return name.partition("@")[2] or name


def foreign_ad(ad: Mapping[str, Any], node: str) -> str | None:
    """Why the ad (``{"machine": {...}, "slots": [...]}``, as pushed or served; a part of
    another shape reads as empty) is not the node ``node``'s own; ``None`` if it is.

    A node's ad is its own when the machine ad's ``Name`` is ``node``, its ``Machine`` is
    absent or ``node``, and every slot ad belongs to ``node`` (its ``Machine``, else the
    part of its ``Name`` after ``@``): the names the master keys the ad by and matches the
    schedule's hostnames against, and the one the defrag daemon calls a slot's node by.
    Names compare exactly (an agent advertises one host name in all of them). ``MachineIp``
    is not checked: a schedule that names a machine by its ip alone matches whichever node
    advertises that ip.
    """
    machine, slots = ad.get("machine"), ad.get("slots")
    if not isinstance(machine, dict):
        machine = {}
    name = machine.get("Name")
    if name != node:
        return f"the ad's Name {_shown(name)} is not {node!r}"
    host = machine.get("Machine", node)
    if host != node:
        return f"the ad's Machine {_shown(host)} is not {node!r}"
    for slot in slots if isinstance(slots, list) else ():
        if isinstance(slot, Mapping) and _slot_machine(slot) != node:
            return (
                f"slot ad {_shown(slot.get('Name'))} is of machine "
                f"{_shown(_slot_machine(slot))}, not {node!r}"
            )
    return None


def _shown(value: object) -> str:
    """``value`` for a message: its repr, cut at 80 characters (it came from the network)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def check_my_address(machine: Mapping[str, Any], slots: Sequence[Mapping[str, Any]]) -> None:
    """Raise :class:`InvalidRequest` unless every ``MyAddress`` of the ad (machine and slot
    ads) is absent, a plain ``http(s)`` origin, or a Unix socket's address
    (:func:`nodeagent._origin.parse_my_address`): the master and the defrag daemon call a
    node at its ``MyAddress`` with paths of their own, and nothing else."""
    address = machine.get("MyAddress")
    for ad in (machine, *slots):
        value = ad.get("MyAddress")
        if value is None or (ad is not machine and value == address):
            continue
        try:
            parse_my_address(value)
        except NotAnOrigin as exc:
            raise _refuse(ad, f"MyAddress: {exc}") from None


def check_node_ad(
    machine: Mapping[str, Any],
    slots: Sequence[Mapping[str, Any]],
    *,
    plain_text: bool = False,
) -> None:
    """Raise :class:`InvalidRequest` unless the master can read a node's machine ad and
    slot ads wherever it reads them.

    Each value nests lists and records at most :data:`slots._classad.MAX_NESTING` deep
    (deeper ones cannot be evaluated, encoded as JSON nor rendered as ClassAds);
    ``State``, ``Activity``, ``SlotType`` and ``DrainSuspendedJobs`` are strings; the
    attributes read with a default (``Cpus``, ``TotalJobRunTime``,
    ``MaxJobRetirementTime``, ``MachineMaxVacateTime``, ``VacateTimeRemaining``,
    ``DrainSuspendedJobs``) are absent rather than ``null``; the machine's draining
    statistics the plan sums (``TotalMachineDrainingBadput``,
    ``TotalMachineDrainingUnclaimedTime``) are finite numbers; no text (strings, and the
    strings in lists and records) holds a character of :data:`_CONTROL`; every
    ``MyAddress`` is a plain origin (:func:`check_my_address`); then
    :func:`slots.check_estimate_inputs`. Agents' ads hold scalars and no ``null``: those
    are checked at the cost of a scan of the values. ``plain_text``: the caller knows that
    no text of the ads can hold such a character (the JSON they were read from escapes
    none: :func:`may_hold_control`), and the texts are not searched again.
    """
    for name in _STATISTICS:
        value = machine.get(name, 0)
        if not finite_number(value):
            raise _refuse(machine, f"{name} must be a finite number, not {value!r}")
    ads = (machine, *slots)
    for ad in ads:
        values = ad.values()
        if not _SCALARS.issuperset(map(type, values)):
            for name, value in ad.items():
                check_value(value, name=f"{ad.get('Name', 'an ad')}: {name}")
                if not plain_text and not isinstance(value, str | int | float | bool | None):
                    _check_text(ad, name, "\t".join(_strings_in(value)))
        if not plain_text and _CONTROL.search("\t".join([v for v in values if type(v) is str])):
            for name, value in ad.items():
                if type(value) is str:
                    _check_text(ad, name, value)
        for name in _STRINGS:
            value = ad.get(name, "")
            if type(value) is not str and value is not None:
                raise _refuse(ad, f"{name} must be a string, not {value!r}")
        if None in values:
            for name in _NOT_NULL:
                if name in ad and ad[name] is None:
                    raise _refuse(ad, f"{name} must be absent rather than null")
    check_my_address(machine, slots)
    check_estimate_inputs(ads)


def project(
    ads: Iterable[dict[str, Any]], projection: Sequence[str] | None
) -> list[dict[str, Any]]:
    """``ads`` with only the attributes named in ``projection`` (all of them without one)."""
    if not projection:
        return list(ads)
    return [{k: ad[k] for k in projection if k in ad} for ad in ads]


_RUNNING = frozenset({"Busy", "Retiring"})


def _ad_moved_on(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether ad ``after`` is ``before`` moved on in time (see :func:`moved_on`)."""
    if before.keys() != after.keys():
        return False
    for name, value in after.items():
        if name not in _MOVING and before[name] != value:
            return False
    followed = _clock_followed(before, after)
    return before == after if followed is None else followed


def _clock_followed(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool | None:
    """Whether the moving values of ad ``after`` are those of ``before`` moved as the
    clock did, for two ads equal but in :data:`_MOVING` (``before`` may hold its moving
    values alone; ``after`` is the whole ad: its ``Activity`` is read); ``None`` when
    neither has a clock (``MyCurrentTime`` absent or null in both): then they are moved on
    only if equal."""
    was, now = before.get("MyCurrentTime"), after.get("MyCurrentTime")
    if type(was) is not int or type(now) is not int or now < was:
        return None if was is None and now is None else False
    d = now - was
    run, ran = after.get("TotalJobRunTime", 0), before.get("TotalJobRunTime", 0)
    if type(run) is not int or type(ran) is not int:
        return False
    if run != (ran + d if after.get("Activity") in _RUNNING else ran):
        return False
    left, had = after.get("VacateTimeRemaining"), before.get("VacateTimeRemaining")
    if after.get("Activity") == "Vacating" and type(left) is int and type(had) is int:
        return left == max(0, had - d)
    return left == had


def _interned(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def shared_values(machine: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a node's machine ad whose string values are interned: equal ones are one
    object across every node's entry (an OS, a state, a policy expression), so that 100,000
    entries do not each hold their own. Equal to ``dict(machine)``; a new dict each call,
    so that one node's entry never shares its dict with another's."""
    return {
        key: sys.intern(value) if type(value) is str else value for key, value in machine.items()
    }


def moved_on(
    before: AdEntry,
    machine: Mapping[str, Any],
    slots: Sequence[Mapping[str, Any]],
    *,
    packed: PackedSlots | None = None,
) -> bool:
    """Whether a node's new ad (``machine`` and ``slots``) is its previous one,
    ``before``, moved on in time: the same attributes, every one equal but those that move
    with the clock (:data:`_MOVING`), and those moved as the clock did — each ad's
    ``MyCurrentTime`` on by ``d`` (never back), a running job's ``TotalJobRunTime`` on by
    ``d`` and any other's unchanged, a vacating job's ``VacateTimeRemaining`` down by
    ``d`` (not below 0), the completions of a drain started now (``ExpectedMachine*``)
    only while a job is active. A claim started or ended, a state, a policy, a drain, a
    statistic changed, a clock that went back or a run time that did not follow the
    clock: not moved on.

    Such an ad has the same forecast from its ``MyCurrentTime`` on (the forecast brings
    each job from its ad's time to the time read, :class:`slots.DrainForecast`) and the
    same derived facts, so its entry keeps the previous entry's (:meth:`AdStore.update`).

    ``packed``: ``slots`` packed after the previous entry's (``PackedSlots(slots,
    after=before.slots)``). When it shares their static part (their JSON is the same but
    for the moving values), the slot ads are not read back: their moving values alone are
    compared, every other value being equal. Otherwise (a value changed; or one equal
    but written otherwise in JSON, such as ``1`` and ``1.0``, or keys in another order) the
    previous slot ads are read back and compared value by value, so the answer is the
    same either way for every ad read from JSON, as the master's are. (A value JSON cannot
    hold, such as a float NaN or a tuple, given by a caller in the process, compares as
    its JSON: it is packed so.)
    """
    active = any((s.get("State"), s.get("Activity")) in _ACTIVE_PAIRS for s in slots)
    return _moved_on(before, machine, slots, packed=packed, clocks=slots, active=active)


def _moved_on(
    before: AdEntry,
    machine: Mapping[str, Any],
    slots: Sequence[Mapping[str, Any]],
    *,
    packed: PackedSlots | None,
    clocks: Sequence[Mapping[str, Any]],
    active: bool,
    kept_moving: list[dict[str, Any]] | None = None,
) -> bool:
    """:func:`moved_on`, given for each slot its moving values and ``Activity``
    (``clocks``: the slot ads themselves will do) and whether a job is active on the node
    (``active``); ``slots`` are read only when ``packed`` does not share the previous
    entry's static part. ``kept_moving``: the previous entry's moving values, when the
    caller has read them."""
    if len(slots) != len(before.slots) or not _ad_moved_on(before.machine, machine):
        return False
    kept = before.slots
    if packed is not None and isinstance(kept, PackedSlots) and packed.shares_static(kept):
        if kept_moving is None:
            kept_moving = kept.moving_values()
        for slot, was in zip(clocks, kept_moving, strict=True):
            followed = _clock_followed(was, slot)
            if followed is None:
                followed = all(slot[name] == value for name, value in was.items())
            if not followed:
                return False
    elif not all(_ad_moved_on(a, b) for a, b in zip(kept, slots, strict=True)):
        return False
    # The completions a drain started now would reach move with the clock while a job
    # runs; on an idle node they stay (the idle rule), and the forecast reads them.
    return active or all(before.machine.get(name) == machine.get(name) for name in _COMPLETIONS)


def _finite_numbers(moving: Iterable[Mapping[str, Any]]) -> bool:
    """Whether every moving value (:func:`_split`) is an int or a float whose value as a
    float is finite (:func:`~slots._ads.finite_number`): then none fails a check."""
    values = [value for values in moving for value in values.values()]
    if not _NUMBER_TYPES.issuperset(map(type, values)):
        return False
    try:
        return all(map(math.isfinite, values))
    except OverflowError:  # an int beyond a float's range
        return False


_NUMBER_TYPES = frozenset((int, float))


class CheckedStatics:
    """The digests of the static parts (:class:`PackedSlots`) of slot ads that passed
    :func:`check_node_ad`, in a process that keeps no previous ads (an ingest worker): a
    node's next ad, its slot ads' static part the same, has only its moving values
    checked (:func:`prepare_node_ad`). Whether slot ads pass is a matter of their content
    alone, and the digest holds 128 bits of it: slot ads that would be refused cannot be
    made to look like ones that passed.

    Bounded: the digests added or found since the last ``size`` were added, and those
    before them (between ``size`` and ``2 × size`` digests, ≈ 100 bytes each); a digest
    found among the older ones is kept with the newer. ``size`` above the number of nodes
    keeps every node's."""

    __slots__ = ("_older", "_recent", "_size")

    def __init__(self, size: int = 131_072) -> None:
        self._size = size
        self._recent: set[bytes] = set()
        self._older: set[bytes] = set()

    def __contains__(self, digest: bytes) -> bool:
        if digest in self._recent:
            return True
        if digest in self._older:
            self.add(digest)
            return True
        return False

    def __len__(self) -> int:
        return len(self._recent | self._older)

    def add(self, digest: bytes) -> None:
        self._recent.add(digest)
        if len(self._recent) >= self._size:
            self._older, self._recent = self._recent, set()


def deflate(data: bytes, dictionary: bytes, *, level: int = 3) -> bytes:
    """``data`` raw-deflated (no header nor checksum) with ``dictionary`` (may be empty)."""
    packer = zlib.compressobj(level, zlib.DEFLATED, -15, zdict=dictionary)
    return packer.compress(data) + packer.flush()


def inflate(data: bytes | memoryview, dictionary: bytes) -> bytes:
    """What :func:`deflate` made with ``dictionary``."""
    unpacker = zlib.decompressobj(-15, zdict=dictionary)
    return unpacker.decompress(data) + unpacker.flush()


def _agent_slots() -> bytes:
    """The static JSON of an agent's slot ads (a partitionable slot and one claim, from
    :class:`slots.Machine`, the agent's model): the deflate dictionary of the static parts,
    which then need not spell out the first slot's attribute names (≈ 1.0 → 0.5 kB for 8
    claims). A constant of the process: packed slot ads are never kept outside it."""
    node = Machine(
        host="node",
        total=Resources(cpus=2),
        policy=MachinePolicy(),
        now=0,
        address="http://node:9621",
        ip="10.0.0.1",
    )
    node.claim(0, resources=Resources(cpus=1), spec=JobSpec(job_id="1.0", owner="user"))
    return _split(node.ad(60)["slots"])[0]


_STATIC_DICTIONARY = _agent_slots()
#: The deflate dictionary of the moving values: their names.
_MOVING_DICTIONARY = orjson.dumps([dict.fromkeys(_MOVING_ORDER, 0)])


class PackedSlots(Sequence[dict[str, Any]]):
    """A node's slot ads kept packed and read back whole on each iteration, as fresh dicts
    equal to the slot ads given, their keys in the same order.

    Kept in two parts: the *static* part, the slot ads' JSON with every value that moves
    with the clock (:data:`_MOVING`) null, raw-deflated with an agent's slot ads as the
    dictionary (≈ 0.5 kB for 8 claims against ≈ 30 KiB as dicts), after a digest of it (the
    first 16 bytes of its SHA-256); and the moving values, a record per slot (JSON,
    deflated with their names as the dictionary: ≈ 0.2 kB). Made after the node's previous
    ad's (``after``), slot ads whose static JSON is the previous one's share its bytes (one
    object, not compressed again): a node's ads moved on in time (:func:`moved_on`) differ
    only in their moving values.

    The master reads a node's slot ads rarely (its forecast once per piece, a query, the
    claims of a notice); what it reads often is derived once and kept with the entry
    (:class:`AdEntry`). Packing costs ≈ 35 µs an ad (≈ 45 µs when the static part is
    compressed), reading back ≈ 30 µs.

    An ingest worker, which has no previous ad to pack after, leaves the static part
    *unsettled* (``deflated=False``): its JSON as it is, after its digest. The master then
    settles it against the node's previous ad (:meth:`share_static`), and compresses it
    only when it differs, as it does for an ad that changed: a node's ads moved on in time
    are compressed nowhere.
    """

    __slots__ = ("_count", "_moving", "_raw", "_static")
    _static: bytes  # the digest of the static JSON, then that JSON deflated (unless _raw)
    _raw: bytes | None  # unsettled: the static JSON itself, _static its digest alone
    _moving: bytes  # the moving values' JSON, deflated
    _count: int

    def __init__(
        self, slots: Sequence[Mapping[str, Any]], *, after: PackedSlots | None = None
    ) -> None:
        static, moving = _split(slots)
        self._pack(static, _digest(static), moving, after)

    def _pack(
        self,
        static: bytes,
        digest: bytes,
        moving: list[dict[str, Any]],
        after: PackedSlots | None,
        *,
        deflated: bool = True,
    ) -> None:
        self._raw = None
        if after is not None and after._raw is None and after._static.startswith(digest):
            self._static = after._static
        elif deflated:
            self._static = digest + deflate(static, _STATIC_DICTIONARY)
        else:
            self._static, self._raw = digest, static
        self._moving = self.pack_moving(moving)
        self._count = len(moving)

    @classmethod
    def _of_split(
        cls,
        static: bytes,
        digest: bytes,
        moving: list[dict[str, Any]],
        after: PackedSlots | None,
        *,
        deflated: bool = True,
    ) -> PackedSlots:
        packed = cls.__new__(cls)
        packed._pack(static, digest, moving, after, deflated=deflated)
        return packed

    @property
    def digest(self) -> bytes:
        """The digest of the static JSON (the first bytes of its SHA-256)."""
        return self._static[:_DIGEST]

    @staticmethod
    def pack_moving(moving: Sequence[Mapping[str, Any]]) -> bytes:
        """Slot ads' moving values (:func:`split_slots`'), packed as they are kept."""
        return deflate(orjson.dumps(moving), _MOVING_DICTIONARY)

    def moved_on(self, packed: bytes, count: int) -> PackedSlots:
        """Slot ads of this static part (settled) with other moving values
        (:meth:`pack_moving`), ``count`` of them."""
        self._settle()
        moved = PackedSlots.__new__(PackedSlots)
        moved._static, moved._raw, moved._moving, moved._count = self._static, None, packed, count
        return moved

    def parts(self) -> tuple[bytes, bytes, int, bool]:
        """What the slot ads are kept as: their static part (digest, then deflated; or,
        unsettled, then its JSON), their moving values (deflated), their count, whether the
        static part is deflated; :meth:`of_parts` makes them again (in another process: an
        ingest worker's packed slot ads go to the master so)."""
        if self._raw is not None:
            return self._static + self._raw, self._moving, self._count, False
        return self._static, self._moving, self._count, True

    @classmethod
    def of_parts(
        cls, static: bytes, moving: bytes, count: int, *, deflated: bool = True
    ) -> PackedSlots:
        """The slot ads kept as ``parts()`` said; raises :class:`ValueError` unless
        ``static`` holds a digest and some bytes after it and ``count`` is not negative
        (what they hold is read, and found whole or not, when they are unpacked)."""
        if len(static) <= _DIGEST or not moving or count < 0:
            raise ValueError("not the parts of packed slot ads")
        packed = cls.__new__(cls)
        packed._moving, packed._count = moving, count
        if deflated:
            packed._static, packed._raw = static, None
        else:
            packed._static, packed._raw = static[:_DIGEST], static[_DIGEST:]
        return packed

    def share_static(self, previous: PackedSlots | None) -> None:
        """Hold ``previous``'s static part (one object) when it is the same as this one's
        (the same digest): what a node's ads moved on in time have in common is kept once
        however it was made. An unsettled static part is settled: ``previous``'s, else
        compressed here."""
        if previous is not None and previous._raw is None:
            kept = previous._static
            if self._static is not kept and self._static[:_DIGEST] == kept[:_DIGEST]:
                self._static, self._raw = kept, None
                return
        self._settle()

    def _settle(self) -> None:
        """Compress the static part if it is not yet."""
        if self._raw is not None:
            self._static += deflate(self._raw, _STATIC_DICTIONARY)
            self._raw = None

    def shares_static(self, other: PackedSlots) -> bool:
        """Whether these slot ads' static part is ``other``'s (made ``after`` it, or shared
        with it by :meth:`share_static`, with the same static JSON): the two differ in
        their moving values at most."""
        return self._static is other._static

    def moving_values(self) -> list[dict[str, Any]]:
        """The slot ads' values of :data:`_MOVING`: a new dict per slot, of those it has."""
        values: list[dict[str, Any]] = orjson.loads(inflate(self._moving, _MOVING_DICTIONARY))
        return values

    def unpacked(self) -> list[dict[str, Any]]:
        """The slot ads as a new list of new dicts."""
        self._settle()
        ads: list[dict[str, Any]] = orjson.loads(
            inflate(memoryview(self._static)[_DIGEST:], _STATIC_DICTIONARY)
        )
        for ad, values in zip(ads, self.moving_values(), strict=True):
            ad.update(values)  # each key is there, null: it keeps its place
        return ads

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.unpacked())

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self.unpacked()[index]

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of equal slot ads (packed or not), as their contents
        compare."""
        if isinstance(other, PackedSlots):
            self._settle()
            other._settle()
            if self._static == other._static and self._moving == other._moving:
                return True
            return self._count == other._count and self.unpacked() == other.unpacked()
        return isinstance(other, Sequence) and self.unpacked() == list(other)

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return f"PackedSlots({self.unpacked()!r})"


#: Hook states that keep a node closed (``DrainHookState``, docs/attributes.md).
_HOOK_HOLDS = frozenset({"pending", "running", "failed"})


@dataclass(frozen=True, kw_only=True)
class AdEntry:
    """One node's latest ad as the master holds it.

    What is derived from the ad alone (its forecast, whether it is empty) is computed on
    first use and kept with the entry, which a newer ad replaces.
    """

    name: str
    machine: dict[str, Any]
    #: The slot ads (a node's are kept packed: :class:`PackedSlots`).
    slots: Sequence[dict[str, Any]]
    received_at: float
    updates: int
    #: Shared by the entries of a node's successive ads while each is the one before moved
    #: on in time (:func:`moved_on`): what is derived from them (the forecast, the plan's
    #: row templates) holds for all of them.
    basis: object = field(default_factory=object, compare=False, repr=False)
    #: Each slot ad's ``Activity`` (``None`` when it has none; a string interned) and
    #: whether a job is active on the node, from the push that brought the slot ads: what
    #: a push of their moving values alone takes of them (:meth:`AdStore.take_moved_on`).
    slot_activities: tuple[tuple[Any, ...], bool] = field(
        default=((), False), compare=False, repr=False
    )

    @property
    def my_type(self) -> str:
        return str(self.machine.get("MyType", "Machine"))

    @cached_property
    def hostname(self) -> str:
        return str(self.machine.get("Machine", self.name))

    @cached_property
    def ip(self) -> str | None:
        ip = self.machine.get("MachineIp")
        return None if ip is None else str(ip)

    @cached_property
    def address(self) -> str | None:
        address = self.machine.get("MyAddress")
        return None if address is None else str(address)

    def age(self, now: float) -> float:
        return max(0.0, now - self.received_at)

    @cached_property
    def forecast(self) -> DrainForecast:
        """The node's drain estimates and blockers at any ``now`` (from its slot ads;
        seeded by :meth:`AdStore.take` with their jobs' inputs when the ad came with them,
        :class:`EntryFacts`)."""
        return self.forecast_with()

    def forecast_with(self, jobs: Sequence[int] | None = None) -> DrainForecast:
        """A new forecast of the node's slot ads, given their active jobs' inputs
        (``jobs``, as :func:`~slots._ads.jobs_flat` writes them) if the caller has them."""
        previous = {name: self.machine.get(name) for name in _COMPLETIONS}
        return DrainForecast(self.slots, previous, machine=self.machine_inputs, jobs=jobs)

    @cached_property
    def machine_inputs(self) -> MachineInputs:
        """What a forecast reads of the machine's slot ads before its jobs
        (:func:`~slots._ads.machine_inputs`); seeded by :meth:`AdStore.take` when the ad
        came with it (:class:`EntryFacts`), read back from the slot ads otherwise."""
        return shared_inputs(machine_inputs(self.slots))

    @cached_property
    def drain_bound(self) -> float:
        """Seconds a graceful drain may take on this node, whatever it accepts before:
        ``max(MaxJobRetirementTime, MachineMaxVacateTime)``."""
        return float(
            max(
                int(self.machine.get("MaxJobRetirementTime", 0)),
                int(self.machine.get("MachineMaxVacateTime", 600)),
            )
        )

    @cached_property
    def before_window(self) -> str | None:
        """How the node admits a claim whose promise would outlive its window
        (``BeforeWindow``: ``refuse``, ``shorten`` or ``admit``); ``None`` when its ad does
        not say (an agent that predates the key admits such claims)."""
        value = self.machine.get("BeforeWindow")
        return value if value in ("refuse", "shorten", "admit") else None

    def admits_by_promise(self, window_start: float, now: float) -> bool:
        """Whether no claim the node admits from ``now`` on can outlive a window at
        ``window_start``: it refuses or shortens such claims (:attr:`before_window`) and
        its ad shows that it holds this window (``UnavailabilityStart``, whole seconds), or
        an earlier one that has not started (a window since moved later). A node that has
        not heard of the window yet, or holds an earlier one that has started (it then
        admits by none), admits any promise. :meth:`held_window` says until when the
        answer holds."""
        if self.before_window not in ("refuse", "shorten"):
            return False
        held = self.held_window
        return held is not None and (held == math.floor(window_start) or now < held < window_start)

    @cached_property
    def held_window(self) -> int | None:
        """The start of the window the node's ad holds (``UnavailabilityStart``)."""
        held = self.machine.get("UnavailabilityStart")
        return held if type(held) is int else None

    @cached_property
    def vacate_bound(self) -> float:
        """Seconds a graceful drain takes at most on a node that admits by promise:
        ``MachineMaxVacateTime``.

        A job the node admits before the drain starts has a promise that ends by the
        window's start (that is what admitting by promise means). A graceful drain started
        at ``T`` soft-kills a job when its retirement left falls to its vacate time
        ``V_i`` (DESIGN §3.3), and a job that borrows more than ``MachineMaxVacateTime``
        borrows it from that retirement: its ``V_i`` never exceeds what is left of its
        promise. So every such job is gone by its promise's end or by ``T`` plus
        ``MachineMaxVacateTime``, whichever is later; no job's own vacate time moves the
        bound. A job in force whose promise ends after the window (admitted before the
        node heard of it) is cut at the window however early the drain starts."""
        return float(self.machine.get("MachineMaxVacateTime", 600))

    @cached_property
    def cores(self) -> int:
        """The node's cores (``TotalCpus``; 0 when its ad does not say)."""
        cores = self.machine.get("TotalCpus", 0)
        return cores if type(cores) is int and cores > 0 else 0

    @cached_property
    def shutting_down(self) -> bool:
        """The node's machine is shutting down (its ad's ``ShuttingDown`` is true): its
        agent drains it with a drain of its own (reason ``shutdown``), and the node comes
        back by itself after the reboot."""
        return self.machine.get("ShuttingDown") is True

    @cached_property
    def drain(self) -> dict[str, Any]:
        """The node's drain as the plan shows it (read-only: plans share it)."""
        machine = self.machine
        return {
            "state": machine.get("DrainState", "none"),
            "request_id": machine.get("DrainingRequestId"),
            "reason": machine.get("DrainReason"),
            "schedule": machine.get("DrainSchedule"),
            "shutting_down": self.shutting_down,
        }

    @cached_property
    def statistics(self) -> dict[str, Any]:
        """The node's draining statistics as the plan shows them (read-only: shared)."""
        return {
            name: self.machine.get(name, 0)
            for name in ("TotalMachineDrainingBadput", "TotalMachineDrainingUnclaimedTime")
        }

    @cached_property
    def service(self) -> dict[str, Any]:
        """Whether the node takes work, and what keeps it out (read-only: plans share it).

        ``in_service``: its ad's ``Start`` is not false, its drain's completion hook is
        not due, running or failed (``hook_holds``: the hook of the drain in force is one
        of those), and its health gate (if any) is open. ``hook`` and
        ``health`` are the node's ``DrainHook*`` and ``Health*`` attributes, ``None`` when
        it publishes none.
        """
        machine = self.machine
        hook = None
        if machine.get("DrainHookName") is not None:
            hook = {
                "request_id": machine.get("DrainHookRequestId"),
                "name": machine.get("DrainHookName"),
                "state": machine.get("DrainHookState"),
                "exit_status": machine.get("DrainHookExitStatus"),
                "message": machine.get("DrainHookMessage"),
                "started": machine.get("DrainHookStartTime"),
                "ended": machine.get("DrainHookEndTime"),
            }
        health = None
        if machine.get("HealthState") is not None:
            health = {
                "state": machine.get("HealthState"),
                "reason": machine.get("HealthReason"),
                "passes": machine.get("HealthPasses"),
                "passes_needed": machine.get("HealthPassesNeeded"),
                "failures": machine.get("HealthFailures"),
                "message": machine.get("HealthMessage"),
                "next_check": machine.get("HealthNextCheck"),
            }
        held = (  # the hook of the drain request in force (docs/attributes.md)
            hook is not None
            and hook["state"] in _HOOK_HOLDS
            and hook["request_id"] == machine.get("DrainingRequestId")
        )
        return {
            "in_service": machine.get("Start", True) is not False
            and not held
            and (health is None or health["state"] == "passing"),
            "hook_holds": held,
            "hook": hook,
            "health": health,
        }

    @cached_property
    def tally(self) -> tuple[int, int, int, int, int, int, int]:
        """What the plan's totals count of this node: empty, out of service, hook
        running, hook failed, health failing (each 0 or 1), its draining badput and
        unclaimed time so far."""
        service = self.service
        hook, health = service["hook"], service["health"]
        out = not service["in_service"]
        statistics = self.statistics
        return (
            int(self.empty),
            int(out),
            int(out and hook is not None and hook["state"] == "running"),
            int(out and hook is not None and hook["state"] == "failed"),
            int(out and health is not None and health["state"] == "failing"),
            int(statistics["TotalMachineDrainingBadput"]),
            int(statistics["TotalMachineDrainingUnclaimedTime"]),
        )

    @cached_property
    def empty(self) -> bool:
        """No dynamic slot holds an active job."""
        return _empty(self.slots)

    @cached_property
    def grouped(self) -> bool:
        """A slot ad is a claim of a job group (:func:`~nodeagent.master._notices.group_claim`):
        without one the node's notices read no claims, and its slot ads are not read back
        for them."""
        return group_claimed(self.slots)


#: The facts an entry derives from its ad (every cached property of :class:`AdEntry`): kept
#: from the previous entry when the ad only moved on in time. None reads a moving value
#: but the forecast, which brings them to the time it is read at (:func:`moved_on`).
_KEPT_FACTS = tuple(
    name for name, value in vars(AdEntry).items() if isinstance(value, cached_property)
)


def ad_parts(ad: object) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """The machine ad, the slot ads and the ``MyType`` of a pushed ad (``{"machine":
    {...}, "slots": [...]}``); raises :class:`InvalidRequest` unless it is shaped so, with
    a ``Name`` and every slot ad an object."""
    if not isinstance(ad, Mapping):
        raise InvalidRequest("an ad is {'machine': {...}, 'slots': [...]}")
    machine = ad.get("machine")
    slots = ad.get("slots")
    if not isinstance(machine, dict) or not isinstance(slots, list):
        raise InvalidRequest("an ad is {'machine': {...}, 'slots': [...]}")
    name = machine.get("Name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("the machine ad has no Name")
    if not all(isinstance(s, dict) for s in slots):
        raise InvalidRequest("every slot ad must be an object")
    my_type = machine.get("MyType", "Machine")
    if type(my_type) is not str:
        raise InvalidRequest(f"{name}: MyType must be a string, not {my_type!r}")
    return machine, slots, my_type


#: The machine inputs most nodes share (no drain deadline), one tuple each.
_INPUTS: dict[tuple[int, SuspendPolicy], MachineInputs] = {}
_SHARED_INPUTS_LIMIT = 1024


def shared_inputs(inputs: MachineInputs) -> MachineInputs:
    """``inputs``, as the one tuple kept for them when they name no deadline (a pool's
    nodes have a few vacate times and policies: 100,000 entries share a few tuples)."""
    vacate, policy, deadline = inputs
    key = (vacate, policy)
    if deadline is not None:
        return inputs
    if key not in _INPUTS and len(_INPUTS) >= _SHARED_INPUTS_LIMIT:
        return inputs  # a pool of that many vacate times keeps a tuple per entry
    return _INPUTS.setdefault(key, inputs)


@dataclass(frozen=True, slots=True)
class EntryFacts:
    """What an entry reads of its slot ads for its plan, made where they are parsed."""

    #: :attr:`AdEntry.empty`.
    empty: bool
    #: :attr:`AdEntry.grouped`.
    grouped: bool
    #: :attr:`AdEntry.machine_inputs`.
    machine_inputs: MachineInputs
    #: The active jobs' inputs its forecast reads (:func:`~slots._ads.jobs_flat`, 64-bit
    #: integers), or ``None`` (read back from the slot ads by its first piece).
    jobs: Sequence[int] | None = None


def _empty(slots: Iterable[Mapping[str, Any]]) -> bool:
    return not any(
        (s.get("State"), s.get("Activity")) in _ACTIVE_PAIRS
        for s in slots
        if s.get("SlotType") == "Dynamic"
    )


def entry_facts(slots: Sequence[Mapping[str, Any]]) -> EntryFacts | None:
    """The :class:`EntryFacts` of these slot ads; ``None`` for those a forecast's own
    read would refuse, or whose inputs an ingest worker's frame would not carry
    (:func:`carried_inputs`): the entry then reads them back, as it did."""
    try:
        inputs = machine_inputs(slots)
    except (TypeError, ValueError, OverflowError):
        return None
    if not carried_inputs(inputs):
        return None
    try:
        jobs = jobs_flat_packed(jobs_flat(jobs_of(slots)))  # None: beyond 64 bits
    except (TypeError, ValueError, OverflowError, KeyError):  # the forecast's read refuses
        jobs = None
    return EntryFacts(
        empty=_empty(slots),
        grouped=group_claimed(slots),
        machine_inputs=shared_inputs(inputs),
        jobs=jobs,
    )


def carried_inputs(inputs: tuple[Any, ...]) -> bool:
    """Whether machine inputs are as an ingest worker's frame carries them: a 64-bit
    vacate time, a policy, no deadline or a number (64-bit when whole)."""
    vacate, policy, deadline = inputs
    return (
        type(vacate) is int
        and -(2**63) <= vacate < 2**63
        and isinstance(policy, SuspendPolicy)
        and (
            deadline is None
            or type(deadline) is float
            or (type(deadline) is int and -(2**63) <= deadline < 2**63)
        )
    )


@dataclass(frozen=True, slots=True)
class NodeAd:
    """A node's ad checked and its slot ads packed (:func:`prepare_node_ad`), ready for
    :meth:`AdStore.take`: what needs nothing of the store, made in an ingest worker
    process or in the master's."""

    #: The machine ad, checked (:func:`check_node_ad`).
    machine: dict[str, Any]
    slots: PackedSlots
    #: Each slot ad's moving values (:data:`_MOVING`) and its ``Activity``: what
    #: :func:`moved_on` reads of a new ad whose static part is the previous one's.
    clocks: tuple[dict[str, Any], ...]
    #: Whether a job is active on the node (a slot ``Claimed``/``Busy`` or ``Retiring``).
    active: bool
    #: What the entry would read back of its slot ads (:class:`EntryFacts`: ``empty``,
    #: ``grouped``, the machine's inputs and its jobs' inputs to the forecast), made while
    #: the slot ads are at hand (``None``: read back when first asked, as for an ad moved
    #: on in time, which keeps its entry's).
    facts: EntryFacts | None = None


@dataclass(frozen=True, slots=True)
class MovedOnAd:
    """A node's ad pushed with its slot ads' moving values alone (``moved_on``), checked
    (:func:`prepare_moved_on`), for :meth:`AdStore.take_moved_on`: the rest of the slot
    ads is the static part of the digest ``digest``, which the store holds, or not."""

    #: The machine ad, checked (:func:`check_node_ad`).
    machine: dict[str, Any]
    #: The digest of the static part the moving values go with.
    digest: bytes
    #: Each slot ad's moving values, in the order of :data:`_MOVING_ORDER`.
    moving: tuple[dict[str, Any], ...]
    #: ``moving`` packed as :class:`PackedSlots` keeps them.
    packed: bytes


class SlotsUnknown(SlotsError):
    """A push of the moving values alone whose slot ads the master does not hold (a
    master started since, another static part, other slots): the node pushes its whole
    ad."""

    code = "ad.slots_unknown"
    http_status = 409


#: The keys of a slot's moving values met so far that are some of :data:`_MOVING` in the
#: order of :data:`_MOVING_ORDER` (2**13 at most): a record with such keys, as an agent
#: pushes them, is taken as it came (≈ 0.3 µs a record, against ≈ 3 to check and copy it).
_ORDERED_KEYS: set[tuple[str, ...]] = set()


def _in_moving_order(values: dict[str, Any]) -> dict[str, Any]:
    """A slot's moving values in the order of :data:`_MOVING_ORDER` (``values`` itself
    when they are); raises :class:`InvalidRequest` for a name not of :data:`_MOVING`."""
    if tuple(values) in _ORDERED_KEYS:
        return values
    other = values.keys() - _MOVING
    if other:
        raise InvalidRequest(f"moved_on: {sorted(other)[0]!r} is not a moving value")
    ordered = {name: values[name] for name in _MOVING_ORDER if name in values}
    _ORDERED_KEYS.add(tuple(ordered))
    return ordered


def prepare_moved_on(
    machine: dict[str, Any], moved: object, *, plain_text: bool = False
) -> MovedOnAd:
    """A node's ad pushed as ``{"machine": {...}, "moved_on": {"slots_digest": HEX,
    "moving": [{...}, ...]}}`` checked: the machine ad as :func:`check_node_ad` checks
    it, ``slots_digest`` the 32 hexadecimal digits of a static part's digest, ``moving``
    a record per slot ad of its values of :data:`_MOVING`, each a finite number (the
    slot ads they go with passed when the master took them). Raises
    :class:`InvalidRequest`. Pure: an ingest worker process runs it, or the master."""
    if not isinstance(moved, dict) or set(moved) != {"slots_digest", "moving"}:
        raise InvalidRequest("moved_on is {'slots_digest': str, 'moving': [{...}, ...]}")
    digest, moving = moved["slots_digest"], moved["moving"]
    if (
        type(digest) is not str
        or len(digest) != 2 * _DIGEST
        or digest.strip("0123456789abcdef") != ""
    ):
        raise InvalidRequest(f"moved_on: slots_digest is {2 * _DIGEST} hexadecimal digits")
    if not isinstance(moving, list) or not all(type(values) is dict for values in moving):
        raise InvalidRequest("moved_on: moving is a list of records, one per slot ad")
    ordered = tuple(map(_in_moving_order, moving))
    if not _finite_numbers(ordered):
        raise InvalidRequest("moved_on: every moving value is a finite number")
    check_node_ad(machine, (), plain_text=plain_text)
    return MovedOnAd(
        machine=machine,
        digest=bytes.fromhex(digest),
        moving=ordered,
        packed=PackedSlots.pack_moving(ordered),
    )


def prepare_node_ad(
    machine: dict[str, Any],
    slots: Sequence[Mapping[str, Any]],
    *,
    plain_text: bool = False,
    after: PackedSlots | None = None,
    deflated: bool = True,
    checked: CheckedStatics | None = None,
) -> NodeAd:
    """A node's machine ad and slot ads (:func:`ad_parts`) checked (:func:`check_node_ad`,
    which raises :class:`InvalidRequest`) and packed (:class:`PackedSlots`, ``after`` the
    previous ad's when the caller has it; their static part left unsettled unless
    ``deflated``). Pure but for ``checked``: an ingest worker process runs it on the
    bodies of the pushes, or the master itself.

    Slot ads whose static part is that of slot ads that passed (``after``'s, which the
    store took, or one of ``checked``, where this adds those that pass) and whose moving
    values are finite numbers pass as they did: only the machine ad is checked again
    (most pushes are a node's ad moved on in time). The answer is the full check's."""
    try:
        static, moving = _split(slots)
    except orjson.JSONEncodeError:  # what the checks refuse first, or what they let by
        check_node_ad(machine, slots, plain_text=plain_text)
        raise
    digest = _digest(static)
    known = (after is not None and after.digest == digest) or (
        checked is not None and digest in checked
    )
    # slot ads known to pass are not checked again (a MyAddress of theirs is an origin:
    # one that passed, or the machine's when they passed, which passed)
    check_node_ad(
        machine, () if known and _finite_numbers(moving) else slots, plain_text=plain_text
    )
    if checked is not None and not known:
        checked.add(digest)
    clocks = tuple(
        values if "Activity" not in slot else {**values, "Activity": slot["Activity"]}
        for slot, values in zip(slots, moving, strict=True)
    )
    return NodeAd(
        machine=machine,
        slots=PackedSlots._of_split(static, digest, moving, after, deflated=deflated),
        clocks=clocks,
        active=any((s.get("State"), s.get("Activity")) in _ACTIVE_PAIRS for s in slots),
        facts=entry_facts(slots),
    )


_V = TypeVar("_V", str, tuple[str | None, str | None])


class _Index(Generic[_V]):
    """A key's values (names, say), the value itself while a key has one, as most keys
    do (a host name, an ip): a set of one costs 216 bytes, and the store keeps three such
    indexes of 100,000 keys. A key whose last value goes is dropped."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[str, _V | set[_V]] = {}

    def add(self, key: str, value: _V) -> None:
        held = self._values.get(key)
        if held is None:
            self._values[key] = value
        elif type(held) is set:
            held.add(value)
        elif held != value:
            self._values[key] = {held, value}  # type: ignore[arg-type]

    def discard(self, key: str, value: _V) -> None:
        held = self._values.get(key)
        if type(held) is set:
            held.discard(value)
            if len(held) == 1:
                self._values[key] = next(iter(held))
        elif held is not None and held == value:
            del self._values[key]

    def get(self, key: str) -> tuple[_V, ...]:
        held = self._values.get(key)
        if held is None:
            return ()
        if type(held) is set:
            return tuple(held)
        return (held,)  # type: ignore[return-value]

    def pop(self, key: str) -> tuple[_V, ...]:
        values = self.get(key)
        self._values.pop(key, None)
        return values


class AdStore:
    """The ads of every node that ever reported, with expiry by ``lifetime``; a node whose
    last ad said it was shutting down is rebooting, not lost, for ``reboot_grace`` more."""

    def __init__(self, *, lifetime: float, reboot_grace: float = 1800.0) -> None:
        self.lifetime = lifetime
        self.reboot_grace = reboot_grace
        self._entries: dict[str, AdEntry] = {}
        self._others: dict[tuple[str, str], AdEntry] = {}
        self._by_host: _Index[str] = _Index()
        self._by_ip: _Index[str] = _Index()
        # find()'s answers (a reconcile pass asks for every scheduled machine each
        # second), and the keys of those answers that each hostname or ip is part of.
        self._found: dict[tuple[str | None, str | None], list[AdEntry]] = {}
        self._found_by: _Index[tuple[str | None, str | None]] = _Index()
        self.received = 0
        #: Ads that were their node's previous one moved on in time (:func:`moved_on`).
        self.moved_on_ads = 0
        #: Ads pushed with their slot ads' moving values alone, taken
        #: (:meth:`take_moved_on`), and refused for slot ads not held.
        self.moving_values_pushed = 0
        self.slots_unknown = 0
        self.expired = 0
        self._lost: set[str] = set()
        #: Each watcher's set, and the set it is told of ads moved on quietly in (``None``:
        #: the same).
        self._watchers: list[
            tuple[set[tuple[str, str | None]], set[tuple[str, str | None]] | None]
        ] = []
        self._name_watchers: list[set[str]] = []
        # When each ad held turns its node lost (received_at + its span), for sweep(),
        # with stale entries; and the lifetime and grace they were reckoned with.
        self._expiry: list[tuple[float, str, float]] = []
        self._spans = (lifetime, reboot_grace)

    def watch(
        self, *, quietly: set[tuple[str, str | None]] | None = None
    ) -> set[tuple[str, str | None]]:
        """A set the store adds the (hostname, ip) of every ad that arrives or goes to
        (the hostname lower-case), for a watcher to read and empty (:meth:`find`'s answers
        for other names stay what they were). With ``quietly``, an ad that is its node's
        previous one moved on in time within its lifetime (:meth:`moved_quietly`) is added
        there instead: for a watcher whose reading of an ad changes only with its age, at
        instants it keeps itself, and that only swaps the ads it holds for the newer
        (:func:`~nodeagent.master._plan.moved_on_plan`)."""
        watched: set[tuple[str, str | None]] = set()
        self._watchers.append((watched, quietly))
        return watched

    def watch_names(self) -> set[str]:
        """A set the store adds the name of every node whose ad arrives or goes to, for
        a watcher to read and empty."""
        watched: set[str] = set()
        self._name_watchers.append(watched)
        return watched

    def __len__(self) -> int:
        return len(self._entries)

    def update(self, ad: Mapping[str, Any], now: float, *, plain_text: bool = False) -> AdEntry:
        """Store a pushed ad (``{"machine": {...}, "slots": [...]}``).

        Raises :class:`InvalidRequest` when it is not shaped like an agent's ad, or when it
        holds what the master cannot read (:func:`check_node_ad`: a value nested too deep,
        a wrong type, numbers the drain estimates cannot be computed from); the store is
        then unchanged. A node's ad is :func:`prepare_node_ad`, then :meth:`take`.
        """
        machine, slots, my_type = ad_parts(ad)
        if my_type != "Machine":
            return self._take_other(machine, slots, my_type, now)
        previous = self._entries.get(machine["Name"])
        kept = None if previous is None else previous.slots
        node = prepare_node_ad(
            machine,
            slots,
            plain_text=plain_text,
            after=kept if isinstance(kept, PackedSlots) else None,
        )
        return self.take(node, now)

    def _take_other(
        self, machine: dict[str, Any], slots: list[dict[str, Any]], my_type: str, now: float
    ) -> AdEntry:
        """Store the ad of another daemon (``MyType`` other than ``"Machine"``)."""
        name = machine["Name"]
        for attribute, value in machine.items():
            check_value(value, name=f"{name}: {attribute}")
        for slot in slots:
            for attribute, value in slot.items():
                check_value(value, name=f"{name}: {attribute}")
        earlier = self._others.get((my_type, name))
        other = AdEntry(
            name=name,
            machine=dict(machine),
            slots=list(slots),
            received_at=now,
            updates=1 if earlier is None else earlier.updates + 1,
        )
        self._others[(my_type, name)] = other
        self.received += 1
        return other

    def take(
        self, node: NodeAd, now: float, *, kept_moving: list[dict[str, Any]] | None = None
    ) -> AdEntry:
        """Store a node's ad checked and packed by :func:`prepare_node_ad` (here or in an
        ingest worker process): it becomes the node's entry, which keeps what is derived
        from the previous one when the ad is that one moved on in time (:func:`moved_on`).
        ``kept_moving``: the moving values of the entry held, when the caller read them."""
        machine = node.machine
        name = machine["Name"]
        previous = self._entries.get(name)
        packed = node.slots
        packed.share_static(
            previous.slots
            if previous is not None and isinstance(previous.slots, PackedSlots)
            else None
        )
        moved = previous is not None and _moved_on(
            previous,
            machine,
            packed,
            packed=packed,
            clocks=node.clocks,
            active=node.active,
            kept_moving=kept_moving,
        )
        entry = AdEntry(
            name=name,
            machine=shared_values(machine),
            slots=packed,
            received_at=now,
            updates=1 if previous is None else previous.updates + 1,
            basis=previous.basis if moved and previous is not None else object(),
            slot_activities=(
                tuple(_interned(clock.get("Activity")) for clock in node.clocks),
                node.active,
            ),
        )
        if node.facts is not None:  # read of the slot ads where they were parsed
            entry.__dict__["empty"] = node.facts.empty
            entry.__dict__["grouped"] = node.facts.grouped
            entry.__dict__["machine_inputs"] = node.facts.machine_inputs
        if moved and previous is not None:
            # What the ad's moving values change nothing of: the forecast (made once per
            # basis), and the facts read from what did not move.
            for fact in _KEPT_FACTS:
                if fact in previous.__dict__:
                    entry.__dict__[fact] = previous.__dict__[fact]
            self.moved_on_ads += 1
        jobs = None if node.facts is None else node.facts.jobs
        if jobs is not None and "forecast" not in entry.__dict__:
            # a forecast not kept is given its jobs' inputs: its slot ads are not read back
            entry.__dict__["forecast"] = entry.forecast_with(jobs)
        quiet = previous is not None and self.moved_quietly(previous, entry, now)
        if previous is not None:
            self._unindex(previous, moved=quiet)
        self._entries[name] = entry
        self._by_host.add(entry.hostname.lower(), name)
        if entry.ip is not None:
            self._by_ip.add(entry.ip, name)
        self._forget_found(entry, moved=quiet)
        self._lost.discard(name)
        self._expires(entry)
        self.received += 1
        for names in self._name_watchers:
            names.add(name)
        return entry

    def take_moved_on(self, node: MovedOnAd, now: float) -> AdEntry:
        """Store a node's ad pushed with its slot ads' moving values alone
        (:func:`prepare_moved_on`): the slot ads of its entry with these moving values, as
        :meth:`take` stores them. Raises :class:`SlotsUnknown` unless the node's entry
        holds slot ads of that digest, as many, each with the same moving attributes."""
        name = node.machine["Name"]
        previous = self._entries.get(name)
        kept = None if previous is None else previous.slots
        if not isinstance(kept, PackedSlots) or kept.digest != node.digest:
            self.slots_unknown += 1
            raise SlotsUnknown(
                f"{name}: the master holds no slot ads of digest {node.digest.hex()} for "
                "this node: push the whole ad"
            )
        kept_moving = kept.moving_values()
        if [list(values) for values in kept_moving] != [list(values) for values in node.moving]:
            self.slots_unknown += 1
            raise SlotsUnknown(
                f"{name}: the moving values are not those of the slot ads the master holds "
                "for this node: push the whole ad"
            )
        assert previous is not None  # kept is its slot ads
        activities, active = previous.slot_activities
        # what moved_on reads of a slot ad besides its moving values (an Activity null
        # or absent reads the same)
        clocks = tuple(
            {**values, "Activity": activity}
            for values, activity in zip(node.moving, activities, strict=True)
        )
        packed = kept.moved_on(node.packed, len(node.moving))
        entry = self.take(
            NodeAd(node.machine, packed, clocks, active), now, kept_moving=kept_moving
        )
        self.moving_values_pushed += 1
        return entry

    def _unindex(self, entry: AdEntry, *, moved: bool = False) -> None:
        self._by_host.discard(entry.hostname.lower(), entry.name)
        if entry.ip is not None:
            self._by_ip.discard(entry.ip, entry.name)
        self._forget_found(entry, moved=moved)

    def _forget_found(self, entry: AdEntry, *, moved: bool = False) -> None:
        """Drop the remembered :meth:`find` answers that ``entry`` is or was part of (and
        tell the watchers; of an ad moved on in time quietly (:meth:`moved_quietly`), those
        that want to know)."""
        for watched, quietly in self._watchers:
            if moved and quietly is not None:
                quietly.add((entry.hostname.lower(), entry.ip))
            else:
                watched.add((entry.hostname.lower(), entry.ip))
        for key in self._found_by.pop(entry.hostname.lower()):
            self._found.pop(key, None)
        if entry.ip is not None:
            for key in self._found_by.pop(entry.ip):
                self._found.pop(key, None)

    def forget(self, name: str) -> bool:
        """Drop a node's ad; returns whether there was one."""
        self._lost.discard(name)
        entry = self._entries.pop(name, None)
        if entry is None:
            return False
        self._unindex(entry)
        for names in self._name_watchers:
            names.add(name)
        return True

    def get(self, name: str, my_type: str = "Machine") -> AdEntry | None:
        if my_type != "Machine":
            return self._others.get((my_type, name))
        return self._entries.get(name)

    def packed_slots(self, name: str) -> PackedSlots | None:
        """The packed slot ads of node ``name``'s entry, if it has one (a new ad of the
        node is packed after them: :func:`prepare_node_ad`)."""
        entry = self._entries.get(name)
        slots = None if entry is None else entry.slots
        return slots if isinstance(slots, PackedSlots) else None

    def entries(self) -> list[AdEntry]:
        return sorted(self._entries.values(), key=lambda e: e.name)

    def moved_quietly(self, previous: AdEntry, entry: AdEntry, now: float) -> bool:
        """Whether ``entry``, the node's ad taken at ``now``, is ``previous`` moved on in
        time (:func:`moved_on`: they share what is derived from them) while ``previous``
        was within its lifetime (the node neither lost nor rebooting): what was read of
        ``previous`` holds of ``entry`` until the instant ``previous`` would have turned
        the node rebooting or lost, when a reader that keeps it reads it again."""
        return entry.basis is previous.basis and now - previous.received_at < self.lifetime

    def lost(self, entry: AdEntry, now: float) -> bool:
        """Whether the node is lost at ``now``: no ad for ``lifetime``, or for ``lifetime``
        plus ``reboot_grace`` when its last ad said it was shutting down."""
        age = now - entry.received_at
        return age > self.lifetime and (
            not entry.shutting_down or age > self.lifetime + self.reboot_grace
        )

    def lost_at(self, now: float) -> Callable[[AdEntry], bool]:
        """:meth:`lost` at ``now``, as one function (for many entries)."""
        lifetime = self.lifetime
        grace = lifetime + self.reboot_grace
        return lambda entry: (
            now - entry.received_at > lifetime
            and (not entry.shutting_down or now - entry.received_at > grace)
        )

    def rebooting(self, entry: AdEntry, now: float) -> bool:
        """Whether the node is rebooting at ``now``: its last ad, older than ``lifetime``
        but not lost (:meth:`lost`), said it was shutting down."""
        age = now - entry.received_at
        return entry.shutting_down and self.lifetime < age <= self.lifetime + self.reboot_grace

    def rebooting_at(self, now: float) -> Callable[[AdEntry], bool]:
        """:meth:`rebooting` at ``now``, as one function (for many entries)."""
        return lambda entry: self.rebooting(entry, now)

    def _expires(self, entry: AdEntry) -> None:
        """Note when ``entry`` turns its node lost, for :meth:`sweep`."""
        span = self.lifetime + (self.reboot_grace if entry.shutting_down else 0.0)
        heapq.heappush(self._expiry, (entry.received_at + span, entry.name, entry.received_at))
        if len(self._expiry) > 2 * len(self._entries) + 1024:  # stale entries: made again
            self._expiry = []
            for held in self._entries.values():
                self._expires(held)

    def sweep(self, now: float) -> list[str]:
        """Mark newly lost nodes; returns their names (counted once each). A rebooting
        node (:meth:`rebooting`) is not lost yet: it is once its grace has run out. Only
        the ads whose time came are read (a heap of when each turns its node lost), not
        every ad held."""
        if self._spans != (self.lifetime, self.reboot_grace):  # changed by a reload
            self._spans = (self.lifetime, self.reboot_grace)
            self._expiry = []
            for held in list(self._entries.values()):
                self._expires(held)
        newly = []
        heap = self._expiry
        while heap and heap[0][0] <= now:
            item = heapq.heappop(heap)
            _, name, came = item
            entry = self._entries.get(name)
            if entry is None or entry.received_at != came:
                continue  # replaced or forgotten
            if not self.lost(entry, now):  # the instant was rounded: read again later
                heapq.heappush(heap, item)
                break
            if name not in self._lost:
                newly.append(name)
        self._lost.update(newly)
        self.expired += len(newly)
        return sorted(newly)

    def served(self, entry: AdEntry, now: float) -> dict[str, Any]:
        """The machine ad as the master serves it: with LastHeardFrom, Lost and Rebooting."""
        return {
            **entry.machine,
            "LastHeardFrom": int(entry.received_at),
            "Lost": self.lost(entry, now),
            "Rebooting": self.rebooting(entry, now),
        }

    def query(
        self, now: float, *, slots: bool = False, my_type: str = "Machine"
    ) -> list[dict[str, Any]]:
        """Every ad of ``my_type`` as served (for nodes with ``slots``: their slot ads, each
        with its node's ``LastHeardFrom``, ``Lost`` and ``Rebooting``), sorted by name.

        A constraint is the caller's to evaluate over them, then :func:`project`.
        """
        results: list[dict[str, Any]] = []
        if my_type == "Machine":
            sources = self.entries()
        else:
            sources = [e for (t, _), e in sorted(self._others.items()) if t == my_type]
        for entry in sources:
            if slots:
                extra = {
                    "LastHeardFrom": int(entry.received_at),
                    "Lost": self.lost(entry, now),
                    "Rebooting": self.rebooting(entry, now),
                }
                results.extend({**s, **extra} for s in entry.slots)
            else:
                results.append(self.served(entry, now))
        return results

    def find(self, hostname: str | None, ip: str | None) -> list[AdEntry]:
        """Nodes whose ad matches a Mesos machine id (hostname case-insensitive, ip exact).

        An id with only a hostname matches any ip, with only an ip any hostname. The list
        is remembered until an ad for that hostname or ip arrives: do not change it.
        """
        if hostname is None and ip is None:
            raise InvalidRequest("a machine id needs a hostname or an ip")
        host = None if hostname is None else hostname.lower()
        key = (host, ip)
        found = self._found.get(key)
        if found is not None:
            return found
        if host is not None:
            names = self._by_host.get(host)
        else:
            assert ip is not None
            names = self._by_ip.get(ip)
        found = [
            entry
            for entry in (self._entries[n] for n in sorted(names))
            if ip is None or entry.ip == ip
        ]
        self._found[key] = found
        # An ad for this hostname (or, without one, this ip) changes the answer.
        self._found_by.add(host if host is not None else ip or "", key)
        return found
