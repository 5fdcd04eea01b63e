"""Frozen keyword-only records without ``dataclasses`` (:mod:`nodeagent.cli._record`)
behave as ``@dataclass(frozen=True, kw_only=True)`` does for plain fields."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import pytest

from nodeagent.cli._record import record, replace


@record
class Point:
    kind: ClassVar[str] = "point"
    x: int
    y: int = 0
    label: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Twin:
    kind: ClassVar[str] = "point"
    x: int
    y: int = 0
    label: str | None = None


@pytest.mark.parametrize(
    "given",
    [{"x": 1}, {"x": 1, "y": 2}, {"x": 1, "label": "a"}, {"y": 2, "x": 1, "label": None}],
)
def test_fields_and_defaults_as_a_dataclass_has_them(given: dict[str, Any]) -> None:
    point, twin = Point(**given), Twin(**given)
    fields = ("x", "y", "label")
    assert [getattr(point, f) for f in fields] == [getattr(twin, f) for f in fields]
    assert repr(point) == repr(twin).replace("Twin", "Point")
    assert Point.kind == "point"


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({}, "missing keyword argument 'x'"),
        ({"x": 1, "z": 2}, "unexpected keyword argument 'z'"),
        ({"x": 1, "kind": "other"}, "unexpected keyword argument 'kind'"),
    ],
)
def test_a_missing_or_unknown_field_is_a_type_error(given: dict[str, Any], error: str) -> None:
    with pytest.raises(TypeError, match=error):
        Point(**given)


def test_a_record_is_frozen_compared_by_value_and_hashable() -> None:
    point = Point(x=1, y=2)
    with pytest.raises(AttributeError, match="frozen"):
        point.x = 3  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        del point.y
    assert point == Point(x=1, y=2)
    assert point != Point(x=1, y=3)
    twin: object = Twin(x=1, y=2)
    assert point != twin
    assert len({point, Point(x=1, y=2), Point(x=2)}) == 2


def test_replace_changes_the_fields_named() -> None:
    point = Point(x=1, y=2, label="a")
    assert replace(point, y=5) == Point(x=1, y=5, label="a")
    assert point == Point(x=1, y=2, label="a")
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        replace(point, z=1)
