"""``nodeagent master sla probe``: its command line and its table."""

from __future__ import annotations

import io
from typing import Any

import pytest

from nodeagent.cli import _sla
from nodeagent.cli._errors import UsageError
from nodeagent.cli._fast import parse
from nodeagent.cli._render import make_console

DOC: dict[str, Any] = {
    "now": 1700000000.0,
    "grouping": "Rack",
    "hosts": ["node1", "node2", "node3", "node4", "node9"],
    "safe": False,
    "host_groups": [
        {
            "key": "r1",
            "hosts": ["node1", "node2"],
            "unknown": [],
            "safe": True,
            "wait": 0,
            "broken": [],
            "groups": [
                {
                    "group": "www-data/prod/web",
                    "kind": "count",
                    "safe": True,
                    "size": 6,
                    "instances": 6,
                    "down": 2,
                    "up": 4,
                    "needed": 4,
                    "duration": 100.0,
                    "wait": 0,
                    "reason": "4 of 6 would stay up for 100 s; 4 needed",
                }
            ],
        },
        {
            "key": "r2",
            "hosts": ["node3", "node4"],
            "unknown": [],
            "safe": False,
            "wait": 70.0,
            "broken": ["www-data/prod/web"],
            "groups": [
                {
                    "group": "www-data/prod/web",
                    "kind": "count",
                    "safe": False,
                    "size": 6,
                    "instances": 6,
                    "down": 2,
                    "up": 3,
                    "needed": 4,
                    "duration": 100.0,
                    "wait": 70.0,
                    "reason": "3 of 6 would stay up for 100 s; 4 needed (in 70 s)",
                },
                {
                    "group": "batch",
                    "kind": None,
                    "safe": True,
                    "size": 1,
                    "instances": 1,
                    "down": 1,
                    "up": 0,
                    "needed": 0,
                    "duration": 0.0,
                    "wait": 0,
                    "reason": "no SLA policy",
                },
            ],
        },
        {
            "key": "undefined",
            "hosts": ["node9"],
            "unknown": ["node9"],
            "safe": True,
            "wait": 0,
            "broken": [],
            "groups": [],
        },
    ],
}


def render(doc: dict[str, Any]) -> list[str]:
    out = io.StringIO()
    make_console(out).print(_sla.probe_view(doc))
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_the_table_has_a_row_per_host_group_and_job_group() -> None:
    lines = render(DOC)
    assert lines[0].split() == ["HOSTS", "SAFE", "WAIT", "JOB", "GROUP", "UP/NEEDED", "DOWN", "WHY"]
    assert lines[1].split()[:6] == ["r1:", "node1,node2", "yes", "-", "www-data/prod/web", "4/4"]
    assert lines[2].split()[:7] == [
        "r2:",
        "node3,node4",
        "NO",
        "in",
        "1m10s",
        "www-data/prod/web",
        "3/4",
    ]
    assert "4 needed (in 70 s)" in lines[2]
    assert lines[3].split()[:3] == ["batch", "-", "1"]
    assert "no SLA policy" in lines[3]
    assert "unknown: node9" in lines[4]
    assert lines[-1] == "3 host groups: 1 would break an SLA"


def test_never_without_new_instances() -> None:
    doc = {**DOC, "host_groups": [{**DOC["host_groups"][1], "wait": None}]}
    assert "never (needs new instances)" in render(doc)[1]
    doc = {**DOC, "host_groups": [DOC["host_groups"][0]]}
    assert render(doc)[-1] == "1 host group: all safe to take down now"


@pytest.mark.parametrize(
    ("argv", "params"),
    [
        (
            ["master", "sla", "probe", "node1", "node2", "--grouping", "Rack"],
            {"hosts": ["node1", "node2"], "grouping": "Rack", "constraint": None},
        ),
        (
            ["master", "sla", "probe", "--constraint", 'Rack == "r1"', "--json"],
            {"constraint": 'Rack == "r1"', "grouping": None, "json_output": True},
        ),
    ],
)
def test_the_command_line(argv: list[str], params: dict[str, Any]) -> None:
    plain = parse(argv, {})
    assert plain is not None
    assert plain.command["run"] == "nodeagent.cli._sla:probe"
    assert {k: plain.params[k] for k in params} == params


@pytest.mark.parametrize(("hosts", "constraint"), [(None, None), ([], None), (["node1"], "true")])
def test_hosts_or_a_constraint_not_both_nor_neither(
    hosts: list[str] | None, constraint: str | None
) -> None:
    with pytest.raises(UsageError, match="give either HOST"):
        _sla.probe(
            hosts=hosts,
            constraint=constraint,
            grouping=None,
            json_output=False,
            host=None,
            token=None,
            socket_path="/nonexistent.sock",
        )


@pytest.mark.parametrize(
    ("group", "tail"),
    [("www-data/prod/web", ", owner alice, group www-data/prod/web)"), (None, ", owner alice)")],
)
def test_a_claim_line_names_its_group(group: str | None, tail: str) -> None:
    from nodeagent.cli._render import render_claim

    claim = {
        "id": "3",
        "slot": "slot1_3@n1",
        "state": "Claimed",
        "activity": "Busy",
        "resources": {"cpus": 2},
        "job": {"job_id": "3", "owner": "alice", "group": group, "pid": 1234},
    }
    out = io.StringIO()
    render_claim(make_console(out), claim, verb="created")
    assert out.getvalue().rstrip().endswith(tail)
