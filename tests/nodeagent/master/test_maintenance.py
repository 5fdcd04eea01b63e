"""The maintenance model against Mesos's rules, messages and JSON shapes.

Messages are quoted from Mesos's ``src/master/maintenance.cpp`` (validation),
``src/master/http.cpp`` (down/up checks), stout's ``protobuf.hpp`` / ``json.hpp`` (JSON
reading) and ``ip.hpp`` (ip parsing).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from contextlib import AbstractContextManager
from typing import Any

import pytest

from nodeagent.master import _maintenance
from nodeagent.master._maintenance import (
    ClusterStatus,
    MachineId,
    MachineStatus,
    MaintenanceError,
    MaintenanceSchedule,
    MaintenanceState,
    Mode,
    SnapshotError,
    Unavailability,
    Window,
    load_json,
    parse_machine_ids,
    render_json,
)

HOUR_NS = 3_600_000_000_000
START_NS = 1_443_830_400_000_000_000

# The example schedule of Mesos's maintenance documentation.
SEED_SCHEDULE: dict[str, Any] = {
    "windows": [
        {
            "machine_ids": [
                {"hostname": "machine1", "ip": "10.0.0.1"},
                {"hostname": "machine2", "ip": "10.0.0.2"},
            ],
            "unavailability": {
                "start": {"nanoseconds": START_NS},
                "duration": {"nanoseconds": HOUR_NS},
            },
        },
        {
            "machine_ids": [{"hostname": "machine3", "ip": "10.0.0.3"}],
            "unavailability": {
                "start": {"nanoseconds": START_NS + HOUR_NS},
                "duration": {"nanoseconds": HOUR_NS},
            },
        },
    ]
}

M1 = MachineId(hostname="machine1", ip="10.0.0.1")
M2 = MachineId(hostname="machine2", ip="10.0.0.2")
M3 = MachineId(hostname="machine3", ip="10.0.0.3")


def unav(start: int = START_NS, duration: int | None = HOUR_NS) -> dict[str, Any]:
    out: dict[str, Any] = {"start": {"nanoseconds": start}}
    if duration is not None:
        out["duration"] = {"nanoseconds": duration}
    return out


def window(*machines: dict[str, Any], **unavailability: Any) -> dict[str, Any]:
    return {"machine_ids": list(machines), "unavailability": unav(**unavailability)}


def schedule(*windows: dict[str, Any]) -> MaintenanceSchedule:
    return MaintenanceSchedule.from_json({"windows": list(windows)})


def scheduled(*windows: dict[str, Any]) -> MaintenanceState:
    state = MaintenanceState()
    state.update_schedule(schedule(*windows))
    return state


def modes(state: MaintenanceState) -> dict[str, Mode]:
    return {str(s.id): s.mode for s in state.machines()}


def raises(message: str) -> AbstractContextManager[pytest.ExceptionInfo[MaintenanceError]]:
    """Expect exactly ``message`` (the whole 400 body), not a substring."""
    return pytest.raises(MaintenanceError, match=f"^{re.escape(message)}$")


A = {"hostname": "a"}
B = {"hostname": "b"}

# --- Reading JSON: stout's protobuf conversion --------------------------------------

SCHEDULE_JSON_ERRORS = [
    pytest.param([], "Expecting a JSON object", id="not-an-object"),
    pytest.param({"windows": "x"}, "Not expecting a JSON string for field 'windows'", id="str"),
    pytest.param({"windows": 3}, "Not expecting a JSON number for field 'windows'", id="num"),
    pytest.param({"windows": True}, "Not expecting a JSON boolean for field 'windows'", id="bool"),
    pytest.param(
        {"windows": [{"machine_ids": [{"hostname": 5}], "unavailability": unav()}]},
        "Not expecting a JSON number for field 'hostname'",
        id="hostname-number",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [{"ip": {}}], "unavailability": unav()}]},
        "Not expecting a JSON object for field 'ip'",
        id="ip-object",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [A], "unavailability": [unav()]}]},
        "Not expecting a JSON array for field 'unavailability'",
        id="array-for-single",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [A], "unavailability": {"start": {"nanoseconds": "1"}}}]},
        "Not expecting a JSON string for field 'nanoseconds'",
        id="nanoseconds-string",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [A], "unavailability": {"start": {"nanoseconds": True}}}]},
        "Not expecting a JSON boolean for field 'nanoseconds'",
        id="nanoseconds-bool",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [A]}]},
        "Missing required fields: windows[0].unavailability",
        id="no-unavailability",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [A], "unavailability": None}]},
        "Missing required fields: windows[0].unavailability",
        id="null-is-unset",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [A], "unavailability": {}}]},
        "Missing required fields: windows[0].unavailability.start",
        id="no-start",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [A], "unavailability": {"start": {}, "duration": {}}}]},
        "Missing required fields: windows[0].unavailability.start.nanoseconds, "
        "windows[0].unavailability.duration.nanoseconds",
        id="no-nanoseconds-in-field-order",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [A]}, window(B), {"unavailability": {}}]},
        "Missing required fields: windows[0].unavailability, windows[2].unavailability.start",
        id="all-missing-fields-together",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [A]}, {"machine_ids": [{"hostname": 1}]}]},
        "Not expecting a JSON number for field 'hostname'",
        id="type-error-beats-missing-field",
    ),
    pytest.param(
        {"windows": [{"machine_ids": [{"hostname": 1}], "unavailability": "x"}]},
        "Not expecting a JSON number for field 'hostname'",
        id="keys-in-sorted-order-machine_ids-first",
    ),
    pytest.param(
        {
            "windows": [
                {
                    "unavailability": {"start": "x", "duration": "y"},
                    "machine_ids": [A],
                }
            ]
        },
        "Not expecting a JSON string for field 'duration'",
        id="keys-in-sorted-order-duration-first",
    ),
    pytest.param(
        {"windows": [window(A, start=2**63)]},
        "Value of field 'nanoseconds' is out of the 64-bit integer range",
        id="beyond-int64",
    ),
]


@pytest.mark.parametrize(("body", "message"), SCHEDULE_JSON_ERRORS)
def test_schedule_json_errors(body: object, message: str) -> None:
    with raises(message) as caught:
        MaintenanceSchedule.from_json(body)
    assert caught.value.code == "maintenance.bad_json"
    assert caught.value.http_status == 400


def test_schedule_json_leniencies_of_mesos() -> None:
    """Unknown keys are ignored, an object for a list is one element, nested lists
    flatten, nulls in lists are skipped, fractional nanoseconds are truncated."""
    body = {
        "comment": "ignored",
        "windows": [
            None,
            [
                {
                    "machine_ids": {"hostname": "a", "rack": 7},
                    "unavailability": {"start": {"nanoseconds": 12.9}, "duration": None},
                }
            ],
        ],
    }
    assert MaintenanceSchedule.from_json(body) == MaintenanceSchedule(
        windows=(Window(machine_ids=(MachineId(hostname="a"),), unavailability=unav_(12)),)
    )
    assert MaintenanceSchedule.from_json({}) == MaintenanceSchedule()
    assert MaintenanceSchedule.from_json({"windows": []}) == MaintenanceSchedule()


def unav_(start: int, duration: int | None = None) -> Unavailability:
    return Unavailability(start_ns=start, duration_ns=duration)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"hostname": "a"}, "Expecting a JSON array"),
        ([A, "b"], "Expecting a JSON object"),
        ([None], "Expecting a JSON object"),
        ([{"hostname": ["a"]}], "Not expecting a JSON array for field 'hostname'"),
    ],
)
def test_machine_list_json_errors(body: object, message: str) -> None:
    with raises(message):
        parse_machine_ids(body)


def test_machine_list_json() -> None:
    assert parse_machine_ids([A, {"ip": "1.2.3.4", "x": 1}, {}]) == (
        MachineId(hostname="a"),
        MachineId(ip="1.2.3.4"),
        MachineId(),
    )


@pytest.mark.parametrize(
    ("body", "kind", "message"),
    [
        ('{"windows": []}', "array", "Unexpected JSON type parsed"),
        ("[]", "object", "Unexpected JSON type parsed"),
        ("{} x", "object", "Parsed JSON included non-whitespace trailing characters:  x"),
        ("", "object", "syntax error at line 1 near: the end of the input (the body is empty)"),
        (
            '{\n  "windows": [\n',
            "object",
            "syntax error at line 2 near: the end of the input (the document is cut short)",
        ),
        (
            '{"windows": [{"machine_ids": [{"hostname": "a"}]',
            "object",
            "syntax error at line 1 near: the end of the input (the document is cut short)",
        ),
        (
            '{"windows": [{"machine_ids":\n\n ]}',
            "object",
            "syntax error at line 3 near: ]}",
        ),
        ('{\n  "windows": [,]\n}', "object", "syntax error at line 2 near: ,]"),
        (b"\xff", "object", "Failed to decode the body as UTF-8"),
        ("[NaN]", "array", "syntax error near: NaN"),
    ],
)
def test_load_json_errors(body: str | bytes, kind: Any, message: str) -> None:
    with raises(message):
        load_json(body, kind)


def test_load_json() -> None:
    assert load_json(' \n{"windows": []}\r\n\t', "object") == {"windows": []}
    assert load_json(b"[{}]", "array") == [{}]


DEEP = 100_000
ERROR = "syntax error at line {} near: {}"


@pytest.mark.parametrize(
    ("body", "kind", "message"),
    [
        # Mesos's parser refuses the bracket that opens level 101, and says what follows.
        ("[" * 101 + "]" * 101, "array", ERROR.format(1, "]" * 101)),
        ("[" * DEEP, "array", ERROR.format(1, "[" * (DEEP - 101))),
        ('{"windows":' + "[" * DEEP, "object", ERROR.format(1, "[" * (DEEP - 100))),
        (
            '{"a":\n' + '{"b":' * 100 + "1" + "}" * 101,
            "object",
            ERROR.format(2, '"b":1' + "}" * 101),
        ),
        # Brackets in strings do not nest.
        ('["' + "[" * 200 + '", ' + "[" * 101, "array", ERROR.format(1, "[")),
        # An error before the bracket too deep is the one reported.
        ("[x" + "[" * DEEP, "array", ERROR.format(1, "x" + "[" * DEEP)),
    ],
)
def test_json_nested_deeper_than_mesos_reads_is_refused_as_mesos_does(
    body: str, kind: Any, message: str
) -> None:
    with pytest.raises(MaintenanceError) as refused:
        load_json(body, kind)
    assert refused.value.code == "maintenance.bad_json"
    assert refused.value.message == message


def test_json_nested_as_deep_as_mesos_reads_is_read() -> None:
    assert load_json("[" * 100 + "]" * 100, "array") == json.loads("[" * 100 + "]" * 100)
    body = '{"windows": ' + "[" * 99 + "]" * 99 + "}"
    assert MaintenanceSchedule.from_json(load_json(body, "object")) == MaintenanceSchedule()


# --- Rendering JSON: Mesos's shapes and bytes ----------------------------------------


def test_json_round_trip_equals_the_input() -> None:
    parsed = MaintenanceSchedule.from_json(SEED_SCHEDULE)
    assert parsed.to_json() == SEED_SCHEDULE
    assert MaintenanceSchedule.from_json(json.loads(render_json(parsed.to_json()))) == parsed


@pytest.mark.parametrize(
    ("start", "duration"),
    [(START_NS, HOUR_NS), (2**63 - 1, 0), (-(2**63), None), (-10, 2**63 - 1), (0, None)],
)
def test_nanoseconds_round_trip_exactly(start: int, duration: int | None) -> None:
    body = {"windows": [window(A, start=start, duration=duration)]}
    text = render_json(MaintenanceSchedule.from_json(body).to_json())
    parsed = MaintenanceSchedule.from_json(load_json(text, "object"))
    assert parsed.windows[0].unavailability == unav_(start, duration)
    assert f'"start":{{"nanoseconds":{start}}}' in text


def test_render_json_is_mesos_bytes() -> None:
    """Compact, keys sorted, ``/`` and control characters escaped, as stout does."""
    assert render_json(SEED_SCHEDULE["windows"][1]) == (
        '{"machine_ids":[{"hostname":"machine3","ip":"10.0.0.3"}],'
        '"unavailability":{"duration":{"nanoseconds":3600000000000},'
        '"start":{"nanoseconds":1443834000000000000}}}'
    )
    assert render_json({"b": [True, None], "a": 'x/"\\\n\x01\x7fé'}) == (
        '{"a":"x\\/\\"\\\\\\n\\u0001\\u007fé","b":[true,null]}'
    )
    assert str(MachineId(hostname="Machine1", ip="0.0.0.3")) == (
        '{"hostname":"Machine1","ip":"0.0.0.3"}'
    )


def test_empty_things_render_as_mesos_does() -> None:
    """Protobuf JSON omits empty lists: no schedule is ``{}``, no machines is ``{}``,
    a draining machine carries no ``statuses`` (there are no inverse offers)."""
    state = MaintenanceState()
    assert state.schedule.to_json() == {}
    assert state.status().to_json() == {}
    state.update_schedule(schedule(window(A, duration=None)))
    assert state.schedule.to_json() == {
        "windows": [{"machine_ids": [A], "unavailability": {"start": {"nanoseconds": START_NS}}}]
    }
    assert state.status().to_json() == {"draining_machines": [{"id": A}]}
    state.down([MachineId(hostname="a")])
    assert state.status().to_json() == {"down_machines": [A]}


# --- Validating a schedule, in Mesos's order -----------------------------------------

SCHEDULE_RULES = [
    pytest.param(
        [window()], "List of machines in the maintenance window is empty", id="empty-window"
    ),
    pytest.param(
        [window(A, duration=-1)], "Unavailability 'duration' is negative", id="negative-duration"
    ),
    pytest.param(
        [window(duration=-1)],
        "List of machines in the maintenance window is empty",
        id="empty-window-before-duration",
    ),
    pytest.param(
        [window({}, duration=-1)],
        "Unavailability 'duration' is negative",
        id="duration-before-machines",
    ),
    pytest.param([window({})], "Both 'hostname' and 'ip' for a machine are empty", id="no-fields"),
    pytest.param(
        [window({"hostname": "", "ip": ""})],
        "Both 'hostname' and 'ip' for a machine are empty",
        id="empty-fields",
    ),
    pytest.param([window({"ip": "10.0.0"})], "Failed to parse IPv4: 10.0.0", id="three-octets"),
    pytest.param(
        [window({"hostname": "a", "ip": "256.0.0.1"})],
        "Failed to parse IPv4: 256.0.0.1",
        id="octet-too-big",
    ),
    pytest.param([window({"ip": "01.2.3.4"})], "Failed to parse IPv4: 01.2.3.4", id="lead-zero"),
    pytest.param([window({"ip": "::1"})], "Failed to parse IPv4: ::1", id="ipv6"),
    pytest.param([window({"ip": "1.2.3.4 "})], "Failed to parse IPv4: 1.2.3.4 ", id="space"),
    pytest.param([window({"ip": "1.2.3.4."})], "Failed to parse IPv4: 1.2.3.4.", id="dot"),
    pytest.param([window({"ip": "a.b.c.d"})], "Failed to parse IPv4: a.b.c.d", id="letters"),
    pytest.param(
        [window(A), window(B, A)],
        """Machine '{"hostname":"a"}' appears more than once in the schedule""",
        id="twice-across-windows",
    ),
    pytest.param(
        [window({"hostname": "Node1", "ip": "10.0.0.1"}, {"hostname": "NODE1", "ip": "10.0.0.1"})],
        """Machine '{"hostname":"NODE1","ip":"10.0.0.1"}' appears more than once in the schedule""",
        id="twice-case-insensitively",
    ),
    pytest.param(
        [window(A, {}), window()],
        "Both 'hostname' and 'ip' for a machine are empty",
        id="first-window-first",
    ),
    pytest.param(
        [window({"ip": "x"}, A, A)], "Failed to parse IPv4: x", id="machine-order-within-window"
    ),
]


@pytest.mark.parametrize(("windows", "message"), SCHEDULE_RULES)
def test_schedule_rules(windows: list[dict[str, Any]], message: str) -> None:
    state = scheduled(window(M1.to_json()))
    before = state.snapshot()
    with raises(message) as caught:
        state.update_schedule(schedule(*windows))
    assert caught.value.code == "maintenance.invalid"
    assert state.snapshot() == before


@pytest.mark.parametrize(
    "windows",
    [
        pytest.param([window(A, start=-10)], id="negative-start"),
        pytest.param([window(A, duration=0)], id="zero-duration"),
        pytest.param([window(A, duration=None)], id="no-duration"),
        pytest.param([window({"ip": "0.0.0.0"}, {"ip": "255.255.255.255"})], id="ip-bounds"),
        pytest.param([window({"hostname": "", "ip": "10.0.0.1"})], id="empty-hostname"),
        pytest.param([window(A, {"hostname": "a", "ip": "10.0.0.1"})], id="ip-makes-it-another"),
        pytest.param([window({"ip": "10.0.0.1"}, {"ip": "10.0.0.2"})], id="ip-only"),
        pytest.param([], id="empty-schedule"),
    ],
)
def test_schedules_mesos_accepts(windows: list[dict[str, Any]]) -> None:
    state = MaintenanceState()
    state.update_schedule(schedule(*windows))
    assert state.schedule == schedule(*windows)


# --- Replacing a schedule ------------------------------------------------------------


def test_replace_semantics() -> None:
    """New machines become DRAINING, dropped ones go UP, kept ones keep their mode and
    take their new window; the return value lists the mode changes."""
    state = MaintenanceState()
    changed = state.update_schedule(MaintenanceSchedule.from_json(SEED_SCHEDULE))
    assert [(s.id, s.mode) for s in changed] == [(m, Mode.DRAINING) for m in (M1, M2, M3)]
    state.down([M1])

    new_window = window(M1.to_json(), M3.to_json(), {"hostname": "m4"}, start=5)
    changed = state.update_schedule(schedule(new_window))

    assert modes(state) == {
        str(M1): Mode.DOWN,
        str(M3): Mode.DRAINING,
        '{"hostname":"m4"}': Mode.DRAINING,
    }
    assert [(str(s.id), s.mode, s.window) for s in changed] == [
        ('{"hostname":"m4"}', Mode.DRAINING, state.schedule.windows[0]),
        (str(M2), Mode.UP, None),
    ]
    assert all(s.window == state.schedule.windows[0] for s in state.machines())
    assert state.mode_of("machine2", "10.0.0.2") is Mode.UP


def test_a_down_machine_cannot_be_dropped() -> None:
    state = scheduled(window(M1.to_json(), M2.to_json()))
    state.down([M2])
    before = state.snapshot()
    message = (
        """Machine '{"hostname":"machine2","ip":"10.0.0.2"}' """
        "is deactivated and cannot be removed from the schedule"
    )
    for replacement in (schedule(window(M1.to_json())), MaintenanceSchedule()):
        with raises(message) as caught:
            state.update_schedule(replacement)
        assert caught.value.code == "maintenance.machine_down"
        assert state.snapshot() == before


def test_an_invalid_window_is_reported_before_a_dropped_down_machine() -> None:
    state = scheduled(window(A))
    state.down([MachineId(hostname="a")])
    with raises("Unavailability 'duration' is negative"):
        state.update_schedule(schedule(window(B, duration=-5)))


def test_cancelling_the_schedule_brings_draining_machines_up() -> None:
    state = scheduled(window(A, B))
    changed = state.update_schedule(MaintenanceSchedule())
    assert [(str(s.id), s.mode) for s in changed] == [
        ('{"hostname":"a"}', Mode.UP),
        ('{"hostname":"b"}', Mode.UP),
    ]
    assert state.machines() == ()
    assert state.schedule.to_json() == {}


# --- Down and up ---------------------------------------------------------------------

MACHINE_LIST_RULES = [
    pytest.param("down", [], "List of machines is empty", id="down-empty"),
    pytest.param("up", [], "List of machines is empty", id="up-empty"),
    pytest.param(
        "down", [M1, {}], "Both 'hostname' and 'ip' for a machine are empty", id="no-fields"
    ),
    pytest.param("up", [{"ip": "1.2.3"}], "Failed to parse IPv4: 1.2.3", id="bad-ip"),
    pytest.param(
        "down",
        [M2, {"hostname": "MACHINE2", "ip": "10.0.0.2"}],
        """Machine '{"hostname":"MACHINE2","ip":"10.0.0.2"}' appears more than once """
        "in the schedule",
        id="twice",
    ),
    pytest.param(
        "down",
        [M2, {"hostname": "elsewhere"}],
        """Machine '{"hostname":"elsewhere"}' is not part of a maintenance schedule""",
        id="down-unscheduled",
    ),
    pytest.param(
        "down",
        [{"hostname": "machine2"}],
        """Machine '{"hostname":"machine2"}' is not part of a maintenance schedule""",
        id="ip-missing-is-another-machine",
    ),
    pytest.param(
        "up",
        [M1, {"ip": "10.0.0.1"}],
        """Machine '{"ip":"10.0.0.1"}' is not part of a maintenance schedule""",
        id="up-unscheduled",
    ),
    pytest.param(
        "down",
        [M2, M1],
        """Machine '{"hostname":"machine1","ip":"10.0.0.1"}' is not in DRAINING mode """
        "and cannot be brought down",
        id="down-only-from-draining",
    ),
    pytest.param(
        "up",
        [M1, M2],
        """Machine '{"hostname":"machine2","ip":"10.0.0.2"}' is not in DOWN mode """
        "and cannot be brought up",
        id="up-only-from-down",
    ),
    pytest.param(
        "up",
        [{"hostname": "x"}, M2],
        """Machine '{"hostname":"x"}' is not part of a maintenance schedule""",
        id="first-bad-machine-in-list-order",
    ),
]


@pytest.mark.parametrize(("verb", "machines", "message"), MACHINE_LIST_RULES)
def test_machine_list_rules_are_all_or_nothing(
    verb: str, machines: list[Any], message: str
) -> None:
    """M1 is DOWN, M2 and M3 DRAINING; a list with one bad machine changes nothing."""
    state = MaintenanceState()
    state.update_schedule(MaintenanceSchedule.from_json(SEED_SCHEDULE))
    state.down([M1])
    before = state.snapshot()
    ids = [m if isinstance(m, MachineId) else MachineId.from_json(m) for m in machines]
    with raises(message):
        getattr(state, verb)(ids)
    assert state.snapshot() == before


@pytest.mark.parametrize(
    ("machines", "code"),
    [
        ([], "maintenance.invalid"),
        ([MachineId(hostname="x")], "maintenance.not_scheduled"),
        ([M1], "maintenance.wrong_mode"),
    ],
)
def test_error_codes(machines: list[MachineId], code: str) -> None:
    state = scheduled(window(M1.to_json()))
    with pytest.raises(MaintenanceError) as caught:
        state.up(machines)
    assert caught.value.code == code


def test_down_then_up_removes_machines_and_empty_windows() -> None:
    state = MaintenanceState()
    state.update_schedule(MaintenanceSchedule.from_json(SEED_SCHEDULE))

    changed = state.down([M3, M1])
    assert [(s.id, s.mode) for s in changed] == [(M3, Mode.DOWN), (M1, Mode.DOWN)]
    assert state.status() == ClusterStatus(draining_machines=(M2,), down_machines=(M1, M3))

    changed = state.up([M3])
    assert changed == (MachineStatus(id=M3, mode=Mode.UP, window=None),)
    assert state.schedule.to_json() == {"windows": [SEED_SCHEDULE["windows"][0]]}

    state.up([M1])
    assert state.schedule.to_json() == {
        "windows": [{**SEED_SCHEDULE["windows"][0], "machine_ids": [M2.to_json()]}]
    }
    state.down([M2])
    state.up([M2])
    assert state.schedule.to_json() == {}
    assert state.status().to_json() == {}
    assert state.mode_of("machine2", "10.0.0.2") is Mode.UP


def test_a_machine_brought_up_can_be_scheduled_again() -> None:
    state = scheduled(window(A))
    state.down([MachineId(hostname="a")])
    state.up([MachineId(hostname="a")])
    state.update_schedule(schedule(window(A)))
    assert modes(state) == {'{"hostname":"a"}': Mode.DRAINING}


# --- Identity and lookups ------------------------------------------------------------


def test_hostnames_are_case_insensitive() -> None:
    assert MachineId(hostname="Node1", ip="10.0.0.1") == MachineId(hostname="nODE1", ip="10.0.0.1")
    assert hash(MachineId(hostname="Node1")) == hash(MachineId(hostname="node1"))
    assert MachineId(hostname="node1") != MachineId(hostname="node1", ip="10.0.0.1")
    assert MachineId(hostname="node1") != MachineId(hostname="node1", ip="")
    assert MachineId(ip="10.0.0.1") != MachineId(ip="10.0.0.01")

    state = scheduled(window({"hostname": "Node1.Example.COM", "ip": "10.0.0.1"}))
    state.down([MachineId(hostname="node1.example.com", ip="10.0.0.1")])
    assert state.mode_of("NODE1.example.com", "10.0.0.1") is Mode.DOWN
    assert state.status().to_json() == {
        "down_machines": [{"hostname": "Node1.Example.COM", "ip": "10.0.0.1"}]
    }


def test_status_keeps_the_spelling_a_machine_was_first_scheduled_with() -> None:
    """As Mesos: the schedule is returned as posted, machine ids as first registered."""
    state = scheduled(window({"hostname": "Node1"}))
    state.update_schedule(schedule(window({"hostname": "NODE1"})))
    assert state.schedule.to_json()["windows"][0]["machine_ids"] == [{"hostname": "NODE1"}]
    assert state.status().to_json() == {"draining_machines": [{"id": {"hostname": "Node1"}}]}
    restored = MaintenanceState.restore(json.loads(json.dumps(state.snapshot())))
    assert restored.status() == state.status()


LOOKUPS = [
    # (agent hostname, agent ip, expected entry or None)
    ("both", "10.0.0.1", {"hostname": "both", "ip": "10.0.0.1"}),
    ("BOTH", "10.0.0.1", {"hostname": "both", "ip": "10.0.0.1"}),
    ("both", "10.0.0.2", None),
    ("host", "10.9.9.9", {"hostname": "host"}),
    ("HoSt", None, {"hostname": "host"}),
    ("other", "10.0.0.5", {"ip": "10.0.0.5"}),
    (None, "10.0.0.5", {"ip": "10.0.0.5"}),
    ("anything", "10.0.0.6", {"hostname": "", "ip": "10.0.0.6"}),
    ("host", "10.0.0.5", {"hostname": "host"}),
    ("both", "10.0.0.5", {"ip": "10.0.0.5"}),
    ("dual", "10.0.0.7", {"hostname": "dual", "ip": "10.0.0.7"}),
    ("dual", "10.0.0.8", {"hostname": "dual"}),
    ("nobody", "10.0.0.99", None),
    (None, None, None),
    ("", "", None),
]


@pytest.mark.parametrize(("hostname", "ip", "expected"), LOOKUPS)
def test_matching_an_agents_ad(
    hostname: str | None, ip: str | None, expected: dict[str, str] | None
) -> None:
    """Both fields must match; a missing or empty field matches anything; an entry with
    both fields wins over hostname-only, which wins over ip-only."""
    state = scheduled(
        window({"hostname": "both", "ip": "10.0.0.1"}, {"hostname": "host"}, start=1),
        window({"ip": "10.0.0.5"}, {"hostname": "", "ip": "10.0.0.6"}, start=2),
        window({"hostname": "dual"}, {"hostname": "dual", "ip": "10.0.0.7"}, start=3),
        # Distinct machines in Mesos (a field present but empty is not an absent field),
        # the same pattern for an ad: the earlier entry in the schedule wins.
        window({"hostname": "", "ip": "10.0.0.5"}, {"hostname": "host", "ip": ""}, start=4),
    )
    status = state.match(hostname, ip)
    if expected is None:
        assert status is None
        assert state.mode_of(hostname, ip) is Mode.UP
        assert state.window_of(hostname, ip) is None
    else:
        assert status is not None
        assert status.id.to_json() == expected
        assert state.mode_of(hostname, ip) is Mode.DRAINING
        assert state.window_of(hostname, ip) == status.window
        assert status.window is not None
        assert status.id in status.window.machine_ids


def test_machines_may_be_scheduled_before_any_agent_exists() -> None:
    """The model knows no agents: a schedule entry is all there is, and it can go
    through DRAINING, DOWN and UP without any ad ever matching it."""
    state = scheduled(window({"hostname": "not-built-yet"}))
    assert state.mode_of("some-other-node", "10.0.0.1") is Mode.UP
    assert state.down([MachineId(hostname="not-built-yet")])[0].mode is Mode.DOWN
    assert state.mode_of("not-built-yet", "10.1.2.3") is Mode.DOWN
    assert state.up([MachineId(hostname="NOT-BUILT-YET")])[0].mode is Mode.UP


@pytest.mark.parametrize(
    ("now", "covered"),
    [(9, False), (10, True), (14, True), (15, False)],
)
def test_unavailability_interval(now: int, covered: bool) -> None:
    assert unav_(10, 5).covers(now) is covered
    assert unav_(10, 5).end_ns == 15
    assert unav_(10).covers(now) is (now >= 10)
    assert unav_(10).end_ns is None


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, 1.0, True, "1"])
def test_unavailability_holds_64_bit_integers(bad: Any) -> None:
    with pytest.raises(ValueError, match="64-bit integer"):
        Unavailability(start_ns=bad)
    with pytest.raises(ValueError, match="64-bit integer"):
        Unavailability(start_ns=0, duration_ns=bad)


# --- Snapshot and restore ------------------------------------------------------------


def test_snapshot_and_restore() -> None:
    state = MaintenanceState()
    state.update_schedule(MaintenanceSchedule.from_json(SEED_SCHEDULE))
    state.down([M2])
    snapshot = json.loads(json.dumps(state.snapshot()))
    assert snapshot["schedule"] == SEED_SCHEDULE

    restored = MaintenanceState.restore(snapshot)

    assert restored.snapshot() == state.snapshot()
    assert restored.schedule == state.schedule
    assert restored.machines() == state.machines()
    assert restored.mode_of("MACHINE2", "10.0.0.2") is Mode.DOWN
    restored.up([M2])
    assert restored.mode_of("machine2", "10.0.0.2") is Mode.UP
    assert state.mode_of("machine2", "10.0.0.2") is Mode.DOWN
    assert MaintenanceState.restore(MaintenanceState().snapshot()).snapshot() == {
        "version": 1,
        "schedule": {},
        "machines": [],
    }


def _snapshot_with(**changes: Any) -> dict[str, Any]:
    state = scheduled(window(A, B))
    return {**state.snapshot(), **changes}


@pytest.mark.parametrize(
    "snapshot",
    [
        pytest.param(None, id="not-an-object"),
        pytest.param(_snapshot_with(version=2), id="version"),
        pytest.param(_snapshot_with(schedule={"windows": [window()]}), id="invalid-schedule"),
        pytest.param(_snapshot_with(machines=[{"id": A, "mode": "DRAINING"}]), id="mode-missing"),
        pytest.param(
            _snapshot_with(
                machines=[{"id": A, "mode": "DOWN"}, {"id": {"hostname": "c"}, "mode": "DOWN"}]
            ),
            id="unscheduled-machine",
        ),
        pytest.param(
            _snapshot_with(machines=[{"id": A, "mode": "UP"}, {"id": B, "mode": "DOWN"}]),
            id="scheduled-but-up",
        ),
        pytest.param(
            _snapshot_with(machines=[{"id": A, "mode": "DOWN"}, {"id": A, "mode": "DOWN"}]),
            id="twice",
        ),
        pytest.param(
            _snapshot_with(machines=[{"id": A, "mode": "BROKEN"}, {"id": B, "mode": "DOWN"}]),
            id="unknown-mode",
        ),
        pytest.param(_snapshot_with(machines=None), id="machines-not-a-list"),
        pytest.param({"version": 1}, id="truncated"),
    ],
)
def test_restore_refuses_a_corrupt_snapshot(snapshot: Any) -> None:
    with pytest.raises(SnapshotError, match=r"^Cannot restore the maintenance state: ") as caught:
        MaintenanceState.restore(snapshot)
    assert caught.value.code == "maintenance.bad_snapshot"
    assert caught.value.http_status == 500


# --- The module ----------------------------------------------------------------------


def test_exports_are_sorted_and_exist() -> None:
    assert _maintenance.__all__ == sorted(_maintenance.__all__)
    for name in _maintenance.__all__:
        assert getattr(_maintenance, name).__module__ == "nodeagent.master._maintenance"


def test_the_model_imports_no_io_library() -> None:
    code = (
        "import sys, nodeagent.master._maintenance\n"
        "print(sorted(m for m in ('trio', 'httpx', 'sqlite3', 'pydantic', 'fastapi')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
